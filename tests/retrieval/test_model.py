"""The small PST model: stage scores, loss composition, finite gradients with padding."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval
from jaxkit.retrieval import _game
from jaxkit.retrieval import _model as M
from jaxkit.retrieval import _synthetic as S


@pytest.mark.slow
def test_pst_loss_composition_and_gradients():
    d = retrieval.synthetic_motion_text(4, key=jax.random.key(0), length=16, max_segments=2)
    cfg = M.PSTConfig(
        vocab_size=len(S.WORDS), length=16, n_windows=2, n_phrases=2, dim=8, n_layers=1, n_heads=2
    )
    p = M.pst_init(cfg, key=jax.random.key(1))
    args = (
        jnp.asarray(d.motion),
        jnp.asarray(d.tokens),
        jnp.asarray(d.token_mask),
        jnp.asarray(d.word_segment),
        jnp.zeros((4, 4), bool),
    )
    full = jnp.array([1.0, 1.0, 0.5])

    @jax.jit
    def run(q):
        scores = M.pst_scores(q, cfg, *args[:4])
        loss0 = M.pst_loss(q, cfg, *args, jnp.zeros(3))[0]
        (loss, aux), g = jax.value_and_grad(
            lambda r: M.pst_loss(r, cfg, *args, full), has_aux=True
        )(q)
        g_pyr = jax.grad(lambda r: M.pst_loss(r, cfg, *args, full)[1]["l_pyr"])(q)
        return scores, loss0, loss, aux, g, g_pyr

    scores, loss0, loss, aux, g, g_pyr = run(p)
    # the pyramid term trains only the global projection heads, never the shared encoders
    assert float(aux["l_pyr"]) > 0 and np.any(np.asarray(g_pyr["proj"]) != 0)
    moved = [
        k for k, v in g_pyr.items() if k != "proj" and any(np.any(x) for x in jax.tree.leaves(v))
    ]
    assert moved == []
    assert scores.shape == (3, 4, 4) and bool(jnp.all(jnp.isfinite(scores)))
    # weights 0: the loss is the global InfoNCE of the global cosine scores
    assert abs(float(loss0) - float(retrieval.info_nce(scores[2], tau=0.1))) < 1e-5
    want = (
        aux["nce_global"]
        + retrieval.info_nce(scores[0], tau=0.1)
        + retrieval.info_nce(scores[1], tau=0.1)
        + aux["l_st"]
        + 0.5 * aux["l_pyr"]
    )
    assert abs(float(loss) - float(want)) < 1e-4
    leaves = [np.asarray(x) for x in jax.tree.leaves(g)]
    assert all(np.all(np.isfinite(x)) for x in leaves)
    assert any(np.any(x != 0) for x in leaves)


def test_local_tokens_describe_their_own_span():
    """``local=True``: a segment token sees only its window, a phrase token only its words."""
    d = retrieval.synthetic_motion_text(2, key=jax.random.key(0), length=16, max_segments=2)
    base = dict(vocab_size=len(S.WORDS), length=16, n_windows=2, n_phrases=2, dim=8, n_heads=2)
    motion = jnp.asarray(d.motion)
    late = motion.at[:, 9:].add(0.3)  # frames of the second window only (its first kept)
    tokens, mask, seg = (jnp.asarray(a) for a in (d.tokens, d.token_mask, d.word_segment))
    first = np.asarray(d.word_segment[0]) == 0
    swapped = tokens.at[0].set(jnp.where(jnp.asarray(first), tokens[0], S.VOCAB["kicks"]))
    for local in (True, False):
        cfg = M.PSTConfig(**base, n_layers=1, local=local)
        p = M.pst_init(cfg, key=jax.random.key(1))
        a = np.asarray(M.encode_motion(p, cfg, motion)[1])
        b = np.asarray(M.encode_motion(p, cfg, late)[1])
        pa = np.asarray(M.encode_text(p, cfg, tokens, mask, seg)[1])
        pb = np.asarray(M.encode_text(p, cfg, swapped, mask, seg)[1])
        assert np.abs(a[:, 1] - b[:, 1]).max() > 1e-3  # the changed window moves
        assert np.abs(pa[0, 1] - pb[0, 1]).max() > 1e-3 or not np.any(d.word_segment[0] == 1)
        # the other window / phrase stays put only with local attention
        assert (np.abs(a[:, 0] - b[:, 0]).max() < 1e-6) == local
        assert (np.abs(pa[0, 0] - pb[0, 0]).max() < 1e-6) == local


@jax.jit
def _order_probe():
    """The prior and the segment scores of order twins, as one compiled program (as eager
    glue, each op below compiled a program of its own: 146 compiles for this test)."""
    e = jnp.eye(2)
    windows = e[jnp.array([0, 0, 1, 1])][None]  # action 0 in the first half, then action 1
    phrases = jnp.stack([e, e[::-1]])  # "0 then 1" and "1 then 0"
    pmask = jnp.ones((2, 2), bool)
    prior = M.order_prior(4, pmask, 0.1)
    one = M.order_prior(4, jnp.array([[True, False]]), 0.1)

    def seg_score(order):
        sim = M._segment_sim(windows, phrases, prior, order)
        return _game._wti(sim, jnp.zeros((2, 4)), jnp.zeros((2, 2)), jnp.ones((2, 4), bool), pmask)

    return prior, one, seg_score(0.0), seg_score(0.5)


def test_order_prior_tells_order_twins_apart():
    """Max-matching is permutation invariant; the segment stage's order prior is not."""
    prior, one, plain, ordered = (np.asarray(v) for v in _order_probe())
    assert prior.shape == (2, 4, 2)
    np.testing.assert_allclose(prior[0], prior[1])  # the prior reads order and count only
    assert np.all(prior[:, :2, 0] > 0.85) and np.all(prior[:, 2:, 0] < 0.15)
    np.testing.assert_allclose(one[0, :, 0], 1.0, atol=1e-6)  # one phrase: no preference
    assert float(np.abs(one[0, :, 1]).max()) == 0.0
    assert abs(float(plain[0] - plain[1])) < 1e-6  # order 0: the twins tie
    assert float(ordered[0]) > float(ordered[1]) + 0.2  # the order that happened wins
    assert abs(float(ordered[0] - plain[0])) < 0.05  # the right order is barely penalised


