"""The credal objective, the newsvendor closed-form minimiser and the JAX solver.

``fit`` minimises ``J(theta) = (1 - eps) E_w loss + eps sup_B loss [+ l2 ||w||^2 + tail]``
by smoothing continuation (``delta`` through ``schedule``) with ``optax.lbfgs`` (zoom line
search), all stages and steps inside one ``lax.scan`` under one module-level ``jit``; it
reports the unsmoothed ``J`` at the end. The objective's mean + sup structure is the
paper's (arXiv 2601.21324) [P]; the closed-form sups, the tail term and the newsvendor
minimiser are our reconstruction [R].
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._optim import optax_update
from jaxkit._typing import RealScalarLike
from jaxkit.robust._bulk import Bulk, Interval, Union, _check_bulk
from jaxkit.robust._calibrate import _sample_weights, weighted_quantile
from jaxkit.robust._losses import LAD, Hinge, Huber, Logistic, Newsvendor, Squared, objective_value
from jaxkit.robust._objective import _bad_weights

_FAMILIES = ("Newsvendor", "LAD", "Squared", "Huber", "Hinge", "Logistic", "PiecewiseLinear")


def _check_family(family: Any) -> None:
    if type(family).__name__ not in _FAMILIES:
        raise TypeError(
            "`family` must be a loss family (newsvendor(), lad(), squared(), huber(), hinge(), "
            f"logistic(), piecewise_linear()), got {type(family).__name__}."
        )


def _guards(x, eps, l2, eta, moment):
    x = _validate.guard_interval(x, eps, name="eps", low=0.0, high=1.0)
    x = _validate.guard_non_negative(x, l2, name="l2")
    x = _validate.guard_interval(x, eta, name="eta", low=0.0, high=1.0)
    if moment is not None:
        x = _validate.guard_non_negative(x, moment, name="moment")
    return x


_LINEAR = (LAD, Squared, Huber, Hinge, Logistic)


def _check_params(family, params, data, *, name: str) -> None:
    """A linear family's parameter record against the data ``(z [n, d], y)``.

    ``w`` a ``[d]`` vector (a ``[d, 1]`` one broadcast the residuals to ``[n, n]``), ``b`` a
    scalar: a TypeError naming the field (``params.w``). Static (shapes only).
    """
    if not isinstance(family, _LINEAR):
        return
    if not (hasattr(params, "w") and hasattr(params, "b")):
        raise TypeError(
            f"`{name}` must be a LinearParams(w, b) for a linear family, got "
            f"{type(params).__name__}."
        )
    z = data[0] if isinstance(data, (tuple, list)) and data else None
    d = jnp.shape(z)[-1] if z is not None and jnp.ndim(z) == 2 else None
    _validate.shape(params.w, (d,), name=f"{name}.w")
    _validate.ndim(params.b, 0, name=f"{name}.b")


def _check_samples(data):
    """``data`` holds at least one sample (the objective's mean over none was NaN)."""
    for leaf in jax.tree.leaves(data):
        _validate.nonempty(leaf, name="data")


def _guard_weights(x, weights, data):
    """``x`` guarded so that ``weights`` are one finite, >= 0 weight per sample, positive sum.

    A negative weight gave a finite but meaningless objective, a NaN one a NaN objective
    (``fit``: its end-of-solve error, not naming ``weights``), a length-1 vector broadcast.
    """
    if weights is None:
        return x
    w = jnp.asarray(weights)
    leaves = jax.tree.leaves(data)
    _validate.shape(w, (jnp.shape(leaves[0])[0] if leaves else None,), name="weights")
    msg = "`weights` must be finite and >= 0 with a positive sum."
    return _validate.error_if(x, _bad_weights(w), msg)


@jax.jit
def _objective_core(family, params, data, bulk, eps, weights, l2, eta, moment, smoothing):
    return objective_value(family, params, data, bulk, eps, weights, l2, eta, moment, smoothing)


def credal_objective(
    family: Any,
    params: Any,
    data: Any,
    bulk: Bulk,
    eps: RealScalarLike,
    *,
    weights: Float[ArrayLike, " n"] | None = None,
    l2: RealScalarLike = 0.0,
    eta: RealScalarLike = 0.0,
    moment: RealScalarLike | None = None,
    smoothing: RealScalarLike = 0.0,
) -> Array:
    """Bulk-calibrated credal objective ``J(params)``.

    ``J = (1 - eps) sum_i w_i loss(params, xi_i) + eps sup_{xi in B} loss(params, xi)
    + l2 ||w||^2 + eps eta (a + L moment)``; the last (tail) term is added only when
    ``moment`` is given (see :func:`~jaxkit.robust.tail_bound`). ``smoothing > 0`` evaluates
    the smoothed upper bound used by :func:`fit`.

    Args:
      family: A loss family (e.g. ``newsvendor(h, b)``, ``lad()``).
      params: The decision (scalar order, :class:`LinearParams`, or a vector).
      data: The reference samples in the family's layout.
      bulk: The calibrated bulk.
      eps: Contamination share in [0, 1] (traced).
      weights: Sample weights of the reference (normalised; one per sample, finite, >= 0,
        with a positive sum, also checked when traced); uniform if omitted.
      l2: Ridge on linear weights (>= 0).
      eta: Leak fraction outside the bulk in [0, 1] (tail term).
      moment: First moment of ``||xi - c||`` of the leaked mass (enables the tail term).
      smoothing: Smoothing width ``delta >= 0`` (0: exact).

    Returns:
      Scalar ``J``.

    Raises:
      TypeError: ``data`` without a sample (a leaf of leading axis 0); for a linear
        family, ``params`` not a :class:`LinearParams` with ``w`` of shape ``(d,)`` (the
        features of ``z [n, d]``) and a scalar ``b``.
      ValueError: A hyperparameter or ``weights`` out of range.
    """
    _check_family(family)
    _check_bulk(bulk)
    l2, eta = _validate.real_array(l2, name="l2"), _validate.real_array(eta, name="eta")
    eps = _guards(_validate.real_array(eps, name="eps"), eps, l2, eta, moment)
    eps = _validate.guard_non_negative(eps, smoothing, name="smoothing")
    _check_samples(data)
    _check_params(family, params, data, name="params")
    eps = _guard_weights(eps, weights, data)
    return _objective_core(family, params, data, bulk, eps, weights, l2, eta, moment, smoothing)


def make_objective(family, data, bulk, eps, **kwargs) -> Any:
    """``params -> credal_objective(family, params, data, bulk, eps, **kwargs)``."""
    return functools.partial(_bound_objective, family, data, bulk, eps, kwargs)


def _bound_objective(family, data, bulk, eps, kwargs, params):
    return credal_objective(family, params, data, bulk, eps, **kwargs)


# ----------------------------------------------------------------------------- newsvendor


class NewsvendorSolution(NamedTuple):
    """Result of :func:`newsvendor_closed_form`: an optimal order and its objective value."""

    x: Array
    value: Array


@jax.jit
def _newsvendor_core(xi, eps, lo, hi, h, b, w):
    acc = xi.dtype
    eps, h, b = eps.astype(acc), h.astype(acc), b.astype(acc)
    x_star = (h * lo + b * hi) / (h + b)
    one_m = 1 - eps
    safe = jnp.where(one_m > 0, one_m, jnp.ones_like(one_m))
    big = jnp.asarray(2.0, acc)
    lvl_plus = jnp.where(one_m > 0, (b - eps * (h + b)) / (safe * (h + b)), -big)
    lvl_minus = jnp.where(one_m > 0, b / (safe * (h + b)), big)
    q_plus = weighted_quantile(xi, w, lvl_plus)
    q_minus = weighted_quantile(xi, w, lvl_minus)
    x = jnp.clip(x_star, q_plus, q_minus)
    fam = Newsvendor(h=h, b=b)
    value = objective_value(
        fam, x, xi, Interval(lo=lo, hi=hi), eps, w, jnp.zeros((), acc), 0.0, None, 0.0
    )
    return NewsvendorSolution(x=x, value=value)


def newsvendor_closed_form(
    xi: Float[ArrayLike, " n"],
    eps: RealScalarLike,
    bulk: Any,
    *,
    h: RealScalarLike = 1.0,
    b: RealScalarLike = 1.0,
    weights: Float[ArrayLike, " n"] | None = None,
) -> NewsvendorSolution:
    """Exact minimiser of the credal newsvendor objective over an interval bulk [R].

    ``J(x) = (1-eps) E_w[h (x-xi)^+ + b (xi-x)^+] + eps max(h (x-lo), b (hi-x))`` is convex
    piecewise linear; with ``x* = (h lo + b hi)/(h+b)`` (the sup term's minimiser),
    ``l+ = (b - eps (h+b)) / ((1-eps)(h+b))``, ``l- = b / ((1-eps)(h+b))`` and ``q`` the lower
    weighted quantile (``-inf`` below 0, ``+inf`` above 1), ``x_opt = clip(x*, q(l+), q(l-))``.
    ``eps = 0`` gives the critical fractile ``q(b/(h+b))``; ``eps = 1`` gives ``x*`` with
    value ``h b (hi - lo)/(h + b)``. Under a step CDF the minimiser may be an interval; the
    value is unique. Jit/vmap over ``eps`` and the bulk.

    Args:
      xi: Demand samples, shape ``(n,)``.
      eps: Contamination share in [0, 1].
      bulk: Interval bulk ``[lo, hi]``.
      h: Holding cost (> 0).
      b: Backorder cost (> 0).
      weights: Sample weights; uniform if omitted.

    Returns:
      :class:`NewsvendorSolution` ``(x, value)``.

    Raises:
      TypeError: If ``xi`` is not a floating array of shape ``(n,)`` with ``n >= 1``, or
        ``bulk`` is not an :class:`Interval`.
      ValueError: If ``eps`` is outside [0, 1] or ``h``, ``b`` are not > 0.
    """
    if not isinstance(bulk, Interval):
        raise TypeError(f"`bulk` must be an Interval, got {type(bulk).__name__}.")
    xi, w, acc = _sample_weights(xi, weights, ndim=1)
    w = _validate.guard_interval(w, eps, name="eps", low=0.0, high=1.0)
    w = _validate.guard_positive(w, h, name="h")
    w = _validate.guard_positive(w, b, name="b")
    out = _newsvendor_core(
        xi.astype(acc),
        jnp.asarray(eps),
        jnp.asarray(bulk.lo).astype(acc),
        jnp.asarray(bulk.hi).astype(acc),
        jnp.asarray(h),
        jnp.asarray(b),
        w,
    )
    return NewsvendorSolution(out.x.astype(xi.dtype), out.value.astype(xi.dtype))


# ----------------------------------------------------------------------------- fit


class FitResult(NamedTuple):
    """Result of :func:`fit`.

    Attributes:
      params: The minimiser found.
      value: The exact (unsmoothed) objective at ``params``.
      smoothed_value: The smoothed objective at the last continuation stage.
    """

    params: Any
    value: Array
    smoothed_value: Array


@functools.partial(jax.jit, static_argnames=("steps",))
def _fit_core(family, data, bulk, eps, params0, weights, l2, eta, moment, schedule, steps):
    opt = optax.lbfgs()

    def stage(params, delta):
        def fn(p):
            return objective_value(family, p, data, bulk, eps, weights, l2, eta, moment, delta)

        vg = optax.value_and_grad_from_state(fn)

        def update(carry):
            p, state, prev, _ = carry
            value, grad = vg(p, state=state)
            # only the optimizer's own arithmetic is traced under standard promotion
            p, state = optax_update(opt, grad, state, p, value=value, grad=grad, value_fn=fn)
            # converged: the objective stopped moving (relative change below ~machine eps)
            tol = 4 * jnp.finfo(value.dtype).eps * (1 + jnp.abs(value))
            return p, state, value, jnp.abs(prev - value) <= tol

        def step(carry, _):
            # once converged the remaining iterations are skipped (cond runs one branch)
            return jax.lax.cond(carry[3], lambda c: c, update, carry), None

        with jax.numpy_dtype_promotion("standard"):  # as optax_update: L-BFGS's indices
            state0 = opt.init(params)
        inf = jnp.asarray(jnp.inf, schedule.dtype)
        carry0 = (params, state0, inf, jnp.asarray(False))
        (p, _, _, _), _ = jax.lax.scan(step, carry0, None, length=steps)
        return p, fn(p)

    params, smoothed = jax.lax.scan(stage, params0, schedule)
    zero = jnp.zeros((), schedule.dtype)
    value = objective_value(family, params, data, bulk, eps, weights, l2, eta, moment, zero)
    # never a silent NaN: a non-finite end (NaN or inf data, a diverged solve) raises
    finite = jnp.isfinite(value)
    for leaf in jax.tree.leaves(params):
        finite = finite & jnp.all(jnp.isfinite(leaf))
    params, value = _validate.error_if((params, value), ~finite, _NON_FINITE)
    return FitResult(params=params, value=value, smoothed_value=smoothed[-1])


_NON_FINITE = (
    "`fit` ended at a non-finite objective or parameters (NaN or inf): check that `data`, "
    "`bulk`, `params0`, `weights` and the hyperparameters are finite and of moderate scale."
)


def fit(
    family: Any,
    data: Any,
    bulk: Bulk,
    eps: RealScalarLike,
    params0: Any,
    *,
    weights: Float[ArrayLike, " n"] | None = None,
    l2: RealScalarLike = 0.0,
    eta: RealScalarLike = 0.0,
    moment: RealScalarLike | None = None,
    schedule: Float[ArrayLike, " s"] | tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4),
    steps: int = 150,
) -> FitResult:
    """Minimise the credal objective with smoothing continuation + L-BFGS, in one jit.

    Every stage ``delta`` of ``schedule`` runs ``steps`` iterations of ``optax.lbfgs`` on the
    ``delta``-smoothed objective (a ``lax.scan`` over stages of a ``lax.scan`` over steps),
    warm-started from the previous stage; the result reports the exact objective.
    ``eps``, ``l2``, ``eta``, ``moment``, the family's hyperparameters and the schedule are
    traced (sweeps do not recompile); ``steps`` is static. Run in float64 for agreement
    with :func:`~jaxkit.robust.fit_conic` beyond ~1e-5.

    Never a silent NaN: if the solve ends at a non-finite objective or parameters (NaN or
    inf inputs, a diverged solve), ``fit`` raises instead of returning them, as
    ``optimistix`` solvers do by default (``throw=True``): an ``eqx.error_if`` check, run
    with the program eagerly and under ``jit`` (JAX raises it as a ``ValueError`` or a
    ``JaxRuntimeError``, depending on where the program synchronises; ``EQX_ON_ERROR``
    selects equinox's other behaviours).

    Args:
      family: A loss family.
      data: Reference samples in the family's layout.
      bulk: The calibrated bulk.
      eps: Contamination share in [0, 1].
      params0: Starting point (its pytree structure is the result's).
      weights: Sample weights; uniform if omitted.
      l2: Ridge on linear weights (>= 0).
      eta: Leak fraction (tail term, only with ``moment``).
      moment: First moment of the leaked mass around the bulk centre.
      schedule: Decreasing smoothing widths (> 0).
      steps: L-BFGS iterations per stage (static).

    Returns:
      :class:`FitResult` ``(params, value, smoothed_value)``.

    Raises:
      TypeError: If ``family``, ``bulk`` or ``params0``'s dtype is not supported,
        ``data`` holds no sample, or (a linear family) ``params0`` is not a
        :class:`LinearParams` with ``w`` of shape ``(d,)`` and a scalar ``b``.
      ValueError: If ``eps``, ``eta`` or ``schedule`` is out of range, ``l2`` is negative or
        ``weights`` are negative, not finite or sum to 0.
      ValueError | JaxRuntimeError: If the objective or the parameters end non-finite
        (the message starts with "`fit` ended at a non-finite"; see above).
    """
    _check_family(family)
    _check_bulk(bulk)
    steps = _validate.python_int(steps, name="steps", minimum=1)
    schedule = jnp.asarray(schedule)
    _validate.ndim(schedule, 1, name="schedule")
    if schedule.shape[0] == 0:
        raise ValueError("`schedule` must hold at least one smoothing width.")
    l2, eta = _validate.real_array(l2, name="l2"), _validate.real_array(eta, name="eta")
    eps = _validate.real_array(eps, name="eps")
    eps = _guards(eps, eps, l2, eta, moment)
    eps = _validate.guard_positive(eps, schedule, name="schedule")
    _check_samples(data)
    _check_params(family, params0, data, name="params0")
    eps = _guard_weights(eps, weights, data)
    for leaf in jax.tree.leaves(params0):  # each leaf: the result keeps params0's dtypes
        _validate.floating(leaf, name="params0")
    dt = jnp.result_type(*jax.tree.leaves(params0))
    cast = functools.partial(jnp.asarray, dtype=dt)
    return _fit_core(
        family,
        data,
        bulk,
        cast(eps),
        params0,
        None if weights is None else cast(weights),
        cast(l2),
        cast(eta),
        None if moment is None else cast(moment),
        cast(schedule),
        steps,
    )


def is_union_of_intervals(bulk: Bulk) -> bool:
    return isinstance(bulk, Union) and isinstance(bulk.members, Interval)
