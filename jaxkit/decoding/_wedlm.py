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

from jaxkit import _tokens, _validate, nn
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.decoding._adaptive import ar_run, schedule, set_slot0, use_single
from jaxkit.decoding._common import (
    DecodeStats,
    Generation,
    Sampling,
    Static,
    check_generate_args,
    choose_tokens,
    finalize,
    step_key,
    stop_info,
    write_at,
)
from jaxkit.decoding._reorder import commit_count, window_order
from jaxkit.decoding._select import _select_by_entropy
from jaxkit.decoding._window import forward_at


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
      accept: ``float32[B]``, moving average of tokens decided per window forward
        (``min_accept`` mode; zeros otherwise).
      gap: ``int32[]``, one-token steps before the next probing window step.
      since: ``int32[]``, one-token steps since the last window step.
    """

    cache: nn.KVCache
    win_tok: Array
    filled: Array
    out: Array
    n_gen: Array
    done: Array
    row_forwards: Array
    n_forward: Array
    accept: Array
    gap: Array
    since: Array


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
    min_accept: Array | None = None
    probe_every: int = 32
    iv: object = None  # nn.Interventions or None


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
    min_accept: RealScalarLike | None = None,
    probe_every: int = 32,
    interventions: nn.Interventions | None = None,
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

    Adaptive window (``min_accept`` given): the loop keeps a moving average
    (decay 1/2) of the tokens each window forward decides per row. When it is
    below ``min_accept`` for every active row, the decoder falls back to one-token
    steps: the decided token of slot 0 is fed alone (one ``nn.decode_step``,
    the cost of an AR step), committed, and the next slot is drawn from the
    next-token head, exactly as :func:`ar_generate` does. After ``probe_every``
    one-token steps a window step probes the acceptance again; a failed probe
    doubles the wait, a successful one returns to window steps. The choice is
    made inside the jitted loop (the conditions of its inner loops). If the
    prefill's first window decides fewer than ``min_accept`` tokens, the row starts
    like AR (its first token from the prompt's next-token logits). With ``min_accept`` above
    ``window`` and ``probe_every >= max_new_tokens`` the tokens are AR's.

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
      temperature: Slot sampling temperature (traced); 0 is greedy (the arg-max),
        the static greedy mode when concrete, exactly as in :func:`ar_generate`.
      top_k: Top-k cut of the slot sampler (traced int in [1, V]) or ``None``.
      top_p: Nucleus mass in (0, 1] (traced; 1 disables it).
      min_p: Min-p ratio in [0, 1] (traced; 0 disables it).
      stop_token_ids: Static stop ids; a stop token is kept and ends its row.
      max_len: Cache capacity (default ``P + max_new_tokens``, the minimum).
      pad_token_id: Written after each row's end in the output.
      min_accept: Tokens per window forward (traced, finite, >= 0) below which
        the decoder falls back to one-token steps; ``None`` (default) always
        runs window steps.
      probe_every: One-token steps before the first probing window step (static
        int >= 1; doubled after each failed probe).
      interventions: Optional :class:`~jaxkit.nn.Interventions` applied in every
        forward (prefill, window steps, one-token steps): edits of shape ``[D]`` or
        ``[B, D]``; an inserted span lies in the prompt (reserved tokens counted in
        ``prompt_len``) and stays hidden from blocks ``<= insert_layer``.

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
        interventions=interventions,
    )
    _validate.finite_scalar(pos_penalty=pos_penalty)
    if entropy_threshold is not None:
        _validate.finite_scalar(entropy_threshold=entropy_threshold)
    if min_accept is not None:
        _validate.real(min_accept, name="min_accept")
        _validate.finite_scalar(min_accept=min_accept)
        _validate.non_negative(min_accept=min_accept)
    probe_every = _validate.python_int(probe_every, name="probe_every", minimum=1)
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
        min_accept,
        c.iv,
        mask_token_id=int(mask_token_id),
        window=int(window),
        probe_every=probe_every,
    )


@functools.partial(
    jax.jit, static_argnames=("cfg", "static", "mask_token_id", "window", "probe_every")
)
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
    min_accept,
    iv=None,
    *,
    mask_token_id,
    window,
    probe_every,
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
        None if min_accept is None else jnp.asarray(min_accept, jnp.float32),
        probe_every,
        iv,
    )
    prompt_len = _tokens.guard_sampling(
        prompt_len, sampling.temperature, sampling.top_p, sampling.min_p
    )
    if min_accept is not None:
        prompt_len = _validate.guard_non_negative(prompt_len, min_accept, name="min_accept")
    bad = ~jnp.isfinite(jnp.asarray(pos_penalty))
    if entropy_threshold is not None:
        bad = bad | jnp.isnan(jnp.asarray(entropy_threshold))
    prompt_len = _validate.error_if(
        prompt_len, bad, "`pos_penalty` must be finite and `entropy_threshold` not NaN."
    )
    # Each window forward fills >= 1 open slot; each one-token step commits one.
    cap = max_new_tokens + window + 1
    if min_accept is not None:
        cap = 2 * cap
    state = _init_state(
        params,
        cfg,
        prompt,
        prompt_len,
        step_key(key, cap),
        o,
        max_len=static.max_len,
        pad_token_id=static.pad_token_id,
    )
    # the loops on per-layer weights and cache: a forward reads each block's K/V without
    # copying its slice of the stacked buffers (docs: nn, "Per-layer storage"; decoding,
    # wave 29); same tokens
    params = nn.unstack_layers(params)
    state = state._replace(cache=nn.unstack_layers(state.cache))

    if o.min_accept is not None:
        # The first run of one-token steps (on hard text the whole generation) goes before
        # the main loop, in a top-level loop compiled as ar_generate's (measured faster than
        # the same loop in the main loop's body). Zero trips unless every row starts in AR
        # mode (wave 24, docs/areas/decoding.md).
        state = ar_run(params, cfg, state, prompt_len, key, o, go=use_single(state, o))

    def cond(s: WeDLMState):
        return jnp.any(~s.done) & (s.n_forward < cap)

    def window_steps(s: WeDLMState) -> WeDLMState:  # until every row is in AR mode
        return jax.lax.while_loop(
            lambda s: cond(s) & ~use_single(s, o),
            lambda s: _tracked_step(params, cfg, s, prompt_len, step_key(key, s.n_forward), o),
            s,
        )

    def body(s: WeDLMState) -> WeDLMState:
        if o.min_accept is None:
            return _step(params, cfg, s, prompt_len, step_key(key, s.n_forward), o)
        # Adaptive: a run of window steps (zero trips when every row is in AR mode), then a
        # run of one-token steps in a loop of its own (compiled as ar_generate's loop; wave
        # 24). With per-layer storage the window run measured faster outside a `lax.cond`
        # branch, which the stacked layout needed (wave 29, docs/areas/decoding.md).
        s = window_steps(s)
        return ar_run(params, cfg, s, prompt_len, key, o, go=use_single(s, o) & cond(s))

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
    # logits at the W mask slots and the last prompt slot only (see `forward_at`)
    cols = jnp.concatenate([zb[:, None] + p + slot, (prompt_len - 1)[:, None]], axis=1)
    cache, logits = forward_at(params, cfg, tokens, pos, cache, cols, o.iv, attn_mask=sees)
    win_logits, last = logits[:, :w], logits[:, w]
    cache = nn.commit(cache, prompt_len)
    state = WeDLMState(
        cache=cache,
        win_tok=zb[:, None] + jnp.full((1, w), mask_token_id, jnp.int32),
        filled=(zb[:, None] + slot) < 0,
        out=zb[:, None] + jnp.full((1, n), pad_token_id, jnp.int32),
        n_gen=zb,
        done=zb > 0,
        row_forwards=zb,
        n_forward=jnp.zeros((), jnp.int32),
        accept=zb.astype(jnp.float32),
        gap=jnp.full((), o.probe_every, jnp.int32),
        since=jnp.zeros((), jnp.int32),
    )
    filled = _fill(state, win_logits, prompt_len, key, o, active=zb >= 0)
    if o.min_accept is None:
        return filled
    # Adaptive: rows whose first window decides < min_accept tokens start like AR. The
    # AR start (a draw from the prompt's next-token logits) runs only if some row needs it.
    accept = jnp.sum(filled.filled, axis=1).astype(jnp.float32)
    like_ar = accept < o.min_accept

    def ar_start(filled: WeDLMState) -> WeDLMState:
        tok0 = choose_tokens(last, key, o.sampling, greedy=o.greedy)
        ar = set_slot0(state, tok0, zb >= 0, prompt_len, o, active=zb >= 0)
        pick = lambda a, b: jnp.where(like_ar.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
        return filled._replace(
            win_tok=pick(ar.win_tok, filled.win_tok),
            filled=pick(ar.filled, filled.filled),
            out=pick(ar.out, filled.out),
            n_gen=pick(ar.n_gen, filled.n_gen),
            done=pick(ar.done, filled.done),
        )

    filled = filled._replace(accept=accept)
    return jax.lax.cond(jnp.any(like_ar), ar_start, lambda f: f, filled)


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
    # Shift by the committed run: new slot j <- old logical slot j + n_lead.
    src = jnp.arange(w, dtype=jnp.int32)[None, :] + n_lead[:, None]
    phys = jnp.take_along_axis(inv, src, axis=1)
    new_cache, logits = forward_at(params, cfg, tok_phys, pos_phys, s.cache, phys, o.iv)
    cache = nn.commit(new_cache, n_lead)
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
    fill = _select_by_entropy(logits, selectable, o.entropy_threshold, o.pos_penalty)
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


def _tracked_step(params, cfg, s: WeDLMState, prompt_len, key, o: _Options) -> WeDLMState:
    """A window step that also updates the acceptance average and the probe schedule."""
    before = s.cache.length + jnp.sum(s.filled, axis=1)
    t = _step(params, cfg, s, prompt_len, key, o)
    decided = t.cache.length + jnp.sum(t.filled, axis=1) - before
    accept, gap = schedule(
        s.accept,
        decided,
        s.done,
        t.done,
        s.since,
        s.gap,
        o.min_accept,
        o.probe_every,
        o.max_new_tokens,
    )
    return t._replace(accept=accept, gap=gap, since=jnp.zeros_like(s.since))
