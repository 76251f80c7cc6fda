"""AdLift oracles: projected sign step, real gradient truncation, fitting, clamping, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import splat
from jaxkit.splat import adlift
from tests.splat._scenes import grey_loss, numpy_render, scene

HW = (6, 6)


KW = {"hw": HW, "n_outer": 1, "n_fit": 2}  # one compiled program for the default tests


def _setup(key):
    raw = scene(key, 5)
    cams = splat.orbit_cameras(2, radius=3.0, height=0.5, focal=7.0, hw=HW)
    theta = adlift.init_safeguards(raw, 3, key=jax.random.key(7), opacity_logit=-1.0)
    w = jax.random.normal(jax.random.key(8), (3, 3))
    return raw, cams, theta, (w, jnp.float32(1.0))


def test_pgd_image_step_closed_form_and_bounds():
    rng = np.random.default_rng(0)
    x_raw = rng.uniform(size=(50,)).astype(np.float32)
    x = np.clip(x_raw + rng.uniform(-0.1, 0.1, size=50), 0, 1).astype(np.float32)
    g = rng.normal(size=50).astype(np.float32)
    eta, step = 0.05, 0.03
    got = np.asarray(adlift.pgd_image_step(x, x_raw, g, eta=eta, step=step))
    want = np.clip(x_raw + np.clip(x - step * np.sign(g) - x_raw, -eta, eta), 0, 1)
    np.testing.assert_allclose(got, want, atol=1e-7)
    assert np.all(np.abs(got - x_raw) <= eta + 1e-7) and np.all((got >= 0) & (got <= 1))
    with pytest.raises(ValueError, match="eta"):
        adlift.pgd_image_step(x, x_raw, g, eta=0.0, step=step)
    with pytest.raises(TypeError, match="grad"):
        adlift.pgd_image_step(x, x_raw, g[:3], eta=eta, step=step)


@jax.jit
def _render_prot(raw, th, cam):
    return splat.render(adlift.protected_scene(raw, th), cam, hw=HW)


@jax.jit
def _image_grad(p, raw, th, cam):
    x, x_raw = _render_prot(raw, th, cam), splat.render(raw, cam, hw=HW)
    return x, x_raw, jax.grad(grey_loss, argnums=1)(p, x, x_raw)


@jax.jit
def _fit_grad(raw, th, cam, target):
    return jax.grad(lambda t: jnp.mean((_render_prot(raw, t, cam) - target) ** 2))(th)


@pytest.mark.slow  # ~8 s: make test keeps lifted_pgd's conformance (bad inputs, eager cache)
def test_lifted_pgd_is_pgd_target_then_fit(key):
    """Per view: render, truncated image gradient, projected sign step, then n_fit Adam
    steps of the MSE to that constant target (Adam state carried across views)."""
    raw, cams, theta, p = _setup(key)
    eta, step, lr = 0.05, 0.02, 1e-2
    res = adlift.lifted_pgd(raw, theta, cams, grey_loss, p, eta=eta, step=step, fit_lr=lr, **KW)
    opt = optax.adam(lr)

    @jax.jit  # one program per Adam step (eager, each of optax's small ops compiled alone)
    def adam_step(want, state, cam, target):
        up, state = opt.update(_fit_grad(raw, want, cam, target), state, want)
        return optax.apply_updates(want, up), state

    with jax.numpy_dtype_promotion("standard"):  # optax's int counter
        state, want = opt.init(theta), theta
        for v in range(2):
            cam = jax.tree.map(lambda a, v=v: a[v], cams)
            x, x_raw, g = (np.asarray(a) for a in _image_grad(p, raw, want, cam))
            target = np.clip(x_raw + np.clip(x - step * np.sign(g) - x_raw, -eta, eta), 0, 1)
            for _ in range(2):
                want, state = adam_step(want, state, cam, target)
    for a, b in zip(res.safeguards, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # real truncation: the editor enters only through sign(grad_x L), so a monotone
    # transform of the loss (c = 1 -> 5) leaves every safeguard unchanged
    res5 = adlift.lifted_pgd(
        raw, theta, cams, grey_loss, (p[0], jnp.float32(5.0)), eta=eta, step=step, fit_lr=lr, **KW
    )
    for a, b in zip(res.safeguards, res5.safeguards, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_end_to_end_differs_from_lifted(key):
    raw, cams, theta, p = _setup(key)
    lifted = adlift.lifted_pgd(raw, theta, cams, grey_loss, p, **KW).safeguards
    e2e = adlift.lifted_pgd(raw, theta, cams, grey_loss, p, mode="end_to_end", **KW)
    assert float(jnp.max(jnp.abs(e2e.safeguards.means - lifted.means))) > 1e-5
    assert bool(jnp.all(jnp.isfinite(e2e.fit_loss)))


def test_means_stay_in_bounding_box_and_evaluation(key):
    raw, cams, theta, w = _setup(key)
    res = adlift.lifted_pgd(raw, theta, cams, grey_loss, w, fit_lr=0.5, **KW)
    lo, hi = np.min(np.asarray(raw.means), 0), np.max(np.asarray(raw.means), 0)
    m = np.asarray(res.safeguards.means)
    assert np.all(m >= lo - 1e-6) and np.all(m <= hi + 1e-6)
    assert res.fit_loss.shape == (1, 2) and bool(jnp.all(jnp.isfinite(res.fit_loss)))
    # invisible safeguards: no protection, no perturbation
    off = theta._replace(opacity_logits=jnp.full_like(theta.opacity_logits, -1e4))
    p = adlift.evaluate_protection(raw, off, cams, grey_loss, w, hw=HW)
    np.testing.assert_allclose(p.adv_rel, 1.0, atol=1e-6)
    np.testing.assert_allclose(p.linf, 0.0, atol=1e-7)


def test_lifted_pgd_bad_inputs(key):
    raw, cams, theta, w = _setup(key)
    with pytest.raises(ValueError, match="eta"):
        adlift.lifted_pgd(raw, theta, cams, grey_loss, w, hw=HW, eta=-1.0)
    with pytest.raises(ValueError, match="mode"):
        adlift.lifted_pgd(raw, theta, cams, grey_loss, w, hw=HW, mode="fgsm")
    with pytest.raises(TypeError, match="cameras.rotation"):
        adlift.lifted_pgd(raw, theta, jax.tree.map(lambda a: a[0], cams), grey_loss, w, hw=HW)
    with pytest.raises(TypeError, match="adv_loss"):
        adlift.lifted_pgd(raw, theta, cams, "editor", w, hw=HW)
    with pytest.raises(TypeError, match="theta.color_logits"):
        adlift.lifted_pgd(raw, theta._replace(color_logits=theta.color_logits[:, :2]), cams,
                          grey_loss, w, hw=HW)  # fmt: skip


def test_non_psd_raw_asset_is_rejected(key):
    raw, cams, theta, p = _setup(key)
    bad = raw._replace(covariances=raw.covariances.at[1].multiply(-1.0))
    with pytest.raises(ValueError, match="covariances"):
        adlift.lifted_pgd(bad, theta, cams, grey_loss, p, **KW)


@pytest.mark.slow  # ~5 s: make test keeps test_certificate_bounds_every_view_and_is_attained
def test_projection_phase_bounds_training_and_bound_views(key):
    """The projection phase stops only once every training view and every bound view is
    within eta (1 - margin): checked on independent NumPy renders (tests/splat/_scenes)."""
    raw, cams, theta, p = _setup(key)
    theta = theta._replace(opacity_logits=jnp.full_like(theta.opacity_logits, 1.0))
    bound = splat.orbit_cameras(3, radius=3.2, height=0.3, focal=7.0, hw=HW)
    eta, margin = 0.04, 0.25
    res = adlift.lifted_pgd(
        raw, theta, cams, grey_loss, p, eta=eta, step=0.02, fit_lr=5e-2, hinge=10.0,
        margin=margin, n_project=300, bound_cameras=bound, **KW,
    )  # fmt: skip
    assert 0 < int(res.project_steps) < 300  # it had work to do, and finished it
    prot = adlift.protected_scene(raw, res.safeguards)
    for cs, linf in ((cams, res.train_linf), (bound, None)):
        for v in range(cs.rotation.shape[0]):
            cam = jax.tree.map(lambda a, v=v: a[v], cs)
            d = numpy_render(prot, cam, HW) - numpy_render(raw, cam, HW)
            assert np.max(np.abs(d)) <= eta * (1 - margin) + 1e-5
            if linf is not None:
                np.testing.assert_allclose(linf[v], np.max(np.abs(d)), atol=1e-5)
    with pytest.raises(ValueError, match="margin"):
        adlift.lifted_pgd(raw, theta, cams, grey_loss, p, hw=HW, margin=1.0)
    with pytest.raises(ValueError, match="n_project"):
        adlift.lifted_pgd(raw, theta, cams, grey_loss, p, hw=HW, n_project=-1)
    with pytest.raises(TypeError, match="bound_cameras"):
        adlift.lifted_pgd(raw, theta, cams, grey_loss, p, hw=HW, bound_cameras=cams.rotation)


def _random_views(n, seed, hw=HW):
    """``n`` poses on random directions (distance 1.8..4, random focal length)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = rng.normal(size=3)
        eye = d / np.linalg.norm(d) * rng.uniform(1.8, 4.0)
        tgt = rng.uniform(-0.3, 0.3, 3)
        out.append(splat.look_at(tuple(eye), tuple(tgt), focal=float(rng.uniform(4, 14)), hw=hw))
    return out


