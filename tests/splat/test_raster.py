"""Oracles of the rasterizer (spec vision.md 5.3): analytic footprint, compositing sums,
occlusion, permutation invariance, NumPy brute force, tiled == dense, culling, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxkit import splat
from tests.splat._scenes import HW, camera, numpy_render, scene


def _axis_camera(hw=(9, 9), focal=10.0, dtype=jnp.float32):
    """Camera on -y looking at the origin; principal point on the centre of pixel (4, 4)."""
    cam = splat.look_at((0.0, -3.0, 0.0), (0.0, 0.0, 0.0), focal=focal, hw=hw)
    cam = cam._replace(principal=jnp.asarray([hw[1] / 2.0, hw[0] / 2.0]))
    return jax.tree.map(lambda a: a.astype(dtype), cam)


def _one(mean, var, logit, color, dtype=jnp.float32):
    return splat.Gaussians(
        jnp.asarray([mean], dtype),
        (var * jnp.eye(3, dtype=dtype))[None],
        jnp.asarray([logit], dtype),
        jnp.asarray([color], dtype),
    )


def test_single_gaussian_analytic_footprint():
    # isotropic variance v at depth 3 on the optical axis: Sigma_2 = (f^2 v / 9 + 0.3) I
    v, f, logit, bg = 0.02, 10.0, 0.7, 0.2
    g = _one((0.0, 0.0, 0.0), v, logit, (1.0, 0.5, 0.0))
    img = np.asarray(splat.render(g, _axis_camera(focal=f), hw=(9, 9), background=bg))
    s2 = f * f * v / 9.0 + 0.3
    jj, ii = np.meshgrid(np.arange(9) + 0.5, np.arange(9) + 0.5)
    r2 = (jj - 4.5) ** 2 + (ii - 4.5) ** 2
    a = 1 / (1 + np.exp(-logit)) * np.exp(-0.5 * r2 / s2)
    want = a[..., None] * np.array([1.0, 0.5, 0.0]) + (1 - a[..., None]) * bg
    np.testing.assert_allclose(img, want, atol=2e-6)
    # the centre value is sigmoid(o) c + (1 - sigmoid(o)) bg (no opacity compensation)
    o = 1 / (1 + np.exp(-logit))
    np.testing.assert_allclose(img[4, 4, 0], o + (1 - o) * bg, atol=1e-6)
    # a mean on the optical axis projects to the principal point: the image is symmetric
    np.testing.assert_allclose(img, img[::-1, ::-1], atol=1e-6)


def test_far_away_is_background_and_weights_sum_to_one(key):
    g, cam = scene(key, 5), camera()
    far = splat.render(g._replace(means=g.means + 50.0), cam, hw=HW, background=0.3)
    np.testing.assert_allclose(far, 0.3, atol=1e-6)
    ones = splat.render(g._replace(colors=jnp.ones_like(g.colors)), cam, hw=HW, background=0.0)
    resid = splat.render(g._replace(colors=jnp.zeros_like(g.colors)), cam, hw=HW, background=1.0)
    np.testing.assert_allclose(ones + resid, 1.0, atol=1e-6)
    assert float(jnp.min(resid)) < 0.9  # the scene really covers pixels


def test_nearer_gaussian_occludes():
    near = _one((0.0, -1.0, 0.0), 0.02, 10.0, (1.0, 0.0, 0.0))
    far = _one((0.0, 1.0, 0.0), 0.02, 10.0, (0.0, 0.0, 1.0))
    both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), far, near)
    img = np.asarray(splat.render(both, _axis_camera(), hw=(9, 9)))
    # alpha clamps at 0.99: red 0.99, blue 0.01 * 0.99
    np.testing.assert_allclose(img[4, 4], [0.99, 0.0, 0.01 * 0.99], atol=1e-5)


def test_permutation_invariance(key):
    g, cam = scene(key, 5), camera()
    perm = jax.random.permutation(jax.random.key(3), 5)
    gp = jax.tree.map(lambda a: a[perm], g)
    np.testing.assert_allclose(splat.render(g, cam, hw=HW), splat.render(gp, cam, hw=HW), atol=1e-6)


def test_matches_numpy_brute_force(key):
    # the scene drawn in float32 (the other tests' compiled ops), then rendered in float64
    g32, cam32 = scene(key, 4), camera()
    with jax.enable_x64(True):
        g, cam = (
            jax.tree.map(lambda a: jnp.asarray(np.asarray(a, np.float64)), t) for t in (g32, cam32)
        )
        got = splat.render(g, cam, hw=HW, background=0.4)
        want = numpy_render(g, cam, HW, bg=0.4)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-10)


@pytest.mark.slow
def test_gradients_check_grads_f64(key):
    with jax.enable_x64(True):
        g, cam = scene(key, 3, jnp.float64), camera(jnp.float64, hw=(4, 4), focal=5.0)
        f = lambda g: splat.render(g, cam, hw=(4, 4), background=0.3)  # noqa: E731
        check_grads(f, (g,), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)


def test_tiled_equals_dense(key):
    g, cam = scene(key, 5), camera(hw=(12, 10))
    dense = splat.render(g, cam, hw=(12, 10), cutoff=3.0)
    tiled = splat.render(g, cam, hw=(12, 10), method="tiled", tile=4, capacity=5)
    np.testing.assert_allclose(tiled, dense, atol=1e-6)
    # against the untruncated dense render the gap is bounded by the 3-sigma tail
    exact = splat.render(g, cam, hw=(12, 10))
    assert float(jnp.max(jnp.abs(tiled - exact))) < 5 * np.exp(-4.5)


@pytest.mark.slow
def test_tiled_gradients_equal_dense(key):
    g, cam = scene(key, 12), camera(hw=(12, 10))
    gd = jax.grad(lambda g: jnp.sum(splat.render(g, cam, hw=(12, 10), cutoff=3.0) ** 2))(g)
    gt = jax.grad(
        lambda g: jnp.sum(splat.render(g, cam, hw=(12, 10), method="tiled", tile=4) ** 2)
    )(g)
    for a, b in zip(gd, gt, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)


def test_tile_overflow_is_an_error(key):
    g, cam = scene(key, 5), camera()
    with pytest.raises(Exception, match="capacity"):
        jax.block_until_ready(splat.render(g, cam, hw=HW, method="tiled", tile=8, capacity=2))


def test_behind_camera_is_culled_without_nan(key):
    g, cam = scene(key, 5), camera()
    # the scenes edited in NumPy (eager, each .at[].set compiles a scatter of its own)
    gn, ctr = jax.tree.map(np.array, g), np.asarray(cam.center)
    gn.means[0], gn.means[1] = ctr + 2.0 * (ctr - 0.0), ctr  # behind, on the camera plane
    on_plane = jax.tree.map(jnp.asarray, gn)
    rest = jax.tree.map(np.array, g)
    for a in rest:
        a[:2] = 0.0
    rest.opacity_logits[:2] = -1e4
    rest = jax.tree.map(jnp.asarray, rest)  # the same scene with the first two invisible
    np.testing.assert_allclose(
        splat.render(on_plane, cam, hw=HW), splat.render(rest, cam, hw=HW), atol=1e-6
    )
    grads = jax.grad(lambda g: jnp.sum(splat.render(g, cam, hw=HW)))(on_plane)
    for leaf in grads:
        assert bool(jnp.all(jnp.isfinite(leaf)))
        np.testing.assert_array_equal(leaf[:2], 0.0)


def test_vmap_over_cameras(key):
    g = scene(key, 5)
    cams = splat.orbit_cameras(3, radius=3.0, height=0.5, focal=10.0, hw=HW)
    batched = jax.vmap(lambda c: splat.render(g, c, hw=HW))(cams)
    for i in range(3):
        one = jax.tree.map(lambda a, i=i: a[i], cams)
        np.testing.assert_allclose(batched[i], splat.render(g, one, hw=HW), atol=1e-6)


def test_bad_inputs(key):
    g, cam = scene(key, 5), camera()
    with pytest.raises(ValueError, match="covariances"):
        splat.render(g._replace(covariances=-g.covariances), cam, hw=HW)
    with pytest.raises(TypeError, match="gaussians.colors"):
        splat.render(g._replace(colors=g.colors[:, :2]), cam, hw=HW)
    with pytest.raises(TypeError, match="hw"):
        splat.render(g, cam, hw=(8,))
    with pytest.raises(ValueError, match="method"):
        splat.render(g, cam, hw=HW, method="sparse")
    with pytest.raises(TypeError, match="camera"):
        splat.render(g, cam.rotation, hw=HW)
    with pytest.raises(TypeError, match="background"):
        splat.render(g, cam, hw=HW, background=jnp.zeros(4))
    with pytest.raises(ValueError, match="cutoff"):
        splat.render(g, cam, hw=HW, cutoff=-1.0)
    # under jit a non-PSD covariance is a runtime error, never a NaN image
    bad = g._replace(covariances=g.covariances.at[0].multiply(-1.0))
    with pytest.raises(Exception, match="semi-definite"):
        jax.block_until_ready(jax.jit(lambda g: splat.render(g, cam, hw=HW))(bad))


@pytest.mark.slow
def test_tile_counts_size_the_capacity(key):
    g, cam = scene(key, 5), camera(hw=(12, 10))
    counts = np.asarray(splat.tile_counts(g, cam, hw=(12, 10), tile=4))
    assert counts.shape == (3, 3)
    # brute force: Gaussian n is needed by tile t iff it has a pixel there inside 3 sigma
    dense = np.asarray(splat.render(g, cam, hw=(12, 10), cutoff=3.0))
    need = np.zeros((3, 3), int)
    for n in range(5):
        one = jax.tree.map(lambda a, n=n: a[n : n + 1], g)
        img = np.asarray(splat.render(one, cam, hw=(12, 10), cutoff=3.0, background=-1.0))
        touched = np.any(img != -1.0, axis=-1)
        need += np.array([[touched[4 * i : 4 * i + 4, 4 * j : 4 * j + 4].any() for j in range(3)]
                          for i in range(3)])  # fmt: skip
    assert np.all(counts >= need)  # the box contains every touched pixel
    tiled = splat.render(g, cam, hw=(12, 10), method="tiled", tile=4, capacity=int(counts.max()))
    np.testing.assert_allclose(tiled, dense, atol=1e-6)


def test_audit_bad_inputs():
    # wave-24 audit: each was a silent NaN / wrong value or an opaque error
    g, cam, nan = scene(jax.random.key(0), 3), camera(), float("nan")
    # a constant scene under the caller's jit was a TracerArrayConversionError
    out = jax.jit(lambda b: splat.render(g, cam, hw=HW, background=b))(0.25)
    np.testing.assert_allclose(out, splat.render(g, cam, hw=HW, background=0.25), atol=1e-6)
    for bad, err, name in (
        (lambda: splat.render(g, cam, hw=HW, background=nan), ValueError, "background"),
        (lambda: splat.tile_counts(g, cam, hw=HW, cutoff=nan), ValueError, "cutoff"),
        (lambda: splat.look_at((0, -3, 0), (0, 0, 0), focal=-1.0, hw=HW), ValueError, "focal"),
        (lambda: splat.orbit_cameras(2, radius=nan, height=0.5, focal=7.0, hw=HW), ValueError,
         "radius"),
        (lambda: splat.quaternion_to_rotation(np.zeros(4, np.float32)), ValueError, "q"),
        (lambda: splat.from_scale_rotation(np.zeros((2, 3)), np.zeros((3, 3)), np.ones((2, 4)),
                                           np.zeros(2), np.zeros((2, 3))), TypeError,
         "log_scales"),
    ):  # fmt: skip
        with pytest.raises(err, match=name):
            bad()