def test_order_strength_is_guarded():
    """A negative or non-finite ``order`` is a clear error, eagerly and under ``jit``."""
    d = retrieval.synthetic_motion_text(2, key=jax.random.key(0), length=8, max_segments=2)
    cfg = M.PSTConfig(
        vocab_size=len(S.WORDS), length=8, n_windows=2, n_phrases=2, dim=8, n_layers=1, n_heads=2
    )
    p = M.pst_init(cfg, key=jax.random.key(1))
    args = [jnp.asarray(a) for a in (d.motion, d.tokens, d.token_mask, d.word_segment)]
    loss = jax.jit(M.pst_loss, static_argnums=1)  # one program for every value below
    for order in (-0.5, float("nan"), float("inf")):
        with pytest.raises(Exception, match="order"):
            jax.block_until_ready(M.pst_scores(p, cfg, *args, order))
        w = jnp.array([1.0, 1.0, 0.5, order])
        with pytest.raises(Exception, match="order"):
            jax.block_until_ready(loss(p, cfg, *args, jnp.zeros((2, 2), bool), w)[0])
    assert bool(jnp.all(jnp.isfinite(M.pst_scores(p, cfg, *args, 0.5))))


def _finite_full_loss_grads(params, cfg, batch):
    """Full PST's loss gradient on ``batch`` (no negatives filtered); asserts it is finite."""
    args = (*batch, jnp.zeros((batch[0].shape[0],) * 2, bool))
    full = jnp.array([1.0, 1.0, 0.5, 0.5])
    loss_fn = lambda r: M.pst_loss(r, cfg, *args, full)  # noqa: E731
    (loss, _), g = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)
    assert np.isfinite(float(loss))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
    return g