def test_certificate_bounds_every_view_and_is_attained(key):
    """certified_linf bounds the rendered change on random poses and focal lengths (NumPy
    oracle renders), and one safeguard seen head-on over the background attains it."""
    raw, _, theta, _ = _setup(key)
    theta = theta._replace(opacity_logits=jnp.asarray([-2.0, -3.0, -2.5]))
    cert = float(adlift.certified_linf(raw, theta, background=0.2))
    assert 0 < cert < 0.5
    prot = adlift.protected_scene(raw, theta)
    worst = max(
        np.max(np.abs(numpy_render(prot, c, HW, bg=0.2) - numpy_render(raw, c, HW, bg=0.2)))
        for c in _random_views(12, 0)
    )
    assert 0 < worst <= cert + 1e-6
    # tight: nothing behind the safeguard but a black background; the raw Gaussian is
    # behind the camera (culled), colour 0: the change at the centre pixel is sigma(o) c
    one = adlift.Safeguards(jnp.zeros((1, 3)), jnp.full((1, 3), -2.0),
                            jnp.asarray([[1.0, 0, 0, 0]]), jnp.asarray([0.5]),
                            jnp.asarray([[1.0, -1.0, 0.3]]))  # fmt: skip
    far = splat.Gaussians(jnp.asarray([[0.0, -10.0, 0.0]]), 0.01 * jnp.eye(3)[None],
                          jnp.zeros(1), jnp.zeros((1, 3)))  # fmt: skip
    cam = splat.look_at((0.0, -3.0, 0.0), (0.0, 0.0, 0.0), focal=6.0, hw=(5, 5))
    d = numpy_render(adlift.protected_scene(far, one), cam, (5, 5))
    want = float(jax.nn.sigmoid(0.5) * jax.nn.sigmoid(1.0))
    assert float(adlift.certified_linf(far, one)) == pytest.approx(want, rel=1e-6)
    assert np.max(np.abs(d[2, 2])) == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
def test_certify_bounds_novel_views(key):
    """certify=True keeps the certificate under eta through training, so random novel
    views (never seen by any step) stay within eta; a bad flag is a TypeError."""
    raw, cams, theta, p = _setup(key)
    eta = 0.03
    res = adlift.lifted_pgd(raw, theta, cams, grey_loss, p, eta=eta, certify=True, **KW)
    assert float(adlift.certified_linf(raw, res.safeguards)) <= eta
    prot = adlift.protected_scene(raw, res.safeguards)
    worst = max(
        np.max(np.abs(numpy_render(prot, c, HW) - numpy_render(raw, c, HW)))
        for c in _random_views(16, 1)
    )
    assert 0 < worst <= eta + 1e-6
    with pytest.raises(TypeError, match="certify"):
        adlift.lifted_pgd(raw, theta, cams, grey_loss, p, certify="yes", **KW)
