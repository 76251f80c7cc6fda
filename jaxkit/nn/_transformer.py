"""A functional decoder-only transformer with logical RoPE positions and a KV cache.

Llama/Qwen2 architecture: RMSNorm pre-norm blocks, rotary position embeddings
(rotate-half convention, angles in f32) on *logical* positions passed explicitly,
grouped-query attention as a dense masked softmax accumulated in f32, SwiGLU MLP,
optional qk-norm and q/k/v biases. Parameters are a plain dict pytree with the
per-layer weights stacked on a leading ``n_layers`` axis; layers run under
``lax.scan``. ``cfg.causal=False`` gives the bidirectional encoder variant.

References:
  Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", 2023.
  Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021.
  Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models", 2023.
  Liu et al., "WeDLM" (ICML 2026): logical positions and drop-mode cache writes.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from jaxkit import _validate
from jaxkit.nn._cache import KVCache, commit
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._init import normal_pieces


class LMOutput(NamedTuple):
    """Output of :func:`apply`.

    Attributes:
      logits: ``[B, T, V]`` in the parameters' dtype.
      cache: The cache with the T new K/V rows written (``length`` NOT advanced),
        or ``None`` when no cache was given.
      hidden: Hidden states ``[B, T, D]`` after each layer listed in ``collect``
        (key ``l`` = output of block ``l``, 0-based).
    """

    logits: Array
    cache: KVCache | None
    hidden: dict[int, Array]


# ----------------------------------------------------------------------------- helpers


def _acc(dtype) -> jnp.dtype:
    """Accumulation dtype: f64 for f64 inputs, f32 otherwise."""
    return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


def _take_rows(table: Array, idx: Array) -> Array:
    """``table[idx]`` (clipped), with the output sharded like ``idx`` under an explicit mesh."""
    sh = getattr(jax.typeof(idx), "sharding", None)
    mesh = getattr(sh, "mesh", None)
    explicit = mesh is not None and any(
        t == jax.sharding.AxisType.Explicit for t in getattr(mesh, "axis_types", ())
    )
    if not explicit:
        return jnp.take(table, idx, axis=0, mode="clip")
    spec = jax.sharding.PartitionSpec(*sh.spec, *([None] * (table.ndim - 1)))
    return table.at[idx].get(out_sharding=spec, mode="clip")


def _set_rows(buf: Array, rows: Array, slots: Array, upd: Array) -> Array:
    """``buf.at[rows, slots].set(upd, mode="drop")``, keeping ``buf``'s explicit sharding."""
    sh = getattr(jax.typeof(buf), "sharding", None)
    mesh = getattr(sh, "mesh", None)
    explicit = mesh is not None and any(
        t == jax.sharding.AxisType.Explicit for t in getattr(mesh, "axis_types", ())
    )
    if not explicit:
        return buf.at[rows, slots].set(upd, mode="drop")
    return buf.at[rows, slots].set(upd, mode="drop", out_sharding=sh.spec)


def _check_cfg(cfg) -> None:
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")


def _dense(x: Array, w: Array) -> Array:
    """``x @ w`` over the last axis, accumulated in f32 (f64), cast to ``x.dtype``."""
    acc = _acc(x.dtype)
    return jnp.matmul(x, w.astype(x.dtype), preferred_element_type=acc).astype(x.dtype)


def _lead(w: Array, nd: int) -> Array:
    """Reshape ``w`` to rank ``nd`` by adding leading unit axes (no rank promotion)."""
    return w.reshape((1,) * (nd - w.ndim) + w.shape)


def _rms_norm(x: Array, w: Array, eps: float) -> Array:
    acc = _acc(x.dtype)
    xf = x.astype(acc)
    var = jnp.mean(xf * xf, axis=-1, keepdims=True)
    y = xf * jax.lax.rsqrt(var + jnp.asarray(eps, acc))
    return (y * _lead(w.astype(acc), y.ndim)).astype(x.dtype)


