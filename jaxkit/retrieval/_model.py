"""A small PST model: motion and text encoders with a three-stage token pyramid and its loss.

Motion: per-joint MLP of root-relative positions and velocities + joint and time
embeddings, pooled into body parts, time stride 2, then a bidirectional ``jaxkit.nn``
transformer over (time, part) tokens. Stages: joint stage = part x time-window tokens,
segment stage = time-window tokens, global = mean. Text: a ``jaxkit.nn`` transformer with
``TransformerConfig(causal=False)``; words, phrases (mean of the words of each phrase,
given as word -> phrase ids, e.g. from a chunker), global. With ``PSTConfig.compress``
the segment and phrase tokens come from the spec's compressor instead: DPC-KNN clusters
of the motion's time steps (``n_windows`` slots) and of the words (``n_phrases`` slots),
merged with learned importance weights (:func:`dpc_knn`, :func:`merge_tokens`), or with
``compressor="layer"`` by the whole :class:`TokenCompressor` stage; ``pool="attention"``
pools the global stage by attention (the spec's) instead of the mean.
The segment stage may be order-aware (``order > 0`` in :func:`pst_scores` /
:func:`pst_loss`): its token similarities get a soft monotone (diagonal) prior that
favours phrase ``k`` of ``n`` for the windows inside ``[k/n, (k+1)/n)`` of the clip, so
"raise then kick" and "kick then raise" score differently (max-matching alone is
permutation invariant). The prior uses only the window grid and the phrase order and
count of the caption, never the clip's segment boundaries. [R]: the spec's §3 gives the
segment stage ordered segments and time embeddings, not this prior.
Reconstructed from HBI and TMR (PST's code is not public).
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxkit import _validate, nn
from jaxkit.retrieval import _compress, _game, _losses
from jaxkit.retrieval._compressor import Compressed, TokenCompressor
from jaxkit.retrieval._synthetic import PART_JOINTS


@dataclasses.dataclass(frozen=True)
class PSTConfig:
    """Sizes of :func:`pst_init` / :func:`pst_encode` (static, hashable).

    Attributes:
      vocab_size: Text vocabulary size.
      length: Motion frames L (even).
      n_windows: Time windows W of the motion pyramid (divides L/2).
      n_phrases: Phrase tokens of the text pyramid.
      dim: Token width.
      n_layers: Transformer blocks per encoder.
      n_heads: Attention heads (dim % n_heads == 0).
      parts: Joint indices of each body part (HumanML3D order by default).
      n_joints: Joints J.
      order_smooth: Width (in clip fractions) of the soft edges of the segment-stage
        order prior's phrase spans (:func:`order_prior`).
      local: Token-stage locality. True: motion tokens attend only within their time
        window and a phrase's words only within the phrase (the other words, e.g. the
        subject and ``then``, attend to all), so segment and phrase tokens describe their
        own span, as HBI's per-frame tokens do; the global tokens still see the order
        through the time embedding and the free words. False: full attention, where every
        token may carry the whole clip or caption and the token alignment is not
        identifiable.
      compress: Segment and phrase tokens by the spec's DPC-KNN compressor (k = 3):
        the motion's time steps (parts pooled) cluster into ``n_windows`` slots and the
        words into ``n_phrases``, each slot the importance-weighted mean of its cluster
        (weights ``exp(x . v)`` with learned ``v``: ``params["merge_motion"]``,
        ``params["merge_text"]``), slots in the order of their centres. False: fixed
        time windows and the given phrase ids. The joint stage and the locality masks
        (``local``) keep the windows and phrase ids either way.
      compressor: Which compressor ``compress`` uses. ``"dpc"``: the bare clustering
        with a linear importance score (the lineage uses an MLP), no convolution or
        attention around it. ``"layer"``: the spec's whole segment stage, one
        :class:`TokenCompressor` per modality (depth-wise conv, DPC-KNN, merge, one
        attention block; ``params["compress_motion"]``, ``params["compress_text"]``: its
        arrays, the rest rebuilt from ``cfg``). [R]: both are our readings of the spec's
        summary-level description.
      pool: How the global stage pools a modality's tokens (the motion's time step x
        part tokens, the valid words). ``"mean"``: their mean. ``"attention"``: the
        spec's attention pooling, weights ``softmax(x . q / sqrt(dim))`` over the tokens
        with one learned query per modality (``params["pool_motion"]``,
        ``params["pool_text"]``), initialised at 0, where it equals the mean. [R]: one
        query and one head (the spec names attention pooling only).
    """

    vocab_size: int
    length: int = 40
    n_windows: int = 4
    n_phrases: int = 4
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    parts: tuple[tuple[int, ...], ...] = PART_JOINTS
    n_joints: int = 22
    order_smooth: float = 0.1
    local: bool = True
    compress: bool = False
    compressor: str = "dpc"
    pool: str = "mean"

    def __post_init__(self):
        _validate.one_of(("mean", "attention"), pool=self.pool)
        _validate.one_of(("dpc", "layer"), compressor=self.compressor)
        if self.compressor == "layer" and not self.compress:
            raise ValueError("`compressor='layer'` needs `compress=True`.")

    def transformer(self, vocab: int) -> nn.TransformerConfig:
        """The bidirectional ``jaxkit.nn`` encoder config of one modality."""
        hd = self.dim // self.n_heads
        return nn.TransformerConfig(
            vocab_size=vocab,
            d_model=self.dim,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_heads,
            head_dim=hd,
            mlp_dim=2 * self.dim,
            causal=False,
            tie_embeddings=True,
        )


def pst_init(cfg: PSTConfig, *, key) -> dict:
    """Random parameters of the PST encoders (host-called once; not jitted)."""
    k = jax.random.split(key, 10)
    d = cfg.dim
    n = jax.random.normal
    return (
        {
            "text": nn.init_params(cfg.transformer(cfg.vocab_size), key=k[0]),
            "motion": nn.init_params(cfg.transformer(2), key=k[1]),
            "in1": n(k[2], (6, d)) / jnp.sqrt(6.0),
            "in2": n(k[3], (d, d)) / jnp.sqrt(1.0 * d),
            "joint_emb": 0.1 * n(k[4], (cfg.n_joints, d)),
            "time_emb": 0.1 * n(k[5], (cfg.length // 2, d)),
            "w_motion": n(k[7], (d,)) / jnp.sqrt(1.0 * d),
            "w_text": n(k[8], (d,)) / jnp.sqrt(1.0 * d),
            "proj": n(k[9], (2, d, d)) / jnp.sqrt(1.0 * d),
        }
        | _compress_init(cfg, k[6])
        | _pool_init(cfg)
    )


def _pool_init(cfg: PSTConfig) -> dict:
    """The attention pooling's queries, 0 (the mean) at the start; none for the mean."""
    if cfg.pool == "mean":
        return {}
    return {"pool_motion": jnp.zeros((cfg.dim,)), "pool_text": jnp.zeros((cfg.dim,))}


