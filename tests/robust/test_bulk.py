"""Bulk sets and calibration: support functions vs brute force, coverage, invariance, errors."""

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import robust as R
from jaxkit.robust import _calibrate

D = 3


def _ellipsoid(rng):
    m = rng.normal(size=(D, D))
    chol = np.linalg.cholesky(m @ m.T + 0.5 * np.eye(D))
    return R.Ellipsoid(center=rng.normal(size=D), chol=chol, radius=1.7)


def test_support_vs_brute_force():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, D))
    with jax.enable_x64(True):
        # ellipsoid: max over 1e5 boundary points c + r L u/|u| is below sigma and within 1e-3
        e = _ellipsoid(rng)
        u = rng.normal(size=(100_000, D))
        pts = (
            np.asarray(e.center)
            + 1.7 * (u / np.linalg.norm(u, axis=1, keepdims=True)) @ np.asarray(e.chol).T
        )
        brute = (a @ pts.T).max(axis=1)
        sig = np.asarray(R.support(e, a))
        assert np.all(sig >= brute - 1e-12)
        np.testing.assert_allclose(sig, brute, rtol=1e-3)
        # ball = ellipsoid with L = I
        b = R.ball(np.zeros(D), 2.0)
        np.testing.assert_allclose(R.support(b, a), 2.0 * np.linalg.norm(a, axis=1), rtol=1e-12)
        # box: equality with the max over its 2^d vertices
        c, h = rng.normal(size=D), rng.uniform(0.1, 1, size=D)
        verts = np.array([c + np.array(s) * h for s in itertools.product([-1, 1], repeat=D)])
        np.testing.assert_allclose(
            R.support(R.Box(center=c, half=h), a), (a @ verts.T).max(1), rtol=1e-12
        )
        # hull: equality with the max over retained points
        p = rng.normal(size=(20, D))
        mask = rng.uniform(size=20) < 0.5
        hull = R.Hull(points=p, mask=mask)
        np.testing.assert_allclose(R.support(hull, a), (a @ p[mask].T).max(1), rtol=1e-12)
        # interval and union of intervals
        iv = R.Interval(lo=-1.0, hi=3.0)
        s = np.array([-2.0, 0.5, 1.0])
        np.testing.assert_allclose(R.support(iv, s), np.maximum(-s, 3 * s))
        un = R.Union(
            members=R.Box(center=np.stack([c, -c]), half=np.stack([h, 2 * h])), labels=[0.0, 1.0]
        )
        want = np.maximum(
            R.support(R.Box(center=c, half=h), a), R.support(R.Box(center=-c, half=2 * h), a)
        )
        np.testing.assert_allclose(R.support(un, a), want, rtol=1e-12)


def test_support_above_projected_gradient_ascent():
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        e = _ellipsoid(rng)
        a = jnp.asarray(rng.normal(size=D))
        g = e.radius * e.chol.T @ a  # gradient of a^T (c + r L z) in z
        z = jnp.zeros(D)
        for _ in range(100):  # projected gradient ascent over the unit ball in z
            z = z + 0.5 * g
            z = z / jnp.maximum(1.0, jnp.linalg.norm(z))
        x = e.center + e.radius * e.chol @ z
        assert float(R.support(e, a)) >= float(a @ x) - 1e-9
        assert float(R.support(e, a)) - float(a @ x) < 1e-6


def test_contains():
    rng = np.random.default_rng(2)
    e = _ellipsoid(rng)
    u = rng.normal(size=(50, D))
    bd = (u / np.linalg.norm(u, axis=1, keepdims=True)) @ np.asarray(e.chol).T * 1.7
    assert bool(jnp.all(R.contains(e, np.asarray(e.center) + 0.99 * bd)))
    assert not bool(jnp.any(R.contains(e, np.asarray(e.center) + 1.01 * bd)))
    box = R.Box(center=np.zeros(2), half=np.ones(2))
    got = R.contains(box, np.array([[0.5, 0.9], [1.1, 0.0]]))
    np.testing.assert_array_equal(got, [True, False])
    with pytest.raises(NotImplementedError):
        R.contains(R.Hull(points=np.zeros((3, 2)), mask=np.ones(3, bool)), np.zeros((1, 2)))


