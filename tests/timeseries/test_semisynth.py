"""Semi-synthetic events, rendered text, windows and the no-leak property (spec §4.4 7)."""

import jax
import numpy as np
import pytest

from jaxkit import timeseries as ts

RNG = np.random.default_rng(0)


def test_sliding_windows_and_bad_series():
    s = np.arange(20, dtype=np.float32)
    h, f = ts.sliding_windows(s, 5, 3, stride=2)
    assert h.shape == (7, 5) and f.shape == (7, 3)
    np.testing.assert_array_equal(f[2], [9, 10, 11])
    with pytest.raises(ValueError, match="`series`.*shorter"):
        ts.sliding_windows(s[:7], 5, 3)
    s[4] = np.inf  # a non-finite spike
    with pytest.raises(ValueError, match="`series`"):
        ts.sliding_windows(s, 5, 3)


def test_inject_event_closed_form():
    hist = RNG.normal(size=(2, 16)).astype(np.float32)
    fut = RNG.normal(size=(2, 8)).astype(np.float32)
    lab = np.asarray([[0, 2, 2, 5], [4, 2, 0, 5]], np.int32)  # STABLE vol, DIFFUSE envelope
    out = np.asarray(ts.inject_event(hist, fut, lab, strength=0.5))
    t = np.linspace(0, 1, 8)
    tri = 1 - np.abs(2 * t - 1)
    sd = hist.std(1) + 1e-5
    want0 = fut[0] + 0.5 * sd[0] * 0.6 * (2.5 + 1.5 * tri)  # STRONG-RISE, PEAK
    want1 = fut[1] + 0.5 * sd[1] * 0.6 * (-2.5 + 1.5 * t)  # STRONG-DROP, ASCEND
    np.testing.assert_allclose(out, np.stack([want0, want1]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ts.inject_event(hist, fut, lab, strength=0.0), fut, atol=1e-6)
    with pytest.raises(ValueError, match="unknown primitive label"):
        ts.inject_event(hist, fut, lab + 5)
    with pytest.raises(ValueError, match="strength"):
        ts.inject_event(hist, fut, lab, strength=float("nan"))


def test_rendered_text_round_trips_through_the_rule_extractor():
    rx = ts.RuleExtractor(ts.LEXICON_V2)
    for _ in range(20):
        lab = np.asarray([RNG.integers(s) for s in ts.V2.sizes])
        text = ts.render_text(lab, rng=RNG, n_distractors=3)
        e = rx(text, None, ts.V2)
        np.testing.assert_array_equal(e.label_ids, lab)
        assert np.all(e.margin > 6.9) and np.all(e.parse_rate == 1)
        noisy = ts.render_text(lab, rng=RNG, noisy=np.ones(4, bool), conflict=1.0)
        en = rx(noisy, None, ts.V2)
        assert np.all(en.label_ids != lab) and np.all(en.margin == 0)


def test_no_leak_model_inputs_ignore_the_future():
    s = (np.sin(np.arange(60) / 3.0) + RNG.normal(size=60) * 0.1).astype(np.float32)
    s2 = s.copy()
    s2[-4:] += 100.0  # the last window's future only
    kw = dict(key=jax.random.key(0), context_len=12, horizon=4, stride=4)
    a, b = ts.make_semisynthetic(s, **kw), ts.make_semisynthetic(s2, **kw)
    rx = ts.RuleExtractor(ts.LEXICON_V2)
    np.testing.assert_array_equal(a.hist, b.hist)
    assert a.texts == b.texts  # the text is rendered from the labels, never from values
    ia, ca = ts.confidence_features([rx(t, h, ts.V2) for t, h in zip(a.texts, a.hist, strict=True)])
    ib, cb = ts.confidence_features([rx(t, h, ts.V2) for t, h in zip(b.texts, b.hist, strict=True)])
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(ca, cb)
    assert not np.array_equal(a.fut[-1], b.fut[-1])
    assert a.event.dtype == bool and a.labels.shape == (len(a.hist), 4)


def test_audit_render_text_labels_of_the_wrong_length():
    # wave-24 audit: was an IndexError from inside the loop
    with pytest.raises(TypeError, match="labels"):
        ts.render_text(np.zeros(2, np.int64), rng=np.random.default_rng(0))
