"""Soft elementwise operators and comparisons (softjax parity formulas).

References:
  Paulus et al., SoftJAX & SoftTorch: differentiable relaxations of hard operators
  <https://arxiv.org/abs/2603.08824>, 2026.
  Semenov et al., Smooth approximations of the rounding function
  <https://arxiv.org/abs/2504.19026>, 2025.
  Petersen et al., Monotonic differentiable sorting networks
  <https://arxiv.org/abs/2203.09630>, 2022 (cauchy/reciprocal sigmoids).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit._typing import RealScalarLike
from jaxkit.soft._common import as_float, check_mode, check_softness, scal

SIGMOID_MODES = ("smooth", "c0", "c1", "c2", "cauchy", "reciprocal")


def _poly(coeffs, v):
    y = jnp.full_like(v, coeffs[0])
    for c in coeffs[1:]:
        y = y * v + c
    return y


def _piece(v, y, above):
    return jnp.where(v < -1.0, jnp.zeros_like(v), jnp.where(v < 1.0, y, above))


def sigmoidal(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:
    """Soft step ``H(x)``: a sigmoid of ``x / softness`` of the chosen smoothness.

    Args:
      x: input array.
      softness: temperature (> 0); traced.
      mode: ``"smooth"`` (logistic), ``"c0"`` (ramp), ``"c1"``/``"c2"`` (cubic/quintic
        smoothsteps on ``|x| <= 5 softness``), ``"cauchy"``, ``"reciprocal"``
        (heavy-tailed monotone sigmoids of Petersen et al. 2022).

    Returns:
      An array in ``[0, 1]`` with the dtype of ``x``.

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    check_mode(mode, SIGMOID_MODES)
    check_softness(softness)
    x = as_float(x)
    u = x / scal(softness, x.dtype)
    if mode == "smooth":
        return jax.nn.sigmoid(u)
    if mode == "cauchy":
        return (jnp.arctan(u) / jnp.pi + 0.5).astype(x.dtype)
    if mode == "reciprocal":
        return 0.5 * u / (1.0 + jnp.abs(u)) + 0.5
    v = u / 5.0
    one = jnp.ones_like(v)
    if mode == "c0":
        return _piece(v, _poly([0.5, 0.5], v), one)
    if mode == "c1":
        return _piece(v, _poly([-0.25, 0.0, 0.75, 0.5], v), one)
    return _piece(v, _poly([0.1875, 0.0, -0.625, 0.0, 0.9375, 0.5], v), one)