@pytest.mark.parametrize("method", ["equal_tail", "shortest"])
def test_interval_mass(method):
    rng = np.random.default_rng(3)
    xi = rng.lognormal(size=400).astype(np.float32)
    w = rng.uniform(0.2, 1.0, size=400)
    for alpha in (0.02, 0.1, 0.3):
        iv = R.calibrate_interval(xi, alpha=alpha, weights=w, method=method)
        inside = (xi >= float(iv.lo)) & (xi <= float(iv.hi))
        assert w[inside].sum() / w.sum() >= 1 - alpha - 1e-6
    et = R.calibrate_interval(xi, alpha=0.1)
    sh = R.calibrate_interval(xi, alpha=0.1, method="shortest")
    assert float(sh.hi - sh.lo) <= float(et.hi - et.lo) + 1e-6
    # brute force of the shortest window on equal weights
    xs = np.sort(xi)
    k = int(np.ceil(0.9 * 400))
    assert float(sh.hi - sh.lo) == pytest.approx((xs[k - 1 :] - xs[: 400 - k + 1]).min(), rel=1e-6)


def test_box_and_hull_mass():
    rng = np.random.default_rng(4)
    xi = rng.standard_t(3, size=(500, D)).astype(np.float32)
    box = R.calibrate_box(xi, alpha=0.1)
    assert float(jnp.mean(R.contains(box, xi))) >= 0.9
    hull = R.calibrate_hull(xi, alpha=0.1)
    assert 0.9 <= float(jnp.mean(hull.mask)) < 0.95
    hull_m = R.calibrate_hull(xi, alpha=0.1, depth="median")
    assert float(jnp.mean(hull_m.mask)) >= 0.9


def test_ledoit_wolf_matches_sklearn():
    from sklearn.covariance import ledoit_wolf as sk_ledoit_wolf  # ~1 s per worker if global

    rng = np.random.default_rng(5)
    x = rng.normal(size=(30, 6)) @ rng.normal(size=(6, 6))
    with jax.enable_x64(True):
        # jitted: one compilation instead of one per eager x64 op (same value)
        _, cov = jax.jit(_calibrate.ledoit_wolf)(jnp.asarray(x), jnp.full(30, 1 / 30))
    np.testing.assert_allclose(cov, sk_ledoit_wolf(x)[0], rtol=1e-8)


@pytest.mark.parametrize(
    "law, reps",
    [
        pytest.param("gauss", 500, marks=pytest.mark.slow),
        pytest.param("t3", 500, marks=pytest.mark.slow),
    ],
)
def test_conformal_coverage(law, reps):
    alpha, n = 0.1, 200

    def one(key):
        k1, k2, k3 = jax.random.split(key, 3)
        draw = (
            (lambda k, s: jax.random.normal(k, s))
            if law == "gauss"
            else (lambda k, s: jax.random.t(k, 3.0, s))
        )
        e = R.calibrate_ellipsoid(draw(k1, (n, 2)), alpha=alpha, key=k2)
        return jnp.mean(R.contains(e, draw(k3, (200, 2))))

    cov = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), reps))
    assert float(jnp.mean(cov)) >= 1 - alpha - 0.01
    assert float(jnp.mean(cov)) <= 1 - alpha + 0.03  # calibrated, not trivially large


def test_ellipsoid_affine_equivariance():
    rng = np.random.default_rng(6)
    with jax.enable_x64(True):
        x = jnp.asarray(rng.normal(size=(60, 2)))
        a = jnp.asarray([[2.0, 0.5], [-1.0, 1.5]])
        t = jnp.asarray([3.0, -1.0])
        kw = dict(alpha=0.2, key=jax.random.key(3), shrinkage="none")
        e1 = R.calibrate_ellipsoid(x, **kw)
        e2 = R.calibrate_ellipsoid(x @ a.T + t[None], **kw)
        assert float(e1.radius) == pytest.approx(float(e2.radius), rel=1e-9)
        q = jnp.asarray(rng.normal(size=(100, 2)) * 1.5)
        np.testing.assert_array_equal(R.contains(e1, q), R.contains(e2, q @ a.T + t[None]))


