"""Bi-level sample weighting with a meta-classifier (the repo's dual update, spec §4.2).

Inner problem: the detector minimises ``mean_i a_i l_i`` with weights ``a = sigmoid(
f_psi(h_i) / T)`` divided by their batch mean, from per-sample features ``h_i``
(:func:`weight_features`). Outer problem: the weighter ``psi`` maximises the alignment
score ``mean_i a_i s_i``, where ``s_i`` is either

* ``"residual"`` (the repo): ``relu(mean_px[(P_i - Y_i) * mean_v(P_v - Y_v)])``
  standardised over the batch (:func:`residual_scores`), or
* ``"grad_dot"``: the exact one-step hypergradient of learning-to-reweight
  (:func:`grad_dot_scores`), ``-d L_val(w - lr grad_w mean_i a_i l_i) / d a_i`` at
  ``a = 1``.

The repo's 16th feature, a prior difficulty read from a file that is not shipped, is
left out: 15 features. Validation "labels" are pseudo-masks (see ``_refine``).
"""

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from jaxkit import _validate
from jaxkit import nn as jnn
from jaxkit.vision.irdet._diffusion import _check_image

N_FEATURES = 15
"""Length of the per-sample feature vector of ``weight_features``."""


def _dice(a, b):
    return (2 * jnp.sum(a * b, axis=(-2, -1)) + 1) / (
        jnp.sum(a, axis=(-2, -1)) + jnp.sum(b, axis=(-2, -1)) + 1
    )


def _band(y):
    # edge padding of H and W by concatenation (jnp.pad's edge mode slices the batch
    # axis too, which a batch-sharded input does not allow)
    yp = jnp.concatenate([y[:, :1], y, y[:, -1:]], axis=1)
    yp = jnp.concatenate([yp[:, :, :1], yp, yp[:, :, -1:]], axis=2)
    stack = jnp.stack(
        [yp[:, i : i + y.shape[1], j : j + y.shape[2]] for i in range(3) for j in range(3)]
    )
    return jnp.max(stack, axis=0) - jnp.min(stack, axis=0)  # dilation minus erosion


@jax.jit
def _features_core(logits, pseudo, surrogate, ema_loss, val_residual):
    dt = logits.dtype
    eps = jnp.asarray(1e-6, dt)
    p = jax.nn.sigmoid(logits)
    pc = jnp.clip(p, eps, 1 - eps)
    ent = -(pc * jnp.log(pc) + (1 - pc) * jnp.log1p(-pc))
    r = p - pseudo
    ar = jnp.abs(r)
    flat = ar.reshape(ar.shape[0], -1)
    k = max(1, int(round(0.1 * flat.shape[1])))
    top = jnp.mean(jax.lax.top_k(flat, k)[0], axis=-1)
    rv = val_residual[None]
    dot = jnp.mean(r * rv, axis=(-2, -1))
    nr = jnp.sqrt(jnp.sum(r * r, axis=(-2, -1)) + eps)
    nv = jnp.sqrt(jnp.sum(rv * rv) + eps)
    cos = jnp.sum(r * rv, axis=(-2, -1)) / (nr * nv)
    sign = jnp.mean((jnp.sign(r) == jnp.sign(rv)).astype(dt), axis=(-2, -1))
    band = _band(pseudo)
    band_l1 = jnp.sum(ar * band, axis=(-2, -1)) / (jnp.sum(band, axis=(-2, -1)) + 1)
    feats = jnp.stack(
        [
            jnp.mean(p, axis=(-2, -1)),
            jnp.mean(jnp.abs(logits), axis=(-2, -1)),
            jnp.mean(ent, axis=(-2, -1)),
            jnp.mean(ar, axis=(-2, -1)),
            jnp.sqrt(jnp.mean(r * r, axis=(-2, -1)) + eps),
            top,
            dot,
            cos,
            sign,
            band_l1,
            _dice(p, pseudo),
            jnp.mean(pseudo, axis=(-2, -1)),
            jnp.mean(jnp.abs(pseudo - surrogate), axis=(-2, -1)),
            _dice(pseudo, surrogate),
            ema_loss,
        ],
        axis=-1,
    )
    mu = jnp.mean(feats, axis=0, keepdims=True)
    # std with a floor inside the sqrt: a constant column (e.g. zero val residual) has a
    # finite gradient instead of NaN
    sd = jnp.sqrt(jnp.mean((feats - mu) ** 2, axis=0, keepdims=True) + jnp.asarray(1e-12, dt))
    return (feats - mu) / (sd + jnp.asarray(1e-6, dt))


