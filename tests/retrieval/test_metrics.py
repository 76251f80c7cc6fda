"""Retrieval metrics and TMR protocols against brute-force definitions (spec 3.4 oracle 6)."""

import jax
import numpy as np
import pytest

from jaxkit import retrieval


def _brute_rank(row, correct):
    """Average position of the best correct score among the row sorted descending."""
    best = max(row[j] for j in correct)
    order = sorted(range(len(row)), key=lambda j: -row[j])
    pos = [p for p, j in enumerate(order) if row[j] == best]
    return sum(pos) / len(pos)


def _brute(sims, correct_sets):
    ranks = np.array([_brute_rank(sims[i], correct_sets[i]) for i in range(len(sims))])
    out = {f"R{k:02d}": 100 * np.mean(ranks < k) for k in (1, 2, 3, 5, 10)}
    out["MedR"] = np.median(ranks) + 1
    return out


def _check(got, prefix, want):
    for k, v in want.items():
        assert abs(got[f"{prefix}/{k}"] - v) < 1e-9, (prefix, k, got[f"{prefix}/{k}"], v)


def test_identity_and_reversed():
    m = retrieval.retrieval_metrics(np.eye(7))
    assert m["t2m/R01"] == 100.0 and m["t2m/MedR"] == 1.0 and m["m2t/MedR"] == 1.0
    n = 12
    m = retrieval.retrieval_metrics(
        1.0 - np.eye(n) + 0.01 * np.random.default_rng(0).random((n, n))
    )
    assert m["t2m/MedR"] == n and m["m2t/MedR"] == n and m["t2m/R10"] == 0.0


def test_ties_averaged_like_brute_force():
    rng = np.random.default_rng(1)
    sims = rng.integers(0, 3, (15, 15)).astype(np.float64)  # many ties
    m = retrieval.retrieval_metrics(sims)
    _check(m, "t2m", _brute(sims, [[i] for i in range(15)]))
    _check(m, "m2t", _brute(sims.T, [[i] for i in range(15)]))
    opt = retrieval.retrieval_metrics(sims, break_ties="optimistic")
    assert opt["t2m/R01"] >= m["t2m/R01"]


def test_threshold_protocol_equals_definition():
    rng = np.random.default_rng(2)
    n = 20
    sims = rng.normal(size=(n, n))
    e = rng.normal(size=(n, 3))
    e[5] = e[3]  # near-duplicate captions
    e[9] = e[3] + 1e-3
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    selfsim = e @ e.T
    thr = 0.95
    sets = [[j for j in range(n) if selfsim[i, j] >= 2 * thr - 1 or j == i] for i in range(n)]
    m = retrieval.protocol_metrics(sims, "threshold", text_selfsim=selfsim, threshold=thr)
    _check(m, "t2m", _brute(sims, sets))
    sets_t = [[j for j in range(n) if selfsim[j, i] >= 2 * thr - 1 or j == i] for i in range(n)]
    _check(m, "m2t", _brute(sims.T, sets_t))
    assert any(len(s) > 1 for s in sets)


def test_guo_and_nsim_protocols():
    rng = np.random.default_rng(3)
    n = 70
    sims = rng.normal(size=(n, n)) + 2 * np.eye(n)
    key = jax.random.key(4)
    m = retrieval.protocol_metrics(sims, "guo", key=key, batch_size=32)
    perm = np.asarray(jax.random.permutation(key, n))
    parts = [retrieval.retrieval_metrics(sims[np.ix_(c, c)]) for c in (perm[:32], perm[32:64])]
    for k in m:
        assert abs(m[k] - np.mean([p[k] for p in parts])) < 1e-12
    e = rng.normal(size=(n, 4))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    selfsim = e @ e.T
    idx = retrieval.dissimilar_subset(selfsim, size=10, threshold=0.9)
    sub = selfsim[np.ix_(idx, idx)]
    assert np.all(sub[~np.eye(len(idx), dtype=bool)] < 2 * 0.9 - 1)
    m = retrieval.protocol_metrics(sims, "nsim", nsim_indices=idx)
    assert m == retrieval.retrieval_metrics(sims[np.ix_(idx, idx)])
    assert m["t2m/len"] == len(idx)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"sims": np.zeros((3, 4))}, TypeError, "sims"),
        ({"sims": np.full((3, 3), np.nan)}, ValueError, "sims"),
        ({"sims": np.eye(3), "protocol": "bogus"}, ValueError, "protocol"),
        ({"sims": np.eye(3), "protocol": "threshold"}, ValueError, "text_selfsim"),
        ({"sims": np.eye(3), "protocol": "nsim"}, ValueError, "nsim_indices"),
        ({"sims": np.eye(3), "protocol": "guo", "key": 3}, TypeError, "key"),
        (
            {"sims": np.eye(3), "protocol": "guo", "key": jax.random.key(0)},
            ValueError,
            "batch_size",
        ),
    ],
)
def test_bad_inputs(kwargs, error, match):
    with pytest.raises(error, match=match):
        retrieval.protocol_metrics(**kwargs)
