"""Bulk sets (interval, box, ellipsoid/ball, hull, union), their support functions and membership.

A bulk ``B`` is the compact set that carries at least ``1 - alpha`` of the reference
mass; the contamination of a bulk-calibrated credal set lives inside it. Every bulk is
an ``equinox.Module`` (a pytree: its arrays are traced, its type is static), so bulks
pass through ``jit``/``vmap`` like any array argument.

Support functions ``sigma_B(a) = sup_{xi in B} a^T xi`` are the standard closed forms
(interval ``max(a lo, a hi)``, box ``a^T c + sum |a_j| h_j``, ellipsoid
``a^T mu + r ||L^T a||``, hull ``max_k a^T v_k``, union: max over members). They are
our reconstruction of the paper's tractable forms (arXiv 2601.21324 states only that the
objective is a mean plus a sup over the bulk).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxkit import _validate


class Interval(eqx.Module):
    """A closed interval ``[lo, hi]`` of the real line (outcomes of dimension one).

    Attributes:
      lo: Lower end (scalar).
      hi: Upper end (scalar).
    """

    lo: ArrayLike = eqx.field(converter=jnp.asarray)
    hi: ArrayLike = eqx.field(converter=jnp.asarray)


class Box(eqx.Module):
    """An axis-aligned box ``{xi : |xi_j - center_j| <= half_j}``.

    Attributes:
      center: Centre, shape ``(d,)``.
      half: Half-widths (>= 0), shape ``(d,)``.
    """

    center: ArrayLike = eqx.field(converter=jnp.asarray)
    half: ArrayLike = eqx.field(converter=jnp.asarray)


class Ellipsoid(eqx.Module):
    """An ellipsoid ``{mu + r L u : ||u|| <= 1}``; a ball when ``chol`` is a multiple of I.

    Attributes:
      center: Centre ``mu``, shape ``(d,)``.
      chol: Lower-triangular factor ``L`` of the shape matrix ``Sigma = L L^T``, ``(d, d)``.
      radius: Radius ``r`` (scalar, >= 0) in the Mahalanobis metric of ``Sigma``.
    """

    center: ArrayLike = eqx.field(converter=jnp.asarray)
    chol: ArrayLike = eqx.field(converter=jnp.asarray)
    radius: ArrayLike = eqx.field(converter=jnp.asarray)


class Hull(eqx.Module):
    """The convex hull of the retained points ``points[mask]``.

    Attributes:
      points: Candidate vertices, shape ``(m, d)``.
      mask: Which points are retained (bool, shape ``(m,)``); at least one must be True.
    """

    points: ArrayLike = eqx.field(converter=jnp.asarray)
    mask: ArrayLike = eqx.field(converter=jnp.asarray)


class Union(eqx.Module):
    """A finite union of bulks of one kind, stacked along a leading axis of size ``c``.

    Attributes:
      members: A bulk (Interval, Box, Ellipsoid or Hull) whose arrays have a leading
        member axis.
      labels: Label of each member (float, shape ``(c,)``), e.g. the class ``+1``/``-1``
        of a per-class bulk; classification losses use it, others ignore it.
    """

    members: Interval | Box | Ellipsoid | Hull
    labels: ArrayLike = eqx.field(converter=jnp.asarray)


Bulk = Interval | Box | Ellipsoid | Hull | Union


def ball(center: Float[ArrayLike, " d"], radius: Float[ArrayLike, ""]) -> Ellipsoid:
    """The Euclidean ball of ``radius`` around ``center`` (an :class:`Ellipsoid` with L = I).

    ``radius`` must be finite and >= 0 (ValueError; traced: under ``jit``).
    """
    _validate.numeric(center=center)  # before jnp.asarray: a str names it
    center = jnp.asarray(center)
    _validate.ndim(center, 1, name="center")
    radius = _validate.guard_non_negative(
        _validate.real_array(radius, name="radius", dtype=center.dtype), radius, name="radius"
    )
    eye = jnp.eye(center.shape[0], dtype=center.dtype)
    return Ellipsoid(center=center, chol=eye, radius=radius)


def _safe_norm(v: Array) -> Array:
    """Euclidean norm over the last axis whose gradient at 0 is 0 (not NaN)."""
    s = jnp.sum(v * v, axis=-1)
    pos = s > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, s, jnp.ones_like(s))), jnp.zeros_like(s))


# JAX differentiates `jnp.max` / `jnp.maximum` by testing the operand against the result
# bitwise (`u == max(u)`) and, for `jnp.max`, dividing by the number of hits. XLA may compute
# the operand again in each fusion that reads it, and the copies need not round alike: on x86
# with FMA, the CPU back end at -O0 with the elemental fusion emitters (the test suite's XLA
# flags) contracts `p + r * s` into an FMA in some copies only. Then no entry equals the
# maximum and the derivative is 0 (silently wrong) or `1 / 0 = inf`, which a `jnp.where`
# that discards the exact branch turns into `0 * inf = NaN` (`robust.fit` returned all-NaN
# parameters). The two maxima below pick the maximiser once (a comparison or an argmax) and
# select or gather it, so their derivative is one-hot and finite however the copies round.


def _maximum(x: ArrayLike, y: ArrayLike) -> Array:
    """``jnp.maximum(x, y)`` (NaN propagates) with a derivative that never tests equality."""
    return jnp.where((x >= y) | jnp.isnan(x), x, y)


def _max(u: Array, axis: int = -1) -> Array:
    """``jnp.max(u, axis)`` whose derivative is one-hot at the first maximiser (see above)."""
    i = jnp.argmax(u, axis=axis, keepdims=True)
    return jnp.squeeze(jnp.take_along_axis(u, i, axis=axis), axis)


def _support_one(bulk: Bulk, a: Array) -> Array:
    if isinstance(bulk, Interval):
        return _maximum(a * bulk.lo, a * bulk.hi)
    if isinstance(bulk, Box):
        return a @ bulk.center + jnp.abs(a) @ bulk.half
    if isinstance(bulk, Ellipsoid):
        lt_a = jnp.einsum("ji,...j->...i", bulk.chol, a)
        return a @ bulk.center + bulk.radius * _safe_norm(lt_a)
    if isinstance(bulk, Hull):
        vals = jnp.einsum("...d,md->...m", a, bulk.points)
        neg = jnp.asarray(-jnp.inf, vals.dtype)
        return _max(jnp.where(jnp.broadcast_to(bulk.mask, vals.shape), vals, neg), axis=-1)
    if isinstance(bulk, Union):
        per = jax.vmap(_support_one, in_axes=(0, None), out_axes=-1)(bulk.members, a)
        return _max(per, axis=-1)
    raise TypeError(f"`bulk` must be a bulk set (Interval, Box, ...), got {type(bulk).__name__}.")


def _check_bulk(bulk: object) -> None:
    """A bulk set whose fields have the documented shapes (a TypeError naming the field)."""
    if not isinstance(bulk, Interval | Box | Ellipsoid | Hull | Union):
        raise TypeError(
            f"`bulk` must be an Interval, Box, Ellipsoid, Hull or Union, got {type(bulk).__name__}."
        )
    inner, what = (bulk.members, "bulk.members") if isinstance(bulk, Union) else (bulk, "bulk")
    if not isinstance(inner, Interval | Box | Ellipsoid | Hull):
        raise TypeError(
            f"`bulk.members` must be an Interval, Box, Ellipsoid or Hull, got "
            f"{type(inner).__name__}."
        )
    lead = 1 if isinstance(bulk, Union) else 0  # a Union stacks its members on axis 0
    field, rank = _FIRST[type(inner)]
    ref = jnp.shape(getattr(inner, field))
    if len(ref) != lead + rank:
        raise TypeError(f"`{what}.{field}` must be {lead + rank}-D, got shape {ref}.")
    lead_shape, d = ref[:lead], ref[-1] if rank else None
    for field, want in _expected(type(inner), ref[lead:], d):
        got = jnp.shape(getattr(inner, field))
        if got != lead_shape + want:
            raise TypeError(f"`{what}.{field}` must have shape {lead_shape + want}, got {got}.")
    if isinstance(bulk, Union) and jnp.shape(bulk.labels) != lead_shape:
        raise TypeError(
            f"`bulk.labels` must have shape {lead_shape} (one per member), got "
            f"{jnp.shape(bulk.labels)}."
        )


# each kind's first field and its number of axes (one member); the rest follow from it
_FIRST = {Interval: ("lo", 0), Box: ("center", 1), Ellipsoid: ("center", 1), Hull: ("points", 2)}


def _expected(kind: type, ref: tuple[int, ...], d: int | None) -> tuple:
    """The shapes of one member's other fields, given its first field's shape ``ref``."""
    if kind is Interval:
        return (("hi", ()),)
    if kind is Box:
        return (("half", (d,)),)
    if kind is Ellipsoid:
        return (("chol", (d, d)), ("radius", ()))
    return (("mask", ref[:1]),)


_BULK_MSG = {
    Interval: "`bulk` must have finite `lo` <= `hi`.",
    Box: "`bulk` must have a finite center and finite `half` >= 0.",
    Ellipsoid: "`bulk` must have a finite center and `chol`, and a finite `radius` >= 0.",
    Hull: "`bulk` must have finite points and retain at least one (`mask`).",
}


@jax.jit  # one program per bulk type and shape (eagerly: not one per comparison)
def _bad_bulk(bulk: Bulk) -> Array:
    """Whether ``bulk``'s parameters are invalid (NaN compares False: written to fail)."""
    inner = bulk.members if isinstance(bulk, Union) else bulk
    fin = _validate.any_nonfinite
    if isinstance(inner, Interval):
        lo, hi = jnp.asarray(inner.lo), jnp.asarray(inner.hi)
        return fin(lo) | fin(hi) | jnp.any(lo > hi)
    if isinstance(inner, Box):
        return fin(inner.center) | fin(inner.half) | jnp.any(inner.half < 0)
    if isinstance(inner, Ellipsoid):
        r = jnp.asarray(inner.radius)
        return fin(inner.center) | fin(inner.chol) | fin(r) | jnp.any(r < 0)
    return fin(inner.points) | ~jnp.all(jnp.any(inner.mask, axis=-1))