def weight_features(
    logits: Float[ArrayLike, "..."],
    pseudo: Float[ArrayLike, "..."],
    surrogate: Float[ArrayLike, "..."],
    ema_loss: Float[ArrayLike, "..."],
    val_residual: Float[ArrayLike, "..."] | None = None,
) -> Float[Array, "..."]:
    """The 15 per-sample statistics of the meta-classifier, standardised over the batch.

    In order: mean prob, mean |logit|, mean binary entropy; L1 and L2 residual
    ``P - Y`` and the top-10 % L1 residual; dot, cosine and sign agreement of the
    residual with ``val_residual`` (all zero-information when it is zero, as in the
    repo's inner step); boundary-band L1 (3x3 dilation minus erosion of ``Y``), Dice
    of ``P`` vs ``Y``, foreground ratio of ``Y``; L1 and Dice between ``Y`` and the
    surrogate-diffused prediction; the sample's EMA loss. Each column is standardised
    over the batch (constant columns become 0). Jitted.

    Args:
      logits: Detector logits ``[B, H, W]``.
      pseudo: Pseudo-masks ``[B, H, W]`` (0/1 or soft).
      surrogate: :func:`surrogate_refine` of the probabilities, ``[B, H, W]``.
      ema_loss: EMA (0.9) of each sample's loss, ``[B]``.
      val_residual: Mean validation residual ``[H, W]`` (default zeros).

    Raises:
      TypeError: Mismatched shapes or rank, non-floating ``logits`` or a non-numeric
        input (a string included).
    """
    logits = _check_image(logits, "logits")
    _validate.ndim(logits, 3, name="logits")
    _validate.nonempty(logits, name="logits")  # batch-standardised features of no sample
    dt = logits.dtype
    _validate.numeric(pseudo=pseudo, surrogate=surrogate, ema_loss=ema_loss)
    pseudo, surrogate, ema_loss = (jnp.asarray(a).astype(dt) for a in (pseudo, surrogate, ema_loss))
    for name, a in (("pseudo", pseudo), ("surrogate", surrogate)):
        if a.shape != logits.shape:
            raise TypeError(
                f"`{name}` must have the shape of `logits` {logits.shape}, got {a.shape}."
            )
    if ema_loss.shape != logits.shape[:1]:
        raise TypeError(f"`ema_loss` must have shape {logits.shape[:1]}, got {ema_loss.shape}.")
    if val_residual is None:
        val_residual = jnp.zeros(logits.shape[1:], dt)
    val_residual = _validate.real_array(val_residual, name="val_residual").astype(dt)
    if val_residual.shape != logits.shape[1:]:
        raise TypeError(
            f"`val_residual` must have shape {logits.shape[1:]}, got {val_residual.shape}."
        )
    return _features_core(logits, pseudo, surrogate, ema_loss, val_residual)


def make_weighter(*, key: jax.Array, n_features: int = N_FEATURES, hidden: int = 32) -> jnn.MLP:
    """The meta-classifier ``f_psi``: a ``jaxkit.nn.MLP`` ``n_features -> hidden -> 1``."""
    _validate.is_key(key)
    n_features = _validate.python_int(n_features, name="n_features", minimum=1)
    hidden = _validate.python_int(hidden, name="hidden", minimum=1)
    return jnn.MLP(n_features, 1, hidden=(hidden,), key=key)


