"""Shared helpers of ``jaxkit.soft``: validation, dtypes, standardize-and-squash."""

from typing import Any

import jax
import jax.numpy as jnp

from jaxkit import _validate as V
from jaxkit._typing import accumulation_dtype

MODES = ("hard", "smooth", "c0", "c1", "c2")


def check_mode(mode: str, allowed: tuple[str, ...] = MODES) -> None:
    V.one_of(allowed, mode=mode)


def check_softness(softness: Any) -> None:
    """``softness`` must be a real scalar (``TypeError``); a concrete one finite and > 0."""
    V.real(softness, name="softness")
    V.finite_scalar(softness=softness)
    V.positive(softness=softness)


def tied_check(x: jax.Array, check: Any) -> jax.Array:
    """``x - check(0)``: a traced runtime check of float ``x`` carried by a scalar zero.

    ``check`` guards a scalar zero (``eqx.error_if`` inside); subtracting it from ``x`` is
    exact (signed zeros included) and makes every use of ``x`` depend on the check, as
    guarding ``x`` itself does, while the check's conditional carries one scalar instead
    of a copy of ``x`` (the whole-array conditionals of the input and softness checks
    cost about 15-20 % of a soft top-k's fwd+bwd on CPU).
    """
    return x - check(jnp.zeros((), x.dtype))


def guard_softness(x: jax.Array, softness: Any) -> jax.Array:
    """Return ``x`` guarded so that ``softness`` (concrete or traced, NaN included) is > 0.

    The one softness guard of ``jaxkit.soft``: a concrete bad value raises ``ValueError``
    at once, a traced one an ``eqx.error_if`` error at run time (:func:`tied_check`).
    Always use the result.
    """
    check_softness(softness)
    if not isinstance(softness, jax.core.Tracer):
        return V.guard_positive(x, softness, name="softness")
    return tied_check(x, lambda z: V.guard_positive(z, softness, name="softness"))


def as_float(x: Any, *, name: str) -> jax.Array:
    """``x`` as a floating array (integers/bools become the default float).

    A value that is not a numeric array (a string, ``None``) is a ``TypeError`` naming
    ``name``, the public argument (``jaxkit._validate.numeric``).
    """
    V.numeric(**{name: x})
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


compute_dtype = accumulation_dtype  # f64 for f64 inputs, f32 otherwise


def flat_axis(x: jax.Array, axis: int | None) -> tuple[jax.Array, int]:
    """``(x, ax)``: ``x`` flattened when ``axis`` is None (as jax.numpy), ``ax`` normalised."""
    if axis is None:
        x = jnp.ravel(x)
        axis = 0
    return x, V.axis(axis, x.ndim)


def scal(s: Any, dtype: Any) -> jax.Array:
    return jnp.asarray(s).astype(dtype)


def standardize_and_squash(x: jax.Array, axis: int = -1, eps: float = 1e-6):
    """sigma((x - mean) / sqrt(var + eps)) along ``axis``; also returns mean and std."""
    mean = jnp.mean(x, axis=axis, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=axis, keepdims=True)
    std = jnp.sqrt(var + eps)
    return jax.nn.sigmoid((x - mean) / std), mean, std


def unsquash(y: jax.Array, mean: jax.Array, std: jax.Array, eps: float = 1e-10) -> jax.Array:
    """Inverse of :func:`standardize_and_squash` (logit, then rescale)."""
    safe = max(eps, 10 * float(jnp.finfo(y.dtype).eps))
    y = jnp.clip(y, safe, 1.0 - safe)
    return jnp.log(y / (1.0 - y)) * std + mean


broadcastable = V.broadcastable  # the soft modules' name for it
