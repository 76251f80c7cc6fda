"""Upper/lower expectations of contamination credal sets, the credal risk and the tail bound.

For the linear-vacuous (Huber) set ``M_eps(P) = {(1 - eps) P + eps R}`` the upper
expectation is ``(1 - eps) E_P f + eps sup f`` (the sup attained by a Dirac ``R``); with
``R`` restricted to a bulk ``B`` the sup runs over ``B`` only. This mean + sup structure is
the paper's (arXiv 2601.21324, abstract) [P]; the tail term :func:`tail_bound` is our
reconstruction [R] of the separate moment bound for mass leaking outside the bulk.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import RealScalarLike, accumulation_dtype


def _check_eps(x, eps, *, high_closed=True):
    return _validate.guard_interval(
        x, eps, name="eps", low=0.0, high=1.0, closed="both" if high_closed else "left"
    )


def _mean(values: Array, weights) -> Array:
    acc = accumulation_dtype(values.dtype)
    v = values.astype(acc)
    if weights is None:
        return jnp.mean(v, axis=-1)
    w = jnp.asarray(weights).astype(acc)
    return jnp.sum(w * v, axis=-1) / jnp.sum(w, axis=-1)


@jax.jit
def _bad_weights(w):
    return ~jnp.all((w >= 0) & jnp.isfinite(w)) | ~jnp.all(jnp.sum(w, axis=-1) > 0)


@jax.jit
def _bad_sup(s):
    return jnp.any(jnp.isnan(s) | (s == -jnp.inf))


@jax.jit
def _upper_core(values, sup_value, eps, weights):
    m = _mean(values, weights)
    s = jnp.asarray(sup_value).astype(m.dtype)
    e = jnp.asarray(eps).astype(m.dtype)
    out = (1 - e) * m + jnp.where(e > 0, e * s, jnp.zeros_like(s))
    return out.astype(values.dtype)


def upper_expectation(
    values: Float[ArrayLike, "*batch n"],
    sup_value: Float[ArrayLike, "*batch"],
    eps: RealScalarLike,
    *,
    weights: Float[ArrayLike, "*batch n"] | None = None,
) -> Float[Array, "*batch"]:
    """Upper expectation ``(1 - eps) sum_i w_i f(xi_i) + eps sup_B f`` of a contamination set.

    Args:
      values: ``f`` at the reference samples, shape ``(*batch, n)`` (last axis = samples).
      sup_value: ``sup_B f`` over the set the contamination may live on (``+inf`` allowed).
      eps: Contamination share in [0, 1] (traced). ``eps = 0`` ignores ``sup_value``.
      weights: Sample weights (normalised here); uniform if omitted.

    Returns:
      The upper expectation, shape ``batch``, dtype of ``values``.

    Raises:
      TypeError: If ``values`` is not a floating array of rank >= 1 or holds no sample (an
        empty last axis), or ``sup_value`` / ``weights`` is not a real array.
      ValueError: If ``eps`` is outside [0, 1], ``sup_value`` is NaN or ``-inf``, or
        ``weights`` are negative, non-finite or sum to 0 (traced: under ``jit``).
    """
    return _upper(values, sup_value, eps, weights, names=("values", "sup_value"))


def _upper(values, sup_value, eps, weights, *, names: tuple[str, str]):
    """:func:`upper_expectation`'s checks and core, naming the caller's arguments.

    ``names``: the public names of ``values`` and ``sup_value`` (``per_sample_loss`` and
    ``sup_loss`` for :func:`credal_risk`).
    """
    vname, sname = names
    _validate.floating(values, name=vname)  # before jnp.asarray: a str names the argument
    values = jnp.asarray(values)
    _validate.min_ndim(values, 1, name=vname)
    _validate.nonempty(values, name=vname, axis=-1)
    if weights is not None:
        _validate.real(weights, name="weights")
        w = jnp.asarray(weights)
        _validate.same_shape(weights=w, **{vname: values})
        msg = "`weights` must be finite and >= 0 with a positive sum."
        values = _validate.error_if(values, _bad_weights(w), msg)
    _validate.real(sup_value, name=sname)
    bad = _bad_sup(jnp.asarray(sup_value))
    values = _validate.error_if(values, bad, f"`{sname}` must not be NaN or -inf.")
    values = _check_eps(values, eps)
    return _upper_core(values, sup_value, eps, weights)


def lower_expectation(
    values: Float[ArrayLike, "*batch n"],
    inf_value: Float[ArrayLike, "*batch"],
    eps: RealScalarLike,
    *,
    weights: Float[ArrayLike, "*batch n"] | None = None,
) -> Float[Array, "*batch"]:
    """Lower expectation ``(1 - eps) sum_i w_i f(xi_i) + eps inf_B f``.

    The conjugate of the upper one, ``lower(f) = -upper(-f)``; arguments as
    :func:`upper_expectation`.
    """
    _validate.floating(values, name="values")  # before jnp.asarray: a str names it
    _validate.real(inf_value, name="inf_value")
    values = jnp.asarray(values)
    return -upper_expectation(-values, -jnp.asarray(inf_value), eps, weights=weights)


def huber_upper_expectation(
    values: Float[ArrayLike, "*batch n"],
    sup_over_support: Float[ArrayLike, "*batch"],
    eps: RealScalarLike,
    *,
    weights: Float[ArrayLike, "*batch n"] | None = None,
) -> Float[Array, "*batch"]:
    """Upper expectation of the plain Huber set (contamination anywhere on the support).

    Same formula as :func:`upper_expectation` with the sup over the whole support: when the
    loss is unbounded there (``sup_over_support = +inf``) and ``eps > 0`` the result is
    exactly ``+inf`` (the vacuity the bulk calibration removes), never a large number.
    """
    return _upper(values, sup_over_support, eps, weights, names=("values", "sup_over_support"))


def credal_risk(
    per_sample_loss: Float[ArrayLike, "*batch n"],
    sup_loss: Float[ArrayLike, "*batch"],
    eps: RealScalarLike,
    *,
    weights: Float[ArrayLike, "*batch n"] | None = None,
    tail: Float[ArrayLike, "*batch"] | float = 0.0,
) -> Float[Array, "*batch"]:
    """Bulk-calibrated credal risk ``J = (1 - eps) E_w loss + eps sup_B loss + tail``.

    ``tail`` is the pluggable bound on contamination leaking outside the bulk (see
    :func:`tail_bound`; default 0, the pure mean + sup of the paper's abstract).
    ``per_sample_loss`` takes leading batch axes (``[*batch, n]``, samples last).
    """
    up = _upper(per_sample_loss, sup_loss, eps, weights, names=("per_sample_loss", "sup_loss"))
    up = _validate.guard_non_negative(up, tail, name="tail", allow_inf=True)
    return up + jnp.asarray(tail).astype(up.dtype)


@jax.jit
def _tail_core(a, lip, eps, eta, moment):
    return eps * eta * (a + lip * moment)


def tail_bound(
    growth_a: Float[ArrayLike, "*batch"],
    growth_L: Float[ArrayLike, "*batch"],
    eps: RealScalarLike,
    eta: RealScalarLike,
    moment: Float[ArrayLike, "*batch"],
) -> Float[Array, "*batch"]:
    """Tail term ``T = eps * eta * (a + L m)`` for contamination leaking outside the bulk.

    Our reconstruction [R]: if the test law is ``(1-eps) P + eps ((1-eta) R_B + eta R_T)``
    with ``R_T`` outside the bulk, ``E_{R_T} ||xi - c|| <= m`` (``c`` the bulk centre) and the
    loss grows linearly, ``loss(xi) <= a + L ||xi - c||``, then the expected loss is at most
    ``J + T`` with ``J`` the mean + sup objective.

    Args:
      growth_a: Growth offset ``a`` (>= 0).
      growth_L: Growth slope ``L`` (>= 0).
      eps: Contamination share in [0, 1].
      eta: Leak fraction in [0, 1].
      moment: First moment ``m`` of ``||xi - c||`` under the leaked law (>= 0).

    Returns:
      ``T``, broadcast over the inputs (any shapes that broadcast together).

    Raises:
      TypeError: If ``growth_a`` is not floating, or ``growth_a``, ``growth_L`` and
        ``moment`` have shapes that do not broadcast together (e.g. one of them empty).
      ValueError: If ``eps`` or ``eta`` is outside [0, 1], or a growth term or ``moment``
        is negative.
    """
    _validate.floating(growth_a, name="growth_a")  # before jnp.asarray: a str names it
    _validate.broadcastable(growth_a=growth_a, growth_L=growth_L, moment=moment)
    a = jnp.asarray(growth_a)
    a = _check_eps(a, eps)
    a = _validate.guard_non_negative(a, a, name="growth_a")
    a = _validate.guard_non_negative(a, growth_L, name="growth_L")
    a = _validate.guard_interval(a, eta, name="eta", low=0.0, high=1.0)
    a = _validate.guard_non_negative(a, moment, name="moment")
    dt = a.dtype
    return _tail_core(
        a,
        jnp.asarray(growth_L).astype(dt),
        jnp.asarray(eps).astype(dt),
        jnp.asarray(eta).astype(dt),
        jnp.asarray(moment).astype(dt),
    )
