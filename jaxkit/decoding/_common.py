"""Argument checks and result types shared by the WeDLM and AR decoders."""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array

from jaxkit import _validate


class DecodeStats(NamedTuple):
    """Counters of a generation call.

    Attributes:
      n_forward: ``int32[]``, model forwards run after the prefill (loop steps).
      row_forwards: ``int32[B]``, forwards each row took part in before it finished.
    """

    n_forward: Array
    row_forwards: Array


def check_generate_args(cfg, prompt, prompt_len, *, max_new_tokens, max_len, window, extra_ids=()):
    """Validate the common decoder inputs; return (prompt, prompt_len, max_len)."""
    prompt = jnp.asarray(prompt)
    prompt_len = jnp.asarray(prompt_len)
    _validate.integer(prompt, name="prompt")
    _validate.ndim(prompt, 2, name="prompt")
    _validate.integer(prompt_len, name="prompt_len")
    _validate.shape(prompt_len, (prompt.shape[0],), name="prompt_len")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"`max_new_tokens` must be a Python int >= 1, got {max_new_tokens!r}.")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"`window` must be a Python int >= 1, got {window!r}.")
    t = prompt.shape[1]
    if max_len is None:
        max_len = t + max_new_tokens
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"`max_len` must be a Python int >= 1, got {max_len!r}.")
    if t > max_len:
        raise ValueError(
            f"`prompt` is longer than the cache: prompt length {t} > max_len={max_len}."
        )
    if window > max_len:
        raise ValueError(f"`window`={window} is larger than the cache (max_len={max_len}).")
    if t + max_new_tokens > max_len:
        raise ValueError(
            f"`max_len`={max_len} is too small for prompt length {t} + "
            f"max_new_tokens={max_new_tokens}."
        )
    v = cfg.vocab_size
    for name, tid in extra_ids:
        if not isinstance(tid, int) or not 0 <= tid < v:
            raise ValueError(f"`{name}` must be a token id in [0, {v}), got {tid!r}.")
    bad_tok = jnp.any((prompt < 0) | (prompt >= v))
    prompt = _validate.error_if(
        prompt, bad_tok, f"`prompt` holds token ids outside [0, vocab_size={v})."
    )
    bad_len = jnp.any((prompt_len < 1) | (prompt_len > t))
    prompt_len = _validate.error_if(
        prompt_len, bad_len, f"`prompt_len` must lie in [1, {t}] (the prompt width)."
    )
    return prompt.astype(jnp.int32), prompt_len.astype(jnp.int32), max_len


def stop_info(out: Array, n_gen: Array, stop_token_ids: tuple[int, ...]):
    """(any stop inside the first n_gen tokens, index of the first one)."""
    n = out.shape[1]
    if not stop_token_ids:
        z = jnp.zeros_like(out[:, 0])  # *_like: keeps the batch sharding
        return z > 0, z.astype(jnp.int32)
    is_stop = jnp.zeros(out.shape, bool)
    for s in stop_token_ids:
        is_stop = is_stop | (out == s)
    is_stop = is_stop & (jnp.arange(n)[None, :] < n_gen[:, None])
    return jnp.any(is_stop, axis=1), jnp.argmax(is_stop, axis=1).astype(jnp.int32)


def finalize(out: Array, n_gen: Array, stop_token_ids, pad_token_id: int):
    """Truncate at the first stop token (kept) and pad the rest."""
    has, first = stop_info(out, n_gen, stop_token_ids)
    lengths = jnp.where(has, first + 1, n_gen).astype(jnp.int32)
    keep = jnp.arange(out.shape[1])[None, :] < lengths[:, None]
    return jnp.where(keep, out, jnp.full_like(out, pad_token_id)), lengths


def write_at(out: Array, idx: Array, vals: Array) -> Array:
    """``out[b, idx[b, k]] = vals[b, k]`` for distinct in-range ``idx`` per row; others dropped.

    Elementwise (a one-hot select instead of a scatter), so a batch-sharded ``out``
    keeps its sharding under an explicit mesh.
    """
    if idx.shape[1] == 1:  # one write per row: a single select
        hit = idx == jnp.arange(out.shape[1], dtype=idx.dtype)[None, :]
        return jnp.where(hit, vals.astype(out.dtype), out)
    hit = idx[:, :, None] == jnp.arange(out.shape[1], dtype=idx.dtype)[None, None, :]
    val = jnp.sum(jnp.where(hit, vals[:, :, None], jnp.zeros_like(vals)[:, :, None]), axis=1)
    return jnp.where(jnp.any(hit, axis=1), val.astype(out.dtype), out)
