"""PatchTST, RevIN and the TESS forecaster (spec §4.4 5): gate off == PatchTST bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import timeseries as ts

B, L, H, C = 4, 16, 8, 2


def _models(key=0):
    bb = ts.PatchTST(
        L,
        H,
        channels=C,
        patch_len=4,
        stride=3,
        d_model=8,
        n_heads=2,
        n_layers=2,
        d_ff=16,
        key=jax.random.key(key),
    )
    return bb, ts.TESSForecaster(bb, ts.V2, key=jax.random.key(key + 1))


def _inputs(seed=0):
    r = np.random.default_rng(seed)
    x = (r.normal(size=(B, L, C)) * 3 + 5).astype(np.float32)
    ids = np.stack([r.integers(0, s, B) for s in ts.V2.sizes], 1).astype(np.int32)
    conf = r.uniform(0, 1, (B, 4, 4)).astype(np.float32)
    return x, ids, conf


def test_gate_off_equals_patchtst_bit_for_bit():
    bb, tess = _models()
    x, ids, conf = _inputs()
    base = np.asarray(ts.patchtst_forecast(bb, x))
    off = ts.tess_forecast(tess, x, ids, conf, gate=np.zeros((B, 4), np.float32))
    np.testing.assert_array_equal(np.asarray(off.y_hat), base)
    # the prefix does act when the gate is open
    on = ts.tess_forecast(tess, x, ids, conf, gate=np.ones((B, 4), np.float32))
    assert np.max(np.abs(np.asarray(on.y_hat) - base)) > 1e-4
    # a single open primitive changes the output; its label matters
    one = np.zeros((B, 4), np.float32)
    one[:, 2] = 1.0
    a = ts.tess_forecast(tess, x, ids, conf, gate=one).y_hat
    ids2 = ids.copy()
    ids2[:, 2] = (ids2[:, 2] + 1) % 5
    b = ts.tess_forecast(tess, x, ids2, conf, gate=one).y_hat
    assert np.max(np.abs(np.asarray(a) - np.asarray(b))) > 1e-5


def test_revin_roundtrip_and_patch_count():
    with jax.enable_x64(True):
        rev = ts.RevIN(3, dtype=jnp.float64)
        rev = rev.__class__.__new__(rev.__class__)
        object.__setattr__(rev, "weight", jnp.asarray([0.5, 2.0, -1.5]))
        object.__setattr__(rev, "bias", jnp.asarray([0.1, -0.3, 2.0]))
        object.__setattr__(rev, "eps", 1e-5)
        object.__setattr__(rev, "affine", True)
        x = jnp.asarray(np.random.default_rng(0).normal(size=(20, 3)) * 7 + 3)
        # one compiled program (eager x64 ops would each compile)
        xn, back = jax.jit(lambda r, a: (r.normalize(a)[0], r.denormalize(*r.normalize(a))))(rev, x)
        np.testing.assert_allclose(back, x, rtol=1e-6, atol=1e-6)
        xn2 = (np.asarray(xn) - np.asarray(rev.bias)) / np.asarray(rev.weight)
        np.testing.assert_allclose(xn2.mean(0), 0, atol=1e-9)
    for length, p, s in ((16, 4, 3), (48, 16, 8), (5, 5, 1), (48, 48, 1)):
        m = ts.PatchTST(
            length,
            2,
            patch_len=p,
            stride=s,
            d_model=4,
            n_heads=1,
            n_layers=1,
            d_ff=4,
            key=jax.random.key(0),
        )
        z = jax.eval_shape(lambda mm, a: mm.embed(a)[0], m, jnp.zeros((length, 1)))
        assert m.n_patches == (length - p) // s + 2 == z.shape[1]


def test_jitted_optax_step_reduces_loss():
    _, tess = _models()
    x, ids, conf = _inputs()
    y = np.asarray(x[:, -H:] * 0.5, np.float32)
    batch = ts.TESSBatch(x, y, ids, conf, (ids % 2).astype(np.int32))
    opt = optax.sgd(1e-2, momentum=0.9)
    state = opt.init(tess)
    first = None
    for _ in range(15):
        tess, state, loss, aux = ts.tess_train_step(tess, state, batch, optimizer=opt)
        first = float(loss) if first is None else first
    assert float(loss) < 0.7 * first and set(aux) == {"mse", "bce", "gate_mean"}


def test_bad_inputs():
    bb, tess = _models()
    x, ids, conf = _inputs()
    bad = ids.copy()
    bad[0, 3] = 6  # lag_decay has 6 labels
    with pytest.raises(ValueError, match="unknown primitive label"):
        ts.tess_forecast(tess, x, bad, conf)
    xb = x.copy()
    xb[1, 3, 0] = np.nan
    with pytest.raises(ValueError, match="`x`"):
        ts.patchtst_forecast(bb, xb)
    with pytest.raises(TypeError, match="`x`"):
        ts.patchtst_forecast(bb, x[:, :10])
    with pytest.raises(ValueError, match="gate"):
        ts.tess_forecast(tess, x, ids, conf, gate=np.full((B, 4), 2.0, np.float32))
    with pytest.raises(ValueError, match="patch_len"):
        ts.PatchTST(8, 2, patch_len=9, key=jax.random.key(0))


def test_gate_targets():
    a = np.asarray([[0, 1, 2], [3, 1, 0]])
    b = np.asarray([[0, 2, 2], [3, 0, 0]])
    np.testing.assert_array_equal(ts.gate_targets(a, b), [[1, 0, 1], [1, 0, 1]])
    with pytest.raises(TypeError, match="oracle_ids"):
        ts.gate_targets(a, b[:, :2])


@pytest.mark.slow
def test_gate_off_trains_exactly_as_patchtst():
    bb, tess = _models()
    x, ids, conf = _inputs()
    y = np.asarray(x[:, -H:] * 0.5, np.float32)
    batch = ts.TESSBatch(x, y, ids, conf, np.ones((B, 4), np.int32))
    opt = optax.sgd(1e-2, momentum=0.9)
    kw = dict(key=jax.random.key(0), optimizer=opt, steps=10, batch_size=2)
    p, _ = ts.fit_forecaster(bb, batch, **kw)
    zeros = np.zeros((B, 4), np.float32)
    t, _ = ts.fit_forecaster(tess, batch, gate=zeros, **kw)
    np.testing.assert_array_equal(
        ts.patchtst_forecast(p, x), ts.tess_forecast(t, x, ids, conf, gate=zeros).y_hat
    )
