"""The continuous-time MDLM ELBO: training loss and log-likelihood bound."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate
from jaxkit._typing import KeyArray, PyTree, RealScalarLike, accumulation_dtype
from jaxkit.diffusion import _common
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._schedule import MaskingSchedule, as_schedule


def _uniform(key, like: Array, dtype) -> Array:
    """Uniform draws of ``like``'s shape, sharded like it."""
    sh = jax.typeof(like).sharding
    return jax.random.uniform(key, like.shape, dtype, out_sharding=sh)


def nelbo_terms(apply_fn, params, x0, valid, t, key, *, mask_id, schedule):
    """Per-row ``w(t) * sum_{i masked} -log p(x0_i | z_t)`` (and the logits' dtype)."""
    u = _uniform(key, x0, t.dtype)
    masked = valid & (u < (1.0 - schedule.alpha(t))[:, None])
    z = jnp.where(masked, jnp.int32(mask_id), x0)
    log_p = _common.denoise(apply_fn, params, z, valid, mask_id)
    nll = -_common.gather_log_prob(log_p, x0)
    nll = jnp.where(masked, nll, jnp.zeros_like(nll))  # 0 * inf would be NaN
    return schedule.weight(t).astype(nll.dtype) * jnp.sum(nll, axis=-1)


def _check(apply_fn, params, x0, valid, mask_id, schedule, name="x0"):
    _common.check_apply_fn(apply_fn)
    x0, valid = _common.check_tokens(x0, valid, name=name, allow_mask=False, mask_id=mask_id)
    schedule = as_schedule(schedule)
    vocab = _common.checked_vocab(
        apply_fn, params, x0, valid, name=name, allow_mask=False, mask_id=mask_id
    )
    return x0, valid, schedule, vocab


def mdlm_loss(
    apply_fn: ApplyFn,
    params: PyTree,
    x0: Int[ArrayLike, "B L"],
    *,
    key: KeyArray,
    mask_id: int,
    schedule: MaskingSchedule | str = "loglinear",
    valid: Bool[ArrayLike, "B L"] | None = None,
    t_min: RealScalarLike = 1e-3,
) -> Float[Array, ""]:
    """Monte-Carlo estimate of the continuous-time MDLM negative ELBO, mean over rows.

    ``-log p(x0) <= E_{t ~ U(0,1)} [ w(t) sum_{i masked in z_t} -log p_theta(x0_i | z_t) ]``
    with ``z_t`` masking each valid position independently with probability
    ``1 - alpha(t)`` and ``w(t) = -alpha'(t) / (1 - alpha(t))`` (``1/t`` for the
    linear and log-linear schedules). Times are stratified over the batch
    (``t_b = t_min + (1 - t_min) ((u + b) / B mod 1)``, MDLM's low-discrepancy
    sampler); ``t_min`` cuts the ``1/t`` tail (biased by ``O(t_min)``; 0 is exact).
    The denoiser's ``[MASK]`` logit is set to ``-inf`` (SUBS parameterisation);
    padding (``valid = False``) is never masked and attends nowhere.

    Jitted like jax.numpy (module level; ``apply_fn``, ``mask_id`` and ``schedule``
    static, so pass the same ``apply_fn`` object, e.g. from
    :func:`transformer_denoiser`, to hit the compile cache).

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits [B, L, V]``.
      params: Denoiser parameters.
      x0: ``int[B, L]`` clean sequences, ids in ``[0, V)`` other than ``mask_id``.
      key: PRNG key.
      mask_id: Id of ``[MASK]`` (a row of the vocabulary).
      schedule: A :class:`MaskingSchedule` or its kind name.
      valid: ``bool[B, L]`` non-padding positions (default all).
      t_min: Smallest time, in [0, 1) (traced).

    Returns:
      Scalar loss (nats per sequence) in the logits' dtype.

    Raises:
      TypeError: Non-integer or non-rank-2 ``x0``, ``valid`` of another shape, ``key``
        not a PRNG key.
      ValueError: Token ids outside the alphabet, ``mask_id`` outside the vocabulary,
        ``t_min`` outside [0, 1) (NaN included; a runtime error under ``jit``).

    References:
      Sahoo et al., Simple and Effective Masked Diffusion Language Models, NeurIPS 2024.
    """
    _validate.is_key(key)
    x0, valid, schedule, vocab = _check(apply_fn, params, x0, valid, mask_id, schedule)
    t_min = _validate.guard_interval(
        _validate.real_array(t_min, name="t_min"),
        t_min,
        name="t_min",
        low=0.0,
        high=1.0,
        closed="left",
    )
    return _mdlm_loss(apply_fn, params, x0, valid, key, t_min, mask_id, schedule, vocab)


