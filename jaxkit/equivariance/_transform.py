"""The RECM modulation of per-layer relaxation levels, as optax transforms.

**Reconstructed rule** (no public RECM code; arXiv:2602.02853 abstract + summaries):
every layer's level ``theta_l`` follows the projected linear recurrence

    theta_l <- clip(theta_l - eta (dL/dtheta_l + lambda theta_l), 0, theta_max),

driven by the training signal ``dL/dtheta_l = <grad_W L, U(B_l)>`` (it only sees the
non-equivariant part of the loss gradient) with a *coupled* contraction toward 0, so
the stationary point solves ``dL/dtheta + lambda theta = 0``. On a whitened linear
task with a symmetry gap ``eps`` (the norm of the target map's non-equivariant part)
this gives ``theta* = eps / (1 + lambda)``: exactly symmetric data drive theta to 0,
approximate symmetry keeps just enough freedom. The rule lives in
:func:`recm_update_rule`; pass another ``rule=`` to :func:`recm_modulation` to swap in
the paper's exact rule without changing the API.

Baseline (CR, from ``StefanosPert/Equivariant_Optimization_CR``): a global triangle
schedule :func:`cr_triangle_schedule` and the Lie-derivative penalty
:func:`lie_derivative_penalty`; residual pathway priors: :func:`rpp_penalty`.

References:
  Pertigkiozoglou, Petrache, Trivedi, Daniilidis, "Recurrent Equivariant Constraint
  Modulation", ICML 2026, arXiv:2602.02853 (update rule reconstructed).
  Pertigkiozoglou et al., "Improving Equivariant Model Training via Constraint
  Relaxation", NeurIPS 2024 (schedule and penalty, from code).
  Finzi, Benton, Wilson, "Residual Pathway Priors for Soft Equivariance
  Constraints", NeurIPS 2021.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float, PyTree, Real

from jaxkit import _validate
from jaxkit.equivariance._groups import Group
from jaxkit.equivariance._project import acc_dtype

Rule = Callable[[Array, Array, Array, Array, Array], Array]


def recm_update_rule(
    theta: Array, grad: Array, learning_rate: Array, decay: Array, theta_max: Array
) -> Array:
    """Reconstructed recurrence: ``clip(theta - eta (g + lambda theta), 0, theta_max)``.

    Args:
      theta: Current level (any shape; usually 0-d).
      grad: ``dL/dtheta`` from the training loss.
      learning_rate: ``eta``.
      decay: ``lambda`` (coupled: added to the gradient, not decoupled).
      theta_max: Upper bound of the level.

    Returns:
      The new level.

    Raises:
      TypeError: ``theta`` or ``grad`` not numeric, or shapes that do not broadcast
        together (elementwise: an empty ``theta`` with an empty ``grad`` gives an empty
        level).
    """
    _validate.numeric(theta=theta, grad=grad)
    _validate.broadcastable(theta=theta, grad=grad)
    new = theta - learning_rate * (grad + decay * theta)
    return jnp.clip(new, jnp.zeros_like(new), theta_max)


class RECMState(NamedTuple):
    """State of :func:`recm_modulation`: the step count."""

    count: Array


def recm_modulation(
    learning_rate: Real[ArrayLike, ""],
    *,
    decay: Real[ArrayLike, ""] = 0.1,
    theta_max: Real[ArrayLike, ""] = 1.0,
    rule: Rule = recm_update_rule,
) -> optax.GradientTransformation:
    """Optax transform updating relaxation levels ``theta`` by the RECM recurrence.

    Apply it to the ``theta`` leaves only (see :func:`recm_optimizer`). The returned
    update is ``new_theta - theta``, so ``optax.apply_updates`` lands on
    ``rule(theta, grad, learning_rate, decay, theta_max)``. ``params`` are required.

    Args:
      learning_rate: ``eta > 0`` (traceable; the spec's default: the main rate).
      decay: Coupled contraction ``lambda >= 0`` (default 0.1).
      theta_max: Upper bound ``> 0`` (default 1, in units of the weight scale).
      rule: The update rule (default: the reconstructed :func:`recm_update_rule`).
        With ``optax.inject_hyperparams`` pass ``static_args=("rule",)`` (it would
        otherwise treat the callable as a schedule).

    Returns:
      An ``optax.GradientTransformation`` with :class:`RECMState`.

    Raises:
      ValueError: For concrete non-positive ``learning_rate``/``theta_max``, negative
        ``decay``, or (at ``init``) a concrete ``theta`` outside ``[0, theta_max]``.
    """
    _validate.finite_scalar(learning_rate=learning_rate)
    _validate.positive(learning_rate=learning_rate)
    _validate.finite_scalar(decay=decay)
    _validate.non_negative(decay=decay)
    _validate.finite_scalar(theta_max=theta_max)
    _validate.positive(theta_max=theta_max)

    def init_fn(params: PyTree) -> RECMState:
        if not isinstance(theta_max, jax.core.Tracer):
            for leaf in jax.tree.leaves(params):
                _validate.in_interval(low=0.0, high=float(theta_max), theta=leaf)
        return RECMState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates: PyTree, state: RECMState, params: PyTree | None = None):
        if params is None:
            raise ValueError(
                "`params` must be passed to recm_modulation's update "
                "(the recurrence needs the current theta)."
            )

        lr_ = learning_rate  # traced values: guarded here (concrete ones were checked above)
        if isinstance(lr_, jax.core.Tracer):
            lr_ = _validate.guard_positive(lr_, lr_, name="learning_rate")
        decay_, tmax_ = decay, theta_max
        if isinstance(decay_, jax.core.Tracer):
            decay_ = _validate.guard_non_negative(decay_, decay_, name="decay")
        if isinstance(tmax_, jax.core.Tracer):
            tmax_ = _validate.guard_positive(tmax_, tmax_, name="theta_max")

        def one(g, th):
            dt = th.dtype
            new = rule(
                th,
                g.astype(dt),
                jnp.asarray(lr_, dt),
                jnp.asarray(decay_, dt),
                jnp.asarray(tmax_, dt),
            )
            return (new - th).astype(dt)

        new_updates = jax.tree.map(one, updates, params)
        return new_updates, RECMState(count=state.count + jnp.int32(1))

    return optax.GradientTransformation(init_fn, update_fn)


def _is_theta_path(path: tuple) -> bool:
    last = path[-1] if path else None
    name = getattr(last, "name", getattr(last, "key", None))
    return name == "theta"


def theta_labels(params: PyTree) -> PyTree:
    """Label every leaf ``'recm'`` if its path ends in ``theta``, else ``'main'``."""
    return jax.tree_util.tree_map_with_path(
        lambda p, _: "recm" if _is_theta_path(p) else "main", params
    )


def recm_optimizer(
    main: optax.GradientTransformation,
    *,
    learning_rate: Real[ArrayLike, ""],
    decay: Real[ArrayLike, ""] = 0.1,
    theta_max: Real[ArrayLike, ""] = 1.0,
    labels: Callable[[PyTree], PyTree] | None = None,
) -> optax.GradientTransformation:
    """``optax.multi_transform``: RECM on the ``theta`` leaves, ``main`` on the rest.

    Use with ``params = eqx.filter(model, eqx.is_inexact_array)``; every leaf whose
    path ends in an attribute/key ``theta`` gets :func:`recm_modulation`.

    Args:
      main: Optimizer for all other parameters (Adam, SGD, ...).
      learning_rate: RECM's ``eta``.
      decay: RECM's ``lambda``.
      theta_max: RECM's upper bound.
      labels: Custom labelling function (default :func:`theta_labels`).
    """
    return optax.multi_transform(
        {
            "recm": recm_modulation(learning_rate, decay=decay, theta_max=theta_max),
            "main": main,
        },
        labels if labels is not None else theta_labels,
    )


def relaxation_levels(model: PyTree) -> dict[str, tuple[Array, Array]]:
    """``{path: (theta, theta / |W_eff|_F)}`` for every RECM layer inside ``model``."""
    from jaxkit.equivariance._layers import RECMe3nnLinear, RECMGroupConvC4, RECMLinear

    kinds = (RECMLinear, RECMGroupConvC4, RECMe3nnLinear)
    out: dict[str, tuple[Array, Array]] = {}
    leaves = jax.tree_util.tree_flatten_with_path(model, is_leaf=lambda n: isinstance(n, kinds))[0]
    for path, node in leaves:
        if isinstance(node, kinds):
            out[jax.tree_util.keystr(path) or "."] = node.relaxation_level()
    return out


def set_theta(model: PyTree, value: Real[ArrayLike, ""]) -> PyTree:
    """Return ``model`` with every RECM layer's ``theta`` set to ``value``."""
    from jaxkit.equivariance._layers import RECMe3nnLinear, RECMGroupConvC4, RECMLinear

    kinds = (RECMLinear, RECMGroupConvC4, RECMe3nnLinear)
    _validate.real(value, name="value")
    _validate.finite_scalar(value=value)  # a NaN theta makes every forward NaN
    value = _validate.guard_finite(value, value, name="value")

    def fix(node: Any) -> Any:
        if isinstance(node, kinds):
            return eqx.tree_at(lambda m: m.theta, node, jnp.asarray(value, node.theta.dtype))
        return node

    return jax.tree.map(fix, model, is_leaf=lambda n: isinstance(n, kinds))


# ---------------------------------------------------------------------- baselines


def cr_triangle_schedule(step: Real[ArrayLike, ""], total: Real[ArrayLike, ""]) -> Float[Array, ""]:
    """CR's triangle schedule: 0 at start, 1 at ``total/2``, 0 at ``total``.

    Both arguments may be Python numbers or traced scalars (a training step's counter).
    A ``step`` past ``total`` gives 0 (the schedule has ended).

    Raises:
      ValueError: If ``step`` is negative or not finite, or ``total`` is not finite and
        > 0 (eagerly; under ``jit`` the same checks raise at run time).
    """
    s = jnp.asarray(step, jnp.float32)
    t = jnp.asarray(total, jnp.float32)
    v = jnp.where(s <= t / 2, 2 * s / t, 1.0 - 2 * (s - t / 2) / t)
    v = _validate.guard_positive(jnp.clip(v, 0.0, 1.0), total, name="total")
    return _validate.guard_non_negative(v, step, name="step")


def lie_derivative_penalty(
    b: Float[ArrayLike, "d_out d_in"],
    group: Group,
    x: Float[ArrayLike, "batch d_in"],
) -> Float[Array, ""]:
    """CR's regulariser on a dense branch: ``sum_k |B A_in x - A_out B x| + |B x|``.

    ``A_in, A_out`` are the Lie-algebra generators (SO(2), O(3)); for a finite group
    the discrete analogue ``rho(g) - I`` of a generating element ``g`` is used. ``x`` is
    detached (``stop_gradient``), as in the CR code.
    """
    _validate.floating(b, name="b")  # before jnp.asarray: a str names the argument
    _validate.floating(x, name="x")
    b = jnp.asarray(b)
    _validate.shape(b, (group.d_out, group.d_in), name="b")
    x = jax.lax.stop_gradient(jnp.asarray(x))
    _validate.shape(x, (None, group.d_in), name="x")
    acc = acc_dtype(b.dtype)
    gens = group.lie_algebra(acc)
    if gens is None:
        rin, rout = group.elements(acc)
        i = group.generator_index
        gens = (
            (rin[i] - jnp.eye(group.d_in, dtype=acc))[None],
            (rout[i] - jnp.eye(group.d_out, dtype=acc))[None],
        )
    a_in, a_out = gens
    ba, xa = b.astype(acc), x.astype(acc)
    bx = xa @ ba.T  # [n, d_out]
    pen = jnp.zeros([], acc)
    for k in range(a_in.shape[0]):
        diff = (xa @ a_in[k].T) @ ba.T - bx @ a_out[k].T
        pen = pen + jnp.sqrt(jnp.sum(diff**2) + jnp.finfo(acc).tiny)
    return (pen + jnp.sqrt(jnp.sum(bx**2) + jnp.finfo(acc).tiny)).astype(b.dtype)


def rpp_penalty(
    model: PyTree,
    *,
    eq_weight: Real[ArrayLike, ""] = 1e-6,
    free_weight: Real[ArrayLike, ""] = 1e-2,
) -> Float[Array, ""]:
    """Residual-pathway prior: ``sum_l eq_weight |P(A_l)|^2 + free_weight theta_l^2``.

    Gaussian priors (negative log, up to constants) on the equivariant branch and a
    much tighter one on the free branch, whose norm is ``theta`` in the RECM layers;
    train ``theta`` with the main optimizer for this baseline (no recurrence).
    """
    from jaxkit.equivariance._layers import RECMe3nnLinear, RECMGroupConvC4, RECMLinear

    for name, v in (("eq_weight", eq_weight), ("free_weight", free_weight)):
        _validate.real(v, name=name)
        _validate.finite_scalar(**{name: v})
        _validate.non_negative(**{name: v})
        if isinstance(v, jax.core.Tracer):  # NaN gave a NaN penalty
            v = _validate.guard_non_negative(v, v, name=name)
        if name == "eq_weight":
            eq_weight = v
        else:
            free_weight = v
    kinds = (RECMLinear, RECMGroupConvC4, RECMe3nnLinear)
    total = jnp.zeros([], jnp.float32)
    nodes = jax.tree.leaves(model, is_leaf=lambda n: isinstance(n, kinds))
    for node in nodes:
        if not isinstance(node, kinds):
            continue
        if isinstance(node, RECMGroupConvC4):
            w = node.effective_kernel(relax=False)
        else:
            w = node.effective_weight(relax=False)
        wa = w.astype(jnp.float32)
        th = node.theta.astype(jnp.float32)
        total = total + eq_weight * jnp.sum(wa * wa) + free_weight * th * th
    return total
