"""Regularised argmax over the unit simplex (softmax, sparsemax, 1.5-/4/3-entmax).

Mode ``c_k`` is alpha-entmax with ``1/(alpha - 1) = k + 1``; every projection has a
``custom_jvp`` whose tangent map is linear, so forward and reverse mode both work.

References:
  Martins & Astudillo, From softmax to sparsemax <https://arxiv.org/abs/1602.02068>, 2016.
  Peters, Niculae & Martins, Sparse sequence-to-sequence models
  <https://arxiv.org/abs/1905.05702>, 2019.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import jax
import jax.numpy as jnp

from jaxkit import _validate as V
from jaxkit.soft._common import scal
from jaxkit.soft._sorting import cumsum


def _take_last(a, idx):
    return jnp.take_along_axis(a, idx[..., None], axis=-1)


@jax.custom_jvp
def _sparsemax(v):
    n = v.shape[-1]
    u = -jnp.sort(-v, axis=-1)
    cs = cumsum(u)
    k = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=v.dtype), v.shape)
    cond = 1.0 / k + (u - cs / k) > 0
    idx = jnp.count_nonzero(cond, axis=-1, keepdims=True)
    c_at = jnp.take_along_axis(cs, idx - 1, axis=-1)
    return jax.nn.relu(1.0 / idx.astype(v.dtype) + (v - c_at / idx.astype(v.dtype)))


@_sparsemax.defjvp
def _sparsemax_jvp(primals, tangents):
    (v,), (dv,) = primals, tangents
    y = _sparsemax(v)
    m = (y > 0).astype(v.dtype)
    card = jnp.sum(m, axis=-1, keepdims=True)
    return y, m * dv - (jnp.sum(m * dv, axis=-1, keepdims=True) / card) * m


def _entmax_theta(v, power):
    n = v.shape[-1]
    u = -jnp.sort(-v, axis=-1)
    u0 = u[..., :1]
    us = u - u0
    S = cumsum(us)
    M2 = cumsum(us**2)
    k = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=v.dtype), v.shape)
    if power == 2:
        disc = S**2 - k * (M2 - 1.0)
        th = (S - jnp.sqrt(jnp.maximum(disc, 0.0))) / k
    else:
        dt = v.dtype
        M3 = cumsum(us**3)
        c = S / k
        mu2 = M2 - 2.0 * c * S + k * c**2
        mu3 = M3 - 3.0 * c * M2 + 3.0 * c**2 * S - k * c**3
        p = 3.0 * mu2 / k
        q = (1.0 - mu3) / k
        sp3 = jnp.sqrt(jnp.maximum(p / 3.0, 0.0))
        denom = 2.0 * jnp.maximum(p, jnp.finfo(dt).tiny) * sp3
        A = 3.0 * jnp.abs(q) / denom
        r_h = -jnp.sign(q) * 2.0 * sp3 * jnp.sinh(jnp.arcsinh(A) / 3.0)
        r_c = -jnp.sign(q) * jnp.abs(q) ** (1.0 / 3.0)
        th = jnp.where(p > jnp.finfo(dt).eps * jnp.maximum(jnp.abs(q), 1.0), r_h, r_c) + c
    idx = jnp.count_nonzero(us > th, axis=-1, keepdims=True)
    return jnp.take_along_axis(th, idx - 1, axis=-1) + u0


def _entmax_impl(v, power):
    theta = _entmax_theta(v, power)
    t = jnp.maximum(v - theta, 0.0)
    y = t**power
    return y / jnp.sum(y, axis=-1, keepdims=True), t


def _make_entmax(power):
    @jax.custom_jvp
    def f(v):
        return _entmax_impl(v, power)[0]

    @f.defjvp
    def f_jvp(primals, tangents):
        (v,), (dv,) = primals, tangents
        y, t = _entmax_impl(v, power)
        supp = (y > 0).astype(v.dtype)
        w = t ** (power - 1) * supp
        ws = jnp.sum(w, axis=-1, keepdims=True)
        ws = jnp.where(ws > 0, ws, 1.0)
        raw = power * t ** (power - 1) * (dv - jnp.sum(w * dv, axis=-1, keepdims=True) / ws) * supp
        st = jnp.sum(t**power, axis=-1, keepdims=True)
        st = jnp.where(st > 0, st, 1.0)
        return y, raw / st - y * jnp.sum(raw, axis=-1, keepdims=True) / st

    return f


_entmax15 = _make_entmax(2)
_entmax43 = _make_entmax(3)


def proj_simplex(s: jax.Array, softness, mode: str) -> jax.Array:
    """``argmax_{y in simplex} <s, y> - softness R(y)`` along the last axis.

    ``mode``: ``"smooth"`` (softmax), ``"c0"`` (sparsemax), ``"c1"`` (1.5-entmax) or
    ``"c2"`` (4/3-entmax); another value raises, naming ``mode``.
    """
    V.one_of(("smooth", "c0", "c1", "c2"), mode=mode)
    v = s / scal(softness, s.dtype)
    if mode == "smooth":
        return jax.nn.softmax(v, axis=-1)
    if mode == "c0":
        return _sparsemax(v)
    if mode == "c1":
        return _entmax15(v)
    return _entmax43(v)  # "c2"
