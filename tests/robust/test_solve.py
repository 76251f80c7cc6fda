"""Newsvendor closed form vs LP, limits, equivariance; JAX L-BFGS vs cvxpy + Clarabel."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import robust as R
from tests.conformance import without_jaxtyping

H, B = 1.0, 4.0


def _demand(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return 20 + 60 * rng.pareto(2.5, n)


def _j(xi, x, lo, hi, eps, w=None):
    w = np.full(xi.size, 1 / xi.size) if w is None else w / w.sum()
    per = H * np.maximum(x[:, None] - xi, 0) + B * np.maximum(xi - x[:, None], 0)
    return (1 - eps) * per @ w + eps * np.maximum(H * (x - lo), B * (hi - x))


def test_newsvendor_closed_form_vs_lp():
    xi = _demand()
    w = np.random.default_rng(1).uniform(0.5, 1.5, xi.size)
    with jax.enable_x64(True):
        for alpha in (0.02,):
            iv = R.calibrate_interval(xi, alpha=alpha)
            for eps in (0.0, 0.1, 0.2, 1.0):
                for weights in (None, w):
                    sol = R.newsvendor_closed_form(xi, eps, iv, h=H, b=B, weights=weights)
                    lp = R.fit_conic(
                        R.newsvendor(H, B), xi, iv, eps, weights=weights, solver="HIGHS"
                    )
                    assert lp.status == "optimal"
                    assert abs(float(sol.value) - lp.value) <= 1e-9 * max(1.0, abs(lp.value))
                    # the closed-form x attains J (brute force over a dense grid is never lower)
                    grid = np.linspace(float(iv.lo) - 10, float(iv.hi) + 10, 4001)
                    lo, hi = float(iv.lo), float(iv.hi)
                    assert float(sol.value) <= _j(xi, grid, lo, hi, eps, weights).min() + 1e-9


def test_newsvendor_limits_and_equivariance():
    xi = _demand()
    with jax.enable_x64(True):
        iv = R.calibrate_interval(xi, alpha=0.05)
        lo, hi = float(iv.lo), float(iv.hi)
        s0 = R.newsvendor_closed_form(xi, 0.0, iv, h=H, b=B)
        assert float(s0.x) == pytest.approx(np.sort(xi)[int(np.ceil(0.8 * xi.size)) - 1])
        s1 = R.newsvendor_closed_form(xi, 1.0, iv, h=H, b=B)
        assert float(s1.x) == pytest.approx((H * lo + B * hi) / (H + B), rel=1e-12)
        assert float(s1.value) == pytest.approx(H * B * (hi - lo) / (H + B), rel=1e-12)
        s = R.newsvendor_closed_form(xi, 0.1, iv, h=H, b=B)
        c, t = 2.5, 7.0
        sc = R.newsvendor_closed_form(c * xi, 0.1, R.Interval(lo=c * lo, hi=c * hi), h=H, b=B)
        assert float(sc.x) == pytest.approx(c * float(s.x), rel=1e-12)
        assert float(sc.value) == pytest.approx(c * float(s.value), rel=1e-12)
        st = R.newsvendor_closed_form(xi + t, 0.1, R.Interval(lo=lo + t, hi=hi + t), h=H, b=B)
        assert float(st.x) == pytest.approx(float(s.x) + t, rel=1e-12)
        assert float(st.value) == pytest.approx(float(s.value), rel=1e-12)
        # vmap over an eps grid equals the loop
        eps = jnp.linspace(0.0, 1.0, 9)
        vm = jax.vmap(lambda e: R.newsvendor_closed_form(xi, e, iv, h=H, b=B).value)(eps)
        loop = [float(R.newsvendor_closed_form(xi, e, iv, h=H, b=B).value) for e in eps]
        np.testing.assert_allclose(vm, loop, rtol=1e-12)


@pytest.mark.slow
def test_weights_equal_duplicates():
    xi = _demand(40)
    w = np.random.default_rng(2).integers(1, 4, xi.size).astype(float)
    dup = np.repeat(xi, w.astype(int))
    with jax.enable_x64(True):
        iv_w = R.calibrate_interval(xi, alpha=0.1, weights=w)
        iv_d = R.calibrate_interval(dup, alpha=0.1)
        assert float(iv_w.lo) == float(iv_d.lo) and float(iv_w.hi) == float(iv_d.hi)
        a = R.newsvendor_closed_form(xi, 0.2, iv_w, h=H, b=B, weights=w)
        b = R.newsvendor_closed_form(dup, 0.2, iv_d, h=H, b=B)
        assert float(a.value) == pytest.approx(float(b.value), rel=1e-12)


def _diabetes_like(seed=0, n=60, d=3):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, d))
    y = z @ rng.normal(size=d) + rng.standard_t(3, n)
    return z, y


def _gap(fam, data, bulk, eps, p0, **kw):
    with jax.enable_x64(True):
        data_j = jax.tree.map(jnp.asarray, data)
        got = R.fit(fam, data_j, bulk, eps, jax.tree.map(jnp.asarray, p0), **kw)
        ref = R.fit_conic(fam, data, bulk, eps, l2=kw.get("l2", 0.0))
        assert ref.status == "optimal"
        return (float(got.value) - ref.value) / abs(ref.value), got, ref


@pytest.mark.slow
def test_fit_lad_ellipsoid_vs_conic():
    z, y = _diabetes_like()
    with jax.enable_x64(True):
        e = R.calibrate_ellipsoid(jnp.asarray(np.c_[z, y]), alpha=0.2, key=jax.random.key(0))
    p0 = R.LinearParams(np.zeros(3), np.asarray(0.0))
    gap, got, _ = _gap(R.lad(), (z, y), e, 0.2, p0, steps=60)
    assert abs(gap) <= 1e-4
    assert float(got.smoothed_value) >= float(got.value) - 1e-12


def test_fit_lad_small_delta_finite_vs_conic():
    """The LAD fit down to delta = 1e-4 under the suite's XLA flags vs cvxpy + Clarabel.

    Regression: the back end at -O0 with the elemental fusion emitters (tests/conftest.py)
    rounded two copies of ``smax``'s operand differently (an FMA in one only), so
    ``jnp.max``'s derivative in the discarded exact branch was ``1 / 0`` and the fit ended
    all-NaN, silently (this problem: at eps 0.1, 0.2 and 0.4). A non-finite end now raises.
    """
    z, y = _diabetes_like(n=30, d=2)
    zy = np.c_[z, y]  # a moment ellipsoid built in NumPy (no calibration programs to compile)
    c, chol = zy.mean(0), np.linalg.cholesky(np.cov(zy.T))
    radius = np.quantile(np.linalg.norm(np.linalg.solve(chol, (zy - c).T), axis=0), 0.8)
    with jax.enable_x64(True):
        e = R.Ellipsoid(center=c, chol=chol, radius=radius)
    p0 = R.LinearParams(np.zeros(2), np.asarray(float(np.median(y))))
    gap, got, _ = _gap(R.lad(), (z, y), e, 0.1, p0, steps=60)
    assert np.isfinite(np.asarray(got.params.w)).all() and np.isfinite(float(got.params.b))
    assert abs(gap) <= 1e-4
    y_bad = y.copy()
    y_bad[0] = np.nan
    with jax.enable_x64(True), pytest.raises(Exception, match="`fit` ended at a non-finite"):
        data = (jnp.asarray(z), jnp.asarray(y_bad))
        jax.block_until_ready(R.fit(R.lad(), data, e, 0.1, jax.tree.map(jnp.asarray, p0), steps=60))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hinge", "logistic"])
def test_fit_classification_vs_conic(name):
    rng = np.random.default_rng(3)
    z = rng.normal(size=(60, 2))
    y = np.where(z[:, 0] + 0.5 * rng.normal(size=60) > 0, 1.0, -1.0)
    with jax.enable_x64(True):
        cells = jnp.asarray((y > 0).astype(np.int32))
        un = R.calibrate_cells(
            jnp.asarray(z), cells, n_cells=2, alpha=0.3, labels=jnp.asarray([-1.0, 1.0])
        )
    fam = R.hinge() if name == "hinge" else R.logistic()
    p0 = R.LinearParams(np.zeros(2), np.asarray(0.0))
    gap, _, _ = _gap(fam, (z, y), un, 0.2, p0, l2=1e-3, steps=80)
    assert abs(gap) <= 1e-4


@pytest.mark.slow
def test_fit_newsvendor_and_box_lad_vs_conic():
    xi = _demand()
    with jax.enable_x64(True):
        iv = R.calibrate_interval(xi, alpha=0.02)
        got = R.fit(R.newsvendor(H, B), jnp.asarray(xi), iv, 0.1, jnp.asarray(50.0))
        cf = R.newsvendor_closed_form(xi, 0.1, iv, h=H, b=B)
    assert abs(float(got.value) - float(cf.value)) / float(cf.value) <= 1e-4
    z, y = _diabetes_like(seed=1)
    with jax.enable_x64(True):
        box = R.calibrate_box(jnp.asarray(np.c_[z, y]), alpha=0.1)
    gap, _, _ = _gap(R.lad(), (z, y), box, 0.3, R.LinearParams(np.zeros(3), np.asarray(0.0)))
    assert abs(gap) <= 1e-4


def test_conic_tail_and_errors(monkeypatch):
    xi = _demand(60)
    iv = R.calibrate_interval(xi, alpha=0.05)
    fam = R.newsvendor(H, B)
    base = R.fit_conic(fam, xi, iv, 0.2)
    tail = R.fit_conic(fam, xi, iv, 0.2, eta=0.5, moment=30.0)
    assert tail.value > base.value
    with jax.enable_x64(True):
        j = R.credal_objective(
            fam, jnp.asarray(float(tail.params)), jnp.asarray(xi), iv, 0.2, eta=0.5, moment=30.0
        )
    assert float(j) == pytest.approx(tail.value, rel=1e-6)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="`eps`"):
            R.fit_conic(fam, xi, iv, bad)
        with pytest.raises(ValueError, match="`eps`"):
            R.newsvendor_closed_form(xi, bad, iv, h=H, b=B)
        with pytest.raises(ValueError, match="`eps`"):
            R.fit(fam, jnp.asarray(xi), iv, bad, jnp.asarray(50.0))
    with pytest.raises(ValueError, match="`h`"):
        R.newsvendor_closed_form(xi, 0.1, iv, h=-1.0, b=B)
    # one integer leaf among floating ones (before: an OverflowError from optax's init)
    z = jnp.ones((8, 2))
    p0 = R.LinearParams(jnp.zeros(2, jnp.int32), jnp.zeros(()))
    with pytest.raises(TypeError, match="`params0` must be a floating array, got dtype int32"):
        R.fit(R.lad(), (z, z[:, 0]), R.Interval(lo=-1.0, hi=1.0), 0.1, p0, steps=2)
    with pytest.raises(TypeError, match="`bulk`"):
        R.newsvendor_closed_form(xi, 0.1, R.ball(jnp.zeros(1), 1.0), h=H, b=B)
    p0 = R.LinearParams(jnp.zeros(2), jnp.zeros(()))
    # no sample: the objective's mean over none was NaN
    with pytest.raises(TypeError, match="`data` must hold at least one sample"):
        R.credal_objective(R.lad(), p0, (z[:0], z[:0, 0]), R.Interval(lo=-1.0, hi=1.0), 0.1)
    with pytest.raises(TypeError, match="`data` must hold at least one sample"):
        R.fit(R.lad(), (z[:0], z[:0, 0]), R.Interval(lo=-1.0, hi=1.0), 0.1, p0, steps=2)
    for name in ("l2", "eta"):  # a string (a YAML "1e-3"): JAX's own message named neither
        with without_jaxtyping(), pytest.raises(TypeError, match=f"`{name}` must be a real"):
            R.fit(R.lad(), (z, z[:, 0]), R.Interval(lo=-1.0, hi=1.0), 0.1, p0, **{name: "0.1"})
        with without_jaxtyping(), pytest.raises(TypeError, match=f"`{name}` must be a real"):
            R.credal_objective(
                R.lad(), p0, (z, z[:, 0]), R.Interval(lo=-1.0, hi=1.0), 0.1, **{name: "0.1"}
            )
    with pytest.raises(NotImplementedError):
        R.fit_conic(
            R.squared(),
            (np.ones((5, 1)), np.ones(5)),
            R.ball(np.zeros(2), 1.0),
            0.1,
            eta=0.5,
            moment=1.0,
        )
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # as if the robust extra were missing
    with pytest.raises(ImportError, match=r"pip install 'jaxkit\[robust\]'"):
        R.fit_conic(fam, xi, iv, 0.2)


def test_objective_and_fit_check_weights():
    """Sample weights of credal_objective / fit / fit_conic (wave 25): before, a negative
    weight gave a finite meaningless objective (fit_conic: cvxpy's DCP error), a NaN one a
    NaN objective, a length-1 vector broadcast over the samples."""
    xi = _demand(20)
    iv = R.calibrate_interval(xi, alpha=0.1)
    fam, x0 = R.newsvendor(H, B), jnp.asarray(50.0)
    good = np.ones(20, np.float32)
    obj = jax.jit(lambda w: R.credal_objective(fam, x0, xi, iv, 0.1, weights=w))
    np.testing.assert_allclose(obj(good), R.credal_objective(fam, x0, xi, iv, 0.1), rtol=1e-6)
    for bad in (np.where(np.arange(20) == 3, -1.0, 1.0), np.full(20, np.nan), np.zeros(20)):
        bad = bad.astype(np.float32)
        with pytest.raises(ValueError, match="`weights`"):
            R.credal_objective(fam, x0, xi, iv, 0.1, weights=bad)
        with pytest.raises(Exception, match="`weights`"):  # traced
            jax.block_until_ready(obj(bad))
        with pytest.raises(ValueError, match="`weights`"):
            R.fit(fam, jnp.asarray(xi), iv, 0.1, x0, weights=bad, steps=1)
        with pytest.raises(ValueError, match="`weights`"):
            R.fit_conic(fam, xi, iv, 0.1, weights=bad)
    with pytest.raises(TypeError, match="`weights`"):
        R.credal_objective(fam, x0, xi, iv, 0.1, weights=np.ones(1, np.float32))
