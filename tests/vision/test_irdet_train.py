"""irdet training pieces: surrogate refine, phi, soft-IoU, bi-level weighting, loaders."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage

from jaxkit.vision import irdet


def _prob(key, shape=(3, 16, 16)):
    return jax.nn.sigmoid(3 * jax.random.normal(key, shape))


def test_surrogate_identity_limit_matches_sobel_closed_form():
    p = _prob(jax.random.key(0))
    got = irdet.surrogate_refine(p, d0=0.0, rho=1.0)
    want = []
    for img in np.asarray(p, np.float64):
        g = (
            np.hypot(ndimage.sobel(img, 0, mode="nearest"), ndimage.sobel(img, 1, mode="nearest"))
            / 8
        )
        want.append(1 / (1 + np.exp(-(img - 0.15 * g))))
    np.testing.assert_allclose(np.asarray(got), np.array(want), atol=2e-6)
    # diffusion on (d0 > 0) changes the map: the oracle can tell the difference
    assert float(jnp.abs(irdet.surrogate_refine(p, rho=1.0) - got).max()) > 1e-3


def test_phi_bounds():
    ph = irdet.phi_from_u(jnp.zeros(4))
    np.testing.assert_allclose(np.asarray(jnp.stack(ph)), [3.2, 6.0, 0.84, 0.6], rtol=1e-6)
    big = irdet.phi_from_u(jnp.array([50.0, -50.0, 50.0, -50.0]))
    np.testing.assert_allclose(np.asarray(jnp.stack(big)), [4.16, 4.2, 0.89, 0.55], rtol=1e-5)
    with pytest.raises(TypeError, match="`u`"):
        irdet.phi_from_u(jnp.zeros(3))


@pytest.mark.slow
def test_phi_loss_gradient_is_finite():
    p = _prob(jax.random.key(1), (2, 8, 8)).at[:, :2].set(0.0).at[:, -2:].set(1.0)  # saturated
    y = (p > 0.5).astype(jnp.float32)
    g = jax.grad(irdet.phi_loss)(jnp.zeros(4), p, y)
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).sum()) > 0
    with pytest.raises(TypeError, match="`pseudo_val`"):
        irdet.phi_loss(jnp.zeros(4), p, y[:, :3])


def test_soft_iou_closed_form():
    t = np.zeros((2, 4, 4), np.float32)
    t[0, :2, :2] = 1
    z = np.full((2, 4, 4), -60.0, np.float32)
    z[0, :2, :3] = 60.0  # predicted 6 px, 4 of them on the 4-px target
    z[1, 0, 0] = 60.0  # empty target, 1 px predicted
    got = np.asarray(irdet.soft_iou_loss(jnp.asarray(z), jnp.asarray(t)))
    np.testing.assert_allclose(got, [1 - 5 / 7, 1 - 1 / 2], rtol=1e-6)
    with pytest.raises(TypeError, match="`target`"):
        irdet.soft_iou_loss(jnp.asarray(z), jnp.asarray(t[:1]))


def test_weights_equal_one_for_constant_features_and_mean_one():
    w = irdet.make_weighter(key=jax.random.key(0))
    const = jnp.tile(jnp.arange(15.0)[None], (6, 1))
    np.testing.assert_allclose(np.asarray(irdet.sample_weights(w, const)), 1.0, rtol=1e-6)
    rnd = jax.random.normal(jax.random.key(1), (6, 15))
    a = irdet.sample_weights(w, rnd)
    assert float(jnp.mean(a)) == pytest.approx(1.0, rel=1e-6) and float(jnp.std(a)) > 0
    with pytest.raises(ValueError, match="`temperature`"):
        irdet.sample_weights(w, rnd, temperature=0.0)


def test_weight_features_against_numpy():
    k1, k2 = jax.random.split(jax.random.key(2))
    logits = 2 * jax.random.normal(k1, (5, 8, 8))
    y = (jax.random.uniform(k2, (5, 8, 8)) > 0.7).astype(jnp.float32)
    sur = jax.nn.sigmoid(logits)  # any map of the right shape
    f = np.asarray(irdet.weight_features(logits, y, sur, jnp.arange(5.0)))
    assert f.shape == (5, irdet.N_FEATURES)
    p = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    yn = np.asarray(y, np.float64)

    def z(x):
        return (x - x.mean()) / (x.std() + 1e-6)

    np.testing.assert_allclose(f[:, 0], z(p.mean((1, 2))), atol=1e-4)
    dice = (2 * (p * yn).sum((1, 2)) + 1) / (p.sum((1, 2)) + yn.sum((1, 2)) + 1)
    np.testing.assert_allclose(f[:, 10], z(dice), atol=1e-4)
    np.testing.assert_allclose(f[:, 6:8], 0.0, atol=1e-6)  # zero val residual: no signal
    with pytest.raises(TypeError, match="`ema_loss`"):
        irdet.weight_features(logits, y, sur, jnp.zeros(4))
    with pytest.raises(TypeError, match="`logits` must hold at least one sample"):  # was a
        irdet.weight_features(logits[:0], y[:0], sur[:0], jnp.zeros(0))  # ZeroDivisionError


def test_residual_scores_against_numpy():
    ks = jax.random.split(jax.random.key(3), 4)
    pt, yt, pv, yv = (jax.random.uniform(k, (6 if i < 2 else 3, 5, 5)) for i, k in enumerate(ks))
    s = np.asarray(irdet.residual_scores(pt, yt, pv, yv))
    rv = (np.asarray(pv) - np.asarray(yv)).mean(0)
    raw = np.maximum(((np.asarray(pt) - np.asarray(yt)) * rv).mean((1, 2)), 0)
    np.testing.assert_allclose(s, (raw - raw.mean()) / (raw.std() + 1e-6), atol=1e-4)


def _lin_loss(w, batch):
    x, y = batch
    return (x @ w - y) ** 2


def test_grad_dot_equals_finite_difference_on_linear_model():
    with jax.enable_x64(True):
        ks = jax.random.split(jax.random.key(4), 5)
        w = jax.random.normal(ks[0], (3,), jnp.float64)
        xt, yt = (
            jax.random.normal(ks[1], (5, 3), jnp.float64),
            jax.random.normal(ks[2], (5,), jnp.float64),
        )
        xv, yv = (
            jax.random.normal(ks[3], (4, 3), jnp.float64),
            jax.random.normal(ks[4], (4,), jnp.float64),
        )
        lr = 0.1
        s = np.asarray(irdet.grad_dot_scores(_lin_loss, w, (xt, yt), (xv, yv), lr=lr))
        with pytest.raises(ValueError, match="`lr`"):
            irdet.grad_dot_scores(_lin_loss, w, (xt, yt), (xv, yv), lr=-1.0)
    xt, yt, xv, yv, w0 = (np.asarray(a) for a in (xt, yt, xv, yv, w))

    def lval(a):  # NumPy: one weighted gradient step, then the validation loss
        g = (2 * a[:, None] * (xt @ w0 - yt)[:, None] * xt).mean(0)
        wn = w0 - lr * g
        return ((xv @ wn - yv) ** 2).mean()

    eps = 1e-6
    fd = np.array(
        [-(lval(np.ones(5) + eps * e) - lval(np.ones(5) - eps * e)) / (2 * eps) for e in np.eye(5)]
    )
    np.testing.assert_allclose(s, fd, rtol=1e-6, atol=1e-9)


def _png(path, arr):
    from PIL import Image

    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path)


def test_loaders_read_the_three_layouts(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    img = (rng.uniform(size=(8, 10)) * 255).astype(np.uint8)
    mask = np.zeros((8, 10), np.uint8)
    mask[2:4, 3:5] = 255
    layouts = {
        "sirst": ("images", "masks", "_pixels0", "idx_427/test.txt"),
        "nudt": ("images", "masks", "", "mode/test.txt"),
        "irstd1k": ("IRSTD1k_Img", "IRSTD1k_Label", "", "test.txt"),
    }
    for name, (idir, mdir, suf, split) in layouts.items():
        root = tmp_path / name
        for i in ("a1", "b2"):
            _png(str(root / idir / f"{i}.png"), img)
            _png(str(root / mdir / f"{i}{suf}.png"), mask)
        os.makedirs(os.path.dirname(str(root / split)), exist_ok=True)
        (root / split).write_text("a1\nb2.png\n")
        data = irdet.load_irstd_folder(str(root), "test")
        assert data.ids == ["a1", "b2"]
        np.testing.assert_allclose(data.images[0], img / 255.0, atol=1e-6)
        np.testing.assert_array_equal(data.masks[1], mask > 127)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        irdet.load_irstd_folder(str(tmp_path / "absent"), "test")
    with pytest.raises(FileNotFoundError, match="no split file"):
        irdet.load_irstd_folder(str(tmp_path / "nudt"), "train")
    os.remove(str(tmp_path / "nudt" / "masks" / "b2.png"))
    with pytest.raises(FileNotFoundError, match="mask for id 'b2'"):
        irdet.load_irstd_folder(str(tmp_path / "nudt"), "test")
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if the irstd extra were missing
    with pytest.raises(ImportError, match=r"needs Pillow: pip install 'jaxkit\[irstd\]'"):
        irdet.load_irstd_folder(str(tmp_path / "sirst"), "test")
