"""Shared helpers of the privacy transforms: pytree walking, stacked vmaps, checks."""

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype
from jaxkit.privacy.lowrank import LoraFactors


def is_lora(x: Any) -> bool:
    """Whether ``x`` is a LoRA module node (a :class:`LoraFactors`)."""
    return isinstance(x, LoraFactors)


def stackmap(fn: Callable, n: int) -> Callable:
    """``vmap`` ``fn`` over ``n`` leading (stacked-layer) axes of every argument."""
    for _ in range(n):
        fn = jax.vmap(fn)
    return fn


def stackloop(fn: Callable, n: int) -> Callable:
    """``fn`` mapped over ``n`` leading (stacked-layer) axes one slice at a time (``lax.map``).

    For functions that call LAPACK (QR, SVD, eigh). Under ``vmap`` those become
    batched LAPACK custom calls, and jaxlib's CPU kernels split a batch whose work
    passes a threshold (about ``2e5`` FLOP: e.g. two ``256 x 16`` QRs) into chunks
    scheduled on the XLA intra-op thread pool, then block the calling pool worker
    until the chunks finish. When as many such calls run concurrently as the pool
    has threads (two on a 2-core machine), every worker waits on chunks that no
    free worker can run: the program deadlocks (futex wait, 0% CPU; jax 0.10.2).
    One slice per call keeps each LAPACK call unbatched, so it runs inline.
    """
    for _ in range(n):
        fn = functools.partial(_map_leading, fn)
    return fn


def _map_leading(fn: Callable, *args: Any) -> Any:
    return jax.lax.map(lambda xs: fn(*xs), args)


def n_stack(p: LoraFactors) -> int:
    """Number of leading stacked axes of a factor pair."""
    return p.a.ndim - 2


