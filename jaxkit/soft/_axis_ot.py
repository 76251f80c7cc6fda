"""Optimal-transport backend of the axiswise operators (last axis).

Soft indices are columns of the plan that moves the uniform mass on ``x`` onto a few
anchors on [0, 1] (entropic Sinkhorn for mode ``"smooth"``, the p-norm solver for
``c0``/``c1``/``c2``). softjax's ``ot_kwargs`` (``sinkhorn_tol``,
``sinkhorn_max_iter``, ``lbfgs_tol``, ``lbfgs_max_iter``) set the solver's tolerance
and iteration limit (the ``lbfgs_*`` pair applies to our p-norm Newton solver).

References:
  Cuturi, Teboul & Vert, Differentiable ranks and sorting using optimal transport
  <https://arxiv.org/abs/1905.11885>, 2019.
"""

import jax.numpy as jnp

from jaxkit.soft._transport import transport as sinkhorn
from jaxkit.soft._transport_pnorm import transport_pnorm


def plan(xs, anchors, mu, nu, softness, o):
    """``n * Gamma`` ``(..., n, m)`` with the solver options of ``o.ot``."""
    opts = dict(o.ot)
    pre = "sinkhorn_" if o.mode == "smooth" else "lbfgs_"
    kw = {}
    if pre + "tol" in opts:
        kw["tol"] = opts[pre + "tol"]
    if pre + "max_iter" in opts:
        kw["max_iter"] = opts[pre + "max_iter"]
    if o.mode == "smooth":
        return sinkhorn(xs, anchors, mu, nu, softness, **kw)
    return transport_pnorm(xs, anchors, mu, nu, softness, o.mode, **kw)


def _uniform(n, dtype):
    return jnp.ones((n,), dtype) / n


def _full_plan(xs, descending, softness, o):
    """Plan onto ``n`` evenly spaced anchors (ascending unless ``descending``)."""
    n = xs.shape[-1]
    anchors = jnp.linspace(0, n, n, dtype=xs.dtype) / n
    mu = _uniform(n, xs.dtype)
    return plan(xs, anchors[::-1] if descending else anchors, mu, mu, softness, o)


def argsort(xs, descending, softness, o):
    return jnp.swapaxes(_full_plan(xs, descending, softness, o), -1, -2)


def argmax(xs, softness, o):
    n = xs.shape[-1]
    anchors = jnp.array([0.0, 1.0], xs.dtype)
    nu = jnp.array([(n - 1) / n, 1 / n], xs.dtype)
    return plan(xs, anchors, _uniform(n, xs.dtype), nu, softness, o)[..., 1]


def argtop_k(xs, k, softness, o):
    n = xs.shape[-1]
    mu = _uniform(n, xs.dtype)
    if k == n:
        return argsort(xs, True, softness, o)
    anchors = (jnp.linspace(0, k, k + 1, dtype=xs.dtype) / k)[::-1]
    nu = jnp.concatenate([jnp.ones((k,), xs.dtype) / n, jnp.full((1,), (n - k) / n, xs.dtype)])
    return jnp.swapaxes(plan(xs, anchors, mu, nu, softness, o), -1, -2)[..., :k, :]


def argquantile(xs, k, kp1, two, softness, o):
    """Soft rows ``k`` and ``k + 1`` of the ascending argsort, ``(..., 2, [n])``."""
    n = xs.shape[-1]
    mu = _uniform(n, xs.dtype)
    kf = k.astype(xs.dtype)
    if two:
        k1f = kp1.astype(xs.dtype)
        nu = jnp.stack([kf / n, jnp.full_like(kf, 1 / n), (k1f - kf) / n, (n - k1f - 1) / n])
        anchors = jnp.array([0.0, 1 / 3, 2 / 3, 1.0], xs.dtype)
        G = plan(xs, anchors, mu, nu.astype(xs.dtype), softness, o)
        return jnp.swapaxes(G[..., 1:3], -1, -2)
    nu = jnp.stack([kf / n, jnp.full_like(kf, 1 / n), (n - kf - 1) / n])
    anchors = jnp.array([0.0, 0.5, 1.0], xs.dtype)
    P = jnp.swapaxes(plan(xs, anchors, mu, nu, softness, o)[..., 1:2], -1, -2)
    return jnp.concatenate([P, P], -2)


def rank(xs, descending, softness, o):
    n = xs.shape[-1]
    G = _full_plan(xs, descending, softness, o)
    G = G / jnp.clip(jnp.sum(G, -1, keepdims=True), min=1e-10)
    return jnp.einsum("...ij,j->...i", G, jnp.arange(1, n + 1, dtype=xs.dtype))
