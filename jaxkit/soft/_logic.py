"""Fuzzy logic on soft Booleans with t-norm families.

Every public function is jitted like jax.numpy (module level, static choices static,
arrays and continuous hyperparameters traced).

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
  van Krieken et al., Analyzing differentiable fuzzy logic operators
  <https://arxiv.org/abs/2002.06100>, 2022.
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike
from jaxkit.soft._common import as_float, broadcastable

TNORMS = ("product", "geometric", "lukasiewicz", "godel")


def _check_static(tnorm: str, use_geometric_mean: bool) -> bool:
    V.one_of(TNORMS, tnorm=tnorm)
    # "no" or 0.0 would pick a t-norm silently; Python's bool (a static argument)
    return V.flag(use_geometric_mean, name="use_geometric_mean")


@jax.jit
def _not(x):
    return 1.0 - as_float(x, name="x")


def logical_not(x: ArrayLike) -> Array:
    """Soft NOT ``1 - x``; elementwise, any shape."""
    V.numeric(x=x)  # on the host: JAX's error for a string named the jitted core
    return _not(x)


def all(
    x: ArrayLike,
    axis: int | None = -1,
    epsilon: RealScalarLike = 1e-10,  # noqa: A001
    use_geometric_mean: bool = False,
    *,
    tnorm: str = "product",
) -> Array:
    """Soft ALL along ``axis`` (``None``: all axes; ``x`` of any rank): the t-norm of the entries.

    ``tnorm``: ``"product"`` (softjax default), ``"geometric"`` (geometric mean, as
    softjax's ``use_geometric_mean=True``), ``"lukasiewicz"`` (max(0, sum - (n-1))),
    ``"godel"`` (min). ``epsilon`` (finite, > 0; a Python number or a traced scalar) is
    the floor of the entries whose logs the geometric mean takes.

    Raises:
      TypeError: If ``x`` is not a numeric array (a string).
      ValueError: If ``epsilon`` is NaN, infinite or <= 0 (eagerly; a traced one, where
        the geometric mean uses it, raises at run time under ``jit``).

    References:
      van Krieken et al., Analyzing differentiable fuzzy logic operators
      <https://arxiv.org/abs/2002.06100>, 2022.
    """
    V.numeric(x=x)  # JAX's error for a string named the jitted core
    use_geometric_mean = _check_static(tnorm, use_geometric_mean)
    V.real_scalar(epsilon, name="epsilon")
    V.finite_scalar(epsilon=epsilon)  # a concrete one on the host: ValueError now
    V.positive(epsilon=epsilon)
    return _all(x, axis, epsilon, use_geometric_mean, tnorm=tnorm)


@functools.partial(jax.jit, static_argnames=("axis", "use_geometric_mean", "tnorm"))
def _all(x, axis, epsilon, use_geometric_mean, *, tnorm):
    if axis is not None:  # static: jnp.prod's error for a string names no argument
        V.python_int(axis, name="axis")
    x = as_float(x, name="x")
    if use_geometric_mean or tnorm == "geometric":
        eps = V.guard_positive(
            V.real_array(epsilon, name="epsilon", dtype=x.dtype), epsilon, name="epsilon"
        )
        return jnp.exp(jnp.mean(jnp.log(jnp.clip(x, min=eps)), axis=axis))
    if tnorm == "product":
        return jnp.prod(x, axis=axis)
    if tnorm == "godel":
        return jnp.min(x, axis=axis, initial=1.0)
    n = x.size if axis is None else x.shape[axis]
    return jnp.maximum(jnp.sum(x, axis=axis) - (n - 1), 0.0).astype(x.dtype)


@functools.partial(jax.jit, static_argnames=("axis", "use_geometric_mean", "tnorm"))
def _any(x, axis, use_geometric_mean, *, tnorm):
    use_geometric_mean = _check_static(tnorm, use_geometric_mean)
    return logical_not(_all(logical_not(x), axis, 1e-10, use_geometric_mean, tnorm=tnorm))


def any(
    x: ArrayLike,
    axis: int | None = -1,
    use_geometric_mean: bool = False,  # noqa: A001
    *,
    tnorm: str = "product",
) -> Array:
    """Soft ANY = ``1 - all(1 - x)`` (the dual t-conorm) along ``axis``; any rank."""
    V.numeric(x=x)  # on the host: JAX's error for a string named the jitted core
    return _any(x, axis=axis, use_geometric_mean=use_geometric_mean, tnorm=tnorm)


def _pair(x, y):
    broadcastable(x=x, y=y)  # JAX's "mul got incompatible shapes" named neither
    x = as_float(x, name="x")
    return x, jnp.asarray(y).astype(x.dtype)


def _tnorm2(x, y, tnorm, geo, eps=1e-10):
    if geo or tnorm == "geometric":
        return jnp.exp(0.5 * (jnp.log(jnp.clip(x, min=eps)) + jnp.log(jnp.clip(y, min=eps))))
    if tnorm == "product":
        return x * y
    if tnorm == "godel":
        return jnp.minimum(x, y)
    return jnp.maximum(x + y - 1.0, 0.0)


def _binary(x, y, tnorm, geo, *, dual=False):
    """The t-norm of the pair, or with ``dual`` its t-conorm ``1 - T(1 - x, 1 - y)``."""
    geo = _check_static(tnorm, geo)
    x, y = _pair(x, y)
    if dual:
        return 1.0 - _tnorm2(1.0 - x, 1.0 - y, tnorm, geo)
    return _tnorm2(x, y, tnorm, geo)


_STATIC = ("use_geometric_mean", "tnorm")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _and(x, y, use_geometric_mean, *, tnorm):
    return _binary(x, y, tnorm, use_geometric_mean)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _or(x, y, use_geometric_mean, *, tnorm):
    return _binary(x, y, tnorm, use_geometric_mean, dual=True)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _xor(x, y, use_geometric_mean, *, tnorm):
    kw = dict(use_geometric_mean=use_geometric_mean, tnorm=tnorm)
    a = _and(x, logical_not(y), **kw)
    b = _and(logical_not(x), y, **kw)
    return _or(a, b, **kw)


def logical_and(
    x: ArrayLike, y: ArrayLike, use_geometric_mean: bool = False, *, tnorm: str = "product"
) -> Array:
    """Soft AND (t-norm of the pair); elementwise, ``x`` and ``y`` broadcast (any rank)."""
    V.numeric(x=x, y=y)  # on the host: JAX's error for a string named the jitted core
    return _and(x, y, use_geometric_mean=use_geometric_mean, tnorm=tnorm)


def logical_or(
    x: ArrayLike, y: ArrayLike, use_geometric_mean: bool = False, *, tnorm: str = "product"
) -> Array:
    """Soft OR (t-conorm of the pair): ``1 - and(1 - x, 1 - y)``; elementwise, any rank."""
    V.numeric(x=x, y=y)
    return _or(x, y, use_geometric_mean=use_geometric_mean, tnorm=tnorm)


def logical_xor(
    x: ArrayLike, y: ArrayLike, use_geometric_mean: bool = False, *, tnorm: str = "product"
) -> Array:
    """Soft XOR = ``or(and(x, not y), and(not x, y))``; elementwise, any rank."""
    V.numeric(x=x, y=y)
    return _xor(x, y, use_geometric_mean=use_geometric_mean, tnorm=tnorm)