def _rope(x: Array, positions: Array, theta: float) -> Array:
    """Rotate-half RoPE on ``x [B,T,h,Dh]`` at logical ``positions [B,T]`` (angles f32)."""
    dh = x.shape[-1]
    ang_dt = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    inv_freq = 1.0 / (theta ** (jnp.arange(0, dh, 2, dtype=ang_dt) / dh))
    ang = positions.astype(ang_dt)[..., None] * inv_freq[None, None, :]  # [B,T,Dh/2]
    cos = jnp.cos(ang)[:, :, None, :]
    sin = jnp.sin(ang)[:, :, None, :]
    xf = x.astype(ang_dt)
    x1, x2 = xf[..., : dh // 2], xf[..., dh // 2 :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def attention(
    q: Float[ArrayLike, "B T H Dh"],
    k: Float[ArrayLike, "B S Hkv Dh"],
    v: Float[ArrayLike, "B S Hkv Dh"],
    mask: Bool[ArrayLike, "B T S"],
) -> Float[Array, "B T H Dh"]:
    """Grouped-query dense masked softmax attention, accumulated in f32 (f64).

    Query head ``h`` uses key/value head ``h // (H // Hkv)``. Fully masked query
    rows give a uniform average instead of NaN.

    Args:
      q: Queries ``[B, T, H, Dh]``.
      k: Keys ``[B, S, Hkv, Dh]``.
      v: Values ``[B, S, Hkv, Dh]``.
      mask: ``bool[B, T, S]``, True where query t may attend to key s.

    Returns:
      ``[B, T, H, Dh]`` in the dtype of ``q``.
    """
    q, k, v, mask = (jnp.asarray(a) for a in (q, k, v, mask))
    b, t, h, dh = q.shape
    hkv = k.shape[2]
    g = h // hkv
    acc = _acc(q.dtype)
    qg = q.reshape(b, t, hkv, g, dh)
    s = jnp.einsum(
        "btkgd,bskd->bkgts", qg, k.astype(q.dtype), preferred_element_type=acc
    ) / jnp.asarray(math.sqrt(dh), acc)
    s = jnp.where(mask[:, None, None, :, :], s, jnp.asarray(-1e30, acc))
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bkgts,bskd->btkgd", p, v.astype(acc), preferred_element_type=acc)
    return o.reshape(b, t, h, dh).astype(q.dtype)


# ----------------------------------------------------------------------------- params


def init_params(cfg: TransformerConfig, *, key: jax.Array, dtype=jnp.float32) -> dict:
    """Random parameters (normal, std ``1/sqrt(fan_in)``; norms 1; biases 0).

    Args:
      cfg: Model configuration.
      key: A typed key from ``jax.random.key``.
      dtype: Floating dtype of every parameter.

    Returns:
      ``{"embed": [V,D], "layers": {...stacked [L,...]}, "final_norm": [D],
      "lm_head": [D,V]}`` (no ``lm_head`` when ``cfg.tie_embeddings``); weights
      are ``[in, out]``.
    """
    _check_cfg(cfg)
    _validate.is_key(key)
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {jnp.dtype(dtype)}.")
    L, D, H, Hkv, Dh, F, V = (
        cfg.n_layers,
        cfg.d_model,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.mlp_dim,
        cfg.vocab_size,
    )
    wq, wk, wv, wo, wg, wu, wd, emb, head = normal_pieces(
        key,
        [
            ((L, D, H * Dh), D),
            ((L, D, Hkv * Dh), D),
            ((L, D, Hkv * Dh), D),
            ((L, H * Dh, D), H * Dh),
            ((L, D, F), D),
            ((L, D, F), D),
            ((L, F, D), F),
            ((V, D), 1.0),
            ((D, V) if not cfg.tie_embeddings else (0,), D),
        ],
        dtype,
    )
    layers = {
        "attn_norm": jnp.ones((L, D), dtype),
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "mlp_norm": jnp.ones((L, D), dtype),
        "w_gate": wg,
        "w_up": wu,
        "w_down": wd,
    }
    if cfg.qkv_bias:
        layers["bq"] = jnp.zeros((L, H * Dh), dtype)
        layers["bk"] = jnp.zeros((L, Hkv * Dh), dtype)
        layers["bv"] = jnp.zeros((L, Hkv * Dh), dtype)
    if cfg.qk_norm:
        layers["q_norm"] = jnp.ones((L, Dh), dtype)
        layers["k_norm"] = jnp.ones((L, Dh), dtype)
    params = {"embed": emb, "layers": layers, "final_norm": jnp.ones((D,), dtype)}
    if not cfg.tie_embeddings:
        params["lm_head"] = head
    return params


