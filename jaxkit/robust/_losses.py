"""Loss families with closed-form sups over a bulk, growth constants, and the credal objective.

Each family is an ``equinox.Module`` (its hyperparameters are traced arrays, its type is
static) with three methods:

* ``loss(params, data, delta) -> (n,)`` per-sample losses,
* ``sup(params, bulk, delta) -> ()`` the sup of the loss over the bulk, in closed form
  through support functions,
* ``growth(params, bulk) -> (a, L)`` linear-growth constants around the bulk centre for
  :func:`~jaxkit.robust.tail_bound`.

``delta > 0`` smooths the non-smooth pieces (``|u| -> sqrt(u^2 + delta^2)``,
``max -> delta * logsumexp(./delta)``, ``||v|| -> sqrt(||v||^2 + delta^2)``); every
smoothed value is an upper bound of the exact one; ``delta = 0`` is exact. The sups and
growth constants are our reconstruction [R] (spec section 2.2 table).

Data layouts: newsvendor ``xi`` of shape ``(n,)`` with an Interval bulk (or a Union of
intervals) and a scalar order ``x``; regression ``(z (n, d), y (n,))`` with a bulk over the
joint ``(z, y)`` in ``R^{d+1}`` and :class:`LinearParams`; classification ``(z, y in {-1,
+1})`` with a Union of per-class bulks over ``z`` (member ``labels`` = class) or one bulk
over ``z`` that both classes may use; piecewise linear ``xi (n, d)`` and ``theta (p,)``.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate
from jaxkit.robust._bulk import Bulk, Ellipsoid, Hull, Interval, Union, _center, _max, _maximum
from jaxkit.robust._bulk import _safe_norm as safe_norm


class LinearParams(NamedTuple):
    """Parameters of a linear predictor ``f(z) = z @ w + b``."""

    w: Array
    b: ArrayLike = eqx.field(converter=jnp.asarray)


# ----------------------------------------------------------------------------- smoothing


def _pos_delta(delta):
    return jnp.where(delta > 0, delta, jnp.ones_like(delta))


def sabs(u, delta):
    """``|u|`` or ``sqrt(u^2 + delta^2)``."""
    d = _pos_delta(delta)
    return jnp.where(delta > 0, jnp.sqrt(u * u + d * d), jnp.abs(u))


def smax(u, delta, axis=-1):
    """``max`` along ``axis`` or ``delta * logsumexp(u / delta)``.

    The ``jnp.where`` differentiates both branches, so the exact one must have a finite
    derivative even where it is discarded: ``_max`` (argmax + gather), not ``jnp.max``, whose
    derivative divides by the number of entries equal to the maximum, which is 0 when XLA
    rounds two copies of ``u`` differently (see ``_bulk._max``).
    """
    d = _pos_delta(delta)
    soft = d * jax.nn.logsumexp(u / d, axis=axis)
    return jnp.where(delta > 0, soft, _max(u, axis=axis))


def smax2(u, v, delta):
    return smax(jnp.stack(jnp.broadcast_arrays(u, v), axis=-1), delta)


def snorm(v, delta):
    d = _pos_delta(delta)
    return jnp.where(delta > 0, jnp.sqrt(jnp.sum(v * v, axis=-1) + d * d), safe_norm(v))


def smooth_support(bulk: Bulk, a: Array, delta) -> Array:
    """Support function with smoothed pieces (an upper bound, exact at ``delta = 0``)."""
    if isinstance(bulk, Interval):
        return smax2(a * bulk.lo, a * bulk.hi, delta)
    if isinstance(bulk, Ellipsoid):
        lt_a = jnp.einsum("ji,...j->...i", bulk.chol, a)
        return a @ bulk.center + bulk.radius * snorm(lt_a, delta)
    if isinstance(bulk, Hull):
        vals = jnp.einsum("...d,md->...m", a, bulk.points)
        mask = jnp.broadcast_to(bulk.mask, vals.shape)
        return smax(jnp.where(mask, vals, jnp.asarray(-jnp.inf, vals.dtype)), delta)
    if isinstance(bulk, Union):
        per = jax.vmap(smooth_support, in_axes=(0, None, None), out_axes=-1)(bulk.members, a, delta)
        return smax(per, delta)
    # Box
    return a @ bulk.center + sabs(a, delta) @ bulk.half


# ----------------------------------------------------------------------------- families


class Newsvendor(eqx.Module):
    """Newsvendor cost ``h (x - xi)^+ + b (xi - x)^+`` (holding ``h``, backorder ``b``)."""

    h: ArrayLike = eqx.field(converter=jnp.asarray)
    b: ArrayLike = eqx.field(converter=jnp.asarray)

    def loss(self, x, xi, delta):
        return smax2(self.h * (x - xi), self.b * (xi - x), delta)

    def sup(self, x, bulk, delta):
        one = jnp.ones_like(x)
        return smax2(
            smooth_support(bulk, -self.h * one, delta) + self.h * x,
            smooth_support(bulk, self.b * one, delta) - self.b * x,
            delta,
        )

    def growth(self, x, bulk):
        m = jnp.maximum(self.h, self.b)
        return m * jnp.abs(x - _center(bulk)), m


def _residual_dirs(params: LinearParams):
    u = jnp.concatenate([-params.w, jnp.ones_like(params.w[:1])])
    return u


def _sup_abs_residual(params, bulk, delta):
    u = _residual_dirs(params)
    return smax2(
        smooth_support(bulk, u, delta) - params.b,
        smooth_support(bulk, -u, delta) + params.b,
        delta,
    )


def _residual_growth(params, bulk):
    u = _residual_dirs(params)
    return jnp.abs(u @ _center(bulk) - params.b), safe_norm(u)


class _Regression(eqx.Module):
    def _r(self, params, data):
        z, y = data
        return y - z @ params.w - params.b


class LAD(_Regression):
    """Absolute error ``|y - z w - b|``; bulk over the joint ``(z, y)``."""

    def loss(self, params, data, delta):
        return sabs(self._r(params, data), delta)

    def sup(self, params, bulk, delta):
        return _sup_abs_residual(params, bulk, delta)

    def growth(self, params, bulk):
        return _residual_growth(params, bulk)


class Squared(_Regression):
    """Squared error ``(y - z w - b)^2``; sup = (sup of the absolute residual)^2."""

    def loss(self, params, data, delta):
        return self._r(params, data) ** 2

    def sup(self, params, bulk, delta):
        return _maximum(_sup_abs_residual(params, bulk, delta), 0) ** 2

    def growth(self, params, bulk):
        raise NotImplementedError("the squared loss has no linear growth: no tail bound.")


def huber_psi(r, delta_h):
    """Huber function ``r^2/2`` for ``|r| <= delta_h``, ``delta_h (|r| - delta_h/2)`` beyond."""
    a = jnp.abs(r)
    return jnp.where(a <= delta_h, 0.5 * r * r, delta_h * (a - 0.5 * delta_h))


class Huber(_Regression):
    """Huber loss ``psi(y - z w - b)``.

    ``psi`` is even and increasing in ``|r|``, so its sup is ``psi`` of the sup of the
    absolute residual.
    """

    delta_h: ArrayLike = eqx.field(converter=jnp.asarray)

    def loss(self, params, data, delta):
        return huber_psi(self._r(params, data), self.delta_h)

    def sup(self, params, bulk, delta):
        return huber_psi(_maximum(_sup_abs_residual(params, bulk, delta), 0), self.delta_h)

    def growth(self, params, bulk):
        a, lip = _residual_growth(params, bulk)
        return self.delta_h * a, self.delta_h * lip


def _worst_margin_terms(params, bulk, delta):
    """``sigma_{B_k}(-y_k w) - y_k b`` per member (class bulks) = minus the worst margin."""
    if isinstance(bulk, Union):
        ys = bulk.labels

        def one(member, yk):
            return smooth_support(member, -yk * params.w, delta) - yk * params.b

        return jax.vmap(one)(bulk.members, ys)
    ys = jnp.asarray([1.0, -1.0], params.w.dtype)
    return jax.vmap(lambda yk: smooth_support(bulk, -yk * params.w, delta) - yk * params.b)(ys)


def _margin_growth(params, bulk, a0):
    return a0 + jnp.abs(params.w @ _center(bulk) + params.b), safe_norm(params.w)


class Hinge(eqx.Module):
    """Hinge loss ``(1 - y (z w + b))^+`` with labels ``y in {-1, +1}``."""

    def loss(self, params, data, delta):
        z, y = data
        m = y * (z @ params.w + params.b)
        return smax2(1 - m, jnp.zeros_like(m), delta)

    def sup(self, params, bulk, delta):
        t = 1 + _worst_margin_terms(params, bulk, delta)
        return smax(jnp.concatenate([t, jnp.zeros_like(t[:1])]), delta)

    def growth(self, params, bulk):
        return _margin_growth(params, bulk, 1.0)


class Logistic(eqx.Module):
    """Logistic loss ``log(1 + exp(-y (z w + b)))``; sup = softplus of minus the worst margin."""

    def loss(self, params, data, delta):
        z, y = data
        return jax.nn.softplus(-y * (z @ params.w + params.b))

    def sup(self, params, bulk, delta):
        return smax(jax.nn.softplus(_worst_margin_terms(params, bulk, delta)), delta)

    def growth(self, params, bulk):
        return _margin_growth(params, bulk, jnp.log(2.0))


class PiecewiseLinear(eqx.Module):
    """Convex piecewise-linear loss ``max_k (A_k xi + B_k theta + c_k)``.

    Its sup over a bulk is exactly ``max_k (sigma_B(A_k) + B_k theta + c_k)``.
    """

    A: ArrayLike = eqx.field(converter=jnp.asarray)
    B: ArrayLike = eqx.field(converter=jnp.asarray)
    c: ArrayLike = eqx.field(converter=jnp.asarray)

    def loss(self, theta, xi, delta):
        return smax(xi @ self.A.T + (self.B @ theta + self.c)[None], delta)

    def sup(self, theta, bulk, delta):
        inner = bulk.members if isinstance(bulk, Union) else bulk
        dirs = self.A[:, 0] if isinstance(inner, Interval) else self.A  # scalar outcomes
        s = jax.vmap(lambda a: smooth_support(bulk, a, delta))(dirs)
        return smax(s + self.B @ theta + self.c, delta)

    def growth(self, theta, bulk):
        off = self.A @ _center(bulk) + self.B @ theta + self.c
        return _max(jnp.abs(off)), jnp.max(safe_norm(self.A))


Family = Newsvendor | LAD | Squared | Huber | Hinge | Logistic | PiecewiseLinear


def newsvendor(h=1.0, b=1.0) -> Newsvendor:
    """Newsvendor family with holding cost ``h`` and backorder cost ``b`` (traced, > 0)."""
    h_ = _validate.guard_positive(_validate.real_array(h, name="h"), h, name="h")
    return Newsvendor(h=_validate.guard_positive(h_, b, name="b"), b=jnp.asarray(b))


def lad() -> LAD:
    """Least-absolute-deviation regression family."""
    return LAD()


def squared() -> Squared:
    """Squared-error regression family."""
    return Squared()


def huber(delta=1.0) -> Huber:
    """Huber regression family with threshold ``delta`` (traced, finite and > 0)."""
    return Huber(
        delta_h=_validate.guard_positive(
            _validate.real_array(delta, name="delta"), delta, name="delta"
        )
    )


def hinge() -> Hinge:
    """Hinge (SVM) classification family, labels in {-1, +1}."""
    return Hinge()


def logistic() -> Logistic:
    """Logistic classification family, labels in {-1, +1}."""
    return Logistic()


def piecewise_linear(A, B, c) -> PiecewiseLinear:
    """Convex piecewise-linear family ``max_k (A_k xi + B_k theta + c_k)``.

    ``A [K, d]``, ``B [K, p]``, ``c [K]`` (TypeError for other shapes).
    """
    A, B, c = jnp.asarray(A), jnp.asarray(B), jnp.asarray(c)
    _validate.ndim(A, 2, name="A")
    _validate.shape(B, (A.shape[0], None), name="B")
    _validate.shape(c, (A.shape[0],), name="c")
    return PiecewiseLinear(A=A, B=B, c=c)


def _penalised(params, l2):
    if isinstance(params, LinearParams):
        return l2 * jnp.sum(params.w * params.w)
    return jnp.zeros((), jnp.result_type(l2))


def objective_value(family, params, data, bulk, eps, weights, l2, eta, moment, delta):
    """The (smoothed when ``delta > 0``) credal objective; no checks (internal).

    The family's hyperparameters, the bulk and the data are cast to the params' dtype.
    """
    dt = jnp.result_type(*jax.tree.leaves(params))

    def cast(t):
        t = jnp.asarray(t)
        return t.astype(dt) if jnp.issubdtype(t.dtype, jnp.floating) else t

    family, bulk, data = jax.tree.map(cast, (family, bulk, data))
    eps = jnp.asarray(eps).astype(dt)
    if weights is not None:
        weights = jnp.asarray(weights).astype(dt)
    per = family.loss(params, data, delta)
    if weights is None:
        mean = jnp.mean(per)
    else:
        mean = jnp.sum(weights * per) / jnp.sum(weights)
    j = (1 - eps) * mean + eps * family.sup(params, bulk, delta)
    j = j + _penalised(params, l2).astype(j.dtype)
    if moment is not None:
        a, lip = family.growth(params, bulk)
        j = j + eps * eta * (a + lip * moment)
    return j
