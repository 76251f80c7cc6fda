"""PST's DPC-KNN token compressor: spec §3.4 oracle 7 and a float64 NumPy transcription.

Oracles: well-separated Gaussian blobs are recovered exactly (adjusted Rand index 1, i.e.
the clusters are the blobs up to relabelling); the clustering equals a per-token loop
transcription of the spec's rule in float64 (written here, not calling the code under
test); merging preserves the weighted mean of each cluster and of the whole sequence.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval


def _dpc_numpy(x, mask, n_centers, k):
    """The spec's rule, token by token in float64 (ties: the earlier token is denser)."""
    x = np.asarray(x, np.float64)
    n, d = x.shape
    idx = [i for i in range(n) if mask[i]]
    dist2 = {(i, j): float(np.sum((x[i] - x[j]) ** 2)) / d for i in idx for j in idx}
    rho = {}
    for i in idx:
        near = sorted(dist2[i, j] for j in idx)[:k]
        rho[i] = np.exp(-np.mean(near))
    far = max(np.sqrt(v) for v in dist2.values())
    score = {}
    for i in idx:
        denser = [j for j in idx if rho[j] > rho[i] or (rho[j] == rho[i] and j < i)]
        delta = min((np.sqrt(dist2[i, j]) for j in denser), default=far)
        score[i] = rho[i] * delta
    centers = sorted(sorted(idx, key=lambda i: (-score[i], i))[:n_centers])
    assign = np.full(n, -1)
    for i in idx:
        assign[i] = (
            centers.index(i) if i in centers else int(np.argmin([dist2[i, c] for c in centers]))
        )
    return assign, centers


def _blobs(rng, n_blobs, n, d, spread=0.2):
    centres = rng.normal(size=(n_blobs, d)) * 6.0
    labels = np.concatenate([np.arange(n_blobs), rng.integers(0, n_blobs, n - n_blobs)])
    labels = rng.permutation(labels)
    return (centres[labels] + spread * rng.normal(size=(n, d))).astype(np.float32), labels


