"""Sorting-network backend of the axiswise operators (last axis).

``network="bitonic"`` or ``"odd_even"`` (= softjax ``sorting_network``). Values come
from the forward sweep; ranks and top-k rows are matrix-free (transposed sweeps,
O(n log^2 n) memory); ``argsort`` forms the dense soft permutation.

References:
  Petersen et al., Differentiable sorting networks <https://arxiv.org/abs/2105.04019>, 2021.
"""

import jax
import jax.numpy as jnp

from jaxkit.soft import _network as NW


def argsort(xs, descending, softness, o):
    n = xs.shape[-1]
    _, ms, partner = NW.forward(xs, softness, o.mode, o.network, o.standardize)
    npad = ms.shape[-1] if ms.ndim else n
    P = NW.dense_p(ms, partner, npad, xs.dtype)[..., :n, :n]
    P = P / jnp.clip(jnp.sum(P, -1, keepdims=True), min=1e-10)
    return jnp.flip(P, -2) if descending else P


def argmax(xs, softness, o):
    return argsort(xs, True, softness, o)[..., 0, :]


def argquantile(xs, k, kp1, softness, o):
    P = argsort(xs, False, softness, o)
    return jnp.stack([P[..., k, :], P[..., kp1, :]], -2)


def _ones_padded(xs, npad):
    n = xs.shape[-1]
    padz = jnp.repeat(jnp.zeros_like(xs[..., :1]), npad - n, axis=-1)
    return jnp.concatenate([jnp.ones_like(xs), padz], -1), padz


def argtop_k(xs, k, softness, o):
    """The ``k`` descending rows, matrix-free (``k`` transposed sweeps)."""
    n = xs.shape[-1]
    _, ms, partner = NW.forward(xs, softness, o.mode, o.network, o.standardize)
    npad = ms.shape[-1]
    ones, _ = _ones_padded(xs, npad)
    rows = NW.apply(ones, ms, partner)[..., :n]
    # descending row i = ascending row n-1-i; P^T e_r gives row r of P
    E = jnp.eye(npad, dtype=xs.dtype)[jnp.arange(n - 1, n - 1 - k, -1)]  # (k, npad)
    E = jnp.broadcast_to(E, (*xs.shape[:-1], k, npad))
    R = jax.vmap(lambda e: NW.apply_t(e, ms, partner), in_axes=-2, out_axes=-2)(E)
    rsel = rows[..., jnp.arange(n - 1, n - 1 - k, -1)]
    return R[..., :n] / jnp.clip(rsel[..., None], min=1e-10)


def sort(xs, descending, softness, o):
    """Soft-sorted values of the (squashed) ``xs``."""
    n = xs.shape[-1]
    vals = NW.sort_values(xs, softness, o.mode, o.network, o.standardize)
    out = vals[..., :n]
    return jnp.flip(out, -1) if descending else out


def rank(xs, descending, softness, o):
    """rank_j = (P~^T nums)_j / (P~^T 1)_j with P~ = diag(1/rowsum) P, matrix-free."""
    n = xs.shape[-1]
    nums = jnp.arange(1, n + 1, dtype=xs.dtype)
    _, ms, partner = NW.forward(xs, softness, o.mode, o.network, o.standardize)
    ones, padz = _ones_padded(xs, ms.shape[-1])
    rows = jnp.clip(NW.apply(ones, ms, partner)[..., :n], min=1e-10)  # row sums of P[:n, :n]
    nm = nums[::-1] if descending else nums
    c1 = jnp.concatenate([jnp.broadcast_to(nm, xs.shape) / rows, padz], -1)
    c0 = jnp.concatenate([1.0 / rows, padz], -1)
    num = NW.apply_t(c1, ms, partner)[..., :n]
    den = NW.apply_t(c0, ms, partner)[..., :n]
    return num / jnp.clip(den, min=1e-10)
