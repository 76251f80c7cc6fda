"""Oracles for the PRISM transforms (spec training.md §1.4: 2, 3, 6, 9, sharding, resume)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import privacy
from jaxkit.privacy import lowrank as L
from tests.privacy._helpers import factor_grads, factors, gauge, random_gl, truncated

M, N, R, B = 10, 8, 3, 8


def _setup(key, dtype=jnp.float64, b=B, m=M, n=N, r=R):
    k1, k2 = jax.random.split(key)
    f = L.balance(factors(k1, m, n, r, dtype))
    gs = (
        jax.random.normal(k2, (b, m, n), dtype)
        * jnp.linspace(0.2, 3.0, b, dtype=dtype)[:, None, None]
    )
    return f, gs


def _tree(f):
    """Two LoRA modules (one stacked) plus a Euclidean leaf."""
    return {
        "q": f,
        "stack": jax.tree.map(lambda x: jnp.stack([x, 2 * x]), f),
        "head": jnp.ones((3,), f.a.dtype),
    }


def _tree_grads(f, gs):
    g = factor_grads(f, gs)
    g2 = factor_grads(jax.tree.map(lambda x: 2 * x, f), gs)
    stack = jax.tree.map(lambda x, y: jnp.stack([x, y], 1), g, g2)
    return {"q": g, "stack": stack, "head": gs[:, 0, :3]}


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_aggregator_gauge_invariance(key):
    """Norms, clip factors, released update and (same key) noise on Z do not depend on G."""
    with jax.enable_x64(True):
        f, gs = _setup(key)
        gg = random_gl(jax.random.fold_in(key, 1), R, cond=1e3, dtype=jnp.float64)
        f2 = gauge(f, gg)
        tx = privacy.prism_privatize(
            clip_norm=2.0, noise_multiplier=1.3, denom=B, key=jax.random.key(7)
        )
        out = {}
        upd = jax.jit(tx.update)
        for name, ff in (("id", f), ("g", f2)):
            p, g = _tree(ff), _tree_grads(ff, gs)
            d, st = upd(g, tx.init(p), p)
            out[name] = (
                L.tangent_dense(ff, d["q"]),
                jax.vmap(L.tangent_dense)(p["stack"], d["stack"]),
                d["head"],
                st.noise_energy,
            )
            # per-example intrinsic norms (the quantities clipped)
            c = L.gram_cache(ff)
            out[name] += (
                jax.vmap(lambda h, ff=ff, c=c: L.coords_norm_sq(L.tangent_coords(ff, h, c)))(
                    factor_grads(ff, gs)
                ),
            )
        for x, y in zip(out["id"], out["g"], strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-8, atol=1e-8)
        # the clip factors differ between examples (so clipping really happened)
        s = np.sqrt(np.asarray(out["id"][4]))
        assert s.min() < 2.0 < s.max()


def test_full_step_gauge_invariant(key):
    """First PRISM step lands on the same Z for (A, B) and (AG, BG^{-T}); O(r) afterwards."""
    with jax.enable_x64(True):
        f, gs = _setup(key)
        tx = privacy.prism(
            0.05,
            clip_norm=1.0,
            noise_multiplier=1.0,
            denom=B,
            key=jax.random.key(3),
            floor_mode="geometry",
            debias=True,
        )

        # one compiled program for every gauge: the re-gauge, init and three steps (a scan)
        # (eager, each glue op and init's constructors compiled alone: 33 compiles)
        @jax.jit
        def trajectory(gg):
            p = gauge(f, gg)

            def step(c, _):
                p, st = c
                u, st = tx.update(factor_grads(p, gs), st, p)
                p = optax.apply_updates(p, u)
                return (p, st), L.to_dense(p)

            return jax.lax.scan(step, (p, tx.init(p)), None, length=3)[1]

        # the gauges built in NumPy: the identity, G in GL(r) with condition number 1e3,
        # and an orthogonal G
        rng = np.random.default_rng(2)
        q1, q2, q3 = (np.linalg.qr(rng.standard_normal((R, R)))[0] for _ in range(3))
        res = [
            np.asarray(trajectory(jnp.asarray(gg)))
            for gg in (np.eye(R), (q1 * np.geomspace(1.0, 1e3, R)[None, :]) @ q2.T, q3)
        ]
        np.testing.assert_allclose(res[1][0], res[0][0], atol=1e-9)  # GL(r), first step
        for k in range(3):  # O(r), all steps
            np.testing.assert_allclose(res[2][k], res[0][k], atol=1e-9)


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_noise_energy_closed_form(key):
    """Released noise energy on Z = sigma^2 C^2 / b^2 * r(m+n-r) (within 2%), noise in T_Z."""
    m, n, r, b = 24, 16, 4, 4
    f, _ = _setup(key, jnp.float32, b=b, m=m, n=n, r=r)
    zero = jax.tree.map(lambda x: jnp.zeros((b, *x.shape), x.dtype), f)
    sigma, cn = 1.5, 0.8
    tx = privacy.prism_privatize(clip_norm=cn, noise_multiplier=sigma, denom=b, key=key)

    def one(t):
        st = privacy.PrivatizeState(t, key, jnp.zeros([], jnp.float32))
        d, st = tx.update(zero, st, f)
        return jnp.sum(L.tangent_dense(f, d) ** 2), st.noise_energy

    e, logged = jax.jit(jax.vmap(one))(jnp.arange(1000, dtype=jnp.int32))  # 2% is > 5 sd
    want = sigma**2 * cn**2 / b**2 * r * (m + n - r)
    assert abs(float(jnp.mean(e)) / want - 1) < 0.02
    np.testing.assert_allclose(e, logged, rtol=1e-4)
    st = privacy.PrivatizeState(jnp.int32(0), key, jnp.zeros([], jnp.float32))
    d, _ = tx.update(zero, st, f)
    z = L.tangent_dense(f, d)
    np.testing.assert_allclose(L.project_tangent_dense(f, z), z, atol=1e-5)


def test_riemannian_gd_limit(key):
    """sigma=0, C=inf, adaptive off: PRISM = Riemannian GD (truncated SVD of Z - eta P_T(grad))."""
    with jax.enable_x64(True):
        f, gs = _setup(key)
        tx = privacy.prism(
            0.1, clip_norm=jnp.inf, noise_multiplier=0.0, denom=B, key=key, adaptive=False
        )

        @jax.jit  # one program: the step and the dense maths (eager, op by op)
        def got_and_target(f, gs):
            u, _ = tx.update(factor_grads(f, gs), tx.init(f), f)
            got = L.to_dense(optax.apply_updates(f, u))
            return got, L.to_dense(f) - 0.1 * L.project_tangent_dense(f, gs.mean(0))

        got, target = got_and_target(f, gs)
        np.testing.assert_allclose(got, truncated(target, R), atol=1e-10)


# slow: the default run keeps gauge invariance, the sensitivity bound and the
# Riemannian-GD limit; this equivalence re-checks the release at full rank
@pytest.mark.slow
def test_full_rank_is_dp_sgd_on_z(key):
    """r = min(m, n): P_T = I, intrinsic clip = Frobenius clip of G, release = DP-SGD on Z."""
    with jax.enable_x64(True):
        m, n = 6, 4
        f, gs = _setup(key, b=5, m=m, n=n, r=n)
        cn, sigma = 1.0, 0.7
        tx = privacy.prism_privatize(clip_norm=cn, noise_multiplier=sigma, denom=5.0, key=key)
        d, _ = tx.update(factor_grads(f, gs), tx.init(f), f)
        norms = jnp.sqrt(jnp.sum(gs**2, axis=(1, 2)))
        clipped = jnp.sum(gs * jnp.minimum(1.0, cn / norms)[:, None, None], 0) / 5.0
        nz = L.tangent_dense(f, d) - clipped
        # the same key with sigma=0 gives exactly the clipped mean
        tx0 = privacy.prism_privatize(clip_norm=cn, noise_multiplier=0.0, denom=5.0, key=key)
        d0, _ = tx0.update(factor_grads(f, gs), tx0.init(f), f)
        np.testing.assert_allclose(L.tangent_dense(f, d0), clipped, atol=1e-10)
        # the noise is isotropic N(0, (sigma C / b)^2 I) on all m*n entries
        c = L.gram_cache(f)
        xs = jax.vmap(
            lambda k: L.tangent_dense(f, L.sample_tangent_noise(f, c, std=1.0, key=k)).reshape(-1)
        )(jax.random.split(key, 5000))
        np.testing.assert_allclose(np.cov(np.asarray(xs).T), np.eye(m * n), atol=0.15)
        assert float(jnp.sum(nz**2)) > 0


def _no_q(tree):
    """``_tree`` without its unstacked module: the stacked one runs the same per-slice code
    (``stackmap`` / ``stackloop`` over zero axes call it directly), and the clipped norm
    still sums a LoRA module and a Euclidean leaf (measured: compiling the update took 1.9 s
    of CPU with the unstacked module, 1.1 s without)."""
    return {k: v for k, v in tree.items() if k != "q"}


def _released_distance(p, d, d2):
    """Frobenius distance between two released updates of ``_no_q(_tree)`` (dense tangents)."""
    return jnp.sqrt(
        jnp.sum(
            (
                jax.vmap(L.tangent_dense)(p["stack"], d["stack"])
                - jax.vmap(L.tangent_dense)(p["stack"], d2["stack"])
            )
            ** 2
        )
        + jnp.sum((d["head"] - d2["head"]) ** 2)
    )


@pytest.mark.parametrize("scale", [pytest.param(1e3, marks=pytest.mark.slow), 1e8])
def test_sensitivity_bounded_by_clip(key, scale):
    """Replacing one example by an adversarial huge gradient moves the pre-noise sum by <= C."""
    with jax.enable_x64(True):
        f, gs = _setup(key)
        p, g = _no_q(_tree(f)), _no_q(_tree_grads(f, gs))
        cn = 0.5
        tx = privacy.prism_privatize(clip_norm=cn, noise_multiplier=0.0, denom=1.0, key=key)
        upd = jax.jit(tx.update)
        state = tx.init(p)
        d, _ = upd(g, state, p)

        # one compiled program per step of the loop below (eager, each op compiles alone)
        @jax.jit
        def neighbours(k, j):
            adv = _no_q(_tree_grads(f, scale * jax.random.normal(k, (B, M, N), jnp.float64)))
            g2 = jax.tree.map(lambda x, y: x.at[j].set(y[j]), g, adv)
            return g2, jax.tree.map(lambda x: x.at[j].set(0.0), g2)

        dist = jax.jit(_released_distance)
        for j, k in enumerate(jax.random.split(jax.random.fold_in(key, 9), 4)):
            g2, g3 = neighbours(k, j)
            d2, _ = upd(g2, state, p)
            d3, _ = upd(g3, state, p)
            # replace-one: 2C
            assert float(dist(p, d, d2)) <= 2 * cn * (1 + 1e-6)
            # add/remove: dropping example j changes the sum by <= C
            np.testing.assert_allclose(float(dist(p, d3, d2)), cn, rtol=1e-6)


def test_one_vs_eight_devices_same_step(key, mesh8):
    """Noise is drawn once after the reduction: 8-device shard_map step == 1-device step.

    One LoRA module and one Euclidean leaf: both reductions (the factor sums and the dense
    sum) cross the devices. A stacked module's sums go through the same ``psum`` line; it
    made both programs about twice as large (its frame maths is a second ``lax.map`` body)
    without a reduction of its own, and the carry tests keep it.
    """
    f, gs = _setup(key, jnp.float32, b=16)
    p = {"q": f, "head": jnp.ones((3,), f.a.dtype)}
    g = {"q": factor_grads(f, gs), "head": gs[:, 0, :3]}
    tx = privacy.prism(0.05, clip_norm=1.0, noise_multiplier=1.0, denom=16.0, key=jax.random.key(5))
    txs = privacy.prism(
        0.05,
        clip_norm=1.0,
        noise_multiplier=1.0,
        denom=16.0,
        key=jax.random.key(5),
        axis_name="data",
    )
    st = tx.init(p)
    want, _ = jax.jit(tx.update)(g, st, p)
    rep = jax.P()
    gspec = jax.tree.map(lambda x: jax.P("data", *([None] * (x.ndim - 1))), g)
    with jax.set_mesh(mesh8):
        gsh = jax.tree.map(lambda x, s: jax.device_put(x, jax.NamedSharding(mesh8, s)), g, gspec)
        step = jax.jit(
            jax.shard_map(
                lambda g_, s_, p_: txs.update(g_, s_, p_),
                mesh=mesh8,
                in_specs=(gspec, rep, rep),
                out_specs=(rep, rep),
            )
        )
        got, _ = step(gsh, st, p)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5)


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_resume_redraws_same_noise(key, tmp_path):
    """Step t's noise depends only on (key, t): a restored checkpoint gives the same steps."""
    import orbax.checkpoint as ocp

    f, gs = _setup(key, jnp.float32)
    tx = privacy.prism(0.05, clip_norm=1.0, noise_multiplier=1.0, denom=B, key=jax.random.key(11))
    step = jax.jit(tx.update)
    p, st = f, tx.init(f)
    traj = []
    for t in range(3):
        if t == 1:
            ckpt = ocp.StandardCheckpointer()
            ckpt.save(tmp_path / "c", {"p": p, "st": st})
            ckpt.wait_until_finished()
        u, st = step(factor_grads(p, gs), st, p)
        p = optax.apply_updates(p, u)
        traj.append(p)
    restored = ocp.StandardCheckpointer().restore(tmp_path / "c", {"p": traj[0], "st": st})
    p2, st2 = restored["p"], restored["st"]
    assert int(st2[0].count) == 1
    for t in (1, 2):
        u, st2 = step(factor_grads(p2, gs), st2, p2)
        p2 = optax.apply_updates(p2, u)
        np.testing.assert_allclose(p2.a, traj[t].a, rtol=1e-6, atol=1e-6)
    # and a different step index gives different noise
    d1 = privacy.prism_privatize(clip_norm=1.0, noise_multiplier=1.0, denom=B, key=key)
    z = jax.tree.map(lambda x: jnp.zeros((2, *x.shape)), f)
    a, _ = d1.update(z, privacy.PrivatizeState(jnp.int32(0), key, jnp.float32(0)), f)
    b, _ = d1.update(z, privacy.PrivatizeState(jnp.int32(1), key, jnp.float32(0)), f)
    assert float(jnp.max(jnp.abs(a.a - b.a))) > 1e-3


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_state_types_stable_chain_and_jit(key):
    """init/update state types equal (no retrace), chain composes, strict promotion, bf16."""
    f, gs = _setup(key, jnp.float32)
    p = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _tree(f))
    g = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _tree_grads(f, gs))
    sched = optax.linear_schedule(0.1, 0.01, 10)
    tx = optax.chain(
        privacy.prism(sched, clip_norm=1.0, noise_multiplier=1.0, denom=B, key=key),
        optax.identity(),
    )
    s0 = tx.init(p)
    traces = []

    @jax.jit
    def step(g, s, p):
        traces.append(None)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    p1, s1 = step(g, s0, p)
    assert jax.tree.structure(s0) == jax.tree.structure(s1)
    for x, y in zip(jax.tree.leaves(s0), jax.tree.leaves(s1), strict=True):
        assert jnp.result_type(x) == jnp.result_type(y) and jnp.shape(x) == jnp.shape(y)
    step(g, s1, p1)
    assert len(traces) == 1
    assert p1["q"].a.dtype == jnp.bfloat16 and p1["head"].dtype == jnp.bfloat16


