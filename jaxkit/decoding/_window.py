"""A decoder forward whose logits are read at a few slots per row (window step, prefill)."""

import jax
import jax.numpy as jnp

from jaxkit import nn


def forward_at(params, cfg, tokens, positions, cache, slots, iv, attn_mask=None):
    """``(cache, logits [B, W, V])``: ``tokens [B, T]`` through the model, logits at ``slots``.

    ``slots int[B, W]``: the positions of each row whose logits are read (a window step's W
    read slots of its 2W rows; the prefill's W mask slots and last prompt position). The
    cache gets all T rows' K/V (uncommitted); ``attn_mask``: ``nn.run_layers``'. On CPU the
    last block's query, attention, MLP, final norm and head run at the slots alone
    (``nn.apply``'s ``outputs_at``): the same logits to rounding (same tokens on every bench
    input), ~11 % less CPU per window step on clean text (wave 27). Other platforms keep the
    whole forward (not measured there: a decode step is a few small kernels, which the slot
    form's gathers add to), as do calls with interventions (``iv``), which ``outputs_at``
    does not take; the final norm and the head then run on the gathered slots only.
    """
    rows = jnp.arange(tokens.shape[0], dtype=jnp.int32)[:, None] + jnp.zeros_like(slots)
    at = (rows.reshape(-1), slots.reshape(-1))  # rows follow the slots' batch sharding
    kw = dict(attn_mask=attn_mask, overflow="drop")

    def at_slots(c):
        out = nn.apply(params, cfg, tokens, positions, cache=c, outputs_at=at, **kw)
        return out.cache, out.logits.reshape(slots.shape + (-1,))

    def whole(c):
        x = nn.embed(params, cfg, tokens)
        out = nn.run_layers(params, cfg, x, positions, cache=c, interventions=iv, **kw)
        h = jnp.take_along_axis(out.h, slots[:, :, None], axis=1)
        return out.cache, nn.unembed(params, cfg, h)

    if iv is not None:
        return whole(cache)
    return jax.lax.platform_dependent(cache, cpu=at_slots, default=whole)
