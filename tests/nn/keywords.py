"""Keyword-sweep recipes for nn (see tests/keywords.py)."""

import dataclasses
import functools

import jax
import numpy as np

from jaxkit import nn
from tests.nn.cases import CFG

_rng = np.random.default_rng(0)
H = _rng.normal(size=(1, 3, CFG.d_model)).astype(np.float32)
POS = np.arange(3, dtype=np.int32)[None]
TOKENS = np.array([[1, 2, 3]], np.int32)
PARAMS = nn.init_params(CFG, key=jax.random.key(0))
KV = _rng.normal(size=(1, 3, CFG.n_kv_heads, CFG.head_dim)).astype(np.float32)
Q = _rng.normal(size=(1, 3, CFG.n_heads, CFG.head_dim)).astype(np.float32)
CAUSAL = np.tril(np.ones((3, 3), bool))[None]
X1 = np.ones((2,), np.float32)  # one MLP input
IMG = _rng.normal(size=(1, 4, 4)).astype(np.float32)  # one image [C, H, W]


def _cache():
    return nn.init_cache(CFG, max_len=4, batch=1)


def _run_layers(**kw):
    return nn.run_layers(PARAMS, CFG, H, POS, **kw).h


def _interventions(**kw):
    """An insertion of K = 2 latents after block 0 (``add`` given, or a steering vector)."""
    kw = {"add": {0: np.ones(CFG.d_model, np.float32)}, "insert_layer": 0, "n_insert": 2, **kw}
    return nn.Interventions(insert_at=np.zeros(1, np.int32), **kw)


RECIPES = {
    "jaxkit.nn.run_layers": _run_layers,
    "jaxkit.nn.apply": lambda **kw: nn.apply(PARAMS, CFG, TOKENS, cache=_cache(), **kw).logits,
    "jaxkit.nn.decode_step": lambda **kw: (
        nn.decode_step(PARAMS, CFG, TOKENS[:, 0], _cache(), **kw).logits
    ),
    "jaxkit.nn.write_kv": lambda **kw: (
        nn.write_kv(PARAMS, CFG, H, POS, cache=_cache(), layer=0, **kw).k
    ),
    "jaxkit.nn.MLP": lambda **kw: nn.MLP(2, 1, hidden=(2,), **{"key": jax.random.key(0), **kw}),
    "jaxkit.nn.init_params": lambda **kw: nn.init_params(CFG, **{"key": jax.random.key(0), **kw}),
    "jaxkit.nn.init_cache": lambda **kw: nn.init_cache(CFG, max_len=4, **{"batch": 2, **kw}),
    "jaxkit.nn.tiny_task": lambda **kw: nn.tiny_task(
        "noisy_counting", batch=2, length=6, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.nn.RopeScaling": lambda **kw: nn.RopeScaling(
        **{"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16, **kw}
    ),
    "jaxkit.nn.TransformerConfig": lambda **kw: nn.TransformerConfig(
        **{**dataclasses.asdict(CFG), "sliding_window": 4, **kw}
    ),
    "jaxkit.nn.Interventions": _interventions,
    "jaxkit.nn.Interventions.add_to": lambda **kw: nn.Interventions(
        {0: np.ones((1, CFG.d_model), np.float32)}
    ).add_to(0, H, **kw),
    "jaxkit.nn.SmallCNN": lambda **kw: nn.SmallCNN(
        1, 2, channels=(2,), **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.nn.UNet": lambda **kw: nn.UNet(1, 1, channels=(2,), **{"key": jax.random.key(0), **kw}),
    "jaxkit.nn.param_specs": functools.partial(nn.param_specs, CFG),
    "jaxkit.nn.attention": functools.partial(nn.attention, Q, KV, KV, CAUSAL),
    "jaxkit.nn.default_mask": lambda **kw: nn.default_mask(
        CFG, **{"batch": 1, "t": 2, "cache": _cache(), **kw}
    ),
    "jaxkit.nn.commit": lambda **kw: nn.commit(_cache(), np.array([1], np.int32), **kw).length,
    "jaxkit.nn.prefill": functools.partial(
        nn.prefill, PARAMS, CFG, TOKENS, np.array([3], np.int32), max_len=4
    ),
    "jaxkit.nn.embed": functools.partial(nn.embed, PARAMS, CFG, TOKENS),
    "jaxkit.nn.unembed": functools.partial(nn.unembed, PARAMS, CFG, H),
    "jaxkit.nn.tiny_task_accuracy": functools.partial(
        nn.tiny_task_accuracy, "counting", np.array([[1, 2, 3, 4, 6]], np.int32), start=2
    ),
    "jaxkit.nn.cache_specs": functools.partial(nn.cache_specs, CFG),
    "jaxkit.nn.MLP.__call__": lambda **kw: nn.MLP(2, 1, hidden=(2,), key=jax.random.key(0))(
        X1, **kw
    ),
    "jaxkit.nn.SmallCNN.__call__": lambda **kw: nn.SmallCNN(
        1, 2, channels=(2,), key=jax.random.key(0)
    )(IMG, **kw),
    "jaxkit.nn.UNet.__call__": lambda **kw: nn.UNet(1, 1, channels=(2,), key=jax.random.key(0))(
        IMG, **kw
    ),
}

ANY_RANK: dict[str, str] = {
    "jaxkit.nn.commit:n": "a scalar (every row) or int32[B] (per row): both ranks are the design",
}

ANY_INT: dict[str, str] = {
    "jaxkit.nn.run_layers:positions": "logical RoPE positions: any integers (RoPE and the "
    "sliding window read only their differences; shifting them all is a no-op, tested)",
    "jaxkit.nn.write_kv:positions": "logical RoPE positions: any integers (RoPE is relative)",
    "jaxkit.nn.commit:n": "a count clipped to [0, capacity] by design (documented): a larger "
    "one commits every slot (6 + 4 of 8 gives 8, tested), a negative one rolls rows back",
    "jaxkit.nn.commit:cache.length": "clipped with `n` into [0, capacity] by design "
    "(documented: `clip(length + n, 0, S)`, indexes nothing); commit runs every step of "
    "the decode loops (decode_step, WeDLM, SVGT, memory), where a runtime check would cost "
    "each step; apply / run_layers / decode_step / write_kv, which read it, reject one "
    "outside [0, S - T]",
}

EXEMPT: dict[str, str] = {
    "jaxkit.nn.param_specs:model_axis": "free name: a mesh axis name put in the specs",
    "jaxkit.nn.cache_specs:data_axis": "free name: a mesh axis name put in the specs",
    "jaxkit.nn.cache_specs:model_axis": "free name: a mesh axis name put in the specs",
}
