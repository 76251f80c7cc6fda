"""Soft elementwise operators and comparisons (softjax parity formulas).

Every public function is jitted like jax.numpy (module level, static choices static,
hyperparameters traced): ``mode``, ``gated`` and ``neighbor_radius`` are static,
``softness``, ``epsilon``, ``rtol``, ``atol`` and the clip bounds are traced. A concrete
``softness`` that is not finite and > 0 raises ``ValueError`` at once; a traced one is
checked at run time (``eqx.error_if``). The comparisons' ``epsilon`` and ``isclose``'s
``rtol``/``atol`` must be finite and >= 0, checked the same way where they are used.

References:
  Paulus et al., SoftJAX & SoftTorch: differentiable relaxations of hard operators
  <https://arxiv.org/abs/2603.08824>, 2026.
  Semenov et al., Smooth approximations of the rounding function
  <https://arxiv.org/abs/2504.19026>, 2025.
  Petersen et al., Monotonic differentiable sorting networks
  <https://arxiv.org/abs/2203.09630>, 2022 (cauchy/reciprocal sigmoids).
"""

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike
from jaxkit.soft._common import as_float, broadcastable, check_softness, scal, tied_check

RELU_MODES = ("smooth", "c0", "c1", "_c1_pnorm", "c2", "_c2_pnorm")
SIGMOID_MODES = (*RELU_MODES, "cauchy", "reciprocal")
STEP_MODES = ("hard", *SIGMOID_MODES)  # heaviside, sign, abs, round, comparisons
CLIP_MODES = ("hard", *RELU_MODES)  # relu, clip


# ----------------------------------------------------------------------------- formulas


def _poly(coeffs, v):
    y = jnp.full_like(v, coeffs[0])
    for c in coeffs[1:]:
        y = y * v + c
    return y


def _piece(v, y, above):
    return jnp.where(v < -1.0, jnp.zeros_like(v), jnp.where(v < 1.0, y, above))


def _c2_pnorm_parts(v):
    """``(a, c)`` with ``a - c = v`` and ``a^3 + c^3 = 1`` (``|v| <= 1``).

    ``a^3`` is the second weight of the 4/3-entmax of ``[0, v]``. With ``m = (a + c) / 2``,
    ``m^3 + (3 v^2 / 4) m - 1/2 = 0``; Cardano's root written as ``t - A / (3 t)`` with
    ``t = cbrt(1/4 + sqrt(1/16 + A^3 / 27)) >= cbrt(1/2)`` is smooth at ``v = 0``.
    """
    big_a = 0.75 * v * v
    t = jnp.cbrt(0.25 + jnp.sqrt(0.0625 + big_a**3 / 27.0))
    m = t - big_a / (3.0 * t)
    return m + 0.5 * v, m - 0.5 * v


def sigmoidal_unguarded(x: Array, softness: Any, mode: str) -> Array:
    """:func:`sigmoidal` without argument checks (for loop bodies of other soft modules)."""
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
    if mode == "c2":
        return _piece(v, _poly([0.1875, 0.0, -0.625, 0.0, 0.9375, 0.5], v), one)
    vc = jnp.clip(v, -1.0, 1.0)  # keeps the unused branch (and its gradient) finite
    if mode == "_c1_pnorm":
        return _piece(v, 0.5 + 0.5 * vc * jnp.sqrt(2.0 - vc * vc), one)
    a, _ = _c2_pnorm_parts(vc)  # "_c2_pnorm"
    return _piece(v, a**3, one)


def _softrelu(x, softness, mode, gated):
    s = scal(softness, x.dtype)
    u = x / s
    if gated:
        return x * sigmoidal_unguarded(u, 1.0, mode)
    if mode == "smooth":
        return jax.nn.softplus(u) * s
    v = u / 5.0
    vc = jnp.clip(v, -1.0, 1.0)
    if mode == "_c1_pnorm":  # antiderivative of 1/2 + v sqrt(2 - v^2) / 2, zero at v = -1
        inside = 2.0 - vc * vc
        y = vc / 2.0 - inside * jnp.sqrt(inside) / 6.0 + 2.0 / 3.0
    elif mode == "_c2_pnorm":  # 3/4 + v a^3 - 3/4 (a^4 + c^4), see _c2_pnorm_parts
        a, c = _c2_pnorm_parts(vc)
        y = 0.75 + vc * a**3 - 0.75 * (a**4 + c**4)
    else:
        coeffs = {
            "c0": [0.25, 0.5, 0.25],
            "c1": [-0.0625, 0.0, 0.375, 0.5, 0.1875],
            "c2": [0.03125, 0.0, -0.15625, 0.0, 0.46875, 0.5, 0.15625],
        }[mode]
        y = _poly(coeffs, v)
    return _piece(v, 5.0 * y, u) * s