def _pool(params, cfg: PSTConfig, side: str, x, mask):
    """``x [B, N, D]`` pooled over its valid tokens (``mask [B, N]``) by ``cfg.pool``.

    A row with no valid token pools to 0 either way (no NaN).
    """
    if cfg.pool == "mean":
        w = mask.astype(x.dtype)
        return jnp.sum(x * w[..., None], axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)[:, None]
    # the valid tokens as one cluster, merged with weights softmax(logits): merge_tokens'
    # core (stable softmax, padding never leaks, an empty cluster merges to 0)
    logits = (x @ params[f"pool_{side}"]) / jnp.sqrt(1.0 * cfg.dim)
    one_cluster = jnp.where(mask, 0, -1).astype(jnp.int32)
    return _compress._merge(x, one_cluster, logits, 1)[:, 0]


def _compress_init(cfg: PSTConfig, key) -> dict:
    """The compressor's parameters (none without ``cfg.compress``)."""
    km, kt = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
    if not cfg.compress:
        return {}
    if cfg.compressor == "layer":
        layer = lambda k: eqx.filter(_compressor_layer(cfg, k), eqx.is_array)  # noqa: E731
        return {"compress_motion": layer(km), "compress_text": layer(kt)}
    d = cfg.dim
    return {
        "merge_motion": jax.random.normal(km, (d,)) / jnp.sqrt(1.0 * d),
        "merge_text": jax.random.normal(kt, (d,)) / jnp.sqrt(1.0 * d),
    }


