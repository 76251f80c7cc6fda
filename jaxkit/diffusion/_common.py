"""Shared pieces: the denoiser protocol, SUBS log-probabilities, input checks."""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jaxkit import _validate
from jaxkit._typing import PyTree, accumulation_dtype

ApplyFn = Callable[[PyTree, Array, Array, Array], Array]


def _check_cfg(cfg, absolute_positions) -> bool:
    from jaxkit import nn

    if not isinstance(cfg, nn.TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    return _validate.flag(absolute_positions, name="absolute_positions")


def sinusoidal_positions(positions: Array, d_model: int) -> Array:
    """Fixed absolute position codes ``[..., D]`` (Vaswani et al. 2017), unit amplitude.

    ``code[p, 2i] = sin(p / 10000^(2i/D))``, ``code[p, 2i+1] = cos(...)`` (float32).
    """
    half = (d_model + 1) // 2
    freq = jnp.exp(-jnp.log(10000.0) * jnp.arange(half, dtype=jnp.float32) * 2.0 / d_model)
    ang = positions.astype(jnp.float32)[..., None] * freq.reshape((1,) * positions.ndim + (half,))
    code = jnp.stack([jnp.sin(ang), jnp.cos(ang)], axis=-1).reshape(*ang.shape[:-1], 2 * half)
    return code[..., :d_model]


def _inputs(nn, params, cfg, tokens, positions, absolute_positions):
    """``(tokens, None)`` or, with absolute positions, ``(None, embed + position code)``."""
    if not absolute_positions:
        return tokens, None
    h = nn.embed(params, cfg, tokens)
    return None, h + sinusoidal_positions(positions, cfg.d_model).astype(h.dtype)


def transformer_denoiser(cfg, *, absolute_positions: bool = False) -> ApplyFn:
    """``apply_fn(params, tokens, positions, attn_mask) -> logits`` for a ``jaxkit.nn`` model.

    The same function object is returned for equal configs, so the samplers' and
    losses' compile caches (keyed on ``apply_fn``) are hit across calls. Use a
    bidirectional config (``TransformerConfig(causal=False)``); MDLM needs no time
    input.

    ``absolute_positions`` **[R]** adds :func:`sinusoidal_positions` to the token
    embeddings (same parameters). A RoPE-only bidirectional encoder sees relative
    offsets only: on a fully masked input every position gets the same prediction
    (all keys and values are equal), so without a boundary token it cannot give
    position ``i`` its own marginal (the toy peptides' direction depends on the
    first four slots). The authors' RoFormer reads SMILES framed by special tokens,
    which anchor positions; this is the anchor for unframed sequences.

    The returned function carries its slot form as the attribute ``logits_at``:
    ``apply_fn.logits_at(params, tokens, positions, attn_mask, rows, cols) -> [N, V]``,
    the logits at the slots ``(rows[i], cols[i])`` only (``jaxkit.nn.apply(outputs_at=)``:
    the last block runs at the slots; equal to ``apply_fn(...)[rows, cols]`` up to float
    rounding). The ancestral :func:`sample` uses it to compute only the logits it draws
    from; any ``apply_fn`` may offer one.

    Both forms take ``interventions=None`` (an ``nn.Interventions``, forwarded to
    ``jaxkit.nn.apply``), and the function carries its config as ``apply_fn.cfg``: this is
    how :func:`sample` steers the model (``sample(interventions=)``: it passes the edits
    as that keyword, only when some are given, and checks their widths against ``cfg``).
    """
    absolute = _check_cfg(cfg, absolute_positions)  # before the cache (which equates 1 and True)
    if cfg.causal:
        raise ValueError("`cfg` must be bidirectional (TransformerConfig(causal=False)).")
    return _denoiser(cfg, absolute)


@functools.cache
def _denoiser(cfg, absolute_positions: bool) -> ApplyFn:
    from jaxkit import nn

    def forward(params, tokens, positions, attn_mask, interventions, outputs_at=None):
        toks, h = _inputs(nn, params, cfg, tokens, positions, absolute_positions)
        return nn.apply(
            params,
            cfg,
            toks,
            positions,
            inputs_embeds=h,
            attn_mask=attn_mask,
            outputs_at=outputs_at,
            interventions=interventions,
        ).logits

    def apply_fn(params, tokens, positions, attn_mask, interventions=None):
        return forward(params, tokens, positions, attn_mask, interventions)

    def logits_at(params, tokens, positions, attn_mask, rows, cols, interventions=None):
        return forward(params, tokens, positions, attn_mask, interventions, (rows, cols))

    apply_fn.logits_at = logits_at  # the slot form (see `slot_form`)
    apply_fn.cfg = cfg  # the widths of `sample(interventions=)`'s edits
    return apply_fn


def slot_form(apply_fn):
    """The denoiser's slot form ``logits_at(params, tokens, positions, attn_mask, rows, cols)``.

    It returns ``apply_fn(params, tokens, positions, attn_mask)[rows, cols]`` (``[N, V]``,
    up to float rounding) computing only what those slots need; the denoisers of
    :func:`transformer_denoiser` carry it as the attribute ``logits_at`` (their last block
    runs at the slots: ``jaxkit.nn.apply(outputs_at=)``). ``None`` for an ``apply_fn``
    without one (then the samplers take the full logits).
    """
    fn = getattr(apply_fn, "logits_at", None)
    return fn if callable(fn) else None


def check_apply_fn(apply_fn) -> None:
    if not callable(apply_fn):
        raise TypeError(f"`apply_fn` must be callable, got {type(apply_fn).__name__}.")


def positions_and_mask(tokens: Array, valid: Array) -> tuple[Array, Array]:
    """Positions ``arange(L)`` and the bidirectional mask over valid keys (sharded like tokens)."""
    pos = (
        jnp.zeros_like(tokens, dtype=jnp.int32)
        + jnp.arange(tokens.shape[-1], dtype=jnp.int32)[None]
    )
    attn = jnp.broadcast_to(valid[:, None, :], (*tokens.shape, tokens.shape[-1]))
    return pos, attn


def subs_log_probs(logits: Array, mask_id: int) -> Array:
    """Log-probabilities over the vocabulary with the ``[MASK]`` entry at ``-inf`` (SUBS).

    ``logits`` is ``[..., V]`` (any leading batch axes), normalised along its last axis.

    Raises:
      TypeError: non-float ``logits`` (a string too); a ``mask_id`` that is not an int.
      ValueError: ``mask_id`` outside ``[0, V)``.
    """
    _validate.floating(logits, name="logits")  # before jnp.asarray: a str names the argument
    logits = jnp.asarray(logits)
    _validate.min_ndim(logits, 1, name="logits")
    _validate.python_int(mask_id, name="mask_id", minimum=0)
    if mask_id >= logits.shape[-1]:
        raise ValueError(f"`mask_id` must lie in [0, V={logits.shape[-1]}), got {mask_id}.")
    acc = accumulation_dtype(logits.dtype)
    x = logits.astype(acc)
    x = x.at[..., mask_id].set(-jnp.inf)
    return jax.nn.log_softmax(x, axis=-1)


def denoise(apply_fn, params, z: Array, valid: Array, mask_id: int, pos_attn=None) -> Array:
    """SUBS log-probabilities ``[B, L, V]`` of the denoiser at the noisy tokens ``z``.

    ``pos_attn``: :func:`positions_and_mask` of ``valid``, built once outside a loop
    (it does not change between steps or replicates).
    """
    if pos_attn is None:
        pos_attn = positions_and_mask(z, valid)
    return subs_log_probs(
        denoise_logits(apply_fn, params, z=z, pos_attn=pos_attn, mask_id=mask_id), mask_id
    )


def denoise_logits(apply_fn, params, *, z: Array, pos_attn, mask_id: int, **kw) -> Array:
    """The denoiser's raw logits ``[B, L, V]`` at ``z``, shape and ``mask_id`` checked.

    ``kw``: the denoiser's extra keywords (``interventions=``; none: the plain call).
    """
    logits = apply_fn(params, z, *pos_attn, **kw)
    if logits.ndim != 3 or logits.shape[:2] != z.shape:
        raise TypeError(
            f"`apply_fn` must return logits of shape {(*z.shape, '*')}, got {logits.shape}."
        )
    if not 0 <= mask_id < logits.shape[-1]:
        raise ValueError(
            f"`mask_id` must lie in [0, vocab size {logits.shape[-1]}), got mask_id={mask_id}."
        )
    return logits


def _abstract(x):
    return (tuple(jnp.shape(x)), str(jnp.result_type(x)))


def vocab_size(apply_fn, params, tokens: Array, valid: Array) -> int:
    """The vocabulary size of ``apply_fn``'s logits (abstract evaluation, nothing compiled).

    Cached per ``apply_fn`` and abstract shapes: the host loops call the public
    functions many times with the same shapes, and tracing the denoiser each time
    costs more than a small step itself.
    """
    leaves, tree = jax.tree.flatten(params)
    sig = (tree, tuple(_abstract(x) for x in leaves), _abstract(tokens))
    try:
        hash(apply_fn)
        hash(sig)
    except TypeError:
        return _vocab_size(apply_fn, params, tokens, valid)
    return _vocab_cached(apply_fn, sig, params, tokens, valid)


_VOCAB_CACHE: dict = {}


def _vocab_cached(apply_fn, sig, params, tokens, valid):
    k = (apply_fn, sig)
    if k not in _VOCAB_CACHE:
        if len(_VOCAB_CACHE) > 256:
            _VOCAB_CACHE.clear()
        _VOCAB_CACHE[k] = _vocab_size(apply_fn, params, tokens, valid)
    return _VOCAB_CACHE[k]


def _vocab_size(apply_fn, params, tokens, valid) -> int:
    pos, attn = positions_and_mask(tokens, valid)
    out = jax.eval_shape(apply_fn, params, tokens, pos, attn)
    if len(out.shape) != 3 or tuple(out.shape[:2]) != tuple(tokens.shape):
        raise TypeError(
            f"`apply_fn` must return logits of shape {(*tokens.shape, '*')}, got {out.shape}."
        )
    return int(out.shape[-1])


def check_tokens(
    tokens,
    valid,
    *,
    name: str,
    allow_mask: bool,
    mask_id: int,
) -> tuple[Array, Array]:
    """Check ``int[B, L]`` tokens and a matching ``bool[B, L]`` valid mask (default all)."""
    _validate.integer(tokens, name=name)  # before jnp.asarray: a str names the argument
    tokens = jnp.asarray(tokens)
    _validate.ndim(tokens, 2, name=name)
    if valid is None:  # built on the host for concrete tokens (no eager program per shape)
        traced = isinstance(tokens, jax.core.Tracer)
        valid = jnp.ones_like(tokens, jnp.bool_) if traced else np.ones(tokens.shape, np.bool_)
    valid = jnp.asarray(valid)
    if valid.dtype != jnp.bool_:
        raise TypeError(f"`valid` must be a boolean array, got dtype {valid.dtype}.")
    if valid.shape != tokens.shape:
        raise TypeError(
            f"`valid` must have the shape of `{name}` {tokens.shape}, got {valid.shape} "
            "(length mismatch)."
        )
    _validate.python_int(mask_id, name="mask_id", minimum=0)
    if 0 in tokens.shape:
        raise ValueError(
            f"`{name}` must hold at least one token per row, got shape {tokens.shape}."
        )
    return (tokens if tokens.dtype == jnp.int32 else tokens.astype(jnp.int32)), valid


def check_unmask_step(unmask_step, tokens: Array, num_steps: int) -> Array:
    """``int[B, L]`` unmasking steps of ``tokens`` in ``[-1, num_steps)`` (traced: error_if)."""
    _validate.integer(unmask_step, name="unmask_step")  # before jnp.asarray: a str names it
    unmask_step = jnp.asarray(unmask_step)
    if unmask_step.shape != tokens.shape:
        raise TypeError(
            f"`unmask_step` must have the shape of `tokens` {tokens.shape}, got "
            f"{unmask_step.shape} (length mismatch)."
        )
    bad = _validate.any_outside(unmask_step, -1, num_steps - 1)
    msg = f"`unmask_step` must lie in [-1, num_steps={num_steps})."
    return _validate.error_if(unmask_step.astype(jnp.int32), bad, msg)


def check_alphabet(tokens: Array, vocab: int, *, name: str, allow_mask: bool, mask_id: int):
    """Concrete tokens outside ``[0, V)`` (or ``[MASK]`` where not allowed) raise ValueError."""
    if mask_id >= vocab:
        raise ValueError(f"`mask_id` must lie in [0, vocab size {vocab}), got mask_id={mask_id}.")
    if isinstance(tokens, jax.core.Tracer):
        return
    t = np.asarray(tokens)
    bad = (t < 0) | (t >= vocab)
    if not allow_mask:
        bad |= t == mask_id
    if bad.any():
        what = "[0, V)" if allow_mask else f"[0, V) without the mask id {mask_id}"
        raise ValueError(
            f"`{name}` holds token ids outside the alphabet {what} (V={vocab}): "
            f"{sorted(set(t[bad].tolist()))[:5]}."
        )


def checked_vocab(
    apply_fn, params, tokens: Array, valid: Array, *, name: str, allow_mask: bool, mask_id: int
) -> int:
    """:func:`vocab_size`, then :func:`check_alphabet` of ``tokens`` against it."""
    vocab = vocab_size(apply_fn, params, tokens, valid)
    check_alphabet(tokens, vocab, name=name, allow_mask=allow_mask, mask_id=mask_id)
    return vocab


def guard_alphabet(x: Array, tokens: Array, vocab: int, *, name: str, allow_mask: bool, mask_id):
    """Traced counterpart of :func:`check_alphabet` (a runtime error under ``jit``)."""
    bad = (tokens < 0) | (tokens >= vocab)
    if not allow_mask:
        bad = bad | (tokens == mask_id)
    return _validate.error_if(
        x, jnp.any(bad), f"`{name}` holds token ids outside the alphabet (V={vocab})."
    )


def gather_log_prob(log_p: Array, tokens: Array) -> Array:
    """``log_p[b, i, tokens[b, i]]``."""
    return jnp.take_along_axis(log_p, tokens[..., None], axis=-1)[..., 0]


def transformer_embedder(cfg, *, absolute_positions: bool = False):
    """``embed_fn(params, tokens, positions, attn_mask) -> hidden [B, L, D]`` (last block).

    The per-token features TD3B's contrastive term pools (masked mean over valid
    slots). Cached per config like :func:`transformer_denoiser` (whose
    ``absolute_positions`` it takes too).
    """
    return _embedder(cfg, _check_cfg(cfg, absolute_positions))


@functools.cache
def _embedder(cfg, absolute_positions: bool):
    from jaxkit import nn

    last = cfg.n_layers - 1

    def embed_fn(params, tokens, positions, attn_mask):
        toks, h = _inputs(nn, params, cfg, tokens, positions, absolute_positions)
        out = nn.apply(
            params, cfg, toks, positions, inputs_embeds=h, attn_mask=attn_mask, collect=(last,)
        )
        return out.hidden[last]

    return embed_fn
