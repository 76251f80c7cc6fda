"""DLMR inference: one jitted decode loop with adaptive, ragged memory injection."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate, nn
from jaxkit._tokens import (
    check_interventions,
    check_sampling,
    choose_tokens,
    guard_sampling,
    step_key,
)
from jaxkit.memory._blocks import _blocks, _commit, _cut_cache, _edit_memory, _run
from jaxkit.memory._checks import check_params
from jaxkit.memory._dlmr import (
    DLMRConfig,
    DLMRParams,
    _is_delim,
    action_table,
    check_config,
    inject_traced,
    lookup,
    masked_router_logits,
)


class DLMRGeneration(NamedTuple):
    """Output of :func:`dlmr_generate` (also the rollouts of stage 3).

    Attributes:
      tokens: ``int32[B, N]`` generated tokens (memory tokens are not tokens).
      actions: ``int32[B, N]`` the action taken before token ``i`` (0 = null).
      eligible: ``bool[B, N]`` whether step ``i`` was eligible.
      router_h: ``f32[B, N, D]`` the router's input at step ``i`` (last-block
        hidden of the last position).
      injected: ``int32[B]`` memory tokens injected per row.
      n_injections: ``int32[B]`` injections per row.
    """

    tokens: Array
    actions: Array
    eligible: Array
    router_h: Array
    injected: Array
    n_injections: Array


class _State(NamedTuple):
    lo: tuple  # KVCache per block <= l; text slots only when compact
    hi: tuple  # KVCache per block > l; their length is the next slot = the next logical position
    ctx: Array  # [B, P + N, D] the injector's context: one entry per text (non-memory) slot
    ctx_pos: Array  # [B, P + N] the slot of each entry (S: none yet, so ctx_pos < S = valid)
    mem_slot: Array  # [B, S]
    logits: Array  # [B, V] next-token logits
    h: Array  # [B, D] router input
    last: Array  # [B] last token (-1: none yet)
    n_inj: Array
    injected: Array


def _forward(hv, x, pos, st):
    """:func:`split_forward` on the blocks: ``(logits, h_l, h_last, lo, hi)`` (uncommitted).

    ``pos`` the logical positions (= the upper blocks' slots); the lower blocks write at
    their own length (equal to the upper's unless compact) and hide memory slots.
    """
    t = x.shape[1]
    i = jnp.arange(t, dtype=jnp.int32)[None, :, None]
    hi0 = st.hi[0]
    j = jnp.arange(hi0.capacity, dtype=jnp.int32)[None, None, :]
    full = j < hi0.length[:, None, None] + i + 1
    if hv.compact:
        lo0 = st.lo[0]
        j_lo = jnp.arange(lo0.capacity, dtype=jnp.int32)[None, None, :]
        low = j_lo < lo0.length[:, None, None] + i + 1
    else:
        low = full & ~st.mem_slot[:, None, :]
    h_l, lo = _run(hv.lo, st.lo, x, pos, low, hv.lo_iv)
    h, hi = _run(hv.hi, st.hi, h_l, pos, full, hv.hi_iv)
    return nn.unembed(*hv.hi[-1], h), h_l, h, lo, hi


def _set_slot(buf, at, val):
    """``buf[b, at[b]] = val[b]``, dropped where ``at[b]`` is out of range.

    A per-row scatter under ``vmap`` (O(B D) per step, not O(B S D)); its batch dimension keeps
    the batch sharding (a scatter indexed by a row iota does not).
    """
    return jax.vmap(lambda b, a, v: b.at[a].set(v, mode="drop"))(buf, at, val.astype(buf.dtype))


def _context_widths(total):
    """The injector's context widths (static): a quarter, a half and all of ``P + N``."""

    def up8(x):
        return -(-x // 8) * 8

    return tuple(sorted({min(total, up8(-(-total // d))) for d in (4, 2)} | {total}))


def _memory(p, st, at, bank, k, *, cfg, width, lm):
    """:func:`inject` on the filled prefix of the injector's context.

    The context's entries are the text slots in order, so every row's entries past its
    text length are empty and hidden from the injector. It runs on the narrowest of
    :func:`_context_widths` that holds every row's filled entries (``lax.switch``): the
    same memory (the hidden entries add exact zeros to its attention), for the work of
    the context so far instead of the whole generation's.
    """
    widths = _context_widths(st.ctx.shape[1])
    need = jnp.max(at - st.injected)  # the longest filled prefix in the batch

    def branch(w):
        def f(ctx, valid, pos):
            return inject_traced(
                p, cfg, ctx[:, :w], valid[:, :w], at, bank, k, width, *lm, pos[:, :w]
            )[0]

        return f

    idx = jnp.sum(need > jnp.asarray(widths[:-1], need.dtype))
    valid = st.ctx_pos < st.mem_slot.shape[1]
    return jax.lax.switch(idx, [branch(w) for w in widths], st.ctx, valid, st.ctx_pos)


def _inject_rows(hv, p, st, bank, k, *, cfg, width, lm):
    """The injection chunk's forward: the upper blocks' caches, logits and router input.

    The memory tokens enter after block l, so the chunk runs the blocks > l only: blocks
    <= l hide the memory slots from every other query (``mem_slot``), so what they would
    compute at those slots is never read (``nn.Interventions``' insertion, whose lower
    half only feeds the discarded reserved slots; the tests check the two agree). The
    memory enters with block l's user edit added (:func:`_edit_memory`, ``nn``'s order),
    and each upper block applies its own. The chunk writes ``width`` rows at every row's
    ``length``; only an injecting row's first ``k`` are committed, the rest lie past the
    length, hidden, and are overwritten by the next tokens (WeDLM's chunk + ragged
    commit).
    """
    at = st.hi[0].length
    mem = _memory(p, st, at, bank, k, cfg=cfg, width=width, lm=lm)
    km = mem.shape[1]
    pos = at[:, None] + jnp.arange(km, dtype=jnp.int32)[None, :]
    s = st.hi[0].capacity
    j = jnp.arange(s, dtype=jnp.int32)[None, None, :]
    full = j < pos[:, :, None] + 1
    h, caches = _run(hv.hi[:-1], st.hi[:-1], _edit_memory(hv, mem), pos, full, hv.hi_iv[:-1])
    # the last block: only the memory rows' K/V are read later, and its output only at
    # row k - 1 (the next token's logits and the router input): the K/V of all rows,
    # then the whole block for that one row (its K/V rewritten alike)
    (lp, lc), c = hv.hi[-1], st.hi[-1]
    c = nn.write_kv(lp, lc, h, pos, cache=c, layer=0, overflow="drop")
    idx = jnp.clip(k - 1, 0, km - 1)
    one = jnp.take_along_axis(h, idx[:, None, None], axis=1)  # [B, 1, D]
    r = nn.run_layers(
        lp,
        lc,
        one,
        (at + idx)[:, None],
        cache=c._replace(length=at + idx),
        attn_mask=j < (at + idx + 1)[:, None, None],
        overflow="drop",
        interventions=hv.hi_iv[-1],
    )
    hh = r.h
    lg = nn.unembed(lp, lc, hh)[:, 0].astype(st.logits.dtype)
    return (*caches, r.cache._replace(length=at)), lg, hh[:, 0].astype(st.h.dtype)


def _inject(hv, p, st, act, *, cfg, width, lm):
    bank_t, k_t = action_table(cfg)
    bank, k = lookup(bank_t, act), lookup(k_t, act)
    hit = k > 0

    def run(st):
        hi, lg, hh = _inject_rows(hv, p, st, bank, k, cfg=cfg, width=width, lm=lm)
        at = st.hi[0].length
        s = st.mem_slot.shape[1]
        # blocks <= l never read a memory slot: their cache rows there are left as they are
        j = jnp.arange(s, dtype=jnp.int32)[None, :]
        span = (j >= at[:, None]) & (j < (at + k)[:, None])
        return st._replace(
            lo=st.lo if hv.compact else _commit(st.lo, k),
            hi=_commit(hi, k),
            mem_slot=st.mem_slot | span,
            logits=jnp.where(hit[:, None], lg, st.logits),
            h=jnp.where(hit[:, None], hh, st.h),
            n_inj=st.n_inj + hit.astype(jnp.int32),
            injected=st.injected + k,
        )

    # the whole update under the cond: a step where no row injects touches nothing
    return jax.lax.cond(jnp.any(hit), run, lambda st: st, st)


def _chunk_width(cfg, force):
    """The widest injection a loop can take (static).

    The forced action's k, else ``cfg.fixed_k``, else ``k_max``. It sizes the injection
    chunk and the ``n_max`` x width memory slots reserved per row, which every attention
    of the loop reads.
    """
    if force is not None:
        return ([0] + list(cfg.budgets) * 2)[force]  # action_table's k, in Python
    return cfg.k_max if cfg.fixed_k is None else cfg.fixed_k


def _feed(hv, st, tok, embeds_ctx):
    x = nn.embed(*hv.lo[0], tok[:, None])
    at = st.hi[0].length
    logits, h_l, h_last, lo, hi = _forward(hv, x, at[:, None], st)
    ti = at - st.injected  # the entry of this text slot in the injector's context
    return st._replace(
        lo=_commit(lo, 1),
        hi=_commit(hi, 1),
        ctx=_set_slot(st.ctx, ti, (x if embeds_ctx else h_l)[:, 0]),
        ctx_pos=_set_slot(st.ctx_pos, ti, at),
        logits=logits[:, 0].astype(st.logits.dtype),
        h=h_last[:, 0].astype(st.h.dtype),
        last=tok,
    )


def _generate(
    lm_params,
    p,
    embeds,
    plen,
    key,
    temperature,
    top_p,
    iv,
    *,
    lm_cfg,
    cfg,
    n,
    force,
    greedy,
    sample_router,
):
    lm_params = jax.lax.stop_gradient(lm_params)
    plen = guard_sampling(plen, temperature, top_p)  # traced values
    b, t, d = embeds.shape
    km = _chunk_width(cfg, force)  # 0: force_action=0, no injection, no reserved slots
    can_inject = km > 0
    s = t + n + cfg.n_max * km
    dtype = lm_params["embed"].dtype
    # the prompt's own T-slot cache, padded per block below: the prefill's attention reads
    # the T prompt slots, not the whole (still empty) capacity (nn.prefill's way)
    cache = nn.init_cache(lm_cfg, max_len=t, like=plen, dtype=dtype)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    zero = jnp.zeros_like(plen)  # batch-shaped arrays follow the prompts' sharding
    # the last block, the norm and the LM head at each row's last prompt position only
    # (nn.prefill's way: `outputs_at`); block l's states everywhere (the context)
    top = lm_cfg.n_layers - 1
    out = nn.apply(
        lm_params,
        lm_cfg,
        inputs_embeds=embeds,
        positions=pos,
        cache=cache,
        collect=(cfg.layer, top),
        overflow="drop",
        interventions=iv,
        outputs_at=(zero + jnp.arange(b, dtype=jnp.int32), plen - 1),
    )
    # the injector's context: block-l states (tiny) or the input embeddings (LoRA replica)
    embeds_ctx = cfg.injector == "lora_replica"
    ctx0 = embeds if embeds_ctx else out.hidden[cfg.layer]
    # text slots only (the memory slots never enter the injector's context): entry i is
    # the i-th text slot of the row, ``ctx_pos`` its slot
    ctx = jnp.pad(ctx0.astype(jnp.float32), ((0, 0), (0, n), (0, 0)))
    jt = jnp.arange(t + n, dtype=jnp.int32)[None, :]
    j = jnp.arange(s, dtype=jnp.int32)[None, :]
    zn = zero[:, None] + jnp.zeros((1, n), jnp.int32)
    hv = _blocks(lm_params, lm_cfg, cfg.layer, iv)
    lo, hi = _cut_cache(nn.commit(out.cache, plen), cfg.layer + 1, t + n if hv.compact else s, s)
    h_last = out.hidden[top]  # [B, D]: the residual stream the router reads
    st = _State(
        lo=lo,
        hi=hi,
        ctx=ctx,
        ctx_pos=jnp.where(jt < plen[:, None], jt, s),
        mem_slot=(j < zero[:, None]),
        logits=out.logits.astype(jnp.float32),
        h=h_last.astype(jnp.float32),
        last=zero - 1,
        n_inj=zero,
        injected=zero,
    )
    recs = (zn, zn, zn > 0, zn[:, :, None].astype(jnp.float32) + jnp.zeros((1, 1, d), jnp.float32))

    def body(i, carry):
        st, (toks, acts, elig_r, hs) = carry
        delim = _is_delim(cfg, st.last) & ((st.last >= 0) | (not cfg.delimiter_ids))
        elig = delim & (st.n_inj < cfg.n_max)
        lg = masked_router_logits(p.router, cfg, st.h, elig)
        if force is not None:
            act = jnp.where(elig, jnp.int32(force), 0)
        elif sample_router:
            act = jax.random.categorical(step_key(key, 2 * i + 1), lg).astype(jnp.int32)
        else:
            act = jnp.argmax(lg, axis=-1).astype(jnp.int32)
        act = jnp.where(elig, act, 0)
        hs = jax.lax.dynamic_update_index_in_dim(hs, st.h, i, axis=1)
        if can_inject:
            st = _inject(hv, p, st, act, cfg=cfg, width=km, lm=(lm_params, lm_cfg))
        tok = choose_tokens(
            st.logits,
            step_key(key, 2 * i),
            greedy=greedy,
            temperature=temperature,
            top_p=top_p,
        )
        # fed every step (the last feed is unused): no conditional around the cache
        st = _feed(hv, st, tok, embeds_ctx)
        put = functools.partial(jax.lax.dynamic_update_index_in_dim, index=i, axis=1)
        recs = (put(toks, tok), put(acts, act), put(elig_r, elig), hs)
        return st, recs

    st, (toks, acts, elig, hs) = jax.lax.fori_loop(0, n, body, (st, recs))
    return DLMRGeneration(toks, acts, elig, hs, st.injected, st.n_inj)


_generate_core = jax.jit(
    _generate, static_argnames=("lm_cfg", "cfg", "n", "force", "greedy", "sample_router")
)


def dlmr_generate(
    lm_params,
    lm_cfg: nn.TransformerConfig,
    params: DLMRParams,
    cfg: DLMRConfig,
    prompt_embeds: Float[ArrayLike, "B P D"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    key,
    max_new_tokens: int,
    router: str = "greedy",
    force_action: int | None = None,
    temperature: float | Array = 0.0,
    top_p: float | Array = 1.0,
    interventions: nn.Interventions | None = None,
) -> DLMRGeneration:
    """Generate with adaptive memory injection (one ``lax.fori_loop``, KV cache).

    The right-padded prompt (``prompt_embeds``: e.g. visual embeddings projected to
    D and the text's ``nn.embed``) is prefilled; then, before each token, an
    eligible row (its last generated token is a delimiter, fewer than ``n_max``
    injections) takes a router action: null, or (bank, k). An injecting row gets k
    memory tokens from :func:`inject` over the block-``l`` states of its context,
    inserted after block ``l`` through ``nn.Interventions`` at slots and positions
    ``length .. length + k - 1`` (a ``k_max``-slot chunk with a per-row commit of
    ``k``; text positions then continue at ``+k``); the next token is read at the
    last memory slot. Memory slots stay hidden from blocks ``<= l``. With no
    injection the loop is plain cached greedy/sampled decoding of the frozen
    model. Jitted at module level (configs, sizes, router mode static).

    Steering: ``interventions``' additive edits act in every forward of the generation
    (the prefill, each decode step, each injection chunk) at every position of every
    row, as ``nn.run_layers(..., interventions=...)`` applies them. At block ``l``,
    ``nn``'s order holds: the memory latents enter, then the block-``l`` edit is added
    (memory rows get it too); the router and the tiny injector read the steered model's
    states (the edits at blocks ``<= l`` in the block-``l`` context). The LoRA-replica
    injector's own forward is the adapter's and is not edited.

    Args:
      lm_params: The frozen backbone (``jaxkit.nn`` layout; never modified).
      lm_cfg: Its config (causal).
      params: The adapter (:class:`DLMRParams`).
      cfg: Its :class:`DLMRConfig`.
      prompt_embeds: ``[B, P, D]`` right-padded prompt embeddings.
      prompt_len: ``int[B]`` in ``[1, P]``.
      key: PRNG key (token ``i``: ``fold_in(key, 2i)``; router: ``fold_in(key, 2i+1)``).
      max_new_tokens: N (static).
      router: ``"greedy"`` (arg-max, inference) or ``"sample"`` (rollouts).
      force_action: Static action index taken at every eligible step instead of
        the router (0: never inject, the base model; ``None``: the router).
      temperature: 0 (concrete) for greedy tokens, else sampling (traced).
      top_p: Nucleus mass in (0, 1].
      interventions: Optional ``nn.Interventions`` of additive edits only
        (``add={block: vec}``, ``vec`` ``[D]`` or ``[B, D]``, blocks in
        ``[0, n_layers)``; e.g. a ``jaxkit.steering.steer_add`` vector). No insertion
        (DLMR inserts its memory: one span per call), no read sites. None or an empty
        object: the plain program, bit for bit.

    Returns:
      :class:`DLMRGeneration`.

    Raises:
      TypeError / ValueError: bad shapes, ``cfg.layer`` out of range, a bad router
        mode or ``force_action``, ``max_new_tokens < 1``, a ``temperature`` or
        ``top_p`` that is not a real scalar, a non-finite or negative
        ``temperature``, ``top_p`` outside ``(0, 1]`` (NaN fails; traced values
        raise under ``jit``; the checks of ``decoding.ar_generate``).
      TypeError: ``interventions`` not an ``nn.Interventions``, or an edit of a shape
        other than ``[D]`` / ``[B, D]``.
      ValueError: an ``interventions`` edit at a block outside ``[0, n_layers)``, read
        sites, or an insertion.
    """
    check_config(lm_cfg, cfg)
    check_params(params, name="params", cfg=cfg, d=lm_cfg.d_model)
    _validate.one_of(("greedy", "sample"), router=router)
    _validate.is_key(key)
    n = _validate.python_int(max_new_tokens, name="max_new_tokens", minimum=1)
    if force_action is not None:
        force_action = _validate.python_int(force_action, name="force_action", minimum=0)
        if force_action >= cfg.n_actions:
            raise ValueError(
                f"`force_action` must lie in [0, {cfg.n_actions}), got {force_action}."
            )
    _validate.floating(prompt_embeds, name="prompt_embeds")  # before jnp.asarray: a string
    emb = jnp.asarray(prompt_embeds)
    _validate.ndim(emb, 3, name="prompt_embeds")
    _validate.nonempty(emb, name="prompt_embeds")  # the longest prefix of no row
    if emb.shape[2] != lm_cfg.d_model:
        raise TypeError(f"`prompt_embeds` must have last axis {lm_cfg.d_model}, got {emb.shape}.")
    _validate.integer(prompt_len, name="prompt_len")
    plen = jnp.asarray(prompt_len)
    _validate.shape(plen, (emb.shape[0],), name="prompt_len")
    t = emb.shape[1]
    plen = _validate.error_if(
        plen, _validate.any_outside(plen, 1, t), f"`prompt_len` must lie in [1, {t}]."
    ).astype(jnp.int32)
    greedy = check_sampling(temperature, top_p)
    iv = check_interventions(interventions, lm_cfg, emb.shape[0], span_owner="dlmr_generate")
    return _generate_core(
        lm_params,
        params,
        emb.astype(lm_params["embed"].dtype),
        plen,
        key,
        jnp.asarray(temperature, jnp.float32),
        jnp.asarray(top_p, jnp.float32),
        iv,
        lm_cfg=lm_cfg,
        cfg=cfg,
        n=n,
        force=force_action,
        greedy=greedy,
        sample_router=router == "sample",
    )
