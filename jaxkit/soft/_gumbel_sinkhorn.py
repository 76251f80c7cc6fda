"""Gumbel-Sinkhorn: relaxed random permutation matrices, and the exact hard assignment.

The soft sample runs ``n_iters`` log-domain Sinkhorn rounds (a module-level loop body);
the hard sample solves the linear assignment with ``scipy.optimize.linear_sum_assignment``
on the host through ``jax.pure_callback`` (so it works under the module-level ``jit``,
the user's ``jit`` and ``vmap``).

References:
  Mena, Belanger, Linderman & Snoek, Learning latent permutations with Gumbel-Sinkhorn
  networks <https://arxiv.org/abs/1802.08665>, 2018; Sinkhorn, A relationship between
  arbitrary positive matrices and doubly stochastic matrices, 1964.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.soft import _random_common as RC
from jaxkit.soft._common import as_float, check_softness

GS_MODES = ("hard", "_hard", "smooth")
GS_NOISES = ("gumbel", "none")


def _assignment_host(z: Any) -> np.ndarray:
    """Row -> column of the max-weight perfect matching of every ``(n, n)`` matrix of ``z``."""
    from scipy.optimize import linear_sum_assignment

    z = np.asarray(z, np.float64)
    n = z.shape[-1]
    flat = z.reshape(-1, n, n)
    out = np.empty(flat.shape[:2], np.int32)
    for b in range(flat.shape[0]):
        rows, cols = linear_sum_assignment(flat[b], maximize=True)
        out[b, rows] = cols
    return out.reshape(z.shape[:-1])


def _assignment(z: Array) -> Array:
    """Exact assignment on the host (``jax.pure_callback``); no gradient."""
    spec = jax.ShapeDtypeStruct(z.shape[:-1], jnp.int32)
    return jax.pure_callback(
        _assignment_host, spec, lax.stop_gradient(z), vmap_method="expand_dims"
    )


def _sinkhorn_round(_: Any, v: Array) -> Array:
    """One row then column normalisation of ``exp(v)`` in log space."""
    v = v - jax.nn.logsumexp(v, axis=-1, keepdims=True)
    return v - jax.nn.logsumexp(v, axis=-2, keepdims=True)


def gumbel_sinkhorn_core(key, la, softness, *, n_iters, noise, mode, rng_mode, return_log_probs):
    """Un-jitted core of :func:`gumbel_sinkhorn` (arguments already checked)."""
    dt = la.dtype
    la = RC.finite_floor(la, "log_alpha")
    z = la + jax.random.gumbel(key, la.shape, dt, mode=rng_mode) if noise == "gumbel" else la
    n = la.shape[-1]
    if n == 0:
        return jnp.zeros_like(la)
    if mode in ("hard", "_hard"):
        P = jax.nn.one_hot(_assignment(z), n, dtype=dt)
        return jnp.log(P) if return_log_probs else P
    cdt = accumulation_dtype(dt)
    zc = V.guard_positive(z.astype(cdt), softness, name="softness")
    v = lax.fori_loop(0, n_iters, _sinkhorn_round, zc / jnp.asarray(softness).astype(cdt))
    return (v if return_log_probs else jnp.exp(v)).astype(dt)


_gumbel_sinkhorn = jax.jit(
    gumbel_sinkhorn_core,
    static_argnames=("n_iters", "noise", "mode", "rng_mode", "return_log_probs"),
)


def gumbel_sinkhorn(
    key: KeyArray | ArrayLike,
    log_alpha: ArrayLike,
    *,
    softness: RealScalarLike,
    n_iters: int = 20,
    noise: str = "gumbel",
    mode: str = "smooth",
    rng_mode: str | None = None,
    return_log_probs: bool = False,
) -> Array:
    """Gumbel-Sinkhorn: a relaxed random permutation matrix (Mena et al. 2018).

    With ``G`` i.i.d. standard Gumbel noise of ``log_alpha``'s shape, ``mode="smooth"``
    returns ``S((log_alpha + G) / softness)``, where the Sinkhorn operator ``S`` runs
    ``n_iters`` rounds of row then column normalisation of ``exp`` in log space
    (``logsumexp``; no overflow at small ``softness``). The result is doubly stochastic:
    columns sum to 1 exactly, rows up to the Sinkhorn tolerance after ``n_iters``
    rounds (more rounds are needed as ``softness`` shrinks). As ``softness -> 0`` it tends
    to the permutation matrix maximising ``<P, log_alpha + G>`` (unique almost surely),
    which ``mode="hard"`` (and ``"_hard"``, the same: both use this function's own noise)
    returns exactly: a linear assignment solved by ``scipy.optimize.linear_sum_assignment``
    on the host through ``jax.pure_callback`` (works under ``jit`` and ``vmap``; no
    gradient: the output is a constant of ``log_alpha``; under ``vmap`` the whole batch goes
    to the host in one call; a sharded input is gathered, the output is replicated, and the
    host round-trip dominates the cost on accelerators). With ``log_alpha = 0`` the hard
    sample is a uniformly random permutation. ``-inf`` entries of ``log_alpha``
    (forbidden assignments) are floored at ``-1e30``; NaN raises.

    Args:
      key: PRNG key.
      log_alpha: scores ``(..., n, n)``; leading axes are a batch (independent noise).
      softness: temperature ``tau`` (finite, > 0; traced), keyword-only and required.
      n_iters: static number of Sinkhorn rounds (Python int >= 1).
      noise: ``"gumbel"`` or ``"none"`` (plain Sinkhorn of ``log_alpha / softness``).
      mode: ``"smooth"``, ``"hard"`` or ``"_hard"``.
      rng_mode: ``mode`` of ``jax.random.gumbel`` (``None``, ``"low"``, ``"high"``).
      return_log_probs: static bool; return ``log P``, taken directly from the log-domain
        iterates (finite at any softness in smooth mode; ``0``/``-inf`` in hard modes).

    Returns:
      Array of ``log_alpha``'s shape and floating dtype; row ``i`` spreads over the
      columns that position ``i`` is mapped to (hard: ``P[i, j] = 1`` iff ``i -> j``).

    References:
      Mena, Belanger, Linderman & Snoek, Learning latent permutations with
      Gumbel-Sinkhorn networks <https://arxiv.org/abs/1802.08665>, 2018; Sinkhorn, A
      relationship between arbitrary positive matrices and doubly stochastic matrices,
      1964.
    """
    V.is_key(key)
    V.one_of(GS_MODES, mode=mode)
    V.one_of(GS_NOISES, noise=noise)
    check_softness(softness)
    RC.check_rng_mode(rng_mode)
    n_iters = V.python_int(n_iters, name="n_iters", minimum=1)
    return_log_probs = V.flag(return_log_probs, name="return_log_probs")  # a static argument
    la = as_float(log_alpha, name="log_alpha")
    if la.ndim < 2 or la.shape[-1] != la.shape[-2]:
        raise TypeError(f"`log_alpha` must have shape (..., n, n), got {la.shape}.")
    if RC.is_concrete(la):
        RC.no_nan(la, "log_alpha")
    return _gumbel_sinkhorn(
        key,
        la,
        softness,
        n_iters=n_iters,
        noise=noise,
        mode=mode,
        rng_mode=rng_mode,
        return_log_probs=return_log_probs,
    )