def _check_params(params, cfg) -> None:
    if not isinstance(params, dict) or "embed" not in params or "layers" not in params:
        raise TypeError(
            "`params` must be the dict returned by `init_params` "
            "(keys 'embed', 'layers', 'final_norm'[, 'lm_head'])."
        )
    e = params["embed"]
    if tuple(jnp.shape(e)) != (cfg.vocab_size, cfg.d_model):
        raise TypeError(
            f"`params['embed']` must have shape ({cfg.vocab_size}, "
            f"{cfg.d_model}), got shape {tuple(jnp.shape(e))}."
        )
    nl = jnp.shape(params["layers"]["wq"])[0]
    if nl != cfg.n_layers:
        raise TypeError(f"`params['layers']` must stack {cfg.n_layers} layers, got {nl}.")


# ----------------------------------------------------------------------------- forward


def embed(
    params: PyTree, cfg: TransformerConfig, tokens: Int[ArrayLike, "B T"]
) -> Float[Array, "B T D"]:
    """Token embeddings ``params["embed"][tokens]`` (``[B, T, D]``).

    Args:
      params: Model parameters.
      cfg: Model configuration.
      tokens: ``int[B, T]`` token ids in ``[0, V)``.

    Returns:
      ``[B, T, D]`` in the parameters' dtype.
    """
    _check_cfg(cfg)
    _check_params(params, cfg)
    tokens = jnp.asarray(tokens)
    _validate.integer(tokens, name="tokens")
    _validate.ndim(tokens, 2, name="tokens")
    return _take_rows(params["embed"], tokens)


def unembed(
    params: PyTree, cfg: TransformerConfig, h: Float[ArrayLike, "B T D"]
) -> Float[Array, "B T V"]:
    """Final RMSNorm then the LM head (``embed.T`` when embeddings are tied).

    Args:
      params: Model parameters.
      cfg: Model configuration.
      h: Hidden states ``[B, T, D]``.

    Returns:
      Logits ``[B, T, V]`` in the dtype of ``h``.
    """
    _check_cfg(cfg)
    _check_params(params, cfg)
    h = jnp.asarray(h)
    _validate.floating(h, name="h")
    _validate.ndim(h, 3, name="h")
    h = _rms_norm(h, params["final_norm"], cfg.norm_eps)
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    return _dense(h, head)


def _block(
    cfg: TransformerConfig,
    lp: dict,
    h: Array,
    positions: Array,
    mask: Array,
    kv: tuple[Array, Array] | None,
    slots: Array | None,
):
    """One pre-norm block; returns (h, (k_buf, v_buf) or (k_new, v_new))."""
    b, t, _ = h.shape
    H, Hkv, Dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    x = _rms_norm(h, lp["attn_norm"], cfg.norm_eps)
    q, k, v = _dense(x, lp["wq"]), _dense(x, lp["wk"]), _dense(x, lp["wv"])
    if cfg.qkv_bias:
        q = q + _lead(lp["bq"].astype(q.dtype), 3)
        k = k + _lead(lp["bk"].astype(k.dtype), 3)
        v = v + _lead(lp["bv"].astype(v.dtype), 3)
    q = q.reshape(b, t, H, Dh)
    k = k.reshape(b, t, Hkv, Dh)
    v = v.reshape(b, t, Hkv, Dh)
    if cfg.qk_norm:
        q = _rms_norm(q, lp["q_norm"], cfg.norm_eps)
        k = _rms_norm(k, lp["k_norm"], cfg.norm_eps)
    q = _rope(q, positions, cfg.rope_theta)
    k = _rope(k, positions, cfg.rope_theta)
    if kv is not None:
        kb, vb = kv
        rows = jnp.arange(b)[:, None]
        # Scatter with mode="drop": rows whose slot is past the buffer end vanish.
        kb = _set_rows(kb, rows, slots, k.astype(kb.dtype))
        vb = _set_rows(vb, rows, slots, v.astype(vb.dtype))
        o = attention(q, kb, vb, mask)
        new = (kb, vb)
    else:
        o = attention(q, k, v, mask)
        new = (k, v)
    h = h + _dense(o.reshape(b, t, H * Dh), lp["wo"])
    x = _rms_norm(h, lp["mlp_norm"], cfg.norm_eps)
    gate = _dense(x, lp["w_gate"])
    up = _dense(x, lp["w_up"])
    h = h + _dense(jax.nn.silu(gate) * up, lp["w_down"])
    return h, new


