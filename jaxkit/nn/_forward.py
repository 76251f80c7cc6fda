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

from jaxkit.nn._attention import dense, rms_norm, take_rows
from jaxkit.nn._blocks import layers_core
from jaxkit.nn._cache import KVCache
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._intervene import Interventions, MLPRead
from jaxkit.nn._intervene import check as check_iv
from jaxkit.nn._params import (
    check_cfg,
    check_h,
    check_inputs,
    check_overflow,
    check_params,
    check_range,
    guard_tokens,
)


class LMOutput(NamedTuple):
    """Output of :func:`apply`.

    Attributes:
      logits: ``[B, T, V]`` in the parameters' dtype.
      cache: The cache with the T new K/V rows written (``length`` NOT advanced),
        or ``None`` when no cache was given.
      hidden: Hidden states ``[B, T, D]`` after each layer listed in ``collect``
        (key ``l`` = output of block ``l``, 0-based, after its interventions).
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


def apply_traced(
    params, tokens, embeds, positions, cache, attn_mask, *, cfg, collect, iv=None, un=True
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
    out = layers_core(
        params,
        cfg,
        h,
        positions,
        cache,
        attn_mask,
        start=0,
        stop=cfg.n_layers,
        collect=collect,
        emit_kv=False,
        iv=iv,
        un=un,
    )
    return LMOutput(unembed_traced(params, cfg, out.h), out.cache, out.hidden, out.reads)


def _apply_core(params, tokens, embeds, positions, cache, attn_mask, iv, *, cfg, collect):
    return apply_traced(
        params, tokens, embeds, positions, cache, attn_mask, cfg=cfg, collect=collect, iv=iv
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
) -> LMOutput:
    """Full forward: embed (or ``inputs_embeds``), all blocks, final norm, LM head.

    Jitted like jax.numpy (module level, ``cfg``/``collect`` static, arrays traced).

    Args:
      params: Model parameters (:func:`init_params` layout).
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

    Returns:
      :class:`LMOutput` ``(logits [B,T,V], cache, hidden, reads)``.

    Raises:
      TypeError: wrong types or shapes (an intervention of the wrong shape).
      ValueError: If both or neither of ``tokens`` and ``inputs_embeds`` are given,
        a token id is outside ``[0, V)``, an intervention layer is outside
        ``[0, n_layers)``, or (``overflow="error"``) the new rows do not fit in the
        cache.
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
    return apply_core(params, tokens, embeds, positions, cache, mask, iv, cfg=cfg, collect=collect)
