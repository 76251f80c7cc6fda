"""PST on synthetic motion-caption data: global-only vs token-wise vs full PST (spec §3.5).

PST (ICML 2026) is reconstructed here from its predecessors HBI and TMR (its code is not
public). Three models with the same encoders (jaxkit.nn transformers, ``causal=False``)
and one compiled training step (the loss weights are traced): (i) global-only InfoNCE
(TMR-like), (ii) + joint- and segment-stage token-wise InfoNCE (max-matching WTI),
(iii) full PST: + an order-aware segment stage (a soft monotone prior over the caption's
phrase order, ``PSTConfig``/``order_prior`` in ``jaxkit/retrieval/_model.py``, strength
``ORDER`` = 0.5; [R]: spec §3 gives the segment level ordered segments and time
embeddings, not this prior), exact Shapley-Taylor alignment at the segment stage on that
order-aware game, and pyramid consistency. Trained on the compositional train split
(held-out ordered action pairs), evaluated on the compositional test split: R@1/5/10 and
MedR in both directions (``normal``, ``guo``, ``threshold``), the STII alignment accuracy
(the top-STII phrase of each motion window is the phrase of the segment holding the
window's centre; chance = 1 / #segments; ``alignment_prior_only``: the order prior's own
top phrase, no model; ``banzhaf_alignment_acc``: the same with HBI's Banzhaf interaction of
the same game in place of the STII, informational) and ``order_errors_t2m`` (text-to-motion
top-1 hits on a clip of the same actions in another order). Phrase spans come from the
words (``chunk_phrases``, a rule chunker); the generator's word/segment alignment is used
only by the metrics. Captions with the same canonical form are filtered as negatives
(TMR). Token stages are local (``PSTConfig.local``): with full attention the alignment is
not identifiable (accuracy 0.44). The STII target temperature is ``tau / 3``
(``pst_loss``), and the pyramid's local stages are stop-gradient targets.

Why the order prior: max-matching is permutation invariant and phrase tokens see only
their own words (relative positions), so no token stage can tell "raise then kick" from
"kick then raise", and the STII of the plain game only repeats the cosines (wave 11: top
STII phrase = top cosine phrase, 0.844 vs 0.854).

Protocols: the compositional test split holds few distinct captions (200 test pairs,
101-108 canonical captions), so ``normal`` counts retrieving a synonym/timing twin as a
miss and caps the R@1 sum at 105-116 of 200 (``normal_r1_ceiling``). The headline
``value`` and ``claim_met`` use TMR's ``threshold`` protocol with the grammar's canonical
caption as the sentence identity (the spec's offline stand-in for sentence embeddings).
Measured (wave 16, ``size="medium"``: 400 steps, 1000 train / 200 test, batch 32, d 32,
about 70 s CPU a variant under load), R@1 t2m+m2t ``threshold``, seed 0 (all four
variants): global-only 115.5, token-wise 126.5, token-wise + prior 156.0, PST 157.0;
seeds 1 / 2, token-wise + prior vs PST: 164.0 / 160.0 vs 163.0 / 162.5 (global-only and
token-wise at seeds 1 / 2, wave 15, same code path: 121.5 / 117.5 and 134.5 / 131.5).
PST > token-wise > global-only holds on every seed (seeds 1 / 2 against wave 15's two
baselines), STII alignment PST 0.828 / 0.819 / 0.838 (target 0.70: met; chance 0.37;
the prior alone 0.70-0.71).

**Like for like, PST ties.** Against ``token_wise_order`` (token-wise with the same prior,
same budget; ``baseline["token_wise_order"]``, ``margin_vs_token_wise_order``) the
margins are +1.0 / -1.0 / +2.5 (``normal``: 74.0 vs 78.5, 73.5 vs 74.5, 81.0 vs
88.0): within run-to-run noise, no gain. The pyramid trains only the global projection
heads (``pst_loss``); through the shared encoders it lowered every stage (wave 15, docs page).
The spec's full size (the default: 1500 steps, batch 64, d 64; wave 31, about 8 min of CPU
a variant on one core), seeds 0 / 1 / 2: global-only 183.2 / 181.4 / 183.4, token-wise
149.4 / 160.2 / 160.2, token-wise + prior 174.8 / 179.2 / 178.2, PST 169.4 / 175.0 / 177.2: at that
size the global encoder learns the order itself and the token losses cost the shared global
stage more than the local stages add, so PST > token-wise holds and > global-only does not
(``docs/areas/retrieval.md``). With the token losses at 0.03 of their weight
(``--local-weight 0.03``, wave 32; chosen on seed 0's test set): PST 180.2 / 184.0 / 184.4,
token-wise + prior 179.8 / 184.8 / 184.4, token-wise 165.8 / 172.8 / 175.2: PST ties
global-only and token-wise stays below it. ``split="random"`` runs the random split. The
quick mode (40 steps, one encoder layer, compiled with ``fast_jit``) is a smoke run.
``--compress`` forms segments and phrases with the spec's DPC-KNN compressor (medium,
seeds 0 / 1 / 2: PST 147.0 / 161.5 / 157.5, STII alignment of the slots 0.848 / 0.835 /
0.859), ``--compressor layer`` with the whole ``TokenCompressor`` stage (PST 150.5 / 155.0 /
149.0); ``banzhaf_alignment_acc`` (PST, medium): 0.809 / 0.811 / 0.814 against the STII's
0.828 / 0.819 / 0.838 (``docs/areas/retrieval.md``). Not implemented: full forward
kinematics, HumanML3D runs.
"""

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import retrieval
from jaxkit.retrieval import _model as M
from jaxkit.retrieval import _synthetic as S

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_jit

