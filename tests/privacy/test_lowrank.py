"""Oracles for jaxkit.privacy.lowrank (spec training.md §1.4: 1, 3, 4, 5, 7)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit.privacy import lowrank as L
from jaxkit.privacy._lowrank_retract import _balance_from_cache
from jaxkit.privacy._lowrank_tangent import _horizontal
from jaxkit.privacy._prism_adaptive import _retract_balanced
from tests.privacy._helpers import factor_grads, factors, gauge, random_gl, truncated


@pytest.mark.parametrize(
    "m,n,r", [(12, 9, 3), pytest.param(64, 48, 8, marks=pytest.mark.slow), (7, 7, 7)]
)
def test_lift_equals_dense_projection(key, m, n, r):
    k1, k2 = jax.random.split(key)
    f = factors(k1, m, n, r)
    gd = jax.random.normal(k2, (m, n))
    g = factor_grads(f, gd)
    d = L.tangent_lift(f, g, L.gram_cache(f))
    want = L.project_tangent_dense(f, gd)
    np.testing.assert_allclose(L.tangent_dense(f, d), want, rtol=1e-5, atol=2e-5 * r)
    # the spec's closed form of the lift (in NumPy: no eager jax op compiles)
    a, b, ga = (np.asarray(v, np.float64) for v in (f.a, f.b, g.a))
    n_inv = np.linalg.inv(b.T @ b)
    pu = a @ np.linalg.solve(a.T @ a, a.T)
    da = ga @ n_inv - 0.5 * pu @ ga @ n_inv
    np.testing.assert_allclose(d.a, da, rtol=1e-3, atol=1e-3)


@jax.jit  # one compiled program for the oracle (eager, each glue op would compile alone)
def _coords_quantities(key):
    k1, k2, k3 = jax.random.split(key, 3)
    f = factors(k1, 10, 8, 3, jnp.float64)
    c = L.gram_cache(f)
    gd = jax.random.normal(k2, (10, 8), jnp.float64)
    co = L.tangent_coords(f, factor_grads(f, gd), c)
    dense = L.project_tangent_dense(f, gd)
    d = L.from_coords(f, co, c)
    back = L.tangent_coords(f, factor_grads(f, L.tangent_dense(f, d)), c)
    gd2 = jax.random.normal(k3, (10, 8), jnp.float64)
    co2 = L.tangent_coords(f, factor_grads(f, gd2), c)
    ip = sum(jnp.sum(x * y) for x, y in zip(co, co2, strict=True))
    return dict(
        coords_sq=L.coords_norm_sq(co),
        tangent_sq=L.tangent_norm_sq(f, d),
        dense_sq=jnp.sum(dense**2),
        back=back,
        co=co,
        ip=ip,
        dense_ip=jnp.sum(dense * L.project_tangent_dense(f, gd2)),
        u_up=c.u.T @ co.up,
        v_vp=c.v.T @ co.vp,
    )


def test_norms_coords_isometry_and_inverse(key):
    with jax.enable_x64(True):
        q = _coords_quantities(key)
        np.testing.assert_allclose(q["coords_sq"], q["dense_sq"], rtol=1e-10)
        np.testing.assert_allclose(q["tangent_sq"], q["dense_sq"], rtol=1e-10)
        # from_coords . tangent_coords = id on T_Z: coordinates of a tangent vector
        for x, y in zip(q["back"], q["co"], strict=True):
            np.testing.assert_allclose(x, y, atol=1e-10)
        # isometry: inner products preserved
        np.testing.assert_allclose(q["ip"], q["dense_ip"], rtol=1e-10)
        # orthogonality constraints of the coordinates
        np.testing.assert_allclose(q["u_up"], 0, atol=1e-10)
        np.testing.assert_allclose(q["v_vp"], 0, atol=1e-10)


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_gauge_invariance_of_frame_lift_norm_noise(key):
    with jax.enable_x64(True):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        f = factors(k1, 11, 9, 4, jnp.float64)
        f2 = gauge(f, random_gl(k3, 4, cond=1e3, dtype=jnp.float64))
        gd = jax.random.normal(k2, (11, 9), jnp.float64)
        c, c2 = L.gram_cache(f), L.gram_cache(f2)
        np.testing.assert_allclose(c.u, c2.u, atol=1e-8)
        np.testing.assert_allclose(c.v, c2.v, atol=1e-8)
        d = L.tangent_lift(f, factor_grads(f, gd), c)
        d2 = L.tangent_lift(f2, factor_grads(f2, gd), c2)
        np.testing.assert_allclose(L.tangent_dense(f, d), L.tangent_dense(f2, d2), atol=1e-9)
        np.testing.assert_allclose(L.tangent_norm_sq(f, d), L.tangent_norm_sq(f2, d2), rtol=1e-9)
        z = L.sample_tangent_noise(f, c, std=0.7, key=k4)
        z2 = L.sample_tangent_noise(f2, c2, std=0.7, key=k4)
        np.testing.assert_allclose(L.tangent_dense(f, z), L.tangent_dense(f2, z2), atol=1e-8)
        # gauge covariance of the factor form: dA' = dA G
        hz = L.horizontal_lift(f, d, c)
        np.testing.assert_allclose(L.tangent_dense(f, hz), L.tangent_dense(f, d), atol=1e-10)
        np.testing.assert_allclose(f.a.T @ hz.a, hz.b.T @ f.b, atol=1e-9)


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_noise_energy_and_covariance(key):
    m, n, r = 40, 30, 4
    k1, k2, k3 = jax.random.split(key, 3)
    f = factors(k1, m, n, r)
    c = L.gram_cache(f)
    std = 0.3
    keys = jax.random.split(k2, 20000)
    e = jax.jit(jax.vmap(lambda k: L.coords_norm_sq(L.sample_tangent_coords(c, std=std, key=k))))(
        keys
    )
    want = std**2 * r * (m + n - r)
    assert abs(float(jnp.mean(e)) / want - 1) < 0.02
    # dense: P_T(xi) = xi and the energy on Z of the factor-form noise
    z = L.sample_tangent_noise(f, c, std=std, key=k3)
    zd = L.tangent_dense(f, z)
    np.testing.assert_allclose(L.project_tangent_dense(f, zd), zd, atol=1e-4)
    # covariance of vec(xi) = std^2 P_T (Kronecker form) on a small size
    ms, ns, rs = 5, 4, 2
    fs = factors(k3, ms, ns, rs)
    cs = L.gram_cache(fs)
    xs = jax.jit(
        jax.vmap(
            lambda k: L.tangent_dense(fs, L.sample_tangent_noise(fs, cs, std=1.0, key=k)).T.reshape(
                -1
            )
        )
    )(keys)
    cov = np.cov(np.asarray(xs, np.float64).T)
    qa, _ = np.linalg.qr(np.asarray(fs.a, np.float64))
    qb, _ = np.linalg.qr(np.asarray(fs.b, np.float64))
    pu, pv = qa @ qa.T, qb @ qb.T
    pt = np.kron(np.eye(ns), pu) + np.kron(pv, np.eye(ms)) - np.kron(pv, pu)
    assert np.max(np.abs(cov - pt)) < 0.07
    assert abs(np.trace(pt) - rs * (ms + ns - rs)) < 1e-9


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_naive_amplification_formula(key):
    m, n, r, tau = 20, 15, 3, 0.5
    k1, k2 = jax.random.split(key)
    f = factors(k1, m, n, r)
    keys = jax.random.split(k2, 4000)

    def energy(ff, k):
        ka, kb = jax.random.split(k)
        na = tau * jax.random.normal(ka, ff.a.shape)
        nb = tau * jax.random.normal(kb, ff.b.shape)
        return jnp.sum((na @ ff.b.T + ff.a @ nb.T) ** 2)

    for c in (0.1, 1.0, 10.0):
        fc = gauge(f, c * jnp.eye(r))
        mc = float(jnp.mean(jax.vmap(lambda k, f_=fc: energy(f_, k))(keys)))
        want = float(L.naive_noise_energy(fc, tau=tau))
        assert abs(mc / want - 1) < 0.05, (c, mc, want)
    e = [float(L.naive_noise_energy(gauge(f, c * jnp.eye(r)), tau=tau)) for c in (1e-2, 1, 1e2)]
    assert e[0] > 100 * e[1] and e[2] > 100 * e[1]  # diverges under gauge scaling
    assert float(L.prism_noise_energy(f, std=tau)) == pytest.approx(tau**2 * r * (m + n - r))


def test_retraction_oracles(key):
    with jax.enable_x64(True):
        k1, k2, k3 = jax.random.split(key, 3)
        m, n, r = 12, 10, 3
        f = L.balance(factors(k1, m, n, r, jnp.float64))
        d = L.tangent_lift(
            f, factor_grads(f, jax.random.normal(k2, (m, n), jnp.float64)), L.gram_cache(f)
        )
        # the checks' arithmetic in NumPy (f64, as the jax values): no eager op compiles
        xi = np.asarray(L.tangent_dense(f, d))
        z = np.asarray(L.to_dense(f))
        for eta in (0.3, 1e-2):
            out = L.retract(f, d, eta=eta)
            np.testing.assert_allclose(L.to_dense(out), truncated(z + eta * xi, r), atol=1e-10)
            oa, ob = np.asarray(out.a), np.asarray(out.b)
            np.testing.assert_allclose(oa.T @ oa, ob.T @ ob, atol=1e-10)
        # first order: ||Retr - (Z + eta xi)|| = O(eta^2)
        errs = [
            float(np.linalg.norm(np.asarray(L.to_dense(L.retract(f, d, eta=e))) - (z + e * xi)))
            for e in (1e-2, 1e-3)
        ]
        assert errs[1] < errs[0] / 50
        # Procrustes alignment minimizes the distance over O(r)
        out = L.retract(f, d, eta=0.3)
        oa, ob, fa, fb = (np.asarray(v) for v in (out.a, out.b, f.a, f.b))
        best = float(np.sum((oa - fa) ** 2) + np.sum((ob - fb) ** 2))
        gs = np.asarray(jax.random.normal(k3, (20, r, r), jnp.float64))
        for g in gs:
            q, _ = np.linalg.qr(g)
            other = float(np.sum((oa @ q - fa) ** 2) + np.sum((ob @ q - fb) ** 2))
            assert best <= other + 1e-10


def test_inits(key):
    w = np.random.default_rng(0).standard_normal((16, 12)).astype(np.float32)
    k2 = jax.random.fold_in(key, 1)
    si = L.spectral_init(jnp.asarray(w), rank=3, key=k2, scale=2.0)
    # the checks' arithmetic in NumPy: no eager op compiles
    z = 2.0 * np.asarray(L.to_dense(si.factors))
    np.testing.assert_allclose(np.asarray(si.residual) + z, w, atol=1e-5)
    np.testing.assert_allclose(z, truncated(w, 3), atol=1e-3)
    f = L.balanced_random_init(key=k2, m=16, n=12, rank=3, scale=0.02)
    a, b = np.asarray(f.a), np.asarray(f.b)
    np.testing.assert_allclose(a.T @ a, 4e-4 * np.eye(3), atol=1e-7)
    np.testing.assert_allclose(b.T @ b, 4e-4 * np.eye(3), atol=1e-7)


def test_bad_inputs(key):
    with pytest.raises(ValueError, match="rank"):
        L.spectral_init(jnp.ones((4, 3)), rank=4, key=key)
    with pytest.raises(ValueError, match="rank"):
        L.balanced_random_init(key=key, m=4, n=3, rank=5)
    with pytest.raises(TypeError, match="mismatched"):
        L.gram_cache(L.LoraFactors(jnp.ones((5, 2)), jnp.ones((4, 3))))
    with pytest.raises(ValueError, match="rank"):
        L.gram_cache(L.LoraFactors(jnp.ones((5, 4)), jnp.ones((3, 4))))
    f = L.LoraFactors(np.eye(5, 2, dtype=np.float32), np.eye(4, 2, dtype=np.float32))
    with pytest.raises(ValueError, match="rcond"):
        L.gram_cache(f, rcond=np.nan)
    with pytest.raises(ValueError, match="eta"):  # NaN factors before
        L.retract(f, f, eta=np.nan)
    with pytest.raises(ValueError, match="std"):
        L.prism_noise_energy(f, std=-1.0)
    with pytest.raises(ValueError, match="tau"):
        L.naive_noise_energy(f, tau=np.inf)
    c = L.gram_cache(f)
    with pytest.raises(ValueError, match="std"):
        L.sample_tangent_noise(f, c, std=np.nan, key=key)
    # traced: runtime errors naming the argument
    with pytest.raises(Exception, match="eta"):
        jax.block_until_ready(jax.jit(lambda e: L.retract(f, f, eta=e))(np.inf))
    with pytest.raises(Exception, match="std"):
        jax.block_until_ready(
            jax.jit(lambda s: L.sample_tangent_noise(f, c, std=s, key=key))(np.float32(-1.0))
        )


def test_dense_oracles_and_tangent_pairs_check_shapes():
    """to_dense / project_tangent_dense and the tangent functions name a bad argument.

    Before wave 25: a stack gave a wrong to_dense (``b.T`` reversed every axis), a
    transposed ``g`` or one of another dtype reached matmul's anonymous error (or, square,
    a silent wrong projection), a gradient pair of the wrong shape the same.
    """
    f = L.LoraFactors(np.eye(5, 2, dtype=np.float32), np.eye(4, 2, dtype=np.float32))
    stack = L.LoraFactors(np.stack([f.a, 2 * f.a, 3 * f.a]), np.stack([f.b, f.b, f.b]))
    np.testing.assert_allclose(L.to_dense(stack), np.stack([k * f.a @ f.b.T for k in (1, 2, 3)]))
    with pytest.raises(TypeError, match="`f`"):
        L.to_dense(L.LoraFactors(f.a, f.b[:, :1]))
    with pytest.raises(TypeError, match="f.a"):
        L.to_dense(L.LoraFactors(np.ones((5, 2), np.int32), f.b))
    with pytest.raises(TypeError, match="`g`"):
        L.project_tangent_dense(f, np.ones((4, 5), np.float32))  # transposed
    with pytest.raises(TypeError, match="[`']g[`']"):  # (the test hook's jaxtyping: 'g')
        L.project_tangent_dense(f, np.ones((5, 4), np.int32))
    with pytest.raises(TypeError, match="`g`"):
        L.project_tangent_dense(f, np.ones((5, 4), jnp.bfloat16))  # not the factors dtype
    with pytest.raises(TypeError, match="`f`"):
        L.project_tangent_dense(stack, np.ones((5, 4), np.float32))
    bad = L.LoraFactors(f.a, f.a)  # b of a's shape [5, 2], not [4, 2]
    with pytest.raises(TypeError, match="`g`"):
        L.tangent_lift(f, bad, L.gram_cache(f))
    for fn in (L.tangent_dense, L.tangent_norm_sq):
        with pytest.raises(TypeError, match="`d`"):
            fn(f, bad)
    with pytest.raises(TypeError, match="`d`"):
        L.retract(f, bad, eta=0.1)
    # record fields: a stack or a one-sided axis names the field (before: JAX's error, or for
    # a GramCache field / the noise's `f`, a silently accepted shape)
    with pytest.raises(TypeError, match="`f.a`"):
        L.gram_cache(L.LoraFactors(f.a[None], f.b))
    with pytest.raises(TypeError, match="`f`"):
        L.retract(stack, stack, eta=0.1)
    c = L.gram_cache(f)
    with pytest.raises(TypeError, match="`cache.s`"):
        L.sample_tangent_coords(c._replace(s=c.s[None]), std=0.1, key=jax.random.key(0))
    with pytest.raises(TypeError, match="`cache.m_gram`"):
        L.sample_tangent_noise(f, c._replace(m_gram=c.m_gram[0]), std=0.1, key=jax.random.key(0))
    with pytest.raises(TypeError, match="`f.b`"):
        L.prism_noise_energy(L.LoraFactors(f.a, f.b[0]), std=0.1)


def test_jit_vmap_dtype(key):
    f = factors(key, 8, 6, 2, jnp.bfloat16)
    gs = jax.random.normal(key, (5, 8, 6), jnp.bfloat16)
    g = factor_grads(f, gs)
    c = L.gram_cache(f)
    d = jax.jit(jax.vmap(L.tangent_lift, in_axes=(None, 0, None)))(f, g, c)
    assert d.a.dtype == jnp.bfloat16 and d.a.shape == (5, 8, 2)
    assert L.retract(f, jax.tree.map(lambda x: x[0], d), eta=0.1).a.dtype == jnp.bfloat16


@pytest.mark.parametrize("in_span", [False, True])
def test_balanced_frame_geometry_equals_gram_and_qr_formulas(key, in_span):
    """PRISM's adaptive step reuses the balanced frame: against the general formulas (f64).

    Balanced, aligned factors ``(u sqrt(S) Q, v sqrt(S) Q)`` have both Grams ``Q^T S Q``,
    so the horizontal lift takes ``(s, Q^T)`` for both ``eigh``s, and the retraction's
    QR of ``[a, dA]`` is ``[u, Q_p] R`` with a thin QR of the part of ``dA`` orthogonal
    to ``u``. ``in_span``: ``dA`` (and ``dB``) inside the factors' column spaces, so
    that orthogonal part is round-off.
    """
    with jax.enable_x64(True):
        pairs = _frame_formula_pairs(key, jnp.asarray(in_span))
        for got, want in pairs:  # horizontal lift, then the retraction at two step sizes
            for x, y in zip(got, want, strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-11)


@jax.jit  # one program for both cases (eager, its glue compiled op by op: 64 compiles)
def _frame_formula_pairs(key, in_span):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    f = gauge(factors(k1, 11, 9, 4, jnp.float64), random_gl(k2, 4, cond=1e2, dtype=jnp.float64))
    cache = L.gram_cache(f)
    pb, _, _, q = _balance_from_cache(f, cache)
    d = L.LoraFactors(
        jax.random.normal(k3, (11, 4), jnp.float64), jax.random.normal(k4, (9, 4), jnp.float64)
    )
    d = jax.tree.map(
        lambda x, y: jnp.where(in_span, y, x), d, L.LoraFactors(pb.a @ d.a[:4], pb.b @ d.b[:4])
    )
    eig = (cache.s, q.T)
    pairs = [(_horizontal(pb, d, eig, eig), L.horizontal_lift(pb, d, L.gram_cache(pb)))]
    for eta in (0.3, 1e-3):
        pairs.append(
            (_retract_balanced(cache, q, pb, d, eta=eta), L.retract(pb, d, eta=eta, align=True))
        )
    return pairs
