"""PST's losses: InfoNCE with TMR negative filtering, token-wise scores, STII alignment, pyramid.

Reconstructed (PST's code is not public): the symmetric InfoNCE with negatives filtered by
sentence-embedding similarity follows TMR (Petrovich et al., ICCV 2023); the batch
token-wise scores are HBI's weighted token-wise interaction (WTI, the full-coalition value
of :func:`cross_modal_value`); the Shapley-Taylor alignment and the pyramid consistency are
the KL terms of the spec (targets ``stop_gradient``-ed, KL(target || model)).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxkit import _validate
from jaxkit._typing import RealScalarLike, accumulation_dtype
from jaxkit.retrieval import _game


def _masked_log_softmax(z, mask, axis):
    has = jnp.any(mask, axis=axis, keepdims=True)
    z = jnp.where(mask, z, -jnp.inf)
    z = jnp.where(has, z, jnp.zeros_like(z))
    return jnp.where(mask, jax.nn.log_softmax(z, axis=axis), 0)


def _info_nce(scores, neg_mask, tau):
    acc = accumulation_dtype(scores.dtype)
    n = scores.shape[-1]
    eye = jnp.eye(n, dtype=bool).reshape(*(1,) * (scores.ndim - 2), n, n)
    keep = ~(neg_mask & ~eye)  # never filter the positive
    logits = scores.astype(acc) / tau
    rows = _masked_log_softmax(logits, keep, -1)
    cols = _masked_log_softmax(logits, keep, -2)
    diag_r = jnp.sum(jnp.where(eye, rows, 0), axis=(-2, -1))
    diag_c = jnp.sum(jnp.where(eye, cols, 0), axis=(-2, -1))
    return (-(diag_r + diag_c) / (2 * n)).astype(scores.dtype)


_info_nce_jit = jax.jit(_info_nce)


def info_nce(
    scores: Float[ArrayLike, "*batch n n"],
    *,
    tau: RealScalarLike = 0.1,
    neg_mask: Bool[ArrayLike, "*batch n n"] | None = None,
) -> Float[Array, "*batch"]:
    """Symmetric InfoNCE on a square score matrix, with TMR's negative filtering.

    ``L = -1/(2n) sum_k [log softmax_l(s_kl/tau)_kk + log softmax_k(s_kl/tau)_kk]``, where
    ``s_kl`` scores text ``k`` against motion ``l`` (positives on the diagonal). Entries
    with ``neg_mask`` True (off the diagonal) are removed from both softmaxes: a caption
    too similar to the query's own is not punished as a negative (TMR, Section 3.3; build
    the mask with :func:`negative_filter`). Accumulates in f32 (f64 for f64); jitted.

    Args:
      scores: Similarities, positives on the diagonal (e.g. cosines or stage scores).
      tau: Temperature ``> 0`` (traced; NaN or ``<= 0`` raises).
      neg_mask: Negatives to drop; ``None`` keeps all.

    Returns:
      The mean loss per leading batch entry, in ``scores``' dtype.

    Raises:
      TypeError: If ``scores`` is not a non-empty floating square matrix or ``neg_mask``
        does not match it.
      ValueError: If ``tau`` is not finite and positive.

    Example:
      >>> import jax.numpy as jnp
      >>> float(info_nce(10 * jnp.eye(3), tau=0.1)) < 1e-6
      True

    References:
      Petrovich, Black, Varol, "TMR: Text-to-Motion Retrieval Using Contrastive 3D Human
      Motion Synthesis", ICCV 2023, arXiv:2305.00976.
    """
    _validate.floating(scores, name="scores")
    _validate.min_ndim(scores, 2, name="scores")
    shp = jnp.shape(scores)
    if shp[-1] != shp[-2]:
        raise TypeError(f"`scores` must be square in its last two axes, got shape {shp}.")
    if shp[-1] == 0:
        raise TypeError(f"`scores` must hold at least one pair, got shape {shp}.")
    if neg_mask is None:
        neg_mask = jnp.zeros(shp, bool)
    else:
        _validate.shape(neg_mask, shp, name="neg_mask")
        _validate.boolean(neg_mask, name="neg_mask")
    tau = _validate.guard_positive(_validate.real_array(tau, name="tau"), tau, name="tau")
    return _info_nce_jit(jnp.asarray(scores), jnp.asarray(neg_mask, bool), tau)


@jax.jit
def _negative_filter(sent_emb, threshold):
    e = sent_emb / jnp.linalg.norm(sent_emb, axis=-1, keepdims=True)
    sim = e @ e.T
    return (sim > 2 * threshold - 1) & ~jnp.eye(sim.shape[0], dtype=bool)


def negative_filter(
    sent_emb: Float[ArrayLike, "n d"], *, threshold: RealScalarLike = 0.8
) -> Bool[Array, "n n"]:
    """TMR's negative filter: pairs whose caption embeddings are near-duplicates.

    ``mask_kl = cos(e_k, e_l) > 2 threshold - 1`` for ``k != l`` (TMR maps its 0.8
    threshold on a [0, 1] similarity to cosine this way). Pass it as ``neg_mask`` to
    :func:`info_nce`. Jitted.

    Args:
      sent_emb: One sentence embedding per caption in the batch.
      threshold: In ``[0, 1]``; 0.8 is TMR's default (traced).

    Returns:
      ``bool [n, n]`` with a False diagonal.

    Raises:
      TypeError: If ``sent_emb`` is not a floating matrix.
      ValueError: If ``threshold`` is outside ``[0, 1]``.

    Example:
      >>> import jax.numpy as jnp
      >>> negative_filter(jnp.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]])).astype(int).tolist()
      [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
    """
    _validate.floating(sent_emb, name="sent_emb")
    _validate.ndim(sent_emb, 2, name="sent_emb")
    t = _validate.guard_interval(
        _validate.real_array(threshold, name="threshold"),
        threshold,
        name="threshold",
        low=0.0,
        high=1.0,
    )
    return _negative_filter(jnp.asarray(sent_emb), t.astype(jnp.result_type(sent_emb)))


def _unit(x):
    """``x / |x|`` with 0 for a zero vector and finite gradients there (double where)."""
    sq = jnp.sum(x * x, axis=-1, keepdims=True)
    pos = sq > 1e-12
    return jnp.where(pos, x * jax.lax.rsqrt(jnp.where(pos, sq, 1)), 0)


def _cosine(a, b):
    return jnp.einsum("...ad,...bd->...ab", _unit(a), _unit(b))


def _wti_scores(motion, w_m, mask_m, text, w_t, mask_t):
    def one_pair(m, wm, mm, t, wt, mt):
        return _game._wti(_cosine(m, t), wm, wt, mm, mt)

    over_motion = jax.vmap(one_pair, in_axes=(0, 0, 0, None, None, None))
    return jax.vmap(over_motion, in_axes=(None, None, None, 0, 0, 0))(
        motion, w_m, mask_m, text, w_t, mask_t
    )  # [texts, motions]


_token_scores_jit = jax.jit(_wti_scores)


def token_scores(
    motion_tokens: Float[ArrayLike, "bm na d"],
    motion_weights: Float[ArrayLike, "bm na"],
    motion_mask: Bool[ArrayLike, "bm na"],
    text_tokens: Float[ArrayLike, "bt nb d"],
    text_weights: Float[ArrayLike, "bt nb"],
    text_mask: Bool[ArrayLike, "bt nb"],
) -> Float[Array, "bt bm"]:
    """Token-wise alignment scores of every (caption, motion) pair of a batch.

    ``s(text k, motion l) = WTI(cos(m_a, t_b))`` over the unpadded tokens (the
    full-coalition value of the cross-modal game, :func:`wti_value`): each text token
    matched to its best motion token and vice versa, weighted by the softmax of the
    token weight logits. Used at the joint stage (body-part tokens vs words) and the
    segment stage (time-segment tokens vs phrases). Jitted.

    Args:
      motion_tokens: Motion tokens per clip (joint-group or segment tokens).
      motion_weights: Their weight logits.
      motion_mask: Valid (unpadded) motion tokens.
      text_tokens: Text tokens per caption (words or phrases).
      text_weights: Their weight logits.
      text_mask: Valid text tokens.

    Returns:
      ``[captions, motions]`` scores (positives on the diagonal for paired batches).

    Raises:
      TypeError: If shapes disagree or the token arrays are not floating.

    Example:
      >>> import jax.numpy as jnp
      >>> m = jnp.eye(2)[None].repeat(2, 0); w = jnp.zeros((2, 2)); k = jnp.ones((2, 2), bool)
      >>> token_scores(m, w, k, m, w, k).tolist()
      [[1.0, 1.0], [1.0, 1.0]]
    """
    for name, x in (("motion_tokens", motion_tokens), ("text_tokens", text_tokens)):
        _validate.floating(x, name=name)
        _validate.ndim(x, 3, name=name)
    bm, na, d = jnp.shape(motion_tokens)
    bt, nb, _ = jnp.shape(text_tokens)
    _validate.shape(text_tokens, (bt, nb, d), name="text_tokens")
    _validate.shape(motion_weights, (bm, na), name="motion_weights")
    _validate.shape(motion_mask, (bm, na), name="motion_mask")
    _validate.shape(text_weights, (bt, nb), name="text_weights")
    _validate.shape(text_mask, (bt, nb), name="text_mask")
    _validate.boolean(motion_mask, name="motion_mask")
    _validate.boolean(text_mask, name="text_mask")
    return _token_scores_jit(
        motion_tokens, motion_weights, motion_mask, text_tokens, text_weights, text_mask
    )


def _kl_rows(target_logits, model_logits, mask, axis):
    lp = _masked_log_softmax(target_logits, mask, axis)
    lq = _masked_log_softmax(model_logits, mask, axis)
    kl = jnp.sum(jnp.where(mask, jnp.exp(lp) * (lp - lq), 0), axis=axis)
    valid = jnp.any(mask, axis=axis)
    count = jnp.maximum(jnp.sum(valid), 1).astype(kl.dtype)
    return jnp.sum(jnp.where(valid, kl, 0)) / count


def _alignment(sim, phi, mask_a, mask_b, tau_s, tau_phi):
    acc = accumulation_dtype(sim.dtype)
    mask = mask_a[..., :, None] & mask_b[..., None, :]
    target = jax.lax.stop_gradient(phi.astype(acc)) / tau_phi
    model = sim.astype(acc) / tau_s
    loss = _kl_rows(target, model, mask, -1) + _kl_rows(target, model, mask, -2)
    return loss.astype(sim.dtype)


_alignment_jit = jax.jit(_alignment)


def stii_alignment_loss(
    sim: Float[ArrayLike, "*batch na nb"],
    phi: Float[ArrayLike, "*batch na nb"],
    mask_a: Bool[ArrayLike, "*batch na"],
    mask_b: Bool[ArrayLike, "*batch nb"],
    *,
    tau_s: RealScalarLike = 0.1,
    tau_phi: RealScalarLike = 0.1,
) -> Float[Array, ""]:
    """Shapley-Taylor alignment: token similarities pulled toward the STII of the pair.

    ``L = KL(softmax_b(Phi/tau_phi) || softmax_b(S/tau_s)) + KL(softmax_a(Phi/tau_phi) ||
    softmax_a(S/tau_s))`` over valid token pairs of positive (motion, caption) pairs,
    averaged over valid rows/columns; ``Phi`` (from :func:`cross_modal_stii`) is
    ``stop_gradient``-ed, so only ``S`` learns. Jitted.

    Args:
      sim: Token similarities ``S_ab`` of positive pairs.
      phi: Their STII targets ``Phi_ab``.
      mask_a: Valid motion tokens.
      mask_b: Valid text tokens.
      tau_s: Temperature of ``S`` (``> 0``, traced).
      tau_phi: Temperature of ``Phi`` (``> 0``, traced).

    Returns:
      The scalar loss (0 when ``S`` and ``Phi`` give the same distributions).

    Raises:
      TypeError: If shapes disagree.
      ValueError: If a temperature is not finite and positive.

    Example:
      >>> import jax.numpy as jnp
      >>> s = jnp.array([[1.0, 0.0], [0.0, 1.0]]); k = jnp.ones(2, bool)
      >>> float(stii_alignment_loss(s, s, k, k))
      0.0
    """
    _validate.floating(sim, name="sim")
    _validate.min_ndim(sim, 2, name="sim")
    shp = jnp.shape(sim)
    _validate.shape(phi, shp, name="phi")
    _validate.shape(mask_a, shp[:-1], name="mask_a")
    _validate.shape(mask_b, (*shp[:-2], shp[-1]), name="mask_b")
    _validate.boolean(mask_a, name="mask_a")
    _validate.boolean(mask_b, name="mask_b")
    sim = _validate.guard_positive(jnp.asarray(sim), tau_s, name="tau_s")
    sim = _validate.guard_positive(sim, tau_phi, name="tau_phi")
    return _alignment_jit(sim, jnp.asarray(phi), mask_a, mask_b, tau_s, tau_phi)


def _pyramid(local_scores, global_scores, tau):
    acc = accumulation_dtype(global_scores.dtype)
    g = global_scores.astype(acc)[None] / tau
    loc = jax.lax.stop_gradient(local_scores.astype(acc)) / tau  # target: KL(target || model)
    full = jnp.ones(loc.shape, bool)
    per_stage = jax.vmap(lambda a, b, m: _kl_rows(a, b, m, -1) + _kl_rows(a, b, m, -2))(
        loc, jnp.broadcast_to(g, loc.shape), full
    )
    return jnp.sum(per_stage).astype(global_scores.dtype)


_pyramid_jit = jax.jit(_pyramid)


def pyramid_consistency(
    local_scores: Float[ArrayLike, "stages n n"],
    global_scores: Float[ArrayLike, "n n"],
    *,
    tau: RealScalarLike = 0.1,
) -> Float[Array, ""]:
    """Pyramid consistency: each local stage's batch distribution kept close to the global.

    ``L = sum_s [KL(softmax_rows(s_s/tau) || softmax_rows(g/tau)) + KL(softmax_cols(s_s/tau)
    || softmax_cols(g/tau))]`` (HBI's hierarchical consistency), with the stage scores
    ``s_s`` (joint, segment) and the global scores ``g`` of the same batch; KL rows are
    averaged over the batch. The local stages are the targets (``stop_gradient``, as the
    STII targets: KL(target || model)), so the loss trains the global scores toward the
    finer stages and never drags a local stage toward the global one (their encoders may
    still move: a shared encoder passes the gradient on). Summed over stages and both
    directions, it weighs ``2 * stages`` times :func:`info_nce` (which averages its two
    directions) at the same loss weight. Jitted.

    Args:
      local_scores: ``[stages, n, n]`` stage score matrices (captions by motions).
      global_scores: ``[n, n]`` global score matrix.
      tau: Temperature ``> 0`` (traced).

    Returns:
      The scalar loss (0 when every stage agrees with the global scores).

    Raises:
      TypeError: If shapes disagree.
      ValueError: If ``tau`` is not finite and positive.

    Example:
      >>> import jax.numpy as jnp
      >>> g = jnp.eye(3)
      >>> float(pyramid_consistency(g[None], g))
      0.0

    References:
      Jin et al., "Video-Text as Game Players: Hierarchical Banzhaf Interaction for
      Cross-Modal Representation Learning", CVPR 2023, arXiv:2303.14369.
    """
    _validate.floating(global_scores, name="global_scores")
    _validate.ndim(global_scores, 2, name="global_scores")
    _validate.ndim(local_scores, 3, name="local_scores")
    _validate.shape(local_scores, (None, *jnp.shape(global_scores)), name="local_scores")
    g = _validate.guard_positive(jnp.asarray(global_scores), tau, name="tau")
    return _pyramid_jit(jnp.asarray(local_scores), g, tau)
