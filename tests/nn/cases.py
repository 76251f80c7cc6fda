"""Conformance cases for jaxkit.nn (see tests/conformance.py)."""

import dataclasses

import jax
import jax.numpy as jnp

from jaxkit import nn
from tests.conformance import Bad, Case

CFG = nn.TransformerConfig(
    vocab_size=13,
    d_model=8,
    n_layers=2,
    n_heads=2,
    n_kv_heads=1,
    head_dim=4,
    mlp_dim=12,
    qkv_bias=True,
)
_P32 = nn.init_params(CFG, key=jax.random.key(42))


def _params(dtype):
    return jax.tree.map(lambda a: a.astype(dtype), _P32)


def _logits_from_tokens(tokens):
    return nn.apply(_P32, CFG, tokens).logits


def _logits_from_embeds(inputs_embeds, params):
    return nn.apply(params, CFG, inputs_embeds=inputs_embeds).logits


def _prefill(tokens, lengths):
    return nn.prefill(_P32, CFG, tokens, lengths, max_len=6)


def _prefill_then_step(tokens, prompt):
    cache = nn.prefill(_P32, CFG, prompt, jnp.full_like(prompt[:, 0], 3), max_len=6).cache
    return nn.decode_step(_P32, CFG, tokens, cache)


_U32 = nn.unstack_layers(_P32)


def _per_layer_step(tokens, prompt):
    """Per-layer weights: the prefill gives a per-layer cache, the step keeps it."""
    cache = nn.prefill(_U32, CFG, prompt, jnp.full_like(prompt[:, 0], 3), max_len=6).cache
    return nn.decode_step(_U32, CFG, tokens, cache)


def _unstack(wq, w_up, embed):
    """Stacked ``[L, ...]`` weights (leading axis a batch of 8 in the checks) per layer."""
    return nn.unstack_layers({"embed": embed, "layers": {"wq": wq, "w_up": w_up}})


def _stack(a, b, c):
    return nn.stack_layers({"layers": ({"wq": a}, {"wq": b}, {"wq": c})})


def _intervened(inputs_embeds, vec, latents, params):
    """Additive edit after block 0, one latent inserted after block 0 at slot 1."""
    b = inputs_embeds.shape[0]
    iv = nn.Interventions(
        {1: vec}, insert_layer=0, insert_at=jnp.ones((b,), jnp.int32), latents=latents
    )
    return nn.apply(params, CFG, inputs_embeds=inputs_embeds, interventions=iv).logits


_WRONG_WIDTH_EDIT = Bad(
    "edit of the wrong width",
    lambda key: ((jnp.ones((8, 4, 8)), jnp.ones((8, 3)), jnp.ones((8, 1, 8)), _P32), {}),
    TypeError,
    "add",
)


def _combined(inputs_embeds, vec, latents, params):
    """:func:`_intervened`'s edits from three objects: half the edit twice, the span alone."""
    b = inputs_embeds.shape[0]
    span = nn.Interventions(insert_layer=0, insert_at=jnp.ones((b,), jnp.int32), latents=latents)
    half = nn.Interventions({1: 0.5 * vec})
    iv = nn.combine_interventions(half, span, None, half)
    return nn.apply(params, CFG, inputs_embeds=inputs_embeds, interventions=iv).logits


def _iv_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        jax.random.normal(k1, (8, 4, CFG.d_model), dtype),
        jax.random.normal(k2, (8, CFG.d_model), dtype),
        jax.random.normal(k3, (8, 1, CFG.d_model), dtype),
        _params(dtype),
    )


def _logits_at(inputs_embeds, rows, cols, params):
    """The logits at 8 (row, position) slots of a causal forward (last block at the slots)."""
    return nn.apply(params, CFG, inputs_embeds=inputs_embeds, outputs_at=(rows, cols)).logits


def _logits_at_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        jax.random.normal(k1, (8, 4, CFG.d_model), dtype),
        jax.random.randint(k2, (8,), 0, 8),
        jax.random.randint(k3, (8,), 0, 4),
        _params(dtype),
    )


