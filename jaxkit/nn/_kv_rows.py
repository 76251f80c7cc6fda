"""A block's K/V projection alone: the cache rows a block would write, without its outputs.

A query row that no later computation reads still leaves its keys and values in the
cache. :func:`write_kv` computes exactly those rows for one block (its input norm, K/V
projections, K norm and RoPE, as :func:`jaxkit.nn.run_layers` does) and scatters them to
the slots ``length + arange(T)``, skipping the queries, the attention, the output
projection and the MLP: what an inserted span needs at the last block, where only the
span's K/V are ever read.
"""

import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float, Int, PyTree

from jaxkit import _validate
from jaxkit.nn._attention import (
    dense,
    lead,
    merge_last,
    rms_norm,
    rope,
    set_rows,
    split_last,
)
from jaxkit.nn._cache import KVCache, per_layer
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._params import (
    check_cfg,
    check_h,
    check_inputs,
    check_overflow,
    check_params,
    layer_params,
)


def kv_rows(cfg, lp, h, positions, tables=None):
    """A block's input norm and new K/V rows: ``(x, k, v)``, the K/V ``[B, T, Hkv, Dh]``.

    ``x`` is the normed input (the block's queries are projected from it); ``k`` has its
    bias, K norm and RoPE at ``positions`` (``tables``: precomputed, see ``rope_tables``),
    ``v`` its bias. Shared by the block itself
    (:func:`jaxkit.nn.run_layers`) and :func:`write_kv`, so both write the same rows.
    """
    x = rms_norm(h, lp["attn_norm"], cfg.norm_eps)
    k, v = dense(x, lp["wk"]), dense(x, lp["wv"])
    if cfg.qkv_bias:
        k = k + lead(lp["bk"].astype(k.dtype), 3)
        v = v + lead(lp["bv"].astype(v.dtype), 3)
    k = split_last(k, (cfg.n_kv_heads, cfg.head_dim))
    v = split_last(v, (cfg.n_kv_heads, cfg.head_dim))
    if cfg.qk_norm:
        k = rms_norm(k, lp["k_norm"], cfg.norm_eps)
    return x, rope(k, positions, cfg, tables=tables), v


def queries(cfg, lp, x):
    """A block's queries ``[..., H, Dh]`` from its normed input ``x [..., D]``, before RoPE.

    Shared by the block (``_blocks``) and its slot form (``_at``): the bias and the Q norm.
    """
    q = dense(x, lp["wq"])
    if cfg.qkv_bias:
        q = q + lead(lp["bq"].astype(q.dtype), q.ndim)
    q = split_last(q, (cfg.n_heads, cfg.head_dim))
    if cfg.qk_norm:
        q = rms_norm(q, lp["q_norm"], cfg.norm_eps)
    return q


def block_tail(cfg, lp, h, o):
    """A block's residual after attention ``o [..., H, Dh]``: ``(h_out, mlp_in, mlp_act)``.

    The output projection, the MLP's norm and its SiLU-gated MLP; the MLP's normed input
    and activation are returned for the read sites. Shared by the block and its slot form.
    """
    h = h + dense(merge_last(o, 2), lp["wo"])
    x = rms_norm(h, lp["mlp_norm"], cfg.norm_eps)
    a = jax.nn.silu(dense(x, lp["w_gate"])) * dense(x, lp["w_up"])
    return h + dense(a, lp["w_down"]), x, a


def scatter_kv(kb, vb, rows, slots, k, v):
    """``(kb, vb)`` with ``k``, ``v`` scattered at ``[*rows, slots]`` in the buffers' dtype.

    ``mode="drop"``: rows past the buffer end vanish; explicit shardings are kept.
    """
    kb = set_rows(kb, rows, slots, k.astype(kb.dtype))
    return kb, set_rows(vb, rows, slots, v.astype(vb.dtype))


def write_kv_traced(params, cfg, h, positions, cache, *, layer):
    """The traced body of :func:`write_kv` (inputs already checked)."""
    b, t, _ = h.shape
    lp = layer_params(params, layer)
    _, k, v = kv_rows(cfg, lp, h.astype(params["embed"].dtype), positions)
    slots = cache.length[:, None] + jnp.arange(t)[None, :]
    if per_layer(cache):  # the block's own buffers
        kb, vb = scatter_kv(cache.k[layer], cache.v[layer], jnp.arange(b)[:, None], slots, k, v)
        put = lambda bufs, new: (*bufs[:layer], new, *bufs[layer + 1 :])  # noqa: E731
        return cache._replace(k=put(cache.k, kb), v=put(cache.v, vb))
    rows = (jnp.int32(layer), jnp.arange(b)[:, None])
    kb, vb = scatter_kv(cache.k, cache.v, rows, slots, k, v)
    return cache._replace(k=kb, v=vb)


_write_kv_jit = jax.jit(write_kv_traced, static_argnames=("cfg", "layer"))


def write_kv(
    params: PyTree,
    cfg: TransformerConfig,
    h: Float[ArrayLike, "B T D"],
    positions: Int[ArrayLike, "B T"],
    *,
    cache: KVCache,
    layer: int,
    overflow: str = "error",
) -> KVCache:
    """Write block ``layer``'s K/V rows for ``h`` into ``cache``, and nothing else.

    The rows equal those :func:`jaxkit.nn.run_layers` writes for block ``layer`` given
    the same hidden states entering it (norm, projections, K norm, RoPE at
    ``positions``), at slots ``cache.length[b] + arange(T)``; no attention or MLP runs
    and no hidden state is returned. ``cache.length`` is not advanced.

    Args:
      params: Model parameters.
      cfg: Model configuration.
      h: Hidden states ``[B, T, D]`` entering block ``layer``.
      positions: Logical RoPE positions ``int[B, T]`` (any integers: RoPE is relative).
      cache: The :class:`KVCache` to write into.
      layer: The block (static, in ``[0, n_layers)``).
      overflow: Rows past the capacity: ``"error"`` raises, ``"drop"`` drops them.

    Returns:
      The cache with block ``layer``'s new rows written (``length`` unchanged).

    Raises:
      TypeError: wrong types or shapes.
      ValueError: ``layer`` out of range, an overflow with ``overflow="error"`` (a
        ``cache.length`` outside ``[0, S - T]``: a negative one too).
    """
    check_cfg(cfg)
    check_params(params, cfg)
    check_overflow(overflow)
    layer = _validate.python_int(layer, name="layer", minimum=0)
    if layer >= cfg.n_layers:
        raise ValueError(f"`layer` must lie in [0, {cfg.n_layers}), got {layer}.")
    h = check_h(h, cfg, "h")
    b, t, _ = h.shape
    if positions is None or cache is None:
        raise TypeError("`positions` (int[B, T]) and `cache` (a KVCache) are required.")
    positions, cache, _ = check_inputs(cfg, b, t, positions, cache, None, overflow)
    return _write_kv_jit(params, cfg, h, positions, cache, layer=layer)
