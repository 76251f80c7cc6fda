"""The exact conic path: the credal objective as a cvxpy problem (LP / SOCP / exp cone).

Host-side (not jitted, needs the ``robust`` extra: cvxpy, clarabel). The problem is built
once with ``eps`` (and ``1 - eps``) as non-negative ``cp.Parameter`` s, so re-solves over an
``eps`` sweep reuse cvxpy's DPP canonicalisation. Support functions are written as conic
expressions of the decision (interval/box: LP; ball/ellipsoid: SOC; hull: one epigraph row
per retained vertex; union: max over members). These forms are our reconstruction [R].
"""

import functools
import time
from typing import Any, NamedTuple

import numpy as np

from jaxkit import _validate
from jaxkit._extras import require
from jaxkit.robust._bulk import Box, Ellipsoid, Hull, Interval, Union
from jaxkit.robust._losses import (
    LAD,
    Hinge,
    Huber,
    LinearParams,
    Logistic,
    Newsvendor,
    PiecewiseLinear,
    Squared,
)


def _cp():
    return require("cvxpy", extra="robust", what="fit_conic needs cvxpy")


@functools.cache
def _installed_solvers() -> tuple[str, ...]:
    """The installed cvxpy solvers, asked once (the call takes milliseconds: it imports each)."""
    return tuple(_cp().installed_solvers())


def _check_solver(solver) -> None:
    """TypeError unless ``solver`` is a str; ValueError unless cvxpy has it installed.

    Cheap after the first call (a cached list), so a timed re-solve does not pay it.
    """
    if not isinstance(solver, str):
        raise TypeError(
            "`solver` must be a cvxpy solver name (str), got "
            f"{type(solver).__name__} {solver!r:.80}."
        )
    installed = _installed_solvers()
    if solver.upper() not in installed:  # cvxpy compares upper-case names
        raise ValueError(
            f"`solver` must be one of the installed cvxpy solvers "
            f"{', '.join(map(repr, installed))}; got {solver!r}."
        )


def _np(x):
    return np.asarray(x, dtype=np.float64)


def _data(data, rank: int, *, what: str = "") -> np.ndarray:
    """A sample array of ``data`` with rank ``rank`` (``what``: which part of ``data``)."""
    a = _validate.host_real(data, name="data", what=f"a real array{what}")
    if a.ndim != rank:
        raise TypeError(f"`data`{what} must have rank {rank}, got shape {a.shape}.")
    if a.shape[0] == 0:  # the uniform weights are 1/n
        raise TypeError(
            f"`data`{what} must hold at least one sample on its leading axis, got shape {a.shape}."
        )
    return a


def _pair(data) -> tuple[np.ndarray, np.ndarray]:
    """``data`` as ``(z [n, p], y [n])`` (the linear and classification families)."""
    if isinstance(data, str) or not isinstance(data, tuple | list) or len(data) != 2:
        got = np.shape(data) if hasattr(data, "shape") else repr(data)[:80]
        raise TypeError(
            f"`data` must be a pair (z, y) of arrays [n, p] and [n], got "
            f"{type(data).__name__} {got}."
        )
    z, y = _data(data[0], 2, what=" (its z)"), _data(data[1], 1, what=" (its y)")
    if y.shape[0] != z.shape[0]:
        raise TypeError(
            f"`data`: z and y must hold the same number of samples, got shapes {z.shape} "
            f"and {y.shape}."
        )
    return z, y


def _members(bulk: Union) -> list:
    c = int(np.shape(bulk.labels)[0])
    kind = type(bulk.members)
    fields = {k: _np(getattr(bulk.members, k)) for k in _FIELDS[kind]}
    if kind is Hull:
        fields["mask"] = np.asarray(bulk.members.mask, bool)
    return [kind(**{k: v[i] for k, v in fields.items()}) for i in range(c)]


_FIELDS = {
    Interval: ("lo", "hi"),
    Box: ("center", "half"),
    Ellipsoid: ("center", "chol", "radius"),
    Hull: ("points", "mask"),
}


def cp_support(bulk, a):
    """``sigma_B(a)`` for a cvxpy affine expression (or constant) ``a``."""
    cp = _cp()
    if isinstance(bulk, Interval):
        lo, hi = float(_np(bulk.lo)), float(_np(bulk.hi))
        return cp.maximum(a * lo, a * hi)
    if isinstance(bulk, Box):
        return a @ _np(bulk.center) + cp.abs(a) @ _np(bulk.half)
    if isinstance(bulk, Ellipsoid):
        chol = _np(bulk.chol)
        return a @ _np(bulk.center) + float(_np(bulk.radius)) * cp.norm(chol.T @ a, 2)
    if isinstance(bulk, Hull):
        pts = _np(bulk.points)[np.asarray(bulk.mask, bool)]
        return cp.max(pts @ a)
    if isinstance(bulk, Union):
        return cp.maximum(*[cp_support(m, a) for m in _members(bulk)])
    raise TypeError(f"`bulk` must be a bulk set, got {type(bulk).__name__}.")


