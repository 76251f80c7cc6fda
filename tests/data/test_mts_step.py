"""MTS meta-step oracles (spec training.md 2.4 items 1-3)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import data, nn

B, F, D, C = 12, 3, 5, 3


def ce_loss(params, batch):
    """Per-example cross entropy of a one-hidden-layer classifier."""
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"][None, :])
    logits = h @ params["w2"]
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]


class FreeLogits(eqx.Module):
    """A meta-network with a free logit per example (features are one-hot ids)."""

    z: jax.Array

    def __call__(self, f):
        return f @ self.z


def _problem(dtype, seed=0, corrupt=0):
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.normal(size=(C, D))
    y = rng.integers(0, C, B)
    x = centres[y] + 0.5 * rng.normal(size=(B, D))
    yv = rng.integers(0, C, 16)
    xv = centres[yv] + 0.5 * rng.normal(size=(16, D))
    y_train = y.copy()
    y_train[:corrupt] = (y[:corrupt] + 1) % C  # wrong labels on the first `corrupt` examples
    params = {
        "w1": jnp.asarray(0.5 * rng.normal(size=(D, 8)), dtype),
        "b1": jnp.asarray(0.1 * rng.normal(size=8), dtype),
        "w2": jnp.asarray(0.5 * rng.normal(size=(8, C)), dtype),
    }
    batch = (jnp.asarray(x, dtype), jnp.asarray(y_train, jnp.int32))
    meta = (jnp.asarray(xv, dtype), jnp.asarray(yv, jnp.int32))
    feats = jnp.asarray(rng.normal(size=(B, F)), dtype)
    return params, batch, meta, feats


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(t)) for t in jax.tree.leaves(tree)])


def _x64_setup():
    params, batch, meta, feats = _problem(jnp.float64)
    net = _mlp64(jax.random.key(1))
    return params, batch, meta, feats, net


@eqx.filter_jit
def _mlp64(key):
    """The float64 meta-network, initialised as one program (eagerly, each initialiser op
    compiled a program of its own)."""
    return nn.MLP(F, 1, hidden=(6,), activation="tanh", key=key, dtype=jnp.float64)


def test_hypergrad_jvp_equals_unrolled_identical_features_give_zero():
    with jax.enable_x64(True):
        params, batch, meta, feats, net = _x64_setup()
        hj, hu = (
            data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.5, mode=m)
            for m in ("jvp", "unrolled")
        )
        gj, gu = _flat(hj.grad), _flat(hu.grad)
        assert np.linalg.norm(gu) > 1e-4  # a non-trivial hypergradient
        np.testing.assert_allclose(gj, gu, rtol=1e-5, atol=1e-12 * np.abs(gu).max())
        np.testing.assert_allclose(np.asarray(hj.weight_grad), np.asarray(hu.weight_grad),
                                   rtol=1e-5)  # fmt: skip
        assert abs(np.asarray(hj.weights).mean() - 1.0) < 1e-14
        # identical features: w == 1 for every phi, so the hypergradient vanishes
        same = jnp.asarray(np.tile(np.asarray(feats)[:1], (B, 1)))  # on the host
        h0 = data.mts_hypergrad(ce_loss, params, net, same, batch, meta, lr=0.5)
        np.testing.assert_array_equal(np.asarray(h0.weights), np.ones(B))
        assert np.abs(_flat(h0.grad)).max() < 1e-12 * max(np.abs(gj).max(), 1.0)


@pytest.mark.slow
def test_hypergrad_finite_diff_and_meta_loss():
    with jax.enable_x64(True):
        params, batch, meta, feats, net = _x64_setup()
        hj, hf = (
            data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.5, mode=m)
            for m in ("jvp", "finite_diff")
        )
        gj, gf = _flat(hj.grad), _flat(hf.grad)
        assert gf @ gj / (np.linalg.norm(gf) * np.linalg.norm(gj)) > 0.999
        np.testing.assert_allclose(gf, gj, rtol=1e-3, atol=1e-4 * np.abs(gj).max())  # O(eps^2)
        # meta_loss: the inner SGD step by hand with the returned weights
        w = jnp.asarray(np.asarray(hj.weights))
        g = jax.grad(lambda p: jnp.mean(w * ce_loss(p, batch)))(params)
        th = jax.tree.map(lambda p, d: p - 0.5 * d, params, g)
        np.testing.assert_allclose(float(hj.meta_loss), float(ce_loss(th, meta).mean()),
                                   rtol=1e-12)  # fmt: skip
        # class weights multiply the raw scores before normalisation
        cw = jnp.linspace(0.5, 2.0, B, dtype=jnp.float64)
        hc = data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.5, class_w=cw)
        raw = jax.nn.sigmoid(jax.vmap(net)(feats)[:, 0]) * cw
        np.testing.assert_allclose(np.asarray(hc.weights), np.asarray(B * raw / raw.sum()),
                                   rtol=1e-12)  # fmt: skip


def test_meta_step_sign_and_mean_one():
    params, batch, meta, _ = _problem(jnp.float32, seed=3, corrupt=4)
    net = FreeLogits(jnp.zeros(B, jnp.float32))
    ids = jnp.asarray(np.eye(B), jnp.float32)  # one-hot ids built on the host
    opt = optax.sgd(50.0)
    r = data.mts_meta_step(ce_loss, opt, params, net, opt.init(net), ids, batch, meta, lr=0.5)
    h = data.mts_hypergrad(ce_loss, params, net, ids, batch, meta, lr=0.5)
    w_new = np.asarray(r.weights)
    np.testing.assert_allclose(w_new.mean(), 1.0, rtol=1e-6)
    # a_i = <grad l_i, gamma> = -(B/lr) dL/dw_i; w starts at 1 so a_bar_w = mean(a)
    a = -(B / 0.5) * np.asarray(h.weight_grad)
    dw = w_new - 1.0
    big = np.abs(a - a.mean()) > 1e-3 * np.abs(a).max()
    np.testing.assert_array_equal(np.sign(dw[big]), np.sign((a - a.mean())[big]))
    assert np.all(dw[:4] < 0)  # corrupted labels: anti-aligned with the clean gradient
    np.testing.assert_allclose(float(r.meta_loss), float(h.meta_loss), rtol=1e-6)
    np.testing.assert_allclose(float(r.hypergrad_norm), np.linalg.norm(_flat(h.grad)), rtol=1e-5)


def test_mts_step_bad_inputs():
    params, batch, meta, feats = _problem(jnp.float32)
    net = nn.MLP(F, 1, hidden=(4,), key=jax.random.key(0))
    with pytest.raises(ValueError, match="mode"):
        data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.1, mode="exact")
    with pytest.raises(ValueError, match="lr"):
        data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.0)
    with pytest.raises(ValueError, match="fd_eps"):
        data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.1, fd_eps=jnp.nan)
    with pytest.raises(TypeError, match="features"):
        data.mts_hypergrad(ce_loss, params, net, feats[0], batch, meta, lr=0.1)
    with pytest.raises(TypeError, match="class_w"):
        data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.1, class_w=jnp.ones(3))
    inf_w = np.where(np.arange(feats.shape[0]) == 0, np.inf, 1.0).astype(np.float32)
    with pytest.raises(ValueError, match="`class_w`"):  # NaN weights before (wave 25)
        data.mts_hypergrad(ce_loss, params, net, feats, batch, meta, lr=0.1, class_w=inf_w)
    with pytest.raises(TypeError, match="optimizer"):
        data.mts_meta_step(ce_loss, "adam", params, net, None, feats, batch, meta, lr=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["jvp", "finite_diff"])
def test_meta_step_over_8_devices_equals_single_device(mesh8, mode):
    rng = np.random.default_rng(5)
    n, m = 32, 16
    x, y = rng.normal(size=(n, D)).astype(np.float32), rng.integers(0, C, n).astype(np.int32)
    xv, yv = rng.normal(size=(m, D)).astype(np.float32), rng.integers(0, C, m).astype(np.int32)
    feats = rng.normal(size=(n, F)).astype(np.float32)
    feats[:4] += 3.0  # device 0's rows score differently: a per-device mean would differ
    cw = rng.uniform(0.5, 2.0, n).astype(np.float32)
    params, _, _, _ = _problem(jnp.float32)
    net = nn.MLP(F, 1, hidden=(6,), key=jax.random.key(2))
    opt = optax.sgd(5.0, momentum=0.9)  # adam trips strict dtype promotion
    st = opt.init(net)
    one = data.mts_meta_step(ce_loss, opt, params, net, st, feats, (x, y), (xv, yv), lr=0.5,
                             class_w=cw, mode=mode)  # fmt: skip

    def local(f, b, mb, c):
        r = data.mts_meta_step(ce_loss, opt, params, net, st, f, b, mb, lr=0.5, class_w=c,
                               mode=mode, axis_name="data")  # fmt: skip
        return r, jnp.mean(r.weights)[None]

    row = jax.P("data")
    specs = (jax.P(), jax.P(), row, jax.P(), jax.P())
    out_specs = (data.MTSMetaStep(*specs), row)
    f = jax.shard_map(local, mesh=mesh8, in_specs=(row, (row, row), (row, row), row),
                      out_specs=out_specs, check_vma=False)  # fmt: skip
    with jax.set_mesh(mesh8):
        put = lambda a: jax.device_put(a, jax.NamedSharding(mesh8, row))  # noqa: E731
        many, local_means = jax.jit(f)(put(feats), (put(x), put(y)), (put(xv), put(yv)), put(cw))
    tol = 1e-5 if mode == "jvp" else 2e-4  # f32 central differences: summation order
    w = np.asarray(many.weights)
    assert abs(w.mean() - 1.0) < 1e-6  # mean 1 over the global batch, not per device
    assert np.abs(np.asarray(local_means) - 1.0).max() > 0.05
    np.testing.assert_allclose(w, np.asarray(one.weights), rtol=tol)
    np.testing.assert_allclose(_flat(many.meta_net), _flat(one.meta_net), rtol=tol, atol=1e-7)
    np.testing.assert_allclose(float(many.meta_loss), float(one.meta_loss), rtol=1e-5)
    np.testing.assert_allclose(float(many.hypergrad_norm), float(one.hypergrad_norm), rtol=1e-4)
    assert float(one.hypergrad_norm) > 1e-4
    with pytest.raises(ValueError, match="unrolled"):
        data.mts_hypergrad(ce_loss, params, net, feats, (x, y), (xv, yv), lr=0.5,
                           mode="unrolled", axis_name="data")  # fmt: skip
