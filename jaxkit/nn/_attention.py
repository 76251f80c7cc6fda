"""Attention, RoPE and the dense/norm primitives of the transformer backbone.

Grouped-query dense masked softmax accumulated in f32 (f64 for f64 inputs), rotate-half
RoPE on logical positions with the Hugging Face ``rope_scaling`` types ``linear``,
``llama3`` and ``yarn``, RMSNorm, and the sliding-window mask of Qwen2.

References:
  Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021.
  Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models", 2023.
  Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models", 2023.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype
from jaxkit.nn._config import RopeScaling, TransformerConfig
from jaxkit.sharding import explicit_spec


def take_rows(table: Array, idx: Array) -> Array:
    """``table[idx]`` (clipped), with the output sharded like ``idx`` under an explicit mesh."""
    spec = explicit_spec(idx)
    if spec is None:
        return jnp.take(table, idx, axis=0, mode="clip")
    spec = jax.sharding.PartitionSpec(*spec, *([None] * (table.ndim - 1)))
    return table.at[idx].get(out_sharding=spec, mode="clip")


def set_rows(buf: Array, rows: Array | tuple, slots: Array, upd: Array) -> Array:
    """``buf.at[rows, slots].set(upd, mode="drop")``, keeping ``buf``'s explicit sharding.

    ``rows`` may be a tuple of leading indices (``buf.at[*rows, slots]``).
    """
    spec = explicit_spec(buf)
    idx = (*rows, slots) if isinstance(rows, tuple) else (rows, slots)
    if spec is None:
        return buf.at[idx].set(upd, mode="drop")
    return buf.at[idx].set(upd, mode="drop", out_sharding=spec)


def dense(x: Array, w: Array) -> Array:
    """``x @ w`` over the last axis, accumulated in f32 (f64), cast to ``x.dtype``.

    Under an explicit mesh the output keeps ``x``'s leading shardings and ``w``'s
    output-axis sharding (a sharded contraction is reduced).
    """
    acc = accumulation_dtype(x.dtype)
    spec = explicit_spec(x)
    kw = {}
    if spec is not None:
        w_spec = explicit_spec(w)
        out = w_spec[-1] if w_spec is not None and len(w_spec) == w.ndim else None
        kw["out_sharding"] = jax.sharding.PartitionSpec(*_pad(spec, x.ndim)[:-1], out)
    y = jnp.matmul(x, w.astype(x.dtype), preferred_element_type=acc, **kw)
    return y.astype(x.dtype)


def _pad(spec, nd: int) -> tuple:
    return tuple(spec) + (None,) * (nd - len(spec))


def split_last(x: Array, sizes: tuple[int, ...]) -> Array:
    """Reshape the last axis into ``sizes`` (its explicit sharding goes to the first)."""
    shape = (*x.shape[:-1], *sizes)
    spec = explicit_spec(x)
    if spec is None:
        return x.reshape(shape)
    s = _pad(spec, x.ndim)
    out = jax.sharding.PartitionSpec(*s[:-1], s[-1], *([None] * (len(sizes) - 1)))
    return jax.lax.reshape(x, shape, out_sharding=out)


def merge_last(x: Array, n: int) -> Array:
    """Merge the last ``n`` axes into one (keeping the first one's explicit sharding)."""
    shape = (*x.shape[:-n], math.prod(x.shape[-n:]))
    spec = explicit_spec(x)
    if spec is None:
        return x.reshape(shape)
    s = _pad(spec, x.ndim)
    out = jax.sharding.PartitionSpec(*s[:-n], s[-n])
    return jax.lax.reshape(x, shape, out_sharding=out)


def lead(w: Array, nd: int) -> Array:
    """Reshape ``w`` to rank ``nd`` by adding leading unit axes (no rank promotion)."""
    return w.reshape((1,) * (nd - w.ndim) + w.shape)


def rms_norm(x: Array, w: Array, eps: float) -> Array:
    """RMSNorm over the last axis, computed in the accumulation dtype."""
    acc = accumulation_dtype(x.dtype)
    xf = x.astype(acc)
    var = jnp.mean(xf * xf, axis=-1, keepdims=True)
    y = xf * jax.lax.rsqrt(var + jnp.asarray(eps, acc))
    return (y * lead(w.astype(acc), y.ndim)).astype(x.dtype)


def _yarn_mscale(factor: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def rope_frequencies(dh: int, theta: float, scaling: RopeScaling | None):
    """``(inv_freq [Dh/2] float64 NumPy, attention factor)`` of a RoPE configuration.

    ``linear``: ``inv_freq / factor``. ``llama3``: wavelengths longer than
    ``original / low_freq_factor`` are divided by ``factor``, shorter than
    ``original / high_freq_factor`` kept, a linear blend in between. ``yarn``: the
    NTK-by-parts blend of interpolated and extrapolated frequencies over the
    correction range of ``beta_fast``/``beta_slow`` rotations, and cos/sin scaled
    by ``attention_factor`` (default ``0.1 ln(factor) + 1``), as in Hugging Face.
    """
    inv = 1.0 / (theta ** (np.arange(0, dh, 2, dtype=np.float64) / dh))
    if scaling is None:
        return inv, 1.0
    f = scaling.factor
    if scaling.rope_type == "linear":
        return inv / f, 1.0
    orig = scaling.original_max_position_embeddings
    if scaling.rope_type == "llama3":
        lo, hi = scaling.low_freq_factor, scaling.high_freq_factor
        wavelen = 2 * math.pi / inv
        out = np.where(wavelen > orig / lo, inv / f, inv)
        smooth = (orig / wavelen - lo) / (hi - lo)
        mid = (wavelen >= orig / hi) & (wavelen <= orig / lo)
        return np.where(mid, (1 - smooth) * inv / f + smooth * inv, out), 1.0

    # yarn
    def corr_dim(rot):
        return dh * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(corr_dim(scaling.beta_fast)), 0)
    high = min(math.ceil(corr_dim(scaling.beta_slow)), dh - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dh // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrap = 1.0 - ramp
    inv_f = inv * (1 - extrap) / f + inv * extrap
    att = scaling.attention_factor
    return inv_f, (_yarn_mscale(f) if att is None else att)


def _trig(ang: Array) -> tuple[Array, Array]:
    return jnp.cos(ang), jnp.sin(ang)


def rope_tables(positions: Array, cfg: TransformerConfig, dtype, *, fence=False, dh=None):
    """RoPE's ``(cos, sin)`` tables ``[B, T, 1, Dh/2]`` at ``positions`` (attention factor in).

    ``dtype``: the rotated arrays' dtype (the angles are f64 for f64, else f32); ``dh``:
    their last axis (default ``cfg.head_dim``).
    ``fence``: computed inside a conditional whose two branches are the same (so the same
    values), which XLA cannot fuse into the consumers: outside a ``while`` loop XLA:CPU
    otherwise fuses cos and sin into the consumers of the rotated arrays (the attention's
    transposes, a gather) and evaluates them once per element (``2 h`` times too often per
    call, and again in every block; ``optimization_barrier`` is dropped before fusion on
    CPU). A layer scan hoists the tables out of its loop anyway; the slot forward
    (``apply(outputs_at=)``) and a forward with a block that runs alone (a one-block
    model, a segment cut by ``collect`` or a read site) compute them once so
    (:func:`forward_tables`: on CPU only) and hand them to every block.
    """
    dh = cfg.head_dim if dh is None else dh
    ang_dt = jnp.float64 if dtype == jnp.float64 else jnp.float32
    if cfg.rope_scaling is None:
        inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, dh, 2, dtype=ang_dt) / dh))
        att = 1.0
    else:
        inv_np, att = rope_frequencies(dh, cfg.rope_theta, cfg.rope_scaling)
        inv_freq = jnp.asarray(inv_np, ang_dt)
    ang = positions.astype(ang_dt)[..., None] * inv_freq[None, None, :]  # [B,T,Dh/2]
    if fence:  # any traced predicate: both branches compute the same tables
        cos, sin = jax.lax.cond(jnp.all(ang >= 0) | jnp.all(ang < 0), _trig, _trig, ang)
    else:
        cos, sin = _trig(ang)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    if att != 1.0:
        cos, sin = cos * att, sin * att
    return cos, sin


