import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn


def _main_init(key, specs, biases, dtype):
    """The layers' initialisation before wave 18 (the values' oracle): one float32 normal
    draw of the total size (jax.random, one program) times 1/sqrt(fan_in), cast to dtype and
    cut into the shapes in order; zero biases. The product and the cast are exact IEEE float32
    operations, so NumPy gives the bits the eager jax ops gave."""
    sizes = [math.prod(s) for s, _ in specs]
    scale = np.concatenate(
        [np.full(n, f**-0.5, np.float32) for n, (_, f) in zip(sizes, specs, strict=True)]
    )
    flat = (np.asarray(jax.random.normal(key, (sum(sizes),), jnp.float32)) * scale).astype(dtype)
    ends = np.cumsum(sizes)
    ws = [flat[e - n : e].reshape(s) for e, n, (s, _) in zip(ends, sizes, specs, strict=True)]
    return ws, [np.zeros((n,), dtype) for n in biases]


def _assert_same(got, want):
    got = jax.tree.leaves(got)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g), w)


def test_eager_construction_is_one_program_with_the_values_of_before():
    # Built eagerly, each module compiles one program (its jitted initialiser; it compiled
    # 11-17 op by op before) and nothing on a second build; the parameters are bit-identical
    # to the op-by-op draw, including MLP(hidden=()), whose single scale XLA would fold into
    # the draw's own multiply if it were a constant (a 1-ulp change).
    key = jax.random.key(7)
    compiles = []

    def count(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        built = []
        for build in (
            lambda: nn.MLP(3, 2, hidden=(), use_bias=False, key=key),
            lambda: nn.MLP(3, 2, hidden=(5,), key=key, dtype=jnp.bfloat16),
            lambda: nn.SmallCNN(2, 3, channels=(4, 5), kernel_size=5, key=key),
            lambda: nn.UNet(2, 3, channels=(2, 3), time_dim=4, key=key),
        ):
            n = len(compiles)
            built.append(build())
            assert len(compiles) - n == 1
            build()
            assert len(compiles) - n == 1  # the same sizes again: nothing new
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    mlp0, mlp1, cnn, unet = built
    _assert_same(mlp0, _main_init(key, [((3, 2), 3)], (), jnp.float32)[0])
    ws, bs = _main_init(key, [((3, 5), 3), ((5, 2), 5)], (5, 2), jnp.bfloat16)
    _assert_same(mlp1, ws + bs)
    specs = [((4, 2, 5, 5), 50), ((5, 4, 5, 5), 100), ((5, 3), 5)]
    ws, bs = _main_init(key, specs, (4, 5, 3), jnp.float32)
    _assert_same(cnn, [x for pair in zip(ws, bs, strict=True) for x in pair])
    specs = [((2, 2, 3, 3), 18), ((2, 2, 3, 3), 18), ((3, 2, 3, 3), 18), ((3, 3, 3, 3), 27)]
    specs += [((2, 5, 3, 3), 45), ((2, 2, 3, 3), 18), ((3, 2, 1, 1), 2), ((4, 2), 4), ((4, 3), 4)]
    ws, bs = _main_init(key, specs, (2, 2, 3, 3, 2, 2, 3, 2, 3), jnp.float32)
    pairs = [x for pair in zip(ws, bs, strict=True) for x in pair]
    # leaves: down (w1, b1, w2, b2) x 2, up x 1, out (w, b), time_proj (w, b) x 2
    _assert_same(unet, pairs)


def test_mlp_matches_manual(key):
    m = nn.MLP(3, 2, hidden=(5,), activation="tanh", key=key)
    x = jnp.array([0.1, -0.2, 0.3])
    h = np.tanh(np.asarray(x) @ np.asarray(m.weights[0]) + np.asarray(m.biases[0]))
    want = h @ np.asarray(m.weights[1]) + np.asarray(m.biases[1])
    np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-6)
    nb = nn.MLP(3, 2, hidden=(), use_bias=False, key=key)
    assert nb.biases is None and len(nb.weights) == 1


def test_layers_jit_vmap_grad(key):
    cnn = nn.SmallCNN(2, 3, channels=(4, 8), key=key)
    x = jax.random.normal(key, (5, 2, 8, 8))
    y = jax.jit(jax.vmap(cnn))(x)
    assert y.shape == (5, 3)
    g = jax.jit(jax.grad(lambda m: jnp.sum(jax.vmap(m)(x) ** 2)))(cnn)
    assert jax.tree.structure(g) == jax.tree.structure(cnn)
    unet = nn.UNet(2, 1, channels=(4, 8), key=key)
    # a non-zero time projection, so that the diffusion time changes the output
    unet = eqx.tree_at(lambda u: u.time_proj[0][1], unet, jax.random.normal(key, (4,)))
    same = jnp.broadcast_to(x[:1], x.shape)
    out = jax.jit(jax.vmap(unet))(jnp.concatenate([x, same]), jnp.tile(jnp.linspace(0, 1, 5), 2))
    assert out.shape == (10, 1, 8, 8) and np.all(np.isfinite(out))
    assert not np.allclose(out[5], out[9])  # same image, t = 0 vs t = 1


def test_cnn_translation_equivariance_of_first_conv(key):
    # with one stride-1 conv and global pooling, a circular-free shift of a
    # compactly supported image leaves the output unchanged
    cnn = nn.SmallCNN(1, 4, channels=(3,), key=key)
    img = np.zeros((1, 12, 12), np.float32)
    img[0, 3:6, 3:6] = np.asarray(jax.random.normal(key, (3, 3)))
    shifted = np.roll(img, (2, 3), axis=(1, 2))
    both = jnp.asarray(np.stack([img, shifted]))
    out = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(cnn, both)  # one program
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-6)


def test_layer_errors(key):
    with pytest.raises(ValueError, match="activation"):
        nn.MLP(2, 2, activation="swish!", key=key)
    mlp = nn.MLP(2, 2, key=key)
    cnn = nn.SmallCNN(1, 2, channels=(2,), key=key)
    unet = nn.UNet(1, 1, channels=(2, 2), key=key)
    with pytest.raises(TypeError, match="`x`"):
        mlp(jnp.ones(3))
    with pytest.raises(TypeError, match="`x`"):
        cnn(jnp.ones((2, 8, 8)))
    with pytest.raises(TypeError, match="divisible"):
        unet(jnp.ones((1, 5, 5)))
    with pytest.raises(TypeError, match="t"):
        unet(jnp.ones((1, 4, 4)), np.ones(3, np.float32))
    # a float size is not truncated, a zero channel count not accepted
    with pytest.raises(TypeError, match="hidden"):
        nn.MLP(2, 2, hidden=(2.5,), key=key)
    with pytest.raises(TypeError, match="in_size"):
        nn.MLP(2.0, 2, key=key)
    with pytest.raises(ValueError, match="channels"):
        nn.SmallCNN(1, 2, channels=(0,), key=key)
