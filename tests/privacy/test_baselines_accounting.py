"""Baselines (naive DP-LoRA, FFA-LoRA, non-private), per-example grads, Poisson, accounting."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import privacy
from jaxkit.privacy import lowrank as L
from tests.privacy._helpers import factor_grads, factors, gauge


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))  # one program (eager: op by op)
def _per_ex(key, b=6, m=8, n=6, r=2):
    k1, k2 = jax.random.split(key)
    f = factors(k1, m, n, r)
    gs = jax.random.normal(k2, (b, m, n))
    return f, factor_grads(f, gs), gs


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_naive_dp_lora_clip_and_noise_and_gauge_dependence(key):
    f, g, gs = _per_ex(key)
    b = gs.shape[0]
    agg = privacy.dp_aggregate(clip_norm=0.5, noise_multiplier=0.0, denom=b, key=key)
    d, _ = jax.jit(agg.update)(g, agg.init(f), f)
    norms = jnp.sqrt(jnp.sum(g.a**2, (1, 2)) + jnp.sum(g.b**2, (1, 2)))
    al = jnp.minimum(1.0, 0.5 / norms)
    np.testing.assert_allclose(d.a, jnp.einsum("b,bij->ij", al, g.a) / b, rtol=1e-5, atol=1e-6)
    # clipping is gauge dependent for naive, not for PRISM's intrinsic norm
    fc = gauge(f, 10.0 * jnp.eye(2))
    gc = factor_grads(fc, gs)
    nc = jnp.sqrt(jnp.sum(gc.a**2, (1, 2)) + jnp.sum(gc.b**2, (1, 2)))
    assert float(jnp.max(jnp.abs(nc / norms - 1))) > 0.5
    # naive's first-order noise on Z follows m||b||^2 + n||a||^2 and changes with the gauge
    tx = privacy.dp_aggregate(clip_norm=1.0, noise_multiplier=1.0, denom=1.0, key=key)
    zero = jax.tree.map(jnp.zeros_like, g)

    def energy(ff, t):
        st = privacy.PrivatizeState(t, key, jnp.zeros([], jnp.float32))
        dd, _ = tx.update(zero, st, ff)
        return jnp.sum(L.tangent_dense(ff, dd) ** 2)

    for c in (0.3, 3.0):
        fc = gauge(f, c * jnp.eye(2))
        e = jax.jit(jax.vmap(lambda t, fc=fc: energy(fc, t)))(jnp.arange(4000, dtype=jnp.int32))
        want = float(L.naive_noise_energy(fc, tau=1.0))
        assert abs(float(jnp.mean(e)) / want - 1) < 0.06


def _step(tx, stats=lambda g: g):
    """``tx.update(stats(g), tx.init(f), f)`` as one program (eager, init and glue compile
    op by op)."""
    return jax.jit(lambda g, f: tx.update(stats(g), tx.init(f), f))


def test_ffa_freezes_and_nonprivate_is_mean_adam(key):
    f, g, gs = _per_ex(key)
    tx = privacy.ffa_lora(0.1, clip_norm=1.0, noise_multiplier=1.0, denom=6.0, key=key)
    u, _ = _step(tx)(g, f)
    assert np.max(np.abs(np.asarray(u.b))) == 0.0 and np.max(np.abs(np.asarray(u.a))) > 0
    tx = privacy.nonprivate_lora(0.1)
    u, _ = _step(tx)(g, f)
    ref = optax.adam(0.1)
    with jax.numpy_dtype_promotion("standard"):  # optax.adam mixes int32 and floats
        u2, _ = _step(ref, lambda g: jax.tree.map(lambda x: x.mean(0), g))(g, f)
    np.testing.assert_allclose(u.a, u2.a, rtol=1e-5, atol=1e-7)
    tx = privacy.naive_dp_lora(0.1, clip_norm=1.0, noise_multiplier=1.0, denom=6.0, key=key)
    u, s2 = _step(tx)(g, f)
    assert jax.tree.structure(jax.eval_shape(tx.init, f)) == jax.tree.structure(s2)


def test_per_example_grads_microbatch_and_mask(key):
    f, _, _ = _per_ex(key)
    rng = np.random.default_rng(0)  # inputs and checks in NumPy: no eager op compiles
    x = jnp.asarray(rng.standard_normal((8, 6)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((8, 8)), jnp.float32)

    def loss(p, ex):
        xi, yi = ex
        return jnp.sum((p.a @ (p.b.T @ xi) - yi) ** 2)

    # jitted: one program per call instead of one per eager op
    pe = jax.jit(privacy.per_example_grads, static_argnums=0, static_argnames="microbatch_size")
    g = pe(loss, f, (x, y))
    g2 = pe(loss, f, (x, y), microbatch_size=4)
    np.testing.assert_allclose(g.a, g2.a, rtol=1e-5, atol=1e-5)
    one = jax.jit(jax.grad(loss))(f, (x[3], y[3]))
    np.testing.assert_allclose(np.asarray(g.a)[3], one.a, rtol=1e-5, atol=1e-5)
    mask = jnp.asarray(np.arange(8) < 5)
    g3 = pe(loss, f, (x, y), mask=mask)
    assert np.max(np.abs(np.asarray(g3.a)[5:])) == 0.0
    with pytest.raises(ValueError, match="microbatch_size"):
        privacy.per_example_grads(loss, f, (x, y), microbatch_size=3)
    # a batch may carry per-example typed keys (dropout in the README's snippet); a string
    # leaf or one without the batch axis is a TypeError naming `batch`
    keys = jax.random.split(key, 8)
    g4 = pe(lambda p, ex: loss(p, ex[:2]), f, (x, y, keys))
    np.testing.assert_allclose(g4.a, g.a, rtol=1e-6, atol=1e-6)
    for bad in ((x, "abc"), (x, y[0, :3])):
        with pytest.raises(TypeError, match="`batch`"):
            privacy.per_example_grads(loss, f, bad)


def test_poisson_batch(key):
    pb = privacy.poisson_batch(key=key, num_examples=1000, q=0.05, max_batch_size=100)
    size = int(pb.size)
    assert 20 <= size <= 85 and not bool(pb.overflow)
    assert int(jnp.sum(pb.mask)) == size
    idx = np.asarray(pb.indices)[:size]
    assert len(set(idx.tolist())) == size
    # exactly the examples of one Bernoulli(q) draw with the same key (one program)
    take = jax.jit(lambda k: jax.random.bernoulli(k, jnp.float32(0.05), (1000,)))(key)
    np.testing.assert_array_equal(idx, np.flatnonzero(np.asarray(take)))
    with pytest.raises(ValueError, match="q"):
        privacy.poisson_batch(key=key, num_examples=10, q=1.5, max_batch_size=4)
    with pytest.raises(TypeError, match="num_examples"):  # was an opaque shape error
        privacy.poisson_batch(key=key, num_examples=10.0, q=0.5, max_batch_size=4)
    pb = jax.jit(lambda q: privacy.poisson_batch(key=key, num_examples=10, q=q, max_batch_size=4))
    for q in (np.nan, 1.5):  # traced: was a silently empty / full batch
        with pytest.raises(Exception, match="`q`"):
            jax.block_until_ready(pb(q))


def test_accounting_numbers():
    """Spec §1.4.8 (dp-accounting 0.6.0)."""
    q = 64 / 10000
    assert privacy.epsilon(q=q, noise_multiplier=1.0, steps=500, delta=1e-5) == pytest.approx(
        1.216, abs=2e-3
    )
    assert privacy.calibrate_sigma(epsilon=6.0, delta=1e-5, q=q, steps=500) == pytest.approx(
        0.573, abs=2e-3
    )
    assert privacy.calibrate_sigma(epsilon=6.0, delta=1e-5, q=q, steps=300) == pytest.approx(
        0.552, abs=2e-3
    )


@pytest.mark.slow
def test_accounting_pld():
    q = 64 / 10000
    assert privacy.epsilon(
        q=q, noise_multiplier=1.0, steps=500, delta=1e-5, accountant="pld"
    ) == pytest.approx(0.825, abs=3e-3)


def test_accounting_errors():
    with pytest.raises(ValueError, match="delta"):
        privacy.epsilon(q=0.1, noise_multiplier=1.0, steps=10, delta=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        privacy.calibrate_sigma(epsilon=0.0, delta=1e-5, q=0.1, steps=10)
    with pytest.raises(ValueError, match="epsilon"):
        privacy.calibrate_sigma(epsilon=1e-4, delta=1e-5, q=1.0, steps=1000)
    with pytest.raises(ValueError, match="accountant"):
        privacy.epsilon(q=0.1, noise_multiplier=1.0, steps=10, delta=1e-5, accountant="x")
    with pytest.raises(ValueError, match="steps"):
        privacy.epsilon(q=0.1, noise_multiplier=1.0, steps=0, delta=1e-5)
