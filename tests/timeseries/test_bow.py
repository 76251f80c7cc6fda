"""The bag-of-words text baseline and the class-balanced gate BCE (spec §4.5, §4.7)."""

from collections import Counter

import jax
import numpy as np
import optax
import pytest

from jaxkit import timeseries as ts

L, H = 16, 8
TEXTS = [
    "Analysts say demand is set to surge sharply. The committee met on Tuesday.",
    "A steep collapse is feared; a steep collapse indeed.",
    "No notable events were reported.",
    "Zebra quux!",
]


def _counter_bow(texts, vocab):
    """Brute force: count the vocabulary words one by one."""
    out = np.zeros((len(texts), len(vocab)))
    for i, t in enumerate(texts):
        words = "".join(c if c.isalpha() or c == "-" else " " for c in t.lower()).split()
        c = Counter(w for w in words if w in vocab)
        n = sum(c.values())
        for j, w in enumerate(vocab):
            out[i, j] = c[w] / n if n else 0.0
    return out


def test_bag_of_words_counts():
    _, vocab = ts.bag_of_words(TEXTS[:3])
    words = {w for t in TEXTS[:3] for w in t.lower().replace(".", " ").replace(";", " ").split()}
    assert vocab == tuple(sorted(words))
    bow, v2 = ts.bag_of_words(TEXTS, vocab=vocab)
    assert v2 == vocab and bow.dtype == np.float32
    np.testing.assert_allclose(bow, _counter_bow(TEXTS, vocab), rtol=1e-6)
    np.testing.assert_array_equal(bow[3], 0.0)  # no word in the vocabulary
    np.testing.assert_allclose(bow[:3].sum(1), 1.0, rtol=1e-6)
    with pytest.raises(TypeError, match="texts"):
        ts.bag_of_words("one string")
    with pytest.raises(ValueError, match="texts"):
        ts.bag_of_words([])
    with pytest.raises(ValueError, match="vocab"):
        ts.bag_of_words(["123 !!"])


def _bow_model(v):
    bb = ts.PatchTST(
        L, H, patch_len=4, stride=4, d_model=8, n_heads=2, n_layers=1, d_ff=8,
        key=jax.random.key(0),
    )  # fmt: skip
    return bb, ts.BoWForecaster(bb, v, key=jax.random.key(1), n_tokens=3)


def test_bow_forecast_reads_the_bag_not_the_order():
    texts = ["calm calm rise", "rise calm calm", "fall fall fall"]
    bow, vocab = ts.bag_of_words(texts)
    bb, m = _bow_model(len(vocab))
    x = np.random.default_rng(0).normal(size=(3, L, 1)).astype(np.float32)
    x[1] = x[0]
    x[2] = x[0]
    y = np.asarray(ts.bow_forecast(m, x, bow))
    np.testing.assert_array_equal(y[0], y[1])  # same bag, other word order
    assert np.max(np.abs(y[2] - y[0])) > 1e-5  # another bag changes the forecast
    assert np.max(np.abs(y[0] - np.asarray(ts.patchtst_forecast(bb, x[:1]))[0])) > 1e-5
    # one window at a time = the batch
    np.testing.assert_allclose(ts.bow_forecast(m, x[2:], bow[2:])[0], y[2], rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="bow"):
        ts.bow_forecast(m, x, bow[:, :2])
    with pytest.raises(ValueError, match="bow"):
        ts.bow_forecast(m, x, np.full_like(bow, np.nan))
    with pytest.raises(TypeError, match="model"):
        ts.bow_forecast(bb, x, bow)
    with pytest.raises(TypeError, match="batch.text"):
        ts.tess_loss(m, ts.TESSBatch(x, x[:, :H], None, None, None))
    with pytest.raises(TypeError, match="`batch.x` must hold at least one sample"):  # NaN
        ts.tess_loss(bb, ts.TESSBatch(x[:0], x[:0, :H], None, None, None))
    with pytest.raises(TypeError, match="backbone"):
        ts.BoWForecaster(m, 3, key=jax.random.key(0))


@pytest.mark.slow
def test_bow_trains_through_fit_forecaster():
    r = np.random.default_rng(1)
    n = 32
    up = r.random(n) < 0.5
    texts = ["prices will rise" if u else "prices will fall" for u in up]
    bow, vocab = ts.bag_of_words(texts)
    x = r.normal(size=(n, L, 1)).astype(np.float32)
    y = (np.where(up, 2.0, -2.0)[:, None, None] + 0.1 * r.normal(size=(n, H, 1))).astype(np.float32)
    zeros = np.zeros((n, 4), np.int32)
    batch = ts.TESSBatch(x, y, zeros, np.zeros((n, 4, 4), np.float32), zeros, bow)
    _, m = _bow_model(len(vocab))
    opt = optax.adam(1e-2)
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam count is int32
        _, losses = ts.fit_forecaster(
            m, batch, key=jax.random.key(0), optimizer=opt, steps=60, batch_size=16
        )
    assert float(losses[-5:].mean()) < 0.3 * float(losses[:5].mean())


