"""The last block at a few (row, position) slots: logits only where they are read.

A forward whose logits are read at ``N`` of its ``B x T`` positions (a sampler drawing
tokens at the slots a step unmasks, a prefill reading the prompt's last position) needs
every position's hidden state up to the last block, and in the last block every
position's keys and values, but its queries, attention output, output projection, MLP,
final norm and LM head only at those ``N`` slots. :func:`last_block_at` is that block;
:func:`jaxkit.nn.apply` runs it for ``outputs_at=(rows, cols)``, with RoPE's cos/sin tables
computed once for the whole forward behind a fence (``rope_tables(fence=True)``: without it
XLA:CPU evaluated them once per gathered key element, as costly as the slots saved).
"""

import jax
import jax.numpy as jnp

from jaxkit import _validate
from jaxkit.nn._attention import attend, attend_cached, rope
from jaxkit.nn._kv_rows import block_tail, kv_rows, queries, scatter_kv
from jaxkit.nn._params import guard
from jaxkit.sharding import explicit_spec, gather_sharded


def take_at(x, rows, cols=None):
    """``x[rows, cols]`` (``x[rows]`` without ``cols``) for the slot gathers.

    Under an explicit mesh the source is replicated first (a slot may read any batch
    shard's row) and the output is sharded like ``rows``.
    """
    idx = (rows,) if cols is None else (rows, cols)
    spec = explicit_spec(rows)
    if spec is None and explicit_spec(x) is None:
        return x[idx]
    lead = spec[0] if spec else None
    out = jax.P(lead, *([None] * (x.ndim - len(idx))))
    return gather_sharded(x).at[idx].get(out_sharding=out)


def last_block_at(cfg, lp, h, positions, tables, mask, win, kv, slots, rows, cols, *, layer):
    """Block ``layer`` (the last) with its outputs at the slots ``(rows[i], cols[i])`` only.

    ``h [B, T, D]`` enters the block; ``tables`` are the RoPE tables of ``positions``
    (``rope_tables``); K/V are computed at every position (and, with a
    cache ``kv = (k_buf, v_buf)``, stacked over layers or the block's own buffers of a
    per-layer cache, scattered at ``slots`` as the full block does). Slot ``i`` attends
    over row ``rows[i]``'s keys under ``mask[rows[i], cols[i]]`` (and the sliding window,
    where the block has one). Returns ``(h_out [N, D], new)``: ``new`` the updated
    ``(k_buf, v_buf)`` with a cache, else the block's own ``(K, V)`` of every position
    (``[B, T, Hkv, Dh]``, as a prefill stacks them).
    """
    b = h.shape[0]
    x, k, v = kv_rows(cfg, lp, h, positions, tables)
    new = (k, v)
    if kv is not None and kv[0].ndim == 4:  # the block's own buffers (a per-layer cache)
        k, v = scatter_kv(*kv, jnp.arange(b)[:, None], slots, k, v)
        new = (k, v)
    elif kv is not None:
        kb, vb = scatter_kv(*kv, (jnp.int32(layer), jnp.arange(b)[:, None]), slots, k, v)
        k, v, new = kb[layer], vb[layer], (kb, vb)
    q = queries(cfg, lp, take_at(x, rows, cols))  # [N, H, Dh]
    at = tuple(take_at(a, rows, cols)[:, None] for a in tables)  # [N, 1, 1, Dh/2]
    q = rope(q[:, None], None, cfg, tables=at)  # [N, 1, H, Dh]
    m = take_at(mask, rows, cols)[:, None, :]  # [N, 1, S]
    if win is not None and cfg.window_layers[layer]:
        m = m & take_at(win, rows, cols)[:, None, :]
    att = attend if kv is None else attend_cached  # a cache: read the prefix the mask sees
    o = att(q, take_at(k, rows), take_at(v, rows), m)[:, 0]
    return block_tail(cfg, lp, take_at(h, rows, cols), o)[0], new


def edit_at_slots(iv, layer: int, hs, rows, cols, base):
    """``interventions``' edit after block ``layer`` applied to its outputs at the slots.

    ``hs [N, D]``: the block's outputs at ``(rows[i], cols[i])``; ``base int[B]``: the
    physical slot of each row's query 0. The same values as the whole-sequence edit
    (``_intervene.edit``) read at the slots: an inserted latent where a slot lies in its
    row's span, then the additive edit (``[D]``, ``[B, D]`` or ``[B, T, D]``) of that slot.
    """
    if iv.insert_layer == layer and iv.latents is not None:
        idx = cols + take_at(base - iv.insert_at, rows)  # index in the span
        hit = (idx >= 0) & (idx < iv.n_insert)
        lat = take_at(iv.latents.astype(hs.dtype), rows, jnp.clip(idx, 0, iv.n_insert - 1))
        hs = jnp.where(hit[:, None], lat, hs)
    vec = iv.add.get(layer)
    if vec is not None:
        vec = vec.astype(hs.dtype)
        hs = hs + (
            vec[None] if vec.ndim == 1 else take_at(vec, rows, cols if vec.ndim == 3 else None)
        )
    return hs


def check_outputs_at(outputs_at, b: int, t: int):
    """``(rows, cols)`` as int32 ``[N]`` arrays guarded to ``[0, B)`` / ``[0, T)``.

    TypeError for anything but a pair of integer arrays of one rank-1 shape; ValueError
    (eagerly; an ``eqx.error_if`` error under ``jit``) for an index out of range.
    """
    if not isinstance(outputs_at, tuple | list) or len(outputs_at) != 2:
        raise TypeError(
            "`outputs_at` must be a pair (rows, cols) of int[N] arrays, got "
            f"{type(outputs_at).__name__}."
        )
    out = []
    for name, x, n in (("rows", outputs_at[0], b), ("cols", outputs_at[1], t)):
        x = jnp.asarray(x)
        _validate.integer(x, name=f"outputs_at {name}")
        _validate.ndim(x, 1, name=f"outputs_at {name}")
        bad = _validate.any_outside(x, 0, n - 1)
        out.append(guard(x, bad, f"`outputs_at` {name} must lie in [0, {n}).").astype(jnp.int32))
    if out[0].shape != out[1].shape:
        raise TypeError(
            "`outputs_at` rows and cols must have one shape [N], got "
            f"{out[0].shape} and {out[1].shape}."
        )
    return tuple(out)
