"""principal_init: the read-in spans the leading principal directions; the read-out regresses."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import neuro
from jaxkit.neuro._init import _haar


def _np_fit(z, h):
    design = np.concatenate([z, np.ones((z.shape[0], 1))], 1)
    coef = np.linalg.lstsq(design, h, rcond=None)[0]
    return coef[:-1].T, coef[-1]


@pytest.mark.slow  # svd/qr compiles for two observation models: slow tier
def test_principal_init_read_in_and_read_out_against_numpy():
    # bad inputs are checked in test_model.py's test_bad_inputs / test_gru_encoder_bad_inputs
    n, k, s = 5, 2, 40
    x = np.asarray(jax.random.normal(jax.random.key(1), (s + 1, n)), np.float64)
    y = np.random.default_rng(2).poisson(3.0, (s + 1, n)).astype(np.float64)
    f = np.tanh(x[:-1]) - np.tanh(x[:-1]).mean(0)
    vk = np.linalg.svd(f, full_matrices=False)[2][:k].T  # [N, K] leading directions
    gauss = neuro.LowRankRNN(n, k, key=jax.random.key(0))
    pois = neuro.LowRankRNN(n, k, obs="poisson", key=jax.random.key(0))
    fitted = [
        neuro.principal_init(gauss, x[:-1], x[1:], key=jax.random.key(3)),
        neuro.principal_init(gauss, x[:-1], x[1:], key=jax.random.key(4)),
        neuro.principal_init(pois, x[:-1], y[1:], key=jax.random.key(3), bin_width=2.0),
    ]
    bs = [np.asarray(m.B, np.float64) for m in fitted]
    for m, b in zip(fitted, bs, strict=True):
        z = np.tanh(x[:-1]) @ b.T + np.asarray(m.b, np.float64)
        # white latents, read-in rows spanning the K leading principal directions
        np.testing.assert_allclose(z.T @ z / s, np.eye(k), atol=1e-4)
        np.testing.assert_allclose(b.T @ np.linalg.pinv(b.T), vk @ vk.T, atol=1e-4)
        h = x[1:] if m.obs == "gaussian" else np.log(np.expm1((y[1:] + 0.5) / 2.0))
        a_np, a0_np = _np_fit(z, h)
        np.testing.assert_allclose(m.A, a_np, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(m.a, a0_np, rtol=1e-3, atol=1e-4)
    # another key: the same subspace, rotated by an orthogonal matrix (not the same one)
    rot = bs[1] @ np.linalg.pinv(bs[0])
    np.testing.assert_allclose(rot @ rot.T, np.eye(k), atol=1e-4)
    assert np.abs(rot - np.eye(k)).max() > 1e-2
    z0 = np.tanh(x[:-1]) @ bs[0].T + np.asarray(fitted[0].b)
    resid = x[1:] - z0 @ np.asarray(fitted[0].A).T - np.asarray(fitted[0].a)
    np.testing.assert_allclose(np.exp(fitted[0].log_sigma_x), resid.std(0), rtol=1e-3)


def test_principal_init_vmapped_over_keys_has_no_batched_lapack():
    # restarts vmap principal_init over keys; a batched LAPACK call (a QR per key, as this
    # used to lower) can deadlock jaxlib's CPU pool: see tests/privacy/test_lapack_unbatched.py
    m = neuro.LowRankRNN(5, 2, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (40, 5))
    keys = jax.random.split(jax.random.key(2), 3)
    f = jax.vmap(lambda k: neuro.principal_init(m, x[:-1], x[1:], key=k).B)
    text = jax.jit(f).lower(keys).as_text()  # lowered only: nothing compiles
    calls = re.findall(r'custom_call @(lapack_\w+)\(.*?num_batch_dims = "(\d+)"', text)
    assert calls and all(nb == "0" for _, nb in calls), calls  # the data's SVD, unbatched


def test_haar_rotation_is_the_sign_fixed_qr_factor():
    key, k = jax.random.key(6), 6  # one size: each compiles the loop (~0.8 s CPU)
    g = np.asarray(jax.random.normal(key, (k, k)), np.float64)
    q, r = np.linalg.qr(g)
    np.testing.assert_allclose(_haar(key, k, jnp.float32), q * np.sign(np.diag(r)), atol=1e-5)