def stack_keys(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """One key per stacked slice (a scalar key when ``shape == ()``).

    ``[*shape]`` typed keys, or ``[*shape, 2]`` for a legacy ``uint32[2]`` key.
    """
    if not shape:
        return key
    keys = jax.random.split(key, math.prod(shape))
    return keys.reshape(shape + keys.shape[1:])


def scalar_std(noise_multiplier: Any, clip_norm: Any, denom: Any) -> jax.Array:
    """``sigma C / denom`` as f32, 0 when ``sigma == 0`` (also for ``C = inf``)."""
    s = jnp.asarray(noise_multiplier, jnp.float32)
    c = jnp.asarray(clip_norm, jnp.float32)
    d = jnp.asarray(denom, jnp.float32)
    return jnp.where(s == 0, jnp.zeros_like(s), s * c / d)


_INF_CLIP = (
    "`clip_norm` must be finite when `noise_multiplier` > 0 (the noise std is "
    "noise_multiplier * clip_norm); clip_norm=inf (no clipping) is allowed only with "
    "noise_multiplier=0"
)


def check_dp_hparams(*, clip_norm: Any, noise_multiplier: Any, denom: Any) -> None:
    """Concrete-value checks shared by every DP aggregator (at construction).

    ``clip_norm`` must be > 0 (``inf`` only without noise), ``noise_multiplier``
    finite and >= 0, ``denom`` finite and > 0; NaN fails. Traced values are checked
    in ``update`` by :func:`guard_dp_hparams`.
    """
    for name, v in (("clip_norm", clip_norm), ("noise_multiplier", noise_multiplier)):
        _validate.real(v, name=name)
    _validate.positive(clip_norm=clip_norm)
    _validate.non_negative(noise_multiplier=noise_multiplier)
    _validate.finite_scalar(noise_multiplier=noise_multiplier)
    _validate.positive(denom=denom)
    _validate.finite_scalar(denom=denom)
    c, s = _validate._concrete(clip_norm), _validate._concrete(noise_multiplier)
    if c is not None and s is not None and np.isinf(c) and s > 0:
        raise ValueError(f"{_INF_CLIP}, got clip_norm={float(c)}, noise_multiplier={float(s)}.")


def guard_dp_hparams(x: Any, *, clip_norm: Any, noise_multiplier: Any, denom: Any) -> Any:
    """Return ``x`` guarded by the checks of :func:`check_dp_hparams`, eagerly or traced.

    Under ``jit`` a negative, zero or NaN ``clip_norm`` (or a bad ``noise_multiplier``,
    ``denom``, or ``clip_norm=inf`` with noise) is an ``eqx.error_if`` runtime error
    instead of a silent wrong release. Always use the result.
    """
    c = jnp.asarray(clip_norm)
    x = _validate.error_if(x, ~(c > 0), "`clip_norm` must be > 0 (inf: no clipping), got NaN/<= 0.")
    x = _validate.guard_non_negative(x, noise_multiplier, name="noise_multiplier")
    x = _validate.guard_positive(x, denom, name="denom")
    return _validate.error_if(
        x, jnp.isinf(c) & (jnp.asarray(noise_multiplier) > 0), _INF_CLIP + "."
    )


def dp_constants(nd: Any, *, clip_norm: Any, noise_multiplier: Any, denom: Any) -> tuple:
    """``(C, sigma C, denom)`` of a DP update: ``C`` and the guarded ``denom`` in ``nd``.

    The noise std ``sigma C`` is f32 (:func:`scalar_std` with ``denom=1``); ``denom``
    carries the :func:`guard_dp_hparams` checks, so always use the returned value.
    """
    cn = jnp.asarray(clip_norm).astype(nd)
    std = scalar_std(noise_multiplier, clip_norm, 1.0)
    den = guard_dp_hparams(
        jnp.asarray(denom).astype(nd),
        clip_norm=clip_norm,
        noise_multiplier=noise_multiplier,
        denom=denom,
    )
    return cn, std, den


def clip_factors(norms: jax.Array, cn: jax.Array, nd: Any) -> jax.Array:
    """Per-example clip factors ``min(1, C / ||g_i||)`` (a zero norm gives 1)."""
    return jnp.minimum(1.0, cn / jnp.maximum(norms, jnp.finfo(nd).tiny))


def per_example_sq_norm(g: jax.Array, nd: Any) -> jax.Array:
    """``||g_i||^2`` over all but the leading (batch) axis, accumulated wide, in ``nd``."""
    return jnp.sum(jnp.square(g.astype(acc_dtype(g))), axis=tuple(range(1, g.ndim))).astype(nd)


def dense_release(g, alpha, std, den, key, axis_name) -> tuple[jax.Array, jax.Array]:
    """``((sum_i alpha_i g_i + z) / denom, ||z||^2)`` for a dense leaf, ``z ~ N(0, std^2)``.

    The clipped sum is reduced over ``axis_name`` and checked finite before the noise
    (drawn from ``key``) is added; the result is in the accumulation dtype (cast it back).
    """
    acc = acc_dtype(g)
    s = weighted_sum(alpha.astype(acc), g.astype(acc))
    if axis_name is not None:
        s = jax.lax.psum(s, axis_name)
    s = guard_finite_sum(s)
    z = std.astype(acc) * jax.random.normal(key, s.shape, acc)
    return (s + z) / den.astype(acc), jnp.sum(jnp.square(z)).astype(jnp.float32)


def check_per_example(grads: Any, params: Any) -> int:
    """Check ``grads`` mirrors ``params`` with one extra leading batch axis; return it."""
    if params is None:
        raise ValueError("`params` must be given (the current LoRA factors / parameters).")
    pl = jax.tree.leaves(params)
    try:
        gl = jax.tree.leaves(jax.tree.map(lambda _, g: g, params, grads))
    except ValueError as e:
        raise TypeError(
            f"`updates` (per-example gradients) must have the structure of `params`: {e}"
        ) from None
    if not gl:
        raise ValueError("`params` has no array leaves.")
    b = jnp.shape(gl[0])[0] if jnp.ndim(gl[0]) else None
    for p, g in zip(pl, gl, strict=True):
        if (
            jnp.ndim(g) != jnp.ndim(p) + 1
            or jnp.shape(g)[1:] != jnp.shape(p)
            or (jnp.shape(g)[0] != b)
        ):
            raise TypeError(
                "`updates` must be per-example gradients: each leaf of shape "
                f"[batch, *param.shape]; got {jnp.shape(g)} for a parameter of shape "
                f"{jnp.shape(p)}."
            )
    if b == 0:  # the per-example norms' reshapes and the clipped mean need one
        raise TypeError("`updates` must hold at least one example, got a batch of 0.")
    return int(b)


def acc_dtype(x: Any) -> jnp.dtype:
    """Accumulation dtype for ``x`` (f32, f64 for f64)."""
    return jnp.dtype(accumulation_dtype(jnp.result_type(x)))


def cast_like(x: jax.Array, like: jax.Array) -> jax.Array:
    """``x`` cast to the dtype of ``like``."""
    return x.astype(jnp.result_type(like))


def guard_finite_sum(total: jax.Array) -> jax.Array:
    """Runtime error naming ``updates`` if a (reduced) clipped sum is not finite.

    Applied after the cross-device reduction (the value is then the same on every
    device, as ``shard_map`` requires); a NaN or inf in any per-example gradient
    makes the clipped sum non-finite.
    """
    return _validate.error_if(
        total,
        ~jnp.all(jnp.isfinite(total)),
        "`updates` (per-example gradients) must be finite (no NaN or inf).",
    )


def norm_dtype(leaves: list[Any]) -> jnp.dtype:
    """f64 if any leaf is f64, else f32 (dtype of per-example norms and clip factors)."""
    if any(jnp.result_type(x) == jnp.float64 for x in leaves):
        return jnp.dtype(jnp.float64)
    return jnp.dtype(jnp.float32)


def weighted_sum(w: ArrayLike, g: ArrayLike) -> jax.Array:
    """``sum_i w_i g_i`` over the leading axis (a reduction, fine on a sharded batch axis).

    Written as a contraction (one GEMV), not ``sum(g * w[:, None, ...], axis=0)``: XLA's
    CPU back end lowers that multiply-reduce over the leading axis to a fusion measured
    about 100x slower (19 ms vs 0.15 ms for ``[64, 2, 256, 16]``, jax 0.10.2).
    """
    w, g = jnp.asarray(w), jnp.asarray(g)
    spec = getattr(jax.typeof(g).sharding, "spec", None)
    if spec and spec[0] is not None:  # batch sharded under an Explicit mesh: a reduction
        return jnp.sum(g * w.reshape((-1,) + (1,) * (g.ndim - 1)), axis=0)
    return jnp.einsum("b,b...->...", w.astype(g.dtype), g)


def adam_direction(g: jax.Array, m: jax.Array, v: jax.Array, t: jax.Array, b1, b2, eps):
    """One Adam step in the moments' dtype: ``(direction, m', v')`` at step ``t`` (>= 1).

    ``direction = m_hat / (sqrt(v_hat) + eps)`` with bias-corrected moments; the int
    count is cast explicitly (strict dtype promotion).
    """
    acc = m.dtype
    t = t.astype(acc)
    b1_, b2_ = jnp.asarray(b1, acc), jnp.asarray(b2, acc)
    g = g.astype(acc)
    m = b1_ * m + (1 - b1_) * g
    v = b2_ * v + (1 - b2_) * g * g
    return (m / (1 - b1_**t)) / (jnp.sqrt(v / (1 - b2_**t)) + jnp.asarray(eps, acc)), m, v


# name -> (low, high, closed) of the optimizers' continuous hyperparameters; NaN fails each
OPT_RANGES = {
    "b1": (0.0, 1.0, "left"),
    "b2": (0.0, 1.0, "left"),
    "eps": (0.0, math.inf, "neither"),
    "floor_factor": (0.0, math.inf, "left"),
    "cond_max": (0.0, math.inf, "right"),  # inf: no clamp
    "weight_decay": (0.0, math.inf, "left"),
    "noise_std": (0.0, math.inf, "left"),
    "learning_rate": (-math.inf, math.inf, "neither"),
}


def check_opt_hparams(**values: Any) -> None:
    """Concrete checks of optimizer hyperparameters (``OPT_RANGES``; at construction).

    A schedule (a callable ``learning_rate``) is skipped; traced values are guarded in
    ``update`` by :func:`guard_opt_hparams`.
    """
    for name, v in values.items():
        if name == "learning_rate" and callable(v):
            continue
        _validate.real(v, name=name)
        if jnp.ndim(v) != 0:
            raise TypeError(f"`{name}` must be a scalar, got shape {jnp.shape(v)}.")
        low, high, closed = OPT_RANGES[name]
        _validate.in_interval(low=low, high=high, closed=closed, **{name: v})


def guard_opt_hparams(x: Any, **values: Any) -> Any:
    """``x`` guarded so that a traced hyperparameter outside ``OPT_RANGES`` raises under jit.

    Concrete values (checked at construction) add nothing to the program.
    """
    for name, v in values.items():
        if isinstance(v, jax.core.Tracer):
            low, high, closed = OPT_RANGES[name]
            x = _validate.guard_interval(x, v, name=name, low=low, high=high, closed=closed)
    return x


def check_rcond(rcond: Any) -> None:
    """ValueError unless the pseudo-inverse cut-off is a finite value >= 0 (when concrete)."""
    _validate.real(rcond, name="rcond")
    _validate.finite_scalar(rcond=rcond)
    _validate.non_negative(rcond=rcond)
