"""PAV p-norm modes (c1: p=3/2, c2: p=4/3) and ``method="smooth_sort"``.

Parity goldens: ``scripts/make_soft_golden_modes.py`` ran softjax 0.1.1 on float32 inputs
with ``jax_enable_x64`` (``out64``: softjax then solves p-norm PAV blocks and the
smooth_sort dual in float64), without it (``out32``) and, for smooth_sort, with its
L-BFGS tolerance lowered to 1e-12 (``outT``, same algorithm solved to convergence).
PAV c1/c2: our float32 matches ``out64`` to 1e-5; softjax's own float32 PAV blocks
(unshifted prefix sums of ``s``, ``s^2``) are off by up to 1e-2 at small softness.
smooth_sort: our dual is solved by Newton to float precision, so ours (x64) matches
``outT`` to 5e-5 (relative) and softjax's default (L-BFGS tol 1e-5) only to 3e-3;
float32 sorted values match ``outT`` to 1e-4, float32 ranks to 3e-2 (ill-conditioned)."""

import importlib.resources
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxkit.soft as S
from jaxkit.soft import _pav
from jaxkit.soft import _pav_pnorm as PN
from jaxkit.soft import _smooth_sort as SM

GOLD = dict(np.load(importlib.resources.files("jaxkit") / "_fixtures" / "soft_golden_modes.npz"))
CFGS = json.loads(str(GOLD["configs"]))
X = jnp.array([[0.3, -1.2, 2.0, 0.9, -0.4, 1.5], [1.0, 0.2, -0.7, -2.0, 0.6, 0.1]])


def _ours(c):
    kw = dict(c["kw"])
    args = [jnp.asarray(GOLD["in:" + a]) if isinstance(a, str) else a for a in c["args"]]
    r = getattr(S, c["fn"])(*args, **kw)
    return np.asarray(r[0] if isinstance(r, tuple) else r)


# Default run: sort and rank at one setting per family; every other configuration in
# `make test-slow` (each one compiles its own program: ~5 s apiece on 2 cores).
_FAST = {
    "rank/fast_soft_sort/c1/0.1/x7",
    "sort/fast_soft_sort/c2/0.1/x7",
    "sort/smooth_sort/smooth/0.1/x7",
}


def _params(pred):
    return [
        pytest.param(c, id=c["name"], marks=() if c["name"] in _FAST else pytest.mark.slow)
        for c in CFGS
        if pred(c)
    ]


def test_golden_complete():
    assert len(CFGS) == 68
    assert json.loads(str(GOLD["failures64"])) == {}
    for c in CFGS:
        assert "out64:" + c["name"] in GOLD
        if "smooth_sort" in c["name"]:
            assert "outT:" + c["name"] in GOLD


@pytest.mark.parametrize("c", _params(lambda c: c["kw"]["method"] == "fast_soft_sort"))
def test_pav_pnorm_parity(c):
    got = _ours(c)
    want = GOLD["out64:" + c["name"]]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # softjax's own float32 path carries O(1e-2) block-value error at small softness
    w32 = GOLD["out32:" + c["name"]]
    np.testing.assert_allclose(got, w32, rtol=5e-2, atol=5e-2)


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - b) / (1.0 + np.abs(b))))


@pytest.mark.parametrize("c", _params(lambda c: c["kw"]["method"] == "smooth_sort"))
def test_smooth_sort_parity(c):
    tight, default = GOLD["outT:" + c["name"]], GOLD["out64:" + c["name"]]
    with jax.enable_x64(True):  # same float32 inputs, our solver in float64
        args = [
            jnp.asarray(GOLD["in:" + a], jnp.float64) if isinstance(a, str) else a
            for a in c["args"]
        ]
        got64 = np.asarray(getattr(S, c["fn"])(*args, **c["kw"]))
    assert _rel(got64, tight) < 5e-5
    # softjax's default run stops L-BFGS at tol 1e-5: agreement to that solver accuracy
    assert _rel(got64, default) < 3e-3
    # float32: soft ranks z = x / softness are ill-conditioned (the output is scaled by
    # n - 1); sorted values / quantiles / max keep 1e-4
    got = _ours(c)
    assert _rel(got, tight) < (3e-2 if c["fn"] == "rank" else 1e-4)


# ----------------------------------------------------------------------------- block solvers


