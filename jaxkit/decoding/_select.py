"""Entropy-based slot selection of the WeDLM decoder.

Tokens themselves are drawn by the fused sampler ``jaxkit.kernels.sampling``.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxkit import _validate
from jaxkit._typing import RealScalarLike


def token_entropy(logits: Float[ArrayLike, "*b V"]) -> Array:
    """Entropy in nats of ``softmax(logits)`` along the last axis, in float32.

    ``logits`` is ``[..., V]``: any leading batch axes (the result has them).

    Jitted like jax.numpy (module level).

    Raises:
      TypeError: non-floating ``logits``, or no vocabulary axis (rank 0 or ``V = 0``).
    """
    _validate.floating(logits, name="logits")  # before jnp.asarray: a str names the argument
    logits = jnp.asarray(logits)
    _check_logits(logits, rank=None)
    return _token_entropy(logits)


def _check_logits(logits: Array, *, rank: int | None) -> None:
    _validate.floating(logits, name="logits")
    if rank is None:
        _validate.min_ndim(logits, 1, name="logits")
    else:
        _validate.ndim(logits, rank, name="logits")
    _validate.nonempty(logits, name="logits", axis=-1, what="vocabulary entry")


@jax.jit
def _token_entropy(logits: Array) -> Array:
    lf = logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(lf, axis=-1)
    p = jnp.exp(logp)
    return -jnp.sum(jnp.where(p > 0, p * logp, jnp.zeros_like(p)), axis=-1)


def select_by_entropy(
    logits: Float[ArrayLike, "B W V"],
    selectable: Bool[ArrayLike, "B W"],
    *,
    threshold: RealScalarLike | None,
    pos_penalty: RealScalarLike,
) -> Array:
    """Slots to fill this step: penalised entropy below ``threshold``, else the argmin.

    ``H~_i = H_i + pos_penalty * (i - leftmost selectable slot)``; every selectable
    slot with ``H~_i < threshold`` is filled; a row with none fills its single
    ``argmin H~`` (progress guarantee). ``threshold=None`` fills exactly one slot
    per row per step. Entropy is taken on the raw logits in float32 (nats).

    Args:
      logits: Window logits in logical slot order, ``[B, W, V]``.
      selectable: Boolean, open mask slots that may be filled.
      threshold: Entropy threshold tau in nats (traced), or ``None``.
      pos_penalty: Distance penalty lambda per slot (traced).

    Returns:
      ``bool[B, W]``, a subset of ``selectable``; empty only for rows without
      selectable slots.

    Raises:
      TypeError: non-floating or rank-not-3 ``logits`` (or ``V = 0``), a non-boolean
        ``selectable`` or one of another shape than ``logits[..., 0]``.
      ValueError: a NaN or infinite ``threshold``, ``pos_penalty`` or entry of
        ``logits`` (a runtime error under ``jit`` when traced).

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM),
      Algorithm 1 and ``wedlm/engine/sampler.py``.
    """
    _validate.floating(logits, name="logits")  # before jnp.asarray: a str names the argument
    _validate.boolean(selectable, name="selectable")
    logits, selectable = jnp.asarray(logits), jnp.asarray(selectable)
    _check_logits(logits, rank=3)
    _validate.shape(selectable, logits.shape[:2], name="selectable")
    _validate.real(pos_penalty, name="pos_penalty")
    _validate.finite_scalar(pos_penalty=pos_penalty)
    logits = _validate.all_finite(logits, name="logits")  # NaN logits: no silent choice
    logits = _validate.guard_finite(logits, pos_penalty, name="pos_penalty")
    if threshold is not None:
        _validate.real(threshold, name="threshold")
        _validate.finite_scalar(threshold=threshold)
        logits = _validate.guard_finite(logits, threshold, name="threshold")
    # the decoder calls _select_by_entropy itself (its values are checked once, up front)
    return _select_by_entropy(logits, selectable, threshold, pos_penalty)


@jax.jit
def _select_by_entropy(logits, selectable, threshold, pos_penalty) -> Array:
    ent = _token_entropy(logits)
    w = ent.shape[1]
    left = jnp.argmax(selectable, axis=1).astype(jnp.int32)
    dist = (jnp.arange(w, dtype=jnp.int32)[None, :] - left[:, None]).astype(jnp.float32)
    score = ent + jnp.asarray(pos_penalty, jnp.float32) * dist
    if threshold is None:
        fill = jnp.zeros_like(selectable)
    else:
        fill = selectable & (score < jnp.asarray(threshold, jnp.float32))
    masked_score = jnp.where(selectable, score, jnp.full_like(score, jnp.inf))
    best = jnp.argmin(masked_score, axis=1)
    fallback = (jnp.arange(w)[None, :] == best[:, None]) & selectable
    none = ~jnp.any(fill, axis=1, keepdims=True)
    return jnp.where(none, fallback, fill)
