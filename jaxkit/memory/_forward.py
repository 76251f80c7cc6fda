"""The frozen LM's two forwards of DLMR's training: the injector's context, one injection.

:func:`context_states` (the context the injector reads and the last-block outputs, the
backbone detached) and :func:`memory_forward` (the uncached forward with one memory
inserted after block ``cfg.layer``: stage 2's forward and the recompute oracle), each
with its jitted core.
"""

import jax
import jax.numpy as jnp

from jaxkit import _validate, nn
from jaxkit.memory._dlmr import DLMRConfig, check_config, gather_expanded


def _ctx(lm_params, x, *, lm_cfg, layer, embeds):
    b, t = x.shape[:2]
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    out = nn.run_layers(lm_params, lm_cfg, x, pos, collect=(layer,))
    ctx = x.astype(jnp.float32) if embeds else out.hidden[layer]
    return jax.lax.stop_gradient((ctx, out.h))


_ctx_core = jax.jit(_ctx, static_argnames=("lm_cfg", "layer", "embeds"))


def context_states(lm_params, lm_cfg: nn.TransformerConfig, cfg: DLMRConfig, inputs_embeds):
    """The injector's context and the last-block outputs of the frozen LM (positions ``arange``).

    ``inputs_embeds [B, T, D]`` (e.g. ``nn.embed`` of tokens, or visual embeddings
    and text). Returns ``(ctx [B, T, D], h_last [B, T, D])``, detached: ``ctx`` is the
    block-``cfg.layer`` output for the tiny injector and ``inputs_embeds`` itself (f32)
    for the LoRA replica (it re-runs the LM over the context). Jitted (configs static).
    """
    check_config(lm_cfg, cfg)
    x = jnp.asarray(inputs_embeds)
    _validate.floating(x, name="inputs_embeds")
    _validate.shape(x, (None, None, lm_cfg.d_model), name="inputs_embeds")
    embeds = cfg.injector == "lora_replica"
    return _ctx_core(lm_params, x, lm_cfg=lm_cfg, layer=cfg.layer, embeds=embeds)


def _memory_forward(lm_params, embeds, mem, at, k, *, lm_cfg, cfg):
    """Uncached forward with ``mem[:, :k]`` inserted at index ``at`` after block ``l``.

    ``embeds [B, T, D]``; per row the expanded sequence is ``[x_<at ; k memory
    slots ; x_>=at]`` (padded to ``T + k_max``) at positions ``arange``, the memory
    slots hidden from blocks ``<= l`` (the masks of :func:`dlmr_generate`). Returns
    ``[B, T + k_max, V]`` logits.
    """
    b, t, _ = embeds.shape
    km = cfg.k_max
    x, is_mem = gather_expanded(embeds, at, k, km)
    x = jnp.where(is_mem[..., None], jnp.zeros_like(x), x)
    e = jnp.arange(t + km, dtype=jnp.int32)
    pos = jnp.broadcast_to(e, (b, t + km))
    causal = e[None, None, :] <= e[None, :, None]
    own = e[None, None, :] == e[None, :, None]
    full = jnp.broadcast_to(causal, (b, t + km, t + km))
    low = full & (~is_mem[:, None, :] | own)
    lo = nn.run_layers(lm_params, lm_cfg, x, pos, stop=cfg.layer + 1, attn_mask=low)
    mi = jnp.clip(e[None, :] - at[:, None], 0, km - 1)
    m = jnp.take_along_axis(mem.astype(lo.h.dtype), mi[:, :, None], axis=1)
    h = jnp.where(is_mem[..., None], m, lo.h)
    up = nn.run_layers(lm_params, lm_cfg, h, pos, start=cfg.layer + 1, attn_mask=full)
    return nn.unembed(lm_params, lm_cfg, up.h)


_memory_forward_core = jax.jit(_memory_forward, static_argnames=("lm_cfg", "cfg"))


def memory_forward(
    lm_params,
    lm_cfg: nn.TransformerConfig,
    cfg: DLMRConfig,
    embeds,
    memory,
    at,
    k,
):
    """The uncached forward of one injection (stage 2's forward; the recompute oracle).

    ``embeds [B, T, D]``; ``memory [B, k_max, D]`` (from :func:`inject`); ``at``,
    ``k`` ``int[B]``: row ``b`` becomes ``[x_<at ; memory[:k] ; x_>=at]`` padded to
    ``T + k_max`` at positions ``arange``, the memory inserted after block
    ``cfg.layer`` and hidden from blocks ``<= cfg.layer`` (the masks
    :func:`dlmr_generate` uses). Jitted (configs static).

    Returns:
      ``[B, T + k_max, V]`` logits.

    Raises:
      TypeError: shapes that disagree; ValueError: ``k`` outside ``[0, k_max]``,
        ``at`` outside ``[0, T]``.
    """
    check_config(lm_cfg, cfg)
    embeds, memory = jnp.asarray(embeds), jnp.asarray(memory)
    _validate.floating(embeds, name="embeds")
    _validate.shape(embeds, (None, None, lm_cfg.d_model), name="embeds")
    b, t, d = embeds.shape
    _validate.floating(memory, name="memory")
    _validate.shape(memory, (b, cfg.k_max, d), name="memory")
    at, k = jnp.asarray(at), jnp.asarray(k)
    for name, v in (("at", at), ("k", k)):
        _validate.integer(v, name=name)
        _validate.shape(v, (b,), name=name)
    k = _validate.error_if(
        k, _validate.any_outside(k, 0, cfg.k_max), f"`k` must lie in [0, {cfg.k_max}]."
    )
    at = _validate.error_if(at, _validate.any_outside(at, 0, t), f"`at` must lie in [0, {t}].")
    return _memory_forward_core(
        lm_params, embeds, memory, at.astype(jnp.int32), k.astype(jnp.int32), lm_cfg=lm_cfg, cfg=cfg
    )