def _compressor_layer(cfg: PSTConfig, key) -> TokenCompressor:
    return TokenCompressor(cfg.dim, n_heads=cfg.n_heads, key=key)


def _layer(cfg: PSTConfig, arrays) -> TokenCompressor:
    """A :class:`TokenCompressor` from its arrays (the params) and ``cfg`` (the rest)."""
    skeleton = eqx.filter_eval_shape(_compressor_layer, cfg, jax.random.key(0))
    return eqx.combine(arrays, skeleton)


def _part_matrix(cfg):
    m = jnp.zeros((len(cfg.parts), cfg.n_joints))
    for p, js in enumerate(cfg.parts):
        m = m.at[p, jnp.asarray(js)].set(1.0 / len(js))
    return m


def _encode_motion(params, cfg: PSTConfig, motion):
    """``motion [B, L, J, 3]`` -> (joint-stage ``[B, W*P, D]``, segment ``[B, W, D]``, global).

    Public as ``encode_motion``, jitted at module level (``cfg`` static).
    """
    joint, segment, pooled = _motion_tokens(params, cfg, motion)
    return joint, segment, pooled @ params["proj"][0]


def _motion_tokens(params, cfg: PSTConfig, motion):
    """The motion encoder below the global head: (joint, segment, pooled ``[B, D]``)."""
    b = motion.shape[0]
    steps = _motion_steps(params, cfg, motion)  # [B, t2, P, D]
    t2, n_p = steps.shape[1:3]
    h = steps.reshape(b, cfg.n_windows, t2 // cfg.n_windows, n_p, cfg.dim).mean(axis=2)
    joint = h.reshape(b, cfg.n_windows * n_p, cfg.dim)  # window-major
    if cfg.compress:
        pooled_parts = steps.mean(axis=2)  # [B, t2, D]
        ones = jnp.ones(pooled_parts.shape[:2], bool)
        segment = _compressed(params, cfg, "motion", pooled_parts, ones, cfg.n_windows).tokens
    else:
        segment = h.mean(axis=2)
    if cfg.pool == "mean":
        return joint, segment, h.mean(axis=(1, 2))  # the mean of the step x part tokens
    tokens = steps.reshape(b, t2 * n_p, cfg.dim)
    pooled = _pool(params, cfg, "motion", tokens, jnp.ones(tokens.shape[:2], bool))
    return joint, segment, pooled


def _motion_steps(params, cfg: PSTConfig, motion):
    """The motion transformer's output ``[B, L/2, P, D]`` (time steps x body parts)."""
    b, length = motion.shape[:2]
    rel = motion - motion[:, :, :1]  # root-relative
    vel = jnp.concatenate([jnp.zeros_like(motion[:, :1]), jnp.diff(motion, axis=1)], axis=1)
    x = jnp.concatenate([rel, 10.0 * vel], axis=-1)
    h = jax.nn.gelu(x @ params["in1"]) @ params["in2"] + params["joint_emb"][None, None]
    parts = jnp.einsum("pj,bljd->blpd", _part_matrix(cfg), h)  # [B, L, P, D]
    t2 = length // 2
    parts = parts.reshape(b, t2, 2, *parts.shape[2:]).mean(axis=2)
    parts = parts + params["time_emb"][None, :, None]
    n_p = parts.shape[2]
    seq = parts.reshape(b, t2 * n_p, cfg.dim)
    pos = jnp.broadcast_to(jnp.arange(t2 * n_p, dtype=jnp.int32) // n_p, (b, t2 * n_p))
    attn = None
    if cfg.local:
        win = jnp.arange(t2 * n_p) // (n_p * (t2 // cfg.n_windows))
        attn = jnp.broadcast_to(win[:, None] == win[None, :], (b, t2 * n_p, t2 * n_p))
    h = nn.run_layers(params["motion"], cfg.transformer(2), seq, pos, attn_mask=attn).h
    return h.reshape(b, t2, n_p, cfg.dim)


def _compressed(params, cfg: PSTConfig, side: str, x, mask, n_slots) -> Compressed:
    """``n_slots`` compressed tokens of ``x [B, N, D]`` by ``cfg.compressor`` (batched)."""
    if cfg.compressor == "layer":
        layer = _layer(cfg, params[f"compress_{side}"])
        return jax.vmap(lambda a, m: layer(a, m, n_centers=n_slots))(x, mask)
    # DPC-KNN (k = 3) and the importance-weighted mean, weights exp(x . v)
    cl = _compress._dpc_knn(x, mask, n_slots, 3)
    merged = _compress._merge(x, cl.assign, x @ params[f"merge_{side}"], n_slots)
    return Compressed(merged, cl.valid, cl.assign)


def _encode_text(params, cfg: PSTConfig, tokens, mask, phrase_ids):
    """Text pyramid: (words ``[B, T, D]``, phrases ``[B, K, D]``, phrase mask, global).

    ``phrase_ids [B, T]`` assigns each word to a phrase in ``[0, K)`` (-1: none).
    Public as ``encode_text``, jitted at module level (``cfg`` static).
    """
    h, phrase, phrase_mask, pooled = _text_tokens(params, cfg, tokens, mask, phrase_ids)
    return h, phrase, phrase_mask, pooled @ params["proj"][1]


def _text_tokens(params, cfg: PSTConfig, tokens, mask, phrase_ids):
    """The text encoder below the global head: (words, phrases, phrase mask, pooled)."""
    h = _text_words(params, cfg, tokens, mask, phrase_ids)
    if cfg.compress:
        phrase, phrase_mask, _ = _compressed(params, cfg, "text", h, mask, cfg.n_phrases)
    else:
        ids = jnp.arange(cfg.n_phrases)[None, :, None]
        assign = (phrase_ids[:, None, :] == ids) & mask[:, None]
        a = assign.astype(h.dtype)
        phrase = jnp.einsum("bkt,btd->bkd", a, h) / jnp.maximum(a.sum(-1, keepdims=True), 1.0)
        phrase_mask = jnp.any(assign, axis=-1)
    return h, phrase, phrase_mask, _pool(params, cfg, "text", h, mask)


def _text_words(params, cfg: PSTConfig, tokens, mask, phrase_ids):
    """The text transformer's output ``[B, T, D]``."""
    b, t = tokens.shape
    tcfg = cfg.transformer(cfg.vocab_size)
    h = nn.embed(params["text"], tcfg, tokens)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    attn = jnp.broadcast_to(mask[:, None, :], (b, t, t))
    if cfg.local:
        free = phrase_ids[:, :, None] < 0
        attn = attn & (free | (phrase_ids[:, :, None] == phrase_ids[:, None, :]))
    return nn.run_layers(params["text"], tcfg, h, pos, attn_mask=attn).h


def _slots(params, cfg: PSTConfig, motion, tokens, mask, phrase_ids):
    """Slot of each motion time step ``int32 [B, L/2]`` and word ``int32 [B, T]`` (-1 none).

    The segment and phrase token each step or word went into: the compressor's clusters
    with ``cfg.compress``, else the fixed time windows and the given phrase ids (padding
    -1). For metrics (which ground-truth segment a slot holds). Public to the example as
    ``slots``, jitted at module level (``cfg`` static).
    """
    t2 = motion.shape[1] // 2
    if not cfg.compress:
        win = jnp.arange(t2, dtype=jnp.int32) // (t2 // cfg.n_windows)
        steps = jnp.broadcast_to(win, (motion.shape[0], t2))
        return steps, jnp.where(mask, phrase_ids, -1).astype(jnp.int32)
    steps = _motion_steps(params, cfg, motion).mean(axis=2)
    ones = jnp.ones(steps.shape[:2], bool)
    words = _text_words(params, cfg, tokens, mask, phrase_ids)
    return (
        _compressed(params, cfg, "motion", steps, ones, cfg.n_windows).assign,
        _compressed(params, cfg, "text", words, mask, cfg.n_phrases).assign,
    )


def _cos_matrix(a, b):
    return _losses._unit(b) @ _losses._unit(a).T  # [texts, motions]


def order_prior(n_windows: int, phrase_mask, smooth: float):
    """Soft monotone prior ``[B, W, K]`` in ``[0, 1]`` of window ``a`` lying in phrase ``b``.

    Phrase ``b`` of a caption with ``n`` phrases is expected over the clip fraction
    ``[b/n, (b+1)/n)``; the prior is the mass of a Gaussian of width ``smooth`` around
    window ``a``'s centre ``(a + 1/2)/W`` inside that span, the first span open to the
    clip's start and the last to its end (1 deep inside, 0 far outside; all ones for a
    one-phrase caption). Needs only the phrase order and count; the valid phrases
    are the first ``n`` slots of ``phrase_mask`` (as ``_synthetic.chunk_phrases`` numbers them).
    """
    n = jnp.maximum(jnp.sum(phrase_mask, axis=-1, keepdims=True), 1).astype(jnp.float32)
    k = jnp.arange(phrase_mask.shape[-1], dtype=jnp.float32)[None]  # [1, K]
    # the first phrase is open to the clip's start and the last to its end
    lo = jnp.where(k == 0, -1.0, k / n)[:, None, :]  # [B, 1, K]
    hi = jnp.where(k + 1 >= n, 2.0, (k + 1) / n)[:, None, :]
    u = ((jnp.arange(n_windows, dtype=jnp.float32) + 0.5) / n_windows)[None, :, None]
    cdf = jax.scipy.stats.norm.cdf
    inside = cdf((hi - u) / smooth) - cdf((lo - u) / smooth)
    return jnp.where(phrase_mask[:, None, :], inside, 0.0)


def _segment_sim(ms, tp, prior, order):
    """Segment-stage similarities ``[..., W, K]``: cosine + ``order * (prior - 1)``."""
    return _losses._cosine(ms, tp) + order * (prior - 1).astype(ms.dtype)


def _checked_order(order):
    """``order`` as an array; a clear error (eagerly and under ``jit``) unless finite, >= 0."""
    order = jnp.asarray(order, jnp.float32)
    bad = ~(jnp.isfinite(order) & (order >= 0))  # NaN compares False: guarded explicitly
    return eqx.error_if(
        order, bad, "order (the segment order prior's strength) must be finite and >= 0"
    )


def _stage_scores(params, cfg, motion_enc, text_enc, mask, order):
    order = _checked_order(order)
    mj, ms, mg = motion_enc
    tw, tp, pmask, tg = text_enc
    ones = lambda x: jnp.ones(x.shape[:2], bool)  # noqa: E731
    s_joint = _losses._wti_scores(
        mj, mj @ params["w_motion"], ones(mj), tw, tw @ params["w_text"], mask
    )
    prior = order_prior(cfg.n_windows, pmask, cfg.order_smooth)  # [texts, W, K]
    sim = _segment_sim(ms[None], tp[:, None], prior[:, None], order)  # [texts, motions, W, K]
    wm, wt = ms @ params["w_motion"], tp @ params["w_text"]
    s_seg = _game._wti(sim, wm[None], wt[:, None], ones(ms)[None], pmask[:, None])
    return jnp.stack([s_joint, s_seg, _cos_matrix(mg, tg)])


def _pst_scores(params, cfg: PSTConfig, motion, tokens, mask, phrase_ids, order=0.0):
    """Batch score matrices ``[3, texts, motions]``: joint, segment and global stages.

    ``order`` (traced) is the strength of the segment stage's order prior (0: plain
    max-matching). Public as ``pst_scores``, jitted at module level (``cfg`` static).
    """
    enc_m = _encode_motion(params, cfg, motion)
    enc_t = _encode_text(params, cfg, tokens, mask, phrase_ids)
    return _stage_scores(params, cfg, enc_m, enc_t, mask, order)


# host callers get one compiled program per shape (``cfg`` static), not one per eager op;
# under an outer trace they inline like any jitted function
encode_motion = jax.jit(_encode_motion, static_argnames=("cfg",))
encode_text = jax.jit(_encode_text, static_argnames=("cfg",))
pst_scores = jax.jit(_pst_scores, static_argnames=("cfg",))
slots = jax.jit(_slots, static_argnames=("cfg",))


def pst_loss(
    params,
    cfg: PSTConfig,
    motion,
    tokens,
    mask,
    phrase_ids,
    neg_mask,
    weights,
    tau=0.1,
    tau_phi=0.03,
):
    """Total PST loss; ``weights = (token-wise, STII alignment, pyramid[, order])`` (traced).

    ``L = NCE(global) + w0 (NCE(joint) + NCE(segment)) + w1 L_ST(segment) + w2 L_pyr``
    with ``L_ST`` on the positive pairs' segment-stage token similarities and their exact
    STII targets (:func:`cross_modal_stii`, ``stop_gradient``). ``w3`` (0 when absent) is
    the strength of the segment stage's order prior (:func:`order_prior`): it enters the
    segment scores and the game whose STII is the target, so the target favours the
    phrase at the window's place in the caption's order. Weights ``(0, 0, 0)`` give the
    global-only baseline, ``(1, 0, 0)`` the token-wise one, ``(1, 1, 0.5, 0.5)`` full PST.
    ``L_pyr`` is :func:`pyramid_consistency` divided by 4 (two stages, both directions: one
    InfoNCE's scale) with the joint and segment scores as ``stop_gradient`` targets and, as
    the model side, the global scores recomputed on the encoders' pooled features under
    ``stop_gradient``: it distils the local stages into the global projection heads only
    and cannot move the encoders the stages share (with gradients through the encoders it
    lowered every stage: wave 15, ``docs/areas/retrieval.md``). [R]: HBI's consistency
    term, made head-only here.
    ``tau_phi`` (STII target temperature) defaults to 0.03, about ``tau / 3`` at the
    default ``tau = 0.1`` (a fixed value: it does not follow ``tau``), not the spec's
    ``tau_phi = tau_S``: the STII of this game is about a third of ``S`` in spread, so with
    equal temperatures the target is a flattened copy of ``S`` and the KL only flattens the
    token similarities (measured: full PST R@1 sum 49.5 vs 64.5, examples/pst_synthetic.py).
    """
    order = _checked_order(weights[3] if weights.shape[0] > 3 else 0.0)
    *tok_m, pool_m = _motion_tokens(params, cfg, motion)
    *tok_t, pool_t = _text_tokens(params, cfg, tokens, mask, phrase_ids)
    enc_m = (*tok_m, pool_m @ params["proj"][0])
    enc_t = (*tok_t, pool_t @ params["proj"][1])
    scores = _stage_scores(params, cfg, enc_m, enc_t, mask, order)
    nce = [_losses._info_nce(s, neg_mask, tau) for s in scores]
    ms, tp, ok_b = enc_m[1], enc_t[1], enc_t[2]
    prior = order_prior(cfg.n_windows, ok_b, cfg.order_smooth)
    sim = _segment_sim(ms, tp, prior, order)  # positives: [B, W, K]
    wa, wb = ms @ params["w_motion"], tp @ params["w_text"]
    ok_a = jnp.ones(wa.shape, bool)
    sg = jax.lax.stop_gradient
    phi = _game._cross_modal_stii_core(sg(sim), sg(wa), sg(wb), ok_a, ok_b)
    l_st = _losses._alignment(sim, phi, ok_a, ok_b, tau, tau_phi)
    # pyramid: the global head distils the local stages (targets stop-gradient) on the
    # encoders' pooled features with stop-gradient, so the term trains only the global
    # projection heads and cannot move the encoders the stages share; / 4 puts its two
    # stages x two directions on one InfoNCE's scale
    sg_head = _cos_matrix(sg(pool_m) @ params["proj"][0], sg(pool_t) @ params["proj"][1])
    l_pyr = _losses._pyramid(scores[:2], sg_head, tau) / (2 * 2)
    total = nce[2] + weights[0] * (nce[0] + nce[1]) + weights[1] * l_st + weights[2] * l_pyr
    return total, {"nce_global": nce[2], "l_st": l_st, "l_pyr": l_pyr}
