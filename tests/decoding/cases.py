"""Conformance cases for jaxkit.decoding (see tests/conformance.py)."""

import dataclasses

import jax
import jax.numpy as jnp

from jaxkit import nn
from jaxkit.decoding import (
    ar_generate,
    dual_stream_batch,
    select_by_entropy,
    wedlm_generate,
    wedlm_loss,
)
from tests.conformance import Bad, Case

V, MASK = 11, 10
CFG = nn.TransformerConfig(
    vocab_size=V, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, mlp_dim=12
)
_P32 = nn.init_params(CFG, key=jax.random.key(7))
_P32 = dict(_P32, lm_head=_P32["lm_head"] * 4.0)


def _params(dtype):
    return jax.tree.map(lambda a: a.astype(dtype), _P32)


def _generate(prompt, prompt_len, *, max_new_tokens=4, window=2, **kw):
    """``wedlm_generate`` on the fixture's model (key 0); ``kw``: its other keywords."""
    return wedlm_generate(
        _P32,
        CFG,
        prompt,
        prompt_len,
        mask_token_id=MASK,
        max_new_tokens=max_new_tokens,
        window=window,
        **{"key": jax.random.key(0), **kw},
    )


def _adaptive(prompt, prompt_len, *, min_accept, probe_every=2):
    return _generate(
        prompt, prompt_len, entropy_threshold=0.9, min_accept=min_accept, probe_every=probe_every
    )


def _ar(prompt, prompt_len, *, temperature, top_p, max_new_tokens=3):
    return ar_generate(
        _P32,
        CFG,
        prompt,
        prompt_len,
        key=jax.random.key(0),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=5,
        top_p=top_p,
    )


def _gen_args(key, dtype):
    del dtype
    k1, k2 = jax.random.split(key)
    return (
        jax.random.randint(k1, (8, 3), 0, MASK).astype(jnp.int32),
        jax.random.randint(k2, (8,), 1, 4).astype(jnp.int32),
    )


# a module-level jitted apply_fn, as a user would write it (eager calls hit its cache)
_APPLY = jax.jit(lambda p, t, q, m: nn.apply(p, CFG, t, q, attn_mask=m).logits)


def _loss(tokens, params, *, ar_weight):
    apply_fn = _APPLY
    pos = (
        jnp.zeros_like(tokens, dtype=jnp.int32) + jnp.arange(tokens.shape[1], dtype=jnp.int32)[None]
    )
    lm = pos >= 1  # built on tokens: sharded like them
    batch = dual_stream_batch(tokens, lm, key=jax.random.key(3), block_size=2, mask_token_id=MASK)
    params = jax.tree.map(jnp.asarray, params)  # check_grads passes NumPy leaves
    loss, m = wedlm_loss(apply_fn, params, batch, ar_weight=ar_weight)
    # the per-row weights make the sharding check real (batch-sharded tokens in, the
    # batch's rows stay on 'data'); they do not depend on params (zero derivative)
    return loss, m["mlm"], m["ar"], batch.mlm_weights.astype(loss.dtype)


def _select(logits, selectable, *, threshold, pos_penalty):
    return select_by_entropy(logits, selectable, threshold=threshold, pos_penalty=pos_penalty)


