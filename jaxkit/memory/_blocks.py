"""DLMR's frozen backbone cut into one-block models: blocks, caches, their forward.

Private to :mod:`jaxkit.memory._generate`. Each one-block model is a config with
``n_layers=1``, so the user's edit after block ``g`` (``dlmr_generate(interventions=...)``)
is re-based to that model's block 0 (:func:`_block_edit`).
"""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxkit import nn


class _Blocks(NamedTuple):
    """The frozen backbone cut into stand-alone one-block models, each with its own cache.

    Each block is an ``nn`` parameter dict in per-layer storage (``layers`` a one-block
    tuple, ``nn.unstack_layers``) with its own config and its own per-layer ``KVCache``
    (``k``, ``v`` one-buffer tuples), so a decode step runs one whole-model ``run_layers``
    per block. No per-step slicing of the weights or the cache: ``start``/``stop`` on one
    stack copy the weights and the cache per step, and a stacked cache costs a copy of
    each block's K/V slice per step (with one-block caches the decode loop was ~30 %
    cheaper on CPU; per-layer one-block caches, wave 29, another ~3-4 % pinned).
    """

    lo: tuple  # ((params, cfg), ...) blocks <= l
    hi: tuple  # ((params, cfg), ...) blocks > l
    compact: bool  # the lower blocks' caches hold text slots only (:func:`_compact`)
    lo_iv: tuple  # per block <= l: the user's edit of that one-block model (or None)
    hi_iv: tuple  # per block > l: the same


def _blocks(lm_params, lm_cfg, layer, iv=None) -> _Blocks:
    """The one-block models of ``lm_params`` and the user's edits ``iv`` (or None) per block."""
    per_layer = isinstance(lm_params["layers"], (tuple, list))  # `nn.unstack_layers`

    def part(g):
        layers = lm_params["layers"]
        one = layers[g] if per_layer else jax.tree.map(lambda x: x[g], layers)
        p = {**lm_params, "layers": (one,)}  # per-layer storage: no slice of a stack
        # Qwen2's window rule `block >= max_window_layers`, in the one-block numbering
        mw = 0 if g >= lm_cfg.max_window_layers else 1
        return p, dataclasses.replace(lm_cfg, n_layers=1, max_window_layers=mw)

    parts = tuple(part(g) for g in range(lm_cfg.n_layers))
    ivs = tuple(_block_edit(iv, g) for g in range(lm_cfg.n_layers))
    cut = layer + 1
    return _Blocks(parts[:cut], parts[cut:], _compact(lm_cfg), ivs[:cut], ivs[cut:])


def _block_edit(iv, g):
    """The edit after block ``g`` of ``iv`` as its one-block model's (block 0), or None.

    ``run_layers`` on a one-block model acts only on sites in ``[0, 1)``: the whole
    model's layer index ``g`` would never fire there.
    """
    if iv is None or g not in iv.add:
        return None
    return nn.Interventions({0: iv.add[g]})


def _edit_memory(hv, mem):
    """The memory rows as they enter block ``l + 1``: nn's order at block ``l``.

    The inserted latents replace the stream, then block ``l``'s edit is added (in the
    stream's dtype, ``[D]`` or ``[B, D]`` at every row, as ``nn``'s edit), so memory rows
    get the block-``l`` edit like the text rows.
    """
    h = mem.astype(hv.hi[0][0]["embed"].dtype)
    iv = hv.lo_iv[-1]
    return h if iv is None else iv.add_to(0, h)


def _cut_cache(cache, cut, s_lo, s):
    """The prompt's cache (``T`` slots) as one cache per block, zero-padded to its capacity.

    Blocks ``< cut`` get ``s_lo`` slots, the others ``s``.
    """
    cache = nn.unstack_layers(cache)

    def one(g, size):
        pad = ((0, 0), (0, size - cache.capacity), (0, 0), (0, 0))
        k, v = (jnp.pad(x[g], pad) for x in (cache.k, cache.v))
        return nn.KVCache((k,), (v,), cache.length)  # a per-layer one-block cache

    return tuple(one(g, s_lo) for g in range(cut)), tuple(
        one(g, s) for g in range(cut, len(cache.k))
    )


def _commit(caches, n):
    return tuple(nn.commit(c, n) for c in caches)


def _compact(lm_cfg) -> bool:
    """Whether the lower half keeps text slots only (no slot for memory tokens).

    Blocks ``<= l`` never read a memory slot, so their cache needs none, and every
    step's attention there reads ``P + N`` slots instead of ``P + N + n_max k``. Exact
    when no sliding window applies: keys carry their RoPE position, the mask is
    explicit. With a window, ``nn`` reads a committed slot's index as its logical
    position, so the lower half stays slot-aligned (memory slots hidden by the mask).
    """
    return lm_cfg.sliding_window is None


def _run(parts, caches, h, pos, mask, ivs):
    """``run_layers`` through the one-block models: ``(h, caches)`` (uncommitted).

    ``ivs``: each block's re-based edit (:func:`_block_edit`) or None.
    """
    out = []
    for (p, c), cache, iv in zip(parts, caches, ivs, strict=True):
        r = nn.run_layers(
            p, c, h, pos, cache=cache, attn_mask=mask, overflow="drop", interventions=iv
        )
        h = r.h
        out.append(r.cache)
    return h, tuple(out)
