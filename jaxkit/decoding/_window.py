"""The window step's model forward: the 2W window rows, logits at the W slots read."""

import jax
import jax.numpy as jnp

from jaxkit import nn


def window_forward(params, cfg, tokens, positions, cache, slots, iv):
    """``(cache, logits [B, W, V])``: the 2W rows through the model, logits at ``slots``.

    ``tokens``, ``positions``: ``[B, 2W]`` in physical (topological) order; ``slots``
    ``int[B, W]``: the physical rows whose logits are read. The cache gets all 2W rows'
    K/V (uncommitted). On CPU the last block's query, attention, MLP, final norm and head
    run at the slots alone (``nn.apply``'s ``outputs_at``): the same logits to rounding
    (same tokens on every bench input), ~11 % less CPU per call on clean text (wave 27).
    Other platforms keep the whole window (not measured there: a step of a few small
    kernels, which the slot form's gathers add to), as do calls with interventions
    (``iv``), which ``outputs_at`` does not take; the norm and the head then run on the
    gathered slots only.
    """
    rows = jnp.arange(tokens.shape[0], dtype=jnp.int32)[:, None] + jnp.zeros_like(slots)
    at = (rows.reshape(-1), slots.reshape(-1))  # rows follow the slots' batch sharding

    def at_slots(c):
        out = nn.apply(params, cfg, tokens, positions, cache=c, overflow="drop", outputs_at=at)
        return out.cache, out.logits.reshape(slots.shape + (-1,))

    def whole(c):
        x = nn.embed(params, cfg, tokens)
        out = nn.run_layers(params, cfg, x, positions, cache=c, overflow="drop", interventions=iv)
        h = jnp.take_along_axis(out.h, slots[:, :, None], axis=1)
        return out.cache, nn.unembed(params, cfg, h)

    if iv is not None:
        return whole(cache)
    return jax.lax.platform_dependent(cache, cpu=at_slots, default=whole)
