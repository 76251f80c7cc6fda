"""Soft sorting networks (bitonic and odd-even), with matrix-free transposed sweeps.

Every layer mixes each wire with its partner: ``x <- (1 - m) x + m x[partner]`` with
``m`` from a soft comparison. The soft permutation ``P = M_L ... M_1`` is never
built for ranks and top-k rows: ``P^T c`` runs the transposed 2x2 mixes backwards, so
time and memory are O(n log^2 n) instead of softjax's O(n^2 log^2 n).

References:
  Petersen et al., Differentiable sorting networks for scalable sorting and ranking
  supervision <https://arxiv.org/abs/2105.04019>, 2021.
  Petersen et al., Monotonic differentiable sorting networks
  <https://arxiv.org/abs/2203.09630>, 2022.
"""

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkit.soft._elementwise import sigmoidal

KINDS = ("bitonic", "odd_even")


@functools.lru_cache(maxsize=64)
def schedule(n: int, kind: str = "bitonic"):
    """Partner and role tables ``(L, n)`` for a network on ``n`` (a power of 2) wires.

    ``partner[l, i]``: wire compared with ``i`` (``i`` itself when idle);
    ``low[l, i]``: whether wire ``i`` receives the minimum.
    """
    partners, lows = [], []
    phases = n.bit_length() - 1
    idx = np.arange(n)
    if kind == "bitonic":
        for phase in range(phases):
            for sub in range(phase + 1):
                d = 1 << (phase - sub)
                partner = idx ^ d
                asc = (idx & (1 << (phase + 1))) == 0
                low = np.where(asc, idx < partner, idx >= partner)
                partners.append(partner)
                lows.append(low)
    else:  # Batcher odd-even merge sort
        p = 1
        while p < n:
            k = p
            while k >= 1:
                partner = idx.copy()
                low = np.zeros(n, bool)
                for j in range(k % p, n - k, 2 * k):
                    for i in range(min(k, n - j - k)):
                        a, b = i + j, i + j + k
                        if a // (2 * p) == b // (2 * p):
                            partner[a], partner[b] = b, a
                            low[a] = True
                partners.append(partner)
                lows.append(low)
                k //= 2
            p *= 2
    if not partners:
        return np.zeros((0, n), np.int32), np.zeros((0, n), bool)
    return np.stack(partners).astype(np.int32), np.stack(lows)


def _pad(x, standardized):
    n = x.shape[-1]
    npad = 1 << (n - 1).bit_length() if n > 1 else 2
    if npad > n:
        val = jnp.ones_like(x[..., :1]) if standardized else jnp.max(x, -1, keepdims=True) + 1.0
        x = jnp.concatenate([x, jnp.broadcast_to(val, (*x.shape[:-1], npad - n))], axis=-1)
    return x, npad


def forward(x, softness, mode, kind, standardized):
    """Sorted values (ascending, padded length) and mixing weights ``(L, ..., npad)``."""
    x, npad = _pad(x, standardized)
    partner, low = schedule(npad, kind)
    partner, low = jnp.asarray(partner), jnp.asarray(low)

    # wires first: every gather moves whole contiguous batch rows (much faster on CPU
    # than per-element gathers along the last axis, forward and backward)
    xt = jnp.moveaxis(x, -1, 0)
    col = (npad,) + (1,) * (xt.ndim - 1)

    def layer(xt, pl):
        p, lo = pl
        xp = jnp.take(xt, p, axis=0)
        sig = sigmoidal(xt - xp, softness, mode)
        idle = (p == jnp.arange(npad, dtype=p.dtype)).reshape(col)
        m = jnp.where(idle, jnp.zeros_like(sig), jnp.where(lo.reshape(col), sig, 1.0 - sig))
        return (1.0 - m) * xt + m * xp, m

    if partner.shape[0] == 0:
        return x, jnp.zeros((0, *x.shape), x.dtype), partner
    xs, ms = lax.scan(layer, xt, (partner, low))
    return jnp.moveaxis(xs, 0, -1), jnp.moveaxis(ms, 1, -1), partner


def sort_values(x, softness, mode, kind, standardized):
    """Sorted values only (ascending, padded length): :func:`forward`'s first output.

    The same layers as :func:`forward`, unrolled (the partner tables are constants):
    without a scan XLA fuses each layer and keeps no loop state, about twice as fast
    fwd+bwd on CPU; the mixing weights are not kept (values only).
    """
    x, npad = _pad(x, standardized)
    partner, low = schedule(npad, kind)
    xt = jnp.moveaxis(x, -1, 0)  # wires first, as in forward
    col = (npad,) + (1,) * (xt.ndim - 1)
    wires = np.arange(npad)
    for p, lo in zip(partner, low, strict=True):
        xp = jnp.take(xt, jnp.asarray(p), axis=0)
        sig = sigmoidal(xt - xp, softness, mode)
        m = jnp.where(jnp.asarray(lo).reshape(col), sig, 1.0 - sig)
        if np.any(p == wires):  # idle wires (odd_even) keep their value
            m = jnp.where(jnp.asarray(p == wires).reshape(col), jnp.zeros_like(sig), m)
        xt = (1.0 - m) * xt + m * xp
    return jnp.moveaxis(xt, 0, -1)


def apply(v, ms, partner):
    """``P v`` along the last axis (forward sweep)."""

    def layer(v, mp):
        m, p = mp
        return (1.0 - m) * v + m * jnp.take(v, p, axis=0), None

    vt = jnp.moveaxis(v, -1, 0)  # wires first, as in forward
    return jnp.moveaxis(lax.scan(layer, vt, (jnp.moveaxis(ms, -1, 1), partner))[0], 0, -1)


def apply_t(c, ms, partner):
    """``P^T c`` along the last axis (transposed sweep, layers in reverse)."""

    def layer(c, mp):
        m, p = mp
        return (1.0 - m) * c + jnp.take(m * c, p, axis=0), None

    ct = jnp.moveaxis(c, -1, 0)  # wires first, as in forward
    out = lax.scan(layer, ct, (jnp.moveaxis(ms, -1, 1), partner), reverse=True)[0]
    return jnp.moveaxis(out, 0, -1)


def dense_p(ms, partner, npad, dtype):
    """Dense ``P`` (rows: sorted positions), for argsort outputs only."""
    eye = jnp.broadcast_to(jnp.eye(npad, dtype=dtype), (*ms.shape[1:-1], npad, npad))

    def layer(P, mp):
        m, p = mp
        return (1.0 - m[..., None]) * P + m[..., None] * jnp.take(P, p, axis=-2), None

    return lax.scan(layer, eye, (ms, partner))[0]
