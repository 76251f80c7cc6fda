"""The transformer blocks: one pre-norm block, the default mask and the layer scan.

:func:`run_layers` runs blocks ``start .. stop-1`` on hidden states (a split forward);
:func:`layers_core`, its traced body, serves :func:`jaxkit.nn.apply` and the cached
decode step too. Layers run under ``lax.scan`` (unrolled for one-token cached steps under
``jit``), or one inlined block at a time with per-layer weights or caches
(``unstack_layers``); ``cfg.causal=False`` gives the bidirectional encoder. The new K/V rows are
scattered into the cache at ``length + arange(T)`` with ``mode="drop"``, so a window
written past the end (WeDLM's, ``overflow="drop"``) loses only its overflowing rows.

References:
  Liu et al., "WeDLM" (ICML 2026): logical positions and drop-mode cache writes.
"""

import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from jaxkit import _validate
from jaxkit.nn._attention import (
    attend,
    attend_cached,
    forward_tables,
    rope,
    set_rows,
    window_mask,
)
from jaxkit.nn._cache import KVCache, capacity, per_layer
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._intervene import Interventions, MLPRead, edit_at, hide_span
from jaxkit.nn._intervene import check as check_iv
from jaxkit.nn._kv_rows import block_tail, kv_rows, queries, scatter_kv
from jaxkit.nn._params import (
    check_cache,
    check_cfg,
    check_h,
    check_inputs,
    check_overflow,
    check_params,
    check_range,
    guard_length,
    layer_params,
    per_layer_params,
)


class LayersOutput(NamedTuple):
    """Output of :func:`run_layers`.

    Attributes:
      h: Hidden states ``[B, T, D]`` after block ``stop - 1``.
      cache: The cache with the new K/V rows written (``length`` NOT advanced), or
        ``None`` when no cache was given.
      hidden: ``{l: output of block l}`` for the blocks listed in ``collect``.
      reads: ``{l: MLPRead}`` for the read sites ``interventions.read_mlp``.
    """

    h: Array
    cache: KVCache | None
    hidden: dict[int, Array]
    reads: dict[int, MLPRead] = {}


# Traced cached forwards of T <= _UNROLL_T rows unroll <= _UNROLL_LAYERS blocks: weight slices
# get hoisted out of the caller's loop; same values (see docs/areas/nn.md, "Cached decoding").
_UNROLL_LAYERS, _UNROLL_T = 32, 1


def _block(cfg, lp, h, positions, mask, kv, slots, read=False, layer=None, tables=None):
    """One pre-norm block; returns (h, (k_buf, v_buf) or (k_new, v_new)[, MLPRead])."""
    # With `layer` (a traced int), `kv` is the whole stacked cache [L, B, S, ...]: only the
    # T new rows of block `layer` are scattered into it (in place under a scan carry).
    # `tables`: precomputed RoPE tables of `positions` (see `rope_tables`).
    b = h.shape[0]
    x, k, v = kv_rows(cfg, lp, h, positions, tables)
    q = rope(queries(cfg, lp, x), positions, cfg, tables=tables)
    if kv is not None:
        rows = jnp.arange(b)[:, None]
        # Scatter with mode="drop": rows whose slot is past the buffer end vanish.
        if layer is None:
            kb, vb = scatter_kv(*kv, rows, slots, k, v)
            o = attend_cached(q, kb, vb, mask)
        else:
            kb, vb = scatter_kv(*kv, (layer, rows), slots, k, v)
            at = functools.partial(jax.lax.dynamic_index_in_dim, index=layer, keepdims=False)
            o = attend_cached(q, at(kb), at(vb), mask)
        new = (kb, vb)
    else:
        o = attend(q, k, v, mask)
        new = (k, v)
    h, x, a = block_tail(cfg, lp, h, o)
    return (h, new, MLPRead(x, a)) if read else (h, new)