def softrelu(
    x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth", gated: bool = False
) -> Array:
    """Soft ReLU: ``softness * G(x / softness)`` with ``G`` the antiderivative of the sigmoid.

    ``gated=True`` gives ``x * sigmoidal(x)`` (SiLU-like) instead.

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    check_mode(mode, ("smooth", "c0", "c1", "c2"))
    check_softness(softness)
    x = as_float(x)
    s = scal(softness, x.dtype)
    u = x / s
    if gated:
        return x * sigmoidal(u, 1.0, mode)
    if mode == "smooth":
        return jax.nn.softplus(u) * s
    v = u / 5.0
    coeffs = {
        "c0": [0.25, 0.5, 0.25],
        "c1": [-0.0625, 0.0, 0.375, 0.5, 0.1875],
        "c2": [0.03125, 0.0, -0.15625, 0.0, 0.46875, 0.5, 0.15625],
    }[mode]
    y = _piece(v, 5.0 * _poly(coeffs, v), u)
    return y * s


def heaviside(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:
    """Soft Heaviside step (``mode="hard"``: ``H(0) = 1/2``)."""
    check_mode(mode)
    x = as_float(x)
    if mode == "hard":
        return jnp.where(x < 0, 0.0, jnp.where(x > 0, 1.0, 0.5)).astype(x.dtype)
    return sigmoidal(x, softness, mode)


def sign(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:
    """Soft sign ``2 sigmoidal(x) - 1``."""
    check_mode(mode)
    x = as_float(x)
    if mode == "hard":
        return jnp.sign(x)
    return sigmoidal(x, softness, mode) * 2.0 - 1.0


def abs(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:  # noqa: A001
    """Soft absolute value ``x * sign(x)``."""
    check_mode(mode)
    x = as_float(x)
    if mode == "hard":
        return jnp.abs(x)
    return x * sign(x, softness, mode)


def relu(
    x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth", gated: bool = False
) -> Array:
    """Soft ReLU (``mode="hard"``: ``jax.nn.relu``)."""
    check_mode(mode)
    x = as_float(x)
    if mode == "hard":
        return jax.nn.relu(x)
    return softrelu(x, softness, mode, gated)


def clip(
    x: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    gated: bool = False,
) -> Array:
    """Soft clip ``a + relu(x - a) - relu(x - b)``."""
    check_mode(mode)
    x = as_float(x)
    a = jnp.asarray(a, x.dtype)
    b = jnp.asarray(b, x.dtype)
    if mode == "hard":
        return jnp.clip(x, a, b)
    return a + softrelu(x - a, softness, mode, gated) - softrelu(x - b, softness, mode, gated)


def round(
    x: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",  # noqa: A001
    neighbor_radius: int = 5,
) -> Array:
    """Soft rounding: a sum of soft steps at the half-integers near ``x``.

    References:
      Semenov et al., Smooth approximations of the rounding function
      <https://arxiv.org/abs/2504.19026>, 2025.
    """
    check_mode(mode)
    x = as_float(x)
    if mode == "hard":
        return jnp.round(x)
    center = jax.lax.stop_gradient(jnp.floor(x))
    offs = jnp.arange(-neighbor_radius, neighbor_radius + 1, dtype=x.dtype)
    m = center[..., None] + offs.reshape((1,) * x.ndim + (-1,))
    wl = sigmoidal(x[..., None] - (m - 0.5), softness, mode)
    wr = sigmoidal(x[..., None] - (m + 0.5), softness, mode)
    return jnp.sum(m * (wl - wr), axis=-1)


def _cmp_prep(x, y):
    x = as_float(x)
    return x, jnp.asarray(y).astype(x.dtype)


def greater(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``x > y`` = ``sigmoidal(x - y - epsilon)``."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.greater(x, y).astype(x.dtype)
    return sigmoidal(x - y - epsilon, softness, mode)


def greater_equal(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``x >= y`` = ``sigmoidal(x - y + epsilon)``."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.greater_equal(x, y).astype(x.dtype)
    return sigmoidal(x - y + epsilon, softness, mode)


def less(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``x < y`` = ``1 - greater_equal(x, y)``."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.less(x, y).astype(x.dtype)
    return 1.0 - greater_equal(x, y, softness, mode, epsilon)


def less_equal(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``x <= y`` = ``1 - greater(x, y)``."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.less_equal(x, y).astype(x.dtype)
    return 1.0 - greater(x, y, softness, mode, epsilon)


def equal(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``x == y`` = ``2 less_equal(|x - y|_soft, 0)``."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.equal(x, y).astype(x.dtype)
    d = abs(x - y, softness, mode)
    return 2.0 * less_equal(d, jnp.zeros_like(d), softness, mode, epsilon)


def not_equal(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``x != y`` = ``2 greater(|x - y|_soft, 0) - 1``."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.not_equal(x, y).astype(x.dtype)
    d = abs(x - y, softness, mode)
    return 2.0 * greater(d, jnp.zeros_like(d), softness, mode, epsilon) - 1.0


def isclose(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    mode: str = "smooth",
    epsilon: float = 1e-10,
) -> Array:
    """Soft ``isclose``: ``2 less_equal(|x - y|, atol + rtol |y|)`` with soft abs."""
    check_mode(mode)
    x, y = _cmp_prep(x, y)
    if mode == "hard":
        return jnp.isclose(x, y, rtol=rtol, atol=atol).astype(x.dtype)
    d = abs(x - y, softness, mode)
    tol = atol + rtol * abs(y, softness, mode)
    return 2.0 * less_equal(d, tol, softness, mode, epsilon)
