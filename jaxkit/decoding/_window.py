"""A decoder forward whose logits are read at a few slots per row (window step, prefill)."""

import functools

import jax
import jax.numpy as jnp

from jaxkit import nn


def forward_at(params, cfg, tokens, positions, cache, slots, iv, attn_mask=None):
    """``(cache, logits [B, W, V])``: ``tokens [B, T]`` through the model, logits at ``slots``.

    ``slots int[B, W]``: the positions of each row whose logits are read (a window step's W
    read slots of its 2W rows; the prefill's W mask slots and last prompt position). The
    cache gets all T rows' K/V (uncommitted); ``attn_mask``: ``nn.run_layers``'; ``iv``:
    ``nn.Interventions`` or None. On CPU the last block's query, attention, MLP, final
    norm and head run at the slots alone (:func:`slot_form`, ``nn.apply``'s
    ``outputs_at``; the last block's edit is applied at the slots): the same logits to
    rounding (same tokens on every bench input), ~11 % less CPU per window step on clean
    text (wave 27). Other platforms run :func:`whole_form` (not measured there: a decode
    step is a few small kernels, which the slot form's gathers add to).
    """
    args = (params, cfg, tokens, positions, slots, iv, attn_mask)
    at, whole = (functools.partial(f, *args) for f in (slot_form, whole_form))
    return jax.lax.platform_dependent(cache, cpu=at, default=whole)


def slot_form(params, cfg, tokens, positions, slots, iv, attn_mask, cache):
    """:func:`forward_at` with the last block at the slots only (``outputs_at``)."""
    rows = jnp.arange(tokens.shape[0], dtype=jnp.int32)[:, None] + jnp.zeros_like(slots)
    at = (rows.reshape(-1), slots.reshape(-1))  # rows follow the slots' batch sharding
    kw = dict(attn_mask=attn_mask, overflow="drop", interventions=iv, cache=cache)
    out = nn.apply(params, cfg, tokens, positions, outputs_at=at, **kw)
    return out.cache, out.logits.reshape(slots.shape + (-1,))


def whole_form(params, cfg, tokens, positions, slots, iv, attn_mask, cache):
    """:func:`forward_at` with every block on all T rows, the final norm and head at the slots."""
    x = nn.embed(params, cfg, tokens)
    kw = dict(attn_mask=attn_mask, overflow="drop", interventions=iv, cache=cache)
    out = nn.run_layers(params, cfg, x, positions, **kw)
    h = jnp.take_along_axis(out.h, slots[:, :, None], axis=1)
    return out.cache, nn.unembed(params, cfg, h)
