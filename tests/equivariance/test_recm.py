"""Oracles for the RECM transform, gap estimators and baselines (spec 1.4 items 4-7)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxkit.equivariance as E

LAM = 0.1


def _linear_task(n=512, seed=0):
    g = E.cyclic_rot2d(8, mult_in=4, mult_out=3)
    return (g, *_linear_task_arrays(g, n, seed))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))  # one program (eager: op by op)
def _linear_task_arrays(g, n, seed):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    w1 = E.reynolds(jax.random.normal(k1, (g.d_out, g.d_in)) / np.sqrt(g.d_in), g)
    v = E.complement(jax.random.normal(k2, (g.d_out, g.d_in)), g)
    v = v / jnp.linalg.norm(v)
    x = jax.random.normal(k3, (n, g.d_in))
    q, _ = jnp.linalg.qr(x)  # exactly whitened: x^T x / n = I
    return w1, v, q * np.sqrt(n)


def _train_theta(g, w1, v, x, eps_values, steps):
    layer = E.RECMLinear(g, key=jax.random.key(5))
    params, static = eqx.partition(layer, eqx.is_inexact_array)
    opt = E.recm_optimizer(optax.adam(1e-2), learning_rate=0.05, decay=LAM)

    def run(eps):
        t = x @ (w1 + eps * v).T

        def loss(p):
            return 0.5 * jnp.mean(jnp.sum((eqx.combine(p, static)(x) - t) ** 2, -1))

        def step(c, _):
            p, s = c
            upd, s = opt.update(jax.grad(loss)(p), s, p)
            return (optax.apply_updates(p, upd), s), None

        (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
        m = eqx.combine(p, static)
        return m.theta, E.equivariance_error(lambda u: m(u, relax=False), x[:32], g)

    with jax.numpy_dtype_promotion("standard"):  # optax's Adam is not strict-clean
        return jax.jit(jax.vmap(run))(jnp.asarray(eps_values, jnp.float32))


def test_linear_task_theta_tracks_gap():
    g, w1, v, x = _linear_task()
    eps = [0.0, 0.05, 0.2, 0.5, 1.0]
    theta, err = _train_theta(g, w1, v, x, eps, steps=1500)
    theta = np.asarray(theta)
    assert theta[0] < 1e-3
    assert float(err[0]) < 1e-5
    np.testing.assert_allclose(theta[1:], np.asarray(eps[1:]) / (1 + LAM), rtol=0.02)
    assert np.all(np.diff(theta) > 0)


def test_modulation_contracts_with_zero_gradient():
    eta, lam = 0.05, 0.3
    tx = E.recm_modulation(eta, decay=lam)
    p = {"theta": jnp.asarray(0.8)}
    s = tx.init(p)
    for _ in range(3):
        u, s = tx.update({"theta": jnp.zeros([])}, s, p)
        new = optax.apply_updates(p, u)
        np.testing.assert_allclose(
            float(new["theta"]), float(p["theta"]) * (1 - eta * lam), rtol=1e-6
        )
        p = new
    assert int(s.count) == 3
    # clipping to [0, theta_max]
    u, _ = tx.update({"theta": jnp.asarray(100.0)}, s, p)
    assert float(optax.apply_updates(p, u)["theta"]) == 0.0
    u, _ = tx.update({"theta": jnp.asarray(-100.0)}, s, p)
    assert float(optax.apply_updates(p, u)["theta"]) == 1.0
    with pytest.raises(ValueError, match="params"):
        tx.update({"theta": jnp.zeros([])}, s)


def test_modulation_traced_hparams_and_state_types():
    tx = optax.inject_hyperparams(E.recm_modulation, static_args=("rule",))(
        learning_rate=0.1, decay=0.2
    )
    p = {"theta": jnp.asarray(0.5)}
    s = tx.init(p)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    _, s2 = step({"theta": jnp.asarray(0.1)}, s, p)
    assert jax.tree.structure(s2) == jax.tree.structure(s)
    assert all(
        a.dtype == b.dtype for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(s2), strict=True)
    )


def test_theta_labels_on_modules(key):
    g = E.cyclic_rot2d(4)
    model = {"a": E.RECMLinear(g, key=key), "b": E.RECMGroupConvC4(1, 1, key=key)}
    params = eqx.filter(model, eqx.is_inexact_array)
    labels = E.theta_labels(params)
    assert labels["a"].theta == "recm" and labels["a"].weight_eq == "main"
    assert labels["b"].theta == "recm" and labels["b"].weight_free == "main"


def test_cr_triangle_schedule():
    np.testing.assert_allclose(
        [float(E.cr_triangle_schedule(s, 100)) for s in (0, 25, 50, 75, 100)],
        [0.0, 0.5, 1.0, 0.5, 0.0],
        atol=1e-7,
    )
    assert float(E.cr_triangle_schedule(150, 100)) == 0.0  # past the end: documented 0
    bad = {"total": [(0, 0.0), (0, -5.0), (0, np.nan)], "step": [(-1.0, 100), (np.nan, 100)]}
    sched = jax.jit(E.cr_triangle_schedule)
    for name, pairs in bad.items():
        for s, t in pairs:  # before: step unchecked, traced total unchecked (0 or NaN out)
            with pytest.raises(ValueError, match=f"`{name}`"):
                E.cr_triangle_schedule(s, t)
            with pytest.raises(Exception, match=f"`{name}`"):  # traced (a training counter)
                jax.block_until_ready(sched(np.float32(s), np.float32(t)))


def test_lie_derivative_penalty_zero_iff_equivariant():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    so2 = E.so2_rot2d(mult_in=2, mult_out=2)
    c4 = E.cyclic_rot2d(4, mult_in=2, mult_out=2)

    @jax.jit  # one program (eager, each op compiled alone: 21 compiles)
    def penalties(w, x):
        pw_so2, pw_c4 = E.reynolds(w, so2), E.reynolds(w, c4)
        return (
            E.lie_derivative_penalty(pw_so2, so2, x),
            E.lie_derivative_penalty(w, so2, x),
            E.lie_derivative_penalty(pw_c4, c4, x),
            pw_so2,
            pw_c4,
        )

    pe, pw, pc, pw_so2, pw_c4 = (np.asarray(a, np.float64) for a in penalties(w, x))
    x, w = x.astype(np.float64), w.astype(np.float64)
    # only the |Bx| term left (norms in NumPy)
    np.testing.assert_allclose(pe, np.linalg.norm(x @ pw_so2.T), rtol=1e-4)
    assert pw > np.linalg.norm(x @ w.T) + 0.1
    np.testing.assert_allclose(pc, np.linalg.norm(x @ pw_c4.T), rtol=1e-4)


def test_rpp_penalty(key):
    g = E.cyclic_rot2d(4)
    m = [E.RECMLinear(g, key=key, theta_init=0.5)]
    p = E.rpp_penalty(m, eq_weight=0.0, free_weight=2.0)
    np.testing.assert_allclose(float(p), 2.0 * 0.25, rtol=1e-6)


def test_rpp_penalty_equivariant_term(key):
    """With the equivariant term on: eq_weight |P(A)|^2 with P the group average (oracle)."""
    g = E.cyclic_rot2d(4)
    layer = E.RECMLinear(g, key=key, theta_init=0.5)
    rin, rout = (np.asarray(r, np.float64) for r in g.elements(jnp.float32))
    a = np.asarray(layer.weight_eq, np.float64)
    pa = np.mean([ro @ a @ ri.T for ri, ro in zip(rin, rout, strict=True)], axis=0)
    want = 3.0 * np.sum(pa * pa) + 2.0 * 0.25
    assert abs(np.sum(pa * pa) - np.sum(a * a)) > 0.1  # P(A) differs from A: the term can fail
    np.testing.assert_allclose(
        float(E.rpp_penalty([layer], eq_weight=3.0, free_weight=2.0)), want, rtol=1e-5
    )


def test_linear_gap_recovers_eps():
    g, w1, v, _ = _linear_task()
    x = jax.random.normal(jax.random.key(11), (10_000, g.d_in))
    for eps in (0.0, 0.2, 0.5, 1.0):
        gap = E.linear_gap(x, x @ (w1 + eps * v).T, g)
        assert abs(float(gap.absolute) - eps) <= 0.02 * max(eps, 1e-2)
    bad = jnp.zeros((10, g.d_out + 1))
    with pytest.raises(TypeError, match="`t`"):
        E.linear_gap(x[:10], bad, g)


def test_mmd_permutation_test_accepts_and_rejects():
    g, w1, v, _ = _linear_task()
    x = jax.random.normal(jax.random.key(12), (1000, g.d_in))
    f = jax.jit(lambda a, b, k: E.mmd_gap(a, b, g, key=k, n_permutations=200))
    p0 = f(x, x @ w1.T, jax.random.key(0)).p_value
    p5 = f(x, x @ (w1 + 0.5 * v).T, jax.random.key(0)).p_value
    assert float(p0) > 0.05
    assert float(p5) < 0.05
    with pytest.raises(ValueError, match="kernel"):
        E.mmd_gap(x, x @ w1.T, g, key=jax.random.key(0), kernel="laplace")


def _orbit(x, g):
    rin, _ = g.elements(x.dtype)
    return jnp.einsum("gij,nj->gni", rin, x).reshape(-1, x.shape[-1])


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_deep_symmetric_task_drives_theta_to_zero():
    """All layers see exactly C_8-invariant laws (orbit-augmented batch): every theta -> 0."""
    gin = E.cyclic_rot2d(8, mult_in=2, mult_out=4)
    ghid = E.cyclic_rot2d(8, mult_in=4, mult_out=4)
    gout = E.cyclic_rot2d(8, mult_in=4, mult_out=1)
    keys = jax.random.split(jax.random.key(3), 6)
    teacher = [
        E.RECMLinear(gr, key=k, theta_init=0.0)
        for gr, k in zip((gin, ghid, gout), keys[:3], strict=True)
    ]
    student = [
        E.RECMLinear(gr, key=k, theta_init=0.5)
        for gr, k in zip((gin, ghid, gout), keys[3:], strict=True)
    ]

    def norm_act(h):  # equivariant: scales each R^2 vector by a function of its norm
        v = h.reshape(*h.shape[:-1], -1, 2)
        r = jnp.sqrt(jnp.sum(v * v, -1, keepdims=True) + 1e-6)
        return (v * jnp.tanh(r) / r).reshape(h.shape)

    def net(layers, x):
        h = norm_act(layers[0](x))
        h = norm_act(layers[1](h))
        return layers[2](h)

    x = _orbit(jax.random.normal(jax.random.key(4), (32, gin.d_in)), gin)
    t = net(teacher, x)
    params, static = eqx.partition(student, eqx.is_inexact_array)
    opt = E.recm_optimizer(optax.adam(3e-3), learning_rate=0.05, decay=LAM)

    def loss(p):
        return 0.5 * jnp.mean(jnp.sum((net(eqx.combine(p, static), x) - t) ** 2, -1))

    def step(c, _):
        p, s = c
        upd, s = opt.update(jax.grad(loss)(p), s, p)
        return (optax.apply_updates(p, upd), s), None

    with jax.numpy_dtype_promotion("standard"):
        run = jax.jit(lambda p: jax.lax.scan(step, (p, opt.init(p)), None, length=1500)[0][0])
        p = run(params)
    thetas = [float(m.theta) for m in eqx.combine(p, static)]
    assert max(thetas) < 1e-2, thetas
