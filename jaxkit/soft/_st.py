"""Straight-through estimators: hard forward value, soft backward gradient.

References:
  Bengio, Léonard & Courville, Estimating or propagating gradients through stochastic
  neurons for conditional computation <https://arxiv.org/abs/1308.3432>, 2013.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax


def _combine(hard: Any, soft: Any) -> Any:
    def one(h, s):
        if s is None:
            return None if h is None else lax.stop_gradient(h)
        h = jnp.asarray(h).astype(jnp.result_type(s))
        same = (h == s) | (jnp.isnan(h) & jnp.isnan(s))
        delta = jnp.where(same, jnp.zeros_like(s), h - s)
        return s + lax.stop_gradient(delta)

    return jax.tree.map(one, hard, soft, is_leaf=lambda v: v is None)


def _check_callable(fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"`fn` must be a callable (a soft operator), got {type(fn).__name__}.")


def st(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Straight-through version of a soft operator with a ``mode`` argument.

    The result equals ``fn(..., mode="hard")`` in value and has the gradient of
    ``fn(..., mode=<requested, default "smooth">)``; works in forward and reverse mode.

    References:
      Bengio et al. 2013 <https://arxiv.org/abs/1308.3432>.
    """
    _check_callable(fn)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        mode = kwargs.pop("mode", "smooth")
        if mode == "hard":
            return fn(*args, mode="hard", **kwargs)
        hard = fn(*args, mode="hard", **kwargs)
        soft = fn(*args, mode=mode, **kwargs)
        return _combine(hard, soft)

    return wrapped


def grad_replace(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Swap forward and backward: ``fn(..., forward=True)`` value, ``forward=False`` gradient."""
    _check_callable(fn)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        fwd = fn(*args, forward=True, **kwargs)
        bwd = fn(*args, forward=False, **kwargs)
        return _combine(fwd, bwd)

    return wrapped