@jax.jit
def _weights_core(weighter, feats, temperature):
    logit = jax.vmap(weighter)(feats)[:, 0]
    a = jax.nn.sigmoid(logit / temperature)
    return a / jnp.mean(a)


def sample_weights(
    weighter: jnn.MLP, features: Float[ArrayLike, "..."], *, temperature: Real[ArrayLike, ""] = 0.25
) -> Float[Array, "..."]:
    """Per-sample weights ``a = sigmoid(f_psi(h) / T)`` divided by their batch mean.

    The mean of the returned weights is 1; with identical feature rows every weight
    is exactly 1. Jitted; differentiable in the weighter's parameters.

    Raises:
      TypeError: ``features`` not a real ``[B, F]`` array (a string included), with no
        sample (the batch mean of no weight is NaN), or with ``F`` not the weighter's
        input width.
      ValueError: ``temperature <= 0``.
    """
    features = _validate.real_array(features, name="features")
    _validate.ndim(features, 2, name="features")
    _validate.nonempty(features, name="features")
    if isinstance(weighter, jnn.MLP):  # its own check would name its `x`, not `features`
        _validate.shape(features, (None, weighter.weights[0].shape[0]), name="features")
    features = _validate.guard_positive(features, temperature, name="temperature")
    return _weights_core(weighter, features, jnp.asarray(temperature, features.dtype))


@jax.jit
def _residual_core(p_train, y_train, p_val, y_val):
    rv = jnp.mean(p_val - y_val, axis=0)
    s = jax.nn.relu(jnp.mean((p_train - y_train) * rv[None], axis=(-2, -1)))
    mu = jnp.mean(s)
    sd = jnp.sqrt(jnp.mean((s - mu) ** 2) + jnp.asarray(1e-12, s.dtype))
    return (s - mu) / (sd + jnp.asarray(1e-6, s.dtype))


def residual_scores(
    prob_train: Float[ArrayLike, "..."],
    pseudo_train: Float[ArrayLike, "..."],
    prob_val: Float[ArrayLike, "..."],
    pseudo_val: Float[ArrayLike, "..."],
) -> Float[Array, "..."]:
    """The repo's output-space alignment proxy ``s_i`` (``proxy="residual"``), standardised.

    ``s_i = relu(mean_px[(P_i - Y_i) * mean_v(P_v - Y_v)])``, then ``(s - mean) /
    (std + 1e-6)`` over the batch. Jitted.

    Raises:
      TypeError: Train or validation pairs of different shapes, or H, W that differ; a
        non-numeric input (a string included).
    """
    pt = _check_image(prob_train, "prob_train")
    pv = _check_image(prob_val, "prob_val")
    _validate.numeric(pseudo_train=pseudo_train, pseudo_val=pseudo_val)
    yt, yv = (jnp.asarray(a).astype(pt.dtype) for a in (pseudo_train, pseudo_val))
    if yt.shape != pt.shape or yv.shape != pv.shape or pt.shape[1:] != pv.shape[1:] or pt.ndim != 3:
        raise TypeError(
            "`prob_train`/`pseudo_train` [B, H, W] and `prob_val`/`pseudo_val` [V, H, W] must "
            f"match, got {pt.shape}, {yt.shape}, {pv.shape}, {yv.shape}."
        )
    return _residual_core(pt, yt, pv.astype(pt.dtype), yv)


def _per_sample(loss_fn, params, batch, name):
    """``loss_fn(params, batch)``, checked at trace time to be ``[B]`` (``batch``'s size)."""
    n = jax.tree.leaves(batch)[0].shape[0]
    loss = loss_fn(params, batch)
    if jnp.shape(loss) != (n,):
        raise TypeError(
            f"`loss_fn` must return one loss per sample of `{name}`, shape ({n},) (the "
            f"leading axis of its leaves), got {jnp.shape(loss)}."
        )
    return loss


