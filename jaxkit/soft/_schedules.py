"""Temperature (softness) schedules for annealing Gumbel-softmax / Gumbel-Sinkhorn training.

A schedule is a pure, jittable callable ``step -> softness`` (like an optax schedule);
its arithmetic is one module-level ``jax.jit`` function with ``start``, ``end``, ``steps``
and ``step`` traced, so eager calls hit the compile cache.

References:
  Jang, Gu & Poole <https://arxiv.org/abs/1611.01144>, 2017 (annealed temperature);
  Mena et al., Gumbel-Sinkhorn <https://arxiv.org/abs/1802.08665>, 2018.
"""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike

KINDS = ("exponential", "linear")


@functools.partial(jax.jit, static_argnames=("kind",))
def _schedule(step, start, end, steps, *, kind):
    dt = jnp.result_type(float)
    s0 = V.guard_positive(V.real_array(start, name="start").astype(dt), start, name="start")
    s1 = V.guard_positive(V.real_array(end, name="end").astype(dt), end, name="end")
    u = jnp.asarray(step).astype(dt)
    u = V.error_if(u, jnp.any(jnp.isnan(u)), "`step` must not be NaN.")  # was a NaN softness
    t = jnp.clip(u / jnp.asarray(steps, dt), 0.0, 1.0)
    if kind == "linear":
        return s0 + t * (s1 - s0)
    return s0 * jnp.exp(t * (jnp.log(s1) - jnp.log(s0)))


def _make(start, end, steps, kind):
    for name, v in (("start", start), ("end", end)):
        V.real(v, name=name)
        V.finite_scalar(**{name: v})
        V.positive(**{name: v})
    steps = V.python_int(steps, name="steps", minimum=1)
    run = functools.partial(_schedule, start=start, end=end, steps=steps, kind=kind)

    def schedule(step: ArrayLike) -> Array:
        v = V._concrete(step)  # a concrete NaN step: ValueError now (traced: in _schedule)
        if v is not None and np.any(np.isnan(v)):
            raise ValueError("`step` must not be NaN.")
        return run(step)

    return schedule


def exponential_schedule(
    start: RealScalarLike, end: RealScalarLike, steps: int
) -> Callable[[ArrayLike], Array]:
    """Geometric temperature annealing: ``step -> start * (end / start) ** (step / steps)``.

    The step is clipped to ``[0, steps]`` (constant ``end`` afterwards; a NaN step raises,
    at run time under ``jit``). The returned
    callable is pure and jittable (``step`` may be traced), like an optax schedule, e.g.
    ``softness = sched(step)`` inside a training step with Gumbel-Sinkhorn or Gumbel-softmax.

    Args:
      start: softness at step 0 (finite, > 0).
      end: softness at ``steps`` and later (finite, > 0).
      steps: Python int >= 1.

    Returns:
      ``schedule(step) -> softness`` (a float scalar of the default float dtype).

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144> (annealed temperature);
      Mena et al. 2018 <https://arxiv.org/abs/1802.08665>.
    """
    return _make(start, end, steps, "exponential")


def linear_schedule(
    start: RealScalarLike, end: RealScalarLike, steps: int
) -> Callable[[ArrayLike], Array]:
    """Linear temperature annealing from ``start`` to ``end`` over ``steps`` (then ``end``).

    Jittable like :func:`exponential_schedule`.

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>.
    """
    return _make(start, end, steps, "linear")


def temperature_schedule(
    start: RealScalarLike, end: RealScalarLike, steps: int, *, kind: str = "exponential"
) -> Callable[[ArrayLike], Array]:
    """Softness schedule ``step -> softness`` (``kind``: ``"exponential"`` or ``"linear"``).

    See :func:`exponential_schedule` and :func:`linear_schedule`.

    References:
      Mena et al. 2018 <https://arxiv.org/abs/1802.08665>.
    """
    V.one_of(KINDS, kind=kind)
    return _make(start, end, steps, kind)
