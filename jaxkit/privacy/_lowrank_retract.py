"""Fixed-rank (LoRA) points: rank-``r`` retraction, balancing and initialisation.

The part of :mod:`jaxkit.privacy.lowrank` that produces new factors: the retraction of
``Z + eta xi`` (balanced and Procrustes-aligned), the balanced representative of ``Z``
and the two initialisations. The tangent geometry is in ``_lowrank_tangent``; the public
names are re-exported by ``lowrank`` (see its docstring).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, Real

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype as _acc
from jaxkit.privacy._lowrank_tangent import (
    LoraFactors,
    _check_unbatched,
    check_tangent,
    gram_cache,
)


def _polar(c: Array) -> Array:
    uu, _, vt = jnp.linalg.svd(c)
    return uu @ vt


def retract(
    f: LoraFactors,
    d: LoraFactors,
    *,
    eta: Real[ArrayLike, ""],
    align: bool = True,
) -> LoraFactors:
    """Rank-``r`` retraction of ``Z + eta (dA b^T + a dB^T)``, balanced and aligned.

    Thin QR of ``[a, dA]`` and ``[b, dB]``, SVD of the ``2r x 2r`` core
    ``R_u [[I, eta I], [eta I, 0]] R_v^T`` (no ``eta^2`` term), keep the top ``r``:
    ``a+ = Q_u U_c sqrt(S)``, ``b+ = Q_v V_c sqrt(S)`` (so ``a+^T a+ = b+^T b+``).
    With ``align``, rotate by the polar factor of ``a+^T a + b+^T b`` (orthogonal
    Procrustes towards the previous factors). The result is the truncated SVD of
    the dense ``Z + eta xi``.

    Args:
      f: Current factors.
      d: Direction in factor form (a tangent vector representative).
      eta: Step size (traced).
      align: Procrustes-align the result to ``f``.

    Returns:
      New factors in the dtype of ``f.a``.

    Raises:
      TypeError: If ``f`` is not one pair of floating factors (a stack: use ``jax.vmap``) or
        ``d`` does not have its shapes.
    """
    _validate.real(eta, name="eta")
    _validate.finite_scalar(eta=eta)  # NaN / inf: the retraction is all NaN
    align = _validate.flag(align, name="align")
    eta = _validate.guard_finite(eta, eta, name="eta")
    return _retract(f, d, eta=eta, align=align)


@functools.partial(jax.jit, static_argnames=("align",))
def _retract(f, d, *, eta, align):
    """Jitted core of :func:`retract` (module level, like jax.numpy)."""
    f = _check_unbatched(f)
    d = check_tangent(f, d, name="d")
    acc = _acc(f.a.dtype)
    a, b, da, db = (x.astype(acc) for x in (*f, *d))
    qu, ru = jnp.linalg.qr(jnp.concatenate([a, da], axis=1))
    qv, rv = jnp.linalg.qr(jnp.concatenate([b, db], axis=1))
    return _retract_core(a, b, (qu, ru), (qv, rv), eta, align, f.a.dtype)


def _retract_core(a, b, qr_u, qr_v, eta, align, dtype, frame=False):
    """:func:`retract` from the QRs ``[a, dA] = Q_u R_u``, ``[b, dB] = Q_v R_v``.

    ``frame``: also return ``(u, v, s, q)``, the result being ``(u sqrt(S) q, v sqrt(S) q)``.
    """
    (qu, ru), (qv, rv) = qr_u, qr_v
    acc = ru.dtype
    eta = jnp.asarray(eta).astype(acc)
    r = a.shape[-1]
    eye = jnp.eye(r, dtype=acc)
    k = jnp.block([[eye, eta * eye], [eta * eye, jnp.zeros_like(eye)]])
    uc, s, vct = jnp.linalg.svd(ru @ k @ rv.T)
    rs = jnp.sqrt(jnp.maximum(s[:r], 0.0))
    ap = qu @ (uc[:, :r] * rs[None, :])
    bp = qv @ (vct[:r].T * rs[None, :])
    q = _polar(ap.T @ a + bp.T @ b) if align else eye
    ap, bp = (ap @ q, bp @ q) if align else (ap, bp)
    out = LoraFactors(ap.astype(dtype), bp.astype(dtype))
    return (out, (qu @ uc[:, :r], qv @ vct[:r].T, s[:r], q)) if frame else out


@functools.partial(jax.jit, static_argnames=("align", "rcond"))
def balance(f: LoraFactors, *, align: bool = True, rcond: float = 1e-6) -> LoraFactors:
    """Balanced representative ``(u sqrt(S), v sqrt(S))`` of ``Z``, Procrustes-aligned to ``f``."""
    _validate.flags(align=align)  # static: checked at trace time
    cache = gram_cache(f, rcond=rcond)
    return _balance_from_cache(f, cache, align=align)[0]


def _balance_from_cache(f, cache, *, align=True, q=None):
    """Balanced ``(a G, b G^{-T}) = (u sqrt(S) Q, v sqrt(S) Q)``, ``G``, ``G^{-T}``, ``Q``.

    ``q``: the alignment ``Q`` when already known (no polar decomposition then).
    """
    acc = cache.u.dtype
    rs = jnp.sqrt(jnp.maximum(cache.s, 0.0))[None, :]
    g = cache.ta * rs
    git = cache.tb * rs
    if q is None and align:
        ab, bb = cache.u * rs, cache.v * rs
        q = _polar(ab.T @ f.a.astype(acc) + bb.T @ f.b.astype(acc))
    if q is None:
        q = jnp.eye(g.shape[-1], dtype=acc)
    else:
        g, git = g @ q, git @ q
    a, b = f.a.astype(acc), f.b.astype(acc)
    return LoraFactors((a @ g).astype(f.a.dtype), (b @ git).astype(f.b.dtype)), g, git, q


class SpectralInit(NamedTuple):
    """Result of :func:`spectral_init`: residual base weight and factors."""

    residual: Array
    factors: LoraFactors


def spectral_init(
    w: Float[ArrayLike, "m n"],
    *,
    rank: int,
    key: PRNGKeyArray,
    scale: Real[ArrayLike, ""] = 1.0,
    oversample: int = 8,
    power_iters: int = 2,
) -> SpectralInit:
    """Spectral-residual (PiSSA-like) init: top-``r`` randomized SVD of ``w``.

    ``w ~ U S V^T`` (top ``rank``), ``a = U sqrt(S / scale)``, ``b = V sqrt(S / scale)``,
    residual ``w - U S V^T`` so that ``residual + scale * a b^T = w``.

    Args:
      w: Base weight in the ``Z`` orientation (``[m, n]``, out x in).
      rank: LoRA rank ``r <= min(m, n)``.
      key: PRNG key for the random range finder.
      scale: LoRA scaling ``s = alpha / r``.
      oversample: Extra columns of the range finder.
      power_iters: Power iterations of the range finder.

    Raises:
      TypeError: If ``w`` is not a floating ``[m, n]`` array.
      ValueError: If ``rank`` exceeds ``min(m, n)`` or is < 1.
    """
    _validate.is_key(key)
    _validate.floating(w, name="w")
    w = jnp.asarray(w)
    _validate.ndim(w, 2, name="w")
    m, n = w.shape
    if not 1 <= rank <= min(m, n):
        raise ValueError(f"`rank` must lie in [1, min(m, n)={min(m, n)}], got rank={rank}.")
    _validate.python_int(oversample, name="oversample", minimum=0)
    _validate.python_int(power_iters, name="power_iters", minimum=0)
    scale = _validate.guard_finite(scale, scale, name="scale")
    return _spectral_init(w, key, scale, rank=rank, oversample=oversample, power_iters=power_iters)


# jitted like jax.numpy (sizes static, ``scale`` traced): an eager call compiles one
# program instead of one per op (the range finder's QRs, the SVD and the glue)
@functools.partial(jax.jit, static_argnames=("rank", "oversample", "power_iters"))
def _spectral_init(w, key, scale, *, rank, oversample, power_iters):
    m, n = w.shape
    acc = _acc(w.dtype)
    wa = w.astype(acc)
    k = min(rank + oversample, min(m, n))
    omega = jax.random.normal(key, (n, k), acc)
    y = wa @ omega
    q, _ = jnp.linalg.qr(y)
    for _ in range(power_iters):
        q, _ = jnp.linalg.qr(wa.T @ q)
        q, _ = jnp.linalg.qr(wa @ q)
    uh, s, vt = jnp.linalg.svd(q.T @ wa, full_matrices=False)
    u = q @ uh[:, :rank]
    s = s[:rank]
    v = vt[:rank].T
    low = (u * s[None, :]) @ v.T
    scale = jnp.asarray(scale).astype(acc)
    rs = jnp.sqrt(s / scale)[None, :]
    f = LoraFactors((u * rs).astype(w.dtype), (v * rs).astype(w.dtype))
    return SpectralInit((wa - low).astype(w.dtype), f)


def balanced_random_init(
    *,
    key: PRNGKeyArray,
    m: int,
    n: int,
    rank: int,
    scale: Real[ArrayLike, ""] = 0.02,
    dtype=jnp.float32,
) -> LoraFactors:
    """Balanced random init: ``a = scale Q_out``, ``b = scale Q_in`` (random orthonormal).

    Raises:
      ValueError: If ``rank`` exceeds ``min(m, n)`` or is < 1.
    """
    _validate.is_key(key)
    if not 1 <= rank <= min(m, n):
        raise ValueError(f"`rank` must lie in [1, min(m, n)={min(m, n)}], got rank={rank}.")
    scale = _validate.guard_finite(scale, scale, name="scale")
    return _balanced_random_init(key, scale, m=m, n=n, rank=rank, dtype=dtype)


@functools.partial(jax.jit, static_argnames=("m", "n", "rank", "dtype"))  # as spectral_init
def _balanced_random_init(key, scale, *, m, n, rank, dtype):
    ka, kb = jax.random.split(key)
    qa, _ = jnp.linalg.qr(jax.random.normal(ka, (m, rank), jnp.float32))
    qb, _ = jnp.linalg.qr(jax.random.normal(kb, (n, rank), jnp.float32))
    s = jnp.asarray(scale, jnp.float32)
    return LoraFactors((s * qa).astype(dtype), (s * qb).astype(dtype))
