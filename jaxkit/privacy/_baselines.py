"""Baselines with PRISM's interface: naive DP-LoRA, FFA-LoRA, non-private LoRA.

All take per-example gradients (a leading batch axis on every leaf) and return
optax updates. Naive DP-LoRA clips the flat Euclidean norm of the factor
gradients and adds isotropic noise to the factors (its noise on ``Z`` has
energy ``tau^2 (m ||b||^2 + n ||a||^2)`` and depends on the gauge); FFA-LoRA
freezes one factor (Sun et al., ICLR 2024).

References:
  D. Yu et al., "Differentially Private Fine-tuning of Language Models", ICLR 2022.
  Y. Sun et al., "Improving LoRA in Privacy-preserving Federated Learning"
  (FFA-LoRA), ICLR 2024.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, PRNGKeyArray, Real

from jaxkit import _validate
from jaxkit.privacy import _common as C
from jaxkit.privacy._prism import _init_privatize, _next_state
from jaxkit.privacy.lowrank import LoraFactors


@functools.partial(jax.jit, static_argnames=("axis_name",))
def _aggregate_update(updates, state, clip_norm, noise_multiplier, denom, *, axis_name):
    """The body of ``dp_aggregate``'s update, jitted once at module level."""
    leaves, treedef = jax.tree.flatten(updates)
    nd = C.norm_dtype(leaves)
    cn, std, den = C.dp_constants(
        nd, clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=denom
    )
    sq = sum(C.per_example_sq_norm(g, nd) for g in leaves)
    norms = jnp.sqrt(sq)
    alpha = C.clip_factors(norms, cn, nd)
    step_key = jax.random.fold_in(state.key, state.count)
    out = []
    energy = jnp.zeros([], jnp.float32)
    for i, g in enumerate(leaves):
        r, e = C.dense_release(g, alpha, std, den, jax.random.fold_in(step_key, i), axis_name)
        energy = energy + e
        out.append(r.astype(g.dtype))
    return treedef.unflatten(out), _next_state(state, energy, den)


def dp_aggregate(
    *,
    clip_norm: Real[ArrayLike, ""],
    noise_multiplier: Real[ArrayLike, ""],
    denom: Real[ArrayLike, ""],
    key: PRNGKeyArray,
    axis_name: str | None = None,
) -> optax.GradientTransformation:
    """Standard DP-SGD aggregator on the raw parameters (flat clipping).

    ``(1/denom) (sum_i min(1, C/||g_i||) g_i + N(0, sigma^2 C^2 I))`` with the noise
    drawn once after the reduction over ``axis_name`` from ``fold_in(key, step)``.
    ``state.noise_energy`` is the squared norm of the released noise on the
    parameters (not on ``Z``).

    Args:
      clip_norm: ``C`` (> 0; ``inf``, no clipping, only with ``noise_multiplier=0``:
        the noise std is ``sigma C``). Traced bad values raise under ``jit``.
      noise_multiplier: ``sigma`` (>= 0).
      denom: Normaliser (expected batch size).
      key: Base key.
      axis_name: Batch mesh axis inside ``shard_map``.

    Returns:
      An ``optax.GradientTransformation`` with :class:`PrivatizeState`.

    References:
      M. Abadi et al., "Deep Learning with Differential Privacy", CCS 2016.
    """
    C.check_dp_hparams(clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=denom)

    def update(updates, state, params=None):
        C.check_per_example(updates, params)
        return _aggregate_update(
            updates, state, clip_norm, noise_multiplier, denom, axis_name=axis_name
        )

    return optax.GradientTransformation(_init_privatize(key), update)


class AdamState(NamedTuple):
    """Adam moments with an int32 step counter."""

    count: Array
    mu: optax.Updates
    nu: optax.Updates


def _adam(learning_rate, b1, b2, eps) -> optax.GradientTransformation:
    """Adam that casts its int32 counter explicitly (safe under strict dtype promotion).

    Not ``optax.scale_by_adam``: it computes ``decay**count`` with the int32 count,
    a ``TypePromotionError`` under ``jax_numpy_dtype_promotion="strict"`` (optax
    0.2.8, checked), and keeps ``nu`` in the parameter dtype (bf16) where we
    accumulate both moments in f32.
    """
    hps = dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps)
    C.check_opt_hparams(**hps)  # NaN, inf and out-of-range values raise (traced: in update)

    def init(params):
        z = jax.tree.map(lambda p: jnp.zeros_like(p, dtype=C.acc_dtype(p)), params)
        return AdamState(jnp.zeros([], jnp.int32), z, z)

    def update(updates, state, params=None):
        del params
        count = state.count + jnp.ones_like(state.count)
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        lr = C.guard_opt_hparams(jnp.asarray(lr), **hps)

        def one(g, m, v):
            u, m, v = C.adam_direction(g, m, v, count, b1, b2, eps)
            return -jnp.asarray(lr).astype(m.dtype) * u, m, v

        out = jax.tree.map(one, updates, state.mu, state.nu)
        outer = jax.tree.structure(updates)
        u, m, v = jax.tree.transpose(outer, jax.tree.structure((0, 0, 0)), out)
        u = jax.tree.map(lambda x, g: x.astype(g.dtype), u, updates)
        return u, AdamState(count, m, v)

    return optax.GradientTransformation(init, update)