@pytest.mark.slow  # one small model's loss and gradient compile (~3 s)
def test_compress_option_forms_segments_by_dpc_knn():
    """``PSTConfig(compress=True)``: phrase slots are importance-weighted means of DPC-KNN
    clusters of the words (recomputed here from the words with ``dpc_knn``), the segment
    slots cluster the time steps, and the loss has finite gradients for the merge weights."""
    d = retrieval.synthetic_motion_text(4, key=jax.random.key(0), length=16, max_segments=2)
    cfg = M.PSTConfig(
        vocab_size=len(S.WORDS),
        length=16,
        n_windows=2,
        n_phrases=3,
        dim=8,
        n_layers=1,
        n_heads=2,
        compress=True,
    )
    p = M.pst_init(cfg, key=jax.random.key(1))
    assert {"merge_motion", "merge_text"} <= set(p)
    assert not {"merge_motion", "merge_text"} & set(
        M.pst_init(M.PSTConfig(vocab_size=len(S.WORDS)), key=jax.random.key(1))
    )
    tok, mask, ph = (jnp.asarray(a) for a in (d.tokens, d.token_mask, d.word_segment))
    words, phrase, pmask, _ = M.encode_text(p, cfg, tok, mask, ph)
    cl = retrieval.dpc_knn(words, mask, n_centers=3)
    w = np.exp(np.asarray(words @ p["merge_text"], np.float64))
    for b in range(4):
        for c in range(3):
            sel = np.asarray(cl.assign[b]) == c
            assert bool(pmask[b, c]) == bool(sel.any())
            if sel.any():
                want = (w[b, sel, None] * np.asarray(words[b, sel])).sum(0) / w[b, sel].sum()
                np.testing.assert_allclose(np.asarray(phrase[b, c]), want, rtol=1e-4, atol=1e-5)
    g = _finite_full_loss_grads(p, cfg, (jnp.asarray(d.motion), tok, mask, ph))
    assert float(jnp.abs(g["merge_text"]).sum()) > 0 and float(jnp.abs(g["merge_motion"]).sum()) > 0


@pytest.mark.slow  # one small model's loss and gradient compile (~4 s)
def test_layer_compressor_option_is_the_token_compressor_stage():
    """``compressor="layer"``: phrase slots are a :class:`TokenCompressor` (rebuilt here from
    the params' arrays) applied to the words with ``n_centers = n_phrases``, ``slots``
    gives its clusters, the params hold arrays only (optax-ready), and the loss reaches
    the compressor's importance score; without compression ``slots`` is the fixed windows
    and the phrase ids."""
    d = retrieval.synthetic_motion_text(4, key=jax.random.key(0), length=16, max_segments=2)
    sizes = dict(length=16, n_windows=2, n_phrases=3, dim=8, n_layers=1, n_heads=2)
    cfg = M.PSTConfig(len(S.WORDS), **sizes, compress=True, compressor="layer")
    p = M.pst_init(cfg, key=jax.random.key(1))
    assert not {"merge_motion", "merge_text"} & set(p)
    assert all(isinstance(a, jax.Array) for a in jax.tree.leaves(p))
    tok, mask, ph = (jnp.asarray(a) for a in (d.tokens, d.token_mask, d.word_segment))
    motion = jnp.asarray(d.motion)
    words, phrase, pmask, _ = M.encode_text(p, cfg, tok, mask, ph)
    fresh = retrieval.TokenCompressor(8, n_heads=2, key=jax.random.key(9))
    layer = eqx.combine(p["compress_text"], eqx.filter(fresh, eqx.is_array, inverse=True))
    want = jax.vmap(lambda w, m: layer(w, m, n_centers=3))(words, mask)
    np.testing.assert_allclose(np.asarray(phrase), np.asarray(want.tokens), atol=1e-5)
    assert np.array_equal(np.asarray(pmask), np.asarray(want.mask))
    step_slot, word_slot = M.slots(p, cfg, motion, tok, mask, ph)
    assert np.array_equal(np.asarray(word_slot), np.asarray(want.assign))
    assert step_slot.shape == (4, 8) and set(np.unique(step_slot)) == {0, 1}
    args = (motion, tok, mask, ph)
    g = _finite_full_loss_grads(p, cfg, args)
    for side in ("compress_motion", "compress_text"):
        assert float(jnp.abs(g[side].score.weight).sum()) > 0
        assert float(jnp.abs(g[side].attn.query_proj.weight).sum()) > 0
    plain = M.PSTConfig(len(S.WORDS), **sizes)
    step_slot, word_slot = M.slots(M.pst_init(plain, key=jax.random.key(1)), plain, *args)
    assert step_slot.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]] * 4
    assert np.array_equal(np.asarray(word_slot), np.where(d.token_mask, d.word_segment, -1))


