"""Autoregressive decoding with a KV cache: the baseline WeDLM is measured against."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int

from jaxkit import _validate, nn
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.decoding._common import (
    DecodeStats,
    check_generate_args,
    finalize,
    stop_info,
    write_at,
)
from jaxkit.decoding._select import _sample


def ar_generate(
    params: PyTree,
    cfg: nn.TransformerConfig,
    prompt: Int[ArrayLike, "B P"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    key: KeyArray,
    max_new_tokens: int,
    temperature: RealScalarLike = 0.0,
    stop_token_ids: tuple[int, ...] = (),
    max_len: int | None = None,
    pad_token_id: int = 0,
) -> tuple[Array, Array, DecodeStats]:
    """Generate token by token with the next-token head and a KV cache (baseline).

    A prefill of the right-padded prompts gives the first token; then one
    ``decode_step`` per token inside one ``lax.while_loop`` that ends when every
    row has ``max_new_tokens`` tokens or has emitted a stop token.

    Args:
      params: Transformer parameters (``jaxkit.nn``).
      cfg: Static model configuration.
      prompt: ``int32[B, P]`` right-padded prompts.
      prompt_len: ``int32[B]``, valid prompt length per row.
      key: PRNG key (used only when ``temperature > 0``).
      max_new_tokens: N (static).
      temperature: 0 for greedy, else the sampling temperature (traced).
      stop_token_ids: Static stop ids (kept in the output, end the row).
      max_len: Cache capacity (default ``P + max_new_tokens``).
      pad_token_id: Written after each row's end.

    Returns:
      ``(tokens int32[B, N], lengths int32[B], DecodeStats)``; ``n_forward``
      counts decode steps after the prefill (N - 1 without stops).

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM):
      the AR + KV-cache baseline of its speed comparisons.
    """
    _validate.is_key(key)
    prompt, prompt_len, max_len = check_generate_args(
        cfg,
        prompt,
        prompt_len,
        max_new_tokens=max_new_tokens,
        max_len=max_len,
        window=1,
        extra_ids=[
            ("pad_token_id", pad_token_id),
            *[("stop_token_ids", s) for s in stop_token_ids],
        ],
    )
    _validate.finite_scalar(temperature=temperature)
    _validate.non_negative(temperature=temperature)
    n = max_new_tokens
    stops = tuple(stop_token_ids)
    logits, cache = nn.prefill(params, cfg, prompt, prompt_len, max_len=max_len)
    tok = _sample(logits, jax.random.fold_in(key, 0), temperature)
    zb = jnp.zeros_like(prompt_len)  # batch-shaped arrays keep the prompts' sharding
    out = write_at(
        zb[:, None] + jnp.full((1, n), pad_token_id, jnp.int32), zb[:, None], tok[:, None]
    )
    n_gen = zb + 1
    has_stop, _ = stop_info(out, n_gen, stops)
    done = has_stop | (n_gen >= n)
    carry = (cache, tok, out, n_gen, done, zb, jnp.zeros((), jnp.int32))

    def cond(c):
        return jnp.any(~c[4]) & (c[6] < n - 1)

    def body(c):
        cache, tok, out, n_gen, done, rows, i = c
        active = ~done
        logits, cache = nn.decode_step(params, cfg, tok, cache)
        nxt = _sample(logits, jax.random.fold_in(key, i + 1), temperature)
        idx = jnp.where(active, n_gen, n)
        out = write_at(out, idx[:, None], nxt[:, None])
        n_gen = n_gen + active.astype(jnp.int32)
        has_stop, _ = stop_info(out, n_gen, stops)
        done = done | has_stop | (n_gen >= n)
        return (cache, nxt, out, n_gen, done, rows + active.astype(jnp.int32), i + 1)

    _, _, out, n_gen, _, rows, i = jax.lax.while_loop(cond, body, carry)
    tokens, lengths = finalize(out, n_gen, stops, pad_token_id)
    return tokens, lengths, DecodeStats(i, rows)
