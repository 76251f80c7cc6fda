"""The forward pass of the transformer backbone: embed, the blocks, the LM head.

Llama/Qwen2 architecture (RMSNorm pre-norm blocks, rotary position embeddings on
*logical* positions passed explicitly, grouped-query attention with Qwen2's optional
sliding window, SwiGLU MLP, optional qk-norm and q/k/v biases); the blocks and their
layer scan are in ``_blocks``. Every public function is jitted like jax.numpy (module
level, ``cfg`` and discrete options static, arrays traced); argument checks run in the
un-jitted wrapper.

References:
  Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", 2023.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from jaxkit.nn._at import check_outputs_at, edit_at_slots, last_block_at
from jaxkit.nn._attention import dense, forward_tables, rms_norm, take_rows
from jaxkit.nn._blocks import block_masks, layers_core
from jaxkit.nn._cache import KVCache, per_layer
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._intervene import Interventions, MLPRead, hide_span
from jaxkit.nn._intervene import check as check_iv
from jaxkit.nn._params import (
    check_cfg,
    check_h,
    check_inputs,
    check_overflow,
    check_params,
    check_range,
    guard_tokens,
    layer_params,
)


class LMOutput(NamedTuple):
    """Output of :func:`apply`.

    Attributes:
      logits: ``[B, T, V]`` in the parameters' dtype (``[N, V]`` for ``outputs_at``).
      cache: The cache with the T new K/V rows written (``length`` NOT advanced),
        or ``None`` when no cache was given.
      hidden: Hidden states ``[B, T, D]`` after each layer listed in ``collect``
        (key ``l`` = output of block ``l``, 0-based, after its interventions; the last
        block's ``[N, D]`` at the slots with ``outputs_at``).
      reads: ``{l: MLPRead}`` for the read sites ``interventions.read_mlp``.
    """

    logits: Array
    cache: KVCache | None
    hidden: dict[int, Array]
    reads: dict[int, MLPRead] = {}


# ----------------------------------------------------------------------------- pieces


def embed_traced(params, tokens):
    return take_rows(params["embed"], tokens)


def unembed_traced(params, cfg, h):
    h = rms_norm(h, params["final_norm"], cfg.norm_eps)
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    return dense(h, head)


_embed_jit = jax.jit(embed_traced)
_unembed_jit = jax.jit(unembed_traced, static_argnums=1)


def embed(
    params: PyTree, cfg: TransformerConfig, tokens: Int[ArrayLike, "B T"]
) -> Float[Array, "B T D"]:
    """Token embeddings ``params["embed"][tokens]`` (``[B, T, D]``).

    Args:
      params: Model parameters; only the ``embed`` table ``[V, D]`` is read.
      cfg: Model configuration (gives V).
      tokens: ``int[B, T]`` token ids in ``[0, V)`` (others raise).

    Returns:
      ``[B, T, D]`` in the parameters' dtype.
    """
    check_cfg(cfg)
    check_params(params, cfg)
    tokens = guard_tokens(tokens, cfg, ndim=2)
    return _embed_jit(params, tokens)


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
    check_cfg(cfg)
    check_params(params, cfg)
    h = check_h(h, cfg, "h")
    return _unembed_jit(params, cfg, h)


def last_block_traced(params, cfg, h, positions, tables, cache, attn_mask, kv, at, iv):
    """The last block at the slots ``at = (rows, cols)`` with its edits: ``(hs [N, D], kv)``.

    Shared by :func:`apply` (``outputs_at``) and :func:`~jaxkit.nn.prefill`: the block's
    mask (the inserted span hidden when it enters at this block), ``last_block_at`` (``kv``:
    the stacked cache buffers, or None: the block's own K/V are returned), then the
    block's interventions applied at the slots.
    """
    b, t = h.shape[:2]
    last = cfg.n_layers - 1
    mask, win, slots = block_masks(cfg, b, t, positions, cache, attn_mask)
    base = jnp.zeros((b,), jnp.int32) if cache is None else cache.length.astype(jnp.int32)
    if iv is not None and iv.insert_layer == last:  # the span is hidden up to its block
        mask = hide_span(iv, mask, base)
    lp = layer_params(params, last)
    hs, kv = last_block_at(cfg, lp, h, positions, tables, mask, win, kv, slots, *at, layer=last)
    if iv is not None:
        hs = edit_at_slots(iv, last, hs, *at, base)
    return hs, kv


def apply_traced(
    params, tokens, embeds, positions, cache, attn_mask, *, cfg, collect, iv=None, un=True, at=None
):
    h = embed_traced(params, tokens) if tokens is not None else embeds
    b, t = h.shape[:2]
    if positions is None:
        base = jnp.arange(t, dtype=jnp.int32)[None, :]
        positions = (
            jnp.broadcast_to(base, (b, t))
            if cache is None
            else cache.length[:, None].astype(jnp.int32) + base
        )
    last = cfg.n_layers - (at is not None)  # with `at`, the last block runs at its slots
    # with `at`, RoPE tables once per forward, fenced on CPU (see `forward_tables`);
    # without, `layers_core` computes them so where a block runs alone
    dt = params["embed"].dtype
    tables = None if at is None else forward_tables(positions, cfg, dt)
    out = layers_core(
        params,
        cfg,
        h,
        positions,
        cache,
        attn_mask,
        start=0,
        stop=last,
        collect=collect,
        emit_kv=False,
        iv=iv,
        un=un,
        tables=tables,
    )
    if at is None:
        return LMOutput(unembed_traced(params, cfg, out.h), out.cache, out.hidden, out.reads)
    kv = None if cache is None else (out.cache.k, out.cache.v)
    per = cache is not None and per_layer(cache)
    if per:  # the last block's own buffers
        kv = (kv[0][last], kv[1][last])
    hs, kv = last_block_traced(
        params, cfg, out.h.astype(dt), positions, tables, cache, attn_mask, kv, at, iv
    )
    if per:
        kv = ((*out.cache.k[:last], kv[0]), (*out.cache.v[:last], kv[1]))
    cache = None if cache is None else out.cache._replace(k=kv[0], v=kv[1])
    hidden = {**out.hidden, last: hs} if last in collect else out.hidden  # [N, D] at slots
    return LMOutput(unembed_traced(params, cfg, hs), cache, hidden, out.reads)


def _apply_core(params, tokens, embeds, positions, cache, attn_mask, iv, at, *, cfg, collect):
    return apply_traced(
        params, tokens, embeds, positions, cache, attn_mask, cfg=cfg, collect=collect, iv=iv, at=at
    )


apply_core = jax.jit(_apply_core, static_argnames=("cfg", "collect"))


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
    overflow: str = "error",
    interventions: Interventions | None = None,
    outputs_at: tuple[Int[ArrayLike, " N"], Int[ArrayLike, " N"]] | None = None,
) -> LMOutput:
    """Full forward: embed (or ``inputs_embeds``), all blocks, final norm, LM head.

    Jitted like jax.numpy (module level, ``cfg``/``collect`` static, arrays traced).

    With ``outputs_at=(rows, cols)`` the logits are computed only at the ``N`` slots
    ``(rows[i], cols[i])``: blocks ``0 .. n_layers-2`` run as usual, the last block
    computes keys and values at every position (and writes them all to the cache) but
    its queries, attention, output projection, MLP, final norm and LM head only at the
    slots, each attending over its own row's keys under its own row of the mask. The
    result equals ``apply(...).logits[rows, cols]`` up to float rounding (other matrix
    shapes: the last bits may differ); at ``d_model`` 64, 2 blocks, it skips about a third
    of a forward's multiply-adds when ``N`` is a small part of ``B T``.

    Args:
      params: Model parameters (:func:`init_params` layout, or per-layer from
        :func:`unstack_layers`).
      cfg: Model configuration.
      tokens: ``int[B, T]`` token ids in ``[0, V)`` (others raise); give exactly one
        of ``tokens`` and ``inputs_embeds``.
      positions: Logical RoPE positions ``int[B, T]``; default ``arange(T)``
        without a cache and ``cache.length[:, None] + arange(T)`` with one.
      inputs_embeds: ``[B, T, D]`` embeddings used instead of ``tokens`` (cast to
        the parameters' dtype).
      cache: Optional :class:`KVCache`; the new rows are written at slots
        ``length + arange(T)``, ``length`` is not advanced.
      attn_mask: Optional ``bool[B, T, S]`` overriding the default mask.
      collect: Block indices whose outputs are returned in ``hidden``.
      overflow: New rows past the cache capacity: ``"error"`` (default) raises,
        ``"drop"`` drops them.
      interventions: Optional :class:`~jaxkit.nn.Interventions` (additive edits,
        inserted latents, MLP read sites); None gives the plain forward bit for bit.
      outputs_at: Optional ``(rows, cols)``, two ``int[N]`` arrays with ``rows`` in
        ``[0, B)`` and ``cols`` in ``[0, T)`` (others raise): the logits are returned
        only at those slots, ``[N, V]``, and the last block's output in ``hidden`` (if
        ``collect`` holds it) is ``[N, D]`` at the slots too (the residual stream before
        the final norm: what a router or value head reads). ``interventions.read_mlp``
        may then not hold the last block (its MLP inputs exist at the slots only); the
        last block's edits (an additive vector, inserted latents) are applied at the
        slots, with the same values as the whole forward's edit read there.

    Returns:
      :class:`LMOutput` ``(logits [B,T,V], cache, hidden, reads)`` (``logits [N, V]``
      with ``outputs_at``).

    Raises:
      TypeError: wrong types or shapes (an intervention of the wrong shape, ``outputs_at``
        not a pair of integer ``[N]`` arrays of one shape).
      ValueError: If both or neither of ``tokens`` and ``inputs_embeds`` are given,
        a token id is outside ``[0, V)``, an intervention layer is outside
        ``[0, n_layers)``, an ``outputs_at`` index is out of range,
        ``interventions.read_mlp`` holds the last block with ``outputs_at``, or
        (``overflow="error"``) the new rows do not fit in the cache (a ``cache.length``
        outside ``[0, S - T]``: a negative one too).
    """
    check_cfg(cfg)
    check_overflow(overflow)
    if (tokens is None) == (inputs_embeds is None):
        raise ValueError("give exactly one of `tokens` and `inputs_embeds`.")
    check_params(params, cfg)
    if tokens is not None:
        tokens = guard_tokens(tokens, cfg, ndim=2)
        b, t = tokens.shape
        embeds = None
    else:
        embeds = check_h(inputs_embeds, cfg, "inputs_embeds").astype(params["embed"].dtype)
        b, t = embeds.shape[:2]
    positions, cache, mask = check_inputs(cfg, b, t, positions, cache, attn_mask, overflow)
    _, collect = check_range(0, None, collect, cfg)
    iv = check_iv(interventions, cfg, b, t)
    at = None
    if outputs_at is not None:
        if iv is not None and cfg.n_layers - 1 in iv.read_mlp:
            raise ValueError(
                f"`interventions.read_mlp` may not hold the last block ({cfg.n_layers - 1}) "
                "with `outputs_at`."
            )
        at = check_outputs_at(outputs_at, b, t)
    return apply_core(
        params, tokens, embeds, positions, cache, mask, iv, at, cfg=cfg, collect=collect
    )