def test_compressor_config_errors():
    with pytest.raises(ValueError, match="compressor"):
        M.PSTConfig(vocab_size=10, compress=True, compressor="mlp")
    with pytest.raises(ValueError, match="compress=True"):
        M.PSTConfig(vocab_size=10, compressor="layer")


def test_attention_pool_is_a_masked_softmax_mean():
    """``PSTConfig(pool="attention")``'s pooling against a float64 NumPy softmax over the
    valid tokens; query 0 is the mean; a row with no valid token pools to 0, not NaN."""
    cfg = M.PSTConfig(vocab_size=10, dim=4, pool="attention")
    x = jax.random.normal(jax.random.key(0), (3, 5, 4))
    mask = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
    q = jnp.array([3.0, -1.0, 0.5, 2.0])
    got = np.asarray(M._pool({"pool_text": q}, cfg, "text", x.at[0, 3:].set(1e4), mask))
    xs, m = np.asarray(x, np.float64), np.asarray(mask)
    for b in range(2):
        logit = xs[b, m[b]] @ np.asarray(q, np.float64) / 2.0
        w = np.exp(logit - logit.max())
        np.testing.assert_allclose(got[b], (w / w.sum()) @ xs[b, m[b]], rtol=1e-5, atol=1e-6)
    assert np.all(got[2] == 0.0)
    zero = np.asarray(M._pool({"pool_text": jnp.zeros(4)}, cfg, "text", x, mask))
    np.testing.assert_allclose(zero[:2], [xs[b, m[b]].mean(0) for b in range(2)], rtol=1e-5)
    with pytest.raises(ValueError, match="pool"):
        M.PSTConfig(vocab_size=10, pool="max")


@pytest.mark.slow  # two small models' encoders and one loss gradient compile (~6 s)
def test_attention_pool_option_starts_at_the_mean_and_learns():
    d = retrieval.synthetic_motion_text(4, key=jax.random.key(0), length=16, max_segments=2)
    sizes = dict(length=16, n_windows=2, n_phrases=2, dim=8, n_layers=1, n_heads=2)
    att = M.PSTConfig(len(S.WORDS), **sizes, pool="attention")
    p = M.pst_init(att, key=jax.random.key(1))
    mean = M.PSTConfig(len(S.WORDS), **sizes)
    p_mean = {k: v for k, v in p.items() if not k.startswith("pool_")}
    assert p_mean.keys() == M.pst_init(mean, key=jax.random.key(1)).keys()
    motion, tok, mask, ph = (
        jnp.asarray(a) for a in (d.motion, d.tokens, d.token_mask, d.word_segment)
    )
    for enc, args in ((M.encode_motion, (motion,)), (M.encode_text, (tok, mask, ph))):
        np.testing.assert_allclose(  # query 0 at the start: the mean
            np.asarray(enc(p, att, *args)[-1]), np.asarray(enc(p_mean, mean, *args)[-1]), atol=1e-5
        )
    g = _finite_full_loss_grads(p, att, (motion, tok, mask, ph))
    assert float(jnp.abs(g["pool_motion"]).sum()) > 0 and float(jnp.abs(g["pool_text"]).sum()) > 0
