"""MTS pieces (spec training.md 2.4 items 2 and 4): weight normalisation, GSNR."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import data


def test_normalize_weights_mean_one_scale_invariant():
    rng = np.random.default_rng(0)
    s = rng.uniform(0.05, 1.0, 64).astype(np.float32)
    cw = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    w = np.asarray(data.normalize_weights(jnp.asarray(s)))
    np.testing.assert_allclose(w.mean(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(w, 64 * s / s.sum(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(data.normalize_weights(jnp.asarray(7.5 * s))), w,
                               rtol=1e-6)  # fmt: skip
    wc = np.asarray(data.normalize_weights(jnp.asarray(s), jnp.asarray(cw)))
    np.testing.assert_allclose(wc, 64 * s * cw / (s * cw).sum(), rtol=1e-6)
    same = np.asarray(data.normalize_weights(jnp.full(8, 0.3)))  # identical scores: all 1
    np.testing.assert_array_equal(same, np.ones(8, np.float32))
    with pytest.raises(TypeError, match="`raw` must hold at least one sample"):
        data.normalize_weights(jnp.zeros(0))  # was a "zero-size array" error naming nothing
    inf = np.array([1.0, np.inf, 2.0], np.float32)  # every weight was NaN (wave 25)
    with pytest.raises(ValueError, match="`raw`"):
        data.normalize_weights(inf)
    with pytest.raises(ValueError, match="`class_w`"):
        data.normalize_weights(np.ones(3, np.float32), inf)


@pytest.mark.slow
def test_normalize_weights_global_over_mesh(mesh8):
    s = np.random.default_rng(1).uniform(0.05, 1.0, 32).astype(np.float32)
    s[:4] *= 10  # device 0 holds much larger scores: a per-device mean would differ
    f = jax.shard_map(lambda x: data.normalize_weights(x, axis_name="data"), mesh=mesh8,
                      in_specs=jax.P("data"), out_specs=jax.P("data"), check_vma=False)  # fmt: skip
    with jax.set_mesh(mesh8):
        w = np.asarray(jax.jit(f)(jax.device_put(s, jax.NamedSharding(mesh8, jax.P("data")))))
    np.testing.assert_allclose(w, 32 * s / s.sum(), rtol=1e-6)
    np.testing.assert_allclose(w.mean(), 1.0, rtol=1e-6)


def test_gsnr_recovers_known_values():
    rng = np.random.default_rng(2)
    mu = np.array([1.0, -2.0, 0.5, 3.0])
    sd = np.array([1.0, 0.5, 2.0, 1.5])
    x = mu + sd * rng.standard_normal((200_000, 4))
    r = data.gsnr(jnp.asarray(x, jnp.float32))
    want = mu**2 / sd**2
    np.testing.assert_allclose(np.asarray(r.per_param), want, rtol=0.03)
    np.testing.assert_allclose(float(r.aggregate), np.sum(mu**2) / np.sum(sd**2), rtol=0.03)
    np.testing.assert_allclose(float(r.per_param_median), np.median(want), rtol=0.03)
    np.testing.assert_allclose(float(r.per_param_mean), np.mean(want), rtol=0.03)
    # a minibatch mean of B draws has B times the GSNR of one draw
    b = 16
    xb = x[: (len(x) // b) * b].reshape(-1, b, 4).mean(axis=1)
    rb = data.gsnr(jnp.asarray(xb, jnp.float32))
    np.testing.assert_allclose(float(rb.aggregate) / float(r.aggregate), b, rtol=0.1)


def test_mts_bad_inputs():
    with pytest.raises(ValueError, match="raw"):
        data.normalize_weights(jnp.array([0.5, -0.1, 0.2]))
    with pytest.raises(ValueError, match="raw"):
        data.normalize_weights(jnp.array([0.5, jnp.nan]))
    with pytest.raises(TypeError, match="class_w"):
        data.normalize_weights(jnp.ones(3), jnp.ones(2))
    with pytest.raises(ValueError, match="K >= 2"):
        data.gsnr(jnp.ones((1, 3)))
    with pytest.raises(TypeError, match="samples"):
        data.gsnr(jnp.ones(3))
