"""irdet diffusion, synthetic scenes and pseudo-masks: the oracles of spec §4.5."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage

from jaxkit.vision import irdet


def _smooth_field(key, hw, lo, hi):
    coarse = jax.random.uniform(key, (5, 5), jnp.float64)
    f = jax.image.resize(coarse, hw, "linear")
    return lo + (hi - lo) * (f - f.min()) / (f.max() - f.min())


def _variable_problem(hw=(21, 23)):
    with jax.enable_x64(True):
        img = _smooth_field(jax.random.key(1), hw, 0.0, 1.0)
        d = irdet.diffusivity(img, d0=1.0, beta=2.0, alpha=0.6)
        gy, gx = np.gradient(np.asarray(img))  # the drift from NumPy, not from our code
        v = jnp.asarray(np.stack([gy, gx]) * 1.5)
    return img, d, v


def test_mass_conserved_and_positive():
    with jax.enable_x64(True):
        _, d, v = _variable_problem()
        pts = jnp.array([[0.0, 0.0], [10.0, 11.0], [20.0, 22.0]])  # two in corners: walls
        u0 = irdet.point_sources(pts, d.shape, jnp.float64)
        t = 6.0
        n = irdet.stable_substeps(t, float(d.max()), float(jnp.abs(v).max()))
        u = irdet.fokker_planck(
            u0,
            jnp.broadcast_to(d, u0.shape),
            jnp.broadcast_to(v, (3, *v.shape)),
            time=t,
            substeps=n,
        )
        np.testing.assert_allclose(np.asarray(u.sum(axis=(1, 2))), 1.0, atol=1e-12)
        assert float(u.min()) >= -1e-15
        # the walls reflect: the corner sources have spread (not lost mass outside)
        assert float(u[0, 0, 0]) < 0.5


def test_heat_kernel_variance_is_2dt():
    with jax.enable_x64(True):
        hw = (41, 41)
        for dconst, t in ((0.7, 2.0), (3.2, 1.0)):
            u0 = irdet.point_sources(jnp.array([[20.0, 20.0]]), hw, jnp.float64)[0]
            n = irdet.stable_substeps(t, dconst)
            u = np.asarray(irdet.fokker_planck(u0, jnp.full(hw, dconst), time=t, substeps=n))
            r = np.arange(41) - 20.0
            py, px = u.sum(1), u.sum(0)
            assert abs((py * r).sum()) < 1e-12 and abs((px * r).sum()) < 1e-12
            np.testing.assert_allclose((py * r**2).sum(), 2 * dconst * t, rtol=1e-9)
            np.testing.assert_allclose((px * r**2).sum(), 2 * dconst * t, rtol=1e-9)
            # and it is the discrete heat kernel: n explicit five-point steps (brute force)
            p = dconst * t / n
            k2 = np.zeros(hw)
            k2[20, 20] = 1.0
            for _ in range(n):
                nb = sum(np.roll(k2, s, axis=a) for s in (1, -1) for a in (0, 1))
                k2 = k2 + p * (nb - 4 * k2)
            np.testing.assert_allclose(u, k2, atol=1e-12)


def test_zero_time_is_point_mask_and_area_grows():
    hw = (25, 25)
    u0 = irdet.point_sources(jnp.array([[12.0, 7.0]]), hw)[0]
    d = jnp.ones(hw)
    np.testing.assert_array_equal(
        np.asarray(irdet.fokker_planck(u0, d, time=0.0, substeps=4)), np.asarray(u0)
    )
    # an empty batch of images diffuses to an empty batch (the stability check's max over
    # no pixel was a NumPy error before)
    e = jnp.zeros((0, *hw))
    assert irdet.fokker_planck(e, e, time=jnp.zeros(0), substeps=4).shape == (0, *hw)
    areas = []
    for t in (0.25, 0.5, 1.0, 2.0):
        u = irdet.fokker_planck(u0, d, time=t, substeps=12)
        areas.append(int(jnp.sum(u / u.max() > 0.2)))
    assert areas == sorted(areas) and areas[-1] > areas[0]


def test_particles_spread_as_brownian_motion():
    d = jnp.full((41, 41), 0.8)
    hist = irdet.particle_diffuse(
        d,
        None,
        jnp.array([[20.0, 20.0]]),
        key=jax.random.key(0),
        time=2.0,
        n_particles=20_000,
        steps=10,
    )[0]
    r = np.arange(41) - 20.0
    py = np.asarray(hist).sum(1)
    # continuous variance 2 D t plus the 1/12 of nearest-pixel binning; 20k samples
    assert abs((py * r).sum()) < 0.05
    np.testing.assert_allclose((py * r**2).sum(), 2 * 0.8 * 2.0 + 1 / 12, rtol=0.05)


@pytest.mark.slow
def test_particles_match_fokker_planck():
    with jax.enable_x64(True):
        _, d, v = _variable_problem((25, 25))
        pts = jnp.array([[12.0, 12.0], [5.0, 18.0]])
        t = 3.0
        u0 = irdet.point_sources(pts, d.shape, jnp.float64)
        n = 4 * irdet.stable_substeps(t, float(d.max()), float(jnp.abs(v).max()))
        fp = irdet.fokker_planck(
            u0,
            jnp.broadcast_to(d, u0.shape),
            jnp.broadcast_to(v, (2, *v.shape)),
            time=t,
            substeps=n,
        )
        hist = irdet.particle_diffuse(
            d, v, pts, key=jax.random.key(3), time=t, n_particles=100_000, steps=40
        )
        np.testing.assert_allclose(np.asarray(hist.sum(axis=(1, 2))), 1.0, atol=1e-9)
        l1 = np.abs(np.asarray(hist) - np.asarray(fp)).sum(axis=(1, 2))
        assert np.all(l1 < 0.05), l1
        # and a wrong model (no drift) is visibly worse for the FP side: the test can fail
        fp0 = irdet.fokker_planck(u0, jnp.broadcast_to(d, u0.shape), time=t, substeps=n)
        assert np.abs(np.asarray(hist) - np.asarray(fp0)).sum(axis=(1, 2)).max() > 0.1


def test_unstable_substeps_raise():
    u0 = irdet.point_sources(jnp.array([[5.0, 5.0]]), (11, 11))[0]
    d = jnp.full((11, 11), 3.2)
    # the repo's single step: D dt = 0.64 > 1/4 -> refused, naming `substeps`
    with pytest.raises(ValueError, match="`substeps`"):
        irdet.fokker_planck(u0, d, time=0.2, substeps=1)
    assert irdet.stable_substeps(0.2, 3.2, 0.5) == 4
    u = irdet.fokker_planck(u0, d, time=0.2, substeps=irdet.stable_substeps(0.2, 3.2))
    assert float(u.min()) >= 0
    with pytest.raises(ValueError, match="`time`"):
        irdet.stable_substeps(float("nan"), 1.0)


def test_synthetic_scene_ground_truth():
    sc = irdet.make_dataset(
        6, key=jax.random.key(0), hw=(32, 32), n_targets=(1, 3), hot_clutter=(0, 1)
    )
    assert sc.image.shape == (6, 32, 32) and sc.points.shape == (6, 3, 2)
    n_valid = np.asarray(sc.valid).sum(1)
    assert n_valid.min() >= 1 and n_valid.max() <= 3
    mask, pts, valid = np.asarray(sc.mask), np.asarray(sc.points).astype(int), np.asarray(sc.valid)
    for b in range(6):
        for k in range(3):
            if valid[b, k]:
                assert mask[b, pts[b, k, 0], pts[b, k, 1]]  # the point lies on its target
                # brighter than the image median: the target is really there
                assert sc.image[b, pts[b, k, 0], pts[b, k, 1]] > np.median(np.asarray(sc.image[b]))
    assert np.all((np.asarray(sc.types) >= 0) == valid)
    again = irdet.make_dataset(
        6, key=jax.random.key(0), hw=(32, 32), n_targets=(1, 3), hot_clutter=(0, 1)
    )
    np.testing.assert_array_equal(np.asarray(again.image), np.asarray(sc.image))
    # the mask level (traced: no recompile) moves only the masks' edges, nested
    half = irdet.make_dataset(
        6, key=jax.random.key(0), hw=(32, 32), n_targets=(1, 3), hot_clutter=(0, 1), mask_level=0.5
    )
    np.testing.assert_array_equal(np.asarray(half.image), np.asarray(sc.image))
    assert np.all(mask | ~np.asarray(half.mask)) and mask.sum() > np.asarray(half.mask).sum()
    with pytest.raises(ValueError, match="`mask_level`"):
        irdet.make_dataset(2, key=jax.random.key(0), mask_level=1.0)
    with pytest.raises(ValueError, match="`min_separation`"):
        irdet.make_dataset(2, key=jax.random.key(0), min_separation=-1.0)


def test_synthetic_min_separation_spreads_targets_and_keeps_the_rest():
    kw = dict(hw=(32, 32), n_targets=(1, 3), hot_clutter=(0, 1))  # the test above's program
    free = irdet.make_dataset(6, key=jax.random.key(0), **kw)
    sep = irdet.make_dataset(6, key=jax.random.key(0), min_separation=10.0, **kw)

    def closest(sc):  # least distance between valid centres (rounded: within sqrt(2) px)
        c, v = np.asarray(sc.points, np.float64), np.asarray(sc.valid)
        d = np.linalg.norm(c[:, :, None] - c[:, None], axis=-1)
        pair = v[:, :, None] & v[:, None] & ~np.eye(c.shape[1], dtype=bool)
        return np.where(pair, d, np.inf).min()

    assert closest(free) < 10.0 - np.sqrt(2)  # independent draws crowd: the oracle can fail
    assert closest(sep) >= 10.0 - np.sqrt(2)
    # the clutter, the target count and the first target come from the same draws
    np.testing.assert_array_equal(np.asarray(sep.valid), np.asarray(free.valid))
    np.testing.assert_array_equal(np.asarray(sep.points[:, 0]), np.asarray(free.points[:, 0]))
    # separated targets never share a GT component: one 8-connected component each
    n_comp = [ndimage.label(m, structure=np.ones((3, 3)))[1] for m in np.asarray(sep.mask)]
    assert n_comp == np.asarray(sep.valid).sum(1).tolist()


def test_synthetic_clutter_hw_windows_a_larger_frame():
    # clutter only (no targets, blobs or noise): the scene is the top-left window of the
    # clutter of a clutter_hw frame drawn from the same key
    kw = dict(n_targets=(1, 1), scr=(0.0, 0.0), hot_clutter=(0, 0), noise_std=0.0)
    big = irdet.make_dataset(4, key=jax.random.key(3), hw=(64, 64), **kw)
    win = irdet.make_dataset(4, key=jax.random.key(3), hw=(32, 32), clutter_hw=(64, 64), **kw)
    np.testing.assert_allclose(
        np.asarray(win.image), np.asarray(big.image)[:, :32, :32], rtol=0, atol=1e-6
    )
    with pytest.raises(ValueError, match="`clutter_hw`"):
        irdet.make_dataset(2, key=jax.random.key(0), hw=(32, 32), clutter_hw=(16, 64))
    with pytest.raises(TypeError, match="clutter_hw"):
        irdet.make_dataset(2, key=jax.random.key(0), hw=(32, 32), clutter_hw=64)


def _otsu_brute(values, weights, bins=64):
    idx = np.clip((values * bins).astype(int), 0, bins - 1)
    hist = np.bincount(idx.ravel(), weights=weights.ravel(), minlength=bins)
    best, thr = 0.0, 0.5
    mids = (np.arange(bins) + 0.5) / bins
    for t in range(1, bins):
        w0, w1 = hist[:t].sum(), hist[t:].sum()
        if w0 <= 0 or w1 <= 0:
            continue
        m0 = (hist[:t] * mids[:t]).sum() / w0
        m1 = (hist[t:] * mids[t:]).sum() / w1
        var = w0 * w1 * (m0 - m1) ** 2 / hist.sum() ** 2
        if var > best + 1e-12:
            best, thr = var, t / bins
    return thr


def test_otsu_matches_brute_force_and_falls_back():
    rng = np.random.default_rng(0)
    for _ in range(3):
        vals = np.concatenate([rng.uniform(0, 0.3, 200), rng.uniform(0.55, 1.0, 40)])
        w = (rng.uniform(size=vals.shape) > 0.2).astype(np.float32)
        got = float(irdet.otsu_threshold(jnp.asarray(vals, jnp.float32), jnp.asarray(w)))
        assert got == pytest.approx(_otsu_brute(vals, w), abs=1e-6)
    const = jnp.zeros(50)  # empty/constant map: Otsu undefined -> 0.5
    assert float(irdet.otsu_threshold(const, jnp.ones(50))) == 0.5


@pytest.mark.slow  # compiles the scene generator and pseudo_mask afresh (~7 s)
def test_pseudo_mask_properties_and_no_mask_input():
    sc = irdet.make_dataset(4, key=jax.random.key(2), hw=(32, 32), n_targets=(1, 2))
    out = irdet.pseudo_mask(sc.image, sc.points, sc.valid)
    assert out.mask.shape == (4, 32, 32) and out.threshold.shape == (4,)
    score = np.asarray(out.score)
    assert score.min() >= 0 and score.max() <= 1 + 1e-6
    pts, valid = np.asarray(sc.points).astype(int), np.asarray(sc.valid)
    for b in range(4):
        for k in range(2):
            if valid[b, k]:
                assert out.mask[b, pts[b, k, 0], pts[b, k, 1]]
    # support: only within the fixed 17x17 boxes around valid points
    box = np.zeros((4, 32, 32), bool)
    for b in range(4):
        for k in range(2):
            if valid[b, k]:
                y, x = pts[b, k]
                box[b, max(0, y - 8) : y + 9, max(0, x - 8) : x + 9] = True
    assert not np.any(np.asarray(out.mask) & ~box)
    # invalid points change nothing
    moved = sc.points.at[..., 1, :].set(jnp.where(sc.valid[..., 1:2], sc.points[..., 1, :], 3.0))
    np.testing.assert_array_equal(
        np.asarray(irdet.pseudo_mask(sc.image, moved, sc.valid).mask), np.asarray(out.mask)
    )
    # the centre prior (same compiled program: `center` is traced) only lowers scores, and
    # only on targets the leak-free prior calls Point
    plain = np.asarray(irdet.pseudo_mask(sc.image, sc.points, sc.valid, center=0.0).score)
    assert np.all(score <= plain + 1e-6)
    kind = np.asarray(irdet.point_priors(sc.image, sc.points).kind)
    has_point = np.any((kind == irdet.POINT) & valid, axis=1)
    lowered = np.any(score < plain - 1e-6, axis=(1, 2))
    assert np.all(lowered <= has_point) and np.any(lowered)


def test_pseudo_mask_bad_inputs():
    img = jnp.zeros((16, 16))
    pts = jnp.array([[8.0, 8.0]])
    ok = jnp.array([True])
    with pytest.raises(TypeError, match="`image`"):
        irdet.pseudo_mask(jnp.zeros(16), pts, ok)
    with pytest.raises(TypeError, match="`valid`"):
        irdet.pseudo_mask(img, pts, jnp.array([1.0]))
    with pytest.raises(ValueError, match="`substeps`"):
        irdet.pseudo_mask(img, pts, ok, time=2.0, substeps=1)
    with pytest.raises(ValueError, match="`weight`"):  # NaN fails the check too
        irdet.pseudo_mask(img, pts, ok, weight=float("nan"))
    with pytest.raises(ValueError, match="`center`"):
        irdet.pseudo_mask(img, pts, ok, center=1.5)
    for bad, err in (((1.0, 0.0), ValueError), ((0.0, np.inf), ValueError), ("01", TypeError)):
        with pytest.raises(err, match="value_range"):
            irdet.pseudo_mask(img, pts, ok, value_range=bad)


def test_pseudo_mask_checks_each_images_slopes():
    """The parameter bound assumes |grad I| <= 1/2 inside ``value_range``; a steeper image
    (here a step of 4 units at the fixed [0, 1] scale) fails the run-time check on its own
    D and drift, eagerly and under jit, and passes at a scale that covers it."""
    img = jnp.zeros((16, 16)).at[:, 8:].set(4.0)
    pts, ok = jnp.array([[8.0, 4.0]]), jnp.array([True])
    with pytest.raises(ValueError, match="`substeps`"):
        irdet.pseudo_mask(img, pts, ok)
    with pytest.raises(Exception, match="substeps"):
        jax.block_until_ready(jax.jit(lambda i: irdet.pseudo_mask(i, pts, ok).mask)(img))
    out = irdet.pseudo_mask(img, pts, ok, value_range=(0.0, 4.0))
    assert bool(out.mask[8, 4]) and np.all(np.isfinite(np.asarray(out.score)))


def test_pseudo_mask_scale_does_not_depend_on_the_frame():
    """A target's label is the same on the whole frame and on a window around it: the
    fixed scale does not see pixels far from the target (the per-image min-max did:
    labels of 32x32 windows scored lower than the same targets labelled on 128x128)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:48, :48]
    img = 0.4 + 0.03 * rng.standard_normal((48, 48))
    img += 0.35 * np.exp(-((yy - 24) ** 2 + (xx - 26) ** 2) / (2 * 1.5**2))
    img[2, 2], img[45, 3] = 0.95, 0.0  # the frame's extremes, outside the window
    img = jnp.asarray(img, jnp.float32)
    win = img[8:40, 8:40]  # 32x32; the target 16 px from its border, beyond the
    # reach of 12 sub-steps of the 5-point stencil plus the 5x5 texture window
    p_full, p_win, ok = jnp.array([[24.0, 26.0]]), jnp.array([[16.0, 18.0]]), jnp.array([True])
    for vr, same in (((0.0, 1.0), True), (None, False)):
        full = irdet.pseudo_mask(img, p_full, ok, value_range=vr)
        part = irdet.pseudo_mask(win, p_win, ok, value_range=vr)
        gap = np.abs(np.asarray(full.score)[8:40, 8:40] - np.asarray(part.score)).max()
        if same:
            assert gap < 1e-5
            np.testing.assert_array_equal(np.asarray(full.mask)[8:40, 8:40], part.mask)
        else:
            assert gap > 0.02  # the per-image min-max moves D and the drift