def test_bad_inputs(key):
    f, gs = _setup(key, jnp.float32)
    with pytest.raises(ValueError, match="clip_norm"):
        privacy.prism_privatize(clip_norm=0.0, noise_multiplier=1.0, denom=1.0, key=key)
    with pytest.raises(ValueError, match="noise_multiplier"):
        privacy.prism(0.1, clip_norm=1.0, noise_multiplier=-1.0, denom=1.0, key=key)
    with pytest.raises(ValueError, match="floor_mode"):
        privacy.prism_adaptive(0.1, floor_mode="bogus")
    # NaN / out-of-range optimizer values gave NaN updates or silently wrong moments
    for kw in (
        {"eps": -1.0},
        {"eps": np.nan},
        {"b2": 1.0},
        {"weight_decay": np.nan},
        {"learning_rate": np.nan},
        {"cond_max": np.nan},
    ):
        lr = kw.pop("learning_rate", 0.1)
        with pytest.raises(ValueError, match=next(iter(kw), "learning_rate")):
            privacy.prism_adaptive(lr, **kw)
    with pytest.raises(ValueError, match="b1"):
        privacy.naive_dp_lora(0.1, clip_norm=1.0, noise_multiplier=1.0, denom=1.0, key=key, b1=1.5)
    with pytest.raises(ValueError, match="eps"):
        privacy.nonprivate_lora(0.1, eps=-1.0)
    with pytest.raises(TypeError, match="debias"):
        privacy.prism_adaptive(0.1, debias=1)
    with pytest.raises(ValueError, match="rcond"):
        privacy.prism_privatize(clip_norm=1.0, noise_multiplier=1.0, denom=1.0, key=key, rcond=-1.0)
    # traced: a runtime error naming the argument (one compiled program, values traced)
    step = jax.jit(
        lambda eps, b1, g: (lambda tx: tx.update(g, tx.init(f), f)[0])(
            privacy.prism_adaptive(0.1, eps=eps, b1=b1)
        )
    )
    g0 = jax.tree.map(lambda x: x[0], factor_grads(f, gs))
    jax.block_until_ready(step(1e-8, 0.9, g0))
    for eps, b1, name in ((np.nan, 0.9, "eps"), (1e-8, 1.5, "b1")):
        with pytest.raises(Exception, match=name):
            jax.block_until_ready(step(eps, b1, g0))
    tx = privacy.prism_privatize(clip_norm=1.0, noise_multiplier=1.0, denom=1.0, key=key)
    g = factor_grads(f, gs)
    with pytest.raises(TypeError, match="updates"):
        tx.update(jax.tree.map(lambda x: x[0], g), tx.init(f), f)  # no batch axis
    with pytest.raises(TypeError, match="`updates` must hold at least one example"):
        tx.update(jax.tree.map(lambda x: x[:0], g), tx.init(f), f)  # was a ZeroDivisionError
    bad = L.LoraFactors(f.a, f.b[:, :2])
    with pytest.raises(TypeError, match="params"):
        tx.update(L.LoraFactors(g.a, g.b[..., :2]), tx.init(bad), bad)
    nan = g._replace(a=g.a.at[1, 0, 0].set(jnp.nan))
    with pytest.raises(Exception, match="finite"):
        jax.block_until_ready(jax.jit(tx.update)(nan, tx.init(f), f))