def _default_mask(cfg, batch, t, cache):
    i = jnp.arange(t)[:, None]
    if cache is None:
        j = jnp.arange(t)[None, :]
        m = (j <= i) if cfg.causal else jnp.ones((t, t), bool)
        return jnp.broadcast_to(m, (batch, t, t))
    s = capacity(cache)
    j = jnp.arange(s)[None, None, :]
    lim = cache.length[:, None, None] + (i[None] + 1 if cfg.causal else t)
    return j < lim


_default_mask_jit = jax.jit(_default_mask, static_argnums=(0, 1, 2))


def default_mask(
    cfg: TransformerConfig, *, batch: int, t: int, cache: KVCache | None = None
) -> Bool[Array, "B T S"]:
    """The mask :func:`run_layers` uses when ``attn_mask`` is None.

    Without a cache: causal ``j <= i`` (all True when ``cfg.causal`` is False),
    ``[B, T, T]``. With a cache of capacity S: query ``i`` of row ``b`` sees slot
    ``j`` iff ``j < length[b] + i + 1`` (``j < length[b] + T`` for an encoder),
    ``[B, T, S]``. The sliding window (``cfg.sliding_window``) is applied on top of
    this mask, per block, inside :func:`run_layers`.

    Args:
      cfg: Model configuration.
      batch: B.
      t: Query length T.
      cache: Optional cache.

    Returns:
      ``bool[B, T, S]``.

    Raises:
      TypeError: a ``cache`` whose layout does not fit ``cfg`` and ``batch`` rows, or a
        non-integer ``cache.length``.
      ValueError: a ``cache.length`` outside ``[0, S]`` (a runtime error under ``jit``).
    """
    check_cfg(cfg)
    batch = _validate.python_int(batch, name="batch", minimum=1)
    t = _validate.python_int(t, name="t", minimum=1)
    if cache is not None:  # static layout checks; the range guard runs once, here
        cache = check_cache(cache, cfg, batch, t, "drop")
        cache = guard_length(cache, capacity(cache))
    return _default_mask_jit(cfg, batch, t, cache)


def block_masks(cfg, b, t, positions, cache, attn_mask):
    """``(mask [B,T,S], window mask or None, cache slots [B,T] or None)`` of a forward."""
    mask = _default_mask(cfg, b, t, cache) if attn_mask is None else attn_mask
    slots = None if cache is None else (cache.length[:, None] + jnp.arange(t)[None, :])
    if cfg.sliding_window is None:
        win = None
    elif cache is None:
        win = window_mask(positions, positions, cfg.sliding_window)
    else:
        # Committed slot j holds logical position j; the new rows hold `positions`.
        s = capacity(cache)
        k_pos = jnp.zeros((b, 1), positions.dtype) + jnp.arange(s, dtype=positions.dtype)[None, :]
        k_pos = set_rows(k_pos, jnp.arange(b)[:, None], slots, positions)
        win = window_mask(positions, k_pos, cfg.sliding_window)
    return mask, win, slots