def _write_kv(h, lengths, params, *, layer=1):
    """Block ``layer``'s K/V rows of ``h`` written at each row's length (3 committed slots)."""
    cache = nn.init_cache(CFG, max_len=6, like=lengths, dtype=h.dtype)._replace(length=lengths)
    pos = lengths[:, None] + jnp.arange(h.shape[1], dtype=lengths.dtype)[None, :]
    out = nn.write_kv(params, CFG, h, pos, cache=cache, layer=layer)
    return out.k, out.v


def _write_kv_args(key, dtype):
    h = jax.random.normal(key, (8, 2, CFG.d_model), dtype)
    return h, jax.random.randint(jax.random.fold_in(key, 1), (8,), 0, 5), _params(dtype)


def _tokens(key, shape):
    return jax.random.randint(key, shape, 0, CFG.vocab_size)


def _mlp_fwd(x, model):
    return jax.vmap(model)(x)


def _cnn_fwd(x, model):
    return jax.vmap(model)(x)


_STEP = Case(
    name="nn.decode_step",
    # sharding: make test keeps nn.prefill's and tests/nn/test_cache_prefix.py's batch-sharded
    # decode step (Auto and Explicit meshes)
    slow_checks=("dtypes", "vmap", "traced_once", "jit", "eval_shape", "sharding"),
    fn=_prefill_then_step,
    make_args=lambda key, dtype: (
        _tokens(key, (8,)),
        _tokens(jax.random.fold_in(key, 1), (8, 3)),
    ),
    grad_modes=(),
    dtypes=(jnp.float32,),
    shard_argnums=(0, 1),
    bad=(
        Bad(
            "negative token id",
            lambda key: ((jnp.full((8,), -1), jnp.zeros((8, 3), int)), {}),
            ValueError,
            "tokens",
        ),
    ),
)