@pytest.mark.slow
def test_cells_union():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(size=(40, 2)), rng.normal(size=(40, 2)) + 5]).astype(np.float32)
    cells = np.repeat(np.arange(2), 40).astype(np.int32)
    un = R.calibrate_cells(x, cells, n_cells=2, alpha=0.2, labels=np.array([1.0, -1.0]))
    for c in range(2):
        member = jax.tree.map(lambda t, c=c: t[c], un.members)
        assert not bool(jnp.any(member.mask & (jnp.asarray(cells) != c)))
    box_un = R.calibrate_cells(x, cells, n_cells=2, alpha=0.2, kind="box")
    assert float(jnp.mean(R.contains(box_un, x))) >= 0.8


def test_bad_inputs():
    x = np.random.default_rng(8).normal(size=(20, 2)).astype(np.float32)
    for alpha in (0.0, 1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="`alpha`"):
            R.calibrate_interval(x[:, 0], alpha=alpha)
        with pytest.raises(ValueError, match="`alpha`"):
            R.calibrate_ellipsoid(x, alpha=alpha, key=jax.random.key(0))
    # 10 calibration samples cannot give a finite radius at alpha < 1/11
    with pytest.raises(ValueError, match="`alpha` too small"):
        R.calibrate_ellipsoid(x, alpha=0.05, key=jax.random.key(0))
    R.calibrate_ellipsoid(x, alpha=0.1, key=jax.random.key(0))  # 0.1 >= 1/11: fine
    with pytest.raises(TypeError, match="`key`"):
        R.calibrate_ellipsoid(x, alpha=0.2)
    with pytest.raises(ValueError, match="`method`"):
        R.calibrate_interval(x[:, 0], method="hpd")
    with pytest.raises(ValueError, match="`weights`"):
        R.calibrate_box(x, weights=-np.ones(20))
    with pytest.raises(TypeError, match="`a`"):
        R.support(R.ball(np.zeros(2), 1.0), np.ones(3))


def test_cells_out_of_range_are_named():
    # issue 13: an id outside [0, n_cells) matched no cell, its sample was dropped silently
    x = np.random.default_rng(9).normal(size=(6, 2)).astype(np.float32)
    for bad in (2, -1):
        cells = np.array([0, 1, 0, 1, 0, bad], np.int32)
        with pytest.raises(ValueError, match="`cells` must lie in"):
            R.calibrate_cells(x, cells, n_cells=2)


@pytest.mark.parametrize(
    "bulk, field",
    [
        (R.Box(center=np.zeros(()), half=np.ones(2)), "`bulk.center` must be 1-D"),
        (R.Box(center=np.zeros(2), half=np.ones(3)), "`bulk.half` must have shape (2,)"),
        (R.Interval(lo=0.0, hi=np.ones(2)), "`bulk.hi` must have shape ()"),
        (R.Ellipsoid(center=np.zeros(2), chol=np.ones(2), radius=1.0), "`bulk.chol`"),
        (R.Ellipsoid(center=np.zeros(2), chol=np.eye(2), radius=np.ones(2)), "`bulk.radius`"),
        (
            R.Hull(points=np.zeros((4, 2)), mask=np.ones(3, bool)),
            "`bulk.mask` must have shape (4,)",
        ),
        (
            R.Union(members=R.ball(np.zeros(2), 1.0), labels=np.ones(1)),
            "`bulk.members.center` must be 2-D",
        ),
        (
            R.Union(
                members=R.Box(center=np.zeros((3, 2)), half=np.ones((3, 2))), labels=np.ones(2)
            ),
            "`bulk.labels` must have shape (3,)",
        ),
    ],
)
def test_bulk_fields_of_the_wrong_shape_are_named(bulk, field):
    # before: an IndexError from inside the support, or a message blaming `a`; `center`
    # (wave 47) returned the bad field as it was
    for fn in (R.support, R.contains):
        with pytest.raises(TypeError, match=re.escape(field)):
            fn(bulk, np.ones((5, 2)))
    with pytest.raises(TypeError, match=re.escape(field)):
        R.center(bulk)


