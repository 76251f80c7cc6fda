"""MTS feature oracles: brute-force numpy versions of each feature."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import data


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_features_match_brute_force():
    rng = np.random.default_rng(0)
    n, m, d, c = 9, 12, 4, 3
    emb, ref = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    y, ry = rng.integers(0, c, n), np.arange(m) % c
    logits = rng.normal(size=(n, c))
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    # EL2N
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    want = np.linalg.norm(p - np.eye(c)[y], axis=1)
    np.testing.assert_allclose(np.asarray(data.el2n(f32(logits), jnp.asarray(y))), want,
                               rtol=1e-5)  # fmt: skip
    # cosine to the reference class centre (mean of unit rows)
    u, ur = _unit(emb), _unit(ref)
    cen = np.stack([ur[ry == k].mean(0) for k in range(c)])
    want = np.array([u[i] @ cen[y[i]] / np.linalg.norm(cen[y[i]]) for i in range(n)])
    got = data.center_cosine(f32(emb), jnp.asarray(y), f32(ref), jnp.asarray(ry), num_classes=c)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # top-3 cosines, self excluded on the reference set itself
    s = ur @ ur.T
    np.fill_diagonal(s, -np.inf)
    want = -np.sort(-s, axis=1)[:, :3]
    got = data.nearest_cosines(f32(ref), f32(ref), k=3, exclude_self=True)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # similarity-weighted kNN label agreement
    nn_idx = np.argsort(-s, axis=1)[:, :5]
    want = []
    for i in range(m):
        v = (1 + s[i, nn_idx[i]]) / 2
        want.append(np.sum(v * (ry[nn_idx[i]] == ry[i])) / np.sum(v))
    got = data.knn_label_agreement(f32(ref), jnp.asarray(ry), f32(ref), jnp.asarray(ry), k=5,
                                   exclude_self=True)  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), np.array(want), rtol=1e-5)


def test_features_bad_inputs():
    e, y = jnp.ones((4, 3)), jnp.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="labels"):
        data.el2n(jnp.ones((4, 2)), jnp.array([0, 1, 2, 0]))
    with pytest.raises(ValueError, match="ref_labels"):
        data.center_cosine(e, jnp.array([0, 1, 2, 0]), e, y, num_classes=3)
    for bad in ([0, 1, 0, 5], [0, 1, -1, 1]):  # were left out of every centre (wave 25)
        with pytest.raises(ValueError, match="`ref_labels`"):
            data.center_cosine(e, y, e, np.array(bad), num_classes=2)
    with pytest.raises(ValueError, match="`k`"):
        data.nearest_cosines(e, e, k=4, exclude_self=True)
    with pytest.raises(TypeError, match="ref_emb"):
        data.knn_label_agreement(e, y, jnp.ones((4, 2)), y, k=2)
    with pytest.raises(TypeError, match="labels"):
        data.knn_label_agreement(e, jnp.ones(4), e, y, k=2)