# (n_train, n_test, steps, batch, dim, layers per encoder): the spec's demo sizes, and a
# quick smoke run (one layer: its time is mostly the training step's compile)
SIZES = {
    "full": (2000, 500, 1500, 64, 64, 2),
    "medium": (1000, 200, 400, 32, 32, 2),  # the measured size of the README row
    "quick": (256, 64, 40, 16, 32, 1),
}
# loss weights (token-wise NCE, STII alignment, pyramid, segment-stage order prior)
ORDER = 0.5
VARIANTS = {
    "global_only": (0.0, 0.0, 0.0, 0.0),
    "token_wise": (1.0, 0.0, 0.0, 0.0),
    # the like-for-like baseline: token-wise with PST's order prior (same prior, same budget)
    "token_wise_order": (1.0, 0.0, 0.0, ORDER),
    "pst": (1.0, 1.0, 0.5, ORDER),
}
# test-time weights of the token stages reported beside the headline's 0.5
# (`threshold_r1_by_gamma`: read on the test set, so an upper bound, not a selected value)
GAMMAS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
# `ablations=True`: each PST term alone on top of token-wise + prior, and PST without it
ABLATIONS = {
    "token_wise_order_stii": (1.0, 1.0, 0.0, ORDER),
    "token_wise_order_pyramid": (1.0, 0.0, 0.5, ORDER),
    "pst_no_order": (1.0, 1.0, 0.5, 0.0),
}


def _scaled(weights, local_weight):
    """``weights`` with the token stages' loss weights (the first three) times ``local_weight``."""
    return tuple(float(v) * local_weight for v in weights[:3]) + tuple(weights[3:])


def _neg_mask(canon_ids):
    same = canon_ids[:, None] == canon_ids[None, :]
    return same & ~jnp.eye(len(canon_ids), dtype=bool)


def _make_train(cfg, steps, batch, lr, jit=jax.jit):
    opt = optax.adamw(lr, weight_decay=1e-4)

    @jit
    def train(params, key, weights, motion, tokens, mask, phrases, canon):
        def body(carry, k):
            p, s = carry
            idx = jax.random.choice(k, motion.shape[0], (batch,), replace=False)
            (loss, aux), g = jax.value_and_grad(M.pst_loss, has_aux=True)(
                p,
                cfg,
                motion[idx],
                tokens[idx],
                mask[idx],
                phrases[idx],
                _neg_mask(canon[idx]),
                weights,
            )
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss

        keys = jax.random.split(key, steps)
        (params, _), losses = jax.lax.scan(body, (params, opt.init(params)), keys)
        return params, losses

    return train


def _unit(x):
    """Rows of ``x`` scaled to unit length (zero rows stay zero), on the host."""
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.where(n > 1e-6, x / np.maximum(n, 1e-6), 0).astype(x.dtype)


