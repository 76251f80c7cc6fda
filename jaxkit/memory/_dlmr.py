"""DLMR: dual latent memories, an injector and a router around a frozen causal LM.

**[R] reconstructed.** The authors' code (Hunter-Wrynn/DLMR) and the paper body are
unavailable; this follows the ICML 2026 abstract, a third-party reading of the
paper's equations and the closest public code (VisMem), as
``specs/sequence.md`` §4 lays out. Everything marked [R] is a guess.

Two input-agnostic latent banks (visual ``Z^v``, reasoning ``Z^r``); an injector
turns the first ``k`` latents of the chosen bank and the current context into ``k``
memory tokens; a router picks, at rule-eligible decoding steps (the last token is a
delimiter and fewer than ``n_max`` injections so far), the bank and the budget ``k``
or no injection. The memory tokens enter the frozen backbone through
``jaxkit.nn.Interventions``: inserted after block ``cfg.layer``, they occupy
ordinary cache slots and logical positions (text positions advance by ``k``), and
are hidden from the blocks ``<= cfg.layer``. The backbone is never modified.

The configuration, the adapter's parameters and the configs' check (``VISUAL``,
``REASONING``, :class:`DLMRConfig`, :class:`DLMRParams`, :func:`check_config`) live in
:mod:`jaxkit.memory._config` and are re-exported here; this module holds the adapter's
initialisation, the router's actions, the injection and the split forward.
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate, nn
from jaxkit.memory._checks import check_params
from jaxkit.memory._config import REASONING as REASONING
from jaxkit.memory._config import VISUAL as VISUAL
from jaxkit.memory._config import DLMRConfig as DLMRConfig
from jaxkit.memory._config import DLMRParams as DLMRParams
from jaxkit.memory._config import check_config as check_config
from jaxkit.memory._lora import LoraInjector, replica_memory
from jaxkit.memory._modules import Injector, Router


def init_dlmr(lm_cfg: nn.TransformerConfig, cfg: DLMRConfig, *, key) -> DLMRParams:
    """Fresh adapter parameters (f32): banks ``N(0, 0.02^2)`` (VisMem's init).

    A fresh router's arg-max is the null action; a fresh tiny injector returns the
    injection point's state ``now`` plus the bank's latents, a fresh LoRA replica
    (``a = 0``) is the frozen LM.
    """
    check_config(lm_cfg, cfg)
    _validate.is_key(key)
    kb, ki, kr = jax.random.split(key, 3)
    d = lm_cfg.d_model
    sizes = (sum(cfg.bank_sizes),) if cfg.shared_bank else cfg.bank_sizes
    banks = tuple(
        0.02 * jax.random.normal(k, (m, d), jnp.float32)
        for k, m in zip(jax.random.split(kb, len(sizes)), sizes, strict=True)
    )
    if cfg.injector == "lora_replica":
        inj = LoraInjector(
            lm_cfg,
            n_banks=len(sizes),
            rank=cfg.lora_rank,
            alpha=cfg.lora_alpha,
            targets=cfg.lora_targets,
            key=ki,
        )
    else:
        inj = Injector(
            d,
            cfg.injector_dim,
            heads=cfg.injector_heads,
            n_layers=cfg.injector_layers,
            recency=cfg.recency,
            key=ki,
        )
    return DLMRParams(banks, inj, Router(d, cfg.router_hidden, cfg.n_actions, key=kr))


# ----------------------------------------------------------------------------- actions


def action_table(cfg: DLMRConfig) -> tuple[Array, Array]:
    """``(bank int32[A], k int32[A])`` of every action (action 0: bank 0, k 0)."""
    nb = len(cfg.budgets)
    bank = [0] + [s for s in (VISUAL, REASONING) for _ in range(nb)]
    k = [0] + list(cfg.budgets) * 2
    return jnp.asarray(bank, jnp.int32), jnp.asarray(k, jnp.int32)


def lookup(table: Array, idx: Array) -> Array:
    """``table[idx]`` for a small 1-D table, as a masked sum (keeps ``idx``'s sharding)."""
    hit = idx[..., None] == jnp.arange(table.shape[0], dtype=idx.dtype).reshape(
        (1,) * idx.ndim + (-1,)
    )
    return jnp.sum(jnp.where(hit, table.reshape((1,) * idx.ndim + (-1,)), 0), axis=-1).astype(
        table.dtype
    )


def action_mask(cfg: DLMRConfig, eligible: Array) -> Array:
    """``bool[..., A]``: the allowed actions.

    Ineligible: the null only. Eligible: every action (``fixed_k``: only that
    budget, no null).
    """
    _, k = action_table(cfg)
    if cfg.fixed_k is None:
        at_elig = jnp.ones_like(k, dtype=bool)
    else:
        at_elig = k == cfg.fixed_k
    null_only = k == 0
    lead = (1,) * eligible.ndim
    return jnp.where(
        eligible[..., None], at_elig.reshape(lead + (-1,)), null_only.reshape(lead + (-1,))
    )


def masked_router_logits(router, cfg, h, eligible):
    lg = router(h)
    return jnp.where(action_mask(cfg, eligible), lg, -jnp.inf)


def _is_delim(cfg, tok):
    if not cfg.delimiter_ids:
        return jnp.ones(tok.shape, bool)
    ids = jnp.asarray(cfg.delimiter_ids, tok.dtype).reshape((1,) * tok.ndim + (-1,))
    return jnp.any(tok[..., None] == ids, axis=-1)


# ----------------------------------------------------------------------------- injection


def latents_for(p: DLMRParams, cfg: DLMRConfig, bank: Array, width: int | None = None) -> Array:
    """``Z^(bank)_{1:width}`` per row, ``[B, width, D]`` (default ``k_max``; shared: one bank)."""
    km = cfg.k_max if width is None else width
    if cfg.shared_bank:
        zv = zr = p.banks[0][:km]
    else:
        zv, zr = p.banks[0][:km], p.banks[1][:km]
    return jnp.where((bank == VISUAL)[:, None, None], zv[None], zr[None])


def inject_reads(
    p, cfg, ctx, ctx_valid, at, bank, k, width=None, lm_params=None, lm_cfg=None, ctx_pos=None
):
    """``(mem, mem_valid, reads [B, S])``: :func:`inject` plus where the injector read.

    ``width`` (static, >= every ``k``; default ``k_max``): the latents computed. Latents
    past a row's ``k`` are hidden, so a narrower call gives the same first tokens.
    ``ctx_pos int[B, S]`` (default ``arange(S)``): the slot of each context entry, so a
    context holding the non-memory slots only (:func:`dlmr_generate`'s) reads the same
    slots at the same distances; entries at or past ``at`` are hidden, and ``now`` is
    the entry at the largest slot before ``at``. ``reads`` is zero for the LoRA replica
    (it has no single read pointer).
    """
    width = cfg.k_max if width is None else width
    s = ctx.shape[1]
    given = ctx_pos
    if ctx_pos is None:
        ctx_pos = jnp.arange(s, dtype=jnp.int32)[None, :]
        last = jnp.clip(at - 1, 0, s - 1)
    else:
        last = jnp.argmax(jnp.where(ctx_pos < at[:, None], ctx_pos, -1), axis=1)
    valid = ctx_valid & (ctx_pos < at[:, None])
    now = jnp.take_along_axis(ctx, last[:, None, None], axis=1)[:, 0]
    mem_valid = jnp.arange(width, dtype=jnp.int32)[None, :] < k[:, None]
    lat = latents_for(p, cfg, bank, width)
    if cfg.injector == "lora_replica":
        mem = replica_memory(p.injector, lm_params, lm_cfg, ctx, valid, at, lat, bank, given)
        return mem, mem_valid, jnp.zeros(valid.shape, jnp.float32)
    mem, reads = p.injector.forward(ctx, valid, at[:, None] - ctx_pos, lat, now, mem_valid)
    return mem, mem_valid, reads


def inject_traced(
    p, cfg, ctx, ctx_valid, at, bank, k, width=None, lm_params=None, lm_cfg=None, ctx_pos=None
):
    return inject_reads(p, cfg, ctx, ctx_valid, at, bank, k, width, lm_params, lm_cfg, ctx_pos)[:2]


_inject_core = jax.jit(inject_traced, static_argnames=("cfg", "width", "lm_cfg"))


def check_lm_for_injector(cfg, lm_params, lm_cfg, where):
    """The LoRA replica needs the frozen LM: TypeError naming ``lm_params`` otherwise."""
    if cfg.injector == "lora_replica":
        if lm_params is None:
            raise TypeError(
                f"{where} with `injector='lora_replica'` needs `lm_params` and `lm_cfg`."
            )
        check_config(lm_cfg, cfg)


def inject(
    p: DLMRParams,
    cfg: DLMRConfig,
    ctx: Float[ArrayLike, "B S D"],
    ctx_valid: Bool[ArrayLike, "B S"],
    at: Int[ArrayLike, " B"],
    bank: Int[ArrayLike, " B"],
    k: Int[ArrayLike, " B"],
    *,
    lm_params=None,
    lm_cfg: nn.TransformerConfig | None = None,
) -> tuple[Float[Array, "B Kmax D"], Bool[Array, "B Kmax"]]:
    """Memory tokens ``M = g_phi(context, Z^(bank)_{1:k})`` for an injection at slot ``at``.

    The injector reads the context slots ``j < at`` with ``ctx_valid`` (the tiny
    injector: block-``l`` hidden states of the non-memory slots; the LoRA replica: their
    input embeddings, see :func:`context_states`). Static shapes: always ``k_max``
    tokens; ``mem_valid`` marks the first ``k`` of each row. Jitted (``cfg`` static).

    Args:
      p: Adapter parameters.
      cfg: Its config.
      ctx: ``[B, S, D]`` the injector's context (above).
      ctx_valid: ``bool[B, S]`` slots the injector may read.
      at: ``int[B]`` slot of the first memory token (the injection point).
      bank: ``int[B]`` 0 visual, 1 reasoning.
      k: ``int[B]`` budget per row in ``[0, k_max]`` (0: no injection).
      lm_params: The frozen backbone (``"lora_replica"`` only).
      lm_cfg: Its config (``"lora_replica"`` only).

    Returns:
      ``(mem [B, k_max, D] f32, mem_valid bool[B, k_max])``.

    Raises:
      TypeError: shapes or dtypes that disagree (an empty ``ctx`` too); no ``lm_params``
        for the LoRA replica.
      ValueError: ``k`` outside ``[0, k_max]``, ``bank`` outside {0, 1}, ``at`` outside
        ``[0, S]`` (traced: under ``jit``).
    """
    check_lm_for_injector(cfg, lm_params, lm_cfg, "`inject`")
    ctx, ctx_valid, at, bank, k = check_inject_args(p, cfg, ctx, ctx_valid, at, bank, k)
    return _inject_core(p, cfg, ctx, ctx_valid, at, bank, k, lm_params=lm_params, lm_cfg=lm_cfg)


def check_inject_args(p, cfg, ctx, ctx_valid, at, bank, k):
    """:func:`inject`'s checks (TypeError; ValueError or ``error_if`` for the values)."""
    check_params(p, name="p", cfg=cfg)
    _validate.floating(ctx, name="ctx")  # before jnp.asarray (a string names none)
    ctx = jnp.asarray(ctx)
    _validate.ndim(ctx, 3, name="ctx")
    b = ctx.shape[0]
    _validate.nonempty(ctx, name="ctx", what="row")
    _validate.nonempty(ctx, name="ctx", axis=1, what="slot")
    _validate.boolean(ctx_valid, name="ctx_valid")
    ctx_valid = jnp.asarray(ctx_valid)
    _validate.shape(ctx_valid, ctx.shape[:2], name="ctx_valid")
    d = p.banks[0].shape[1]
    if ctx.shape[2] != d:
        raise TypeError(f"`ctx` must have last axis {d} (the banks' width), got {ctx.shape}.")
    out = []
    for name, v in (("at", at), ("bank", bank), ("k", k)):
        _validate.integer(v, name=name)
        v = jnp.asarray(v)
        _validate.shape(v, (b,), name=name)
        out.append(v.astype(jnp.int32))
    at, bank, k = out
    k = _validate.error_if(
        k, _validate.any_outside(k, 0, cfg.k_max), f"`k` must lie in [0, {cfg.k_max}]."
    )
    bank = _validate.error_if(bank, _validate.any_outside(bank, 0, 1), "`bank` must be 0 or 1.")
    s = ctx.shape[1]  # past S the injector read the whole context at clipped distances
    at = _validate.error_if(at, _validate.any_outside(at, 0, s), f"`at` must lie in [0, {s}].")
    return ctx, ctx_valid, at, bank, k


def gather_expanded(x, at, k, k_max):
    """``(x [B, T + k_max, ...], is_mem)``: ``x`` with ``k`` (empty) memory slots at ``at``."""
    b, t = x.shape[:2]
    e = jnp.arange(t + k_max, dtype=jnp.int32)[None, :]
    src = jnp.where(e < at[:, None], e, e - k[:, None])
    is_mem = (e >= at[:, None]) & (e < (at + k)[:, None])
    src = jnp.clip(src, 0, t - 1)
    idx = src.reshape(src.shape + (1,) * (x.ndim - 2))
    out = jnp.take_along_axis(x, jnp.broadcast_to(idx, (b, t + k_max) + x.shape[2:]), axis=1)
    return out, is_mem


def memory_interventions(
    cfg: DLMRConfig, memory: Float[ArrayLike, "B K D"], at: Int[ArrayLike, " B"]
) -> nn.Interventions:
    """``nn.Interventions`` inserting ``memory`` after block ``cfg.layer`` at slots ``at..``.

    The caller reserves K slots (any token, e.g. a pad) at ``at[b]`` in each row's
    token sequence; pass the result to ``nn.apply`` / ``nn.prefill`` +
    ``nn.decode_step`` / ``decoding.ar_generate`` (one injection per row: what
    :func:`dlmr_generate` does for one forced route, exactly).

    ``at`` is any slot ``>= 0``: the sequence it indexes is not known here (the same object
    serves every call of a generation; a chunk that does not meet the span is only masked).

    Raises:
      TypeError: a ``memory`` that is not a floating ``[B, K, D]`` array, an ``at`` that is
        not an integer ``[B]`` array.
      ValueError: a negative ``at`` (traced: under ``jit``).
    """
    _validate.floating(memory, name="memory")  # before nn.Interventions (it names `latents`)
    _validate.ndim(memory, 3, name="memory")
    _validate.integer(at, name="at")
    _validate.ndim(at, 1, name="at")
    at = jnp.asarray(at)
    at = _validate.error_if(at, jnp.any(at < 0), "`at` must be >= 0.")
    return nn.Interventions(insert_layer=cfg.layer, insert_at=at, latents=memory)


# ----------------------------------------------------------------------------- forward pieces


def split_forward(lm_params, lm_cfg, layer, x, positions, cache, mem_slot, iv=None):
    """Blocks ``<= layer`` with the memory slots hidden, blocks ``> layer`` seeing them.

    The multi-span form of ``nn.Interventions``' insertion mask (several memory spans
    per row, from earlier injections), through the public split forward
    ``nn.run_layers``. ``x [B, T, D]`` input embeddings at cache slots
    ``length + arange(T)``; ``mem_slot bool[B, S]`` the committed memory slots; ``iv``
    an optional insertion for this chunk. Returns ``(logits, h_layer, h_last, cache)``
    (cache NOT committed).
    """
    b, t, _ = x.shape
    s = cache.capacity
    j = jnp.arange(s, dtype=jnp.int32)[None, None, :]
    i = jnp.arange(t, dtype=jnp.int32)[None, :, None]
    full = j < cache.length[:, None, None] + i + 1
    low = full & ~mem_slot[:, None, :]
    lo = nn.run_layers(
        lm_params,
        lm_cfg,
        x,
        positions,
        stop=layer + 1,
        cache=cache,
        attn_mask=low,
        overflow="drop",
        interventions=iv,
    )
    up = nn.run_layers(
        lm_params,
        lm_cfg,
        lo.h,
        positions,
        start=layer + 1,
        cache=lo.cache,
        attn_mask=full,
        overflow="drop",
    )
    return nn.unembed(lm_params, lm_cfg, up.h), lo.h, up.h, up.cache


@functools.partial(jax.jit, static_argnames=("lm_cfg", "layer"))
def hidden_states(lm_params, tokens_or_embeds, *, lm_cfg, layer):
    """Block-``layer`` and last-block outputs of the frozen LM (positions ``arange``)."""
    x = tokens_or_embeds
    if jnp.issubdtype(x.dtype, jnp.integer):
        x = nn.embed(lm_params, lm_cfg, x)
    b, t = x.shape[:2]
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    out = nn.run_layers(lm_params, lm_cfg, x, pos, collect=(layer,))
    return jax.lax.stop_gradient((out.hidden[layer], out.h))
