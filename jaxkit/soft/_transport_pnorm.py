"""p-norm regularised optimal transport between a row and fixed anchors (modes c0/c1/c2).

Solves ``min_{Gamma in U(mu, nu)} <C, Gamma> + lam R_p(Gamma)`` (Blondel, Seguy &
Rolet 2018) with ``p = 2, 3/2, 4/3`` through its dual

    D(f, g) = <mu, f> + <nu, g> - (lam^{-(q-1)} / q) sum_ij [f_i + g_j - C_ij]_+^q,

``q = p / (p - 1)``, plan ``Gamma = lam^{-(q-1)} [f + g - C]_+^{q-1}`` (the formulas
softjax 0.1.1 uses). softjax maximises ``D`` with optimistix L-BFGS in float64; here
the row potentials ``f`` are eliminated exactly (for fixed ``g`` each row is an
entmax-type threshold problem, solved in closed form after a sort), and the concave
semi-dual in ``g`` is maximised by a damped (Levenberg-regularised, Armijo line
search) Newton method whose Hessian is the Schur complement of the dual Hessian
(dense ``m x m`` solve). Every Newton iterate satisfies the row marginals exactly;
iterations stop on ``||nu - Gamma^T 1||_1 <= tol``. The gauge ``g -> g + c,
f -> f - c`` is fixed by keeping ``sum(g)`` constant (``Gamma`` does not depend on it).

float32: near the optimum a Newton step's predicted gain in the semi-dual (~1e-10) is
below the round-off of the semi-dual's value (~1e-8), so once the gain is under that
round-off the line search's merit is the marginal residual ``||nu - Gamma^T 1||_1``
instead (a step is taken when it lowers the residual); the row thresholds are computed
on ``g - C`` shifted by its row maximum (and ``C`` by its row minimum, which moves only
``f``), so the residual's own round-off floor stays below the float32 ``tol``. Neither
changes the optimum: float64 plans agree with the previous iteration to round-off.

Not converged: when the iteration ends (``max_iter``, or no step lowers the merit) with
the residual above ``10 tol + n eps (1 + max C / lam)`` (``eps`` of the dtype, ``C``
row-shifted; the second term is the float round-off floor of the residual), that row's
plan is returned as NaN, never as a silently wrong plan; the NaN propagates to every
output of the ``method="ot"`` call.

Differentiation is implicit (``custom_vjp``): with ``H = dGamma/dS`` the linear system
of the optimality conditions is solved by the same Schur complement, so nothing of
the iteration is stored, and it works in float32 (softjax's fails there) and float64.

References:
  Blondel, Seguy & Rolet, Smooth and sparse optimal transport
  <https://arxiv.org/abs/1710.06276>, 2018.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxkit.soft._simplex import _entmax_theta
from jaxkit.soft._transport import cost_and_marginals, transport

POWERS = {"c0": 1, "c1": 2, "c2": 3}  # q - 1 for p = 2, 3/2, 4/3


def _threshold(v, power):
    """Theta with ``sum_j [v_j - theta]_+^power = 1`` along the last axis (keepdims)."""
    if power != 1:
        return _entmax_theta(v, power)
    n = v.shape[-1]
    u = -jnp.sort(-v, axis=-1)
    cs = jnp.cumsum(u, axis=-1)
    k = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=v.dtype), v.shape)
    idx = jnp.count_nonzero(1.0 + k * u - cs > 0, axis=-1, keepdims=True)
    c_at = jnp.take_along_axis(cs, idx - 1, axis=-1)
    return (c_at - 1.0) / idx.astype(v.dtype)


def _pow(s, power):
    return s if power == 1 else s**power


def _parts(C, g, mu, lam, power):
    """Exact row potentials for ``g``; returns (f, S, Gamma, H = dGamma/dS)."""
    lp = lam ** (-power)
    tau = lam * (mu if power == 1 else mu ** (1.0 / power))  # (n,)
    # shifted by the row maximum before the threshold: the row's top entry of ``v`` is then
    # exactly 0 and ``v - theta`` is not a difference of two large numbers (float32)
    w = g[None, :] - C
    w_max = jnp.max(w, axis=1, keepdims=True)
    v = (w - w_max) / tau[:, None]
    theta = _threshold(v, power)
    f = -w_max[:, 0] - tau * theta[:, 0]
    S = tau[:, None] * (v - theta)
    Sp = jnp.maximum(S, 0.0)
    G = lp * _pow(Sp, power)
    H = (
        lp * jnp.where(S > 0, jnp.ones_like(S), jnp.zeros_like(S))
        if power == 1
        else lp * power * _pow(Sp, power - 1)
    )
    return f, S, G, H


def _semi_dual(C, g, mu, nu, lam, power):
    """Semi-dual value, its round-off scale (sum of the terms' magnitudes), marginal error."""
    f, S, G, _ = _parts(C, g, mu, lam, power)
    q = power + 1
    R = lam ** (-power) / q * jnp.sum(_pow(jnp.maximum(S, 0.0), q))
    F = jnp.dot(mu, f) + jnp.dot(nu, g) - R
    scale = jnp.dot(mu, jnp.abs(f)) + jnp.dot(nu, jnp.abs(g)) + R
    return F, scale, jnp.sum(jnp.abs(nu - jnp.sum(G, axis=0)))


def _schur_solve(H, rhs_f, rhs_g, ridge, lstsq=False):
    """Solve ``[[diag(H1), H], [H^T, diag(H^T 1)]] [u; v] = [rhs_f; rhs_g]`` (+ridge on v).

    The system is singular along ``(1, -1)`` on every connected component of the
    support of ``H`` (sparse plans can split into several); adding ``mean(c) 11^T / m``
    removes the global one, and ``lstsq=True`` (the backward pass) takes the
    minimum-norm solution, exact because the right-hand sides are consistent.
    """
    m = H.shape[1]
    r = jnp.sum(H, axis=1)
    r = jnp.maximum(r, jnp.finfo(H.dtype).tiny ** 0.5)
    c = jnp.sum(H, axis=0)
    shift = jnp.mean(c)
    Smat = jnp.diag(c + ridge) - H.T @ (H / r[:, None]) + shift / m * jnp.ones((m, m), H.dtype)
    rhs = rhs_g - H.T @ (rhs_f / r)
    v = jnp.linalg.lstsq(Smat, rhs)[0] if lstsq else jnp.linalg.solve(Smat, rhs)
    u = (rhs_f - H @ v) / r
    return u, v


def _solve(C, mu, nu, lam, power, tol, max_iter):
    n, m = C.shape
    dt = C.dtype
    # a per-row constant in C moves only f, not the plan; removing the row minimum makes
    # the cancellation in ``S = f + g - C`` (the residual's round-off floor) smaller
    C = C - jnp.min(C, axis=1, keepdims=True)
    noise = 64 * jnp.finfo(dt).eps  # relative round-off of the semi-dual's value

    def state(g):
        _, _, G, H = _parts(C, g, mu, lam, power)
        grad = nu - jnp.sum(G, axis=0)
        return grad, H, jnp.sum(jnp.abs(grad))

    def cond(st):
        i, _, _, _, err, _, _ = st
        return (i < max_iter) & (err > tol)

    def body(st):
        i, g, grad, H, err, F, scale = st
        # Levenberg-regularised Newton direction on the semi-dual (ascent)
        _, d = _schur_solve(H, jnp.zeros_like(H[:, 0]), grad, err)
        slope = jnp.dot(grad, d)
        # near the optimum the predicted gain is below the round-off of the semi-dual's
        # value (float32: ~1e-10 against ~1e-8), so comparing values compares noise: there
        # the merit is the marginal residual ``||nu - Gamma^T 1||_1`` (the gradient's norm,
        # zero only at the optimum), which the Newton step decreases quadratically
        near = slope <= noise * scale

        def accept(t, Fn, en):
            return jnp.where(near, en < err, Fn >= F + 1e-4 * t * slope)

        def ls_cond(ls):
            t, Fn, _, en, k = ls
            return ~accept(t, Fn, en) & (k < 30)

        def ls_body(ls):
            t, _, _, _, k = ls
            t = 0.5 * t
            return (t, *_semi_dual(C, g + t * d, mu, nu, lam, power), k + 1)

        # the carries of both loops are built from traced values (``*_like``): a constant
        # (``jnp.ones((), dt)``, a Python ``0``) has an aval on the empty mesh, and when
        # ``vmap`` over a NamedSharding input batches this nested loop it fails with
        # "Resource axis: data of P('data',) is not found in mesh: ()"
        t0 = jnp.ones_like(F)
        t, Fn, sn, en, _ = lax.while_loop(
            ls_cond,
            ls_body,
            (t0, *_semi_dual(C, g + d, mu, nu, lam, power), jnp.zeros_like(i)),
        )
        ok = jnp.where(near, en < err, Fn >= F)  # never go uphill in the merit
        g_new = jnp.where(ok, g + t * d, g)
        grad_n, H_n, err_n = state(g_new)
        return (
            jnp.where(ok, i + 1, max_iter),  # no acceptable step: stop (checked below)
            g_new,
            grad_n,
            H_n,
            err_n,
            jnp.where(ok, Fn, F),
            jnp.where(ok, sn, scale),
        )

    g0 = jnp.zeros((m,), dt)
    grad0, H0, err0 = state(g0)
    F0, scale0, _ = _semi_dual(C, g0, mu, nu, lam, power)
    i0 = jnp.zeros_like(err0, dtype=jnp.int32)  # not a Python 0 (see the line search)
    st = lax.while_loop(cond, body, (i0, g0, grad0, H0, err0, F0, scale0))
    g, err = st[1], st[4]
    _, _, G, H = _parts(C, g, mu, lam, power)
    # not converged: a NaN plan, never a silently wrong one. ``err`` may end above ``tol``
    # where the float round-off reaches it: a plan entry carries ~eps |g - C| / lam
    # (|g - C| ~ max C on the support), summed over n rows, so the plan is NaN only beyond
    # 10 tol plus that floor
    floor = n * jnp.finfo(dt).eps * (1 + jnp.max(C) / lam)
    failed = err > 10 * tol + floor
    G = jnp.where(failed, jnp.nan, G)
    return G, H


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def pnorm_plan(C, mu, nu, lam, power, tol, max_iter):
    """Plan of the p-norm regularised OT for one ``(n, m)`` cost (``power = q - 1``)."""
    return _solve(C, mu, nu, lam, power, tol, max_iter)[0]


def _fwd(C, mu, nu, lam, power, tol, max_iter):
    G, H = _solve(C, mu, nu, lam, power, tol, max_iter)
    return G, (G, H, mu, nu, lam)


def _bwd(power, tol, max_iter, res, Gbar):
    G, H, mu, nu, lam = res
    GH = Gbar * H
    u, v = _schur_solve(
        H, jnp.sum(GH, axis=1), jnp.sum(GH, axis=0), jnp.zeros((), G.dtype), lstsq=True
    )
    W = Gbar - u[:, None] - v[None, :]
    dC = -H * W
    dlam = -power / lam * jnp.sum(G * W)
    return dC, jnp.zeros_like(mu), jnp.zeros_like(nu), dlam


pnorm_plan.defvjp(_fwd, _bwd)


def transport_pnorm(x, anchors, mu, nu, softness, mode, *, tol=None, max_iter=100):
    """Batched p-norm OT plan for cost ``(x_i - a_j)^2``; returns ``n * Gamma`` ``(..., n, m)``.

    ``mode`` in ``"c0"`` (p = 2), ``"c1"`` (p = 3/2), ``"c2"`` (p = 4/3); marginals are
    clipped at 1e-12 and renormalised (as softjax). ``tol`` on the column-marginal L1
    error defaults to 1e-12 in float64 and 1e-6 in float32. A row whose solve does not
    converge (residual above ``10 tol + n eps (1 + max C / lam)`` after ``max_iter``
    Newton steps or a failed line search) comes back as NaN, not as a wrong plan (module docstring).
    """
    power = POWERS[mode]
    *batch, n = x.shape
    m = anchors.shape[-1]
    C, mu, nu = cost_and_marginals(x, anchors, mu, nu)
    if tol is None:
        tol = 1e-12 if x.dtype == jnp.float64 else 1e-6
    lam = jnp.asarray(softness).astype(x.dtype)
    G = jax.vmap(lambda c: pnorm_plan(c, mu, nu, lam, power, tol, max_iter))(C)
    return (G * n).reshape(*batch, n, m)


def transport_any(x, anchors, mu, nu, softness, mode="smooth"):
    """Entropic Sinkhorn plan for ``mode="smooth"``, p-norm plan for ``c0``/``c1``/``c2``."""
    if mode == "smooth":
        return transport(x, anchors, mu, nu, softness)
    return transport_pnorm(x, anchors, mu, nu, softness, mode)
