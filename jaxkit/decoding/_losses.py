"""WeDLM training objectives as pure functions of an ``apply_fn``.

``apply_fn(params, tokens int32[B,T], positions int32[B,T], attn_mask bool[B,T,T])
-> logits [B,T,V]`` is any causal LM forward that takes explicit logical RoPE
positions and a boolean attention mask (``jaxkit.nn.apply(...).logits`` fits).
Two objectives: the reorder-only masked-token loss (paper Eq. 5-7) and the
dual-stream objective the authors train with (Eq. 8-10, ``finetune/src``).
``dual_stream_mask`` and ``dual_stream_batch`` are jitted like jax.numpy (module
level, static sizes static); the losses wrap a user callable, so they run op by op
around ``apply_fn`` (pass a jitted ``apply_fn`` or jit the training step).
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int

from jaxkit import _validate
from jaxkit._numerics import iota_like
from jaxkit._typing import KeyArray, PyTree, RealScalarLike, accumulation_dtype
from jaxkit.decoding._reorder import topological_reorder

ApplyFn = Callable[[PyTree, Array, Array, Array], Array]
_GAMMA_MIN = 1e-8


class DualStreamBatch(NamedTuple):
    """One dual-stream training batch (paper Eq. 8-10).

    Attributes:
      input_ids: ``int32[B, 2L]``: memory stream (clean tokens) then prediction
        stream (blockwise reordered, masked slots hold ``[MASK]``).
      positions: ``int32[B, 2L]``: logical positions (0..L-1 in both streams).
      attn_mask: ``bool[2L, 2L]``: the dual-stream mask (same for every row).
      mlm_labels: ``int32[B, L]``: each prediction slot's own token (no shift).
      mlm_mask: ``bool[B, L]``: prediction slots that hold a ``[MASK]``.
      mlm_weights: ``float32[B, L]``: ``1 / (gamma + eps)`` on masked slots, else 0.
      ar_labels: ``int32[B, L]``: next token for each memory slot (shifted).
      ar_mask: ``bool[B, L]``: memory slots whose next token is a loss token.
    """

    input_ids: Array
    positions: Array
    attn_mask: Array
    mlm_labels: Array
    mlm_mask: Array
    mlm_weights: Array
    ar_labels: Array
    ar_mask: Array


def dual_stream_mask(length: int, block_size: int) -> Array:
    """The dual-stream attention mask ``bool[2L, 2L]`` (query rows, key columns).

    memory -> memory: causal; prediction -> memory: keys in strictly earlier
    blocks; prediction -> prediction: same block and key <= query (causal inside
    the reordered block); memory -> prediction: never.

    Args:
      length: L, tokens per stream (static).
      block_size: Prediction-stream block size (static).

    Returns:
      ``bool[2L, 2L]``.

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM),
      Eq. 8-10 and ``finetune/src/batch.py``.
    """
    length = _validate.python_int(length, name="length", minimum=1)
    block_size = _validate.python_int(block_size, name="block_size", minimum=1)
    return _dual_stream_mask(length, block_size)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _dual_stream_mask(length: int, block_size: int) -> Array:
    i = jnp.arange(2 * length, dtype=jnp.int32)
    pred = i >= length
    idx = jnp.where(pred, i - length, i)
    blk = idx // block_size
    q_pred, k_pred = pred[:, None], pred[None, :]
    q_idx, k_idx = idx[:, None], idx[None, :]
    q_blk, k_blk = blk[:, None], blk[None, :]
    mem_mem = ~q_pred & ~k_pred & (k_idx <= q_idx)
    pred_mem = q_pred & ~k_pred & (k_blk < q_blk)
    pred_pred = q_pred & k_pred & (k_blk == q_blk) & (k_idx <= q_idx)
    return mem_mem | pred_mem | pred_pred


def _pad_blocks(x: Array, k: int, bs: int, fill) -> Array:
    b, length = x.shape
    pad = k * bs - length
    if pad:  # built from a column of x: keeps its batch sharding
        col = jnp.full_like(x[:, :1], fill)
        x = jnp.concatenate([x, jnp.broadcast_to(col, (b, pad))], axis=1)
    return x.reshape(b, k, bs)


def dual_stream_batch(
    tokens: Int[ArrayLike, "B L"],
    loss_mask: Bool[ArrayLike, "B L"],
    *,
    key: KeyArray,
    block_size: int,
    mask_token_id: int,
    per_block: bool = True,
) -> DualStreamBatch:
    """Sample masks and build the dual-stream inputs, mask and labels.

    The prediction stream is cut into ``K = ceil(L / block_size)`` blocks; per
    block (``per_block=True``) ``gamma_k ~ U(0, 1)`` clamped at 1e-8, and
    ``round(gamma_k * n_k)`` of the block's ``n_k`` maskable tokens (``loss_mask``)
    are masked, chosen uniformly; with ``per_block=False`` one gamma per sequence
    masks ``round(gamma * n)`` maskable tokens of the whole row. Inside each block
    observed tokens move first and masked ones last (stable, ascending positions).

    Args:
      tokens: ``int32[B, L]`` clean sequences (any ids: copied and permuted, never
        looked up).
      loss_mask: ``bool[B, L]``, maskable tokens (prompt tokens are ``False``).
      key: PRNG key.
      block_size: Block size B of the prediction stream (static; paper default 32).
      mask_token_id: Id of ``[MASK]``.
      per_block: One gamma per block (the authors' default) or per sequence.

    Returns:
      A :class:`DualStreamBatch`.

    References:
      WeDLM (ICML 2026), Eq. 8-10; ``finetune/src/masking.py`` and ``batch.py``.
    """
    _validate.is_key(key)
    _validate.integer(tokens, name="tokens")  # before jnp.asarray: a str names the argument
    _validate.boolean(loss_mask, name="loss_mask")
    tokens, loss_mask = jnp.asarray(tokens), jnp.asarray(loss_mask)
    _validate.ndim(tokens, 2, name="tokens")
    _validate.same_shape(tokens=tokens, loss_mask=loss_mask)
    _validate.nonempty(tokens, name="tokens", axis=-1, what="token")
    block_size = _validate.python_int(block_size, name="block_size", minimum=1)
    mask_token_id = _validate.python_int(mask_token_id, name="mask_token_id")
    _validate.flags(per_block=per_block)
    return _dual_stream_batch(
        tokens,
        loss_mask,
        key,
        block_size=block_size,
        mask_token_id=mask_token_id,
        per_block=per_block,
    )


@functools.partial(jax.jit, static_argnames=("block_size", "mask_token_id", "per_block"))
def _dual_stream_batch(tokens, loss_mask, key, *, block_size, mask_token_id, per_block):
    b, length = tokens.shape
    bs = block_size
    k = -(-length // bs)
    kg, ku = jax.random.split(key)
    tok3 = _pad_blocks(tokens.astype(jnp.int32), k, bs, 0)
    can3 = _pad_blocks(loss_mask, k, bs, False)
    pad3 = _pad_blocks(jnp.zeros_like(loss_mask), k, bs, True)
    sh = jax.typeof(can3).sharding  # draws follow the batch sharding of the tokens
    noise = jax.random.uniform(ku, (b, k, bs), jnp.float32, out_sharding=sh)
    key_noise = jnp.where(can3, noise, 2.0)
    if per_block:
        u = jax.random.uniform(kg, (b, k, 1), jnp.float32, out_sharding=sh)
        gamma = jnp.maximum(u, _GAMMA_MIN)
        count = jnp.sum(can3, axis=-1, keepdims=True).astype(jnp.float32)
        rank = jnp.argsort(jnp.argsort(key_noise, axis=-1), axis=-1).astype(jnp.int32)
    else:
        u = jax.random.uniform(kg, (b, 1, 1), jnp.float32, out_sharding=sh)
        gamma = jnp.maximum(u, _GAMMA_MIN)
        count = jnp.sum(can3, axis=(1, 2), keepdims=True).astype(jnp.float32)
        flat = key_noise.reshape(b, k * bs)
        rank = jnp.argsort(jnp.argsort(flat, axis=-1), axis=-1).astype(jnp.int32).reshape(b, k, bs)
    n_mask = jnp.round(gamma * count).astype(jnp.int32)
    masked3 = can3 & (rank < n_mask)
    weight3 = jnp.where(masked3, 1.0 / (gamma + _GAMMA_MIN), 0.0).astype(jnp.float32)
    order = jnp.where(pad3, 2, masked3.astype(jnp.int32))
    perm3 = jnp.argsort(order, axis=-1, stable=True).astype(jnp.int32)
    gperm = (perm3 + (jnp.arange(k, dtype=jnp.int32) * bs)[None, :, None]).reshape(b, k * bs)[
        :, :length
    ]

    def take(x3):
        return jnp.take_along_axis(x3.reshape(b, k * bs), gperm, axis=1)

    labels, mmask, weights = take(tok3), take(masked3), take(weight3)
    pred_tok = jnp.where(mmask, jnp.int32(mask_token_id), labels)
    tok32 = tokens.astype(jnp.int32)
    ar_labels = jnp.concatenate([tok32[:, 1:], jnp.zeros_like(tok32[:, :1])], axis=1)
    ar_mask = jnp.concatenate([loss_mask[:, 1:], jnp.zeros_like(loss_mask[:, :1])], axis=1)
    pos = iota_like(tok32)
    return DualStreamBatch(
        input_ids=jnp.concatenate([tokens.astype(jnp.int32), pred_tok], axis=1),
        positions=jnp.concatenate([pos, gperm.astype(jnp.int32)], axis=1),
        attn_mask=_dual_stream_mask(length, bs),
        mlm_labels=labels,
        mlm_mask=mmask,
        mlm_weights=weights,
        ar_labels=ar_labels,
        ar_mask=ar_mask,
    )


def _nll(logits: Array, labels: Array, where: Array, *, name: str) -> Array:
    """Per-slot cross-entropy; a label the loss reads (``where``) must index the logits.

    A label it does not read is free: its gather is clipped (the default fill gave a NaN,
    and ``0 * NaN`` made the whole loss NaN), and its slot is weighted 0.
    """
    v = logits.shape[-1]
    bad = jnp.any(where & ((labels < 0) | (labels >= v)))  # take_along_axis would clamp
    labels = _validate.error_if(
        labels, bad, f"`{name}` must hold token ids in [0, {v}) (the logits' vocabulary)."
    )
    logp = jax.nn.log_softmax(logits.astype(accumulation_dtype(logits.dtype)), axis=-1)
    return -jnp.take_along_axis(logp, labels[..., None], axis=-1, mode="clip")[..., 0]


def _check_batch(batch, *, name: str = "batch") -> None:
    """TypeError unless ``batch`` is a :class:`DualStreamBatch` of the right dtypes and shapes.

    Integer ids, positions and labels, bool masks; shapes as :func:`dual_stream_batch`
    builds them (``[B, 2L]`` streams, a ``[2L, 2L]`` mask, ``[B, L]`` labels, masks and
    weights). A message names the field (``batch.mlm_labels``).
    """
    if not isinstance(batch, DualStreamBatch):
        raise TypeError(
            f"`{name}` must be a DualStreamBatch (from dual_stream_batch), got "
            f"{type(batch).__name__}."
        )
    for field in ("input_ids", "positions", "mlm_labels", "ar_labels"):
        _validate.integer(getattr(batch, field), name=f"{name}.{field}")
    for field in ("attn_mask", "mlm_mask", "ar_mask"):
        _validate.boolean(getattr(batch, field), name=f"{name}.{field}")
    _validate.ndim(batch.input_ids, 2, name=f"{name}.input_ids")
    b, two_l = jnp.shape(batch.input_ids)
    if two_l % 2:
        raise TypeError(
            f"`{name}.input_ids` must have an even length 2L (memory then prediction "
            f"stream), got shape {(b, two_l)}."
        )
    _validate.shape(batch.positions, (b, two_l), name=f"{name}.positions")
    _validate.shape(batch.attn_mask, (two_l, two_l), name=f"{name}.attn_mask")
    for field in ("mlm_labels", "mlm_mask", "mlm_weights", "ar_labels", "ar_mask"):
        _validate.shape(getattr(batch, field), (b, two_l // 2), name=f"{name}.{field}")


def _mlm_term(nll: Array, mask: Array, weights: Array, weighting: str) -> Array:
    dt = nll.dtype
    if weighting == "weighted":
        w = jnp.where(mask, weights.astype(dt), jnp.zeros_like(nll))
        return jnp.sum(w * nll) / jnp.maximum(jnp.sum(w), jnp.asarray(1e-12, dt))
    m = mask.astype(dt)
    return jnp.sum(m * nll) / jnp.maximum(jnp.sum(m), jnp.asarray(1.0, dt))


def wedlm_loss(
    apply_fn: ApplyFn,
    params: PyTree,
    batch: DualStreamBatch,
    *,
    ar_weight: RealScalarLike = 1.0,
    weighting: str = "weighted",
) -> tuple[Array, dict[str, Array]]:
    """The WeDLM dual-stream objective ``(L_mlm + w_ar * L_ar) / (1 + w_ar)``.

    ``L_mlm``: cross-entropy of each masked prediction-stream slot against its
    own token (no shift), weighted by ``1 / (gamma + eps)`` and normalised by the
    batch's total weight (``weighting="weighted"``) or a plain mean
    (``"uniform"``). ``L_ar``: next-token cross-entropy on the memory stream,
    mean over loss tokens. At inference the memory stream is dropped.

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits``.
      params: Model parameters.
      batch: From :func:`dual_stream_batch`.
      ar_weight: ``w_ar`` (traced; the authors use 1).
      weighting: ``"weighted"`` or ``"uniform"`` (static).

    Returns:
      ``(loss, metrics)``; metrics: ``mlm``, ``ar``, ``n_masked``, ``ess``
      (effective sample size of the MLM weights).

    Raises:
      TypeError: ``batch`` not a :class:`DualStreamBatch`, or with non-integer ids,
        positions or labels, non-bool masks, or a field not shaped as
        :func:`dual_stream_batch` builds it; logits not ``[B, 2L, V]``.
      ValueError: A label the loss reads (``mlm_labels`` where ``mlm_mask``, ``ar_labels``
        where ``ar_mask``) outside ``[0, V)`` (a runtime error under ``jit``; a label it
        does not read is free); a negative ``ar_weight``.

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM),
      Eq. 8-10 and ``finetune/src/loss.py``.
    """
    _validate.one_of(("weighted", "uniform"), weighting=weighting)
    _check_batch(batch)
    _validate.real(ar_weight, name="ar_weight")
    _validate.finite_scalar(ar_weight=ar_weight)
    _validate.non_negative(ar_weight=ar_weight)
    b, two_l = batch.input_ids.shape
    length = two_l // 2
    mask = jnp.broadcast_to(batch.attn_mask, (b, two_l, two_l))
    logits = apply_fn(params, batch.input_ids, batch.positions, mask)
    _validate.shape(logits, (b, two_l, None), name="apply_fn(...) logits")
    mem, pred = logits[:, :length], logits[:, length:]
    l_mlm = _mlm_term(
        _nll(pred, batch.mlm_labels, batch.mlm_mask, name="batch.mlm_labels"),
        batch.mlm_mask,
        batch.mlm_weights,
        weighting,
    )
    acc = accumulation_dtype(logits.dtype)
    am = batch.ar_mask.astype(acc)
    l_ar = jnp.sum(
        am * _nll(mem, batch.ar_labels, batch.ar_mask, name="batch.ar_labels")
    ) / jnp.maximum(jnp.sum(am), jnp.asarray(1.0, acc))
    wa = jnp.asarray(ar_weight, acc)
    loss = (l_mlm + wa * l_ar) / (1.0 + wa)
    if isinstance(ar_weight, jax.core.Tracer):  # concrete values are checked above
        loss = _validate.guard_non_negative(loss, ar_weight, name="ar_weight")
    w = jnp.where(batch.mlm_mask, batch.mlm_weights, 0.0).astype(acc)
    ess = jnp.sum(w) ** 2 / jnp.maximum(jnp.sum(w * w), jnp.asarray(1e-12, acc))
    dt = logits.dtype
    metrics = {
        "mlm": l_mlm.astype(dt),
        "ar": l_ar.astype(dt),
        "n_masked": jnp.sum(batch.mlm_mask),
        "ess": ess.astype(dt),
    }
    return loss.astype(logits.dtype), metrics


def reorder_mlm_loss(
    apply_fn: ApplyFn,
    params: PyTree,
    tokens: Int[ArrayLike, "B L"],
    is_masked: Bool[ArrayLike, "B L"],
    loss_mask: Bool[ArrayLike, "B L"],
    *,
    mask_token_id: int,
    weighting: str = "weighted",
) -> Array:
    """The reorder-only masked-token loss (paper Eq. 5-7).

    Each row is reordered topologically (observed first, masks last, logical
    positions kept) and run under a plain causal mask; the ``j``-th mask slot
    predicts its own token ``x_{m_j}`` (no shift). Per row ``gamma = |M| / n``
    (``n`` maskable tokens); ``"weighted"`` gives each masked slot weight
    ``1 / gamma`` normalised by the batch's total weight, ``"uniform"`` is a plain
    mean over masked slots.

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits``.
      params: Model parameters.
      tokens: ``int32[B, L]`` clean sequences.
      is_masked: ``bool[B, L]``, the masked set M (must lie inside ``loss_mask``).
      loss_mask: ``bool[B, L]``, maskable tokens.
      mask_token_id: Id of ``[MASK]``.
      weighting: ``"weighted"`` or ``"uniform"`` (static).

    Returns:
      Scalar loss.

    Raises:
      TypeError: Arrays of the wrong dtype or shape.
      ValueError: A masked token outside the logits' ``[0, V)`` (the model never sees it,
        the loss reads it; a runtime error under ``jit``).

    References:
      WeDLM: Reconciling Diffusion Language Models with Standard Causal Attention
      for Fast Inference, ICML 2026 (Tencent; code github.com/Tencent/WeDLM), Eq. 7.
    """
    _validate.one_of(("weighted", "uniform"), weighting=weighting)
    _validate.integer(tokens, name="tokens")  # before jnp.asarray: a str names the argument
    _validate.boolean(is_masked, name="is_masked")
    _validate.boolean(loss_mask, name="loss_mask")
    tokens, is_masked, loss_mask = (
        jnp.asarray(tokens),
        jnp.asarray(is_masked),
        jnp.asarray(loss_mask),
    )
    _validate.ndim(tokens, 2, name="tokens")
    _validate.same_shape(tokens=tokens, is_masked=is_masked, loss_mask=loss_mask)
    b, length = tokens.shape
    is_masked = is_masked & loss_mask
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (b, length))
    tok_p, _, perm = topological_reorder(tokens, pos, is_masked, mask_token_id=mask_token_id)
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)), (b, length, length))
    logits = apply_fn(params, tok_p, perm, causal)
    labels = jnp.take_along_axis(tokens.astype(jnp.int32), perm, axis=1)
    mmask = jnp.take_along_axis(is_masked, perm, axis=1)
    gamma = jnp.sum(is_masked, axis=1).astype(jnp.float32) / jnp.maximum(
        jnp.sum(loss_mask, axis=1), 1
    ).astype(jnp.float32)
    weights = jnp.broadcast_to((1.0 / jnp.maximum(gamma, _GAMMA_MIN))[:, None], (b, length))
    weights = weights.astype(accumulation_dtype(logits.dtype))
    return _mlm_term(_nll(logits, labels, mmask, name="tokens"), mmask, weights, weighting).astype(
        logits.dtype
    )