def test_noise_frame_follows_previous_signs(key):
    """Two nearly equal Z on either side of a sign-rule tie get the same noise on Z.

    Column 0 of ``u`` is ~(1, -1 -/+ delta): the stateless rule (largest entry
    positive) picks opposite signs for the two, so without the frame in the state
    the same key gives very different noise; with the frame from a previous step
    the noise differs only by O(delta).
    """
    m, n, r = 6, 5, 2

    def fac(delta):  # built in NumPy, compared in NumPy: no eager jax op compiles
        a = np.zeros((m, r), np.float32)
        a[0, 0], a[1, 0], a[2, 1] = 1.0, -1.0 - delta, 0.5
        b = np.eye(n, r, dtype=np.float32) * np.array([[2.0, 1.0]], np.float32)
        return L.LoraFactors(jnp.asarray(a), jnp.asarray(b))

    f1, f2 = fac(1e-3), fac(-1e-3)
    zero = jax.tree.map(lambda x: jnp.zeros((1, *x.shape), x.dtype), f1)
    tx = privacy.prism_privatize(clip_norm=1.0, noise_multiplier=1.0, denom=1.0, key=key)
    st0 = tx.init(f1)
    _, st1 = tx.update(zero, st0, f1)  # frame taken at f1

    def noise_on_z(f, st):
        d, _ = tx.update(zero, st, f)
        return np.asarray(L.tangent_dense(f, d))

    with_frame = np.max(np.abs(noise_on_z(f1, st1) - noise_on_z(f2, st1)))
    stateless = np.max(
        np.abs(noise_on_z(f1, st1._replace(frame=None)) - noise_on_z(f2, st1._replace(frame=None)))
    )
    scale = np.max(np.abs(noise_on_z(f1, st1)))
    assert float(stateless) > 0.1 * float(scale)  # the tie does flip the stateless rule
    assert float(with_frame) < 1e-2 * float(scale)
    np.testing.assert_allclose(st1.frame, L.gram_cache(f1).u, atol=1e-6)


