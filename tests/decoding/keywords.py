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
    return decoding.wedlm_loss(_APPLY, _P32, _batch(), **kw)[0]


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

EXEMPT: dict[str, str] = {}
