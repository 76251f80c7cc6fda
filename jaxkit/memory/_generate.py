"""DLMR inference: one jitted decode loop with adaptive, ragged memory injection."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate, nn
from jaxkit.kernels.sampling import sample_tokens
from jaxkit.memory._dlmr import (
    DLMRConfig,
    DLMRParams,
    _is_delim,
    action_table,
    check_config,
    inject_traced,
    lookup,
    masked_router_logits,
    memory_interventions,
    split_forward,
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
    cache: nn.KVCache
    ctx: Array  # [B, S, D] block-l hidden of every non-memory slot
    ctx_valid: Array  # [B, S]
    mem_slot: Array  # [B, S]
    logits: Array  # [B, V] next-token logits
    h: Array  # [B, D] router input
    last: Array  # [B] last token (-1: none yet)
    n_inj: Array
    injected: Array


def _choose(logits, key, temperature, top_p, greedy):
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return sample_tokens(logits, key=key, temperature=temperature, top_p=top_p).token


def _set_slot(buf, at, val):
    """``buf[b, at[b]] = val[b]``, dropped where ``at[b]`` is out of range.

    A per-row scatter under ``vmap`` (O(B D) per step, not O(B S D)); its batch dimension keeps
    the batch sharding (a scatter indexed by a row iota does not).
    """
    return jax.vmap(lambda b, a, v: b.at[a].set(v, mode="drop"))(buf, at, val.astype(buf.dtype))


def _inject(lm_params, p, st, action, *, lm_cfg, cfg, width):
    bank_t, k_t = action_table(cfg)
    bank, k = lookup(bank_t, action), lookup(k_t, action)
    at = st.cache.length
    mem, _ = inject_traced(p, cfg, st.ctx, st.ctx_valid, at, bank, k)
    mem = mem[:, :width]  # the chunk: the widest k this loop can take (same values)
    b, km = mem.shape[:2]
    x = jnp.zeros_like(mem, dtype=lm_params["embed"].dtype)  # the reserved slots' input
    pos = at[:, None] + jnp.arange(km, dtype=jnp.int32)[None, :]
    iv = memory_interventions(cfg, mem.astype(x.dtype), at)
    logits, _, h_last, cache = split_forward(
        lm_params, lm_cfg, cfg.layer, x, pos, st.cache, st.mem_slot, iv
    )
    hit = k > 0
    idx = jnp.clip(k - 1, 0, km - 1)[:, None, None]
    lg = jnp.take_along_axis(logits, idx, axis=1)[:, 0]
    hh = jnp.take_along_axis(h_last, idx, axis=1)[:, 0]
    j = jnp.arange(st.mem_slot.shape[1], dtype=jnp.int32)[None, :]
    span = (j >= at[:, None]) & (j < (at + k)[:, None])
    return st._replace(
        cache=nn.commit(cache, k),
        mem_slot=st.mem_slot | span,
        logits=jnp.where(hit[:, None], lg.astype(st.logits.dtype), st.logits),
        h=jnp.where(hit[:, None], hh.astype(st.h.dtype), st.h),
        n_inj=st.n_inj + hit.astype(jnp.int32),
        injected=st.injected + k,
    )


def _chunk_width(cfg, force):
    """The widest injection a loop can take (static).

    The forced action's k, else ``cfg.fixed_k``, else ``k_max``. It sizes the injection
    chunk and the ``n_max`` x width memory slots reserved per row, which every attention
    of the loop reads.
    """
    if force is not None:
        return ([0] + list(cfg.budgets) * 2)[force]  # action_table's k, in Python
    return cfg.k_max if cfg.fixed_k is None else cfg.fixed_k


def _feed(lm_params, st, tok, *, lm_cfg, cfg):
    x = nn.embed(lm_params, lm_cfg, tok[:, None])
    at = st.cache.length
    logits, h_l, h_last, cache = split_forward(
        lm_params, lm_cfg, cfg.layer, x, at[:, None], st.cache, st.mem_slot
    )
    return st._replace(
        cache=nn.commit(cache, 1),
        ctx=_set_slot(st.ctx, at, h_l[:, 0]),
        ctx_valid=_set_slot(st.ctx_valid, at, jnp.ones_like(tok, bool)),
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
    *,
    lm_cfg,
    cfg,
    n,
    force,
    greedy,
    sample_router,
):
    lm_params = jax.lax.stop_gradient(lm_params)
    b, t, d = embeds.shape
    L = lm_cfg.n_layers
    km = _chunk_width(cfg, force)  # 0: force_action=0, no injection, no reserved slots
    can_inject = km > 0
    s = t + n + cfg.n_max * km
    dtype = lm_params["embed"].dtype
    cache = nn.init_cache(lm_cfg, max_len=s, like=plen, dtype=dtype)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    out = nn.apply(
        lm_params,
        lm_cfg,
        inputs_embeds=embeds,
        positions=pos,
        cache=cache,
        collect=(cfg.layer, L - 1),
    )
    ctx = jnp.pad(out.hidden[cfg.layer].astype(jnp.float32), ((0, 0), (0, s - t), (0, 0)))
    j = jnp.arange(s, dtype=jnp.int32)[None, :]
    idx = (plen - 1)[:, None, None]
    zero = jnp.zeros_like(plen)  # batch-shaped arrays follow the prompts' sharding
    zn = zero[:, None] + jnp.zeros((1, n), jnp.int32)
    st = _State(
        cache=nn.commit(out.cache, plen),
        ctx=ctx,
        ctx_valid=j < plen[:, None],
        mem_slot=(j < zero[:, None]),
        logits=jnp.take_along_axis(out.logits, idx, axis=1)[:, 0].astype(jnp.float32),
        h=jnp.take_along_axis(out.hidden[L - 1], idx, axis=1)[:, 0].astype(jnp.float32),
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
            act = jax.random.categorical(jax.random.fold_in(key, 2 * i + 1), lg).astype(jnp.int32)
        else:
            act = jnp.argmax(lg, axis=-1).astype(jnp.int32)
        act = jnp.where(elig, act, 0)
        hs = jax.lax.dynamic_update_index_in_dim(hs, st.h, i, axis=1)
        if can_inject:
            st = jax.lax.cond(
                jnp.any(act > 0),
                lambda s_: _inject(lm_params, p, s_, act, lm_cfg=lm_cfg, cfg=cfg, width=km),
                lambda s_: s_,
                st,
            )
        tok = _choose(st.logits, jax.random.fold_in(key, 2 * i), temperature, top_p, greedy)
        # fed every step (the last feed is unused): no conditional around the cache
        st = _feed(lm_params, st, tok, lm_cfg=lm_cfg, cfg=cfg)
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

    Returns:
      :class:`DLMRGeneration`.

    Raises:
      TypeError / ValueError: bad shapes, ``cfg.layer`` out of range, a bad router
        mode or ``force_action``, ``max_new_tokens < 1``.
    """
    check_config(lm_cfg, cfg)
    _validate.one_of(("greedy", "sample"), router=router)
    _validate.is_key(key)
    n = _validate.python_int(max_new_tokens, name="max_new_tokens", minimum=1)
    if force_action is not None:
        force_action = _validate.python_int(force_action, name="force_action", minimum=0)
        if force_action >= cfg.n_actions:
            raise ValueError(
                f"`force_action` must lie in [0, {cfg.n_actions}), got {force_action}."
            )
    emb = jnp.asarray(prompt_embeds)
    _validate.floating(emb, name="prompt_embeds")
    _validate.ndim(emb, 3, name="prompt_embeds")
    if emb.shape[2] != lm_cfg.d_model:
        raise TypeError(f"`prompt_embeds` must have last axis {lm_cfg.d_model}, got {emb.shape}.")
    plen = jnp.asarray(prompt_len)
    _validate.integer(plen, name="prompt_len")
    _validate.shape(plen, (emb.shape[0],), name="prompt_len")
    t = emb.shape[1]
    plen = _validate.error_if(
        plen, jnp.any((plen < 1) | (plen > t)), f"`prompt_len` must lie in [1, {t}]."
    ).astype(jnp.int32)
    _validate.real_scalar(temperature, name="temperature")
    _validate.non_negative(temperature=temperature)
    _validate.in_interval(low=0, high=1, closed="right", top_p=top_p)
    greedy = not isinstance(temperature, jax.core.Tracer) and float(temperature) == 0.0
    return _generate_core(
        lm_params,
        params,
        emb.astype(lm_params["embed"].dtype),
        plen,
        key,
        jnp.asarray(temperature, jnp.float32),
        jnp.asarray(top_p, jnp.float32),
        lm_cfg=lm_cfg,
        cfg=cfg,
        n=n,
        force=force_action,
        greedy=greedy,
        sample_router=router == "sample",
    )
