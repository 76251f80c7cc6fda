"""Learning-to-reweight and Meta-Weight-Net steps against their papers' definitions."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import data, nn
from tests.data.test_mts_step import _flat, _problem, ce_loss


@jax.jit
def _per_example_grads(params, batch):
    """Stacked per-example gradients, one reverse pass per example (vmap of grad)."""
    one = lambda p, x, y: ce_loss(p, (x[None], y[None]))[0]  # noqa: E731
    return jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(params, *batch)


@jax.jit
def _l2rw_reference(params, batch, meta, w):
    """The reference step and both losses as one program (as eager glue, every op of the
    loss and of the tree arithmetic compiled a program of its own)."""
    pg = _per_example_grads(params, batch)
    b = w.shape[0]
    step = jax.tree.map(lambda p, g: p - 0.3 * jnp.tensordot(w, g, axes=1) / b, params, pg)
    return step, ce_loss(params, batch), ce_loss(params, meta)


def test_l2rw_step_matches_paper_definition():
    params, batch, meta, _ = _problem(jnp.float32, seed=4, corrupt=4)
    opt = optax.sgd(0.3)
    r = data.l2rw_step(ce_loss, opt, params, opt.init(params), batch, meta)
    b = batch[0].shape[0]

    # the paper: -dL_meta(theta - alpha sum_i eps_i grad l_i) / d eps_i at eps = 0
    def meta_of_eps(eps):
        g = jax.grad(lambda p: jnp.sum(eps * ce_loss(p, batch)))(params)
        return jnp.mean(ce_loss(jax.tree.map(lambda p, d: p - 0.1 * d, params, g), meta))

    u = -np.asarray(jax.jit(jax.grad(meta_of_eps))(jnp.zeros(b)))
    np.testing.assert_allclose(np.asarray(r.alignment), u / 0.1, rtol=1e-4, atol=1e-6)
    wt = np.maximum(u, 0)
    assert 0 < np.count_nonzero(wt) < b  # some examples are dropped
    want_w = b * wt / wt.sum()
    np.testing.assert_allclose(np.asarray(r.weights), want_w, rtol=1e-4, atol=1e-6)
    # the step: theta - 0.3 * (1/B) sum_i w_i grad l_i, per-example gradients one by one
    want, l, lm = _l2rw_reference(params, batch, meta, jnp.asarray(want_w, jnp.float32))
    np.testing.assert_allclose(_flat(r.params), _flat(want), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(r.loss), np.mean(want_w * np.asarray(l)), rtol=1e-5)
    np.testing.assert_allclose(float(r.meta_loss), float(np.mean(lm)), rtol=1e-6)
    # a meta batch that every training example opposes: no positive weight, no update
    anti = (batch[0], jnp.asarray((np.asarray(batch[1]) + 1) % 3, jnp.int32))
    r0 = data.l2rw_step(ce_loss, opt, params, opt.init(params), batch, anti)
    if np.all(np.asarray(r0.alignment) <= 0):
        np.testing.assert_array_equal(np.asarray(r0.weights), 0.0)
        np.testing.assert_array_equal(_flat(r0.params), _flat(params))


@pytest.mark.parametrize("normalize", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_mwn_meta_step_matches_unrolled_autodiff(normalize):
    params, batch, meta, _ = _problem(jnp.float32, seed=6, corrupt=3)
    net = nn.MLP(1, 1, hidden=(8,), key=jax.random.key(3))
    opt = optax.sgd(2.0)
    r = data.mwn_meta_step(ce_loss, opt, params, net, opt.init(net), batch, meta, lr=0.5,
                           normalize=normalize)  # fmt: skip

    def weights(m):
        l_in = jax.lax.stop_gradient(ce_loss(params, batch))[:, None]
        s = jax.nn.sigmoid(jax.vmap(m)(l_in)[:, 0])
        return s * (s.shape[0] / jnp.sum(s)) if normalize else s

    def meta_of_phi(m):  # Shu et al. eq. (4)-(5), reverse mode through the virtual step
        w = weights(m)
        g = jax.grad(lambda p: jnp.mean(w * ce_loss(p, batch)))(params)
        return jnp.mean(ce_loss(jax.tree.map(lambda p, d: p - 0.5 * d, params, g), meta))

    @eqx.filter_jit  # the reference as one program, not one per eager op
    def reference(m):
        val, g = jax.value_and_grad(meta_of_phi)(m)
        new = jax.tree.map(lambda p, d: p - 2.0 * d, m, g)
        return val, g, new, weights(new)

    val, g, want_net, want_w = reference(net)
    np.testing.assert_allclose(_flat(r.meta_net), _flat(want_net), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(r.meta_loss), float(val), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(r.weights), np.asarray(want_w), rtol=1e-4)
    assert np.linalg.norm(_flat(g)) > 1e-5
    if normalize:
        np.testing.assert_allclose(np.asarray(r.weights).mean(), 1.0, rtol=1e-6)


def test_baselines_bad_inputs():
    params, batch, meta, _ = _problem(jnp.float32)
    net = nn.MLP(1, 1, hidden=(4,), key=jax.random.key(0))
    opt = optax.sgd(0.1)
    with pytest.raises(TypeError, match="optimizer"):
        data.l2rw_step(ce_loss, "sgd", params, None, batch, meta)
    with pytest.raises(TypeError, match="loss_fn"):
        data.l2rw_step(None, opt, params, opt.init(params), batch, meta)
    with pytest.raises(ValueError, match="lr"):
        data.mwn_meta_step(ce_loss, opt, params, net, opt.init(net), batch, meta, lr=jnp.nan)
    with pytest.raises(ValueError, match="mode"):
        data.mwn_meta_step(ce_loss, opt, params, net, opt.init(net), batch, meta, lr=0.1,
                           mode="exact")  # fmt: skip
    with pytest.raises(TypeError, match="normalize"):
        data.mwn_meta_step(ce_loss, opt, params, net, opt.init(net), batch, meta, lr=0.1,
                           normalize="yes")  # fmt: skip
