"""Key/value cache with per-row committed lengths.

The cache is a plain ``NamedTuple`` of arrays (a pytree), so it passes through
``jit``, ``vmap``, ``lax.scan`` and ``lax.while_loop`` unchanged in structure.
Writes past the capacity are an explicit choice of ``apply`` / ``run_layers`` /
``decode_step``: ``overflow="error"`` (the default) raises, ``overflow="drop"``
drops the rows whose physical slot is past the buffer end (a scatter with
``mode="drop"``, never clamped onto earlier slots).
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int

from jaxkit import _validate
from jaxkit.nn._config import TransformerConfig


class KVCache(NamedTuple):
    """Key/value buffers of every block, stacked or per layer.

    Attributes:
      k: Keys, ``[n_layers, B, S, n_kv_heads, head_dim]`` (RoPE already applied), or per
        layer (:func:`init_cache` with ``per_layer=True``, :func:`unstack_layers`): a tuple
        of ``n_layers`` arrays ``[B, S, n_kv_heads, head_dim]``.
      v: Values, the same layout and shapes as ``k``.
      length: ``int32[B]``, the number of valid, committed slots of each row.
    """

    k: Array | tuple[Array, ...]
    v: Array | tuple[Array, ...]
    length: Array

    @property
    def capacity(self) -> int:
        """The slots per row S (either layout)."""
        return capacity(self)


def per_layer(cache) -> bool:
    """Whether ``cache`` holds one K/V buffer per block (else stacked)."""
    return isinstance(cache.k, (tuple, list))


def capacity(cache) -> int:
    """The slots per row S of a stacked or per-layer cache."""
    return cache.k[0].shape[1] if per_layer(cache) else cache.k.shape[2]


def init_cache(
    cfg: TransformerConfig,
    *,
    max_len: int,
    batch: int | None = None,
    dtype=jnp.float32,
    like: ArrayLike | None = None,
    per_layer: bool = False,
) -> KVCache:
    """An empty cache (all lengths 0) for ``batch`` rows of ``max_len`` slots.

    Args:
      cfg: Model configuration (gives layers, kv-heads and head size).
      max_len: Capacity S (slots per row).
      batch: Number of rows B (taken from ``like`` when given).
      dtype: Floating dtype of the K/V buffers (use the model's compute dtype).
      like: Optional ``[B]`` array whose batch sharding the buffers follow (built as
        ``zeros_like(like)`` broadcast, so a batch-sharded ``like`` gives a
        batch-sharded cache, also under ``jit`` and an explicit mesh).
      per_layer: One buffer per block (tuples of ``[B, S, Hkv, Dh]``) instead of one
        stacked buffer: a decode loop then reads each block's K/V without copying its
        slice (docs: ``nn``, "Per-layer storage").

    Returns:
      A :class:`KVCache` of zeros with ``length = zeros(int32[B])``.
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    max_len = _validate.python_int(max_len, name="max_len", minimum=1)
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {jnp.dtype(dtype)}.")
    if like is None:
        if batch is None:
            raise TypeError("give `batch` or `like`.")
        batch = _validate.python_int(batch, name="batch", minimum=1)
        shape = (cfg.n_layers, batch, max_len, cfg.n_kv_heads, cfg.head_dim)
        z = jnp.zeros(shape, dtype)
        return _layout(KVCache(k=z, v=z, length=jnp.zeros((batch,), jnp.int32)), per_layer)
    if isinstance(like, str | bytes):  # jnp.asarray's message would not name it
        raise TypeError(f"`like` must be a [B] array, got {type(like).__name__} {like!r}.")
    like = jnp.asarray(like)
    _validate.ndim(like, 1, name="like")
    if batch is not None and _validate.python_int(batch, name="batch") != like.shape[0]:
        raise ValueError(f"`batch`={batch} disagrees with `like` of shape {like.shape}.")
    shape = (cfg.n_layers, 1, max_len, cfg.n_kv_heads, cfg.head_dim)
    z = jnp.zeros_like(like, dtype=dtype)[None, :, None, None, None] + jnp.zeros(shape, dtype)
    return _layout(KVCache(k=z, v=z, length=jnp.zeros_like(like, dtype=jnp.int32)), per_layer)


def _layout(cache: KVCache, per: bool) -> KVCache:
    _validate.flags(per_layer=per)
    return unstack_kv(cache) if per else cache


def unstack_kv(cache: KVCache) -> KVCache:
    """A stacked cache as one K/V buffer per block (per-layer caches unchanged)."""
    if per_layer(cache):
        return cache._replace(k=tuple(cache.k), v=tuple(cache.v))
    n = cache.k.shape[0]
    return cache._replace(
        k=tuple(cache.k[i] for i in range(n)), v=tuple(cache.v[i] for i in range(n))
    )


def stack_kv(cache: KVCache) -> KVCache:
    """A per-layer cache stacked on a leading layer axis (stacked caches unchanged)."""
    if not per_layer(cache):
        return cache
    return cache._replace(k=jnp.stack(cache.k), v=jnp.stack(cache.v))


def check_layout(cache) -> None:
    """Static layout check of a cache without its config (shapes only, no runtime cost).

    ``k`` a stacked ``[n_layers, B, S, Hkv, Dh]`` buffer or a tuple of ``[B, S, Hkv, Dh]``
    ones, ``v`` of the same layout and shapes, ``length`` an integer ``[B]``; a
    ``TypeError`` naming the field (``cache.k``, ``cache.v[1]``, ``cache.length``).
    """
    if not isinstance(cache, KVCache):
        raise TypeError(f"`cache` must be a KVCache, got {type(cache).__name__}.")
    _validate.integer(cache.length, name="cache.length")
    if per_layer(cache):
        if not isinstance(cache.v, (tuple, list)) or len(cache.v) != len(cache.k):
            raise TypeError(
                f"a per-layer `cache` must hold as many V buffers as K buffers (tuples), got "
                f"{len(cache.k)} and {type(cache.v).__name__}."
            )
        if not cache.k:
            raise TypeError("a per-layer `cache` must hold at least one K/V buffer.")
        _validate.ndim(cache.k[0], 4, name="cache.k[0]")
        want = tuple(cache.k[0].shape)
        for i, (k, v) in enumerate(zip(cache.k, cache.v, strict=True)):
            _validate.shape(k, want, name=f"cache.k[{i}]")
            _validate.shape(v, want, name=f"cache.v[{i}]")
    else:
        _validate.ndim(cache.k, 5, name="cache.k")
        want = tuple(cache.k.shape[1:])
        _validate.shape(cache.v, tuple(cache.k.shape), name="cache.v")
    _validate.shape(cache.length, want[:1], name="cache.length")


def commit(cache: KVCache, n: Int[ArrayLike, "*b"]) -> KVCache:
    """Advance the committed length of each row by ``n``, clipped to ``[0, S]``.

    ``apply``/``run_layers`` write the K/V of new rows but never advance
    ``length``; the caller decides how many of them become valid (a WeDLM step
    commits only a prefix of its window; an AR step commits 1).

    Args:
      cache: The cache (its integer ``length`` is not range-checked: the clip brings any
        value into ``[0, S]``, and no runtime check runs inside the decode loops).
      n: ``int32[B]`` or a scalar number of rows to commit per sequence (any integer:
        the clip makes a larger one commit every slot, a negative one rolls back).

    Returns:
      The cache with ``length = clip(length + n, 0, max_len)``.

    Raises:
      TypeError: ``cache`` not a :class:`KVCache`, its ``length`` not an integer ``[B]``
        array, or ``k``/``v`` not of one cache layout and shape (static checks only);
        ``n`` not an integer scalar or ``[B]`` array.
    """
    check_layout(cache)
    _validate.integer(n, name="n")  # before jnp.asarray (a string names none)
    n = jnp.asarray(n)
    _validate.ndim(n, (0, 1), name="n")
    if n.ndim == 1 and n.shape[0] != cache.length.shape[0]:
        raise TypeError(
            f"`n` must be a scalar or have shape ({cache.length.shape[0]},), got shape {n.shape}."
        )
    max_len = capacity(cache)
    length = jnp.clip(cache.length + n.astype(jnp.int32), 0, max_len)
    return cache._replace(length=length.astype(jnp.int32))