def _brute_gamma(s, w, reg):
    """Bisection on sum phi(s - g) = W (float64)."""
    lo, hi = s.min() - 10 - abs(w.sum()), s.max() + 10 + abs(w.sum())
    phi = (lambda t: t * np.abs(t)) if reg == "p3" else (lambda t: t**3)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if phi(s - mid).sum() > w.sum():
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@pytest.mark.parametrize(
    "reg", [r if r == "p4" else pytest.param(r, marks=pytest.mark.slow) for r in PN.PREGS]
)
def test_block_values_vs_bisection(reg):
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        s = np.sort(rng.normal(size=12) * 3)[::-1]
        s[4:7] = s[4]  # ties
        w = rng.normal(size=12)
        bid = np.array([0, 0, 0, 1, 2, 2, 2, 2, 3, 4, 4, 4], np.int32)
        # jitted: one program instead of one per op of the eager block solver
        bv = jax.jit(PN.block_values, static_argnums=3)
        got = np.asarray(bv(jnp.asarray(s), jnp.asarray(w), jnp.asarray(bid), reg))
        for b in range(5):
            m = bid == b
            np.testing.assert_allclose(
                got[b], _brute_gamma(s[m], w[m], reg), rtol=1e-10, atol=1e-10
            )


def _unrolled(z, w, reg):
    """min-max formula of decreasing isotonic regression with plain-autodiff block values."""
    n = z.shape[0]
    rows = []
    for i in range(n):
        cands = []
        for k in range(i + 1):
            vals = [PN.range_value(z, w, k, j + 1, reg) for j in range(i, n)]
            cands.append(jnp.max(jnp.stack(vals)))
        rows.append(jnp.min(jnp.stack(cands)))
    return jnp.stack(rows)


@pytest.mark.slow
@pytest.mark.parametrize(
    "reg", [pytest.param(r, marks=pytest.mark.slow) if r == "p3" else r for r in PN.PREGS]
)
def test_pnorm_custom_jvp_equals_unrolled_reference(reg):
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        z = jnp.asarray(np.sort(rng.normal(size=5))[::-1] * 2)
        w = jnp.asarray(np.sort(rng.uniform(size=5))[::-1])
        f = lambda z, w: _pav.isotonic_pair(z, w, reg, "hybrid")  # noqa: E731
        g = lambda z, w: _unrolled(z, w, reg)  # noqa: E731
        np.testing.assert_allclose(f(z, w), g(z, w), rtol=1e-10)
        for argn in (0, 1):
            jf = jax.jacfwd(g, argn)(z, w)
            np.testing.assert_allclose(jax.jacfwd(f, argn)(z, w), jf, rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(jax.jacrev(f, argn)(z, w), jf, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize(
    "reg", [pytest.param(r, marks=pytest.mark.slow) if r == "p3" else r for r in PN.PREGS]
)
def test_pnorm_impls_agree(reg):
    rng = np.random.default_rng(3)
    rows = [
        rng.normal(size=40) * 20,
        np.round(rng.normal(size=40) * 3),  # random, tied
        np.arange(40.0) * 0.5,
        -np.arange(40.0) * 3,
    ]  # adversarial orders
    for y in rows:
        z = jnp.asarray(np.sort(y)[::-1], jnp.float32)
        w = jnp.asarray(np.linspace(2, 0.1, 40), jnp.float32)
        b = [np.asarray(_pav.partition(z, w, reg, impl)) for impl in _pav.SOLVERS]
        assert all(np.array_equal(b[0], bi) for bi in b[1:])
        v = np.asarray(_pav.isotonic_pair(z, w, reg, "hybrid"))
        assert np.all(np.diff(v) <= 1e-5 * (1 + np.abs(v[1:])))  # decreasing


# ----------------------------------------------------------------------------- oracles


@pytest.mark.slow
@pytest.mark.parametrize("mode", [pytest.param("c1", marks=pytest.mark.slow), "c2"])
def test_pav_pnorm_hard_limit(mode):
    # singleton blocks: y = phi(s - gamma) = w up to the float32 cancellation in s - gamma
    kw = dict(softness=1e-3, mode=mode, method="pav", standardize=False)
    tol = 5e-4
    np.testing.assert_allclose(S.sort(X, **kw), jnp.sort(X), atol=tol)
    np.testing.assert_allclose(
        S.rank(X, **kw), jnp.argsort(jnp.argsort(X)).astype(X.dtype) + 1, rtol=tol, atol=tol
    )
    np.testing.assert_allclose(S.max(X, axis=-1, **kw), X.max(-1), atol=tol)
    np.testing.assert_allclose(S.top_k(X, 2, **kw)[0], jax.lax.top_k(X, 2)[0], atol=tol)
    q = jnp.array([0.25, 0.5])
    np.testing.assert_allclose(
        S.quantile(X, q, axis=-1, **kw), jnp.quantile(X, q, axis=-1), atol=tol
    )
    with jax.enable_x64(True):
        x64 = jnp.asarray(X, jnp.float64)
        np.testing.assert_allclose(S.sort(x64, **kw), jnp.sort(x64), atol=1e-9)
    kw["standardize"] = True  # the default: logit-unsquash error floor
    np.testing.assert_allclose(
        S.sort(X, **{**kw, "method": "fast_soft_sort"}), jnp.sort(X), atol=5e-3
    )


@pytest.mark.slow
def test_smooth_sort_hard_limit():
    kw = dict(softness=1e-3, method="smooth_sort")
    np.testing.assert_allclose(S.sort(X, **kw), jnp.sort(X), atol=1e-2)
    np.testing.assert_allclose(
        S.rank(X, **kw), jnp.argsort(jnp.argsort(X)).astype(X.dtype) + 1, atol=1e-2
    )
    np.testing.assert_allclose(S.max(X, axis=-1, **kw), X.max(-1), atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,method",
    [pytest.param("c1", "pav", marks=pytest.mark.slow), ("c2", "pav"), ("smooth", "smooth_sort")],
)
def test_monotone_and_sum_preserved(mode, method):
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(3, 17)), jnp.float32).at[1, 3:6].set(0.25)
    kw = dict(mode=mode, method=method, standardize=False)
    for s in (0.05, 0.5, 3.0):
        y = np.asarray(S.sort(x, softness=s, **kw))
        assert np.all(np.diff(y, axis=-1) >= -1e-5)
        # smooth_sort: the least-squares rebuild keeps the sum exactly only at the dual
        # optimum; the float32 Newton stalls at ~1e-3 of it
        tol = 2e-4 if method == "pav" else 1e-2
        np.testing.assert_allclose(y.sum(-1), np.asarray(x).sum(-1), atol=tol)
        r = np.asarray(S.rank(x, softness=s, **kw))
        np.testing.assert_allclose(r.sum(-1), 17 * 18 / 2, rtol=1e-5 if method == "pav" else 1e-3)
        if method == "pav":  # ranks ordered like x (smooth_sort keeps a gap at ties)
            o = np.argsort(np.asarray(x), axis=-1, kind="stable")
            assert np.all(np.diff(np.take_along_axis(r, o, -1), axis=-1) >= -1e-4)


