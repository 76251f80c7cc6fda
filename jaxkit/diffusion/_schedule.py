"""Forward masking schedules of a masked discrete diffusion model.

A schedule gives ``alpha(t)``, the probability that a token is still unmasked at
time ``t in [0, 1]`` (``alpha(0) = 1``), and the continuous-time ELBO weight
``w(t) = -alpha'(t) / (1 - alpha(t))``. Each position is masked independently
with probability ``1 - alpha(t)``.
"""

import dataclasses
import math

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate

SCHEDULES = ("linear", "cosine", "loglinear")


@dataclasses.dataclass(frozen=True)
class MaskingSchedule:
    """A forward masking schedule (frozen, hashable: a static argument under ``jit``).

    * ``"linear"``: ``alpha(t) = 1 - t``, ``w(t) = 1 / t``.
    * ``"cosine"``: ``alpha(t) = cos(pi t / 2)``,
      ``w(t) = (pi / 2) sin(pi t / 2) / (1 - cos(pi t / 2))``.
    * ``"loglinear"`` (MDLM's default): ``sigma(t) = -log(1 - (1 - eps) t)``,
      ``alpha(t) = exp(-sigma(t)) = 1 - (1 - eps) t``, ``w(t) = 1 / t``; a token is
      still unmasked with probability ``eps`` at ``t = 1``, so the bound misses the
      (here ignored, as in MDLM) prior term of those tokens.

    The continuous-time ELBO is the same for every schedule with ``alpha(1) = 0``
    (substitute ``a = alpha(t)``); schedules change only the estimator's variance.

    Attributes:
      kind: ``"linear"``, ``"cosine"`` or ``"loglinear"``.
      eps: ``"loglinear"`` only: ``1 - alpha(1)``'s complement, in (0, 1).

    References:
      Sahoo et al., Simple and Effective Masked Diffusion Language Models
      (MDLM), NeurIPS 2024; Shi et al., Simplified and Generalized Masked
      Diffusion for Discrete Data, NeurIPS 2024.
    """

    kind: str = "loglinear"
    eps: float = 1e-3

    def __post_init__(self):
        _validate.one_of(SCHEDULES, kind=self.kind)
        if isinstance(self.eps, bool) or not isinstance(self.eps, int | float):
            raise TypeError(f"`eps` must be a Python float, got {type(self.eps).__name__}.")
        if not 0.0 < float(self.eps) < 1.0:
            raise ValueError(f"`eps` must lie in (0, 1), got eps={self.eps}.")
        object.__setattr__(self, "eps", float(self.eps))

    def alpha(self, t: ArrayLike) -> Array:
        """Probability that a token is unmasked at time ``t``.

        Elementwise: ``t`` may have any shape (a scalar, one time per row, ...).

        Raises:
          TypeError: If ``t`` is not a real number or array (a string, a bool).
        """
        _validate.real(t, name="t")  # before jnp.asarray: a string names `t`
        t = jnp.asarray(t)
        if self.kind == "linear":
            return 1.0 - t
        if self.kind == "cosine":
            return jnp.cos(0.5 * math.pi * t)
        return 1.0 - (1.0 - self.eps) * t

    def weight(self, t: ArrayLike) -> Array:
        """The ELBO weight ``-alpha'(t) / (1 - alpha(t))`` (``+inf`` at ``t = 0``).

        Elementwise: ``t`` may have any shape.

        Raises:
          TypeError: If ``t`` is not a real number or array (a string, a bool).
        """
        _validate.real(t, name="t")
        t = jnp.asarray(t)
        if self.kind == "cosine":
            h = 0.5 * math.pi * t
            # 1 - cos(h) = 2 sin(h/2)^2, stable near 0
            return 0.5 * math.pi * jnp.sin(h) / (2.0 * jnp.sin(0.5 * h) ** 2)
        return 1.0 / t

    def unmask_probability(self, t: ArrayLike, s: ArrayLike) -> Array:
        """Probability that a token masked at ``t`` is unmasked at ``s < t``.

        Elementwise: ``t`` and ``s`` may have any shapes that broadcast together.

        Raises:
          TypeError: If ``t`` or ``s`` is not a real number or array (a string, a bool), or
            their shapes do not broadcast together.
        """
        _validate.real(t, name="t")
        _validate.real(s, name="s")
        _validate.broadcastable(t=t, s=s)
        a_t, a_s = self.alpha(t), self.alpha(s)
        return jnp.clip((a_s - a_t) / jnp.maximum(1.0 - a_t, 1e-30), 0.0, 1.0)


def as_schedule(schedule: "MaskingSchedule | str") -> MaskingSchedule:
    """Accept a :class:`MaskingSchedule` or one of its kind names.

    A public function's ``schedule`` argument goes through here, so that a bad value is
    reported under ``schedule``: ``TypeError`` for neither a schedule nor a string,
    ``ValueError`` for an unknown kind name.
    """
    if isinstance(schedule, str):
        _validate.one_of(SCHEDULES, schedule=schedule)
        return MaskingSchedule(kind=schedule)
    if not isinstance(schedule, MaskingSchedule):
        raise TypeError(
            "`schedule` must be a MaskingSchedule or one of "
            f"{', '.join(map(repr, SCHEDULES))}; got {type(schedule).__name__}."
        )
    return schedule
