"""HOBIT oracles (spec training.md section 3.4): submodularity, greedy bound, dense
reference, plain-Python greedy (apricot-select in the slow tier), permutation validity,
zero contradictions, bad inputs."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import data


def _emb(n, dim, seed, noise=0.5):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, dim))
    d = q + noise * rng.normal(size=(n, dim))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return q.astype(np.float32), d.astype(np.float32)


def _dense_w(q, d, tau, margin, dup=None, symmetric=True):
    """Reference filtered weights from the full n x n matrix (float64 numpy)."""
    s = q.astype(np.float64) @ d.T.astype(np.float64)
    diag = np.diag(s)
    n = len(q)
    dup = np.arange(n) if dup is None else dup
    bad = (s >= diag[:, None] - margin) | (dup[:, None] == dup[None, :])
    if symmetric:
        bad = bad | bad.T  # either direction filters both weights (a shared batch has both)
    return np.where(bad, 0.0, np.exp((s - diag[:, None]) / tau)), bad


def _F(wd, s, feats=None):
    feats = np.arange(len(wd)) if feats is None else feats
    return float(np.sum(np.log1p(wd[np.ix_(feats, list(s))].sum(axis=1)))) if s else 0.0


def test_knn_graph_matches_dense_reference():
    q, d = _emb(40, 6, 0)
    tau, margin, k = 0.2, 0.1, 5
    dup = np.arange(40) // 2  # pairs of duplicates
    g = data.knn_graph(jnp.asarray(q), jnp.asarray(d), k=k, tau=tau, margin=margin,
                       dup_ids=jnp.asarray(dup), block=16)  # fmt: skip
    wd, bad = _dense_w(q, d, tau, margin, dup)
    score = np.where(bad, -1.0, wd + wd.T)
    nbr, w = np.asarray(g.nbr), np.asarray(g.w)
    for i in range(40):
        want = np.argsort(-score[i], kind="stable")[:k]
        assert set(nbr[i]) == set(want)
        np.testing.assert_allclose(w[i], wd[i, nbr[i]], rtol=2e-4, atol=1e-7)
        assert not np.any(bad[i, nbr[i]] | bad[nbr[i], i])  # no false negative is a neighbour


def test_knn_graph_per_direction_matches_dense_reference():
    """``symmetric=False``: ``w_ij = 0`` iff ``q_i`` scores ``d_j`` within the margin of its
    own positive (spec 3.2); a pair filtered one way keeps the other weight."""
    q, d = _emb(40, 6, 0)
    tau, margin, k = 0.2, 0.1, 5
    dup = np.arange(40) // 2
    g = data.knn_graph(jnp.asarray(q), jnp.asarray(d), k=k, tau=tau, margin=margin,
                       dup_ids=jnp.asarray(dup), block=16, symmetric=False)  # fmt: skip
    wd, bad = _dense_w(q, d, tau, margin, dup, symmetric=False)
    score = np.where(bad & bad.T, -1.0, wd + wd.T)
    nbr, w = np.asarray(g.nbr), np.asarray(g.w)
    one_way = 0
    for i in range(40):
        assert set(nbr[i]) == set(np.argsort(-score[i], kind="stable")[:k])
        np.testing.assert_allclose(w[i], wd[i, nbr[i]], rtol=2e-4, atol=1e-7)
        assert not np.any(bad[i, nbr[i]] & bad[nbr[i], i])
        one_way += int(np.sum(~bad[i, nbr[i]] & bad[nbr[i], i] & (w[i] > 0)))
    assert one_way > 0  # filtered for the other query only: this direction keeps its weight
    with pytest.raises(TypeError, match="symmetric"):
        data.knn_graph(jnp.asarray(q), jnp.asarray(d), k=k, symmetric=1)


def test_objective_equals_dense_and_is_monotone_submodular():
    n = 8
    q, d = _emb(n, 3, 1, noise=1.0)
    tau, margin = 0.5, 0.05
    g = data.knn_graph(jnp.asarray(q), jnp.asarray(d), k=n - 1, tau=tau, margin=margin)
    wd, _ = _dense_w(q, d, tau, margin)
    assert wd.sum() > 0
    f = {}
    for r in range(0, 5):
        for s in itertools.combinations(range(n), r):
            f[s] = float(data.hobit_objective(jnp.asarray(s, jnp.int32), g)) if s else 0.0
            np.testing.assert_allclose(f[s], _F(wd, s), rtol=1e-4, atol=1e-6)
    pool = jnp.asarray([0, 2, 5], jnp.int32)
    got = float(data.hobit_objective(jnp.asarray([1, 3], jnp.int32), g, pool))
    np.testing.assert_allclose(got, _F(wd, (1, 3), [0, 2, 5]), rtol=1e-4, atol=1e-6)
    for t in (s for s in f if len(s) <= 3):
        for s in (s for s in f if set(s) <= set(t)):
            for x in set(range(n)) - set(t):
                gs = f[tuple(sorted((*s, x)))] - f[s]
                gt = f[tuple(sorted((*t, x)))] - f[t]
                assert gs >= -1e-5  # monotone
                assert gs >= gt - 1e-4  # diminishing returns


def _py_greedy(w, size):
    """Plain-Python naive greedy oracle (ties: lowest index), independent of jaxkit."""
    cover = np.zeros(w.shape[0])
    sel = []
    for _ in range(size):
        best, bg = None, -np.inf
        for j in range(w.shape[1]):
            if j in sel:
                continue
            gj = np.sum(np.log1p(cover + w[:, j]) - np.log1p(cover))
            if gj > bg:
                best, bg = j, gj
        sel.append(best)
        cover += w[:, best]
    return sel


@pytest.mark.parametrize("seed", range(6))
def test_greedy_bound_and_python_greedy(seed):
    rng = np.random.default_rng(seed)
    nf, ni, size = 10, 12, 4
    w = rng.exponential(size=(nf, ni)) * (rng.random((nf, ni)) < 0.4)
    sel, gains = data.greedy_select(jnp.asarray(w, jnp.float32), size)
    sel = list(np.asarray(sel))
    assert sel == _py_greedy(w, size)
    val = float(np.sum(np.log1p(w[:, sel].sum(1))))
    np.testing.assert_allclose(float(np.sum(gains)), val, rtol=1e-5)
    opt = max(float(np.sum(np.log1p(w[:, list(s)].sum(1))))
              for s in itertools.combinations(range(ni), size))  # fmt: skip
    assert val >= (1 - 1 / np.e) * opt - 1e-9
    assert val <= opt + 1e-5


@pytest.mark.slow
def test_greedy_equals_apricot():
    apricot = pytest.importorskip("apricot")  # in the `test` extra
    for seed in range(3):
        rng = np.random.default_rng(seed)
        w = rng.exponential(size=(30, 40)) * (rng.random((30, 40)) < 0.3)
        ref = apricot.FeatureBasedSelection(8, concave_func="log", optimizer="naive").fit(w.T)
        sel, gains = data.greedy_select(jnp.asarray(w, jnp.float32), 8)
        assert list(np.asarray(sel)) == list(ref.ranking)
        np.testing.assert_allclose(np.asarray(gains), ref.gains, rtol=1e-4)


def _contradictions(perm, q, d, margin, bsz, dup=None, mask=None):
    s = q.astype(np.float64) @ d.T.astype(np.float64)
    diag = np.diag(s)
    dup = np.arange(len(q)) if dup is None else dup
    mask = np.ones(len(perm), bool) if mask is None else mask
    bad = 0
    for b, m in zip(np.asarray(perm).reshape(-1, bsz), mask.reshape(-1, bsz), strict=True):
        b = b[m]
        c = (s[np.ix_(b, b)] >= diag[b][:, None] - margin) | (dup[b][:, None] == dup[b][None])
        np.fill_diagonal(c, False)
        bad += int(c.sum())
    return bad


def _inbatch_loss(perm, wd, bsz):
    return sum(_F(wd, tuple(b), b) for b in np.asarray(perm).reshape(-1, bsz))


def test_permutation_valid_hard_and_contradiction_free():
    n, bsz, tau, margin = 96, 8, 0.1, 0.1
    q, d = _emb(n, 8, 3, noise=0.3)
    dup = np.arange(n) // 3  # every group of 3 shares an answer: false negatives
    qj, dj, dupj = jnp.asarray(q), jnp.asarray(d), jnp.asarray(dup)
    g = data.knn_graph(qj, dj, k=8, tau=tau, margin=margin, dup_ids=dupj)
    wd, _ = _dense_w(q, d, tau, margin, dup)
    hard = data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=bsz, dup_ids=dupj)
    rand = data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=bsz, dup_ids=dupj,
                              hard_fraction=0.0)  # fmt: skip
    for r in (hard, rand):
        assert sorted(np.asarray(r.perm).tolist()) == list(range(n))
    assert not np.any(np.asarray(rand.greedy))
    greedy = np.asarray(hard.greedy)
    assert greedy.mean() > 0.5
    assert _contradictions(hard.perm, q, d, margin, bsz, dup, greedy) == 0
    assert _inbatch_loss(hard.perm, wd, bsz) > 1.5 * _inbatch_loss(rand.perm, wd, bsz)
    # quality against the sequential per-batch greedy (apricot-style, plain numpy)
    nbr, w = np.asarray(g.nbr), np.asarray(g.w, np.float64)
    ref = _sequential_epoch(nbr, w, bsz, 4 * bsz, np.random.default_rng(0))
    ours = _inbatch_sparse(np.asarray(hard.perm), nbr, w, bsz)
    assert ours >= 0.97 * _inbatch_sparse(ref, nbr, w, bsz)
    half = data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=bsz, dup_ids=dupj,
                              hard_fraction=0.5)  # fmt: skip
    per_batch = np.asarray(half.greedy).reshape(-1, bsz).any(axis=1)
    assert per_batch.sum() == n // bsz // 2  # greedy batches = round(0.5 * 12)


def _sequential_epoch(nbr, w, bsz, p, rng):
    """Sequential reference: per batch a random free seed, its free 2-hop pool (``p``
    slots), naive greedy of ``sum_pool log1p(cover)`` to ``bsz`` items, random fill."""
    n = len(nbr)
    assigned = np.zeros(n, bool)
    batches = []
    for _ in range(n // bsz):
        s = int(rng.choice(np.flatnonzero(~assigned)))
        cand = np.concatenate([[s], nbr[s], nbr[nbr[s]].ravel()])
        _, first = np.unique(cand, return_index=True)
        cand = cand[np.sort(first)]
        pool = cand[~assigned[cand]][:p]
        m = np.zeros((len(pool), len(pool)))
        for a, i in enumerate(pool):
            for kk, j in enumerate(nbr[i]):
                m[a, pool == j] += w[i, kk]
        cover, chosen = np.zeros(len(pool)), []
        for _ in range(min(bsz, len(pool))):
            gain = np.sum(np.log1p(cover[:, None] + m) - np.log1p(cover)[:, None], axis=0)
            gain[chosen] = -np.inf
            c = int(np.argmax(gain))
            chosen.append(c)
            cover += m[:, c]
        assigned[pool[chosen]] = True
        batches.append(list(pool[chosen]))
    rest = list(rng.permutation(np.flatnonzero(~assigned)))
    for b in batches:
        while len(b) < bsz:
            b.append(rest.pop())
    return np.concatenate(batches)


def _inbatch_sparse(perm, nbr, w, bsz):
    return sum(float(np.sum(np.log1p(np.where(np.isin(nbr[b], b), w[b], 0.0).sum(1))))
               for b in perm.reshape(-1, bsz))  # fmt: skip


def test_batch_ground_builds_mutually_harder_batches():
    """``ground="batch"`` sums gains over the batch's own queries (plus the candidate's
    own): its batches carry more in-batch loss than the pool objective's, still valid
    and contradiction-free."""
    n, bsz, tau, margin = 96, 8, 0.1, 0.1
    q, d = _emb(n, 8, 3, noise=0.3)
    dup = np.arange(n) // 3
    qj, dj, dupj = jnp.asarray(q), jnp.asarray(d), jnp.asarray(dup)
    g = data.knn_graph(qj, dj, k=8, tau=tau, margin=margin, dup_ids=dupj)
    nbr, w = np.asarray(g.nbr), np.asarray(g.w, np.float64)
    loss = {}
    for ground in ("pool", "batch"):
        r = data.hobit_batches(g, qj, dj, key=jax.random.key(1), batch_size=bsz,
                               dup_ids=dupj, ground=ground)  # fmt: skip
        assert sorted(np.asarray(r.perm).tolist()) == list(range(n))
        greedy = np.asarray(r.greedy)
        assert _contradictions(r.perm, q, d, margin, bsz, dup, greedy) == 0
        loss[ground] = _inbatch_sparse(np.asarray(r.perm), nbr, w, bsz)
    assert loss["batch"] > 1.1 * loss["pool"], loss


def test_all_filtered_falls_back_to_uniform_fill():
    n, bsz = 96, 8  # the shapes of the test above: one compile for both
    q, d = _emb(n, 8, 4)
    qj, dj, dupj = jnp.asarray(q), jnp.asarray(d), jnp.arange(n)
    g = data.knn_graph(qj, dj, k=8, margin=jnp.inf)  # every pair filtered: F == 0
    assert float(jnp.abs(g.w).sum()) == 0.0
    co = np.zeros((n, n))
    reps = 80
    for i in range(reps):
        r = data.hobit_batches(g, qj, dj, key=jax.random.key(i), batch_size=bsz, margin=jnp.inf,
                               dup_ids=dupj)  # fmt: skip
        p = np.asarray(r.perm)
        assert sorted(p.tolist()) == list(range(n))
        assert np.asarray(r.greedy).sum() == n // bsz  # only the seeds
        for b in p.reshape(-1, bsz):
            co[np.ix_(b, b)] += 1
    off = co[~np.eye(n, dtype=bool)]
    expect = reps * (bsz - 1) / (n - 1)
    chi2 = np.sum((off - expect) ** 2 / expect) / 2  # each pair counted twice
    pairs = n * (n - 1) / 2  # each count ~ Binomial(reps, p): E[chi2] = pairs * (1 - p)
    mean = pairs * (1 - (bsz - 1) / (n - 1))
    assert abs(chi2 - mean) < 5 * np.sqrt(2 * pairs), (chi2, mean)


def test_bad_inputs():
    q, d = _emb(12, 4, 5)
    qj, dj = jnp.asarray(q), jnp.asarray(d)
    g = data.knn_graph(qj, dj, k=3)
    with pytest.raises(ValueError, match="`batch_size` must divide"):
        data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=5)
    with pytest.raises(ValueError, match="`margin`"):
        data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=4, margin=-0.1)
    with pytest.raises(ValueError, match="`margin`"):
        data.knn_graph(qj, dj, k=3, margin=-0.1)
    with pytest.raises(ValueError, match="`hard_fraction`"):
        data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=4, hard_fraction=1.5)
    with pytest.raises(ValueError, match="`k`"):
        data.knn_graph(qj, dj, k=12)
    with pytest.raises(TypeError, match="d"):
        data.knn_graph(qj, dj[:, :2], k=3)
    with pytest.raises(TypeError, match="key"):
        data.hobit_batches(g, qj, dj, key=0, batch_size=4)
    with pytest.raises(ValueError, match="`objective`"):
        data.greedy_select(jnp.ones((3, 4)), 2, objective="exp")
    with pytest.raises(ValueError, match="`size`"):
        data.greedy_select(jnp.ones((3, 4)), 5)
    with pytest.raises(ValueError, match="`ground`"):
        data.hobit_batches(g, qj, dj, key=jax.random.key(0), batch_size=4, ground="all")
    # a graph of the wrong shape or kind (before: an IndexError from inside the objective)
    batch = jnp.array([1, 4, 6])
    with pytest.raises(TypeError, match=r"`g.w` must have shape \(12, 3\)"):
        data.hobit_objective(batch, data.SparseHardness(g.nbr, g.w[:, 0]))
    with pytest.raises(TypeError, match="`g.nbr`"):
        data.hobit_objective(batch, data.SparseHardness(g.nbr.astype(jnp.float32), g.w))
    # (under the tests' jaxtyping hook its own check names `g` first)
    with pytest.raises(TypeError, match="`g` must be a SparseHardness|parameter 'g'"):
        data.hobit_objective(batch, (g.nbr, g.w))
    with pytest.raises(TypeError, match="`g.w`"):
        data.hobit_batches(g._replace(w=g.w[:, :2]), qj, dj, key=jax.random.key(0), batch_size=4)


def test_baselines_valid_and_behave():
    n, bsz = 48, 8
    rng = np.random.default_rng(6)
    centres = rng.normal(size=(n // bsz, 6)) * 10.0
    truth = np.repeat(np.arange(n // bsz), bsz)
    q = (centres[truth] + rng.normal(size=(n, 6))).astype(np.float32)
    key = jax.random.key(1)
    perms = {
        "random": data.random_batches(n, key=key, batch_size=bsz),
        "kmeans": data.kmeans_batches(jnp.asarray(q), key=key, batch_size=bsz, iters=20),
    }
    for p in perms.values():
        assert sorted(np.asarray(p).tolist()) == list(range(n))
    pure = [len(set(truth[b])) == 1 for b in np.asarray(perms["kmeans"]).reshape(-1, bsz)]
    assert np.mean(pure) == 1.0  # well-separated clusters of exactly one batch each
    rpure = [len(set(truth[b])) == 1 for b in np.asarray(perms["random"]).reshape(-1, bsz)]
    assert np.mean(rpure) == 0.0
    with pytest.raises(ValueError, match="`batch_size`"):
        data.random_batches(n, key=key, batch_size=7)
    with pytest.raises(ValueError, match="`batch_size`"):
        data.kmeans_batches(jnp.asarray(q), key=key, batch_size=5)


@pytest.mark.slow
def test_naive_nn_has_contradictions_hobit_none():
    n, bsz, tau, margin = 96, 8, 0.1, 0.1
    q, d = _emb(n, 8, 7, noise=0.3)
    dup = np.arange(n) // 3
    q[1::3] = q[0::3] + 0.05 * np.random.default_rng(0).normal(size=q[0::3].shape)  # paraphrases
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    qj, dj, dupj = jnp.asarray(q), jnp.asarray(d), jnp.asarray(dup)
    naive = data.nn_batches(qj, dj, key=jax.random.key(0), batch_size=bsz, k=8, tau=tau)
    assert sorted(np.asarray(naive).tolist()) == list(range(n))
    assert _contradictions(naive, q, d, margin, bsz, dup) > 0
    r = data.hobit_permutation(qj, dj, key=jax.random.key(0), batch_size=bsz, k=8, tau=tau,
                               margin=margin, dup_ids=dupj)  # fmt: skip
    assert _contradictions(r.perm, q, d, margin, bsz, dup, np.asarray(r.greedy)) == 0


def test_exclude_dup_keeps_duplicates_out_but_lets_margin_pairs_in():
    n, bsz, tau, margin = 96, 8, 0.1, 0.5  # wide margin: many true negatives inside it
    q, d = _emb(n, 8, 3, noise=0.3)
    dup = np.arange(n) // 3
    qj, dj, dupj = jnp.asarray(q), jnp.asarray(d), jnp.asarray(dup)
    g = data.knn_graph(qj, dj, k=8, tau=tau, margin=margin, dup_ids=dupj)
    kw = dict(key=jax.random.key(0), batch_size=bsz, margin=margin, dup_ids=dupj)
    strict = data.hobit_batches(g, qj, dj, **kw)
    loose = data.hobit_batches(g, qj, dj, exclude="dup", **kw)
    assert sorted(np.asarray(loose.perm).tolist()) == list(range(n))
    gl, gs = np.asarray(loose.greedy), np.asarray(strict.greedy)
    # duplicates never share a greedy batch in either mode ...
    assert _contradictions(loose.perm, q, d, -np.inf, bsz, dup, gl) == 0
    assert _contradictions(strict.perm, q, d, margin, bsz, dup, gs) == 0
    # ... margin pairs only under "dup", where the greedy also fills more slots
    assert _contradictions(loose.perm, q, d, margin, bsz, dup, gl) > 0
    assert gl.sum() > gs.sum()
    with pytest.raises(ValueError, match="exclude"):
        data.hobit_batches(g, qj, dj, exclude="none", **kw)