@pytest.mark.parametrize(
    "mode,method",
    [
        pytest.param("c1", "pav", marks=pytest.mark.slow),
        pytest.param("c2", "fast_soft_sort", marks=pytest.mark.slow),
        pytest.param("smooth", "smooth_sort", marks=pytest.mark.slow),
    ],
)
def test_jvp_vjp_consistent_f32(mode, method):
    rng = np.random.default_rng(6)
    for n in (7, 33):
        x = jnp.asarray(rng.normal(size=(2, n)), jnp.float32)
        u = jnp.asarray(rng.normal(size=(2, n)), jnp.float32)
        v = jnp.asarray(rng.normal(size=(2, n)), jnp.float32)
        for fn in (S.sort, S.rank):
            f = lambda x: fn(x, softness=0.3, mode=mode, method=method)  # noqa: B023, E731
            _, jv = jax.jvp(f, (x,), (v,))
            _, vjp = jax.vjp(f, x)
            (jtu,) = vjp(u)
            a, b = float(jnp.vdot(u, jv)), float(jnp.vdot(jtu, v))
            assert np.isfinite(a)
            # smooth_sort: float32 LDL^T solves of the (ill-conditioned) dual Hessian
            tol = 1e-3 if method == "smooth_sort" else 1e-4
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


OPS = {
    "sort": lambda x, **k: S.sort(x, **k),
    "rank": lambda x, **k: S.rank(x, descending=True, **k),
    "quantile": lambda x, **k: S.quantile(x, jnp.array([0.3, 0.5]), -1, **k),
    "top_k": lambda x, **k: S.top_k(x, 2, **k)[0],
    "max": lambda x, **k: S.max(x, -1, **k),
    "min": lambda x, **k: S.min(x, -1, **k),
}


@pytest.mark.parametrize(
    "op,mode", [pytest.param(o, m, marks=pytest.mark.slow) for o in OPS for m in ("c1", "c2")]
)
def test_check_grads_pav_pnorm(op, mode):
    with jax.enable_x64(True):
        x = jnp.asarray(X, jnp.float64)
        check_grads(
            lambda v: OPS[op](v, softness=0.4, mode=mode, method="pav"),
            (x,),
            1,
            modes=("fwd", "rev"),
            atol=1e-6,
            rtol=1e-6,
        )