def _bulk_center(bulk) -> np.ndarray:
    if isinstance(bulk, Interval):
        return np.asarray((_np(bulk.lo) + _np(bulk.hi)) / 2)
    if isinstance(bulk, Box | Ellipsoid):
        return _np(bulk.center)
    if isinstance(bulk, Hull):
        return _np(bulk.points)[np.asarray(bulk.mask, bool)].mean(axis=0)
    return np.mean([_bulk_center(m) for m in _members(bulk)], axis=0)


class ConicProblem(NamedTuple):
    """A built cvxpy problem: ``solve(eps)`` re-solves with a new contamination share."""

    problem: Any
    eps: Any
    one_minus_eps: Any
    params: Any  # cvxpy variables in the family's params layout
    family: Any

    def solve(self, eps: float, *, solver: str = "CLARABEL", **kwargs: Any) -> "ConicResult":
        """Solve at ``eps`` (host); returns a :class:`ConicResult`."""
        eps = float(eps)
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"`eps` must lie in [0, 1], got eps={eps}.")
        _check_solver(solver)
        self.eps.value = eps
        self.one_minus_eps.value = 1.0 - eps
        t0 = time.perf_counter()
        self.problem.solve(solver=solver, **kwargs)
        dt = time.perf_counter() - t0
        if isinstance(self.params, LinearParams):
            p = LinearParams(np.asarray(self.params.w.value), np.asarray(self.params.b.value))
        else:
            p = np.asarray(self.params.value)
        value = float(self.problem.value) if self.problem.value is not None else float("nan")
        return ConicResult(params=p, value=value, status=str(self.problem.status), solve_time=dt)


class ConicResult(NamedTuple):
    """Result of :func:`fit_conic`: params (NumPy), objective value, solver status, seconds."""

    params: Any
    value: float
    status: str
    solve_time: float


def _loss_and_sup(cp, family, data, bulk):
    """The cvxpy variables, per-sample loss vector, sup over the bulk, growth (a, L) or None."""
    if isinstance(family, Newsvendor):
        h, b = float(_np(family.h)), float(_np(family.b))
        xi = _data(data, 1)
        x = cp.Variable()
        loss = h * cp.pos(x - xi) + b * cp.pos(xi - x)
        sup = cp.maximum(cp_support(bulk, -h) + h * x, cp_support(bulk, b) - b * x)
        c = float(_bulk_center(bulk))
        return x, loss, sup, (max(h, b) * cp.abs(x - c), max(h, b))
    if isinstance(family, LAD | Squared | Huber):
        z, y = _pair(data)
        w, b0 = cp.Variable(z.shape[1]), cp.Variable()
        r = y - z @ w - b0
        u = cp.hstack([-w, np.ones(1)])
        sup_abs = cp.maximum(cp_support(bulk, u) - b0, cp_support(bulk, -u) + b0)
        growth = (cp.abs(u @ _bulk_center(bulk) - b0), cp.norm(u, 2))
        if isinstance(family, LAD):
            return LinearParams(w, b0), cp.abs(r), sup_abs, growth
        if isinstance(family, Squared):
            return LinearParams(w, b0), cp.square(r), cp.square(cp.pos(sup_abs)), None
        dh = float(_np(family.delta_h))
        g = (dh * growth[0], dh * growth[1])
        return LinearParams(w, b0), 0.5 * cp.huber(r, dh), 0.5 * cp.huber(cp.pos(sup_abs), dh), g
    if isinstance(family, Hinge | Logistic):
        z, y = _pair(data)
        w, b0 = cp.Variable(z.shape[1]), cp.Variable()
        margin = cp.multiply(y, z @ w + b0)
        if isinstance(bulk, Union):
            pairs = list(zip(_members(bulk), _np(bulk.labels), strict=True))
        else:
            pairs = [(bulk, 1.0), (bulk, -1.0)]
        terms = [cp_support(m, -yk * w) - yk * b0 for m, yk in pairs]
        growth_a = cp.abs(w @ _bulk_center(bulk) + b0)
        if isinstance(family, Hinge):
            sup = cp.maximum(0, *[1 + t for t in terms])
            return LinearParams(w, b0), cp.pos(1 - margin), sup, (1 + growth_a, cp.norm(w, 2))
        sup = cp.maximum(*[cp.logistic(t) for t in terms])
        return (
            LinearParams(w, b0),
            cp.logistic(-margin),
            sup,
            (np.log(2.0) + growth_a, cp.norm(w, 2)),
        )
    if isinstance(family, PiecewiseLinear):
        A, B, c = _np(family.A), _np(family.B), _np(family.c)
        xi = _data(data, 2)
        if xi.shape[1] != A.shape[1]:
            raise TypeError(
                f"`data` must have shape (n, {A.shape[1]}) (the family's A is {A.shape}), "
                f"got shape {xi.shape}."
            )
        theta = cp.Variable(B.shape[1])
        pieces = xi @ A.T + cp.reshape(B @ theta + c, (1, A.shape[0]), order="C")
        loss = cp.max(pieces, axis=1)
        sig = np.array([float(cp_support(bulk, A[k]).value) for k in range(A.shape[0])])
        sup = cp.max(sig + B @ theta + c)
        off = A @ _bulk_center(bulk) + c
        return (
            theta,
            loss,
            sup,
            (cp.max(cp.abs(off + B @ theta)), float(np.max(np.linalg.norm(A, axis=1)))),
        )
    raise TypeError(f"`family` must be a loss family, got {type(family).__name__}.")


