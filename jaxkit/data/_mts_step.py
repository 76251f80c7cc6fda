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
from jaxkit._optim import check_opt_state, check_optimizer
from jaxkit._typing import accumulation_dtype
from jaxkit.data._mts import _normalize

_MODES = ("jvp", "unrolled", "finite_diff")


def _tree_vdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def _psum(x, axis_name):
    return x if axis_name is None else jax.tree.map(lambda v: jax.lax.psum(v, axis_name), x)


def _scores(meta_net, features, class_w):
    """Raw scores ``s_i = sigmoid(meta_net(f_i)) * class_w_i`` of this device's rows."""
    s = jax.nn.sigmoid(jax.vmap(meta_net)(features).reshape(features.shape[0]))
    return s if class_w is None else s * class_w.astype(s.dtype)


def _weights(meta_net, features, class_w, axis_name=None, normalize=True):
    s = _scores(meta_net, features, class_w)
    return _normalize(s, None, axis_name=axis_name) if normalize else s


def _step(params, g, lr):
    return jax.tree.map(lambda p, d: p - (lr * d).astype(p.dtype), params, g)


def _mean_loss(loss_fn, params, batch, axis_name):
    """Global mean per-example loss: this device's sum over the global count."""
    per = loss_fn(params, batch)
    count = _psum(jnp.asarray(per.shape[0], per.dtype), axis_name)
    return jnp.sum(per) / jax.lax.stop_gradient(count)


class MTSHypergrad(NamedTuple):
    """The one-step hypergradient and what it was computed from."""

    grad: PyTree  # d L_meta(theta'(phi)) / d phi, same structure as the meta-network
    weight_grad: Float[Array, " b"]  # d L_meta / d w_i
    weights: Float[Array, " b"]  # normalised weights w_i(phi) used in the inner step
    meta_loss: Float[Array, ""]  # L_meta(theta') after the inner step


def _unrolled(loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, normalize):
    """Reference: reverse mode through the inner step and the normalisation (one device)."""

    def meta_of_w(w):
        g = jax.grad(lambda p: jnp.mean(w * loss_fn(p, batch)))(params)
        return jnp.mean(loss_fn(_step(params, g, lr), meta_batch))

    wfn = lambda m: _weights(m, features, class_w, None, normalize)  # noqa: E731
    meta_loss, gw = jax.value_and_grad(meta_of_w)(wfn(meta_net))
    grad = jax.grad(lambda m: meta_of_w(wfn(m)))(meta_net)
    return grad, gw, meta_loss


def _hypergrad(
    loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, fd_eps, mode, axis_name,
    normalize=True,
):  # fmt: skip
    """``features=None``: the meta-network reads each example's loss (Meta-Weight-Net)."""
    losses = lambda p: loss_fn(p, batch)  # noqa: E731
    if mode == "jvp":  # one linearisation of the per-example losses serves both passes
        l0, lin = jax.linearize(losses, params)
        inner_vjp = jax.linear_transpose(lin, params)
    elif mode == "finite_diff":
        l0, inner_vjp = jax.vjp(losses, params)
    else:
        l0 = losses(params)
    if features is None:
        features = jax.lax.stop_gradient(l0)[:, None]
    s, s_vjp = jax.vjp(lambda m: _scores(m, features, class_w), meta_net)
    w = _normalize(s, None, axis_name=axis_name) if normalize else s
    if mode == "unrolled":
        grad, gw, meta_loss = _unrolled(
            loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, normalize
        )
        return MTSHypergrad(grad, gw.astype(w.dtype), w, meta_loss.astype(w.dtype))
    nb = _psum(jnp.asarray(w.shape[0], w.dtype), axis_name)  # global batch size
    (g,) = inner_vjp((w / nb).astype(l0.dtype))
    theta1 = _step(params, _psum(g, axis_name), lr)
    meta_loss, gamma = jax.value_and_grad(
        lambda p: _mean_loss(loss_fn, p, meta_batch, axis_name)
    )(theta1)  # fmt: skip
    meta_loss, gamma = _psum((meta_loss, gamma), axis_name)
    gamma = jax.tree.map(lambda p, g: g.astype(p.dtype), params, gamma)
    if mode == "jvp":  # a_i = <grad l_i(theta), gamma>, all i by the linear map at theta
        a = lin(gamma)
    else:  # the authors' central difference of l_i along gamma
        norm = jnp.sqrt(_tree_vdot(gamma, gamma))
        eps = fd_eps / jnp.where(norm > 0, norm, 1.0)
        shift = lambda e: jax.tree.map(lambda p, g: p + (e * g).astype(p.dtype), params, gamma)  # noqa: E731
        a = (losses(shift(eps)) - losses(shift(-eps))) / (2 * eps)
        a = jnp.where(norm > 0, a, 0.0)
    gw = ((-lr / nb) * a).astype(w.dtype)
    if normalize:  # chain through w_i = B s_i / S (S over the global batch): ds_j gets
        # (B / S) (gw_j - sum_i gw_i s_i / S), whatever device holds i
        acc = accumulation_dtype(s.dtype)
        sa, ga = s.astype(acc), gw.astype(acc)
        tot, dot = _psum((jnp.sum(sa), jnp.sum(ga * sa)), axis_name)
        ds = ((nb.astype(acc) / tot) * (ga - dot / tot)).astype(s.dtype)
    else:
        ds = gw
    (grad,) = s_vjp(ds)
    return MTSHypergrad(_psum(grad, axis_name), gw, w, meta_loss.astype(w.dtype))