def layers_core(
    params,
    cfg,
    h,
    positions,
    cache,
    attn_mask,
    *,
    start,
    stop,
    collect,
    emit_kv,
    iv=None,
    un=True,
    tables=None,
):
    """The traced body of :func:`run_layers` (inputs already checked).

    With ``emit_kv`` (no cache) the second output is the stacked new ``(K, V)``.
    ``iv``: checked :class:`Interventions` or None (then the plain forward).
    ``un``: unroll a one-token cached layer scan (``_UNROLL_LAYERS``); values unchanged.
    ``tables``: precomputed RoPE tables of ``positions`` (``rope_tables``); same values.
    """
    b, t, _ = h.shape
    h = h.astype(params["embed"].dtype)
    mask, win, slots = block_masks(cfg, b, t, positions, cache, attn_mask)
    base = jnp.zeros((b,), jnp.int32) if cache is None else cache.length.astype(jnp.int32)
    flags = jnp.asarray(cfg.window_layers, bool)
    low = None  # blocks <= insert_layer: the inserted span is hidden
    if iv is not None and iv.insert_layer is not None:
        low = hide_span(iv, mask, base)

    def layer_mask(layer, flag):
        # boolean algebra, not jnp.where: a select needs equal shardings, and under an
        # Explicit mesh `low` / `win` are batch-sharded while the default mask is not
        m = mask if low is None else mask & (low | (layer > iv.insert_layer))  # low <= mask
        return m if win is None else m & (win | ~flag)

    # Edits act inside the scan, chosen by the traced layer index (exact: the edited or
    # the unedited value). Segments are cut only where hidden states
    # are collected or a read site's block must run alone.
    reads = () if iv is None else iv.read_mlp
    sites = () if iv is None else tuple(sorted(set(iv.add) | {iv.insert_layer} - {None}))
    sites = tuple(s for s in sites if start <= s < stop)  # the others never fire here
    cuts = set(collect) | set(reads) | {r - 1 for r in reads if r > 0}
    bounds = [start] + [c + 1 for c in sorted(cuts) if start <= c and c + 1 < stop] + [stop]
    if (
        tables is None
        and cache is None
        and any(hi - lo == 1 for lo, hi in itertools.pairwise(bounds))
    ):
        # a block that runs alone is inlined (no loop to hoist its RoPE tables out of):
        # compute them once per forward, fenced on CPU (see `forward_tables`); cached
        # forwards (DLMR's one-block decode steps and chunks) measured no gain: unchanged
        tables = forward_tables(positions, cfg, h.dtype)

    per_cache = cache is not None and per_layer(cache)

    def step(x, kv, layer, lp, flag, read=False):
        # `layer` given: `kv` is the stacked cache; a per-layer cache passes the block's own
        lay = None if kv is None or per_cache else layer
        m = layer_mask(layer, flag)
        out = _block(cfg, lp, x, positions, m, kv, slots, read=read, layer=lay, tables=tables)
        x = out[0] if not sites else edit_at(iv, sites, layer, out[0], base, cfg.n_layers)
        return (x, *out[1:])

    per_block = per_layer_params(params)  # see `unstack_layers`
    hidden: dict[int, Array] = {}
    mlp: dict[int, MLPRead] = {}
    ks, vs = [], []
    kc = None if cache is None else (cache.k, cache.v)  # carried whole, written in place
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if hi <= lo:
            continue
        if lo in reads or per_block or per_cache:
            # a read site (a one-block segment returning its MLP inputs), or per-layer
            # storage: each block inlined on its own weights / K-V buffers, no slices to copy
            for layer in range(lo, hi):
                lp, read = layer_params(params, layer), layer in reads
                kv = (kc[0][layer], kc[1][layer]) if per_cache else kc
                out = step(h, kv, jnp.int32(layer), lp, flags[layer], read=read)
                h = out[0]
                if read:
                    mlp[layer] = out[2]
                if per_cache:  # the block's new buffers replace its entries
                    kc = tuple(
                        (*c[:layer], n, *c[layer + 1 :]) for c, n in zip(kc, out[1], strict=True)
                    )
                elif cache is not None:
                    kc = out[1]
                elif emit_kv:
                    ks.append(out[1][0][None])
                    vs.append(out[1][1][None])
        elif cache is None:
            seg = jax.tree.map(lambda a, lo=lo, hi=hi: a[lo:hi], params["layers"])
            xs = (seg, flags[lo:hi])
            if iv is not None:  # the traced layer index picks the edits and the mask
                xs = (*xs, jnp.arange(lo, hi, dtype=jnp.int32))

            def body(carry, xs):
                lp, flag = xs[:2]
                layer = xs[2] if len(xs) > 2 else None
                out, kv = step(carry, None, layer, lp, flag)
                return out, (kv if emit_kv else None)

            h, kv = jax.lax.scan(body, h, xs)
            if emit_kv:
                ks.append(kv[0])
                vs.append(kv[1])
        else:

            def body(carry, layer):
                x, kv = carry
                lp = jax.tree.map(
                    lambda a: jax.lax.dynamic_index_in_dim(a, layer, keepdims=False),
                    params["layers"],
                )
                return step(x, kv, layer, lp, flags[layer]), None

            unroll = un and t <= _UNROLL_T and hi - lo <= _UNROLL_LAYERS
            ix = jnp.arange(lo, hi, dtype=jnp.int32)
            (h, kc), _ = jax.lax.scan(body, (h, kc), ix, unroll=unroll)
        if hi - 1 in collect:
            hidden[hi - 1] = h
    if cache is not None:
        cache = cache._replace(k=kc[0], v=kc[1])
    if emit_kv:
        kv = (jnp.concatenate(ks, axis=0), jnp.concatenate(vs, axis=0))
        return LayersOutput(h, kv, hidden, mlp)
    return LayersOutput(h, cache, hidden, mlp)


