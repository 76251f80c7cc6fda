"""MTS baselines: learning-to-reweight (Ren et al. 2018) and Meta-Weight-Net (Shu et al. 2019).

Spec ``training.md`` section 2.6. Both are pure jitted step functions at the MTS
conventions (per-example ``loss_fn(params, batch) -> [B]``, optax optimisers,
NamedTuple results, weights with mean 1 over the batch where they are normalised).
"""

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree

from jaxkit import _validate as V
from jaxkit._optim import check_opt_state, check_optimizer
from jaxkit.data._mts_step import MTSMetaStep, _meta_step_jit


class L2RWStep(NamedTuple):
    """Result of :func:`l2rw_step`."""

    params: PyTree  # model parameters after the weighted step
    opt_state: Any  # the model optimiser's state after the step
    weights: Float[Array, " b"]  # w_i (mean 1 over the batch; all 0 when no a_i > 0)
    alignment: Float[Array, " b"]  # a_i = <grad l_i(theta), grad L_meta(theta)>
    loss: Float[Array, ""]  # weighted training loss mean_i w_i l_i(theta)
    meta_loss: Float[Array, ""]  # L_meta(theta) before the step


def _l2rw(loss_fn, optimizer, params, opt_state, batch, meta_batch):
    l0, lin = jax.linearize(lambda p: loss_fn(p, batch), params)
    meta_loss, gamma = jax.value_and_grad(lambda p: jnp.mean(loss_fn(p, meta_batch)))(params)
    gamma = jax.tree.map(lambda p, g: g.astype(p.dtype), params, gamma)
    a = lin(gamma)  # all alignments by one forward-mode pass (exact; Ren et al. backprop twice)
    raw = jnp.maximum(a, 0)
    total = jnp.sum(raw)
    b = jnp.asarray(a.shape[0], a.dtype)
    w = jnp.where(total > 0, raw * (b / jnp.where(total > 0, total, 1.0)), 0.0)
    w = jax.lax.stop_gradient(w)
    (g,) = jax.linear_transpose(lin, params)((w / b).astype(l0.dtype))
    check_opt_state(optimizer, opt_state, params)
    updates, opt_state = optimizer.update(g, opt_state, params)
    params = optax.apply_updates(params, updates)
    loss = jnp.mean(w * l0)
    return L2RWStep(params, opt_state, w, a, loss.astype(a.dtype), meta_loss.astype(a.dtype))


_l2rw_jit = jax.jit(_l2rw, static_argnames=("loss_fn", "optimizer"))


def _check_fn_opt(loss_fn, optimizer):
    if not callable(loss_fn):
        raise TypeError(f"`loss_fn` must be callable, got {type(loss_fn).__name__}.")
    check_optimizer(optimizer)


def l2rw_step(
    loss_fn,
    optimizer: optax.GradientTransformation,
    params: PyTree,
    opt_state: Any,
    batch: PyTree,
    meta_batch: PyTree,
) -> L2RWStep:
    """One learning-to-reweight training step (Ren, Zeng, Yang & Urtasun, ICML 2018).

    No meta-network: the weights are recomputed online at every step from the
    derivative of the meta loss after a virtual step ``theta - alpha sum_i eps_i grad
    l_i`` at ``eps = 0``, ``-dL_meta/d eps_i = alpha a_i`` with ``a_i = <grad
    l_i(theta), grad L_meta(theta)>`` (``L_meta``: mean loss on the clean
    ``meta_batch``). Weights ``w_i = max(a_i, 0)`` normalised to mean 1 (the paper's
    sum-1 weights times ``B``; the step size ``alpha`` cancels); all zero when no
    ``a_i > 0`` (the paper's ``delta``: no update). Then one ``optimizer`` step of the
    model on ``mean_i w_i l_i(theta)``. The alignments are exact, by one forward-mode
    pass of the per-example losses along ``grad L_meta`` (the paper backpropagates
    twice); the model's forward is linearised once and its transpose gives the
    weighted gradient. ``loss_fn``, ``optimizer`` static (keep one object each).
    Pure and jitted.

    Returns:
      :class:`L2RWStep` ``(params, opt_state, weights, alignment, loss, meta_loss)``.
    """
    _check_fn_opt(loss_fn, optimizer)
    return _l2rw_jit(loss_fn, optimizer, params, opt_state, batch, meta_batch)


def mwn_meta_step(
    loss_fn,
    optimizer: optax.GradientTransformation,
    params: PyTree,
    meta_net: eqx.Module,
    opt_state: Any,
    batch: PyTree,
    meta_batch: PyTree,
    *,
    lr: float | Any,
    normalize: bool = False,
    mode: str = "jvp",
) -> MTSMetaStep:
    """One Meta-Weight-Net meta update (Shu et al., NeurIPS 2019).

    The meta-network ``meta_net`` (an equinox module ``[1] -> [1]`` logit, the
    paper's 1 -> 100 -> 1 MLP: ``jaxkit.nn.MLP(1, 1, hidden=(100,))``) maps each
    example's loss ``l_i(theta)`` (detached, as in the paper) to a weight
    ``w_i = sigmoid(meta_net(l_i))``; ``normalize=True`` (static) rescales them to
    mean 1 as MTS does (the paper's code normalises to sum 1 in some versions). The
    virtual step ``theta' = theta - lr/B sum_i w_i grad l_i(theta)``, the meta loss on
    ``meta_batch`` and the hypergradient to ``phi`` are those of
    :func:`mts_meta_step` (``mode`` ``"jvp"`` exact by one linearisation,
    ``"unrolled"`` and ``"finite_diff"`` references), then one ``optimizer`` step of
    the meta-network. ``weights`` in the result are those of the *updated*
    meta-network (stop-gradient) for the caller's real step ``mean_i w_i l_i``.
    Single device. ``lr`` traced (finite, > 0). Pure and jitted.

    Returns:
      :class:`MTSMetaStep` ``(meta_net, opt_state, weights, meta_loss, hypergrad_norm)``.
    """
    _check_fn_opt(loss_fn, optimizer)
    V.one_of(("jvp", "unrolled", "finite_diff"), mode=mode)
    normalize = V.flag(normalize, name="normalize")
    lr = V.guard_positive(V.real_array(lr, name="lr"), lr, name="lr")
    return _meta_step_jit(
        loss_fn, optimizer, params, meta_net, opt_state, None, batch, meta_batch, None, lr,
        1e-2, mode=mode, axis_name=None, normalize=normalize,
    )  # fmt: skip


__all__ = ["L2RWStep", "l2rw_step", "mwn_meta_step"]
