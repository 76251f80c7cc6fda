"""Fuzzy logic on soft Booleans with t-norm families.

Every public function is jitted like jax.numpy (module level, static choices static,
arrays and continuous hyperparameters traced), its arguments checked on the host first
(:func:`jaxkit._jit.checked_jit`).

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
  van Krieken et al., Analyzing differentiable fuzzy logic operators
  <https://arxiv.org/abs/2002.06100>, 2022.
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._jit import checked_jit
from jaxkit._typing import RealScalarLike
from jaxkit.soft._common import as_float, broadcastable

TNORMS = ("product", "geometric", "lukasiewicz", "godel")


def _check_tnorm(given):
    V.one_of(TNORMS, tnorm=given["tnorm"])


def _check_all(given):
    _check_tnorm(given)
    V.real(given["epsilon"], name="epsilon")
    V.finite_scalar(epsilon=given["epsilon"])  # a concrete one on the host: ValueError now
    V.positive(epsilon=given["epsilon"])


# "no" or 0.0 would pick a t-norm silently: `use_geometric_mean` becomes Python's bool
_STATIC = ("use_geometric_mean", "tnorm")
_TNORM = dict(flags=("use_geometric_mean",), check=_check_tnorm)


@checked_jit(arrays=("x",))
def logical_not(x: ArrayLike) -> Array:
    """Soft NOT ``1 - x``; elementwise, any shape."""
    return 1.0 - as_float(x, name="x")


@checked_jit(
    arrays=("x",),
    flags=("use_geometric_mean",),
    static_argnames=("axis", *_STATIC),
    check=_check_all,
)
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


@checked_jit(arrays=("x",), static_argnames=("axis", *_STATIC), **_TNORM)
def any(
    x: ArrayLike,
    axis: int | None = -1,
    use_geometric_mean: bool = False,  # noqa: A001
    *,
    tnorm: str = "product",
) -> Array:
    """Soft ANY = ``1 - all(1 - x)`` (the dual t-conorm) along ``axis``; any rank."""
    return logical_not(all(logical_not(x), axis, 1e-10, use_geometric_mean, tnorm=tnorm))


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
    x, y = _pair(x, y)
    if dual:
        return 1.0 - _tnorm2(1.0 - x, 1.0 - y, tnorm, geo)
    return _tnorm2(x, y, tnorm, geo)


@checked_jit(arrays=("x", "y"), static_argnames=_STATIC, **_TNORM)
def logical_and(
    x: ArrayLike, y: ArrayLike, use_geometric_mean: bool = False, *, tnorm: str = "product"
) -> Array:
    """Soft AND (t-norm of the pair); elementwise, ``x`` and ``y`` broadcast (any rank)."""
    return _binary(x, y, tnorm, use_geometric_mean)


@checked_jit(arrays=("x", "y"), static_argnames=_STATIC, **_TNORM)
def logical_or(
    x: ArrayLike, y: ArrayLike, use_geometric_mean: bool = False, *, tnorm: str = "product"
) -> Array:
    """Soft OR (t-conorm of the pair): ``1 - and(1 - x, 1 - y)``; elementwise, any rank."""
    return _binary(x, y, tnorm, use_geometric_mean, dual=True)


@checked_jit(arrays=("x", "y"), static_argnames=_STATIC, **_TNORM)
def logical_xor(
    x: ArrayLike, y: ArrayLike, use_geometric_mean: bool = False, *, tnorm: str = "product"
) -> Array:
    """Soft XOR = ``or(and(x, not y), and(not x, y))``; elementwise, any rank."""
    kw = dict(use_geometric_mean=use_geometric_mean, tnorm=tnorm)
    a = logical_and(x, logical_not(y), **kw)
    b = logical_and(logical_not(x), y, **kw)
    return logical_or(a, b, **kw)
