"""lrRNN+ICA and LINT: exact reparameterisations of a fitted model (host side)."""

import equinox as eqx
import jax
import numpy as np
import pytest

from jaxkit import neuro

pytest.importorskip("sklearn")


def _model_with_sources(seed=0):
    """A model whose read-in gives a mixture of independent uniform sources."""
    r = np.random.default_rng(seed)
    n, k, s = 8, 2, 2000
    m = neuro.LowRankRNN(n, k, key=jax.random.key(seed))
    x = r.normal(size=(s, n))
    t = np.tanh(x)
    # two independent non-Gaussian sources, each a fixed read-out of tanh(x)
    src = np.stack([np.sign(t[:, 0]) * np.abs(t[:, 0]) ** 0.3, t[:, 1] ** 3], 1)
    B_true, *_ = np.linalg.lstsq(t, src, rcond=None)
    mix = np.asarray([[1.0, 0.8], [-0.6, 1.0]])
    B = (B_true @ mix.T).T  # z = mix @ src (+ bias)
    import jax.numpy as jnp

    m = eqx.tree_at(lambda q: (q.B, q.b), m, (jnp.asarray(B, jnp.float32), jnp.ones(k)))
    return m, jnp.asarray(x, jnp.float32), t @ B_true


@eqx.filter_jit
def _encode_decode(m, x):
    """Latent means and their read-out, as one program per shape (eagerly, one per op)."""
    z = m.encode(x)
    return z, m.decode(z)


def test_ica_unmixes_independent_sources_and_keeps_the_model():
    m, x, src = _model_with_sources()
    ica = neuro.ica_baseline(m, x, seed=0)
    (z0, x0), (z1, x1) = _encode_decode(m, x), _encode_decode(ica, x)
    assert neuro.component_aligned_r2(np.asarray(z0), src).score < 0.9  # mixed before
    assert neuro.component_aligned_r2(np.asarray(z1), src).score > 0.99  # unmixed after
    np.testing.assert_allclose(neuro.connectivity(ica), neuro.connectivity(m), atol=1e-4)
    np.testing.assert_allclose(x1, x0, atol=1e-3)
    with pytest.raises(TypeError, match="x_prev"):
        neuro.ica_baseline(m, x[:, :3])
    with pytest.raises(ValueError, match="x_prev"):
        neuro.ica_baseline(m, np.full(x.shape, np.nan, np.float32))
    with pytest.raises(TypeError, match="model"):
        neuro.ica_baseline(object(), x)


def test_lint_is_the_svd_factorisation():
    m = neuro.LowRankRNN(7, 3, key=jax.random.key(1))
    lint = neuro.lint_baseline(m)
    J = np.asarray(neuro.connectivity(m), np.float64)
    np.testing.assert_allclose(neuro.connectivity(lint), J, atol=1e-5)
    B2 = np.asarray(lint.B, np.float64)
    np.testing.assert_allclose(B2 @ B2.T, np.eye(3), atol=1e-5)  # orthonormal read-in
    AtA = np.asarray(lint.A, np.float64).T @ np.asarray(lint.A, np.float64)
    np.testing.assert_allclose(AtA, np.diag(np.diag(AtA)), atol=1e-5)  # orthogonal read-out
    # singular values of J, in order, are the read-out column norms
    s = np.linalg.svd(J, compute_uv=False)[:3]
    np.testing.assert_allclose(np.sqrt(np.diag(AtA)), s, rtol=1e-5)
    x = jax.numpy.asarray(np.random.default_rng(0).normal(size=(5, 7)), "float32")
    np.testing.assert_allclose(_encode_decode(lint, x)[1], _encode_decode(m, x)[1], atol=1e-4)
    with pytest.raises(TypeError, match="model"):
        neuro.lint_baseline("m")
