"""IR metrics against hand-built masks (spec §4.5) and their empty-mask errors."""

import numpy as np
import pytest

from jaxkit.vision import irdet


def _blank(n=None):
    return np.zeros((20, 20) if n is None else (n, 20, 20), bool)


def _shifted_pred(extra_col):
    """A 9-pixel column at col 13 (rows 6..14) plus one pixel at (10, extra_col).

    Its centroid is (10, (9 * 13 + extra_col) / 10): 12.9 for extra_col 12, 13.1 for 14.
    """
    p = _blank()
    p[6:15, 13] = True
    p[10, extra_col] = True
    return p


def test_pd_centroid_rule_hit_at_2_9_miss_at_3_1():
    gt = _blank()
    gt[10, 10] = True
    hit = irdet.pd_fa(_shifted_pred(12), gt)  # centroid distance 2.9 px
    assert hit.pd == 1.0 and hit.n_matched == 1 and hit.fa == 0.0
    miss = irdet.pd_fa(_shifted_pred(14), gt)  # 3.1 px
    assert miss.pd == 0.0 and miss.false_pixels == 10 and miss.fa == pytest.approx(10 / 400)


def test_eight_connectivity_and_fa_counts_only_unmatched():
    gt = _blank()
    gt[5, 5] = True
    pred = _blank()
    pred[5, 5] = pred[6, 6] = True  # diagonal: one 8-connected component, centroid (5.5, 5.5)
    pred[15:17, 15:17] = True  # a false alarm of 4 pixels
    r = irdet.pd_fa(pred, gt)
    assert r.pd == 1.0 and r.false_pixels == 4 and r.fa == pytest.approx(4 / 400)
    # one predicted component cannot detect two targets (greedy one-to-one)
    gt2 = _blank()
    gt2[5, 5] = gt2[5, 7] = True
    pred2 = _blank()
    pred2[5, 6] = True
    r2 = irdet.pd_fa(pred2, gt2)
    assert r2.n_gt == 2 and r2.n_matched == 1 and r2.pd == 0.5


def test_pd_fa_batch_never_joins_components_across_images():
    # image 0's bottom row and image 1's top row hold components in the same columns: as
    # one [N, H, W] block they would be 8-connected through the image boundary
    gt, pred = _blank(2), _blank(2)
    gt[0, 19, 5] = gt[1, 0, 5] = True
    pred[0, 19, 5:7] = True  # hits image 0's target
    pred[1, 0, 15] = True  # a 1-pixel false alarm; image 1's target is missed
    r = irdet.pd_fa(pred, gt)
    assert (r.n_gt, r.n_matched, r.false_pixels) == (2, 1, 1)


def _pd_fa_reference(pred, gt, distance=3.0):
    """Per-image loop: scipy 8-connected labels, GT components in label order each take
    the first free predicted component whose centroid is < ``distance`` px away."""
    from scipy import ndimage

    n_gt = hit = false_px = 0
    for p, g in zip(pred, gt, strict=True):
        comps = []
        for m in (g, p):
            lab, n = ndimage.label(m, structure=np.ones((3, 3)))
            comps.append([np.argwhere(lab == i) for i in range(1, n + 1)])
        free = list(comps[1])
        for c in comps[0]:
            for q in free:
                if np.hypot(*(q.mean(0) - c.mean(0))) < distance:
                    free = [f for f in free if f is not q]
                    hit += 1
                    break
        n_gt += len(comps[0])
        false_px += sum(len(f) for f in free)
    return n_gt, hit, false_px


def test_pd_fa_matches_a_per_image_reference_on_random_masks():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n, h, w = rng.integers(1, 5), rng.integers(3, 16), rng.integers(3, 16)
        pred = rng.random((n, h, w)) < 0.25
        gt = rng.random((n, h, w)) < 0.15
        gt[0, 0, 0] = True
        r = irdet.pd_fa(pred, gt)
        assert (r.n_gt, r.n_matched, r.false_pixels) == _pd_fa_reference(pred, gt)


def test_pd_fa_curve_counts_equal_one_pd_fa_call_per_threshold():
    rng = np.random.default_rng(1)
    for _ in range(6):
        n, h, w = rng.integers(1, 5), rng.integers(3, 16), rng.integers(3, 16)
        prob = rng.random((n, h, w)) ** 2
        gt = rng.random((n, h, w)) < 0.15
        gt[-1, -1, -1] = True
        th = np.array([0.9, 0.05, 0.5, 2.0, 0.3])  # any order; 2.0: nothing predicted
        c = irdet.pd_fa_curve(prob, gt, thresholds=th, distance=2.5)
        for i, t in enumerate(th):
            r = irdet.pd_fa(prob > t, gt, distance=2.5)
            got = (c.threshold[i], c.n_gt, c.n_matched[i], c.false_pixels[i], c.pd[i], c.fa[i])
            assert got == (t, r.n_gt, r.n_matched, r.false_pixels, r.pd, r.fa)
            # and the independent per-image loop (pd_fa shares the matching code)
            assert got[1:4] == _pd_fa_reference(prob > t, gt, distance=2.5)
        assert c.n_matched[3] == c.false_pixels[3] == 0
    one = irdet.pd_fa_curve(prob[0], gt[0], thresholds=[0.5])  # one [H, W] image
    assert one.n_matched[0] == irdet.pd_fa(prob[0] > 0.5, gt[0]).n_matched
    with pytest.raises(TypeError, match="`prob`"):
        irdet.pd_fa_curve(gt, gt, thresholds=[0.5])
    with pytest.raises(TypeError, match="same shape"):
        irdet.pd_fa_curve(prob[:, :2], gt, thresholds=[0.5])
    with pytest.raises(TypeError, match="`thresholds`"):
        irdet.pd_fa_curve(prob, gt, thresholds=[[0.5]])
    with pytest.raises(ValueError, match="`thresholds`"):
        irdet.pd_fa_curve(prob, gt, thresholds=[0.5, np.nan])
    with pytest.raises(ValueError, match="Pd is undefined"):
        irdet.pd_fa_curve(prob, np.zeros_like(gt), thresholds=[0.5])
    bad = prob.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="`prob` must be finite"):
        irdet.pd_fa_curve(bad, gt, thresholds=[0.5])