def _check(loss_fn, features, class_w, lr, fd_eps, mode, axis_name):
    if not callable(loss_fn):
        raise TypeError(f"`loss_fn` must be callable, got {type(loss_fn).__name__}.")
    V.one_of(_MODES, mode=mode)
    if axis_name is not None and mode == "unrolled":
        raise ValueError("`mode`='unrolled' is a single-device reference: use `axis_name`=None.")
    V.floating(features, name="features")  # before jnp.asarray (a string names no argument)
    features = jnp.asarray(features)
    V.ndim(features, 2, name="features")
    V.nonempty(features, name="features")  # weights of mean 1 over no example
    V.nonempty(features, name="features", axis=-1, what="feature")
    features = V.all_finite(features, name="features")
    if class_w is not None:
        V.floating(class_w, name="class_w")
        class_w = jnp.asarray(class_w)
        V.shape(class_w, (features.shape[0],), name="class_w")
        ok = jnp.all((class_w > 0) & jnp.isfinite(class_w))  # inf: NaN weights
        class_w = V.error_if(class_w, ~ok, "`class_w` must be finite and > 0.")
    features = V.guard_positive(features, lr, name="lr")
    features = V.guard_positive(features, fd_eps, name="fd_eps")
    return features, class_w


def _fits_meta_net(meta_net, features, err: TypeError) -> None:
    """After ``err``: a ``TypeError`` naming ``features`` if ``meta_net`` rejects its rows.

    Only run on the failure path (no cost to a valid call): ``meta_net``'s own message
    names its parameter (``x``), not ``features``.
    """
    row = jax.ShapeDtypeStruct(features.shape[1:], features.dtype)
    try:
        jax.eval_shape(meta_net, row)
    except TypeError as e:
        raise TypeError(
            f"`features` rows (shape {features.shape[1:]}) do not fit `meta_net`: {e}"
        ) from err


_hypergrad_jit = jax.jit(_hypergrad, static_argnames=("loss_fn", "mode", "axis_name"))


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
    axis_name: str | None = None,
) -> MTSHypergrad:
    """Hypergradient of the MTS meta loss w.r.t. the meta-network's parameters.

    ``loss_fn(params, batch) -> [B]`` returns per-example losses (static: keep one
    function object across calls). With ``w = w(phi)`` the normalised weights of
    ``features`` and ``theta' = theta - lr/B * sum_i w_i grad l_i(theta)``, the meta
    loss ``L(theta') = mean_j l_j(theta'; meta_batch)`` is *linear-in-w inside*
    ``theta'``, so ``dL/dw_i = -(lr/B) <gamma, grad l_i(theta)>`` with
    ``gamma = grad L(theta')``, exactly (no approximation).

    Modes (``mode`` static):
      * ``"jvp"``: the per-example losses are linearised once at ``theta``
        (``jax.linearize``): the transpose of that linear map gives the inner
        gradient, ``gamma`` comes from one reverse pass at ``theta'``, and the same
        linear map applied to ``gamma`` gives every alignment
        ``a_i = <grad l_i(theta), gamma>`` (one forward-mode pass, the primal forward
        shared with the inner step). Then the chain ``-(lr/B) a`` -> ``phi`` through
        the normalisation (closed form) and the sigmoid / meta-network (one vjp). Exact.
      * ``"unrolled"``: reference, reverse mode through the inner SGD step and the
        normalisation (grad of a grad, no closed form); single device only.
      * ``"finite_diff"``: the authors' scheme, ``a_i`` by central differences
        ``(l_i(theta + eps gamma) - l_i(theta - eps gamma)) / (2 eps)``,
        ``eps = fd_eps / ||gamma||`` (two extra forward passes); error O(fd_eps^2).

    ``lr`` and ``fd_eps`` are traced (finite, > 0; NaN raises). ``class_w`` (``[B]``,
    finite, > 0) multiplies the raw scores before normalisation.

    Multi-device (``axis_name``, static): call it inside ``jax.shard_map`` with the
    train rows (``features``, ``batch``, ``class_w``) and the meta batch split over
    that mesh axis (e.g. ``"data"`` of :func:`jaxkit.sharding.make_mesh`), ``params``
    and ``meta_net`` replicated. The weights are normalised over the *global* batch
    (mean exactly 1 across devices), the inner gradient, the meta loss and ``gamma``
    are global (``psum``), and ``grad`` / ``meta_loss`` come back replicated, equal
    to the single-device result on the concatenated batches; ``weight_grad`` and
    ``weights`` stay split like the rows. Not with ``mode="unrolled"`` (ValueError).
    Jitted.

    Returns:
      :class:`MTSHypergrad` ``(grad, weight_grad, weights, meta_loss)``.

    Raises:
      TypeError: ``features`` not a floating ``[B, F]`` array with ``B, F >= 1`` whose rows
        ``meta_net`` accepts, or ``class_w`` not a floating ``[B]`` array.
      ValueError: an unknown ``mode``, ``"unrolled"`` with ``axis_name``, a non-finite
        ``features`` entry, ``lr`` or ``fd_eps`` not finite and > 0, or a ``class_w``
        entry not finite and > 0.
    """
    features, class_w = _check(loss_fn, features, class_w, lr, fd_eps, mode, axis_name)
    try:
        return _hypergrad_jit(
            loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, fd_eps,
            mode=mode, axis_name=axis_name,
        )  # fmt: skip
    except TypeError as e:
        _fits_meta_net(meta_net, features, e)
        raise