@functools.partial(jax.jit, static_argnames=("apply_fn", "mask_id", "schedule", "vocab"))
def _mdlm_loss(apply_fn, params, x0, valid, key, t_min, mask_id, schedule, vocab):
    x0 = _common.guard_alphabet(x0, x0, vocab, name="x0", allow_mask=False, mask_id=mask_id)
    kt, km = jax.random.split(key)
    b = x0.shape[0]
    acc = accumulation_dtype(_logits_dtype(params))
    u0 = jax.random.uniform(kt, (), acc)
    strat = jnp.mod(u0 + jnp.arange(b, dtype=acc) / b, 1.0)
    t_min = jnp.asarray(t_min, acc)
    t = t_min + (1.0 - t_min) * (jnp.zeros_like(x0[:, 0], dtype=acc) + strat)
    t = jnp.maximum(t, jnp.finfo(acc).tiny)
    terms = nelbo_terms(apply_fn, params, x0, valid, t, km, mask_id=mask_id, schedule=schedule)
    return jnp.mean(terms).astype(_logits_dtype(params))


def _logits_dtype(params) -> jnp.dtype:
    floats = [a.dtype for a in jax.tree.leaves(params) if jnp.issubdtype(a.dtype, jnp.floating)]
    return jnp.result_type(*floats) if floats else jnp.dtype(jnp.float32)


def log_likelihood_bound(
    apply_fn: ApplyFn,
    params: PyTree,
    x0: Int[ArrayLike, "B L"],
    *,
    key: KeyArray,
    mask_id: int,
    num_samples: int = 64,
    schedule: MaskingSchedule | str = "linear",
    valid: Bool[ArrayLike, "B L"] | None = None,
) -> Float[Array, " B"]:
    """A Monte-Carlo lower bound on ``log p(x0)`` per row (the negated ELBO estimate).

    Averages ``num_samples`` stratified times ``t_j = (u + j) / num_samples`` per
    row (no ``t_min`` cut, so the estimate is unbiased for the continuous-time
    bound). With a schedule where ``alpha(1) = 0`` (``"linear"``, ``"cosine"``) the
    bound is exact when the denoiser returns the true conditionals of a joint
    distribution: then it equals ``log p(x0)``.

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits``.
      params: Denoiser parameters.
      x0: ``int[B, L]`` clean sequences.
      key: PRNG key.
      mask_id: Id of ``[MASK]``.
      num_samples: Times per row (static).
      schedule: A :class:`MaskingSchedule` or its kind name.
      valid: ``bool[B, L]`` non-padding positions.

    Returns:
      ``float[B]`` (the logits' dtype).

    Raises:
      TypeError, ValueError: As :func:`mdlm_loss`.
    """
    _validate.is_key(key)
    x0, valid, schedule, vocab = _check(apply_fn, params, x0, valid, mask_id, schedule)
    num_samples = _validate.python_int(num_samples, name="num_samples", minimum=1)
    return _bound(apply_fn, params, x0, valid, key, mask_id, schedule, vocab, num_samples)


@functools.partial(
    jax.jit, static_argnames=("apply_fn", "mask_id", "schedule", "vocab", "num_samples")
)
def _bound(apply_fn, params, x0, valid, key, mask_id, schedule, vocab, num_samples):
    x0 = _common.guard_alphabet(x0, x0, vocab, name="x0", allow_mask=False, mask_id=mask_id)
    acc = accumulation_dtype(_logits_dtype(params))
    kt, km = jax.random.split(key)
    u0 = _uniform(kt, x0[:, 0], acc)

    def one(total, j):
        t = jnp.mod(u0 + j.astype(acc) / num_samples, 1.0)
        t = jnp.maximum(t, jnp.finfo(acc).tiny)
        k = jax.random.fold_in(km, j)
        terms = nelbo_terms(apply_fn, params, x0, valid, t, k, mask_id=mask_id, schedule=schedule)
        return total + terms.astype(acc), None

    total, _ = jax.lax.scan(one, jnp.zeros_like(u0), jnp.arange(num_samples))
    return (-total / num_samples).astype(_logits_dtype(params))