def abs_unguarded(x: Array, softness: Any, mode: str) -> Array:
    """:func:`abs` without argument checks (``mode`` must not be ``"hard"``)."""
    return x * (sigmoidal_unguarded(x, softness, mode) * 2.0 - 1.0)


def _round(x, softness, mode, neighbor_radius):
    center = jax.lax.stop_gradient(jnp.floor(x))
    offs = jnp.arange(-neighbor_radius, neighbor_radius + 1, dtype=x.dtype)
    m = center[..., None] + offs.reshape((1,) * x.ndim + (-1,))
    wl = sigmoidal_unguarded(x[..., None] - (m - 0.5), softness, mode)
    wr = sigmoidal_unguarded(x[..., None] - (m + 0.5), softness, mode)
    return jnp.sum(m * (wl - wr), axis=-1)


def _greater(x, y, softness, mode, epsilon):
    return sigmoidal_unguarded(x - y - epsilon, softness, mode)


def _greater_equal(x, y, softness, mode, epsilon):
    return sigmoidal_unguarded(x - y + epsilon, softness, mode)


def _less_equal(x, y, softness, mode, epsilon):
    return 1.0 - _greater(x, y, softness, mode, epsilon)


# ----------------------------------------------------------------------------- jitted cores

_HARD = {
    "heaviside": lambda x: jnp.where(x < 0, 0.0, jnp.where(x > 0, 1.0, 0.5)).astype(x.dtype),
    "sign": jnp.sign,
    "abs": jnp.abs,
    "relu": jax.nn.relu,
    "round": jnp.round,
    "greater": lambda x, y: jnp.greater(x, y).astype(x.dtype),
    "greater_equal": lambda x, y: jnp.greater_equal(x, y).astype(x.dtype),
    "less": lambda x, y: jnp.less(x, y).astype(x.dtype),
    "less_equal": lambda x, y: jnp.less_equal(x, y).astype(x.dtype),
    "equal": lambda x, y: jnp.equal(x, y).astype(x.dtype),
    "not_equal": lambda x, y: jnp.not_equal(x, y).astype(x.dtype),
}


def _soft_unary(op, x, s, mode, gated, radius):
    if op in ("sigmoidal", "heaviside"):
        return sigmoidal_unguarded(x, s, mode)
    if op == "sign":
        return sigmoidal_unguarded(x, s, mode) * 2.0 - 1.0
    if op == "abs":
        return abs_unguarded(x, s, mode)
    if op in ("softrelu", "relu"):
        return _softrelu(x, s, mode, gated)
    return _round(x, s, mode, radius)  # "round"


def _unary_core(x, softness, *, op, mode, gated=False, neighbor_radius=5):
    if mode == "hard":
        return _HARD[op](x)
    x = V.guard_positive(x, softness, name="softness")
    return _soft_unary(op, x, softness, mode, gated, neighbor_radius)


def _clip_core(x, a, b, softness, *, mode, gated):
    a = jnp.asarray(a, x.dtype)
    b = jnp.asarray(b, x.dtype)
    if mode == "hard":
        return jnp.clip(x, a, b)
    x = V.guard_positive(x, softness, name="softness")
    return a + _softrelu(x - a, softness, mode, gated) - _softrelu(x - b, softness, mode, gated)


def _compare_core(x, y, softness, epsilon, rtol, atol, *, op, mode):
    used = _tolerances(epsilon, rtol, atol, op, mode)
    if used:  # one scalar carries the checks (tied_check), not a copy of x
        x = tied_check(x, lambda z: _guard_tolerances(z, used))
    y = jnp.asarray(y).astype(x.dtype)
    if mode == "hard":
        if op == "isclose":
            return jnp.isclose(x, y, rtol=rtol, atol=atol).astype(x.dtype)
        return _HARD[op](x, y)
    x = V.guard_positive(x, softness, name="softness")
    eps = jnp.asarray(epsilon).astype(x.dtype)
    s = softness
    if op == "greater":
        return _greater(x, y, s, mode, eps)
    if op == "greater_equal":
        return _greater_equal(x, y, s, mode, eps)
    if op == "less":
        return 1.0 - _greater_equal(x, y, s, mode, eps)
    if op == "less_equal":
        return _less_equal(x, y, s, mode, eps)
    d = abs_unguarded(x - y, s, mode)
    if op == "equal":
        return 2.0 * _less_equal(d, jnp.zeros_like(d), s, mode, eps)
    if op == "not_equal":
        return 2.0 * _greater(d, jnp.zeros_like(d), s, mode, eps) - 1.0
    tol = jnp.asarray(atol).astype(x.dtype) + jnp.asarray(rtol).astype(x.dtype) * abs_unguarded(
        y, s, mode
    )
    return 2.0 * _less_equal(d, tol, s, mode, eps)  # "isclose"


