"""MTS meta-step: meta-network weights, the one-step hypergradient, the meta update.

Spec ``training.md`` section 2.2 (steps 2-6). A meta-network ``meta_net`` (an
equinox module mapping one feature vector ``[F]`` to one logit, e.g.
``jaxkit.nn.MLP(F, 1, hidden=(100, 100))``) gives raw scores
``s_i = sigmoid(meta_net(f_i))``, normalised by :func:`normalize_weights` to
``w_i = B s_i / sum_j s_j``. The inner (virtual) step is one SGD step of the model
on the weighted training loss, ``theta' = theta - lr * (1/B) sum_i w_i grad l_i(theta)``;
the meta loss is the mean per-example loss of ``theta'`` on a clean meta batch.
"""

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float, PyTree

from jaxkit import _validate as V
from jaxkit.data._mts import _normalize

_MODES = ("jvp", "unrolled", "finite_diff")


def _tree_vdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def _weights(meta_net, features, class_w):
    logits = jax.vmap(meta_net)(features).reshape(features.shape[0])
    return _normalize(jax.nn.sigmoid(logits), class_w, axis_name=None)


def _inner(loss_fn, params, batch, w, lr):
    g = jax.grad(lambda p: jnp.mean(w * loss_fn(p, batch)))(params)
    return jax.tree.map(lambda p, d: p - (lr * d).astype(p.dtype), params, g)


def _meta_loss(loss_fn, params, meta_batch):
    return jnp.mean(loss_fn(params, meta_batch))


class MTSHypergrad(NamedTuple):
    """The one-step hypergradient and what it was computed from."""

    grad: PyTree  # d L_meta(theta'(phi)) / d phi, same structure as the meta-network
    weight_grad: Float[Array, " b"]  # d L_meta / d w_i
    weights: Float[Array, " b"]  # normalised weights w_i(phi) used in the inner step
    meta_loss: Float[Array, ""]  # L_meta(theta') after the inner step


def _hypergrad(loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, fd_eps, mode):
    w, w_vjp = jax.vjp(lambda m: _weights(m, features, class_w), meta_net)
    w0 = jax.lax.stop_gradient(w)
    b = w.shape[0]
    if mode == "unrolled":  # reverse mode through the inner SGD step
        meta_loss, gw = jax.value_and_grad(
            lambda ww: _meta_loss(loss_fn, _inner(loss_fn, params, batch, ww, lr), meta_batch)
        )(w0)
    else:
        theta1 = _inner(loss_fn, params, batch, w0, lr)
        meta_loss, gamma = jax.value_and_grad(lambda p: _meta_loss(loss_fn, p, meta_batch))(theta1)
        gamma = jax.tree.map(lambda p, g: g.astype(p.dtype), params, gamma)
        losses = lambda p: loss_fn(p, batch)  # noqa: E731
        if mode == "jvp":  # a_i = <grad l_i(theta), gamma>, all i in one forward-mode pass
            a = jax.jvp(losses, (params,), (gamma,))[1]
        else:  # the authors' central difference of l_i along gamma
            norm = jnp.sqrt(_tree_vdot(gamma, gamma))
            eps = fd_eps / jnp.where(norm > 0, norm, 1.0)
            shift = lambda s: jax.tree.map(lambda p, g: p + (s * g).astype(p.dtype), params, gamma)  # noqa: E731
            a = (losses(shift(eps)) - losses(shift(-eps))) / (2 * eps)
            a = jnp.where(norm > 0, a, 0.0)
        gw = (-lr / b) * a
    gw = gw.astype(w.dtype)
    (grad,) = w_vjp(gw)
    return MTSHypergrad(grad, gw, w0, meta_loss.astype(w.dtype))


def _check(loss_fn, features, class_w, lr, fd_eps, mode):
    if not callable(loss_fn):
        raise TypeError(f"`loss_fn` must be callable, got {type(loss_fn).__name__}.")
    V.one_of(_MODES, mode=mode)
    features = jnp.asarray(features)
    V.ndim(features, 2, name="features")
    V.floating(features, name="features")
    features = V.all_finite(features, name="features")
    if class_w is not None:
        class_w = jnp.asarray(class_w)
        V.shape(class_w, (features.shape[0],), name="class_w")
        V.floating(class_w, name="class_w")
        class_w = V.error_if(class_w, ~jnp.all(class_w > 0), "`class_w` must be > 0.")
    features = V.guard_positive(features, lr, name="lr")
    features = V.guard_positive(features, fd_eps, name="fd_eps")
    return features, class_w


_hypergrad_jit = jax.jit(_hypergrad, static_argnames=("loss_fn", "mode"))


