"""WeDLM streaming parallel decoding on a causal LM with a prefix KV cache.

One ``lax.while_loop``; each step is one forward of a reordered window on top of
the cache (the engine's refill order: masks are appended before the forward so
that the committed run rides along and every open slot gets a fresh prediction).
The first window is predicted by the prefill forward itself (prompt and W masks in
one forward), so no decode step is spent on the all-mask window.
Entropy threshold, distance penalty and the sampler's hyperparameters are traced;
tokens are drawn by the fused sampler ``kernels.sampling.sample_tokens``. Taken from
the paper's Algorithm 1 and the released engine (Tencent/WeDLM ``wedlm/engine``).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int

from jaxkit import _validate, nn
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.decoding._common import (
    DecodeStats,
    Generation,
    Sampling,
    Static,
    check_generate_args,
    choose_tokens,
    finalize,
    guard_sampling,
    stop_info,
    write_at,
)
from jaxkit.decoding._reorder import commit_count, window_order
from jaxkit.decoding._select import select_by_entropy


class WeDLMState(NamedTuple):
    """Loop state of :func:`wedlm_generate` (all arrays, batch axis first).

    Attributes:
      cache: Prefix KV cache; ``cache.length`` = prompt + committed tokens.
      win_tok: ``int32[B, W]``, window tokens; slot ``j`` is logical position
        ``cache.length + j``.
      filled: ``bool[B, W]``, slot holds a decided token.
      out: ``int32[B, N]``, decided tokens by generation index.
      n_gen: ``int32[B]``, decided-and-emitted tokens (committed + leading filled run).
      done: ``bool[B]``.
      row_forwards: ``int32[B]``.
      n_forward: ``int32[]``.
    """

    cache: nn.KVCache
    win_tok: Array
    filled: Array
    out: Array
    n_gen: Array
    done: Array
    row_forwards: Array
    n_forward: Array


class _Options(NamedTuple):
    """Decoder settings inside the jitted core (ints static, the rest traced)."""

    mask_token_id: int
    max_new_tokens: int
    window: int
    stop_token_ids: tuple[int, ...]
    entropy_threshold: Array | None
    pos_penalty: Array
    sampling: Sampling
    greedy: bool = False


def wedlm_generate(
    params: PyTree,
    cfg: nn.TransformerConfig,
    prompt: Int[ArrayLike, "B P"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    key: KeyArray,
    mask_token_id: int,
    max_new_tokens: int,
    window: int = 16,
    entropy_threshold: RealScalarLike | None = 0.4,
    pos_penalty: RealScalarLike = 0.02,
    temperature: RealScalarLike = 0.0,
    top_k: int | Int[ArrayLike, ""] | None = None,
    top_p: RealScalarLike = 1.0,
    min_p: RealScalarLike = 0.0,
    stop_token_ids: tuple[int, ...] = (),
    max_len: int | None = None,
    pad_token_id: int = 0,
) -> Generation:
    """Generate with WeDLM streaming parallel decoding (batched, ragged prompts).

    One forward encodes the right-padded prompts into the cache and predicts the
    first window of W masks (they attend to the valid prompt only); its selection
    is applied at once. Each following step (1) appends as many
    ``[MASK]`` slots as the window's leading filled run, (2) reorders the window
    topologically (filled slots first, open masks next, padding last) and runs one
    forward of width ``2 * window`` on the cache at logical positions
    ``length + slot``, (3) commits the leading filled run into the cache (its K/V
    is exactly the AR K/V), shifts the window, and (4) fills every open slot whose
    penalised entropy ``H_i + pos_penalty * d_i`` is below ``entropy_threshold``
    (else the single best one). Decided leading tokens are emitted at once, so a
    row needs no forward after its last token. Rows stop independently at
    ``max_new_tokens`` or after their first stop token. Slot tokens are drawn by
    the fused sampler :func:`jaxkit.kernels.sampling.sample_tokens` (the arg-max,
    bit for bit, at ``temperature=0``); the slot selection uses the entropy of
    the raw logits. Jitted like jax.numpy (module level, static choices static,
    hyperparameters traced): sweeps never recompile, eager calls hit the cache.

    Args:
      params: Transformer parameters (``jaxkit.nn``), trained with the WeDLM
        objective so that ``[MASK]`` slots predict their own token.
      cfg: Static model configuration.
      prompt: ``int32[B, P]`` right-padded prompts.
      prompt_len: ``int32[B]``, valid prompt length per row (1..P).
      key: PRNG key (used only when ``temperature > 0``).
      mask_token_id: Id of the mask token.
      max_new_tokens: N, tokens generated per row (static).
      window: W, open window width (static).
      entropy_threshold: tau in nats (traced); ``None`` fills one slot per step.
      pos_penalty: lambda, entropy penalty per slot of distance (traced).
      temperature: 0 for greedy, else the sampling temperature (traced). A
        concrete 0 selects the static greedy mode (the arg-max, no sampler in
        the loop); a traced 0 goes through the sampler, also the arg-max.
      top_k: Keep the ``top_k`` most likely tokens (traced int in [1, V]), or
        ``None`` for no top-k.
      top_p: Nucleus mass in (0, 1] (traced; 1 disables it).
      min_p: Min-p ratio in [0, 1] (traced; 0 disables it).
      stop_token_ids: Static stop ids; a stop token is kept and ends its row.
      max_len: Cache capacity (default ``P + max_new_tokens``, the minimum).
      pad_token_id: Written after each row's end in the output.

    Returns:
      A :class:`~jaxkit.decoding.Generation` ``(tokens int32[B, N], lengths int32[B], stats)``;
      ``stats.n_forward`` counts the forwards after the prefill (like
      :func:`ar_generate`, whose first token also comes from the prefill):
      ``N - 1`` at ``window=1``.

    Raises:
      TypeError: a size or token id that is not a Python int (``True`` included).
      ValueError: prompt longer than the cache, window larger than the cache,
        token ids outside the vocabulary, a negative or NaN ``temperature`` or
        ``top_p`` / ``min_p`` outside their range (runtime errors under ``jit``).

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM),
      Algorithm 1 and ``wedlm/engine/wedlm_decoder.py``.
    """
    c = check_generate_args(
        cfg,
        key,
        prompt,
        prompt_len,
        max_new_tokens=max_new_tokens,
        max_len=max_len,
        window=window,
        stop_token_ids=stop_token_ids,
        token_ids={"mask_token_id": mask_token_id, "pad_token_id": pad_token_id},
        sampling=(temperature, top_k, top_p, min_p),
    )
    _validate.finite_scalar(pos_penalty=pos_penalty)
    if entropy_threshold is not None:
        _validate.finite_scalar(entropy_threshold=entropy_threshold)
    return _wedlm_generate(
        params,
        cfg,
        c.prompt,
        c.prompt_len,
        key,
        c.sampling,
        entropy_threshold,
        pos_penalty,
        c.static,
        mask_token_id=int(mask_token_id),
        window=int(window),
    )


@functools.partial(jax.jit, static_argnames=("cfg", "static", "mask_token_id", "window"))
def _wedlm_generate(
    params,
    cfg,
    prompt,
    prompt_len,
    key,
    sampling: Sampling,
    entropy_threshold,
    pos_penalty,
    static: Static,
    *,
    mask_token_id,
    window,
) -> Generation:
    """Jitted core of :func:`wedlm_generate` (its loop body is traced once per program)."""
    max_new_tokens, stop_token_ids = static.max_new_tokens, static.stop_token_ids
    o = _Options(
        mask_token_id,
        max_new_tokens,
        window,
        stop_token_ids,
        entropy_threshold,
        pos_penalty,
        sampling,
        static.greedy,
    )
    prompt_len = guard_sampling(prompt_len, sampling)
    bad = ~jnp.isfinite(jnp.asarray(pos_penalty))
    if entropy_threshold is not None:
        bad = bad | jnp.isnan(jnp.asarray(entropy_threshold))
    prompt_len = _validate.error_if(
        prompt_len, bad, "`pos_penalty` must be finite and `entropy_threshold` not NaN."
    )
    cap = max_new_tokens + window + 1  # each forward fills >= 1 open slot (progress bound)
    state = _init_state(
        params,
        cfg,
        prompt,
        prompt_len,
        jax.random.fold_in(key, cap),
        o,
        max_len=static.max_len,
        pad_token_id=static.pad_token_id,
    )

    def cond(s: WeDLMState):
        return jnp.any(~s.done) & (s.n_forward < cap)

    def body(s: WeDLMState) -> WeDLMState:
        return _step(params, cfg, s, prompt_len, jax.random.fold_in(key, s.n_forward), o)

    state = jax.lax.while_loop(cond, body, state)
    tokens, lengths = finalize(state.out, state.n_gen, stop_token_ids, static.pad_token_id)
    return Generation(tokens, lengths, DecodeStats(state.n_forward, state.row_forwards))


def _init_state(
    params,
    cfg,
    prompt,
    prompt_len,
    key,
    o: _Options,
    *,
    max_len,
    pad_token_id,
) -> WeDLMState:
    """Prefill the prompts and predict the first window in the same forward.

    The forward is ``[prompt (P slots, right-padded) | W masks]``: prompt slots
    attend causally (their K/V go to cache slots ``0..P-1``, exactly the prefill),
    mask slot ``j`` sits at logical position ``prompt_len + j`` and attends to the
    valid prompt and to the masks before it (the topological order of an all-mask
    window). ``cache.length = prompt_len``; the first selection step is applied, so
    a decode step is saved against a separate prefill (no model work is repeated).
    Mask slots past the capacity are dropped (never selectable: slot ``j`` is
    selectable only if ``j < N``, and ``P + N <= max_len``).
    """
    w, n, mask_token_id = o.window, o.max_new_tokens, o.mask_token_id
    b, p = prompt.shape
    zb = jnp.zeros_like(prompt_len)  # batch-shaped arrays keep the prompts' sharding
    slot = jnp.arange(w, dtype=jnp.int32)[None, :]
    tokens = jnp.concatenate(
        [prompt, zb[:, None] + jnp.full((1, w), mask_token_id, jnp.int32)], axis=1
    )
    pos = jnp.concatenate(
        [zb[:, None] + jnp.arange(p, dtype=jnp.int32)[None, :], prompt_len[:, None] + slot], axis=1
    )
    i = jnp.arange(p + w, dtype=jnp.int32)[None, :, None]
    j = jnp.arange(max_len, dtype=jnp.int32)[None, None, :]
    sees = (j <= i) & ((i < p) | (j >= p) | (j < prompt_len[:, None, None]))
    cache = nn.init_cache(cfg, max_len=max_len, dtype=params["embed"].dtype, like=zb)
    res = nn.apply(params, cfg, tokens, pos, cache=cache, attn_mask=sees, overflow="drop")
    cache = nn.commit(res.cache, prompt_len)
    state = WeDLMState(
        cache=cache,
        win_tok=zb[:, None] + jnp.full((1, w), mask_token_id, jnp.int32),
        filled=(zb[:, None] + slot) < 0,
        out=zb[:, None] + jnp.full((1, n), pad_token_id, jnp.int32),
        n_gen=zb,
        done=zb > 0,
        row_forwards=zb,
        n_forward=jnp.zeros((), jnp.int32),
    )
    return _fill(state, res.logits[:, p:], prompt_len, key, o, active=zb >= 0)


def _step(
    params,
    cfg,
    s: WeDLMState,
    prompt_len,
    key,
    o: _Options,
) -> WeDLMState:
    """One forward of the streaming decoder (engine refill order)."""
    w, mask_token_id = o.window, o.mask_token_id
    active = ~s.done
    n_lead = jnp.where(active, commit_count(s.filled), 0)
    tok2 = jnp.concatenate([s.win_tok, jnp.full_like(s.win_tok, mask_token_id)], axis=1)
    filled2 = jnp.concatenate([s.filled, jnp.zeros_like(s.filled)], axis=1)
    slot2 = jnp.arange(2 * w, dtype=jnp.int32)[None, :]
    valid2 = slot2 < (w + n_lead)[:, None]
    perm, inv = window_order(filled2, valid2)
    tok_phys = jnp.take_along_axis(tok2, perm, axis=1)
    pos_phys = s.cache.length[:, None] + perm
    res = nn.apply(params, cfg, tok_phys, pos_phys, cache=s.cache, overflow="drop")
    cache = nn.commit(res.cache, n_lead)
    # Shift by the committed run: new slot j <- old logical slot j + n_lead.
    src = jnp.arange(w, dtype=jnp.int32)[None, :] + n_lead[:, None]
    phys = jnp.take_along_axis(inv, src, axis=1)
    logits = jnp.take_along_axis(res.logits, phys[:, :, None], axis=1)
    s = s._replace(
        cache=cache,
        win_tok=jnp.take_along_axis(tok2, src, axis=1),
        filled=jnp.take_along_axis(filled2, src, axis=1),
        row_forwards=s.row_forwards + active.astype(jnp.int32),
        n_forward=s.n_forward + 1,
    )
    return _fill(s, logits, prompt_len, key, o, active=active)


def _fill(
    s: WeDLMState,
    logits,
    prompt_len,
    key,
    o: _Options,
    *,
    active,
) -> WeDLMState:
    """Select and fill open slots from the window logits (logical order), emit, stop."""
    b, w = s.win_tok.shape
    n = o.max_new_tokens
    gen_idx = (s.cache.length - prompt_len)[:, None] + jnp.arange(w, dtype=jnp.int32)[None, :]
    selectable = ~s.filled & (gen_idx < n) & active[:, None]
    fill = select_by_entropy(
        logits, selectable, threshold=o.entropy_threshold, pos_penalty=o.pos_penalty
    )
    new = choose_tokens(logits, key, o.sampling, greedy=o.greedy)
    tok = jnp.where(fill, new, s.win_tok)
    filled = s.filled | fill
    # Emit every decided slot (decided slots never change); n_gen marks the prefix.
    idx = jnp.where(filled, gen_idx, n)
    out = write_at(s.out, idx, tok)
    n_gen = jnp.minimum((s.cache.length - prompt_len) + commit_count(filled), n)
    n_gen = jnp.where(active, n_gen, s.n_gen)
    has_stop, _ = stop_info(out, n_gen, o.stop_token_ids)
    done = s.done | (n_gen >= n) | has_stop
    return s._replace(win_tok=tok, filled=filled, out=out, n_gen=n_gen, done=done)
