"""WBMM layers: exact re-parameterisation folds, network plumbing, errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit.kernels.windowed_matmul import table_from_depthwise_kernel, windowed_matmul
from jaxkit.vision import (
    VARIANTS,
    WBMM,
    FoldedTable,
    WBMMBlock,
    WBMMNet,
    fold_bn_into_table,
    reparameterize,
)


@eqx.filter_jit  # one program per module structure instead of one per leaf shape, op by op
def _randomize(module, key, scale=0.3):
    """Perturb every float leaf (so folds are tested away from the zero/one init)."""
    leaves, tdef = jax.tree.flatten(module)
    keys = jax.random.split(key, len(leaves))
    new = [
        leaf + scale * jax.random.normal(k, leaf.shape, leaf.dtype)
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.floating)
        else leaf
        for leaf, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree.unflatten(tdef, new)


def _make(cls, *args, key, **kw):
    """``eqx.nn.make_with_state(cls)(*args, **kw)`` traced as one program (the initialisers
    would otherwise run op by op, compiling every primitive)."""
    return eqx.filter_jit(lambda k: eqx.nn.make_with_state(cls)(*args, **kw, key=k))(key)


@eqx.filter_jit
def _run(model, x, state, inference, key=None):
    return model(x, state, inference=inference, key=key)


def _to64(tree):
    return jax.tree.map(
        lambda v: (
            v.astype(jnp.float64) if isinstance(v, jax.Array) and v.dtype == jnp.float32 else v
        ),
        tree,
    )


@pytest.mark.parametrize(
    "mixer,size,window",
    [
        ("W", 4, 2),  # the WBMM fold in the default run (cheap shapes, 2 windows a side)
        pytest.param("D", 5, 3, marks=pytest.mark.slow),
        pytest.param("M", 3, 3, marks=pytest.mark.slow),
        pytest.param(5, 5, 3, marks=pytest.mark.slow),
    ],
)
def test_block_fold_identical_outputs(mixer, size, window, key):
    with jax.enable_x64(True):
        blk, state = _make(WBMMBlock, 3, mixer, window=window, layer_scale_init=0.5, key=key)
        blk, state = _to64(_randomize(blk, jax.random.fold_in(key, 1))), _to64(state)
        x = jax.random.normal(key, (3, size, size, 3), jnp.float64)
        for i in range(2):  # populate the running statistics
            _, state = _run(blk, x + i, state, False)
        want, _ = _run(blk, x, state, True)
        folded = eqx.filter_jit(reparameterize)(blk, state)  # one program, not op by op
        got, _ = _run(folded, x, state, True)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        assert folded.norm is None and folded.bn2 is None and folded.gamma is None
        if mixer in ("W", "M"):
            assert isinstance(folded.mixer, WBMM) and not folded.mixer.residual


def test_fold_bn_into_table_matches_bn():
    window = (3, 3)
    rng = np.random.default_rng(0)  # inputs and the BN affine map in NumPy: nothing compiles
    x = jnp.asarray(rng.standard_normal((2, 6, 6, 2)), jnp.float32)
    t = jnp.asarray(rng.standard_normal((2, 25)), jnp.float32)
    s, sh = np.array([0.5, -2.0], np.float32), np.array([0.1, 0.3], np.float32)
    want = np.asarray(windowed_matmul(x, t, window=window)) * s + sh
    s, sh = jnp.asarray(s), jnp.asarray(sh)
    folded = fold_bn_into_table(t, None, scale=s, shift=sh, window=window, residual=True)
    assert isinstance(folded, FoldedTable)
    got = windowed_matmul(x, folded.table, window=window, residual=False, bias=folded.bias)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_multikernel_fold_equals_dw_branches_single_window():
    """With BN = identity, the fold is R + e_c + embed(K5) + embed(K3): check vs convs."""
    rng = np.random.default_rng(1)  # NumPy inputs (eager jax.random compiles per shape)
    x = jnp.asarray(rng.standard_normal((2, 5, 5, 2)), jnp.float32)
    k5 = jnp.asarray(rng.standard_normal((5, 5, 2)), jnp.float32)
    t = table_from_depthwise_kernel(k5, window=5)
    from tests.kernels.test_windowed_matmul import _dw

    np.testing.assert_allclose(
        windowed_matmul(x, t, window=5, residual=False), _dw(x, k5), rtol=1e-5, atol=1e-5
    )


def test_multikernel_requires_single_window(key):
    blk, state = _make(WBMMBlock, 2, "M", window=3, key=key)
    with pytest.raises(ValueError, match="window"):
        blk(jnp.ones((1, 6, 6, 2)), state)


@pytest.mark.slow
def test_network_train_step_and_fold(key):
    net, state = _make(
        WBMMNet,
        depths=(1, 1),
        dims=(4, 8),
        patterns=("W", "M"),  # W on 6x6 (four 3x3 windows), M on the 3x3 map after the downsample
        in_channels=1,
        num_classes=3,
        window=3,
        stem_strides=(1,),
        layer_scale_init=0.1,
        drop_path_rate=0.1,
        key=key,
    )
    x = jax.random.normal(key, (4, 6, 6, 1))
    labels = jnp.array([0, 1, 2, 0])

    def loss(model, state, k):
        logits, state = model(x, state, key=k)
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(4), labels]), state

    (val, state), grads = eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))(
        net, state, jax.random.key(1)
    )
    assert np.isfinite(float(val))
    assert jax.tree.structure(eqx.filter(grads, eqx.is_array)) == jax.tree.structure(
        eqx.filter(net, eqx.is_array)
    )
    want, _ = _run(net, x, state, True)
    got, _ = _run(reparameterize(net, state), x, state, True)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_variants_and_errors(key):
    for v in VARIANTS.values():
        assert [len(p) for p in v["patterns"]] == list(v["depths"])
    with pytest.raises(ValueError, match="mixer"):
        WBMMBlock(4, "X", key=key)
    with pytest.raises(ValueError, match="`mixer`"):
        WBMMBlock(4, 4, key=key)  # an even kernel size
    with pytest.raises(TypeError, match="'mixer'|`mixer`"):  # jaxtyping's check, or ours
        WBMMBlock(4, 3.0, key=key)
    with pytest.raises(ValueError, match="`implementation`"):
        WBMMBlock(4, "D", implementation="cuda", key=key)  # checked even where unused
    with pytest.raises(ValueError, match="patterns"):
        WBMMNet(depths=(2,), dims=(4,), patterns=("W",), key=key)


def test_drop_path_needs_a_key_in_training(key):
    blk, state = _make(WBMMBlock, 2, "D", drop_path=0.5, key=key)
    x = np.ones((2, 3, 3, 2), np.float32)
    # the calls jitted (the error is raised while tracing): eager, every op compiled alone
    with pytest.raises(ValueError, match="`key`"):
        _run(blk, x, state, False)  # training without a key: no silent skip of drop-path
    y, state = _run(blk, x, state, False, jax.random.key(1))
    assert y.shape == x.shape
    y_inf, _ = _run(blk, x, state, True)  # inference needs no key
    assert y_inf.shape == x.shape
    blk0, state0 = _make(WBMMBlock, 2, "D", key=key)
    _run(blk0, x, state0, False)  # no drop-path: no randomness, no key needed