@pytest.mark.slow
@pytest.mark.parametrize("op", ["sort", "rank", "quantile", "max"])
def test_check_grads_smooth_sort(op):
    # "rank" was off from finite differences by ~1e-4: the Newton dual solve stalled at a
    # gradient of ~1e-9 (Armijo on round-off), so the forward jittered at that level.
    with jax.enable_x64(True):
        x = jnp.asarray(X, jnp.float64)
        check_grads(
            lambda v: OPS[op](v, softness=0.4, method="smooth_sort"),
            (x,),
            1,
            modes=("fwd", "rev"),
            atol=1e-6,
            rtol=1e-6,
        )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["c1", "c2"])
def test_check_grads_second_order_pav_pnorm(mode):
    with jax.enable_x64(True):
        x = jnp.asarray(X, jnp.float64)
        check_grads(
            lambda v: S.sort(v, softness=0.7, mode=mode, standardize=False),
            (x,),
            2,
            modes=("fwd",),
            atol=1e-5,
            rtol=1e-5,
        )


@pytest.mark.slow
def test_smooth_sort_is_smooth_at_ties():
    # C-infinity: the Jacobian is continuous across a tie (PAV/SoftSort jump there)
    with jax.enable_x64(True):
        base = jnp.array([0.1, 0.5, 0.5, 1.3])
        e = jnp.array([0.0, 0.0, 1.0, 0.0])
        f = lambda v: S.sort(v, softness=0.3, method="smooth_sort")  # noqa: E731
        ja, jb = jax.jacfwd(f)(base - 1e-7 * e), jax.jacfwd(f)(base + 1e-7 * e)
        np.testing.assert_allclose(ja, jb, atol=1e-5)


def test_smooth_sort_penta_solver():
    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        sa, db = jnp.asarray(rng.uniform(0.1, 2, 9)), jnp.asarray(rng.uniform(0.1, 2, 9))
        r = jnp.asarray(rng.normal(size=9))
        L = 2 * np.eye(9) - np.eye(9, k=1) - np.eye(9, k=-1)
        H = L @ np.diag(sa) @ L + np.diag(db)
        x = jax.jit(lambda sa, db, r: SM._penta_solve(SM._penta_factor(*SM._penta(sa, db)), r))(
            sa, db, r
        )  # one program (eagerly: one per op of the factor and the solve)
        np.testing.assert_allclose(H @ np.asarray(x), r, atol=1e-10)


def test_smooth_sort_esp_bounds_hard_limit():
    w = jnp.array([0.3, -1.0, 2.0, 0.7])
    b, bn = jax.jit(SM.esp_bounds)(w, jnp.asarray(1e-3))
    np.testing.assert_allclose(b, np.cumsum(np.sort(np.asarray(w))[::-1])[:-1], atol=1e-2)
    np.testing.assert_allclose(bn, w.sum(), rtol=1e-6)


def test_modes_bad_inputs():
    with pytest.raises(ValueError, match="mode"):
        S.sort(X, method="smooth_sort", mode="c1")
    with pytest.raises(ValueError, match="method"):
        S.argsort(X, method="smooth_sort")


@pytest.mark.parametrize(
    "method,mode",
    [
        ("pav", "c1"),
        pytest.param("pav", "c2", marks=pytest.mark.slow),
        pytest.param("smooth_sort", "smooth", marks=pytest.mark.slow),
    ],
)
def test_modes_edges(method, mode):
    one = S.sort(jnp.array([[2.0]]), method=method, mode=mode)
    np.testing.assert_allclose(one, [[2.0]], rtol=1e-5)
    two = S.rank(jnp.array([3.0, 3.0]), method=method, mode=mode)
    np.testing.assert_allclose(np.asarray(two).sum(), 3.0, rtol=1e-5)  # no eager sum program
    if method == "pav":  # smooth_sort's rank keeps a gap barrier even at a tie (as softjax)
        np.testing.assert_allclose(two, [1.5, 1.5], rtol=1e-5)
    # the output dtype is fixed at trace time: eval_shape checks it without compiling a
    # bfloat16 program of its own
    xb = jax.ShapeDtypeStruct(X.shape, jnp.bfloat16)
    assert jax.eval_shape(lambda v: S.sort(v, method=method, mode=mode), xb).dtype == jnp.bfloat16