def mts_hypergrad(
    loss_fn,
    params: PyTree,
    meta_net: eqx.Module,
    features: Float[ArrayLike, "b f"],
    batch: PyTree,
    meta_batch: PyTree,
    *,
    lr: float | ArrayLike,
    mode: str = "jvp",
    fd_eps: float | ArrayLike = 1e-2,
    class_w: Float[ArrayLike, " b"] | None = None,
) -> MTSHypergrad:
    """Hypergradient of the MTS meta loss w.r.t. the meta-network's parameters.

    ``loss_fn(params, batch) -> [B]`` returns per-example losses (static: keep one
    function object across calls). With ``w = w(phi)`` the normalised weights of
    ``features`` and ``theta' = theta - lr/B * sum_i w_i grad l_i(theta)``, the meta
    loss ``L(theta') = mean_j l_j(theta'; meta_batch)`` is *linear-in-w inside*
    ``theta'``, so ``dL/dw_i = -(lr/B) <gamma, grad l_i(theta)>`` with
    ``gamma = grad L(theta')``, exactly (no approximation).

    Modes (``mode`` static):
      * ``"jvp"``: ``gamma`` by one reverse pass at ``theta'``; the alignments
        ``a_i = <grad l_i(theta), gamma>`` for all ``i`` by ONE forward-mode pass
        ``jax.jvp(theta -> [l_1..l_B](theta), theta, gamma)``; then
        ``grad_phi = vjp(phi -> w(phi))(-(lr/B) a)`` (the chain through the sigmoid,
        the meta-network and the normalisation). Exact.
      * ``"unrolled"``: reference, ``dL/dw`` by reverse mode through the inner SGD
        step (grad of a grad), then the same vjp to ``phi``.
      * ``"finite_diff"``: the authors' scheme, ``a_i`` by central differences
        ``(l_i(theta + eps gamma) - l_i(theta - eps gamma)) / (2 eps)``,
        ``eps = fd_eps / ||gamma||``; error O(fd_eps^2).

    ``lr`` and ``fd_eps`` are traced (finite, > 0; NaN raises). ``class_w`` (``[B]``,
    > 0) multiplies the raw scores before normalisation. Single device (the
    ``axis_name`` of :func:`normalize_weights` is not threaded through here yet).
    Jitted.

    Returns:
      :class:`MTSHypergrad` ``(grad, weight_grad, weights, meta_loss)``.
    """
    features, class_w = _check(loss_fn, features, class_w, lr, fd_eps, mode)
    return _hypergrad_jit(
        loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, fd_eps, mode=mode
    )


class MTSMetaStep(NamedTuple):
    """Result of :func:`mts_meta_step`."""

    meta_net: PyTree  # updated meta-network
    opt_state: Any  # updated optax state of the meta optimiser
    weights: Float[Array, " b"]  # w(phi_new), stop-gradient: weights for the real step
    meta_loss: Float[Array, ""]  # L_meta(theta') at the old phi
    hypergrad_norm: Float[Array, ""]


def _meta_step(
    loss_fn, optimizer, params, meta_net, opt_state, features, batch, meta_batch, class_w, lr,
    fd_eps, mode,
):  # fmt: skip
    h = _hypergrad(
        loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, fd_eps, mode
    )
    updates, opt_state = optimizer.update(h.grad, opt_state, meta_net)
    meta_net = optax.apply_updates(meta_net, updates)
    w = jax.lax.stop_gradient(_weights(meta_net, features, class_w))
    norm = jnp.sqrt(_tree_vdot(h.grad, h.grad)).astype(w.dtype)
    return MTSMetaStep(meta_net, opt_state, w, h.meta_loss, norm)


_meta_step_jit = jax.jit(_meta_step, static_argnames=("loss_fn", "optimizer", "mode"))


def mts_meta_step(
    loss_fn,
    optimizer: optax.GradientTransformation,
    params: PyTree,
    meta_net: eqx.Module,
    opt_state: Any,
    features: Float[ArrayLike, "b f"],
    batch: PyTree,
    meta_batch: PyTree,
    *,
    lr: float | ArrayLike,
    mode: str = "jvp",
    fd_eps: float | ArrayLike = 1e-2,
    class_w: Float[ArrayLike, " b"] | None = None,
) -> MTSMetaStep:
    """One MTS meta update (spec 2.2 steps 2-6): hypergradient, then an optax step on phi.

    The hypergradient is :func:`mts_hypergrad` (same ``loss_fn``, ``lr``, ``mode``,
    ``fd_eps``, ``class_w``). ``optimizer`` (e.g. ``optax.adamw(1e-3,
    weight_decay=1e-4)``) is static: keep one object across calls;
    ``opt_state = optimizer.init(meta_net)``. The returned ``weights`` are those of the
    *updated* meta-network, under ``stop_gradient``, for the real (weighted) training
    step of the model, which stays with the caller. Pure and jitted.
    """
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`optimizer` must be an optax.GradientTransformation, got {type(optimizer).__name__}."
        )
    features, class_w = _check(loss_fn, features, class_w, lr, fd_eps, mode)
    return _meta_step_jit(
        loss_fn, optimizer, params, meta_net, opt_state, features, batch, meta_batch, class_w,
        lr, fd_eps, mode=mode,
    )  # fmt: skip


__all__ = ["MTSHypergrad", "MTSMetaStep", "mts_hypergrad", "mts_meta_step"]