def _guard_bulk(x: Array, bulk: Bulk) -> Array:
    """``x`` guarded by the bulk's parameter checks (eagerly ValueError; traced error_if)."""
    inner = bulk.members if isinstance(bulk, Union) else bulk
    return _validate.error_if(x, _bad_bulk(bulk), _BULK_MSG[type(inner)])


def dim(bulk: Bulk) -> int | None:
    """Dimension ``d`` of the outcomes a bulk lives in (``None`` for an Interval)."""
    if isinstance(bulk, Union):
        inner = bulk.members
        if isinstance(inner, Interval):
            return None
        return (inner.points if isinstance(inner, Hull) else inner.center).shape[-1]
    if isinstance(bulk, Interval):
        return None
    return (bulk.points if isinstance(bulk, Hull) else bulk.center).shape[-1]


@jax.jit
def _support_core(bulk: Bulk, a: Array) -> Array:
    return _support_one(bulk, a)


def support(bulk: Bulk, a: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
    """Support function ``sigma_B(a) = sup_{xi in B} a^T xi``, batched over leading axes.

    Closed forms (standard; [R] in the spec): interval ``max(a lo, a hi)`` (``a`` has no
    trailing ``d`` axis for an Interval), box ``a^T c + sum_j |a_j| h_j``, ellipsoid
    ``a^T mu + r ||L^T a||_2``, hull ``max_k a^T v_k`` over retained points, union: max over
    members. For a convex piecewise-linear loss ``max_k (A_k^T xi + c_k)`` the sup over the
    bulk is ``max_k (sigma_B(A_k) + c_k)`` exactly.

    Args:
      bulk: A bulk set.
      a: Directions, shape ``(*batch, d)`` (``(*batch,)`` for an Interval).

    Returns:
      ``sigma_B(a)`` with shape ``batch``.

    Raises:
      TypeError: If ``bulk`` is not a bulk set, ``a`` is not a numeric array or its last
        axis does not match the bulk.
      ValueError: A bulk with NaN/inf parameters, a negative radius or half-width, ``lo >
        hi`` or no retained hull point (traced: under ``jit``).
    """
    _check_bulk(bulk)
    _validate.numeric(a=a)  # before jnp.asarray: a str names the argument
    a = jnp.asarray(a)
    d = dim(bulk)
    if d is not None and (jnp.ndim(a) < 1 or a.shape[-1] != d):
        raise TypeError(f"`a` must have a last axis of size {d}, got shape {jnp.shape(a)}.")
    return _support_core(bulk, _guard_bulk(a, bulk))


def _contains_one(bulk: Bulk, x: Array, tol: Array) -> Array:
    if isinstance(bulk, Interval):
        return (x >= bulk.lo - tol) & (x <= bulk.hi + tol)
    if isinstance(bulk, Box):
        c = jnp.broadcast_to(bulk.center, x.shape)
        h = jnp.broadcast_to(bulk.half + tol, x.shape)
        return jnp.all(jnp.abs(x - c) <= h, axis=-1)
    if isinstance(bulk, Ellipsoid):
        return mahalanobis(bulk, x) <= bulk.radius + tol
    if isinstance(bulk, Union):
        per = jax.vmap(_contains_one, in_axes=(0, None, None), out_axes=-1)(bulk.members, x, tol)
        return jnp.any(per, axis=-1)
    raise NotImplementedError(
        "`contains` for a Hull bulk needs an LP per point and is not implemented; use "
        "Interval, Box or Ellipsoid bulks (or their unions)."
    )


def mahalanobis(bulk: Ellipsoid, x: Array) -> Array:
    """``||L^{-1}(x - mu)||_2`` for points ``x`` of shape ``(*batch, d)``."""
    diff = x - jnp.broadcast_to(bulk.center, x.shape)
    eye = jnp.eye(bulk.chol.shape[0], dtype=bulk.chol.dtype)
    inv = jax.scipy.linalg.solve_triangular(bulk.chol, eye, lower=True)
    sol = diff @ inv.T  # keeps the batch axes' sharding (no transpose of the batch)
    return jnp.sqrt(jnp.sum(sol * sol, axis=-1))


@functools.partial(jax.jit)
def _contains_core(bulk: Bulk, x: Array, tol: Array) -> Array:
    return _contains_one(bulk, x, tol)


def contains(bulk: Bulk, x: Float[ArrayLike, "..."], *, tol: float = 0.0) -> Bool[Array, "..."]:
    """Whether each point lies in the bulk (within ``tol``), batched over leading axes.

    Args:
      bulk: An Interval, Box, Ellipsoid or a Union of them.
      x: Points, shape ``(*batch, d)`` (``(*batch,)`` for an Interval).
      tol: Slack added to the bounds (>= 0; absolute, in the bulk's metric).

    Returns:
      Boolean array of shape ``batch``.

    Raises:
      NotImplementedError: For a Hull (membership needs an LP per point).
      TypeError: If ``x`` is not a real array or its last axis is not the bulk's dimension.
      ValueError: A bulk with bad parameters (as :func:`support`); ``tol`` not finite and
        >= 0 (traced: under ``jit``).
    """
    _check_bulk(bulk)
    _validate.real(x, name="x")  # a str names `x`, not JAX's error
    if isinstance(bulk, Hull) or (isinstance(bulk, Union) and isinstance(bulk.members, Hull)):
        return _contains_one(bulk, jnp.asarray(x), jnp.asarray(tol))
    x = jnp.asarray(x)
    d = dim(bulk)
    if d is not None and (jnp.ndim(x) < 1 or x.shape[-1] != d):
        raise TypeError(f"`x` must have a last axis of size {d}, got shape {jnp.shape(x)}.")
    x = _validate.guard_non_negative(_guard_bulk(x, bulk), tol, name="tol")
    return _contains_core(bulk, x, jnp.asarray(tol, x.dtype))


def center(bulk: Bulk) -> Array:
    """A centre point of the bulk.

    Midpoint, box centre, ellipsoid centre, mean of retained hull points; for a union the
    mean of the members' centres.

    Raises:
      TypeError: If ``bulk`` is not a bulk set or a field has another shape than documented
        (naming the field, ``bulk.half``).
      ValueError: A bulk with bad parameters, as :func:`support` (a hull with no retained
        point, whose mean would be NaN; traced: under ``jit``).
    """
    _check_bulk(bulk)
    return _guard_bulk(_center(bulk), bulk)


def _center(bulk: Bulk) -> Array:
    """:func:`center` without the checks (the losses' traced code, the bulk checked there)."""
    if isinstance(bulk, Interval):
        return (bulk.lo + bulk.hi) / 2
    if isinstance(bulk, Box | Ellipsoid):
        return bulk.center
    if isinstance(bulk, Hull):
        w = bulk.mask.astype(bulk.points.dtype)
        return jnp.sum(bulk.points * w[:, None], axis=0) / jnp.sum(w)
    if isinstance(bulk, Union):
        return jnp.mean(jax.vmap(_center)(bulk.members), axis=0)
    raise TypeError(f"`bulk` must be a bulk set, got {type(bulk).__name__}.")