CASES = [
    Case(
        name="nn.apply/tokens",
        slow_checks=("dtypes", "vmap", "traced_once", "jit"),
        fn=_logits_from_tokens,
        make_args=lambda key, dtype: (jax.random.randint(key, (8, 5), 0, CFG.vocab_size),),
        grad_modes=(),  # integer tokens; gradients are covered by the embeds case
        dtypes=(jnp.float32,),  # parameters are closed over in f32
        bad=(Bad("float tokens", lambda key: ((jnp.zeros((8, 5)),), {}), TypeError, "tokens"),),
    ),
    Case(
        name="nn.apply/inputs_embeds",
        # bf16: test_transformer.py; make test keeps outputs_at's grads and the token
        # forward's sharding check
        slow_checks=("dtypes", "vmap", "grads", "sharding"),
        fn=_logits_from_embeds,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 4, CFG.d_model), dtype),
            _params(dtype),
        ),
        grad_modes=("fwd", "rev"),
        grad_argnums=(0,),
        rtol=1e-4,
        bad=(
            Bad(
                "wrong width",
                lambda key: ((jnp.ones((8, 4, 3)), _P32), {}),
                TypeError,
                "inputs_embeds",
            ),
        ),
    ),
    Case(
        name="nn.apply/interventions",
        slow_checks=("dtypes", "vmap", "traced_once", "grads", "sharding"),
        fn=_intervened,
        make_args=_iv_args,
        grad_modes=("rev",),
        grad_argnums=(0, 1, 2),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(
            _WRONG_WIDTH_EDIT,
            Bad(
                "latents of the wrong width",
                lambda key: (
                    (jnp.ones((8, 4, 8)), jnp.ones((8, 8)), jnp.ones((8, 1, 5)), _P32),
                    {},
                ),
                TypeError,
                "latents",
            ),
        ),
    ),
    Case(
        name="nn.combine_interventions/apply",
        # the default run keeps jit, eager_cache, eval_shape and the bad inputs; the forward
        # under the combined object is nn.apply/interventions' (checked there in full)
        slow_checks=("dtypes", "vmap", "grads", "sharding"),
        fn=_combined,
        make_args=_iv_args,
        grad_modes=("rev",),
        grad_argnums=(0, 1, 2),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(_WRONG_WIDTH_EDIT,),
    ),
    Case(
        name="nn.apply/outputs_at",
        slow_checks=("dtypes", "vmap", "eval_shape"),
        fn=_logits_at,
        make_args=_logits_at_args,
        grad_modes=("fwd", "rev"),
        grad_argnums=(0, 3),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(
            Bad(
                "row out of range",
                lambda key: (
                    (jnp.ones((8, 4, 8)), jnp.full((8,), 8), jnp.zeros((8,), int), _P32),
                    {},
                ),
                ValueError,
                "outputs_at",
            ),
            Bad(
                "float cols",
                lambda key: ((jnp.ones((8, 4, 8)), jnp.zeros((8,), int), jnp.zeros(8), _P32), {}),
                TypeError,
                "outputs_at",
            ),
        ),
    ),
    Case(
        name="nn.prefill",
        slow_checks=("dtypes", "vmap", "traced_once", "jit", "eval_shape"),
        fn=_prefill,
        make_args=lambda key, dtype: (
            _tokens(key, (8, 4)),
            jax.random.randint(jax.random.fold_in(key, 1), (8,), 1, 5),
        ),
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "token id >= vocab",
                lambda key: ((jnp.full((8, 4), 13), jnp.ones(8, int)), {}),
                ValueError,
                "tokens",
            ),
        ),
    ),
    _STEP,
    dataclasses.replace(  # the same checks with per-layer weights and cache
        _STEP, name="nn.decode_step/per_layer", fn=_per_layer_step
    ),
    Case(
        name="nn.unstack_layers",
        fn=_unstack,
        make_args=lambda key, dtype: tuple(
            jax.random.normal(jax.random.fold_in(key, i), shape, dtype)
            for i, shape in enumerate(((8, 3, 4, 6), (8, 3, 4, 5), (8, 7)))
        ),
        grad_argnums=(0, 1),
        slow_checks=("grads",),
        shard_argnums=(),  # the leading axis is the layer axis: see test_per_layer.py
    ),
    Case(
        name="nn.stack_layers",
        fn=_stack,
        make_args=lambda key, dtype: tuple(
            jax.random.normal(jax.random.fold_in(key, i), (8, 4, 6), dtype) for i in range(3)
        ),
        grad_argnums=(0, 2),
        slow_checks=("grads",),
        shard_argnums=(),  # the output's leading axis is the layer axis: test_per_layer.py
    ),
    Case(
        name="nn.write_kv",
        slow_checks=("dtypes", "vmap", "eval_shape", "grads", "sharding"),
        fn=_write_kv,
        make_args=_write_kv_args,
        grad_modes=("fwd", "rev"),
        grad_argnums=(0, 2),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "h of the wrong width",
                lambda key: ((jnp.ones((8, 2, 5)), jnp.zeros((8,), jnp.int32), _P32), {}),
                TypeError,
                "h",
            ),
            Bad(
                "layer out of range",
                lambda key: (
                    (jnp.ones((8, 2, 8)), jnp.zeros((8,), jnp.int32), _P32),
                    {"layer": 2},
                ),
                ValueError,
                "layer",
            ),
            Bad(
                "rows past the capacity",
                lambda key: ((jnp.ones((8, 2, 8)), jnp.full((8,), 5, jnp.int32), _P32), {}),
                ValueError,
                "overflow",
            ),
        ),
    ),
    Case(
        name="nn.MLP/vmap",
        fn=_mlp_fwd,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 3), dtype),
            jax.tree.map(
                lambda a: a.astype(dtype),
                nn.MLP(3, 2, hidden=(6,), activation="tanh", key=jax.random.key(1)),
            ),
        ),
        grad_argnums=(0,),
        bad=(
            Bad(
                "wrong width",
                lambda key: ((jnp.ones((8, 4)), nn.MLP(3, 2, key=jax.random.key(1))), {}),
                TypeError,
                "x",
            ),
        ),
    ),
    Case(
        name="nn.SmallCNN/vmap",
        slow_checks=("dtypes", "grads", "vmap"),  # MLP keeps the full set
        fn=_cnn_fwd,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 1, 4, 4), dtype),
            jax.tree.map(
                lambda a: a.astype(dtype),
                nn.SmallCNN(1, 2, channels=(2, 3), activation="tanh", key=jax.random.key(2)),
            ),
        ),
        grad_argnums=(0,),
        rtol=1e-4,
        bad=(
            Bad(
                "wrong channels",
                lambda key: (
                    (jnp.ones((8, 2, 4, 4)), nn.SmallCNN(1, 2, key=jax.random.key(2))),
                    {},
                ),
                TypeError,
                "x",
            ),
        ),
    ),
]
