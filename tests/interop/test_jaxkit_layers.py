"""Both adapters on jaxkit's own layers: the nn.MLP module and the transformer pair."""

import functools

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxkit import nn
from jaxkit.interop.flax import to_nnx
from jaxkit.interop.haiku import to_haiku

CFG = nn.TransformerConfig(
    vocab_size=16,
    d_model=16,
    n_layers=1,
    n_heads=2,
    n_kv_heads=1,
    head_dim=8,
    mlp_dim=32,
)


def _transformer_pair():
    init = functools.partial(nn.init_params, CFG)
    return init, lambda params, tokens: nn.apply(params, CFG, tokens).logits


def test_transformer_pair_in_flax_and_haiku(key):
    tokens = jnp.arange(12, dtype=jnp.int32).reshape(2, 6) % CFG.vocab_size
    ref = nn.init_params(CFG, key=key)
    want = nn.apply(ref, CFG, tokens).logits  # jitted at module level

    # flax NNX: the pair's params become nnx.Param state, initialised from `key`
    m = to_nnx(_transformer_pair(), key=key)
    np.testing.assert_array_equal(m.params["layers.wq"][...], ref["layers"]["wq"])
    out, grads = nnx.jit(lambda m, t: (m(t), nnx.grad(lambda m: jnp.mean(m(t) ** 2))(m)))(m, tokens)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert float(jnp.abs(grads["params"]["layers.w_up"][...]).max()) > 0
    assert jax.tree.structure(m.unwrap()) == jax.tree.structure(ref)

    # haiku: hk.get_parameter with the values of init(key=key)
    f = hk.without_apply_rng(
        hk.transform(lambda t: to_haiku(_transformer_pair(), key=key, name="lm")(t))
    )
    params = f.init(None, tokens)
    np.testing.assert_array_equal(params["lm"]["embed"], ref["embed"])
    out, grads = jax.jit(
        lambda p, t: (
            f.apply(p, t),
            jax.grad(lambda p: jnp.mean(f.apply(p, t) ** 2))(p),
        )
    )(params, tokens)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert float(jnp.abs(grads["lm"]["layers.w_up"]).max()) > 0


def test_jaxkit_mlp_module_in_both(key):
    mlp = nn.MLP(4, 2, hidden=(8,), key=key)
    x = jnp.ones((3, 4))
    np.testing.assert_array_equal(to_nnx(mlp, batch_axis=0)(x), jax.vmap(mlp)(x))
    f = hk.without_apply_rng(hk.transform(lambda x: to_haiku(mlp, batch_axis=0)(x)))
    np.testing.assert_array_equal(f.apply(f.init(None, x), x), jax.vmap(mlp)(x))
