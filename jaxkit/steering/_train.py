"""SVGT's three training stages: pure losses, optax optimizers, one jitted step.

The backbone is frozen everywhere: it enters every loss under ``stop_gradient`` and
is never an optimizer argument. Stages 1-2 read precomputed block-``l`` hidden
states (:func:`hidden_at`, computed once); stage 3 runs the backbone around the
bridge (the gradient reaches the generator through the frozen blocks).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array

from jaxkit import _validate, nn
from jaxkit._optim import optax_update
from jaxkit.steering._svgt import (
    SVGTParams,
    _check_tokens,
    _forward,
    check_config,
    lower_pass,
)


@functools.partial(jax.jit, static_argnames=("lm_cfg", "layer"))
def _hidden(lm_params, tokens, *, lm_cfg, layer):
    pos = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return jax.lax.stop_gradient(lower_pass(lm_params, lm_cfg, tokens, pos, layer).h)


def hidden_at(lm_params, lm_cfg: nn.TransformerConfig, tokens, *, layer: int) -> Array:
    """Block-``layer`` outputs ``[B, T, D]`` of the frozen backbone (positions ``arange``)."""
    layer = _validate.python_int(layer, name="layer")
    if not 0 <= layer < lm_cfg.n_layers:
        raise ValueError(f"`layer` must lie in [0, {lm_cfg.n_layers}), got {layer}.")
    _validate.integer(tokens, name="tokens")  # before jnp.asarray (a string names none)
    tokens = jnp.asarray(tokens)
    _validate.ndim(tokens, 2, name="tokens")
    return _hidden(lm_params, tokens.astype(jnp.int32), lm_cfg=lm_cfg, layer=layer)


def _bce(logit, label):
    label = label.astype(jnp.float32)
    return jnp.mean(optax.sigmoid_binary_cross_entropy(logit, label))


def _check_batch(vp, h, masks: dict, labels, key):
    """Stages 1-2: float ``h [B,T,D]``, bool masks ``[B,T]``, labels ``[B]`` in ``[0, 1]``.

    ``B >= 1`` (the loss is a mean over the batch) and ``D`` the encoder's input width.
    """
    _validate.floating(h, name="h")
    _validate.ndim(h, 3, name="h")
    _validate.nonempty(h, name="h")
    d = vp.encoder.response_proj.w.shape[0]  # d_model: JAX's matmul error named no argument
    _validate.shape(h, (None, None, d), name="h")
    for name, m in masks.items():
        _validate.boolean(m, name=name)  # a string: named (jnp.result_type reads a dtype name)
        _validate.shape(m, h.shape[:2], name=name)
    _validate.shape(labels, (h.shape[0],), name="labels")
    if key is not None:
        _validate.is_key(key)
    labels = jnp.asarray(labels)
    bad = _validate.any_outside(labels, 0, 1) | _validate.any_nonfinite(labels)
    return _validate.error_if(labels, bad, "`labels` must lie in [0, 1] (no NaN).")


def stage1_loss(vp: SVGTParams, h, mask, labels, *, key=None):
    """Stage 1: ``BCE(s(E_uncond(h)), label)`` on prompts (``h [B,T,D]``, ``mask [B,T]``).

    Raises:
      TypeError: a non-float ``h`` of rank != 3, with no batch row (``B = 0``) or a last
        axis other than the encoder's ``d_model``, a non-bool ``mask`` not ``[B, T]``,
        ``labels`` not ``[B]``, a ``key`` that is not a key.
      ValueError: ``labels`` outside ``[0, 1]`` or NaN (traced: under ``jit``).
    """
    labels = _check_batch(vp, h, {"mask": mask}, labels, key)
    return _bce(vp.disc(vp.encoder.unconditional(h, mask, key=key)), labels)


def stage2_loss(vp: SVGTParams, h, prompt_mask, response_mask, labels, *, key=None):
    """Stage 2: ``BCE(s(E_cond(h_p, h_r)), label)`` on (prompt, response) pairs.

    ``h``: block-``l`` outputs of ``[prompt ; response]``; the masks select each part.

    Raises:
      TypeError / ValueError: as :func:`stage1_loss` (for both masks).
    """
    masks = {"prompt_mask": prompt_mask, "response_mask": response_mask}
    labels = _check_batch(vp, h, masks, labels, key)
    z = vp.encoder.conditional(h, prompt_mask, h, response_mask, key=key)
    return _bce(vp.disc(z), labels)


def _check_length(length, tokens, prompt_len):
    """``length int[B]`` with ``prompt_len <= length <= T`` (traced: an ``error_if``)."""
    _validate.integer(length, name="length")  # before jnp.asarray (a string names none)
    length = jnp.asarray(length)
    _validate.shape(length, (tokens.shape[0],), name="length")
    t = tokens.shape[1]
    bad = jnp.any((length < prompt_len) | (length > t))
    msg = f"`length` must lie in [prompt_len, {t}] in every row."
    return _validate.error_if(length.astype(jnp.int32), bad, msg)


class Stage3Aux(NamedTuple):
    """Parts of the stage-3 loss (means over the batch)."""

    ce: Array
    safe: Array
    reg: Array
    score: Array


def stage3_loss(
    vp: SVGTParams,
    lm_params,
    tokens,
    prompt_len,
    length,
    *,
    lm_cfg,
    cfg,
    key=None,
    weights=(1.0, 0.5, 0.1),
):
    """Stage 3: ``l_ce CE(response | prompt, bridge) + l_safe safety + l_reg R``.

    Only the bridge generator learns: the encoder and discriminator enter under
    ``stop_gradient`` (their gradient is exactly zero), the backbone too.
    ``safety = mean(softplus(s~) + 2 relu(s~))`` with ``s~`` the conditional score of
    block ``l+1``'s output after insertion; ``R = max(0, |mean||bridge|| /
    mean||h_trig|| - 1| - 0.2)``. CE on the response tokens (original indices
    ``M_b .. length_b - 1``), read at expanded indices ``j + K - 1``.

    Returns:
      ``(loss, Stage3Aux)``.

    Raises:
      TypeError / ValueError: the checks of :func:`svgt_forward`; ``length`` not an
        ``int[B]`` in ``[prompt_len, T]``; ``weights`` not three finite numbers (traced
        values: under ``jit``); a ``key`` that is not a key.
    """
    check_config(lm_cfg, cfg)
    if key is not None:
        _validate.is_key(key)
    tokens, prompt_len = _check_tokens(lm_cfg, tokens, prompt_len)
    length = _check_length(length, tokens, prompt_len)
    if len(weights) != 3:
        raise TypeError(f"`weights` must hold 3 numbers (ce, safe, reg), got {weights!r}.")
    length = _validate.guard_finite(
        length, jnp.stack([jnp.asarray(w) for w in weights]), name="weights"
    )
    frozen = jax.lax.stop_gradient((vp.encoder, vp.disc))
    vp = vp._replace(encoder=frozen[0], disc=frozen[1])
    k = cfg.n_bridge
    f = _forward(lm_params, vp, tokens, prompt_len, key, lm_cfg=lm_cfg, cfg=cfg)
    b, t = tokens.shape
    j = jnp.arange(t, dtype=jnp.int32)[None, :]
    resp = (j >= prompt_len[:, None]) & (j < length[:, None])
    idx = jnp.clip(j + k - 1, 0, t + k - 1)
    lg = jnp.take_along_axis(f.logits, idx[:, :, None], axis=1).astype(jnp.float32)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(lg), tokens[:, :, None], axis=-1)[..., 0]
    ce = jnp.sum(jnp.where(resp, nll, 0.0)) / jnp.maximum(jnp.sum(resp).astype(jnp.float32), 1.0)
    jx = jnp.arange(t + k, dtype=jnp.int32)[None, :]
    mp = jx < prompt_len[:, None]
    mr = (jx >= (prompt_len + k)[:, None]) & (jx < (length + k)[:, None])
    score = vp.disc(vp.encoder.conditional(f.hidden, mp, f.hidden, mr))
    safe = jnp.mean(jax.nn.softplus(score) + 2.0 * jax.nn.relu(score))
    ratio = jnp.mean(jnp.linalg.norm(f.bridge, axis=-1)) / jnp.mean(
        jnp.linalg.norm(f.h_trig.astype(jnp.float32), axis=-1)
    )
    reg = jax.nn.relu(jnp.abs(ratio - 1.0) - 0.2)
    w = weights
    loss = w[0] * ce + w[1] * safe + w[2] * reg
    return loss, Stage3Aux(ce, safe, reg, jnp.mean(score))


_NEW = ("prompt_proj", "cross", "ln_p", "ln_c", "cross_scale")


def _labels(stage):
    def label(path, _):
        names = [getattr(p, "name", None) for p in path]
        part = names[0]
        if stage == 3:
            return "train" if part == "bridge" else "frozen"
        if part == "bridge":
            return "frozen"
        if stage == 2 and any(n in _NEW for n in names):
            return "new"
        return "train"

    return lambda vp: jax.tree_util.tree_map_with_path(label, vp)


def svgt_optimizer(
    stage: int, *, lr: float | None = None, old_lr: float = 1e-5, weight_decay: float = 1e-5
) -> optax.GradientTransformation:
    """The optax transform of a stage (learning-rate groups by module path).

    Stage 1: value encoder + discriminator, AdamW ``lr`` (default 1e-4). Stage 2:
    the new conditional modules (``prompt_proj``, ``cross``, ``ln_p``, ``ln_c``,
    ``cross_scale``) at ``lr`` (default 5e-4), the stage-1 modules at ``old_lr``,
    clip 1.0. Stage 3: the bridge generator only, ``lr`` (default 5e-4), clip 1.0.
    Parameters outside a stage's groups get zero updates.
    """
    stage = _validate.python_int(stage, name="stage")
    _validate.one_of((1, 2, 3), stage=stage)
    lr = {1: 1e-4, 2: 5e-4, 3: 5e-4}[stage] if lr is None else lr
    for name, v in (("lr", lr), ("old_lr", old_lr), ("weight_decay", weight_decay)):
        _validate.finite_scalar(**{name: v})
    _validate.positive(lr=lr)
    _validate.positive(old_lr=old_lr)
    _validate.non_negative(weight_decay=weight_decay)
    train = optax.adamw(lr, weight_decay=weight_decay)
    groups = {"train": train, "frozen": optax.set_to_zero()}
    if stage == 2:
        groups = {
            "new": train,
            "train": optax.adamw(old_lr, weight_decay=weight_decay),
            "frozen": optax.set_to_zero(),
        }
    tx = optax.multi_transform(groups, _labels(stage))
    return tx if stage == 1 else optax.chain(optax.clip_by_global_norm(1.0), tx)


@functools.partial(jax.jit, static_argnames=("stage", "tx", "lm_cfg", "cfg"))
def _step(vp, opt_state, batch, key, lm_params, *, stage, tx, lm_cfg, cfg):
    if stage == 1:
        loss, g = jax.value_and_grad(stage1_loss)(vp, *batch, key=key)
        aux = None
    elif stage == 2:
        loss, g = jax.value_and_grad(stage2_loss)(vp, *batch, key=key)
        aux = None
    else:
        (loss, aux), g = jax.value_and_grad(stage3_loss, has_aux=True)(
            vp, lm_params, *batch, lm_cfg=lm_cfg, cfg=cfg, key=key
        )
    vp, opt_state = optax_update(tx, g, opt_state, vp)
    return vp, opt_state, loss, aux


def svgt_step(
    stage: int,
    vp: SVGTParams,
    opt_state,
    batch: tuple,
    *,
    tx,
    key,
    lm_params=None,
    lm_cfg=None,
    cfg=None,
):
    """One optimizer step of a stage (jitted at module level; build ``tx`` once).

    ``batch``: stage 1 ``(h, mask, labels)``; stage 2 ``(h, prompt_mask,
    response_mask, labels)``; stage 3 ``(tokens, prompt_len, length)`` with
    ``lm_params``, ``lm_cfg``, ``cfg``. Returns ``(vp, opt_state, loss, aux)``
    (``aux`` a :class:`Stage3Aux` in stage 3, else None). The backbone is an input,
    never updated. An ``opt_state`` that is not ``tx.init(vp)``'s tree and shapes is a
    ``TypeError`` naming it.
    """
    stage = _validate.python_int(stage, name="stage")
    _validate.one_of((1, 2, 3), stage=stage)
    if stage == 3:
        check_config(lm_cfg, cfg, upper=True)
        tok, pl = _check_tokens(lm_cfg, batch[0], batch[1])
        batch = (tok, pl, _check_length(batch[2], tok, pl))
    if key is not None:
        _validate.is_key(key)
    return _step(vp, opt_state, batch, key, lm_params, stage=stage, tx=tx, lm_cfg=lm_cfg, cfg=cfg)
