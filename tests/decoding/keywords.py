"""Keyword-sweep recipes for decoding (see tests/keywords.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import decoding
from tests.decoding.cases import _APPLY, _P32, CFG, MASK

_rng = np.random.default_rng(0)
PROMPT = _rng.integers(0, MASK, size=(2, 3)).astype(np.int32)
PROMPT_LEN = np.array([3, 2], np.int32)
TOKENS = _rng.integers(0, MASK, size=(2, 4)).astype(np.int32)


def _ar(**kw):
    return decoding.ar_generate(
        _P32, CFG, PROMPT, PROMPT_LEN, max_new_tokens=2, **{"key": jax.random.key(0), **kw}
    ).tokens


def _wedlm(**kw):
    # tests.decoding.cases._generate's call, through the module (the array sweep patches it)
    return decoding.wedlm_generate(
        _P32,
        CFG,
        PROMPT,
        PROMPT_LEN,
        **{"mask_token_id": MASK, "max_new_tokens": 2, "window": 2, "key": jax.random.key(0), **kw},
    ).tokens


def _batch(**kw):
    tokens = jnp.asarray(TOKENS)
    lm = jnp.arange(tokens.shape[1])[None] >= 1
    lm = jnp.broadcast_to(lm, tokens.shape)
    return decoding.dual_stream_batch(
        tokens, lm, block_size=2, mask_token_id=MASK, **{"key": jax.random.key(3), **kw}
    )


def _loss(**kw):
    # every token maskable: key 0 masks row 0's first block, so the record sweep's probe
    # of `batch.mlm_labels` (entry [0, 0]) reaches a label the loss reads
    tokens = jnp.asarray(TOKENS)
    batch = decoding.dual_stream_batch(
        tokens,
        jnp.ones(tokens.shape, bool),
        key=jax.random.key(0),
        block_size=2,
        mask_token_id=MASK,
    )
    return decoding.wedlm_loss(_APPLY, _P32, batch, **kw)[0]


def _reorder(**kw):
    tokens = jnp.asarray(TOKENS)
    loss_mask = jnp.ones(tokens.shape, bool)
    is_masked = jnp.asarray([[0, 1, 0, 1], [1, 0, 0, 0]], bool)
    return decoding.reorder_mlm_loss(
        _APPLY, _P32, tokens, is_masked, loss_mask, mask_token_id=MASK, **kw
    )


RECIPES = {
    "jaxkit.decoding.ar_generate": _ar,
    "jaxkit.decoding.dual_stream_batch": _batch,
    "jaxkit.decoding.wedlm_loss": _loss,
    "jaxkit.decoding.wedlm_generate": _wedlm,
    "jaxkit.decoding.reorder_mlm_loss": _reorder,
}

_FILLED = np.array([[1, 1, 0, 1], [0, 1, 1, 0]], bool)
_LOGITS = _rng.normal(size=(2, 4, 5)).astype(np.float32)

RECIPES.update(
    {
        "jaxkit.decoding.commit_count": lambda **kw: decoding.commit_count(
            jnp.asarray(_FILLED), **kw
        ),
        "jaxkit.decoding.topological_reorder": lambda **kw: decoding.topological_reorder(
            jnp.asarray(TOKENS),
            jnp.broadcast_to(jnp.arange(4, dtype=jnp.int32), (2, 4)),
            jnp.asarray(~_FILLED),
            **{"mask_token_id": MASK, **kw},
        ),
        "jaxkit.decoding.window_order": lambda **kw: decoding.window_order(
            jnp.asarray(_FILLED), jnp.ones((2, 4), bool), **kw
        ),
        "jaxkit.decoding.select_by_entropy": lambda **kw: decoding.select_by_entropy(
            jnp.asarray(_LOGITS),
            jnp.asarray(~_FILLED),
            **{"threshold": 1.0, "pos_penalty": 0.1, **kw},
        ),
        "jaxkit.decoding.token_entropy": lambda **kw: decoding.token_entropy(
            jnp.asarray(_LOGITS), **kw
        ),
    }
)

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.decoding.commit_count:filled": "[..., W]: any leading batch axes, as documented",
    "jaxkit.decoding.token_entropy:logits": "[..., V]: any leading batch axes, as documented",
}

ANY_INT: dict[str, str] = {
    "jaxkit.decoding.dual_stream_batch:tokens": "token ids only copied, permuted and shifted "
    "into the two streams and the labels (no vocabulary here: the model's is first known in "
    "the loss); `mask_token_id` is written, never looked up",
    "jaxkit.decoding.topological_reorder:tokens": "token ids only permuted (observed first, "
    "masks last): no vocabulary is looked up, so any integer id is carried through",
    "jaxkit.decoding.topological_reorder:positions": "logical RoPE positions, only permuted "
    "with their tokens: any integer is a valid position (an offset or a packed sequence's "
    "own numbering), never an index",
    "jaxkit.decoding.wedlm_loss:batch.input_ids": "token ids only fed to the user's "
    "`apply_fn`, which owns the vocabulary and the embedding lookup (`jaxkit.nn.apply` "
    "rejects an id outside [0, V) itself); the loss indexes nothing with them and sees only "
    "the logits' vocabulary, which need not be the inputs' (the [MASK] id)",
    "jaxkit.decoding.wedlm_loss:batch.positions": "logical RoPE positions, only passed to "
    "`apply_fn` (0..L-1 in both streams): any integer is a position, never an index",
}
