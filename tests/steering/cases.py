"""Conformance cases for jaxkit.steering (see tests/conformance.py)."""

import jax
import jax.numpy as jnp

from jaxkit import nn, steering
from tests.conformance import ALL_BUT_BAD_INPUTS, Bad, Case, steered_case
from tests.steering._setup import CFG, SC

_P = nn.init_params(CFG, key=jax.random.key(3))
_VP = steering.init_svgt(CFG, SC, key=jax.random.key(4))


def _tok_args(key, dtype):
    k1, k2 = jax.random.split(key)
    return (
        jax.random.randint(k1, (8, 6), 0, CFG.vocab_size),
        jax.random.randint(k2, (8,), 1, 7),
    )


def _forward(tokens, prompt_len):
    return steering.svgt_forward(_P, CFG, _VP, SC, tokens, prompt_len).logits


def _svgt_tokens(sc, new, tokens, prompt_len, **kw):
    """``svgt_generate``'s tokens with settings ``sc``, ``new`` tokens, temperature 1."""
    return steering.svgt_generate(
        _P, CFG, _VP, sc, tokens, prompt_len,
        key=jax.random.key(0), max_new_tokens=new, temperature=1.0, **kw,
    ).tokens  # fmt: skip


def _generate(tokens, prompt_len, *, top_p):
    return _svgt_tokens(SC, 3, tokens, prompt_len, top_p=top_p)


def _steered_args(key, dtype):
    """``_tok_args`` and a per-row edit ``[B, D]`` (sharded with the rows)."""
    return (*_tok_args(key, dtype), jax.random.normal(jax.random.fold_in(key, 2), (8, 16), dtype))


def _svgt_steered(tokens, prompt_len, vec, *, top_p):
    """``svgt_generate`` with a per-row edit at the bridge's block (the bridge rows get it)."""
    iv = nn.Interventions({SC.layer: vec})
    return _svgt_tokens(SC, 3, tokens, prompt_len, top_p=top_p, interventions=iv)


# l = 0 (two blocks above l) and R = 2 with 4 new tokens: the loop refreshes at step 2
_SR = SC._replace(layer=0, refresh_every=2, ema=0.5)


def _refreshing(tokens, prompt_len, *, top_p, mode):
    return _svgt_tokens(_SR, 4, tokens, prompt_len, top_p=top_p, mode=mode)


def _refresh_case(mode):
    """The EMA-refresh generators (``refresh_every > 0``): cached and recompute."""
    return Case(
        name=f"steering.svgt_generate/refresh_{mode}",
        # make test keeps one refreshing generator's jit (traced once over top_p): the
        # recompute mode's; the cached mode equals it (tests/steering/test_refresh.py)
        slow_checks=("vmap", "sharding", "eval_shape", "jit", "dtypes", "eager_cache")
        + (("traced_once",) if mode == "cached" else ()),
        fn=_refreshing,
        make_args=_tok_args,
        hparams={"top_p": (0.9, 0.8)},
        static={"mode": mode},
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "prompt_len past the prompt",
                lambda key: (
                    (jnp.ones((8, 6), jnp.int32), jnp.full(8, 7, jnp.int32)),
                    {"top_p": 1.0},
                ),
                ValueError,
                "prompt_len",
            ),
        ),
    )


def _correction(z, *, step):
    return steering.value_correction(_VP.disc, z, step)


def _steered(inputs_embeds, vec, *, scale):
    iv = steering.steer_add(vec[0], scale, layer=1)
    return nn.apply(_P, CFG, inputs_embeds=inputs_embeds, interventions=iv).logits


CASES = [
    Case(
        name="steering.svgt_forward",
        slow_checks=("vmap", "sharding", "eval_shape"),
        fn=_forward,
        make_args=_tok_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        rtol=1e-4,
        bad=(
            Bad(
                "token id >= vocab",
                lambda key: ((jnp.full((8, 6), 99), jnp.ones(8, jnp.int32)), {}),
                ValueError,
                "tokens",
            ),
        ),
    ),
    Case(
        name="steering.svgt_generate",
        slow_checks=ALL_BUT_BAD_INPUTS,
        fn=_generate,
        make_args=_tok_args,
        hparams={"top_p": (0.9, 0.8)},
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "prompt_len 0",
                lambda key: (
                    (jnp.ones((8, 6), jnp.int32), jnp.zeros(8, jnp.int32)),
                    {"top_p": 1.0},
                ),
                ValueError,
                "prompt_len",
            ),
        ),
    ),
    _refresh_case("cached"),
    _refresh_case("recompute"),
    # the oracles: tests/steering/test_interventions.py
    steered_case(
        "steering.svgt_generate/interventions",
        _svgt_steered,
        _steered_args,
        wide_edit=lambda key: (
            (jnp.ones((8, 6), jnp.int32), jnp.full(8, 3, jnp.int32), jnp.ones((8, 17))),
            {"top_p": 1.0},
        ),
        layer=1,
        hparams={"top_p": (0.9, 0.8)},
        shard_argnums=(0, 1, 2),
    ),
    Case(
        name="steering.value_correction",
        slow_checks=("dtypes", "sharding"),
        fn=_correction,
        make_args=lambda key, dtype: (jax.random.normal(key, (8, SC.value_dim), dtype),),
        hparams={"step": (1.0, 0.5)},
        grad_modes=(),  # detached by definition (stop_gradient)
        dtypes=(jnp.float32,),
        bad=(
            Bad("1-D z", lambda key: ((jnp.ones(SC.value_dim),), {"step": 1.0}), TypeError, "z"),
            Bad(
                "NaN step",
                lambda key: ((jnp.ones((8, SC.value_dim)),), {"step": float("nan")}),
                ValueError,
                "step",
            ),
        ),
    ),
    Case(
        name="steering.steer_add/apply",
        slow_checks=("dtypes", "vmap", "sharding", "grads"),
        fn=_steered,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 4, CFG.d_model), dtype),
            jax.random.normal(jax.random.fold_in(key, 1), (8, CFG.d_model), dtype),
        ),
        hparams={"scale": (1.0, 2.0)},
        grad_modes=("rev",),
        grad_argnums=(0, 1),
        dtypes=(jnp.float32,),
        shard_argnums=(0,),
        rtol=1e-4,
        bad=(
            Bad(
                "vector of the wrong width",
                lambda key: ((jnp.ones((8, 4, CFG.d_model)), jnp.ones((8, 3))), {"scale": 1.0}),
                TypeError,
                "add",
            ),
            Bad(
                "infinite scale",
                lambda key: (
                    (jnp.ones((8, 4, CFG.d_model)), jnp.ones((8, CFG.d_model))),
                    {"scale": float("inf")},
                ),
                ValueError,
                "scale",
            ),
        ),
    ),
]