CASES = [
    Case(
        name="decoding.wedlm_generate",
        fn=_generate,
        make_args=_gen_args,
        hparams={"entropy_threshold": (0.4, 0.9), "pos_penalty": (0.02, 0.05)},
        grad_modes=(),
        dtypes=(jnp.float32,),  # integer outputs; parameters are closed over in f32
        shard_argnums=(0, 1),  # batch-sharded prompts: cache, window and output follow
        bad=(
            Bad(
                "prompt longer than cache",
                lambda key: (_gen_args(key, None), {"max_len": 2}),
                ValueError,
                "prompt",
            ),
            Bad(
                "window larger than cache",
                lambda key: (_gen_args(key, None), {"window": 9, "max_len": 8}),
                ValueError,
                "window",
            ),
            Bad(
                "invalid token id",
                lambda key: (
                    (_gen_args(key, None)[0].at[0, 0].set(V), _gen_args(key, None)[1]),
                    {},
                ),
                ValueError,
                "prompt",
            ),
        ),
    ),
    Case(
        name="decoding.wedlm_generate_adaptive",
        fn=_adaptive,
        make_args=_gen_args,
        hparams={"min_accept": (1.5, 2.5)},  # traced: one program across thresholds
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "negative min_accept",
                lambda key: (_gen_args(key, None), {"min_accept": -1.0}),
                ValueError,
                "min_accept",
            ),
            Bad(
                "probe_every=0",
                lambda key: (_gen_args(key, None), {"min_accept": 2.0, "probe_every": 0}),
                ValueError,
                "probe_every",
            ),
        ),
    ),
    Case(
        name="decoding.ar_generate",
        fn=_ar,
        make_args=_gen_args,
        hparams={"temperature": (0.7, 1.3), "top_p": (0.9, 0.8)},  # sampling on
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "max_new_tokens=True",
                lambda key: (_gen_args(key, None), {"max_new_tokens": True}),
                TypeError,
                "max_new_tokens",
            ),
            Bad(
                "NaN temperature",
                lambda key: (_gen_args(key, None), {"temperature": float("nan")}),
                ValueError,
                "temperature",
            ),
        ),
    ),
    Case(
        name="decoding.wedlm_loss",
        fn=_loss,
        make_args=lambda key, dtype: (jax.random.randint(key, (8, 6), 0, MASK), _params(dtype)),
        hparams={"ar_weight": (1.0, 0.5)},
        grad_modes=("rev",),
        grad_argnums=(1,),
        rtol=1e-4,
        shard_argnums=(0,),  # batch-sharded tokens; params replicated
        bad=(
            Bad("float tokens", lambda key: ((jnp.zeros((8, 6)), _P32), {}), TypeError, "tokens"),
        ),
    ),
    Case(
        name="decoding.select_by_entropy",
        fn=_select,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 5, V), dtype) * 3.0,
            jax.random.bernoulli(jax.random.fold_in(key, 1), 0.7, (8, 5)),
        ),
        hparams={"threshold": (0.5, 1.5), "pos_penalty": (0.02, 0.1)},
        grad_modes=(),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "rank-2 logits",
                lambda key: ((jnp.zeros((8, 5)), jnp.ones((8, 5), bool)), {}),
                TypeError,
                "logits",
            ),
            Bad(
                "integer selectable",
                lambda key: ((jnp.zeros((8, 5, V)), jnp.ones((8, 5), jnp.int32)), {}),
                TypeError,
                "selectable",
            ),
            Bad(
                "NaN logits",
                lambda key: ((jnp.full((8, 5, V), jnp.nan), jnp.ones((8, 5), bool)), {}),
                ValueError,
                "logits",
            ),
            Bad(
                "infinite threshold",
                lambda key: (
                    (jnp.zeros((8, 5, V)), jnp.ones((8, 5), bool)),
                    {"threshold": float("inf")},
                ),
                ValueError,
                "threshold",
            ),
        ),
    ),
]


# The heaviest checks of the decoder and loss (whole-model grads, vmap of the while loop,
# bf16 of the loss) run in `make test-slow`; the default run keeps the rest.
_SLOW = {
    # the batch-sharded generation loop: slow tier (make test: wedlm_loss's sharding check)
    "decoding.wedlm_generate": ("vmap", "sharding"),
    # the adaptive loop (a lax.cond over the AR loop) keeps its cheap checks by default
    "decoding.wedlm_generate_adaptive": ("vmap", "dtypes", "sharding", "jit"),
    # one decoder per family in the default run: wedlm_generate carries the full set,
    # ar_generate keeps its cheap checks (eager cache, eval_shape, bad inputs) by default
    "decoding.ar_generate": ("vmap", "jit", "traced_once", "dtypes", "sharding"),
    "decoding.wedlm_loss": ("grads", "dtypes", "vmap"),
}
CASES = [dataclasses.replace(c, slow_checks=_SLOW.get(c.name, ())) for c in CASES]