def default_mask(
    cfg: TransformerConfig, *, batch: int, t: int, cache: KVCache | None = None
) -> Bool[Array, "B T S"]:
    """The mask :func:`run_layers` uses when ``attn_mask`` is None.

    Without a cache: causal ``j <= i`` (all True when ``cfg.causal`` is False),
    ``[B, T, T]``. With a cache of capacity S: query ``i`` of row ``b`` sees slot
    ``j`` iff ``j < length[b] + i + 1`` (``j < length[b] + T`` for an encoder),
    ``[B, T, S]``.

    Args:
      cfg: Model configuration.
      batch: B.
      t: Query length T.
      cache: Optional cache.

    Returns:
      ``bool[B, T, S]``.
    """
    _check_cfg(cfg)
    i = jnp.arange(t)[:, None]
    if cache is None:
        j = jnp.arange(t)[None, :]
        m = (j <= i) if cfg.causal else jnp.ones((t, t), bool)
        return jnp.broadcast_to(m, (batch, t, t))
    s = cache.k.shape[2]
    j = jnp.arange(s)[None, None, :]
    lim = cache.length[:, None, None] + (i[None] + 1 if cfg.causal else t)
    return j < lim


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
) -> tuple[Array, KVCache | None, dict[int, Array]]:
    """Run blocks ``start .. stop-1`` on hidden states ``h`` (a split forward).

    With ``cache``, the T new K/V rows of each block are scattered to physical
    slots ``cache.length[b] + arange(T)`` with ``mode="drop"`` (rows past the
    capacity are dropped) and attention runs over the whole buffer under the mask;
    ``cache.length`` is not advanced (see :func:`jaxkit.nn.commit`).

    Args:
      params: Model parameters.
      cfg: Model configuration.
      h: Hidden states ``[B, T, D]`` entering block ``start``.
      positions: Logical RoPE positions ``int[B, T]`` (independent of the
        physical order).
      start: First block to run.
      stop: One past the last block (default ``cfg.n_layers``).
      cache: Optional :class:`KVCache` (its layers ``start..stop-1`` are used).
      attn_mask: Optional ``bool[B, T, S]`` (S = T without cache, capacity with
        one), True = may attend; overrides :func:`default_mask`.
      collect: Block indices in ``[start, stop)`` whose outputs are returned.

    Returns:
      ``(h, cache, hidden)``: hidden states after block ``stop-1``, the cache with
      the new rows written (or None), and ``{l: output of block l}``.
    """
    return _run_layers(
        params,
        cfg,
        h,
        positions,
        start=start,
        stop=stop,
        cache=cache,
        attn_mask=attn_mask,
        collect=collect,
    )