def forward_tables(positions: Array, cfg: TransformerConfig, dtype, *, dh=None):
    """:func:`rope_tables` once per forward: fenced on CPU, plain on other platforms.

    ``jax.lax.platform_dependent``: lowered for CPU it is ``rope_tables(fence=True)``,
    for any other platform the plain tables (there the fence would only add a
    conditional). The same values either way.
    """

    def fenced(p):
        return rope_tables(p, cfg, dtype, fence=True, dh=dh)

    def plain(p):
        return rope_tables(p, cfg, dtype, dh=dh)

    return jax.lax.platform_dependent(positions, cpu=fenced, default=plain)


def rope(x: Array, positions: Array | None, cfg: TransformerConfig, *, tables=None) -> Array:
    """Rotate-half RoPE on ``x [B,T,h,Dh]`` at logical ``positions [B,T]`` (angles f32).

    ``tables``: precomputed :func:`rope_tables` of ``positions`` (then ``positions`` is
    not read); the same values.
    """
    dh = x.shape[-1]
    ang_dt = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    cos, sin = rope_tables(positions, cfg, x.dtype, dh=dh) if tables is None else tables
    xf = x.astype(ang_dt)
    x1, x2 = xf[..., : dh // 2], xf[..., dh // 2 :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def window_mask(q_pos: Array, k_pos: Array, window: int) -> Array:
    """The sliding-window mask ``bool[B, T, S]`` (Hugging Face's rule).

    Key ``s`` is visible to query ``t`` iff ``q_pos - k_pos < window``.
    """
    return (q_pos[:, :, None] - k_pos[:, None, :]) < window


def _attend_one(q, k, v, mask):
    """:func:`attend` for one query row: reads the K/V buffers in place.

    The grouped form's head axis is a batch axis in the middle of the buffer, so XLA:CPU
    copies the whole ``[B, S, Hkv, Dh]`` buffer (K and V) to a head-major layout every call.
    Here the buffer is read as ``[B, S * Hkv, Dh]`` (a bitcast): every query head scores
    every (slot, kv-head) row, and the kv-head ``h // G`` column is kept (an exact select,
    the other columns are dropped); the output weights the same rows with zeros in the
    other heads' columns. ``Hkv`` times the multiply-adds of the grouped form, no copy:
    :func:`attend` takes it for ``Hkv <= 2`` (a one-token decode step ~20-50 % faster on
    XLA:CPU at ``Hkv = 2``; slower from ``Hkv = 4``) outside explicit meshes (it mixes the
    kv heads, which tensor parallelism shards). The last bits may differ from the grouped
    form's (another summation order); every call with one query row takes the same form.
    """
    b, _, h, dh = q.shape
    s, hkv = k.shape[1], k.shape[2]
    g = h // hkv
    acc = accumulation_dtype(q.dtype)
    eye = jnp.eye(hkv, dtype=bool)[None, :, None, None, :]  # [1, Hkv, 1, 1, Hkv]
    sc = jnp.einsum(
        "bmd,bnd->bmn",
        q[:, 0],
        k.reshape(b, s * hkv, dh).astype(q.dtype),
        preferred_element_type=acc,
    ) / jnp.asarray(math.sqrt(dh), acc)
    # column h // G of each head (the same values either way): from S * Hkv >= 128 XLA:CPU no
    # longer fuses the masked sum over the Hkv axis (a select buffer, then a separate reduction:
    # ~1.6x the call at 64-160 slots), so slices take it there; below, the fused sum is ~5 %
    # faster than the slices (CPU time, Hkv = 2)
    sc = sc.reshape(b, hkv, g, s, hkv)
    if s * hkv >= 128:
        sc = jnp.concatenate([sc[:, i : i + 1, :, :, i] for i in range(hkv)], axis=1)
    else:
        sc = jnp.sum(jnp.where(eye, sc, jnp.zeros((), acc)), axis=-1)
    sc = jnp.where(mask[:, :1, :], sc.reshape(b, h, s), jnp.asarray(-1e30, acc))
    p = jax.nn.softmax(sc, axis=-1).reshape(b, hkv, g, s, 1)
    p = jnp.where(eye, p, jnp.zeros((), acc)).reshape(b, h, s * hkv)
    o = jnp.einsum(
        "bmn,bnd->bmd", p, v.reshape(b, s * hkv, dh).astype(acc), preferred_element_type=acc
    )
    return o[:, None].astype(q.dtype)


def attend(q, k, v, mask):
    """:func:`attention` without the jit or the input conversion (for use inside a trace)."""
    b, t, h, dh = q.shape
    hkv = k.shape[2]
    if t == 1 and hkv <= 2 and explicit_spec(q) is None and explicit_spec(k) is None:
        return _attend_one(q, k, v, mask)
    return _attend_grouped(q, k, v, mask)


_PREFIX_MIN = 256


def prefix_widths(s: int) -> tuple[int, ...]:
    """The static cache prefixes :func:`attend_cached` chooses from (ascending).

    ``s`` halved, rounded up to a multiple of 8, while at least 16; at most four widths.
    """
    ws, w = [s], s
    while len(ws) < 4:
        half = -(-w // 2)
        w = -(-half // 8) * 8  # half, rounded up to a multiple of 8
        if w < 16 or w >= ws[-1]:
            break
        ws.append(w)
    return tuple(sorted(ws))


def attend_cached(q, k, v, mask):
    """:func:`attend` over a cache buffer, reading only the prefix of slots the mask can see.

    A cached forward's mask hides every slot past the rows written so far, but attention
    over the whole ``[B, S, Hkv, Dh]`` buffer costs in ``S``: on XLA:CPU a few query rows'
    attention is mostly per-slot work (8 rows of the WeDLM fixture: 14 us at S = 72 against
    4.5 us at 24). On CPU, from ``S >= 256``, this reads the narrowest of
    :func:`prefix_widths` that holds the last slot any query sees (``lax.switch``): the
    hidden slots past it add exact zeros to the softmax, so the result is :func:`attend`'s
    up to the summation order. A query row that sees no slot reads the whole buffer (its
    uniform average is over all ``S`` slots, as :func:`attend` defines it). Measured
    (``ar_generate``, d_model 128, 4 blocks, batch 4, 16 + 32 tokens, one core):
    ``max_len`` 1024 82 -> 21 ms with 4 KV heads, 30 -> 14 ms with 2. The choice costs
    ~0-12 % of a step when the whole buffer is needed anyway, and on two threads a
    conditional in a short loop costs more than it saves at small ``S`` (DLMR's 80-slot
    loop: 16.3 -> 20.1 ms CPU), so smaller caches keep the whole buffer. Other platforms
    and explicit meshes keep it too (a conditional's predicate may cost a device sync on
    a GPU; not measured). [decision, wave 30]
    """
    s = k.shape[1]
    if s < _PREFIX_MIN or explicit_spec(q) is not None or explicit_spec(k) is not None:
        return attend(q, k, v, mask)
    widths = prefix_widths(s)

    def prefix(q, k, v, mask):
        last = jnp.max(jnp.where(mask, jnp.arange(1, s + 1, dtype=jnp.int32), 0))
        need = jnp.where(jnp.all(jnp.any(mask, axis=-1)), last, s)
        idx = jnp.sum(need > jnp.asarray(widths[:-1], jnp.int32))
        branches = [
            lambda q, k, v, m, w=w: attend(q, k[:, :w], v[:, :w], m[..., :w]) for w in widths
        ]
        return jax.lax.switch(idx, branches, q, k, v, mask)

    return jax.lax.platform_dependent(q, k, v, mask, cpu=prefix, default=attend)


def _attend_grouped(q, k, v, mask):
    """Grouped-query attention: one product per (batch, kv-head) pair."""
    b, t, h, dh = q.shape
    hkv = k.shape[2]
    g = h // hkv
    acc = accumulation_dtype(q.dtype)
    qg = split_last(merge_last(q, 2), (hkv, g, dh))
    s = jnp.einsum(
        "btkgd,bskd->bkgts", qg, k.astype(q.dtype), preferred_element_type=acc
    ) / jnp.asarray(math.sqrt(dh), acc)
    s = jnp.where(mask[:, None, None, :, :], s, jnp.asarray(-1e30, acc))
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bkgts,bskd->btkgd", p, v.astype(acc), preferred_element_type=acc)
    return split_last(merge_last(o, 3), (h, dh)).astype(q.dtype)


_attention_jit = jax.jit(attend)


_KV = Float[ArrayLike, "B S Hkv Dh"]


def attention(
    q: Float[ArrayLike, "B T H Dh"], k: _KV, v: _KV, mask: Bool[ArrayLike, "B T S"]
) -> Float[Array, "B T H Dh"]:
    """Grouped-query dense masked softmax attention, accumulated in f32 (f64).

    Query head ``h`` uses key/value head ``h // (H // Hkv)``. Fully masked query
    rows give a uniform average instead of NaN. Jitted like jax.numpy (module level).

    Args:
      q: Queries ``[B, T, H, Dh]``.
      k: Keys ``[B, S, Hkv, Dh]``.
      v: Values ``[B, S, Hkv, Dh]``.
      mask: ``bool[B, T, S]``, True where query t may attend to key s.

    Returns:
      ``[B, T, H, Dh]`` in the dtype of ``q``.

    Raises:
      TypeError: non-floating ``q``/``k``/``v``, a non-boolean ``mask``, or shapes that
        do not fit together (ranks, ``B``, ``S``, ``Dh``, ``H % Hkv``, ``mask [B, T, S]``).
    """
    _validate.numeric(q=q, k=k, v=v, mask=mask)  # before jnp.asarray (a string names none)
    q, k, v, mask = (jnp.asarray(a) for a in (q, k, v, mask))
    for name, a in (("q", q), ("k", k), ("v", v)):
        _validate.floating(a, name=name)
        _validate.ndim(a, 4, name=name)
    b, t, h, dh = q.shape
    _validate.shape(k, (b, None, None, dh), name="k")
    _validate.same_shape(v=v, k=k)
    if k.shape[2] == 0 or h % k.shape[2]:
        raise TypeError(
            f"`k` must have a number of heads dividing the {h} query heads, got shape {k.shape}."
        )
    if mask.dtype != jnp.bool_:
        raise TypeError(f"`mask` must be a boolean array, got dtype {mask.dtype}.")
    _validate.shape(mask, (b, t, k.shape[1]), name="mask")
    return _attention_jit(q, k, v, mask)
