"""Conformance cases for jaxkit.memory (see tests/conformance.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import memory, nn, privacy
from tests.conformance import ALL_BUT_BAD_INPUTS, Bad, Case, steered_case
from tests.memory._setup import AP, CFG, MC, P

_S = 6  # context slots


def _inject_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        jax.random.normal(k1, (8, _S, CFG.d_model), dtype),
        jax.random.randint(k2, (8,), 1, _S + 1),
        jax.random.randint(k3, (8,), 0, MC.k_max + 1),
    )


def _inject(ctx, at, k):
    valid = jnp.ones(ctx.shape[:2], bool)
    return memory.inject(AP, MC, ctx, valid, at, at % 2, k)[0]


_LC = memory.DLMRConfig(
    layer=1, bank_sizes=(4, 4), budgets=(1, 3), injector="lora_replica", lora_rank=2
)
_AL = memory.init_dlmr(CFG, _LC, key=jax.random.key(3))
# a trained-looking replica: non-zero ``a`` factors (a fresh one is the frozen LM)
_AL = _AL._replace(
    injector=jax.tree.map(
        lambda f: f._replace(a=0.3 * jax.random.normal(jax.random.key(4), f.a.shape)),
        _AL.injector,
        is_leaf=lambda x: isinstance(x, privacy.LoraFactors),
    )
)


def _inject_lora(ctx, at, k):
    valid = jnp.ones(ctx.shape[:2], bool)
    return memory.inject(_AL, _LC, ctx, valid, at, at % 2, k, lm_params=P, lm_cfg=CFG)[0]


def _generate(tokens, prompt_len, *, top_p, interventions=None):
    cfg = memory.DLMRConfig(**{**MC.__dict__, "delimiter_ids": ()})
    return memory.dlmr_generate(
        P,
        CFG,
        AP,
        cfg,
        nn.embed(P, CFG, tokens),
        prompt_len,
        key=jax.random.key(0),
        max_new_tokens=3,
        router="sample",
        temperature=1.0,
        top_p=top_p,
        interventions=interventions,
    ).tokens


def _steered(tokens, prompt_len, vec, *, top_p):
    """:func:`_generate` with a per-row edit at the memory's block."""
    return _generate(
        tokens, prompt_len, top_p=top_p, interventions=nn.Interventions({MC.layer: vec})
    )


def _steered_args(key, dtype):
    """``_tok_args`` and a per-row edit ``[B, D]`` (sharded with the rows)."""
    return (*_tok_args(key, dtype), jax.random.normal(jax.random.fold_in(key, 2), (8, 16), dtype))


def _tok_args(key, dtype):
    k1, k2 = jax.random.split(key)
    return (
        jax.random.randint(k1, (8, 5), 0, CFG.vocab_size),
        jax.random.randint(k2, (8,), 1, 6),
    )


def _mem_forward(embeds, memory_, at):
    return memory.memory_forward(P, CFG, MC, embeds, memory_, at, at % (MC.k_max + 1))


def _mf_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        jax.random.normal(k1, (8, 5, CFG.d_model), dtype),
        jax.random.normal(k2, (8, MC.k_max, CFG.d_model), dtype),
        jax.random.randint(k3, (8,), 0, 6),
    )


def _grpo(router_h, rewards, *, kl_beta):
    b, n = router_h.shape[:2]
    # NumPy from the static shapes: no eager op of the fixture's own to compile
    elig = np.broadcast_to(np.arange(n)[None, :] % 2 == 0, (b, n))
    acts = np.where(elig, 1 + (np.arange(n)[None, :] + np.arange(b)[:, None]) % 4, 0)
    elig, acts = jnp.asarray(elig), jnp.asarray(acts, jnp.int32)
    return memory.stage3_loss(
        AP.router, AP.router, router_h, acts, elig, rewards, cfg=MC, group=2, kl_beta=kl_beta
    )[0]


# the two injectors' cases: same arguments; f32 backbone and adapters (no x64 gradient check)
_inject_case = functools.partial(
    Case,
    make_args=_inject_args,
    grad_modes=(),
    dtypes=(jnp.float32,),
    shard_argnums=(0, 1, 2),
    rtol=1e-4,
)
_BAD_K = Bad(
    "k above k_max",
    lambda key: ((jnp.ones((8, _S, 16)), jnp.ones(8, jnp.int32), jnp.full(8, 9)), {}),
    ValueError,
    "k",
)

CASES = [
    _inject_case(
        name="memory.inject",
        slow_checks=("sharding",),
        fn=_inject,
        bad=(
            _BAD_K,
            Bad(
                "negative at",
                lambda key: (
                    (jnp.ones((8, _S, 16)), -jnp.ones(8, jnp.int32), jnp.ones(8, jnp.int32)),
                    {},
                ),
                ValueError,
                "at",
            ),
            Bad(
                "ctx of the wrong width",
                lambda key: (
                    (jnp.ones((8, _S, 7)), jnp.ones(8, jnp.int32), jnp.ones(8, jnp.int32)),
                    {},
                ),
                TypeError,
                "ctx",
            ),
        ),
    ),
    _inject_case(
        name="memory.inject[lora_replica]",
        slow_checks=("sharding", "vmap", "eval_shape", "traced_once"),
        fn=_inject_lora,
        bad=(_BAD_K,),
    ),
    Case(
        name="memory.dlmr_generate",
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
                    (jnp.ones((8, 5), jnp.int32), jnp.zeros(8, jnp.int32)),
                    {"top_p": 1.0},
                ),
                ValueError,
                "prompt_len",
            ),
        ),
    ),
    # the oracles: tests/memory/test_dlmr_interventions.py
    steered_case(
        "memory.dlmr_generate/interventions",
        _steered,
        _steered_args,
        wide_edit=lambda key: (
            (jnp.ones((8, 5), jnp.int32), jnp.full(8, 3, jnp.int32), jnp.ones((8, 17))),
            {"top_p": 1.0},
        ),
        layer=1,
        hparams={"top_p": (0.9, 0.8)},
        shard_argnums=(0, 1, 2),
    ),
    Case(
        name="memory.memory_forward",
        slow_checks=("vmap", "sharding", "eval_shape", "dtypes", "traced_once"),
        fn=_mem_forward,
        make_args=_mf_args,
        grad_modes=(),  # f32 backbone parameters: no x64 gradient check
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(
            Bad(
                "at past the end",
                lambda key: ((jnp.ones((8, 5, 16)), jnp.ones((8, 3, 16)), jnp.full(8, 9)), {}),
                ValueError,
                "at",
            ),
        ),
    ),
    Case(
        name="memory.stage3_loss",
        slow_checks=("sharding", "vmap", "dtypes"),
        fn=_grpo,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 4, CFG.d_model), dtype),
            jax.random.bernoulli(jax.random.fold_in(key, 1), 0.5, (8,)).astype(dtype),
        ),
        hparams={"kl_beta": (0.02, 0.1)},
        grad_modes=(),  # the router computes in f32
        dtypes=(jnp.float32,),
        shard_argnums=(),
        vmap=False,  # groups span rows
        bad=(
            Bad(
                "NaN kl_beta",
                lambda key: ((jnp.ones((8, 4, CFG.d_model)), jnp.ones(8)), {"kl_beta": jnp.nan}),
                ValueError,
                "kl_beta",
            ),
            Bad(
                "rewards of the wrong length",
                lambda key: ((jnp.ones((8, 4, CFG.d_model)), jnp.ones(6)), {}),
                TypeError,
                "rewards",
            ),
        ),
    ),
]