class MTSMetaStep(NamedTuple):
    """Result of :func:`mts_meta_step`."""

    meta_net: PyTree  # updated meta-network
    opt_state: Any  # updated optax state of the meta optimiser
    weights: Float[Array, " b"]  # w(phi_new), stop-gradient: weights for the real step
    meta_loss: Float[Array, ""]  # L_meta(theta') at the old phi
    hypergrad_norm: Float[Array, ""]


def _meta_step(
    loss_fn, optimizer, params, meta_net, opt_state, features, batch, meta_batch, class_w, lr,
    fd_eps, mode, axis_name, normalize=True,
):  # fmt: skip
    if features is None:  # Meta-Weight-Net: the meta-network reads the losses at theta
        features = jax.lax.stop_gradient(loss_fn(params, batch))[:, None]
    h = _hypergrad(
        loss_fn, params, meta_net, features, batch, meta_batch, class_w, lr, fd_eps, mode,
        axis_name, normalize,
    )  # fmt: skip
    check_opt_state(optimizer, opt_state, meta_net)
    updates, opt_state = optimizer.update(h.grad, opt_state, meta_net)
    meta_net = optax.apply_updates(meta_net, updates)
    w = jax.lax.stop_gradient(_weights(meta_net, features, class_w, axis_name, normalize))
    norm = jnp.sqrt(_tree_vdot(h.grad, h.grad)).astype(w.dtype)
    return MTSMetaStep(meta_net, opt_state, w, h.meta_loss, norm)


_meta_step_jit = jax.jit(
    _meta_step, static_argnames=("loss_fn", "optimizer", "mode", "axis_name", "normalize")
)


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
    axis_name: str | None = None,
) -> MTSMetaStep:
    """One MTS meta update (spec 2.2 steps 2-6): hypergradient, then an optax step on phi.

    The hypergradient is :func:`mts_hypergrad` (same ``loss_fn``, ``lr``, ``mode``,
    ``fd_eps``, ``class_w``). ``optimizer`` (e.g. ``optax.adamw(1e-3,
    weight_decay=1e-4)``) is static: keep one object across calls;
    ``opt_state = optimizer.init(meta_net)``. The returned ``weights`` are those of the
    *updated* meta-network, under ``stop_gradient``, for the real (weighted) training
    step of the model, which stays with the caller. ``axis_name``: the multi-device
    step of :func:`mts_hypergrad` (the replicated meta-network stays in sync on every
    device; the returned weights have mean 1 over the global batch). Pure and jitted.

    Raises:
      TypeError: as :func:`mts_hypergrad`, or ``optimizer`` not an optax transformation,
        or ``opt_state`` not ``optimizer.init(meta_net)``'s tree and shapes.
      ValueError: as :func:`mts_hypergrad`.
    """
    check_optimizer(optimizer)
    features, class_w = _check(loss_fn, features, class_w, lr, fd_eps, mode, axis_name)
    try:
        return _meta_step_jit(
            loss_fn, optimizer, params, meta_net, opt_state, features, batch, meta_batch,
            class_w, lr, fd_eps, mode=mode, axis_name=axis_name,
        )  # fmt: skip
    except TypeError as e:
        _fits_meta_net(meta_net, features, e)
        raise


__all__ = ["MTSHypergrad", "MTSMetaStep", "mts_hypergrad", "mts_meta_step"]
