"""Cached decoding with the transformer backbone: prefill and one-token steps.

Both are jitted like jax.numpy (module level, ``cfg`` and sizes static, arrays traced).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int, PyTree

from jaxkit import _validate
from jaxkit.nn._attention import forward_tables
from jaxkit.nn._blocks import layers_core
from jaxkit.nn._cache import KVCache, commit
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._forward import apply_traced, embed_traced, last_block_traced, unembed_traced
from jaxkit.nn._intervene import Interventions
from jaxkit.nn._intervene import check as check_iv
from jaxkit.nn._params import (
    check_cache,
    check_cfg,
    check_overflow,
    check_params,
    guard,
    guard_tokens,
    per_layer_params,
)


class StepOutput(NamedTuple):
    """Output of :func:`prefill` and :func:`decode_step`.

    Attributes:
      logits: ``[B, V]``, the next-token logits of each row.
      cache: The updated :class:`KVCache`.
    """

    logits: Array
    cache: KVCache


@functools.partial(jax.jit, static_argnames=("cfg", "max_len"))
def _prefill(params, tokens, lengths, iv, *, cfg, max_len):
    b, t = tokens.shape
    dtype = params["embed"].dtype
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32)[None, :], (b, t))
    last = cfg.n_layers - 1
    # Only row lengths-1 of each prompt is read: the last block runs its query, attention,
    # MLP, final norm and head there alone (`last_block_traced`, as `apply(outputs_at=)`), its
    # K/V at every position; RoPE tables once per forward (`forward_tables`).
    tables = forward_tables(pos, cfg, dtype)
    h = embed_traced(params, tokens).astype(dtype)
    ks, vs = [], []
    if last > 0:
        out = layers_core(
            params, cfg, h, pos, None, None, start=0, stop=last, collect=(), emit_kv=True,
            iv=iv, tables=tables,
        )  # fmt: skip
        h = out.h.astype(dtype)
        ks, vs = [out.cache[0]], [out.cache[1]]  # [n_layers - 1, B, T, Hkv, Dh]
    zero = jnp.zeros_like(tokens[:, 0], jnp.int32)  # follows the prompts' batch sharding
    at = (zero + jnp.arange(b, dtype=jnp.int32), zero + lengths.astype(jnp.int32) - 1)
    hs, (k, v) = last_block_traced(params, cfg, h, pos, tables, None, None, None, at, iv)
    logits = unembed_traced(params, cfg, hs)
    # A fresh cache: the T rows go to the static slots 0..T-1 (T <= max_len checked);
    # zero padding keeps the batch sharding of the prompts. Per-layer parameters give a
    # per-layer cache (one buffer per block), stacked ones a stacked cache.
    pad = ((0, 0), (0, max_len - t), (0, 0), (0, 0))
    if per_layer_params(params):
        k = tuple(jnp.pad(a.astype(dtype), pad) for a in (*(x for s in ks for x in s), k))
        v = tuple(jnp.pad(a.astype(dtype), pad) for a in (*(x for s in vs for x in s), v))
    else:
        k = jnp.pad(jnp.concatenate([*ks, k[None]], axis=0).astype(dtype), ((0, 0), *pad))
        v = jnp.pad(jnp.concatenate([*vs, v[None]], axis=0).astype(dtype), ((0, 0), *pad))
    return StepOutput(logits, KVCache(k=k, v=v, length=lengths.astype(jnp.int32)))


def prefill(
    params: PyTree,
    cfg: TransformerConfig,
    tokens: Int[ArrayLike, "B T"],
    lengths: Int[ArrayLike, " B"],
    *,
    max_len: int,
    interventions: Interventions | None = None,
) -> StepOutput:
    """Encode right-padded ragged prompts into a fresh cache.

    Args:
      params: Model parameters.
      cfg: Model configuration (causal).
      tokens: ``int[B, T]`` prompts, right-padded, ids in ``[0, V)``.
      lengths: ``int[B]`` prompt lengths in ``[1, T]``.
      max_len: Cache capacity S (>= T).
      interventions: Optional :class:`~jaxkit.nn.Interventions` (additive edits
        of shape ``[D]`` / ``[B, D]`` / ``[B, T, D]``; an inserted span lies in the
        prompt, its reserved tokens counted in ``lengths``). Pass the same object
        (minus ``[B, T, D]`` edits) to the following :func:`decode_step` calls.

    Returns:
      :class:`StepOutput` ``(logits [B, V] at position lengths-1, cache with
      length = lengths)``.

    Raises:
      TypeError: wrong types or shapes (an intervention of the wrong shape).
      ValueError: ``max_len < T``, ``lengths`` outside ``[1, T]``, an intervention
        layer outside ``[0, n_layers)``.
    """
    check_cfg(cfg)
    check_params(params, cfg)
    tokens = guard_tokens(tokens, cfg, ndim=2)
    b, t = tokens.shape
    _validate.integer(lengths, name="lengths")  # before jnp.asarray (a string names none)
    lengths = jnp.asarray(lengths)
    _validate.shape(lengths, (b,), name="lengths")
    max_len = _validate.python_int(max_len, name="max_len")
    if max_len < t:
        raise ValueError(f"`max_len` must be >= the prompt length {t}, got max_len={max_len}.")
    lengths = guard(
        lengths, _validate.any_outside(lengths, 1, t), f"`lengths` must lie in [1, {t}]."
    )
    iv = check_iv(interventions, cfg, b, t)
    return _prefill(params, tokens, lengths, iv, cfg=cfg, max_len=max_len)


@functools.partial(jax.jit, static_argnames=("cfg", "un"))
def _decode_step(params, tokens, cache, iv, *, cfg, un=True):
    # un: unroll the layer scan (traced calls: a caller's loop then hoists the weight slices;
    # an eager step has no loop to hoist into and runs ~15 % faster rolled at L = 64)
    out = apply_traced(
        params, tokens[:, None], None, None, cache, None, cfg=cfg, collect=(), iv=iv, un=un
    )
    return StepOutput(out.logits[:, 0], commit(out.cache, jnp.ones_like(out.cache.length)))


def decode_step(
    params: PyTree,
    cfg: TransformerConfig,
    tokens: Int[ArrayLike, " B"],
    cache: KVCache,
    *,
    overflow: str = "error",
    interventions: Interventions | None = None,
) -> StepOutput:
    """Feed one token per row at logical position ``cache.length`` and commit it.

    Args:
      params: Model parameters.
      cfg: Model configuration.
      tokens: ``int[B]`` the next token of each row, ids in ``[0, V)``.
      cache: Cache holding the committed prefix of each row.
      overflow: A row whose cache is full: ``"error"`` (default) raises, ``"drop"``
        drops its write and leaves its ``length`` at the capacity.
      interventions: Optional :class:`~jaxkit.nn.Interventions`, the object given
        to :func:`prefill` (edits of shape ``[D]`` or ``[B, D]``; an inserted span
        stays hidden from the blocks ``<= insert_layer``).

    Returns:
      :class:`StepOutput` ``(logits [B, V] for the following token, cache with
      length + 1)``.

    Raises:
      TypeError: ``tokens`` not an integer ``[B]`` array, ``cache`` not a :class:`KVCache`
        of ``cfg``'s layout holding ``B`` rows (an empty batch against a cache of rows
        included), or an intervention of the wrong shape.
      ValueError: a token id outside ``[0, V)``, an unknown ``overflow``, or
        (``overflow="error"``) a row whose cache is full (or whose ``cache.length`` is
        negative).

    Decode in a compiled loop (``decoding.ar_generate``, or a ``lax.scan`` of this step)
    or pass :func:`unstack_layers` parameters to a jitted step called from Python: with the
    stacked layout a program holding a single step copies every layer's weight slice on
    each call (inside a loop XLA hoists the copies out; docs: ``nn``, "Per-layer storage").
    """
    check_cfg(cfg)
    check_params(params, cfg)
    check_overflow(overflow)
    traced = isinstance(tokens, jax.core.Tracer)
    tokens = guard_tokens(tokens, cfg, ndim=1)
    cache = check_cache(cache, cfg, tokens.shape[0], 1, overflow)
    iv = check_iv(interventions, cfg, tokens.shape[0], 1)
    return _decode_step(params, tokens, cache, iv, cfg=cfg, un=traced)