@functools.partial(jax.jit, static_argnames=("loss_fn",))
def _grad_dot_core(params, train_batch, val_batch, lr, *, loss_fn):
    n = jax.tree.leaves(train_batch)[0].shape[0]

    def val_after(a):
        def train_loss(p):
            return jnp.mean(a * _per_sample(loss_fn, p, train_batch, "train_batch"))

        g = jax.grad(train_loss)(params)
        new = jax.tree.map(lambda p, gg: p - lr * gg, params, g)
        return jnp.mean(_per_sample(loss_fn, new, val_batch, "val_batch"))

    ones = jnp.ones((n,), jax.tree.leaves(params)[0].dtype)
    return -jax.grad(val_after)(ones)


def grad_dot_scores(
    loss_fn: Callable[[Any, Any], Array],
    params: Any,
    train_batch: Any,
    val_batch: Any,
    *,
    lr: Real[ArrayLike, ""] = 1e-3,
) -> Float[Array, "..."]:
    """Exact one-step learning-to-reweight scores (``proxy="grad_dot"``).

    ``s_i = -d/d a_i L_val(w - lr * grad_w mean_j a_j l_j(w))`` at ``a = 1``, by
    ``jax.grad`` through the inner step (for small ``lr`` it is
    ``(lr / B) <grad l_i, grad L_val>``). ``loss_fn(params, batch)`` returns the
    per-sample losses ``[B]``; the batches are pytrees with a leading batch axis. Jitted
    with ``loss_fn`` static (pass the same function object to hit the cache).
    ``params`` is passed through to ``loss_fn`` (any shapes: its business); its leaves
    must be floating arrays.

    Raises:
      TypeError: A leaf of ``params`` not floating or a batch leaf not a numeric array
        (a string included); a batch leaf without a leading axis or of another batch
        size than its siblings; a ``val_batch`` of no sample; ``loss_fn`` not returning
        shape ``[B]`` for a batch of ``B`` samples.
      ValueError: ``lr <= 0``.
    """
    if not _validate.leaves(params, name="params", inexact=True):  # differentiated
        raise TypeError(f"`params` must hold at least one floating array, got {params!r:.80}.")
    _validate.leaves(train_batch, name="train_batch", batch=True, keys=True)
    val = _validate.leaves(val_batch, name="val_batch", batch=True, keys=True)
    _validate.nonempty(val[0], name="val_batch")  # L_val is a mean over its samples
    _validate.real(lr, name="lr")
    dt = jax.tree.leaves(params)[0].dtype
    lr_ = _validate.guard_positive(
        _validate.real_array(lr, name="lr", dtype=dt), lr, name="lr"
    )  # fails before compiling
    return _grad_dot_core(params, train_batch, val_batch, lr_, loss_fn=loss_fn)


def weighter_loss(
    weighter: jnn.MLP,
    features: Float[ArrayLike, "..."],
    scores: Float[ArrayLike, "..."],
    *,
    temperature: Real[ArrayLike, ""] = 0.25,
    scale: Real[ArrayLike, ""] = 0.25,
) -> Float[Array, ""]:
    """The outer objective ``-scale * mean_i a_i s_i`` (minimise with AdamW, lr 1e-3).

    Raises:
      TypeError: ``features`` as :func:`sample_weights` (an empty batch included);
        ``scores`` not a real ``[B]`` array.
      ValueError: A NaN or infinite ``scale`` (traced: under ``jit``).
    """
    scores = _validate.real_array(scores, name="scores")  # a string names `scores`
    a = sample_weights(weighter, features, temperature=temperature)
    a = _validate.guard_finite(a, scale, name="scale")
    scores = scores.astype(a.dtype)
    if scores.shape != a.shape:
        raise TypeError(f"`scores` must have shape {a.shape}, got {scores.shape}.")
    return -scale * jnp.mean(a * scores)