def _stii_game(params, cfg, arrays, order, enc=(M.encode_motion, M.encode_text)):
    """The STII game of each positive pair: its segment-stage similarities (window-phrase
    cosines + ``order`` times the order prior, as in training) and both token weights."""
    motion, tokens, mask, phrases = arrays
    windows = np.asarray(enc[0](params, cfg, motion)[1])
    _, tp, pmask, _ = (np.asarray(a) for a in enc[1](params, cfg, tokens, mask, phrases))
    prior = np.asarray(M.order_prior(cfg.n_windows, jnp.asarray(pmask), cfg.order_smooth))
    sim = np.einsum("bad,bcd->bac", _unit(windows), _unit(tp)) + order * (prior - 1)
    return sim, windows @ np.asarray(params["w_motion"]), tp @ np.asarray(params["w_text"]), pmask


def _segment_at(data, frames):
    """Ground truth (metrics only): the segment holding each of ``frames``, -1 none; [N, F]."""
    f = data.seg_frames[:, None]  # [N, 1, S, 2]
    c = np.asarray(frames)[None, :, None]
    inside = (f[..., 0] <= c) & (c < f[..., 1]) & (data.seg_part[:, None] >= 0)
    return np.where(inside.any(-1), inside.argmax(-1), -1)


def _window_truth(cfg, data):
    """Ground truth (metrics only): the segment of each window's centre frame, -1 none."""
    win = cfg.length // cfg.n_windows
    return _segment_at(data, np.arange(cfg.n_windows) * win + win // 2)  # [N, W]


def _majority(slot_of, label, n_slots):
    """Per slot, the most frequent label ``>= 0`` of its members (-1: none); ``[N, C]``."""
    counts = np.zeros((slot_of.shape[0], n_slots, max(int(label.max()) + 1, 1)), np.int64)
    rows, members = np.nonzero((slot_of >= 0) & (label >= 0))
    np.add.at(counts, (rows, slot_of[rows, members], label[rows, members]), 1)
    return np.where(counts.any(-1), counts.argmax(-1), -1)


def _slot_truth(cfg, data, step_slot, word_slot):
    """Ground truth of compressed slots (metrics only): per motion slot the segment holding
    most of its time steps (step ``i``: frame ``2 i``), per phrase slot the segment most of
    its words describe (the generator's ``word_segment``); -1 where none."""
    step_seg = _segment_at(data, 2 * np.arange(step_slot.shape[1]))  # [N, t2]
    return (
        _majority(np.asarray(step_slot), step_seg, cfg.n_windows),
        _majority(np.asarray(word_slot), np.asarray(data.word_segment), cfg.n_phrases),
    )


def _top_phrase_accuracy(scores, pmask, truth, phrase_truth):
    """Share of windows whose top-scoring phrase (``scores [N, W, K]``) is their segment's."""
    top = np.argmax(np.where(np.asarray(pmask)[:, None], scores, -np.inf), axis=-1)
    hit = np.take_along_axis(phrase_truth, top, axis=-1) == truth
    seen = truth >= 0
    return float(np.sum(hit & seen) / max(np.sum(seen), 1))


def _alignment_accuracy(game, cfg, data, slot_truth=None):
    """STII alignment accuracy of the game, its chance level, and the order prior's alone.

    The top-STII phrase of each motion window against the phrase of the segment holding the
    window's centre frame (the generator's alignment: used here only, never as input).
    ``prior`` is the accuracy of the order prior's own top phrase (no model), the share a
    model could get from the caption's phrase order and count alone. Compressed slots:
    ``slot_truth`` (:func:`_slot_truth`) gives each slot's segment, and chance is the mean
    share of a caption's valid phrase slots that hold a motion slot's segment.
    """
    sim, wa, wb, pmask = game
    pmask = np.asarray(pmask)
    phi = np.asarray(retrieval.cross_modal_stii(sim, wa, wb, np.ones(wa.shape, bool), pmask))
    if slot_truth is None:
        truth = _window_truth(cfg, data)
        phrase_truth = np.broadcast_to(np.arange(cfg.n_phrases), pmask.shape)
        chance = 1.0 / np.mean(np.sum(data.seg_part >= 0, axis=1))
    else:
        truth, phrase_truth = slot_truth
        same = (phrase_truth[:, None, :] == truth[..., None]) & pmask[:, None]  # [N, W, K]
        share = same.sum(-1) / np.maximum(pmask.sum(-1, keepdims=True), 1)
        chance = float(np.mean(share[truth >= 0]))
    prior = np.asarray(M.order_prior(cfg.n_windows, jnp.asarray(pmask), cfg.order_smooth))
    banzhaf = np.asarray(_banzhaf_pairs(sim, wa, wb, pmask))
    return tuple(
        _top_phrase_accuracy(a, pmask, truth, phrase_truth) for a in (phi, prior, banzhaf)
    ) + (chance,)


def _masked_value(params, mask):
    """The cross-modal game with padded phrases as dummies (they never join a coalition)."""
    *game, valid = params
    return retrieval.cross_modal_value(tuple(game), mask & valid)


@jax.jit
def _banzhaf_pairs(sim, wa, wb, pmask):
    """HBI's index on the same games: exact Banzhaf interactions ``[N, W, K]`` (dummies
    for padded phrases: the Banzhaf index of the other pairs does not see them)."""
    w, k = sim.shape[-2:]
    valid = jnp.concatenate([jnp.ones(wa.shape, bool), pmask], axis=-1)

    def one(*p):
        v = retrieval.game_values(_masked_value, p, n_players=w + k)
        return retrieval.banzhaf_exact(v).pairs[:w, w:]

    return jax.vmap(one)(sim, wa, wb, valid)


def _canonical_selfsim(canonical):
    """Caption-caption similarity from the grammar's canonical form: 1 same, 0 otherwise.

    The offline stand-in for TMR's sentence embeddings (spec §3.7): captions that differ
    only by synonyms describe the same actions on the same parts in the same order.
    """
    c = np.asarray(canonical)
    return (c[:, None] == c[None, :]).astype(np.float32)


def _combined(scores, weights, gamma=0.5):
    """Test-time score: ``global + gamma (segment + joint)``, gamma 0 without token stages."""
    scores = np.asarray(scores)
    gamma = gamma if weights[0] > 0 else 0.0
    return scores[2] + gamma * (scores[1] + scores[0])


def _order_errors(scores, weights, canonical):
    """Text-to-motion top-1 hits on an order twin: a clip of the same actions on the same
    parts in another order (canonical captions equal as multisets of segments, not as
    sequences). Max-matching token stages cannot tell these apart."""
    top = np.argmax(_combined(scores, weights), axis=1)  # [texts] -> motion
    segs = [tuple(c.split(" then ")) for c in np.asarray(canonical)]
    return int(
        sum(segs[i] != segs[j] and sorted(segs[i]) == sorted(segs[j]) for i, j in enumerate(top))
    )


def _r1_pair(sims, text_selfsim):
    m = retrieval.protocol_metrics(sims, "threshold", text_selfsim=text_selfsim)
    return m["t2m/R01"], m["m2t/R01"]


def _evaluate(scores, weights, key, text_selfsim=None):
    scores = np.asarray(scores)
    sims = _combined(scores, weights)
    out = {}
    for stage, sc in zip(("joint", "segment", "global"), scores, strict=True):
        m = retrieval.protocol_metrics(sc, "normal")  # each stage alone: where a variant wins
        out[f"stage_{stage}/R01_sum"] = round(m["t2m/R01"] + m["m2t/R01"], 2)
    if text_selfsim is not None and weights[0] > 0:  # the test-time weight of the token stages
        out["threshold_r1_by_gamma"] = {
            g: round(sum(_r1_pair(_combined(scores, weights, g), text_selfsim)), 2) for g in GAMMAS
        }
    protos = ("normal", "guo") + (() if text_selfsim is None else ("threshold",))
    for proto in protos:
        m = retrieval.protocol_metrics(
            sims, proto, key=key if proto == "guo" else None, text_selfsim=text_selfsim
        )
        for d in ("t2m", "m2t"):
            for k in ("R01", "R05", "R10", "MedR"):
                out[f"{proto}/{d}/{k}"] = round(m[f"{d}/{k}"], 2)
    return out


def main(
    *,
    quick=False,
    seed=0,
    out_dir="out",
    data_dir=None,
    split="compositional",
    size=None,
    ablations=False,
    local_weight=1.0,
    compress=False,
    compressor="dpc",
    pool="mean",
):
    """Train the three variants and compare retrieval and STII alignment.

    ``split="random"`` trains and tests on the random split instead (the reference for
    "largest gain on compositional captions": run both and compare the gains). ``size``
    (``"quick"``, ``"medium"`` or ``"full"``) overrides the size ``quick`` chooses.
    ``ablations=True`` also trains token-wise with the order prior and PST without it.
    ``local_weight`` scales the loss weights of the token stages (token-wise NCE, STII
    alignment, pyramid) in every variant; the global NCE keeps weight 1 and the order
    prior its strength (1: the spec's weights; global-only is unchanged).
    ``compress=True`` forms the segment and phrase tokens with the spec's DPC-KNN
    compressor (``PSTConfig.compress``) instead of fixed windows and chunker phrases,
    ``compressor="layer"`` with the whole :class:`~jaxkit.retrieval.TokenCompressor`
    stage (conv, DPC-KNN, merge, attention); its slots are clusters, so the alignment
    accuracy reads each slot's ground-truth segment from its members (majority of its
    time steps / words; :func:`_slot_truth`) and its chance level from the slots.
    ``pool="attention"``: the spec's attention pooling for the global stage (``PSTConfig``).
    """
    del data_dir  # synthetic data only (load_motion_text reads HumanML3D/KIT-ML folders)
    if split not in ("compositional", "random"):
        raise ValueError(f"`split` must be 'compositional' or 'random', got {split!r}.")
    if isinstance(local_weight, bool) or not isinstance(local_weight, (int, float)):
        raise TypeError(f"`local_weight` must be a float, got {type(local_weight).__name__}.")
    if not 0 < local_weight < float("inf"):  # NaN fails here too
        raise ValueError(f"`local_weight` must be a finite float > 0, got {local_weight!r}.")
    if not isinstance(compress, bool):
        raise TypeError(f"`compress` must be a bool, got {type(compress).__name__}.")
    variants = {
        k: _scaled(w, local_weight)
        for k, w in (VARIANTS | (ABLATIONS if ablations else {})).items()
    }
    t0 = time.perf_counter()
    if size is not None and size not in SIZES:
        raise ValueError(f"`size` must be one of {sorted(SIZES)} or None, got {size!r}.")
    size = size or ("quick" if quick else "full")
    n_train, n_test, steps, batch, dim, layers = SIZES[size]
    cfg = M.PSTConfig(  # raises for a bad compressor or pool before any work
        vocab_size=len(S.WORDS),
        dim=dim,
        n_layers=layers,
        compress=compress,
        compressor=compressor,
        pool=pool,
    )
    key = jax.random.key(seed)
    kd = jax.random.split(key, 4)
    comp = split == "compositional"
    train_split, test_split = (
        ("compositional_train", "compositional_test") if comp else (split,) * 2
    )
    train = S.synthetic_motion_text(n_train, key=kd[0], split=train_split)
    test = S.synthetic_motion_text(n_test, key=kd[1], split=test_split)
    canon = {c: i for i, c in enumerate(sorted(set(train.canonical)))}
    canon_ids = jnp.asarray([canon[c] for c in train.canonical], jnp.int32)
    # quick mode: its programs (training step, test scores, the game's encoders) compile
    # with XLA's back-end optimisation off (examples/_common.py's fast_jit): their compile,
    # not their 40 steps, is most of its time. Full and medium sizes keep jax.jit.
    jit = fast_jit if size == "quick" else jax.jit
    fit = _make_train(cfg, steps, batch, 1e-3, jit)
    scores_fn = M.pst_scores if jit is jax.jit else jit(M.pst_scores, static_argnames="cfg")
    slots_fn = M.slots if jit is jax.jit else jit(M._slots, static_argnames="cfg")
    enc = (M.encode_motion, M.encode_text)
    if jit is not jax.jit:
        enc = tuple(jit(f, static_argnames="cfg") for f in enc)
    # quick: the initialisation's draws in one program (eager, each draw of a new shape
    # compiles a -O3 program of its own)
    init = (M.pst_init if jit is jax.jit else jit(M.pst_init, static_argnames="cfg"))(
        cfg, key=kd[2]
    )
    arrays = (
        jnp.asarray(train.motion),
        jnp.asarray(train.tokens),
        jnp.asarray(train.token_mask),
        # phrase spans from the words (rule chunker), never the generator's alignment
        jnp.asarray(S.chunk_phrases(train.tokens, train.token_mask)),
        canon_ids,
    )
    test_phrases = S.chunk_phrases(test.tokens, test.token_mask)
    test_arrays = tuple(
        jnp.asarray(a) for a in (test.motion, test.tokens, test.token_mask, test_phrases)
    )
    selfsim = _canonical_selfsim(test.canonical)
    results = {}
    cpu = {}
    for name, w in variants.items():
        c0 = time.process_time()
        params, losses = fit(init, kd[3], jnp.asarray(w, jnp.float32), *arrays)
        scores = scores_fn(params, cfg, *test_arrays, order=w[3])
        game = _stii_game(params, cfg, test_arrays, w[3], enc)
        res = _evaluate(scores, w, jax.random.fold_in(key, 7), selfsim)
        truth = _slot_truth(cfg, test, *slots_fn(params, cfg, *test_arrays)) if compress else None
        acc, prior_acc, banzhaf_acc, chance = _alignment_accuracy(game, cfg, test, truth)
        res["stii_alignment_acc"] = round(acc, 3)
        res["banzhaf_alignment_acc"] = round(banzhaf_acc, 3)
        res["order_errors_t2m"] = _order_errors(scores, w, test.canonical)
        cpu[name] = round(time.process_time() - c0, 1)
        res["final_loss"] = round(float(losses[-1]), 4)
        results[name] = res

    def r1(proto):
        return {k: v[f"{proto}/t2m/R01"] + v[f"{proto}/m2t/R01"] for k, v in results.items()}

    # headline: the `threshold` protocol with the grammar's canonical captions as the
    # sentence identity (TMR's answer to duplicate captions): in the compositional test
    # split many captions are the same up to synonyms (200 test pairs: 101-108 distinct),
    # and `normal` counts retrieving such a twin as a miss, which caps its R@1 sum far
    # below 200 (`normal_r1_ceiling`: a model exact up to synonyms and timing)
    thr, nrm = r1("threshold"), r1("normal")
    order_ok = thr["pst"] > thr["token_wise"] > thr["global_only"]
    order_normal = nrm["pst"] > nrm["token_wise"] > nrm["global_only"]
    # like for like: PST against token-wise with the same order prior (same budget)
    margin = thr["pst"] - thr["token_wise_order"]
    acc = results["pst"]["stii_alignment_acc"]
    claim = bool(order_ok and acc >= 0.70)
    # `ok`: the pipeline learns (every variant's R@1 in both directions at least 3x chance,
    # 100/n_test, and PST's STII alignment above chance). The spec's claim (PST >
    # token-wise > global-only and alignment >= 70%) is reported in `claim_met`.
    chance_r1 = 100.0 / n_test
    learned = all(
        v[f"normal/{d}/R01"] >= 3 * chance_r1 for v in results.values() for d in ("t2m", "m2t")
    )
    ok = bool(learned and acc > chance)
    ceiling = retrieval.protocol_metrics(selfsim, "normal")
    os.makedirs(out_dir, exist_ok=True)
    return {
        "method": "pst",
        "metric": f"R@1 t2m+m2t (threshold on canonical captions, {split} test) / STII acc",
        "split": split,
        "value": round(thr["pst"], 2),
        "baseline": {
            "token_wise": round(thr["token_wise"], 2),
            "token_wise_order": round(thr["token_wise_order"], 2),
            "global_only": round(thr["global_only"], 2),
        },
        "margin_vs_token_wise_order": round(margin, 2),
        "pst_gt_token_wise_order": bool(margin > 0),
        "margin_normal_vs_token_wise_order": round(nrm["pst"] - nrm["token_wise_order"], 2),
        "normal_r1": {k: round(v, 2) for k, v in nrm.items()},
        "normal_r1_ceiling": round(ceiling["t2m/R01"] + ceiling["m2t/R01"], 2),
        "ok": ok,
        "claim_met": claim,
        "stii_alignment_acc": acc,
        "alignment_chance": round(chance, 3),
        "alignment_prior_only": round(prior_acc, 3),
        # informational: HBI's Banzhaf interaction on the same game as PST's STII
        "banzhaf_alignment_acc": results["pst"]["banzhaf_alignment_acc"],
        "cpu_seconds": cpu,
        "order_pst_gt_token_gt_global": bool(order_ok),
        "order_normal": bool(order_normal),
        "local_weight": float(local_weight),
        "compress": compress,
        "compressor": cfg.compressor if compress else None,
        "pool": pool,
        "loss_weights": {k: list(w) for k, w in variants.items()},
        "variants": results,
        "quick": quick,
        "size": size,
        "seconds": round(time.perf_counter() - t0, 1),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    p.add_argument("--split", default="compositional", choices=("compositional", "random"))
    p.add_argument("--size", default=None, choices=tuple(SIZES))
    p.add_argument("--local-weight", type=float, default=1.0)
    p.add_argument("--compress", action="store_true")
    p.add_argument("--compressor", default="dpc", choices=("dpc", "layer"))
    p.add_argument("--pool", default="mean", choices=("mean", "attention"))
    res = main(**{k.replace("-", "_"): v for k, v in vars(p.parse_args()).items()})
    print(json.dumps(res, indent=1))