def build_conic(
    family: Any,
    data: Any,
    bulk: Any,
    *,
    weights: Any = None,
    l2: float = 0.0,
    eta: float = 0.0,
    moment: float | None = None,
) -> ConicProblem:
    """Build the credal problem as a DPP cvxpy problem with ``eps`` as a parameter (host).

    Same objective as :func:`~jaxkit.robust.credal_objective`:
    ``(1-eps) sum_i w_i loss_i + eps sup_B loss + l2 ||w||^2 [+ eps eta (a + L moment)]``.
    ``data`` is in the family's layout: ``xi [n]`` (newsvendor), ``(z [n, p], y [n])``
    (linear and classification families) or ``xi [n, d]`` (piecewise linear); a string, a
    non-numeric array, another rank or no samples (``n = 0``) is a ``TypeError`` naming it.
    """
    for name, v in (("l2", l2), ("eta", eta)) + (
        (("moment", moment),) if moment is not None else ()
    ):
        _validate.finite_scalar(**{name: v})
        _validate.non_negative(**{name: v})
    _validate.in_interval(low=0, high=1, eta=eta)
    cp = _cp()
    params, loss, sup, growth = _loss_and_sup(cp, family, data, bulk)
    n = loss.shape[0]
    if weights is None:
        w = np.full(n, 1.0 / n)
    else:
        w = _validate.host_real(weights, name="weights")
        _validate.shape(w, (n,), name="weights")
        if not (np.all(np.isfinite(w)) and np.all(w >= 0) and np.sum(w) > 0):
            raise ValueError("`weights` must be finite and >= 0 with a positive sum.")
        w = w / np.sum(w)
    eps = cp.Parameter(nonneg=True, value=0.0)
    ome = cp.Parameter(nonneg=True, value=1.0)
    obj = ome * (w @ loss) + eps * sup
    if l2 and isinstance(params, LinearParams):
        obj = obj + float(l2) * cp.sum_squares(params.w)
    if moment is not None and float(eta) > 0:
        if growth is None:
            raise NotImplementedError(f"{type(family).__name__} has no linear growth: no tail.")
        a, lip = growth
        obj = obj + float(eta) * eps * (a + float(moment) * lip)
    prob = cp.Problem(cp.Minimize(obj))
    return ConicProblem(prob, eps, ome, params, family)


def fit_conic(
    family: Any,
    data: Any,
    bulk: Any,
    eps: float,
    *,
    weights: Any = None,
    l2: float = 0.0,
    eta: float = 0.0,
    moment: float | None = None,
    solver: str = "CLARABEL",
) -> ConicResult:
    """Solve the credal problem exactly with cvxpy (Clarabel by default); host-side.

    Args:
      family: A loss family (``newsvendor``, ``lad``, ``squared``, ``huber``, ``hinge``,
        ``logistic``, ``piecewise_linear``).
      data: Reference samples in the family's layout (converted to NumPy float64).
      bulk: The calibrated bulk.
      eps: Contamination share in [0, 1].
      weights: Sample weights; uniform if omitted.
      l2: Ridge on linear weights.
      eta: Leak fraction (tail term, only with ``moment``).
      moment: First moment of the leaked mass around the bulk centre.
      solver: Any cvxpy solver name installed (``"CLARABEL"``, ``"ECOS"``, ``"SCS"``, ...).

    Returns:
      :class:`ConicResult` ``(params, value, status, solve_time)``.

    Raises:
      ValueError: If ``eps`` is outside [0, 1] or ``solver`` is not an installed cvxpy
        solver (the message lists them).
      TypeError: If ``solver`` is not a str, or ``data`` (or ``weights``) is not a real
        array of the family's layout and rank, or ``data`` holds no samples.
    """
    _check_solver(solver)
    return build_conic(family, data, bulk, weights=weights, l2=l2, eta=eta, moment=moment).solve(
        eps, solver=solver
    )