def _same_partition(a, b):
    """Adjusted Rand index 1: each cluster of ``a`` is exactly one cluster of ``b``."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_dpc_knn_recovers_separated_blobs():
    """Spec §3.4 oracle 7: blobs are found exactly, batched and with padding."""
    rng = np.random.default_rng(0)
    xs, labels, masks = [], [], []
    for n_valid in (40, 33, 26):
        x, lab = _blobs(rng, 5, n_valid, 16)
        pad = 40 - n_valid
        xs.append(np.concatenate([x, np.full((pad, 16), 1e3, np.float32)]))  # far padding
        labels.append(lab)
        masks.append(np.arange(40) < n_valid)
    cl = retrieval.dpc_knn(jnp.asarray(np.stack(xs)), jnp.asarray(np.stack(masks)), n_centers=5)
    for b, lab in enumerate(labels):
        got = np.asarray(cl.assign[b])
        assert _same_partition(got[: len(lab)], lab)
        assert np.all(got[len(lab) :] == -1)
        assert np.all(np.asarray(cl.valid[b]))
        c = np.asarray(cl.centers[b])
        assert np.all(np.diff(c) > 0) and np.all(got[c] == np.arange(5))


def test_dpc_knn_equals_float64_transcription():
    rng = np.random.default_rng(1)
    for trial in range(4):
        x = rng.normal(size=(23, 6))
        mask = rng.random(23) < 0.8
        mask[:2] = True
        k = (1, 3, 5, 30)[trial]
        want_assign, want_centers = _dpc_numpy(x, mask, 6, k)
        with jax.enable_x64(True):
            cl = retrieval.dpc_knn(jnp.asarray(x), jnp.asarray(mask), n_centers=6, k=k)
        n_valid = int(mask.sum())
        centers = np.asarray(cl.centers)
        np.testing.assert_array_equal(centers[: min(6, n_valid)], want_centers)
        np.testing.assert_array_equal(np.asarray(cl.assign), want_assign)


def test_dpc_knn_few_tokens_ties_and_padding():
    # fewer valid tokens than slots: the last slots are empty
    x = jnp.arange(12.0).reshape(6, 2)
    cl = retrieval.dpc_knn(x, jnp.arange(6) < 2, n_centers=4)
    assert cl.valid.tolist() == [True, True, False, False]
    assert cl.centers.tolist() == [0, 1, -1, -1]
    assert cl.assign.tolist() == [0, 1, -1, -1, -1, -1]
    # identical tokens: the earlier one is denser, so one centre per distinct value
    dup = jnp.array([[1.0], [1.0], [1.0], [9.0], [9.0]])
    assert retrieval.dpc_knn(dup, n_centers=2, k=2).assign.tolist() == [0, 0, 0, 1, 1]
    # far-apart tokens: every density exp(-200) underflows in float32, the rule's order
    # (computed in log space) still finds one centre per group (it found two in the first)
    far = jnp.array([[0.0], [20.0], [40.0], [1e4], [1e4 + 20], [1e4 + 40]])
    assert retrieval.dpc_knn(far, n_centers=2, k=2).assign.tolist() == [0, 0, 0, 1, 1, 1]
    # padding may hold anything (NaN included): the result equals the truncated input
    rng = np.random.default_rng(2)
    x, _ = _blobs(rng, 3, 12, 4)
    full = np.concatenate([x, np.full((4, 4), np.nan, np.float32)])
    a = retrieval.dpc_knn(jnp.asarray(full), jnp.arange(16) < 12, n_centers=3)
    b = retrieval.dpc_knn(jnp.asarray(x), n_centers=3)
    np.testing.assert_array_equal(np.asarray(a.assign[:12]), np.asarray(b.assign))
    np.testing.assert_array_equal(np.asarray(a.centers), np.asarray(b.centers))


def test_merge_preserves_weighted_means():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 15, 5)).astype(np.float32)
    assign = rng.integers(-1, 4, size=(2, 15))
    assign[:, :3] = [0, 1, 2]  # slot 3 may be empty
    assign[1, assign[1] == 3] = 2
    lw = rng.normal(size=(2, 15)).astype(np.float32) * 2
    x[assign == -1] = np.nan  # tokens outside every cluster never leak
    got = np.asarray(retrieval.merge_tokens(x, jnp.asarray(assign), lw, n_centers=4))
    w = np.exp(lw.astype(np.float64))
    for b in range(2):
        for c in range(4):
            sel = assign[b] == c
            if not sel.any():
                np.testing.assert_array_equal(got[b, c], 0.0)
                continue
            want = (w[b, sel, None] * x[b, sel]).sum(0) / w[b, sel].sum()
            np.testing.assert_allclose(got[b, c], want, rtol=2e-5, atol=2e-6)
        # the whole sequence's weighted mean is the cluster-weight-weighted mean of merges
        inside = assign[b] >= 0
        tot = np.array([w[b, assign[b] == c].sum() for c in range(4)])
        np.testing.assert_allclose(
            (tot[:, None] * got[b]).sum(0),
            (w[b, inside, None] * x[b, inside]).sum(0),
            rtol=2e-5,
            atol=2e-5,
        )
    big = retrieval.merge_tokens(x[0], jnp.asarray(assign[0]), lw[0] + 500.0, n_centers=4)
    np.testing.assert_allclose(np.asarray(big), got[0], rtol=2e-5, atol=2e-6)  # no overflow


def test_compress_bad_inputs():
    x = jnp.zeros((6, 2))
    with pytest.raises(ValueError, match="n_centers"):
        retrieval.dpc_knn(x, n_centers=7)
    with pytest.raises(ValueError, match="k"):
        retrieval.dpc_knn(x, n_centers=2, k=0)
    with pytest.raises(TypeError, match="mask"):
        retrieval.dpc_knn(x, jnp.ones(6), n_centers=2)
    with pytest.raises(TypeError, match="x"):
        retrieval.dpc_knn(jnp.zeros((6, 2), jnp.int32), n_centers=2)
    bad = x.at[1, 0].set(jnp.nan)
    with pytest.raises(ValueError, match="non-finite"):
        retrieval.dpc_knn(bad, n_centers=2)
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(jax.jit(lambda v: retrieval.dpc_knn(v, n_centers=2).assign)(bad))
    with pytest.raises(ValueError, match="assign"):
        retrieval.merge_tokens(x, jnp.array([0, 1, 2, 0, 0, 0]), n_centers=2)
    with pytest.raises(TypeError, match="assign"):
        retrieval.merge_tokens(x, jnp.zeros(6), n_centers=2)
    with pytest.raises(ValueError, match="log_weight"):
        retrieval.merge_tokens(x, jnp.zeros(6, int), jnp.full(6, jnp.inf), n_centers=2)


@pytest.mark.slow  # ~3 s of compile; the clustering and merge oracles above stay default
def test_token_compressor_masks_batches_and_grads():
    key = jax.random.key(0)
    tc = retrieval.TokenCompressor(8, ratio=0.5, n_heads=2, key=key)
    x = jax.random.normal(jax.random.key(1), (3, 10, 8))
    mask = jnp.arange(10)[None, :] < jnp.array([[10], [7], [3]])
    junk = jnp.where(mask[..., None], x, 7.0)

    def loss(model, v):
        return jnp.sum(jax.vmap(model)(v, mask).tokens ** 2)

    @eqx.filter_jit
    def run(model, v):  # one program: batched, one by one, junk padding, both gradients
        ones = [model(v[b], mask[b]).tokens for b in range(3)]
        grads = eqx.filter_grad(loss)(model, v), jax.grad(lambda u: loss(model, u))(v)
        return jax.vmap(model)(v, mask), ones, jax.vmap(model)(junk, mask).tokens, grads

    out, ones, with_junk, (g_model, g_x) = run(tc, x)
    assert out.tokens.shape == (3, 5, 8) and out.mask.sum(-1).tolist() == [5, 5, 3]
    for b in range(3):  # vmap equals one sequence at a time
        np.testing.assert_allclose(np.asarray(ones[b]), np.asarray(out.tokens[b]), atol=2e-5)
    # the padding's content never matters, and no gradient reaches it
    np.testing.assert_allclose(np.asarray(with_junk), np.asarray(out.tokens), atol=1e-5)
    assert np.all(np.asarray(g_x)[~np.asarray(mask)] == 0.0)
    assert float(jnp.abs(g_model.score.weight).sum()) > 0  # the merge weights learn
    assert all(bool(jnp.all(jnp.isfinite(a))) for a in jax.tree.leaves(g_model))
    with pytest.raises(ValueError, match="ratio"):
        retrieval.TokenCompressor(8, ratio=0.0, key=key)
    with pytest.raises(ValueError, match="kernel"):
        retrieval.TokenCompressor(8, kernel=2, key=key)
    with pytest.raises(ValueError, match="n_heads"):
        retrieval.TokenCompressor(6, n_heads=4, key=key)
    with pytest.raises(TypeError, match="x"):
        tc(jnp.zeros((4, 6)))
    # a fixed slot count (a model's set number of segment tokens): exactly that many
    fixed = tc(x[0], n_centers=4)
    assert fixed.tokens.shape == (4, 8) and bool(fixed.mask.all())
    assert set(np.asarray(fixed.assign).tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="n_centers"):
        tc(x[0], n_centers=11)
    with pytest.raises(TypeError, match="n_centers"):
        tc(x[0], n_centers=2.0)
