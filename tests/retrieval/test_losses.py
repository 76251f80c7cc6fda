"""InfoNCE with filtering, token-wise scores, STII alignment and pyramid losses (spec 3.4 o. 8)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval
from tests.retrieval.test_game import _wti_np


def _lsm(z, axis):
    z = z - z.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def _nce_np(s, tau, drop):
    z = np.where(drop, -np.inf, s / tau)
    n = len(s)
    return -(np.trace(_lsm(z, 1)) + np.trace(_lsm(z, 0))) / (2 * n)


def test_info_nce_formula_filtering_and_limit():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(6, 6))
    drop = np.zeros((6, 6), bool)
    drop[0, 3] = drop[3, 0] = drop[2, 5] = True
    with jax.enable_x64(True):
        plain = float(retrieval.info_nce(jnp.asarray(s), tau=0.3))
        filt = float(retrieval.info_nce(jnp.asarray(s), tau=0.3, neg_mask=jnp.asarray(drop)))
        s2 = s.copy()
        s2[drop] += 100.0  # filtered negatives do not affect the loss
        filt2 = float(retrieval.info_nce(jnp.asarray(s2), tau=0.3, neg_mask=jnp.asarray(drop)))
        # the diagonal is never filtered
        diag = float(retrieval.info_nce(jnp.asarray(s), tau=0.3, neg_mask=jnp.eye(6, dtype=bool)))
    assert abs(plain - _nce_np(s, 0.3, np.zeros_like(drop))) < 1e-12
    assert abs(filt - _nce_np(s, 0.3, drop)) < 1e-12
    assert abs(filt2 - filt) < 1e-12 and abs(diag - plain) < 1e-12
    # perfectly separated embeddings: loss -> 0 as tau -> 0
    e = jnp.eye(5)
    losses = [float(retrieval.info_nce(e @ e.T, tau=t)) for t in (1.0, 0.1, 0.02)]
    assert losses[0] > losses[1] > losses[2] and losses[2] < 1e-6


def test_negative_filter_threshold_mapping():
    e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])  # cos(0,1) = 0.8
    assert bool(retrieval.negative_filter(e, threshold=0.85)[0, 1])  # 0.8 > 2*0.85-1 = 0.7
    assert not bool(retrieval.negative_filter(e, threshold=0.95)[0, 1])  # 0.8 < 0.9
    with pytest.raises(ValueError, match="threshold"):
        retrieval.negative_filter(e, threshold=1.5)


def test_token_scores_are_full_coalition_values():
    # inputs and the reference on the host: eager jax.random draws and per-pair indexing
    # compiled a program per op and shape (21 compiles)
    rng = np.random.default_rng(0)
    m, t = rng.normal(size=(3, 4, 5)), rng.normal(size=(2, 3, 5))
    wm, wt = rng.normal(size=(3, 4)), rng.normal(size=(2, 3))
    mm = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 0]], bool)
    mt = np.array([[1, 1, 1], [1, 1, 0]], bool)
    got = retrieval.token_scores(
        *(jnp.asarray(v, jnp.float32) if v.dtype != bool else v for v in (m, wm, mm, t, wt, mt))
    )
    assert got.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            a, b = m[j][mm[j]], t[i][mt[i]]
            cos = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (
                b / np.linalg.norm(b, axis=1, keepdims=True)
            ).T
            wa, wb = wm[j][mm[j]], wt[i][mt[i]]
            want = _wti_np(cos, wa, wb, range(len(a)), range(len(b)))
            assert abs(float(got[i, j]) - want) < 1e-5


def _kl_np(p_logits, q_logits, axis):
    lp, lq = _lsm(p_logits, axis), _lsm(q_logits, axis)
    return (np.exp(lp) * (lp - lq)).sum(axis=axis).mean()


def test_alignment_and_pyramid_formulas():
    rng = np.random.default_rng(1)
    s, phi = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    ones_a, ones_b = jnp.ones(3, bool), jnp.ones(4, bool)
    with jax.enable_x64(True):
        got = float(
            retrieval.stii_alignment_loss(
                jnp.asarray(s), jnp.asarray(phi), ones_a, ones_b, tau_s=0.2, tau_phi=0.5
            )
        )
        # gradients as one compiled program each (an eager grad compiles every op's JVP)
        g = jax.jit(
            jax.grad(lambda p: retrieval.stii_alignment_loss(jnp.asarray(s), p, ones_a, ones_b))
        )(jnp.asarray(phi))
        loc, glob = rng.normal(size=(2, 5, 5)), rng.normal(size=(5, 5))
        pyr = float(retrieval.pyramid_consistency(jnp.asarray(loc), jnp.asarray(glob), tau=0.3))
        zero = float(retrieval.pyramid_consistency(jnp.asarray(glob)[None], jnp.asarray(glob)))
        g_loc, g_glob = jax.jit(
            jax.grad(lambda a, b: retrieval.pyramid_consistency(a, b, tau=0.3), argnums=(0, 1))
        )(jnp.asarray(loc), jnp.asarray(glob))
    want = _kl_np(phi / 0.5, s / 0.2, 1) + _kl_np(phi / 0.5, s / 0.2, 0)
    assert abs(got - want) < 1e-12
    assert np.max(np.abs(np.asarray(g))) == 0.0  # targets are stop_gradient-ed
    want_pyr = sum(_kl_np(x / 0.3, glob / 0.3, 1) + _kl_np(x / 0.3, glob / 0.3, 0) for x in loc)
    assert abs(pyr - want_pyr) < 1e-12 and abs(zero) < 1e-12
    # the local stages are targets: only the global scores learn from this loss
    assert np.max(np.abs(np.asarray(g_loc))) == 0.0
    assert np.max(np.abs(np.asarray(g_glob))) > 1e-3


def test_alignment_masks_and_bad_inputs():
    s = jnp.array([[1.0, 0.0, 5.0], [0.0, 1.0, -5.0]])
    ma, mb = jnp.array([True, True]), jnp.array([True, True, False])
    masked = retrieval.stii_alignment_loss(s, 2 * s, ma, mb)
    cut = retrieval.stii_alignment_loss(s[:, :2], 2 * s[:, :2], ma, mb[:2])
    assert abs(float(masked) - float(cut)) < 1e-6
    with pytest.raises(ValueError, match="tau_s"):
        retrieval.stii_alignment_loss(s, s, ma, mb, tau_s=0.0)
    with pytest.raises(ValueError, match="tau"):
        retrieval.info_nce(jnp.eye(3), tau=float("nan"))
    with pytest.raises(TypeError, match="scores"):
        retrieval.info_nce(jnp.ones((3, 2)))
