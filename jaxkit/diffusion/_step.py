"""The TD3B objective on a buffer and its jitted optimisation step."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array

from jaxkit import _validate
from jaxkit._optim import optax_update
from jaxkit._typing import KeyArray, PyTree, RealScalarLike, accumulation_dtype
from jaxkit.diffusion import _common
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._loss import _logits_dtype
from jaxkit.diffusion._td3b import (
    REDUCTIONS,
    EmbedFn,
    _check_direction,
    _contrastive,
    kl_terms,
    wdce_terms,
)


class Buffer(NamedTuple):
    """Samples with their scores and importance weights (one row per sample).

    Attributes:
      tokens: ``int32[N, L]`` sequences.
      unmask_step: ``int32[N, L]`` from the sampler's :class:`Trajectory` (to re-score paths).
      valid: ``bool[N, L]`` non-padding slots.
      direction: ``int32[N]`` the requested direction ``d*`` each sample was collected for.
      affinity: ``float32[N]`` oracle affinity ``g``.
      p_agonist: ``float32[N]`` direction oracle ``f``.
      reward: ``float32[N]`` gated reward ``S``.
      log_ratio: ``float32[N]`` ``sum_path (log p_pre - log p_theta)`` under the policy
        that produced (or last re-scored) the row.
      log_w: ``float32[N]`` importance log-weights (unnormalised).
    """

    tokens: Array
    unmask_step: Array
    valid: Array
    direction: Array
    affinity: Array
    p_agonist: Array
    reward: Array
    log_ratio: Array
    log_w: Array


_ROW_FIELDS = ("direction", "affinity", "p_agonist", "reward", "log_ratio", "log_w")


def check_buffer(buffer, *, name: str = "buffer") -> Buffer:
    """``buffer`` a :class:`Buffer` with integer ``unmask_step`` and ``direction`` of +1/-1.

    Every field's shape is checked against ``tokens``' ``[N, L]`` (static, a TypeError
    naming the field): ``unmask_step`` and ``valid`` ``[N, L]``, the others ``[N]``, so a
    field of another rank never broadcasts silently (checked whether or not the caller
    reads it: the buffer is one object passed between functions).
    ``direction`` (any real dtype, one per row; another value raises under the guard, as
    :func:`contrastive_margin`'s ``labels``) comes back guarded: use the result.
    """
    if not isinstance(buffer, Buffer):
        raise TypeError(f"`{name}` must be a Buffer, got {type(buffer).__name__}.")
    _validate.integer(buffer.tokens, name=f"{name}.tokens")
    _validate.ndim(buffer.tokens, 2, name=f"{name}.tokens")
    _validate.integer(buffer.unmask_step, name=f"{name}.unmask_step")
    nl = np.shape(buffer.tokens)
    for field in ("unmask_step", "valid"):
        _validate.shape(getattr(buffer, field), nl, name=f"{name}.{field}")
    _validate.boolean(buffer.valid, name=f"{name}.valid")
    for field in _ROW_FIELDS:  # one per row (_check_direction would take a scalar too)
        _validate.shape(getattr(buffer, field), nl[:1], name=f"{name}.{field}")
    d = _check_direction(buffer.direction, buffer.direction, name=f"{name}.direction")
    return buffer._replace(direction=d)


def _pool(embed_fn, params, tokens, valid):
    pos, attn = _common.positions_and_mask(tokens, valid)
    h = embed_fn(params, tokens, pos, attn)
    acc = accumulation_dtype(h.dtype)
    m = valid.astype(acc)[..., None]
    return (jnp.sum(h.astype(acc) * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)).astype(
        h.dtype
    )


class _Weights(NamedTuple):
    """The traced hyperparameters of the TD3B objective."""

    kl_weight: RealScalarLike
    contrastive_weight: RealScalarLike
    margin: RealScalarLike
    lam_clip: RealScalarLike


class _Static(NamedTuple):
    """The static (hashed) options of the TD3B objective."""

    mask_id: int
    replicates: int
    reduction: str
    adaptive: bool


def _objective(params, apply_fn, embed_fn, ref_params, buffer, key, hp: _Weights, st: _Static):
    kw, kk = jax.random.split(key)
    wdce, wbar = wdce_terms(
        apply_fn,
        params,
        buffer.tokens,
        buffer.log_w,
        buffer.valid,
        kw,
        mask_id=st.mask_id,
        replicates=st.replicates,
        lam_clip=hp.lam_clip,
        reduction=st.reduction,
    )
    acc = wdce.dtype
    kl = kl_terms(apply_fn, params, ref_params, buffer.tokens, buffer.valid, kk, mask_id=st.mask_id)
    if embed_fn is None:
        ctr = jnp.zeros((), acc)
    else:
        emb = _pool(embed_fn, params, buffer.tokens, buffer.valid)
        ctr = _contrastive(emb, buffer.direction, hp.margin, adaptive=st.adaptive).astype(acc)
    loss = (
        wdce + jnp.asarray(hp.kl_weight, acc) * kl + jnp.asarray(hp.contrastive_weight, acc) * ctr
    )
    metrics = {
        "loss": loss,
        "wdce": wdce,
        "kl": kl,
        "contrastive": ctr,
        "ess": 1.0 / jnp.sum(wbar * wbar),
    }
    return loss, metrics


def _prepare(apply_fn, params, buffer, key, hp: _Weights, st: _Static):
    """Checks shared by :func:`td3b_loss` and :func:`td3b_train_step`.

    Returns the checked buffer and the static options (``replicates`` as a Python int).
    """
    _validate.is_key(key)
    _common.check_apply_fn(apply_fn)
    buffer = check_buffer(buffer)
    tokens, _ = _common.check_tokens(
        buffer.tokens, buffer.valid, name="buffer.tokens", allow_mask=False, mask_id=st.mask_id
    )
    _common.checked_vocab(
        apply_fn,
        params,
        tokens,
        buffer.valid,
        name="buffer.tokens",
        allow_mask=False,
        mask_id=st.mask_id,
    )
    replicates = _validate.python_int(st.replicates, name="replicates", minimum=1)
    _validate.one_of(REDUCTIONS, reduction=st.reduction)
    adaptive = _validate.flag(st.adaptive, name="adaptive_margin")  # static: Python bool
    for name in ("kl_weight", "contrastive_weight"):
        _validate.real(getattr(hp, name), name=name)
    guarded = _validate.all_finite(buffer.log_w, name="buffer.log_w")
    guarded = _validate.guard_non_negative(guarded, hp.kl_weight, name="kl_weight")
    guarded = _validate.guard_non_negative(
        guarded, hp.contrastive_weight, name="contrastive_weight"
    )
    guarded = _validate.guard_positive(guarded, hp.margin, name="margin")
    guarded = _validate.guard_positive(guarded, hp.lam_clip, name="lam_clip")
    st = st._replace(replicates=replicates, adaptive=adaptive)
    return buffer._replace(log_w=guarded, tokens=tokens), st


def td3b_loss(
    apply_fn: ApplyFn,
    embed_fn: EmbedFn | None,
    params: PyTree,
    ref_params: PyTree,
    buffer: Buffer,
    *,
    key: KeyArray,
    mask_id: int,
    replicates: int = 4,
    kl_weight: RealScalarLike = 0.1,
    contrastive_weight: RealScalarLike = 0.1,
    margin: RealScalarLike = 1.0,
    lam_clip: RealScalarLike = 1e5,
    reduction: str = "sum_weights",
    adaptive_margin: bool = True,
) -> tuple[Array, dict[str, Array]]:
    """``L = L_WDCE + contrastive_weight * L_ctr + kl_weight * L_KL`` on a buffer.

    ``L_WDCE`` is :func:`wdce_loss` with ``buffer.log_w``; ``L_KL`` is
    :func:`kl_to_reference`; ``L_ctr`` is :func:`contrastive_margin` (adaptive
    margin) on the mean-pooled ``embed_fn`` features of the policy with labels
    ``buffer.direction`` (the requested ``d*``); ``embed_fn=None`` turns it off.

    Jitted like jax.numpy (``apply_fn``, ``embed_fn``, ``mask_id``, ``replicates``,
    ``reduction`` static; the weights traced).

    Returns:
      ``(loss, metrics)`` (``adaptive_margin``: the margin ``max(margin, 1.5 mean
      dissimilar distance)``, no gradient through it); metrics: ``loss``, ``wdce``, ``kl``,
      ``contrastive``,
      ``ess`` (effective sample size of the normalised weights, in [1, N]).

    Raises:
      TypeError: A buffer field not shaped as ``buffer.tokens``' ``[N, L]`` (``[N]`` per
        row; any rank other than that too), a non-integer ``buffer.unmask_step``; ``key``
        not a PRNG key.
      ValueError: Token ids outside the alphabet, a ``buffer.direction`` not +1 or -1,
        non-finite ``buffer.log_w``, negative weights, unknown ``reduction``.

    References:
      TD3B (ICML 2026; code chq1155/TD3B_ICML, ``td3b_losses.py``); TR2-D2 (WDCE).
    """
    hp = _Weights(kl_weight, contrastive_weight, margin, lam_clip)
    st = _Static(mask_id, replicates, reduction, adaptive_margin)
    buffer, st = _prepare(apply_fn, params, buffer, key, hp, st)
    return _loss_core(apply_fn, embed_fn, params, ref_params, buffer, key, hp, st)


@functools.partial(jax.jit, static_argnames=("apply_fn", "embed_fn", "st"))
def _loss_core(apply_fn, embed_fn, params, ref_params, buffer, key, hp, st):
    loss, m = _objective(params, apply_fn, embed_fn, ref_params, buffer, key, hp, st)
    dt = _logits_dtype(params)
    return loss.astype(dt), {k: v.astype(dt) for k, v in m.items()}


def td3b_train_step(
    apply_fn: ApplyFn,
    embed_fn: EmbedFn | None,
    optimizer: optax.GradientTransformation,
    params: PyTree,
    opt_state: optax.OptState,
    ref_params: PyTree,
    buffer: Buffer,
    *,
    key: KeyArray,
    mask_id: int,
    replicates: int = 4,
    kl_weight: RealScalarLike = 0.1,
    contrastive_weight: RealScalarLike = 0.1,
    margin: RealScalarLike = 1.0,
    lam_clip: RealScalarLike = 1e5,
    reduction: str = "sum_weights",
    adaptive_margin: bool = True,
) -> tuple[PyTree, optax.OptState, dict[str, Array]]:
    """One optimiser step on :func:`td3b_loss` (pure; one module-level ``jit``).

    ``optimizer`` is static (keep one object, e.g. ``optax.adamw(3e-4)`` chained
    with ``optax.clip_by_global_norm(1.0)``, across calls to hit the cache).

    Returns:
      ``(params, opt_state, metrics)`` with the metrics of :func:`td3b_loss`
      (``ess`` included) evaluated at the parameters before the update.

    Raises:
      TypeError: an ``opt_state`` that is not ``optimizer.init(params)``'s tree and
        shapes; otherwise as :func:`td3b_loss`.
    """
    hp = _Weights(kl_weight, contrastive_weight, margin, lam_clip)
    st = _Static(mask_id, replicates, reduction, adaptive_margin)
    buffer, st = _prepare(apply_fn, params, buffer, key, hp, st)
    return _step_core(
        apply_fn, embed_fn, optimizer, params, opt_state, ref_params, buffer, key, hp, st
    )


@functools.partial(jax.jit, static_argnames=("apply_fn", "embed_fn", "optimizer", "st"))
def _step_core(apply_fn, embed_fn, optimizer, params, opt_state, ref_params, buffer, key, hp, st):
    (_, metrics), grads = jax.value_and_grad(_objective, has_aux=True)(
        params, apply_fn, embed_fn, ref_params, buffer, key, hp, st
    )
    params, opt_state = optax_update(optimizer, grads, opt_state, params)  # user optimizer
    return params, opt_state, metrics