def _run_layers(
    params,
    cfg,
    h,
    positions,
    *,
    start=0,
    stop=None,
    cache=None,
    attn_mask=None,
    collect=(),
    emit_kv=False,
):
    """:func:`run_layers`; with ``emit_kv`` (no cache) returns the stacked new K/V."""
    _check_cfg(cfg)
    _check_params(params, cfg)
    stop = cfg.n_layers if stop is None else stop
    for name, v in (("start", start), ("stop", stop)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"`{name}` must be a Python int, got {type(v).__name__}.")
    if not 0 <= start <= stop <= cfg.n_layers:
        raise ValueError(
            f"`start`/`stop` must satisfy 0 <= start <= stop <= "
            f"{cfg.n_layers}, got start={start}, stop={stop}."
        )
    collect = tuple(sorted({int(c) for c in collect}))
    for c in collect:
        if not start <= c < stop:
            raise ValueError(f"`collect` entries must lie in [{start}, {stop}), got {c}.")
    h = jnp.asarray(h)
    _validate.floating(h, name="h")
    _validate.ndim(h, 3, name="h")
    b, t, d = h.shape
    if d != cfg.d_model:
        raise TypeError(f"`h` must have last axis {cfg.d_model}, got shape {h.shape}.")
    dtype = params["embed"].dtype
    if h.dtype != dtype:
        h = h.astype(dtype)
    positions = jnp.asarray(positions)
    _validate.integer(positions, name="positions")
    _validate.shape(positions, (b, t), name="positions")
    if cache is not None:
        if not isinstance(cache, KVCache):
            raise TypeError(f"`cache` must be a KVCache, got {type(cache).__name__}.")
        want = (cfg.n_layers, b, None, cfg.n_kv_heads, cfg.head_dim)
        _validate.shape(cache.k, want, name="cache.k")
        _validate.shape(cache.v, tuple(cache.k.shape), name="cache.v")
        _validate.shape(cache.length, (b,), name="cache.length")
    s = t if cache is None else cache.k.shape[2]
    if attn_mask is None:
        mask = default_mask(cfg, batch=b, t=t, cache=cache)
    else:
        mask = jnp.asarray(attn_mask)
        if mask.dtype != jnp.bool_:
            raise TypeError(f"`attn_mask` must be a bool array, got dtype {mask.dtype}.")
        _validate.shape(mask, (b, t, s), name="attn_mask")
    slots = None if cache is None else (cache.length[:, None] + jnp.arange(t)[None, :])

    layers = params["layers"]
    bounds = [start] + [c + 1 for c in collect if c + 1 < stop] + [stop]
    hidden: dict[int, Array] = {}
    ks, vs = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if hi <= lo:
            continue
        seg = jax.tree.map(lambda a, lo=lo, hi=hi: a[lo:hi], layers)
        if cache is None:

            def body(carry, lp):
                out, kv = _block(cfg, lp, carry, positions, mask, None, None)
                return out, (kv if emit_kv else None)

            h, kv = jax.lax.scan(body, h, seg)
            if emit_kv:
                ks.append(kv[0])
                vs.append(kv[1])
        else:

            def body(carry, xs):
                lp, kb, vb = xs
                out, (kb, vb) = _block(cfg, lp, carry, positions, mask, (kb, vb), slots)
                return out, (kb, vb)

            h, (kseg, vseg) = jax.lax.scan(body, h, (seg, cache.k[lo:hi], cache.v[lo:hi]))
            ks.append(kseg)
            vs.append(vseg)
        if hi - 1 in collect:
            hidden[hi - 1] = h
    if cache is not None and stop > start:
        k_new = jnp.concatenate([cache.k[:start], *ks, cache.k[stop:]], axis=0)
        v_new = jnp.concatenate([cache.v[:start], *vs, cache.v[stop:]], axis=0)
        cache = cache._replace(k=k_new, v=v_new)
    if emit_kv:
        return h, (jnp.concatenate(ks, axis=0), jnp.concatenate(vs, axis=0)), hidden
    return h, cache, hidden


def apply(
    params: PyTree,
    cfg: TransformerConfig,
    tokens: Int[ArrayLike, "B T"] | None = None,
    positions: Int[ArrayLike, "B T"] | None = None,
    *,
    inputs_embeds: Float[ArrayLike, "B T D"] | None = None,
    cache: KVCache | None = None,
    attn_mask: Bool[ArrayLike, "B T S"] | None = None,
    collect: tuple[int, ...] | list[int] = (),
) -> LMOutput:
    """Full forward: embed (or ``inputs_embeds``), all blocks, final norm, LM head.

    Args:
      params: Model parameters (:func:`init_params` layout).
      cfg: Model configuration.
      tokens: ``int[B, T]`` token ids; give exactly one of ``tokens`` and
        ``inputs_embeds``.
      positions: Logical RoPE positions ``int[B, T]``; default ``arange(T)``
        without a cache and ``cache.length[:, None] + arange(T)`` with one.
      inputs_embeds: ``[B, T, D]`` embeddings used instead of ``tokens`` (cast to
        the parameters' dtype).
      cache: Optional :class:`KVCache`; the new rows are written, ``length`` is
        not advanced.
      attn_mask: Optional ``bool[B, T, S]`` overriding the default mask.
      collect: Block indices whose outputs are returned in ``hidden``.

    Returns:
      :class:`LMOutput` ``(logits [B,T,V], cache, hidden)``.

    Raises:
      ValueError: If both or neither of ``tokens`` and ``inputs_embeds`` are given.
    """
    _check_cfg(cfg)
    if (tokens is None) == (inputs_embeds is None):
        raise ValueError("give exactly one of `tokens` and `inputs_embeds`.")
    if tokens is not None:
        h = embed(params, cfg, tokens)
    else:
        h = jnp.asarray(inputs_embeds)
        _validate.floating(h, name="inputs_embeds")
        _validate.ndim(h, 3, name="inputs_embeds")
        if h.shape[-1] != cfg.d_model:
            raise TypeError(
                f"`inputs_embeds` must have last axis {cfg.d_model}, got shape {h.shape}."
            )
        _check_params(params, cfg)
        h = h.astype(params["embed"].dtype)
    b, t = h.shape[:2]
    if positions is None:
        base = jnp.arange(t, dtype=jnp.int32)[None, :]
        positions = (
            jnp.broadcast_to(base, (b, t))
            if cache is None
            else cache.length[:, None].astype(jnp.int32) + base
        )
    h, cache, hidden = _run_layers(
        params, cfg, h, positions, cache=cache, attn_mask=attn_mask, collect=collect
    )
    return LMOutput(logits=unembed(params, cfg, h), cache=cache, hidden=hidden)