def test_audit_bad_inputs():
    # wave-24 audit: each was a silent NaN or wrong value
    nan = float("nan")
    v, w = np.linspace(0, 1, 10, dtype=np.float32), np.ones(10, np.float32)
    for bad, name in (
        (lambda: irdet.otsu_threshold(v, -w), "weights"),
        (lambda: irdet.otsu_threshold(v * nan, w), "values"),
        (lambda: irdet.phi_loss(np.zeros(4), np.full((4, 4), 0.5), np.full((4, 4), 0.5),
                                pred_weight=nan), "pred_weight"),
        (lambda: irdet.make_dataset(1, key=jax.random.key(0), clutter_beta=nan), "clutter_beta"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            bad()
    with pytest.raises(TypeError, match="valid"):
        irdet.disk_mask(np.zeros((2, 2), np.float32), np.ones(2, np.float32), hw=(8, 8))


def test_nan_points_raise():
    """A NaN valid point was placed silently on a clipped border pixel (wave 25); an invalid
    slot may hold anything."""
    img = np.zeros((16, 16), np.float32)
    pts = np.array([[8.0, 8.0], [np.nan, 3.0]], np.float32)
    with pytest.raises(ValueError, match="`points`"):
        irdet.pseudo_mask(img, pts, np.array([True, True]))
    irdet.pseudo_mask(img, pts, np.array([True, False]))  # the NaN slot is not valid
    with pytest.raises(ValueError, match="`points`"):
        irdet.point_priors(img, pts)
    with pytest.raises(ValueError, match="`points`"):
        irdet.point_sources(pts, (16, 16))
    with pytest.raises(ValueError, match="`points`"):
        irdet.particle_diffuse(img, None, pts, key=jax.random.key(0), time=1.0, steps=1)