_unary = jax.jit(_unary_core, static_argnames=("op", "mode", "gated", "neighbor_radius"))
_clip = jax.jit(_clip_core, static_argnames=("mode", "gated"))
_compare_jit = jax.jit(_compare_core, static_argnames=("op", "mode"))


# ----------------------------------------------------------------------------- checks


def _check(softness: Any, mode: str, modes: tuple[str, ...], gated: Any = False) -> bool:
    """Static checks at the public entry (the traced guard runs inside the jitted core).

    Returns ``gated`` as Python's bool (a static argument).
    """
    V.one_of(modes, mode=mode)
    gated = V.flag(gated, name="gated")
    V.real(softness, name="softness")
    if mode != "hard":
        check_softness(softness)
    return gated


def _real(**kwargs: Any) -> None:
    for name, value in kwargs.items():
        V.real(value, name=name)


def _tolerances(epsilon: Any, rtol: Any, atol: Any, op: str, mode: str) -> dict[str, Any]:
    """The comparison's offsets that ``op`` in ``mode`` uses, by name."""
    used = {} if mode == "hard" else {"epsilon": epsilon}
    if op == "isclose":
        used |= {"rtol": rtol, "atol": atol}
    return used


def _guard_tolerances(z: Any, used: dict[str, Any]) -> Any:
    """``z`` guarded so that each of ``used`` is finite and >= 0.

    A NaN one made a comparison NaN (``isclose``: False), a negative ``epsilon`` turns
    ``greater`` into ``greater_equal``. The jitted core's traced check (``eqx.error_if``);
    :func:`_compare` checks concrete values on the host first.
    """
    for name, value in used.items():
        z = V.guard_non_negative(z, value, name=name)
    return z


# ----------------------------------------------------------------------------- public


