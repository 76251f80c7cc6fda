"""Topological reordering (WeDLM, Eq. 5-7) and the window bookkeeping of its decoder.

Observed tokens move to the physical prefix, masked slots follow, and every token
keeps its logical RoPE position, so an ordinary causal mask lets every mask see
all observed tokens. All functions are per-row, stable and static-shape, and
jitted like jax.numpy (module level).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int

from jaxkit import _validate


class Reordered(NamedTuple):
    """Result of :func:`topological_reorder` (physical order, batch axes first).

    Attributes:
      tokens: Physical tokens; masked slots hold ``mask_token_id``.
      positions: Logical position of each physical slot.
      perm: ``int32``; physical slot ``i`` holds logical slot ``perm[..., i]``.
    """

    tokens: Array
    positions: Array
    perm: Array


class WindowOrder(NamedTuple):
    """Result of :func:`window_order`.

    Attributes:
      perm: ``int32``; physical slot ``i`` holds logical slot ``perm[..., i]``.
      inv_perm: ``int32``; logical slot ``j`` sits at physical slot ``inv_perm[..., j]``.
    """

    perm: Array
    inv_perm: Array


def topological_reorder(
    tokens: Int[ArrayLike, "*b L"],
    positions: Int[ArrayLike, "*b L"],
    is_masked: Bool[ArrayLike, "*b L"],
    *,
    mask_token_id: int,
) -> Reordered:
    """Move observed tokens to the physical prefix, keeping their logical positions.

    Physical input ``x~ = [x_O (ascending), [MASK] x |M|]`` with positions
    ``p~ = [O (ascending), M (ascending)]`` (paper Eq. 5-7). Under a causal mask
    the ``j``-th mask slot then sees every observed token and the masks before it.

    Args:
      tokens: Integer tokens in logical order, ``[..., L]`` (any ids: only permuted).
      positions: Logical positions of the tokens, ``[..., L]`` (usually ``arange(L)``;
        any integers: only permuted with their tokens).
      is_masked: Boolean, ``True`` where the token is hidden (the set M).
      mask_token_id: Id written into the masked slots.

    Returns:
      A :class:`Reordered` ``(tokens, positions, perm)``: physical slot ``i``
      holds logical slot ``perm[..., i]``; masked slots hold ``mask_token_id``.

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM), Eq. 5-7.
    """
    _validate.integer(tokens, name="tokens")  # before jnp.asarray: a str names the argument
    _validate.integer(positions, name="positions")
    _validate.boolean(is_masked, name="is_masked")
    tokens, positions, is_masked = (
        jnp.asarray(tokens),
        jnp.asarray(positions),
        jnp.asarray(is_masked),
    )
    _validate.min_ndim(tokens, 1, name="tokens")
    _validate.same_shape(tokens=tokens, positions=positions, is_masked=is_masked)
    mask_token_id = _validate.python_int(mask_token_id, name="mask_token_id")
    return _topological_reorder(tokens, positions, is_masked, mask_token_id=mask_token_id)


@functools.partial(jax.jit, static_argnames=("mask_token_id",))
def _topological_reorder(tokens, positions, is_masked, *, mask_token_id) -> Reordered:
    perm = jnp.argsort(is_masked.astype(jnp.int32), axis=-1, stable=True)
    shown = jnp.where(is_masked, jnp.asarray(mask_token_id, tokens.dtype), tokens)
    return Reordered(
        jnp.take_along_axis(shown, perm, axis=-1),
        jnp.take_along_axis(positions, perm, axis=-1),
        perm.astype(jnp.int32),
    )


def commit_count(filled: Bool[ArrayLike, "*b W"]) -> Array:
    """Length of the leading run of filled slots (``cumprod(filled).sum()``), int32.

    Args:
      filled: Boolean window occupancy in logical order, ``[..., W]``.

    Returns:
      ``int32[...]``: how many slots the next decoder step commits.

    References:
      WeDLM (ICML 2026), Algorithm 1 (commit of the leftmost filled run).
    """
    _validate.boolean(filled, name="filled")  # before jnp.asarray: a str names the argument
    filled = jnp.asarray(filled)
    _validate.min_ndim(filled, 1, name="filled")
    return _commit_count(filled)


@jax.jit
def _commit_count(filled) -> Array:
    return jnp.sum(jnp.cumprod(filled.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)


def window_order(filled: Bool[ArrayLike, "*b W"], valid: Bool[ArrayLike, "*b W"]) -> WindowOrder:
    """Physical order of a decoder window: filled slots, then open masks, then padding.

    Args:
      filled: Boolean, slot holds a decided token.
      valid: Boolean, slot takes part in the forward (padding slots are last and
        never seen by valid queries under the causal mask).

    Returns:
      A :class:`WindowOrder` ``(perm, inv_perm)``: physical slot ``i`` holds
      logical slot ``perm[..., i]``; logical slot ``j`` sits at physical slot ``inv_perm[..., j]``.

    References:
      WeDLM (ICML 2026), Algorithm 1 step 1 (``perm = stable_argsort(~filled)``).
    """
    _validate.boolean(filled, name="filled")  # before jnp.asarray: a str names the argument
    _validate.boolean(valid, name="valid")
    filled, valid = jnp.asarray(filled), jnp.asarray(valid)
    _validate.min_ndim(filled, 1, name="filled")
    _validate.same_shape(filled=filled, valid=valid)
    return _window_order(filled, valid)


@jax.jit
def _window_order(filled, valid) -> WindowOrder:
    # Stable three-class sort without argsort: class offsets + rank inside the class.
    classes = [filled & valid, ~filled & valid, ~valid]
    inv = jnp.zeros(filled.shape, jnp.int32)
    offset = jnp.zeros(filled.shape[:-1] + (1,), jnp.int32)
    for c in classes:
        ci = c.astype(jnp.int32)
        inv = inv + ci * (offset + jnp.cumsum(ci, axis=-1) - 1)
        offset = offset + jnp.sum(ci, axis=-1, keepdims=True)
    # perm[p] = the j with inv[j] == p: a one-hot reduction (no scatter, so a
    # batch-sharded window keeps its sharding under an explicit mesh).
    w = filled.shape[-1]
    lead = (1,) * (filled.ndim - 1)
    j = jnp.arange(w, dtype=jnp.int32).reshape(lead + (w, 1))
    onehot = inv[..., :, None] == jnp.arange(w, dtype=jnp.int32).reshape(lead + (1, w))
    perm = jnp.sum(jnp.where(onehot, j, jnp.zeros_like(j)), axis=-2).astype(jnp.int32)
    return WindowOrder(perm, inv)