_run_layers_jit = jax.jit(
    functools.partial(layers_core, emit_kv=False),
    static_argnames=("cfg", "start", "stop", "collect"),
)


def run_layers(
    params: PyTree,
    cfg: TransformerConfig,
    h: Float[ArrayLike, "B T D"],
    positions: Int[ArrayLike, "B T"],
    *,
    start: int = 0,
    stop: int | None = None,
    cache: KVCache | None = None,
    attn_mask: Bool[ArrayLike, "B T S"] | None = None,
    collect: tuple[int, ...] | list[int] = (),
    overflow: str = "error",
    interventions: Interventions | None = None,
) -> LayersOutput:
    """Run blocks ``start .. stop-1`` on hidden states ``h`` (a split forward).

    With ``cache``, the T new K/V rows of each block are scattered to physical
    slots ``cache.length[b] + arange(T)`` and attention runs over the whole buffer
    under the mask; ``cache.length`` is not advanced (see :func:`jaxkit.nn.commit`).

    Args:
      params: Model parameters.
      cfg: Model configuration.
      h: Hidden states ``[B, T, D]`` entering block ``start``.
      positions: Logical RoPE positions ``int[B, T]`` (independent of the
        physical order; any integers: RoPE and the window are relative).
      start: First block to run.
      stop: One past the last block (default ``cfg.n_layers``).
      cache: Optional :class:`KVCache` (its layers ``start..stop-1`` are used).
      attn_mask: Optional ``bool[B, T, S]`` (S = T without cache, capacity with
        one), True = may attend; overrides :func:`default_mask`.
      collect: Block indices in ``[start, stop)`` whose outputs are returned.
      overflow: New rows past the cache capacity: ``"error"`` raises, ``"drop"``
        drops them (their scatter has ``mode="drop"``).
      interventions: Optional :class:`~jaxkit.nn.Interventions`; only its sites in
        ``[start, stop)`` act (pass the same object to both halves of a split).

    Returns:
      :class:`LayersOutput` ``(h, cache, hidden, reads)``.

    Raises:
      TypeError: wrong types or shapes (an intervention vector of the wrong shape).
      ValueError: bad ``start``/``stop``/``collect``, an intervention layer outside
        ``[0, n_layers)``, an overflow with ``overflow="error"`` (a ``cache.length``
        outside ``[0, S - T]``: a negative one too).
    """
    check_cfg(cfg)
    check_params(params, cfg)
    check_overflow(overflow)
    stop, collect = check_range(start, stop, collect, cfg)
    h = check_h(h, cfg, "h")
    b, t, _ = h.shape
    if positions is None:
        raise TypeError("`positions` must be an int[B, T] array, got None.")
    positions, cache, mask = check_inputs(cfg, b, t, positions, cache, attn_mask, overflow)
    iv = check_iv(interventions, cfg, b, t)
    return _run_layers_jit(
        params, cfg, h, positions, cache, mask, start=start, stop=stop, collect=collect, iv=iv
    )