def sigmoidal(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:
    """Soft step ``H(x)``: a sigmoid of ``x / softness`` of the chosen smoothness.

    Args:
      x: input array of any shape (elementwise).
      softness: temperature (finite, > 0); traced.
      mode: ``"smooth"`` (logistic), ``"c0"`` (ramp), ``"c1"``/``"c2"`` (cubic/quintic
        smoothsteps on ``|x| <= 5 softness``), ``"_c1_pnorm"``/``"_c2_pnorm"`` (softjax's
        p-norm steps: the second weight of the 3/2- and 4/3-entmax of ``[0, x]`` at
        softness ``5 softness``), ``"cauchy"``, ``"reciprocal"`` (heavy-tailed monotone
        sigmoids of Petersen et al. 2022).

    Returns:
      An array in ``[0, 1]`` with the dtype of ``x``.

    Raises:
      ValueError: for an unknown ``mode`` or a concrete ``softness`` that is not > 0.
      TypeError: for a ``softness`` that is not a real number, or an ``x`` that is not a
        numeric array (a string).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxkit import soft
      >>> soft.sigmoidal(jnp.array([-1.0, 0.0, 1.0]), softness=0.1, mode="c1").tolist()
      [0.0, 0.5, 1.0]

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    _check(softness, mode, SIGMOID_MODES)
    return _unary(as_float(x, name="x"), softness, op="sigmoidal", mode=mode)


def softrelu(
    x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth", gated: bool = False
) -> Array:
    """Soft ReLU: ``softness * G(x / softness)`` with ``G`` the antiderivative of the sigmoid.

    Elementwise: ``x`` of any shape.

    ``gated=True`` gives ``x * sigmoidal(x)`` (SiLU-like) instead. Modes: those of
    :func:`sigmoidal` except ``"cauchy"`` and ``"reciprocal"``.

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    gated = _check(softness, mode, RELU_MODES, gated)
    return _unary(as_float(x, name="x"), softness, op="softrelu", mode=mode, gated=gated)


def heaviside(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:
    """Soft Heaviside step (elementwise, any shape).

    ``mode="hard"``: ``H(0) = 1/2``; other modes: :func:`sigmoidal`.
    """
    _check(softness, mode, STEP_MODES)
    return _unary(as_float(x, name="x"), softness, op="heaviside", mode=mode)


def sign(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:
    """Soft sign ``2 sigmoidal(x) - 1`` (elementwise, any shape)."""
    _check(softness, mode, STEP_MODES)
    return _unary(as_float(x, name="x"), softness, op="sign", mode=mode)


def abs(x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth") -> Array:  # noqa: A001
    """Soft absolute value ``x * sign(x)`` (elementwise, any shape)."""
    _check(softness, mode, STEP_MODES)
    return _unary(as_float(x, name="x"), softness, op="abs", mode=mode)


def relu(
    x: ArrayLike, softness: RealScalarLike = 0.1, mode: str = "smooth", gated: bool = False
) -> Array:
    """Soft ReLU, elementwise (``mode="hard"``: ``jax.nn.relu``; other modes: :func:`softrelu`)."""
    gated = _check(softness, mode, CLIP_MODES, gated)
    return _unary(as_float(x, name="x"), softness, op="relu", mode=mode, gated=gated)


def clip(
    x: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    gated: bool = False,
) -> Array:
    """Soft clip ``a + relu(x - a) - relu(x - b)`` (bounds traced; elementwise, any shape)."""
    gated = _check(softness, mode, CLIP_MODES, gated)
    _real(a=a, b=b)
    return _clip(as_float(x, name="x"), a, b, softness, mode=mode, gated=gated)


def round(  # noqa: A001
    x: ArrayLike,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    neighbor_radius: int = 5,
) -> Array:
    """Soft rounding: a sum of soft steps at the half-integers near ``x`` (elementwise).

    ``neighbor_radius`` (static int >= 0) is the number of integers on each side of
    ``floor(x)`` whose steps are summed.

    References:
      Semenov et al., Smooth approximations of the rounding function
      <https://arxiv.org/abs/2504.19026>, 2025.
    """
    _check(softness, mode, STEP_MODES)
    r = V.python_int(neighbor_radius, name="neighbor_radius", minimum=0)
    return _unary(as_float(x, name="x"), softness, op="round", mode=mode, neighbor_radius=r)


def _compare(x, y, softness, mode, epsilon, op, rtol=1e-5, atol=1e-8):
    V.numeric(x=x, y=y)  # JAX's error for a string `y` named the jitted core
    broadcastable(x=x, y=y)
    _check(softness, mode, STEP_MODES)
    _real(epsilon=epsilon, rtol=rtol, atol=atol)
    for name, value in _tolerances(epsilon, rtol, atol, op, mode).items():
        V.finite_scalar(**{name: value})  # concrete ones on the host: ValueError now
        V.non_negative(**{name: value})
    return _compare_jit(as_float(x, name="x"), y, softness, epsilon, rtol, atol, op=op, mode=mode)


def _comparison(op: str, doc: str):
    """A public soft comparison ``op(x, y, softness, mode, epsilon)``."""

    def compare(
        x: ArrayLike,
        y: ArrayLike,
        softness: RealScalarLike = 0.1,
        mode: str = "smooth",
        epsilon: RealScalarLike = 1e-10,
    ) -> Array:
        return _compare(x, y, softness, mode, epsilon, op)

    compare.__name__ = compare.__qualname__ = op
    compare.__doc__ = (
        doc + ' ``mode="hard"``: the exact comparison, as a float. Elementwise: ``x`` and '
        "``y`` broadcast (any shapes)."
    )
    return compare


greater = _comparison("greater", "Soft ``x > y`` = ``sigmoidal(x - y - epsilon)``.")
greater_equal = _comparison("greater_equal", "Soft ``x >= y`` = ``sigmoidal(x - y + epsilon)``.")
less = _comparison("less", "Soft ``x < y`` = ``1 - greater_equal(x, y)``.")
less_equal = _comparison("less_equal", "Soft ``x <= y`` = ``1 - greater(x, y)``.")
equal = _comparison("equal", "Soft ``x == y`` = ``2 less_equal(|x - y|_soft, 0)``.")
not_equal = _comparison("not_equal", "Soft ``x != y`` = ``2 greater(|x - y|_soft, 0) - 1``.")


def isclose(
    x: ArrayLike,
    y: ArrayLike,
    softness: RealScalarLike = 0.1,
    rtol: RealScalarLike = 1e-5,
    atol: RealScalarLike = 1e-8,
    mode: str = "smooth",
    epsilon: RealScalarLike = 1e-10,
) -> Array:
    """Soft ``isclose``: ``2 less_equal(|x - y|, atol + rtol |y|)`` with soft abs.

    Elementwise: ``x`` and ``y`` broadcast (any shapes).
    """
    return _compare(x, y, softness, mode, epsilon, "isclose", rtol, atol)