def test_iou_niou_against_counts():
    gt = _blank(2)
    pred = _blank(2)
    gt[0, 2:6, 2:6] = True  # 16 px
    pred[0, 3:7, 2:6] = True  # 16 px, overlap 12 -> IoU 12/20
    gt[1, 10, 10] = True
    pred[1, 10, 10:12] = True  # overlap 1, union 2
    assert irdet.iou(pred, gt) == pytest.approx(13 / 22)
    assert irdet.niou(pred, gt) == pytest.approx((12 / 20 + 1 / 2) / 2)
    assert irdet.iou(gt, gt) == 1.0


def test_empty_masks_raise_or_are_chosen_explicitly():
    empty = _blank(2)
    with pytest.raises(ValueError, match="empty union"):
        irdet.iou(empty, empty)
    gt = _blank(2)
    gt[0, 3, 3] = True
    with pytest.raises(ValueError, match="images \\[1\\]"):
        irdet.niou(gt, gt)
    assert irdet.niou(gt, gt, empty="one") == 1.0
    assert irdet.niou(_blank(2), gt, empty="skip") == 0.0
    with pytest.raises(ValueError, match="every image"):
        irdet.niou(empty, empty, empty="skip")
    with pytest.raises(ValueError, match="Pd is undefined"):
        irdet.pd_fa(gt, empty)
    # no prediction at all: Pd 0, Fa 0 (defined, not NaN)
    r = irdet.pd_fa(empty, gt)
    assert r.pd == 0.0 and r.fa == 0.0


def test_metric_bad_inputs():
    with pytest.raises(TypeError, match="`pred`"):
        irdet.iou(np.zeros((4, 4)), _blank()[:4, :4])
    with pytest.raises(TypeError, match="same shape"):
        irdet.iou(_blank(), _blank(2))
    with pytest.raises(ValueError, match="`empty`"):
        irdet.niou(_blank(), _blank(), empty="zero")
    with pytest.raises(ValueError, match="`distance`"):
        irdet.pd_fa(_blank(), _blank(), distance=0.0)


def test_points_from_masks_are_centroids_only():
    m = _blank(2)
    m[0, 2:5, 2:5] = True  # centroid (3, 3)
    m[0, 10, 10] = m[0, 11, 11] = True  # diagonal pair, one component, centroid (10.5, 10.5)
    m[1, 7, 8] = True
    pts, valid = irdet.points_from_masks(m)
    assert pts.shape == (2, 2, 2) and valid.tolist() == [[True, True], [True, False]]
    assert pts[0, 0].tolist() == [3.0, 3.0] and pts[1, 0].tolist() == [7.0, 8.0]
    assert pts[0, 1].tolist() == [10.0, 10.0]  # round-half-even of 10.5: documented rounding
    with pytest.raises(ValueError, match="`max_targets`"):
        irdet.points_from_masks(m, max_targets=1)
    with pytest.raises(TypeError, match="`mask`"):
        irdet.points_from_masks(m.astype(np.uint8))


def test_point_priors_read_the_image_not_a_mask():
    img = np.full((1, 32, 32), 0.4, np.float32)
    img[0, 8, 8] = 1.0  # a one-pixel target
    img[0, 18:26, 18:26] = 1.0  # a 64-pixel blob
    pri = irdet.point_priors(img, np.array([[[8.0, 8.0], [22.0, 22.0]]], np.float32), box=13)
    assert pri.area.tolist() == [[1.0, 64.0]]
    assert pri.kind.tolist() == [[irdet.POINT, irdet.SPOT]]


def _priors_numpy(img, pts, box):
    """Per-target box statistics by explicit NumPy loops (the pixels within box // 2)."""
    hh, ww = img.shape
    r = box // 2
    out = []
    for p in pts:
        iy, ix = (int(np.clip(np.round(v), 0, n - 1)) for v, n in zip(p, (hh, ww), strict=True))
        vals = img[max(iy - r, 0) : iy + r + 1, max(ix - r, 0) : ix + r + 1].ravel()
        med = np.median(vals)
        mad = np.median(np.abs(vals - med))
        peak = img[iy, ix]
        area = np.sum(vals >= 0.5 * (peak + med))
        out.append((area, (peak - med) / max(1.4826 * mad, 1e-12)))
    return np.array(out)


@pytest.mark.parametrize("box", [3, 13])
def test_point_priors_equal_per_target_numpy_boxes_at_borders(box):
    # The boxes are read as NaN-padded crops: targets at and past the frame's edges must see
    # exactly the in-frame pixels of their box (a tied image too: medians of repeated values).
    rng = np.random.default_rng(3)
    img = np.round(rng.random((2, 20, 27)) * 8).astype(np.float32) / 8
    pts = np.array(
        [[[0, 0], [19, 26], [-4.0, 30.0], [10.4, 13.6]], [[2, 25], [18, 1], [7, 7], [25, -3]]],
        np.float32,
    )
    pri = irdet.point_priors(img, pts, box=box)
    for b in range(2):
        want = _priors_numpy(img[b], pts[b], box)
        np.testing.assert_array_equal(np.asarray(pri.area[b]), want[:, 0])
        np.testing.assert_allclose(np.asarray(pri.contrast[b]), want[:, 1], rtol=1e-6)
