"""Entropic optimal transport between a row and fixed anchors (log-domain Sinkhorn).

The solve runs in ``lax.while_loop`` (tolerance on the marginal error) and is
differentiated implicitly by a ``custom_vjp`` (Schur complement on the anchor
potentials, gauge fixed), so no iterate is stored and float32 works.

References:
  Cuturi, Teboul & Vert, Differentiable ranks and sorting using optimal transport
  <https://arxiv.org/abs/1905.11885>, 2019.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp


def _solve(C, mu, nu, eps, tol, max_iter):
    lmu, lnu = jnp.log(mu), jnp.log(nu)

    def upd(fg):
        f, g = fg
        g = eps * lnu - eps * logsumexp((f[:, None] - C) / eps, axis=0)
        f = eps * lmu - eps * logsumexp((g[None, :] - C) / eps, axis=1)
        return f, g

    def err(fg):
        f, g = fg
        G = jnp.exp((f[:, None] + g[None, :] - C) / eps)
        return jnp.sum(jnp.abs(jnp.sum(G, axis=0) - nu))

    def cond(st):
        i, fg, e = st
        return (i < max_iter) & (e > tol)

    def body(st):
        i, fg, _ = st
        for _ in range(10):
            fg = upd(fg)
        return i + 10, fg, err(fg)

    n, m = C.shape
    fg0 = (jnp.zeros_like(C[:, 0]), jnp.zeros_like(C[0, :]))
    i0 = jnp.zeros_like(C[0, 0], dtype=jnp.int32)
    _, (f, g), _ = lax.while_loop(cond, body, (i0, fg0, jnp.full_like(C[0, 0], jnp.inf)))
    return jnp.exp((f[:, None] + g[None, :] - C) / eps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def sinkhorn_plan(C, mu, nu, eps, tol, max_iter):
    """Plan ``argmin_{Gamma in U(mu, nu)} <C, Gamma> - eps H(Gamma)`` for one ``(n, m)`` cost."""
    return _solve(C, mu, nu, eps, tol, max_iter)


def _fwd(C, mu, nu, eps, tol, max_iter):
    G = _solve(C, mu, nu, eps, tol, max_iter)
    return G, (G, mu, nu, eps)


def _bwd(tol, max_iter, res, Gbar):
    G, mu, nu, eps = res
    n, m = G.shape
    a = jnp.sum(G * Gbar, axis=1) / eps
    b = jnp.sum(G * Gbar, axis=0) / eps
    r = jnp.sum(G, axis=1)
    c = jnp.sum(G, axis=0)
    rhs = b - G.T @ (a / r)
    shift = jnp.mean(c)

    def S(u):
        return c * u - G.T @ ((G @ u) / r) + shift * jnp.mean(u) * jnp.ones_like(u)

    if m <= 128:
        Smat = jnp.diag(c) - G.T @ (G / r[:, None]) + shift / m * jnp.ones((m, m), G.dtype)
        ug = jnp.linalg.solve(Smat, rhs)
    else:
        ug, _ = jax.scipy.sparse.linalg.cg(S, rhs, maxiter=200, tol=1e-7)
    uf = (a - G @ ug) / r
    dC = G * (uf[:, None] + ug[None, :]) - G * Gbar / eps
    return dC, jnp.zeros_like(mu), jnp.zeros_like(nu), jnp.zeros_like(eps)


sinkhorn_plan.defvjp(_fwd, _bwd)


def cost_and_marginals(x, anchors, mu, nu):
    """Cost ``(x_i - a_j)^2`` ``(B, n, m)`` (batch axes flattened) and clipped marginals.

    The marginals are clipped at 1e-12 and renormalised (as softjax).
    """
    *batch, n = x.shape
    m = anchors.shape[-1]
    anchors = jnp.broadcast_to(anchors, (*batch, m))
    C = ((x[..., :, None] - anchors[..., None, :]) ** 2).reshape(-1, n, m)
    tiny = 1e-12
    mu = jnp.clip(mu, tiny)
    nu = jnp.clip(nu, tiny)
    return C, mu / jnp.sum(mu), nu / jnp.sum(nu)


def transport(x, anchors, mu, nu, softness, *, tol=1e-6, max_iter=5000):
    """Batched plan for cost ``(x_i - a_j)^2``; returns ``n * Gamma`` of shape ``(..., n, m)``."""
    *batch, n = x.shape
    m = anchors.shape[-1]
    C, mu, nu = cost_and_marginals(x, anchors, mu, nu)
    eps = jnp.asarray(softness).astype(x.dtype)
    G = jax.vmap(lambda c: sinkhorn_plan(c, mu, nu, eps, tol, max_iter))(C)
    return (G * n).reshape(*batch, n, m)
