"""Autoregressive decoding with a KV cache: the baseline WeDLM is measured against."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Int

from jaxkit import _tokens, nn
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.decoding import _common as C


def ar_generate(
    params: PyTree,
    cfg: nn.TransformerConfig,
    prompt: Int[ArrayLike, "B P"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    key: KeyArray,
    max_new_tokens: int,
    temperature: RealScalarLike = 0.0,
    top_k: int | Int[ArrayLike, ""] | None = None,
    top_p: RealScalarLike = 1.0,
    min_p: RealScalarLike = 0.0,
    stop_token_ids: tuple[int, ...] = (),
    max_len: int | None = None,
    pad_token_id: int = 0,
    interventions: nn.Interventions | None = None,
) -> C.Generation:
    """Generate token by token with the next-token head and a KV cache (baseline).

    A prefill of the right-padded prompts gives the first token; then one
    ``decode_step`` per token inside one ``lax.while_loop`` that ends when every
    row has ``max_new_tokens`` tokens or has emitted a stop token. Tokens are
    drawn by the fused sampler :func:`jaxkit.kernels.sampling.sample_tokens`
    (temperature, top-k, top-p, min-p; the arg-max, bit for bit, at
    ``temperature=0``). Jitted like jax.numpy (module level, static choices
    static, hyperparameters traced): sweeps over the sampler's values never
    recompile, and eager calls hit the compile cache.

    Args:
      params: Transformer parameters (``jaxkit.nn``).
      cfg: Static model configuration.
      prompt: ``int32[B, P]`` right-padded prompts.
      prompt_len: ``int32[B]``, valid prompt length per row.
      key: PRNG key (used only when ``temperature > 0``); step ``i`` draws with
        ``fold_in(key, i)``.
      max_new_tokens: N (static).
      temperature: 0 for greedy, else the sampling temperature (traced). A
        concrete 0 selects the static greedy mode (the arg-max, no sampler in
        the loop); a traced 0 goes through the sampler, also the arg-max.
      top_k: Keep the ``top_k`` most likely tokens (traced int in [1, V]), or
        ``None`` for no top-k.
      top_p: Nucleus mass in (0, 1] (traced; 1 disables it).
      min_p: Min-p ratio in [0, 1] (traced; 0 disables it).
      stop_token_ids: Static stop ids (kept in the output, end the row).
      max_len: Cache capacity (default ``P + max_new_tokens``).
      pad_token_id: Written after each row's end.
      interventions: Optional :class:`~jaxkit.nn.Interventions` applied in the
        prefill and in every decode step (edits of shape ``[D]`` or ``[B, D]``; an
        inserted span lies in the prompt, its reserved tokens counted in
        ``prompt_len``, and stays hidden from blocks ``<= insert_layer``).

    Returns:
      A :class:`~jaxkit.decoding.Generation` ``(tokens int32[B, N], lengths int32[B], stats)``;
      ``stats.n_forward`` counts decode steps after the prefill (N - 1 without stops).

    Raises:
      TypeError: a size or token id that is not a Python int (``True`` included),
        non-integer prompts.
      ValueError: bad sizes or hyperparameter values (a traced NaN or negative
        ``temperature``, or ``top_p`` / ``min_p`` outside their range, raise at
        run time under ``jit``).

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM):
      the AR + KV-cache baseline of its speed comparisons.
    """
    c = C.check_generate_args(
        cfg,
        key,
        prompt,
        prompt_len,
        max_new_tokens=max_new_tokens,
        max_len=max_len,
        window=1,
        stop_token_ids=stop_token_ids,
        token_ids={"pad_token_id": pad_token_id},
        sampling=(temperature, top_k, top_p, min_p),
        interventions=interventions,
    )
    return _ar_generate(params, cfg, c.prompt, c.prompt_len, key, c.sampling, c.static, c.iv)


@functools.partial(jax.jit, static_argnames=("cfg", "static"))
def _ar_generate(
    params, cfg, prompt, prompt_len, key, sampling: C.Sampling, static: C.Static, iv=None
) -> C.Generation:
    """Jitted core of :func:`ar_generate` (its loop body is traced once per program)."""
    n, stops, greedy = static.max_new_tokens, static.stop_token_ids, static.greedy
    max_len, pad_token_id = static.max_len, static.pad_token_id
    prompt_len = _tokens.guard_sampling(
        prompt_len, sampling.temperature, sampling.top_p, sampling.min_p
    )
    logits, cache = nn.prefill(params, cfg, prompt, prompt_len, max_len=max_len, interventions=iv)
    # the loop on per-layer weights and cache: a step reads each block's K/V without
    # copying its slice of the stacked buffers (docs: nn, "Per-layer storage"); same tokens
    params, cache = nn.unstack_layers(params), nn.unstack_layers(cache)
    tok = C.choose_tokens(logits, C.step_key(key, 0), sampling, greedy=greedy)
    zb = jnp.zeros_like(prompt_len)  # batch-shaped arrays keep the prompts' sharding
    out = C.write_at(
        zb[:, None] + jnp.full((1, n), pad_token_id, jnp.int32), zb[:, None], tok[:, None]
    )
    n_gen = zb + 1
    has_stop, _ = C.stop_info(out, n_gen, stops)
    done = has_stop | (n_gen >= n)
    carry = (cache, tok, out, n_gen, done, zb, jnp.zeros((), jnp.int32))

    def cond(c):
        return jnp.any(~c[4]) & (c[6] < n - 1)

    def body(c):
        rows, i = c[5], c[6]
        k = C.step_key(key, i + 1)
        # overflow cannot happen: check_generate_args guarantees P + N <= max_len and a row
        # writes at most prompt_len + N - 1 rows, so the per-step run-time guard is skipped
        state, active = C.ar_step(
            params, cfg, c[:5], k, sampling, static=static, overflow="drop", iv=iv
        )
        return (*state, rows + active.astype(jnp.int32), i + 1)

    _, _, out, n_gen, _, rows, i = jax.lax.while_loop(cond, body, carry)
    tokens, lengths = C.finalize(out, n_gen, stops, pad_token_id)
    return C.Generation(tokens, lengths, C.DecodeStats(i, rows))