def _dp_adam(learning_rate, dp: dict, adam: tuple, axis_name) -> tuple:
    """``(dp_aggregate(**dp), Adam)``: the DP-Adam pair of both baselines (a flat chain)."""
    return dp_aggregate(**dp, axis_name=axis_name), _adam(learning_rate, *adam)


def naive_dp_lora(
    learning_rate: Real[ArrayLike, ""] | Callable[[Array], Array],
    *,
    clip_norm: Real[ArrayLike, ""],
    noise_multiplier: Real[ArrayLike, ""],
    denom: Real[ArrayLike, ""],
    key: PRNGKeyArray,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    axis_name: str | None = None,
) -> optax.GradientTransformation:
    """Naive DP-LoRA: DP-Adam on the factors ``(a, b)``.

    ``optax.chain(dp_aggregate(...), optax.adam(...))``; same call as
    :func:`jaxkit.privacy.prism` (per-example gradients in, updates out).

    References:
      D. Yu et al., "Differentially Private Fine-tuning of Language Models", ICLR 2022.
    """
    dp = dict(clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=denom, key=key)
    return optax.chain(*_dp_adam(learning_rate, dp, (b1, b2, eps), axis_name))


def _freeze(frozen: str) -> optax.GradientTransformation:
    """Zero the ``frozen`` factor (``'a'`` or ``'b'``) of every LoRA module."""

    def update(updates, state, params=None):
        del params

        def z(u):
            if C.is_lora(u):
                return u._replace(**{frozen: jnp.zeros_like(getattr(u, frozen))})
            return u

        return jax.tree.map(z, updates, is_leaf=C.is_lora), state

    return optax.GradientTransformation(lambda p: optax.EmptyState(), update)


def ffa_lora(
    learning_rate: Real[ArrayLike, ""] | Callable[[Array], Array],
    *,
    clip_norm: Real[ArrayLike, ""],
    noise_multiplier: Real[ArrayLike, ""],
    denom: Real[ArrayLike, ""],
    key: PRNGKeyArray,
    frozen: str = "b",
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    axis_name: str | None = None,
) -> optax.GradientTransformation:
    """FFA-LoRA: one factor frozen, DP-Adam on the other.

    The default freezes ``b`` (the input-side projection, LoRA's ``A``) and trains
    ``a`` (LoRA's ``B``), as in FFA-LoRA; the update is linear in ``Z`` so there is
    no bilinear noise term. Frozen gradients are zeroed before clipping and the
    frozen update is zero.

    References:
      Y. Sun et al., "Improving LoRA in Privacy-preserving Federated Learning", ICLR 2024.
    """
    _validate.one_of(("a", "b"), frozen=frozen)
    dp = dict(clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=denom, key=key)
    dp_adam = _dp_adam(learning_rate, dp, (b1, b2, eps), axis_name)
    return optax.chain(_freeze(frozen), *dp_adam, _freeze(frozen))


def _mean_batch(axis_name: str | None) -> optax.GradientTransformation:
    def update(updates, state, params=None):
        C.check_per_example(updates, params)
        leaves = jax.tree.leaves(updates)
        b = leaves[0].shape[0]
        out = jax.tree.map(lambda g: jnp.sum(g.astype(C.acc_dtype(g)), axis=0), updates)
        if axis_name is not None:
            out = jax.lax.psum(out, axis_name)
            b = b * jax.lax.psum(1, axis_name)
        return jax.tree.map(lambda s, g: (s / b).astype(g.dtype), out, updates), state

    return optax.GradientTransformation(lambda p: optax.EmptyState(), update)


def nonprivate_lora(
    learning_rate: Real[ArrayLike, ""] | Callable[[Array], Array],
    *,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    axis_name: str | None = None,
) -> optax.GradientTransformation:
    """Non-private LoRA with the same interface: batch mean of per-example grads, then Adam."""
    return optax.chain(_mean_batch(axis_name), _adam(learning_rate, b1, b2, eps))


__all__ = ["LoraFactors", "dp_aggregate", "ffa_lora", "naive_dp_lora", "nonprivate_lora"]