def test_center_by_hand_and_of_a_bad_bulk():
    pts = np.array([[0.0, 0.0], [2.0, 0.0], [9.0, 9.0], [0.0, 4.0]], np.float32)
    hull = R.Hull(points=pts, mask=np.array([True, True, False, True]))
    union = R.Union(
        members=R.Box(center=np.array([[0.0, 1.0], [2.0, 3.0]]), half=np.ones((2, 2))),
        labels=np.arange(2),
    )
    for bulk, want in (
        (R.Interval(lo=-1.0, hi=3.0), 1.0),
        (hull, [2.0 / 3.0, 4.0 / 3.0]),  # the mean of the three retained points
        (union, [1.0, 2.0]),
    ):
        np.testing.assert_allclose(R.center(bulk), want, rtol=1e-6)
    # before: no retained point gave NaN (0 / 0), a NaN centre passed through
    empty = R.Hull(points=pts, mask=np.zeros(4, bool))
    nan_box = R.Box(center=np.array([np.nan, 0.0]), half=np.ones(2))
    for bad in (empty, nan_box):
        with pytest.raises(ValueError, match="bulk"):
            R.center(bad)
        with pytest.raises(Exception, match="bulk"):
            jax.block_until_ready(jax.jit(R.center)(bad))
    with pytest.raises(TypeError, match="bulk"):  # the suite's type checker names it first
        R.center(np.zeros(2))


def test_audit_bad_inputs():
    # wave-24 audit: each was a silent NaN, a silent wrong value or an opaque error
    nan, a = float("nan"), np.ones((3, 2), np.float32)
    for bad, err, name in (
        (lambda: R.ball(np.zeros(2), -1.0), ValueError, "radius"),
        (lambda: R.support(R.Box(center=np.zeros(2), half=-np.ones(2)), a), ValueError, "half"),
        (lambda: R.support(R.Interval(lo=np.float32(2), hi=np.float32(1)), a[:, 0]),
         ValueError, "lo"),
        (lambda: R.support(R.Hull(points=np.eye(2), mask=np.zeros(2, bool)), a), ValueError,
         "mask"),
        (lambda: R.contains(R.ball(np.zeros(2), 1.0), a, tol=-1.0), ValueError, "tol"),
        (lambda: R.huber(0.0), ValueError, "delta"),
        (lambda: R.newsvendor(h=-1.0), ValueError, "h"),
        (lambda: R.piecewise_linear(np.ones((2, 3)), np.ones(3), np.ones(2)), TypeError, "B"),
        (lambda: R.empirical(np.full((3, 2), nan)), ValueError, "xi"),
        (lambda: R.calibrate_interval(np.full(10, nan)), ValueError, "xi"),
        (lambda: R.upper_expectation(a[:, :0], 1.0, 0.1), TypeError, "values"),
        (lambda: R.upper_expectation(a, np.ones(3), 0.1, weights=-a), ValueError, "weights"),
        (lambda: R.credal_risk(a, np.ones(3), 0.1, tail=nan), ValueError, "tail"),
        (lambda: R.tail_bound(1.0, -1.0, 0.1, 0.2, 1.0), ValueError, "growth_L"),
        (lambda: R.fit(R.lad(), (a, a[:, 0]), R.ball(np.zeros(3), 1.0), 0.1,
                       R.LinearParams(np.zeros(2), np.zeros(())), schedule=()),
         ValueError, "schedule"),
    ):  # fmt: skip
        with pytest.raises(err, match=name):
            bad()