def test_batched_per_example_norms(key):
    """Batched per-example norms^2 = dense ``||P_T(G_i)||^2`` and the coordinate norms^2.

    Factor gradients of a dense ``G_i`` against the dense projector; arbitrary factor
    pairs (stacked module) against ``coords_norm_sq(tangent_coords(...))``.
    """
    from jaxkit.privacy._prism import _lora_norm_sq

    norm_sq = jax.jit(_lora_norm_sq, static_argnums=2)
    with jax.enable_x64(True):
        f, gs = _setup(key)
        g = factor_grads(f, gs)
        sq, _ = norm_sq(f, g, 1e-6)
        dense = jax.jit(jax.vmap(lambda x: jnp.sum(L.project_tangent_dense(f, x) ** 2)))(gs)
        np.testing.assert_allclose(np.asarray(sq), np.asarray(dense), rtol=1e-10)
        # stacked axis, factor gradients not of the form (G b, G^T a)
        p = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), f)
        k1, k2 = jax.random.split(jax.random.fold_in(key, 3))
        h = L.LoraFactors(
            jax.random.normal(k1, (B, 2, M, R), jnp.float64),
            jax.random.normal(k2, (B, 2, N, R), jnp.float64),
        )
        sq, _ = norm_sq(p, h, 1e-6)

        def one(fs, hs):
            return L.coords_norm_sq(L.tangent_coords(fs, hs, L.gram_cache(fs)))

        want = jax.jit(lambda p, h: jnp.sum(jax.vmap(jax.vmap(one), in_axes=(None, 0))(p, h), 1))(
            p, h
        )
        np.testing.assert_allclose(np.asarray(sq), want, rtol=1e-10)