def prefill(
    params: PyTree,
    cfg: TransformerConfig,
    tokens: Int[ArrayLike, "B T"],
    lengths: Int[ArrayLike, " B"],
    *,
    max_len: int,
) -> tuple[Array, KVCache]:
    """Encode right-padded ragged prompts into a fresh cache.

    Args:
      params: Model parameters.
      cfg: Model configuration (causal).
      tokens: ``int[B, T]`` prompts, right-padded.
      lengths: ``int[B]`` prompt lengths in ``[1, T]``.
      max_len: Cache capacity S (>= T).

    Returns:
      ``(logits [B, V] at position lengths-1, cache with length = lengths)``.
    """
    _check_cfg(cfg)
    tokens = jnp.asarray(tokens)
    _validate.integer(tokens, name="tokens")
    _validate.ndim(tokens, 2, name="tokens")
    b, t = tokens.shape
    lengths = jnp.asarray(lengths)
    _validate.integer(lengths, name="lengths")
    _validate.shape(lengths, (b,), name="lengths")
    if not isinstance(max_len, int) or isinstance(max_len, bool):
        raise TypeError(f"`max_len` must be a Python int, got {type(max_len).__name__}.")
    if max_len < t:
        raise ValueError(f"`max_len` must be >= the prompt length {t}, got max_len={max_len}.")
    lengths = _validate.error_if(
        lengths, jnp.any((lengths < 1) | (lengths > t)), f"`lengths` must lie in [1, {t}]."
    )
    _check_params(params, cfg)
    h = embed(params, cfg, tokens)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32)[None, :], (b, t))
    h, (k, v), _ = _run_layers(params, cfg, h, pos, emit_kv=True)
    logits = unembed(params, cfg, h)
    # A fresh cache: the T rows go to the static slots 0..T-1 (T <= max_len checked);
    # zero padding keeps the batch sharding of the prompts.
    pad = ((0, 0), (0, 0), (0, max_len - t), (0, 0), (0, 0))
    dtype = params["embed"].dtype
    cache = KVCache(
        k=jnp.pad(k.astype(dtype), pad),
        v=jnp.pad(v.astype(dtype), pad),
        length=lengths.astype(jnp.int32),
    )
    idx = (lengths.astype(jnp.int32) - 1)[:, None, None]
    last = jnp.take_along_axis(logits, idx, axis=1)[:, 0]
    return last, cache


def decode_step(
    params: PyTree,
    cfg: TransformerConfig,
    tokens: Int[ArrayLike, " B"],
    cache: KVCache,
) -> tuple[Array, KVCache]:
    """Feed one token per row at logical position ``cache.length`` and commit it.

    Args:
      params: Model parameters.
      cfg: Model configuration.
      tokens: ``int[B]`` the next token of each row.
      cache: Cache holding the committed prefix of each row.

    Returns:
      ``(logits [B, V] for the following token, cache with length + 1)``.
    """
    tokens = jnp.asarray(tokens)
    _validate.integer(tokens, name="tokens")
    _validate.ndim(tokens, 1, name="tokens")
    out = apply(params, cfg, tokens[:, None], cache=cache)
    return out.logits[:, 0], commit(out.cache, jnp.ones_like(out.cache.length))
