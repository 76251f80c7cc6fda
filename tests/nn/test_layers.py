import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn


def test_mlp_matches_manual(key):
    m = eqx.filter_jit(lambda k: nn.MLP(3, 2, hidden=(5,), activation="tanh", key=k))(key)
    x = jnp.array([0.1, -0.2, 0.3])
    h = np.tanh(np.asarray(x) @ np.asarray(m.weights[0]) + np.asarray(m.biases[0]))
    want = h @ np.asarray(m.weights[1]) + np.asarray(m.biases[1])
    np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-6)
    nb = nn.MLP(3, 2, hidden=(), use_bias=False, key=key)
    assert nb.biases is None and len(nb.weights) == 1


# built under jit: one program per module instead of one eager compile per initialiser op
_small_cnn = eqx.filter_jit(lambda key: nn.SmallCNN(2, 3, channels=(4, 8), key=key))
_unet = eqx.filter_jit(lambda key: nn.UNet(2, 1, channels=(4, 8), key=key))


def test_layers_jit_vmap_grad(key):
    cnn = _small_cnn(key)
    x = jax.random.normal(key, (5, 2, 8, 8))
    y = jax.jit(jax.vmap(cnn))(x)
    assert y.shape == (5, 3)
    g = jax.jit(jax.grad(lambda m: jnp.sum(jax.vmap(m)(x) ** 2)))(cnn)
    assert jax.tree.structure(g) == jax.tree.structure(cnn)
    unet = _unet(key)
    # a non-zero time projection, so that the diffusion time changes the output
    unet = eqx.tree_at(lambda u: u.time_proj[0][1], unet, jax.random.normal(key, (4,)))
    same = jnp.broadcast_to(x[:1], x.shape)
    out = jax.jit(jax.vmap(unet))(jnp.concatenate([x, same]), jnp.tile(jnp.linspace(0, 1, 5), 2))
    assert out.shape == (10, 1, 8, 8) and np.all(np.isfinite(out))
    assert not np.allclose(out[5], out[9])  # same image, t = 0 vs t = 1


def test_cnn_translation_equivariance_of_first_conv(key):
    # with one stride-1 conv and global pooling, a circular-free shift of a
    # compactly supported image leaves the output unchanged
    cnn = eqx.filter_jit(lambda k: nn.SmallCNN(1, 4, channels=(3,), key=k))(key)
    img = np.zeros((1, 12, 12), np.float32)
    img[0, 3:6, 3:6] = np.asarray(jax.random.normal(key, (3, 3)))
    shifted = np.roll(img, (2, 3), axis=(1, 2))
    both = jnp.asarray(np.stack([img, shifted]))
    out = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(cnn, both)  # one program
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-6)


def test_layer_errors(key):
    with pytest.raises(ValueError, match="activation"):
        nn.MLP(2, 2, activation="swish!", key=key)
    # modules built under jit (one program each, not one eager compile per initialiser op)
    mlp = eqx.filter_jit(lambda k: nn.MLP(2, 2, key=k))(key)
    cnn = eqx.filter_jit(lambda k: nn.SmallCNN(1, 2, channels=(2,), key=k))(key)
    unet = eqx.filter_jit(lambda k: nn.UNet(1, 1, channels=(2, 2), key=k))(key)
    with pytest.raises(TypeError, match="`x`"):
        mlp(jnp.ones(3))
    with pytest.raises(TypeError, match="`x`"):
        cnn(jnp.ones((2, 8, 8)))
    with pytest.raises(TypeError, match="divisible"):
        unet(jnp.ones((1, 5, 5)))
