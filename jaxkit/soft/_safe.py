"""Autograd-safe math (double-``where``): finite values and gradients at the boundary.

Every public function is jitted like jax.numpy (module level, static choices static,
arrays and continuous hyperparameters traced), its arguments checked on the host first
(:func:`jaxkit._jit.checked_jit`).

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._jit import checked_jit
from jaxkit.soft._common import as_float, broadcastable


def _positive_only(f, x):
    """``f(x)`` where ``x > 0``, 0 elsewhere; ``f`` never sees ``x <= 0`` (finite gradients)."""
    x = as_float(x, name="x")
    pos = x > 0
    return jnp.where(pos, f(jnp.where(pos, x, 1.0)), 0.0).astype(x.dtype)


def _inside_unit(f, x, outside):
    """``f(x)`` where ``|x| < 1``, ``outside(x)`` elsewhere; ``f`` never sees ``|x| >= 1``."""
    x = as_float(x, name="x")
    inside = jnp.abs(x) < 1
    return jnp.where(inside, f(jnp.where(inside, x, 0.0)), outside(x)).astype(x.dtype)


@checked_jit(arrays=("x",))
def sqrt(x: ArrayLike) -> Array:
    """``sqrt(x)`` for ``x > 0``, 0 elsewhere; the gradient is 0 (not inf/NaN) at ``x <= 0``.

    Elementwise: ``x`` of any shape.
    """
    return _positive_only(jnp.sqrt, x)


@checked_jit(arrays=("x",))
def log(x: ArrayLike) -> Array:
    """``log(x)`` for ``x > 0``, 0 elsewhere, with NaN-free gradients (elementwise, any shape)."""
    return _positive_only(jnp.log, x)


@checked_jit(arrays=("x", "y"))
def div(x: ArrayLike, y: ArrayLike) -> Array:
    """``x / y`` where ``y != 0``, 0 elsewhere, with NaN-free gradients.

    Elementwise: ``x`` and ``y`` broadcast (any shapes).

    Raises:
      TypeError: If ``x`` or ``y`` is not a numeric array, or their shapes do not
        broadcast together (e.g. an empty axis against a non-empty one).
    """
    broadcastable(x=x, y=y)  # JAX's "div got incompatible shapes" named neither
    x = as_float(x, name="x")
    y = jnp.asarray(y).astype(x.dtype)
    nz = y != 0
    return jnp.where(nz, x / jnp.where(nz, y, 1.0), 0.0).astype(x.dtype)


@checked_jit(arrays=("x",))
def arcsin(x: ArrayLike) -> Array:
    """``arcsin`` clamped to ``±pi/2`` outside ``(-1, 1)``, finite gradients (elementwise)."""
    return _inside_unit(jnp.arcsin, x, lambda v: jnp.sign(v) * (jnp.pi / 2))


@checked_jit(arrays=("x",))
def arccos(x: ArrayLike) -> Array:
    """``arccos`` clamped to ``0``/``pi`` outside ``(-1, 1)``, finite gradients (elementwise)."""
    return _inside_unit(jnp.arccos, x, lambda v: jnp.where(v >= 1, 0.0, jnp.pi))


@checked_jit(arrays=("x",), flags=("keepdims",), static_argnames=("axis", "keepdims"))
def norm(x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """Euclidean norm through :func:`sqrt` (gradient 0 at the origin, not NaN); any rank.

    ``x`` of any shape; the norm is taken over all axes (``axis=None``) or the given one(s).
    """
    x = as_float(x, name="x")
    for ax in axis if isinstance(axis, tuple) else () if axis is None else (axis,):
        V.axis(ax, x.ndim)  # static: jnp.sum's error for a string or float names no argument
    return sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
