"""Shared checks and helpers of the soft samplers in :mod:`jaxkit.soft.random`.

Checks that need concrete values run in the public (un-jitted) wrappers and raise at the
call; the same guards run again inside the jitted cores, where they become run-time
``eqx.error_if`` checks for traced values.
"""

import functools
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import _validate as V
from jaxkit.soft import _st
from jaxkit.soft._common import as_float, check_softness

RANDOM_MODES = ("hard", "_hard", "smooth", "c0", "c1", "c2")
RNG_MODES = (None, "low", "high")
FLOOR = 1e30


def check_sampler(key: Any, mode: str, softness: Any, noise: str, noises: tuple) -> None:
    """Key, mode, noise and (concrete) softness checks shared by every sampler."""
    V.is_key(key)
    V.one_of(RANDOM_MODES, mode=mode)
    V.one_of(noises, noise=noise)
    check_softness(softness)


def guard_soft(x: jax.Array, softness: Any, mode: str) -> jax.Array:
    """``x`` guarded on a traced ``softness`` (soft modes only; use the result)."""
    if mode in ("hard", "_hard"):
        return x
    return V.guard_positive(x, softness, name="softness")


def check_rng_mode(rng_mode: Any, allowed: tuple = RNG_MODES) -> None:
    V.one_of(allowed, rng_mode=rng_mode)


def is_concrete(*values: Any) -> bool:
    return not any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(values))


def int_or_array(a: Any, name: str, low: int) -> jax.Array:
    """``jnp.arange(a)`` for a static int ``a >= low``, else ``a`` as a float array (ndim >= 1)."""
    if isinstance(a, int | bool):
        V.python_int(a, name=name, minimum=low)
        return jnp.arange(a, dtype=jnp.result_type(float))
    arr = as_float(a, name=name)
    if arr.ndim == 0:
        raise TypeError(f"`{name}` must be an int or an array with at least one dimension.")
    return arr


def sample_shape(shape: Any, name: str = "shape") -> tuple[int, ...] | None:
    """A static shape as a tuple of ints (an int means a 1-d shape; ``None`` stays)."""
    if shape is None:
        return None
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    bad = TypeError(f"`{name}` must be a tuple of ints, got {shape!r}.")
    if isinstance(shape, str | bytes):  # int() of each character would parse "12" as (1, 2)
        raise bad
    try:
        shape = tuple(operator.index(s) for s in shape)  # int() would truncate 2.5 to 2
    except TypeError as e:
        raise bad from e
    return shape


def check_broadcast(shape: tuple, batch: tuple, name: str) -> None:
    tail = shape[len(shape) - len(batch) :]
    if len(shape) < len(batch) or jnp.broadcast_shapes(tail, batch) != tail:
        raise ValueError(
            f"`shape` {shape} must be broadcast-compatible with the {name} batch shape {batch}."
        )


def no_nan(x: jax.Array, name: str) -> jax.Array:
    """``x`` guarded against NaN entries (``ValueError`` now, or at run time under jit)."""
    return V.error_if(x, jnp.any(jnp.isnan(x)), f"`{name}` must not contain NaN.")


def finite_floor(logits: jax.Array, name: str = "logits") -> jax.Array:
    """Replace -inf/+inf logits by -/+1e30; NaN raises (documented in the module)."""
    logits = no_nan(logits, name)
    floor = jnp.asarray(-FLOOR, logits.dtype)
    return jnp.where(jnp.isneginf(logits), floor, jnp.where(jnp.isposinf(logits), -floor, logits))


def guard_probabilities(p: jax.Array, name: str = "p", upper: bool = False) -> jax.Array:
    """``p`` guarded to ``[0, 1]`` (``upper``) or ``[0, inf)``; NaN fails."""
    if upper:
        return V.guard_interval(p, p, name=name, low=0.0, high=1.0)
    return V.guard_non_negative(p, p, name=name)


def soft_mode(mode: str) -> str:
    return "hard" if mode == "_hard" else mode


def st_random(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Straight-through sampler: the ``"_hard"`` sample, gradient of the soft ``mode``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        mode = kwargs.pop("mode", "smooth")
        if mode in ("hard", "_hard"):
            return fn(*args, mode=mode, **kwargs)
        hard = fn(*args, mode="_hard", **kwargs)
        soft = fn(*args, mode=mode, **kwargs)
        return _st._combine(hard, soft)

    wrapped.__doc__ = (
        f"Straight-through :func:`{fn.__name__}`: the ``mode='_hard'`` "
        "sample forward, the gradient of ``mode`` (default smooth) backward."
    )
    return wrapped
