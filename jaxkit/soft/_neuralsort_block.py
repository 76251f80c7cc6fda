"""One-block smooth NeuralSort rank and sort with softjax's soft ``|.|`` (``n <= CHUNK``).

Both hold the whole ``(..., n, n)`` block of soft permutation rows ``P_i = softmax_j(s_ij)``,
``s_ij = -(c_i x_j + A_j) / t``, ``c_i = n + 1 - 2i``, ``A_j = sum_k softabs(x_j - x_k)``,
and differentiate through a ``custom_jvp`` written as mat-vecs with two stored blocks only:
``e = exp(s - max)`` (the unnormalised rows) and ``M = softabs'(D)``. A tangent of the
scores has the form ``ds_ij = c_i a_j + b_j`` (:func:`_score_tangent`), so ``dP`` never
forms and the fwd+bwd makes no elementwise pass over an ``n x n`` tangent. Every product
with ``e`` in the reverse pass is laid out ``(k, i) @ (i, j)`` or ``(i, j) @ (j, k)``
(XLA:CPU runs the transposed read of ``e`` about 3x slower at n = 100). Forward, reverse
and higher derivatives all go through the rules; the ``softness`` tangent too, through
``d softabs / dt = (softabs - d softabs') / t``.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero


def ns_coef(n, dtype, descending, idx=None):
    """NeuralSort row coefficients ``c_i = n + 1 - 2 i`` (rows ``idx``, 1-based, if given)."""
    i = jnp.arange(1, n + 1) if idx is None else idx
    if descending and idx is None:
        i = i[::-1]
    return (n + 1 - 2 * i).astype(dtype)


def _block(xs, t, descending):
    """Coefficients, the soft-``|.|`` pieces ``d``, ``tanh``, ``A``, rows ``e`` and ``1/Z``."""
    n = xs.shape[-1]
    coef = jnp.broadcast_to(ns_coef(n, xs.dtype, descending), xs.shape)
    d = xs[..., :, None] - xs[..., None, :]
    th = jnp.tanh(d * (0.5 / t))  # smooth soft |d| = d (2 sigmoid(d / t) - 1) = d tanh(d / 2t)
    A = jnp.sum(d * th, axis=-1)
    it = 1.0 / t
    sc = -(coef[..., :, None] * (xs * it)[..., None, :] + (A * it)[..., None, :])
    L = sc - lax.stop_gradient(jnp.max(sc, axis=-1, keepdims=True))  # log e
    e = jnp.exp(L)  # rows i, elements j
    iz = 1.0 / jnp.sum(e, axis=-1)
    return coef, d, th, A, L, e, iz


def _soft_abs_grads(t, d, th, A):
    """``M = softabs'(D)`` and ``dA / dt = (A - sum_k d softabs'(d)) / t``."""
    it = 1.0 / t
    M = th + (d * (0.5 * it)) * (1 - th * th)  # odd in d
    return M, (A - jnp.sum(d * M, axis=-1)) * it


def _score_tangent(xs, t, dxs, dt, d, th, A):
    """``(a, b)`` with ``ds_ij = c_i a_j + b_j`` for the tangents ``dxs``, ``dt``.

    Symbolic zeros are allowed; ``dt=None`` takes the ``x`` part alone. ``None`` when both
    tangents are zero.
    """
    no_t = dt is None or isinstance(dt, SymbolicZero)
    if isinstance(dxs, SymbolicZero) and no_t:
        return None
    it = 1.0 / t
    M, dA_t = _soft_abs_grads(t, d, th, A)
    a = jnp.zeros_like(xs)
    b = jnp.zeros_like(xs)
    if not isinstance(dxs, SymbolicZero):
        dA = jnp.sum(M, axis=-1) * dxs - jnp.einsum("...jk,...k->...j", M, dxs)
        a = a - dxs * it
        b = b - dA * it
    if not no_t:
        a = a + xs * (it * it) * dt
        b = b + (A * it - dA_t) * it * dt
    return a, b


# ----------------------------------------------------------------------------- rank


def _rank_primal(xs, t, descending):
    n = xs.shape[-1]
    nums = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=xs.dtype), xs.shape)
    coef, d, th, A, _, e, iz = _block(xs, t, descending)
    # column sums of P = e / Z weighted by 1, i, c_i, i c_i (the last two for the JVP)
    v = jnp.stack([iz, nums * iz, coef * iz, (coef * nums) * iz], -2)
    cw = jnp.einsum("...ki,...ij->...kj", v, e)
    csc = jnp.maximum(cw[..., 0, :], 1e-10)
    return cw[..., 1, :] / csc, (nums, coef, d, th, A, e, iz, cw, csc)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def rank(xs, t, descending):
    """Smooth NeuralSort ranks ``r_j = sum_i i P_ij / sum_i P_ij`` in one block.

    The JVP: ``P a``, ``P b`` are one product with ``e`` and the column sums of
    ``P_ij (c_i a_j + b_j - c_i (P a)_i - (P b)_i)`` another; the rank is read from column
    sums, never the full product (about 2x less CPU fwd+bwd than autodiff through the
    chunked rows at n = 100).
    """
    return _rank_primal(xs, t, descending)[0]


def _rank_jvp(descending, primals, tangents):
    xs, t = primals
    dxs, dt = tangents
    r, (nums, coef, d, th, A, e, iz, cw, csc) = _rank_primal(xs, t, descending)
    ab = _score_tangent(xs, t, dxs, dt, d, th, A)
    if ab is None:
        return r, jnp.zeros_like(r)
    a, b = ab
    pab = jnp.einsum("...ij,...kj->...ki", e, jnp.stack([a, b], -2)) * iz[..., None, :]
    w = coef * pab[..., 0, :] + pab[..., 1, :]  # sum_k P_ik ds_ik
    # weights stacked last here, on axis -2 above: so their transposes read e as (i, j)
    pw = jnp.einsum("...ij,...ik->...jk", e, jnp.stack([w * iz, (nums * w) * iz], -1))
    dcs = a * cw[..., 2, :] + b * cw[..., 0, :] - pw[..., 0]
    dws = a * cw[..., 3, :] + b * cw[..., 1, :] - pw[..., 1]
    return r, (dws - r * jnp.where(cw[..., 0, :] > 1e-10, dcs, 0.0)) / csc


rank.defjvp(_rank_jvp, symbolic_zeros=True)


# ----------------------------------------------------------------------------- sort


def _sort_primal(xs, xl, t, descending):
    coef, d, th, A, L, e, iz = _block(xs, t, descending)
    return jnp.einsum("...ij,...j->...i", e, xl) * iz, (coef, d, th, A, L, e, iz)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def sort(xs, xl, t, descending):
    """Smooth NeuralSort values ``y_i = sum_j P_ij xl_j`` (rows of the squashed ``xs``).

    The JVP: ``dy_i = c_i (P (a xl))_i + (P (b xl))_i - y_i (c_i (P a)_i + (P b)_i)
    + (P dxl)_i``: one product of ``e`` with the stacked vectors, whose transpose (the
    reverse mode) is one product of the stacked cotangents with ``e``. The ``softness``
    tangent of the scores is taken as ``-(log e_ij + dA_j / dt) dt / t`` (equal up to a
    per-row constant, which ``P`` ignores): it avoids the cancellation of the ``c_i x_j / t^2``
    terms, which are large against their spread over a row's support at small softness.
    """
    return _sort_primal(xs, xl, t, descending)[0]


def _sort_jvp(descending, primals, tangents):
    xs, xl, t = primals
    dxs, dxl, dt = tangents
    y, (coef, d, th, A, L, e, iz) = _sort_primal(xs, xl, t, descending)
    ab = _score_tangent(xs, t, dxs, None, d, th, A)
    with_t = not isinstance(dt, SymbolicZero)
    vecs = [] if ab is None else [ab[0] * xl, ab[1] * xl, ab[0], ab[1]]
    if with_t:  # every stacked vector is a tangent (the stack must stay linear)
        tv = dt / t
        dA_t = _soft_abs_grads(t, d, th, A)[1]
        vecs += [(dA_t * xl) * tv, dA_t * tv]
    if not isinstance(dxl, SymbolicZero):
        vecs.append(dxl)
    if not vecs:
        return y, jnp.zeros_like(y)
    # vectors stacked on axis -2: the transpose reads e as (k, i) @ (i, j)
    pv = jnp.einsum("...ij,...kj->...ki", e, jnp.stack(vecs, -2)) * iz[..., None, :]
    dy = jnp.zeros_like(y)
    if ab is not None:
        dy = coef * pv[..., 0, :] + pv[..., 1, :] - y * (coef * pv[..., 2, :] + pv[..., 3, :])
    if with_t:
        j = 0 if ab is None else 4
        el = jnp.einsum("...ij,...kj->...ki", e * L, jnp.stack([xl, jnp.ones_like(xl)], -2))
        cov_l = (el[..., 0, :] - y * el[..., 1, :]) * iz  # primal: sum_j P_ij log e_ij (xl_j - y_i)
        dy = dy - cov_l * tv - (pv[..., j, :] - y * pv[..., j + 1, :])
    if not isinstance(dxl, SymbolicZero):
        dy = dy + pv[..., -1, :]
    return y, dy


sort.defjvp(_sort_jvp, symbolic_zeros=True)
