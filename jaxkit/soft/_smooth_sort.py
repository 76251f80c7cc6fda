"""``smooth_sort``: C-infinity permutahedron projection with ESP bounds (softjax-only method).

The permutahedron ``P(w)`` is ``{y : A y <= b, 1^T y = b_n}`` with ``b_k`` the sum of the
``k`` largest ``w`` (``A``: prefix sums in the chamber of ``z``). softjax's ``smooth_sort``
replaces ``b_k`` by its log-sum-exp relaxation over all ``k``-subsets,
``b_k = tau_b log e_k(exp(w / tau_b))`` (``e_k``: elementary symmetric polynomial, an
O(n^2) log-space recurrence; ``tau_b = min(softness, 1)``) and puts entropic barriers on
the slacks ``s = b - A y`` and on the gaps ``d = D y`` (``D``: first differences). Its
dual over ``beta`` (``n - 1`` variables) is

    g(beta) = <alpha, b> + nu b_n + sum exp(-alpha) + sum exp(-beta),
    alpha = diff(z_sorted) + L beta,   nu = z_sorted[-1] - beta[-1],

with ``L`` the tridiagonal second-difference matrix, so the Hessian
``L diag(exp(-alpha)) L + diag(exp(-beta))`` is pentadiagonal and positive definite.

softjax minimises ``g`` with optimistix L-BFGS (tol 1e-5) and differentiates by CG. Here
``g`` is minimised by damped Newton with an O(n) banded LDL^T solve (quadratic
convergence, so the dual is solved to float precision), and the derivative is the exact
implicit one: a ``custom_jvp`` on ``beta*(z, b, b_n)`` whose tangent solves
``H dbeta = -(L db - db_n e_{n-1} + L diag(exp(-alpha)) d diff(z))`` through
``lax.custom_linear_solve`` (so ``jvp`` and ``vjp`` both work). The primal is rebuilt
from ``(s, d)`` with softjax's least-squares formula. Because softjax stops L-BFGS at
tolerance 1e-5, its outputs carry an optimisation error of that order: parity is
checked at the tolerance its own solver gives (see ``tests/soft/test_modes.py``).

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
  Blondel, Teboul, Berthet & Djolonga, Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

MAX_NEWTON = 100
_FLOOR = -1e30


def esp_bounds(w, tau):
    """``b_k = tau log e_k(exp(w / tau))`` for k = 1..n-1 and ``b_n = sum(w)`` (1-D ``w``)."""
    n = w.shape[0]
    x = w / tau
    floor = jnp.asarray(_FLOOR, w.dtype)
    logE0 = jnp.full_like(w, _FLOOR).at[0].set(0.0)

    def step(logE, xj):
        prev = jnp.concatenate([floor[None], logE[:-1]])
        return jnp.logaddexp(logE, xj + prev), None

    logE, _ = lax.scan(jax.checkpoint(step), logE0, x)
    del n
    return tau * logE[1:], jnp.sum(w)


def _lap(v):
    """``L v``, L = tridiag(-1, 2, -1) of size len(v) (zero boundary)."""
    z = jnp.zeros_like(v[:1])
    return 2.0 * v - jnp.concatenate([z, v[:-1]]) - jnp.concatenate([v[1:], z])


def _penta(sa, db):
    """Bands (diag, first, second) of ``H = L diag(sa) L + diag(db)``."""
    m = sa.shape[0]
    zero = jnp.zeros_like(sa[:1])
    sp = jnp.concatenate([zero, sa[:-1]])  # sa[i-1]
    sn = jnp.concatenate([sa[1:], zero])  # sa[i+1]
    diag = 4.0 * sa + sp + sn + db
    first = -2.0 * sa - 2.0 * sn  # H[i, i+1] (last unused)
    second = jnp.concatenate([sa[1:], zero])  # H[i, i+2] = sa[i+1] (last two unused)
    del m
    return diag, first, second


def _penta_factor(diag, first, second):
    """LDL^T of a symmetric pentadiagonal matrix: (d, l1, l2), L[i+1,i]=l1, L[i+2,i]=l2."""
    zero = jnp.zeros_like(diag[0])

    def body(carry, x):
        d1, d2, l1p, l2p, l2pp = carry  # d[i-1], d[i-2], l1[i-1], l2[i-1], l2[i-2]
        a, b, c = x
        # l1[i-2] l2... : d_i = a_i - l1[i-1]^2 d[i-1] - l2[i-2]^2 d[i-2]
        d = a - l1p * l1p * d1 - l2pp * l2pp * d2
        l1 = (b - l2p * l1p * d1) / d
        l2 = c / d
        return (d, d1, l1, l2, l2p), (d, l1, l2)

    _, (d, l1, l2) = lax.scan(body, (zero, zero, zero, zero, zero), (diag, first, second))
    return d, l1, l2


def _penta_solve(fac, r):
    d, l1, l2 = fac
    zero = jnp.zeros_like(r[0])

    def fwd(carry, x):
        y1, y2, a1, a2 = carry  # y[i-1], y[i-2], l1[i-1], l2[i-2]
        ri, l1i, l2i, l2im1 = x
        y = ri - a1 * y1 - a2 * y2
        return (y, y1, l1i, l2im1), y

    l2prev = jnp.concatenate([jnp.zeros_like(l2[:1]), l2[:-1]])  # l2[i-1]
    _, y = lax.scan(fwd, (zero, zero, zero, zero), (r, l1, l2, l2prev))

    def bwd(carry, x):
        x1, x2 = carry  # x[i+1], x[i+2]
        yi, di, l1i, l2i = x
        xi = yi / di - l1i * x1 - l2i * x2
        return (xi, x1), xi

    _, xs = lax.scan(bwd, (zero, zero), (y, d, l1, l2), reverse=True)
    return xs


def _alpha(zs, beta):
    return (zs[:-1] - zs[1:]) + _lap(beta)


def _dual(beta, zs, b, bn):
    a = _alpha(zs, beta)
    nu = zs[-1] - beta[-1]
    return jnp.dot(a, b) + nu * bn + jnp.sum(jnp.exp(-a)) + jnp.sum(jnp.exp(-beta))


def _grad_hess(beta, zs, b, bn):
    a = _alpha(zs, beta)
    sa = jnp.exp(-a)
    db = jnp.exp(-beta)
    e = jnp.zeros_like(beta).at[-1].set(1.0)
    g = _lap(b - sa) - bn * e - db
    return g, sa, db


def _eval(beta, zs, b, bn):
    """``(g(beta), grad, exp(-alpha), exp(-beta))`` sharing the exponentials."""
    a = _alpha(zs, beta)
    sa = jnp.exp(-a)
    db = jnp.exp(-beta)
    nu = zs[-1] - beta[-1]
    f = jnp.dot(a, b) + nu * bn + jnp.sum(sa) + jnp.sum(db)
    e = jnp.zeros_like(beta).at[-1].set(1.0)
    return f, _lap(b - sa) - bn * e - db, sa, db


def _newton(zs, b, bn):
    """Damped Newton on ``g``; returns ``beta`` converged to round-off.

    Armijo on ``g`` alone stalls near the optimum: once the predicted decrease
    ``dec / 2`` is below the resolution of ``g`` (``eps |g|``), full steps fail the test
    on round-off, the search returns tiny ``t`` and the iterate wanders at a gradient of
    ~1e-9 (float64) that depends on the input's rounding -- the output then jitters at
    that level (finite differences disagree with the exact JVP) and all ``MAX_NEWTON``
    iterations run. So in the tail (``dec <= sqrt(eps) (1 + |g|)``, the quadratic
    region) a step is also accepted when it shrinks the gradient norm (by
    ``(1 - t / 2)``, half the linear model's decrease), whose resolution reaches
    round-off; the iteration stops once the gradient is at its round-off level
    (``eps`` times the magnitude of its terms) or no step is accepted.
    """
    beta0 = jnp.zeros_like(zs[:-1])
    eps = jnp.finfo(zs.dtype).eps
    seps = float(eps) ** 0.5

    def cond(st):
        k, _, g, sa, db, f, stop = st
        scale = 4.0 * jnp.max(jnp.abs(b - sa)) + jnp.abs(bn) + jnp.max(db)
        return (k < MAX_NEWTON) & ~stop & (jnp.max(jnp.abs(g)) > eps * scale)

    def body(st):
        k, beta, g, sa, db, f, _ = st
        p = -_penta_solve(_penta_factor(*_penta(sa, db)), g)
        dec = -jnp.dot(g, p)
        g2 = jnp.dot(g, g)
        tail = dec <= seps * (1.0 + jnp.abs(f))
        tmin = jnp.where(tail, 1e-3, 1e-10)

        def accept(t, fn, gn):
            shrink = (1.0 - 0.5 * t) ** 2
            return (fn <= f - 1e-4 * t * dec) | (tail & (jnp.dot(gn, gn) <= shrink * g2))

        def lcond(ls):
            t, (fn, gn, _, _) = ls
            return (t > tmin) & ~accept(t, fn, gn)

        def lbody(ls):
            t = 0.5 * ls[0]
            return t, _eval(beta + t * p, zs, b, bn)

        t1 = jnp.ones_like(f)
        t, new = lax.while_loop(lcond, lbody, (t1, _eval(beta + p, zs, b, bn)))
        ok = accept(t, new[0], new[1]) & (dec > 0)
        keep = lambda a, o: jnp.where(ok, a, o)  # noqa: E731
        fn, gn, san, dbn = new
        return (
            k + 1,
            keep(beta + t * p, beta),
            keep(gn, g),
            keep(san, sa),
            keep(dbn, db),
            keep(fn, f),
            ~ok,
        )

    f0, g0, sa0, db0 = _eval(beta0, zs, b, bn)
    k0 = jnp.zeros_like(bn, dtype=jnp.int32)
    _, beta, _, _, _, _, _ = lax.while_loop(cond, body, (k0, beta0, g0, sa0, db0, f0, k0 < 0))
    return beta


@jax.custom_jvp
def dual_solve(zs, b, bn):
    """``beta* = argmin g(beta)`` (``zs`` sorted descending, length n >= 2)."""
    return _newton(lax.stop_gradient(zs), lax.stop_gradient(b), lax.stop_gradient(bn))


@dual_solve.defjvp
def _dual_solve_jvp(primals, tangents):
    zs, b, bn = primals
    dzs, db_, dbn = tangents
    beta = dual_solve(zs, b, bn)
    _, sa, db = _grad_hess(beta, zs, b, bn)
    fac = _penta_factor(*_penta(sa, db))
    e = jnp.zeros_like(beta).at[-1].set(1.0)
    rhs = -(_lap(db_) - dbn * e + _lap(sa * (dzs[:-1] - dzs[1:])))

    def matvec(v):
        return _lap(sa * _lap(v)) + db * v

    dbeta = lax.custom_linear_solve(matvec, rhs, lambda _, r: _penta_solve(fac, r), symmetric=True)
    return beta, dbeta


def _reconstruct(b, bn, s, d):
    """Softjax's least-squares fit of ``y`` to ``A y = b - s``, ``D y = d``, ``1^T y = b_n``."""
    n = d.shape[0] + 1
    t = jnp.concatenate([jnp.cumsum(d[::-1])[::-1], jnp.zeros_like(d[:1])])
    T = jnp.cumsum(t)[:-1]
    rhs = (b - s) - T
    ks = jnp.arange(1, n, dtype=d.dtype)
    rhs_n = bn - jnp.sum(t)
    num = jnp.sum(ks * rhs) + n * rhs_n
    den = jnp.sum(ks * ks) + n * n
    return num / den + t


def project_row(z, w, tau_b):
    """Smooth-sort projection of one row: ``z`` (already divided by softness), ``w``."""
    n = z.shape[0]
    if n <= 1:
        return w
    b, bn = esp_bounds(w, tau_b)
    iota = jnp.arange(n)
    _, perm = lax.sort((-lax.stop_gradient(z), iota), num_keys=1, is_stable=True)
    inv = jnp.zeros_like(perm).at[perm].set(iota)
    zs = z[perm]
    beta = dual_solve(zs, b, bn)
    s = jnp.exp(-_alpha(zs, beta))
    d = jnp.exp(-beta)
    return _reconstruct(b, bn, s, d)[inv]


def project(z, w, softness):
    """Batched along the last axis; ``z`` or ``w`` may be 1-D (shared by all rows)."""
    z = jnp.asarray(z)
    w = jnp.asarray(w)
    n = z.shape[-1]
    shape = jnp.broadcast_shapes(z.shape, w.shape)
    tau_b = jnp.minimum(jnp.asarray(softness).astype(w.dtype), 1.0)
    f = functools.partial(project_row, tau_b=tau_b)
    if len(shape) == 1:
        return f(z, w)
    za = None if z.ndim == 1 else 0
    wa = None if w.ndim == 1 else 0
    zz = z if za is None else z.reshape(-1, n)
    ww = w if wa is None else w.reshape(-1, n)
    return jax.vmap(f, in_axes=(za, wa))(zz, ww).reshape(shape)
