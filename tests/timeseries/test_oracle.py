"""Oracle labels on constructed windows, train-only thresholds, bad input (spec §4.4 1-2)."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import timeseries as ts

H = 24
T = np.arange(H, dtype=np.float32)
RNG = np.random.default_rng(0)
HIST = RNG.normal(size=48).astype(np.float32)
TH = ts.Thresholds(jnp.asarray([0.5, 1.5]), jnp.asarray([0.2, 0.8]))


def _labels(futs, schema):
    futs = np.asarray(futs, np.float32)
    hist = np.broadcast_to(HIST, (len(futs), HIST.size))
    return np.asarray(ts.oracle_labels(hist, futs, TH, schema=schema))


def test_constructed_windows_v2_and_legacy():
    m, s = HIST.mean(), HIST.std()
    noise = RNG.normal(size=H).astype(np.float32) * s
    futs = [
        HIST[-H:] + 3.0 * s,  # strong rise
        HIST[-H:] - 1.0 * s,  # mild drop
        m + noise * 0.01,  # volatility collapse, stable mean
        m + noise * 4.0,  # volatility up
        m + 0.1 * T,  # ramp
        m + np.abs(T - 11.5),  # V
        m - np.abs(T - 11.5),  # Λ
        m + np.sin(2 * np.pi * 3 * T / H),  # 3 periods
        np.where(T == H - 1, m + 10 * s, m),  # spike at t = H-1
        m - 0.1 * T,  # descending ramp
    ]
    v2 = _labels(futs, ts.V2)
    shift, vol, shape, lag = v2.T
    assert shift[0] == 0 and shift[1] == 3  # STRONG-RISE, MILD-DROP
    assert vol[2] == 4 and vol[3] == 0  # STRONG-DROP, STRONG-RISE of volatility
    assert list(shape[4:8]) == [0, 3, 2, 4] and shape[9] == 1  # ASCEND TROUGH PEAK OSC DESCEND
    assert lag[8] == 4  # LATE
    legacy = _labels(futs, ts.LEGACY_V1)
    assert legacy[2, 1] == 2 and legacy[3, 1] == 0  # Low, High
    assert list(legacy[4:8, 2]) == [0, 3, 2, 4]  # Rise Recover Peak Oscillate
    assert legacy[8, 3] == 1  # LATE -> Delayed


def test_short_window_turning_points():
    h = np.broadcast_to(HIST, (4, HIST.size))
    f = np.asarray([[0, 1, 2, 3, 4], [0, 2, 4, 2, 0], [4, 2, 0, 2, 4], [0, 2, 0, 2, 0]], np.float32)
    lab = np.asarray(ts.oracle_labels(h, f, TH, schema=ts.V2))[:, 2]
    assert list(lab) == [0, 2, 3, 4]


def _windows(n, seed):
    r = np.random.default_rng(seed)
    hist = r.normal(size=(n, 16)).astype(np.float32)
    fut = (r.normal(size=(n, 8)) * r.uniform(0.3, 3, (n, 1)) + r.normal(size=(n, 1))).astype(
        np.float32
    )
    return hist, fut


@pytest.mark.parametrize("schema", [ts.V2, ts.LEGACY_V1])
def test_thresholds_use_train_only_and_hit_quantiles(schema):
    hist, fut = _windows(400, 1)
    train = np.arange(400) < 300
    th = ts.fit_thresholds(hist, fut, schema=schema, train=train)
    # no leak: changing (or appending) non-train windows leaves the thresholds unchanged
    hist2, fut2 = hist.copy(), fut.copy()
    fut2[300:] *= 50.0
    th2 = ts.fit_thresholds(hist2, fut2, schema=schema, train=train)
    np.testing.assert_array_equal(th.shift, th2.shift)
    np.testing.assert_array_equal(th.volatility, th2.volatility)
    th3 = ts.fit_thresholds(hist[:300], fut[:300], schema=schema)
    np.testing.assert_array_equal(th.shift, th3.shift)
    # label fractions on train match the configured quantiles (±1%)
    lab = np.asarray(ts.oracle_labels(hist[:300], fut[:300], th, schema=schema))
    assert abs(np.mean(lab[:, 0] == 2) - 0.25) <= 0.01  # STABLE: |Δμ| below the 0.25 quantile
    strong = np.isin(lab[:, 0], (0, 4))
    assert abs(np.mean(strong) - 0.25) <= 0.01
    if schema is ts.LEGACY_V1:
        assert abs(np.mean(lab[:, 1] == 2) - 0.33) <= 0.01  # Low
        assert abs(np.mean(lab[:, 1] == 0) - 0.34) <= 0.01  # High


def test_scores_closed_form():
    hist, fut = _windows(5, 2)
    sc = ts.primitive_scores(hist, fut)
    want = (fut.mean(1) - hist.mean(1)) / (hist.std(1) + 1e-5)
    np.testing.assert_allclose(sc.shift, want, rtol=1e-5)
    np.testing.assert_allclose(
        sc.volatility, np.log((fut.std(1) + 1e-5) / (hist.std(1) + 1e-5)), rtol=1e-5, atol=1e-6
    )


def test_bad_inputs():
    hist, fut = _windows(4, 3)
    bad = fut.copy()
    bad[1, 3] = np.inf
    with pytest.raises(ValueError, match="`fut`"):
        ts.oracle_labels(hist, bad, TH, schema=ts.V2)
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match="`fut`"):
        ts.fit_thresholds(hist, bad, schema=ts.V2)
    with pytest.raises(TypeError, match="hist"):
        ts.oracle_labels(hist[0], fut, TH, schema=ts.V2)
    with pytest.raises(ValueError, match="`train`"):
        ts.fit_thresholds(hist, fut, schema=ts.V2, train=np.zeros(4, bool))
    with pytest.raises(ValueError, match="shift_quantiles"):
        ts.fit_thresholds(hist, fut, schema=ts.V2, shift_quantiles=(0.8, 0.2))
    with pytest.raises(TypeError, match="schema"):
        ts.oracle_labels(hist, fut, TH, schema="v2")