def _bce_np(logits, t, balanced):
    ell = np.logaddexp(0.0, logits) - t * logits
    if not balanced:
        return ell.mean()
    per = []
    for k in range(logits.shape[1]):
        pos, neg = ell[t[:, k] == 1, k], ell[t[:, k] == 0, k]
        parts = [p.mean() for p in (pos, neg) if p.size]
        per.append(np.mean(parts))
    return np.mean(per)


def test_balanced_gate_bce_matches_numpy():
    bb = ts.PatchTST(L, H, patch_len=4, stride=4, d_model=8, n_heads=2, n_layers=1, d_ff=8,
                     key=jax.random.key(0))  # fmt: skip
    tess = ts.TESSForecaster(bb, ts.V2, key=jax.random.key(1))
    r = np.random.default_rng(2)
    b = 12
    x = r.normal(size=(b, L, 1)).astype(np.float32)
    y = r.normal(size=(b, H, 1)).astype(np.float32)
    ids = np.stack([r.integers(0, s, b) for s in ts.V2.sizes], 1).astype(np.int32)
    conf = r.uniform(0, 3, (b, 4, 4)).astype(np.float32)
    tg = (r.random((b, 4)) < 0.8).astype(np.int32)
    tg[:, 3] = 1  # one primitive with a single class present
    logits = np.asarray(ts.tess_forecast(tess, x, ids, conf).gate_logits, np.float64)
    batch = ts.TESSBatch(x, y, ids, conf, tg)
    for bal in (False, True):
        _, aux = ts.tess_loss(tess, batch, balanced_gate=bal)
        np.testing.assert_allclose(float(aux["bce"]), _bce_np(logits, tg, bal), rtol=1e-5)
    with pytest.raises(TypeError, match="balanced_gate"):
        ts.tess_loss(tess, batch, balanced_gate=1)
    soft = np.full((b, 4), 0.25, np.float32)  # a float target in [0, 1]: soft BCE, by design
    _, aux = ts.tess_loss(tess, batch._replace(gate_target=soft))
    np.testing.assert_allclose(float(aux["bce"]), _bce_np(logits, soft, False), rtol=1e-5)
    with pytest.raises(ValueError, match="`data.gate_target` must lie in"):
        ts.fit_forecaster(
            tess, batch._replace(gate_target=soft + 1.0), key=jax.random.key(0),
            optimizer=optax.sgd(0.1), steps=1, batch_size=2,
        )  # fmt: skip


@pytest.mark.slow
def test_gate_learns_reliability_from_confidence():
    """Spec §4.4 6 in miniature: a label whose confidence says "unreliable" is gated off.

    Half the labels are correct with a confident extraction (margin 8.29, one vote), half
    wrong from conflicting votes (margin 0); the gate must open (> 0.9) on the first and
    close (< 0.2) on the second, with either BCE.
    """
    r = np.random.default_rng(3)
    n = 96
    bb = ts.PatchTST(L, H, patch_len=4, stride=4, d_model=8, n_heads=2, n_layers=1, d_ff=8,
                     key=jax.random.key(0))  # fmt: skip
    tess = ts.TESSForecaster(bb, ts.V2, key=jax.random.key(1), gate_width=8)
    x = r.normal(size=(n, L, 1)).astype(np.float32)
    y = r.normal(size=(n, H, 1)).astype(np.float32)
    ids = np.stack([r.integers(0, s, n) for s in ts.V2.sizes], 1).astype(np.int32)
    good = r.random((n, 4)) < 0.5
    conf = np.where(
        good[..., None],
        np.asarray([8.29, 1.0, 1.0, 0.01], np.float32),
        np.asarray([0.0, 0.5, 1.0, 0.69], np.float32),
    ).astype(np.float32)
    batch = ts.TESSBatch(x, y, ids, conf, good.astype(np.int32))
    for bal in (False, True):
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam count is int32
            m, _ = ts.fit_forecaster(
                tess, batch, key=jax.random.key(4), optimizer=optax.adam(1e-2), steps=150,
                batch_size=32, lambda_gate=1.0, balanced_gate=bal,
            )  # fmt: skip
        g = np.asarray(jax.nn.sigmoid(ts.tess_forecast(m, x, ids, conf).gate_logits))
        assert g[good].mean() > 0.9 and g[~good].mean() < 0.2, (bal, g[good].mean())
