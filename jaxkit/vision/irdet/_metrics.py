"""IR small-target metrics: IoU, nIoU, Pd, Fa, and point labels from masks (host-side).

These run in NumPy/SciPy on the host (connected components are not jittable), so they
are plain functions, not jitted, and are tested directly. The rules follow the
standard IRSTD evaluation used by the authors' code (``utils/metrics.py``):

* binary predictions (threshold the probabilities first, e.g. at 0.5);
* IoU: dataset-level ``sum(intersection) / sum(union)``; nIoU: mean of per-image IoU;
* components are **8-connected**; a ground-truth component is detected when the
  centroid of some not-yet-matched predicted component lies at Euclidean distance
  **< 3 px** from its centroid (greedy one-to-one: GT components in label order, each
  takes the first such predicted component in label order);
* Pd: matched GT components / all GT components; Fa: pixels of the *unmatched*
  predicted components / all pixels.

Empty cases never give a silent NaN: an empty union (IoU), an image with an empty
union (nIoU with ``empty="raise"``), or no ground-truth component at all (Pd) raise
``ValueError`` with the reason.
"""

import math
from typing import NamedTuple

import numpy as np
from scipy import ndimage

from jaxkit import _validate

_EIGHT = np.ones((3, 3), dtype=bool)


def _as_masks(pred, gt):
    pred = np.asarray(pred)
    gt = np.asarray(gt)
    for name, a in (("pred", pred), ("gt", gt)):
        if a.dtype != np.bool_:
            raise TypeError(
                f"`{name}` must be a boolean mask (threshold probabilities first), got {a.dtype}."
            )
        if a.ndim not in (2, 3):
            raise TypeError(f"`{name}` must be [H, W] or [N, H, W], got shape {a.shape}.")
    if pred.shape != gt.shape:
        raise TypeError(f"`pred` {pred.shape} and `gt` {gt.shape} must have the same shape.")
    if pred.ndim == 2:
        pred, gt = pred[None], gt[None]
    return pred, gt


def iou(pred, gt) -> float:
    """Dataset-level IoU ``sum |P & G| / sum |P | G|`` over all images (host-side).

    Args:
      pred: Boolean predictions ``[H, W]`` or ``[N, H, W]``.
      gt: Boolean ground truth of the same shape.

    Raises:
      TypeError: Non-boolean masks, wrong rank, mismatched shapes.
      ValueError: Both masks empty everywhere (the union is empty: IoU undefined).
    """
    pred, gt = _as_masks(pred, gt)
    union = np.logical_or(pred, gt).sum()
    if union == 0:
        raise ValueError("IoU is undefined: `pred` and `gt` are both empty (empty union).")
    return float(np.logical_and(pred, gt).sum() / union)


def niou(pred, gt, *, empty: str = "raise") -> float:
    """Mean per-image IoU (nIoU, host-side).

    Args:
      pred: Boolean predictions ``[N, H, W]`` (or one ``[H, W]``).
      gt: Boolean ground truth of the same shape.
      empty: What an image with an empty union (no target, no prediction) counts as:
        ``"raise"`` (ValueError naming the images), ``"one"`` (a perfect 1) or
        ``"skip"`` (left out of the mean; ValueError if every image is skipped).

    Raises:
      TypeError: As :func:`iou`, or a non-string ``empty``.
      ValueError: Unknown ``empty``, or an undefined mean as described.
    """
    _validate.one_of(("raise", "one", "skip"), empty=empty)
    pred, gt = _as_masks(pred, gt)
    inter = np.logical_and(pred, gt).sum(axis=(1, 2))
    union = np.logical_or(pred, gt).sum(axis=(1, 2))
    void = union == 0
    if np.any(void) and empty == "raise":
        raise ValueError(
            f"nIoU is undefined for images {np.flatnonzero(void).tolist()} (empty union); "
            "pass `empty`='one' or 'skip' to choose."
        )
    per = np.where(void, 1.0, inter / np.maximum(union, 1))
    if empty == "skip":
        per = per[~void]
        if per.size == 0:
            raise ValueError("nIoU is undefined: every image has an empty union (`empty`='skip').")
    return float(per.mean())


def _components(mask):
    lab, n = ndimage.label(mask, structure=_EIGHT)
    if n == 0:
        return np.zeros((0, 2)), np.zeros((0,), int), lab
    idx = np.arange(1, n + 1)
    cent = np.asarray(ndimage.center_of_mass(mask, lab, idx), dtype=np.float64).reshape(n, 2)
    area = np.asarray(ndimage.sum_labels(mask, lab, idx), dtype=np.int64)
    return cent, area, lab


_EIGHT_STACK = np.zeros((3, 3, 3), dtype=bool)
_EIGHT_STACK[1] = True  # 8-connected within an image, never across images


def _stack_components(masks):
    """Components of ``[N, H, W]`` masks: image index, centroid (row, col), area each.

    Centroids are means of integer pixel coordinates (bincount sums: exact in float64,
    the same values as ``ndimage.center_of_mass``, several times faster here).
    """
    lab, n = ndimage.label(masks, structure=_EIGHT_STACK)
    zz, yy, xx = np.nonzero(lab)
    lv = lab[zz, yy, xx]
    area = np.bincount(lv, minlength=n + 1)[1:]
    safe = np.maximum(area, 1)  # every label has pixels; the floor only guards n == 0
    mean = [np.bincount(lv, weights=c, minlength=n + 1)[1:] / safe for c in (zz, yy, xx)]
    return np.rint(mean[0]).astype(int), np.stack(mean[1:], axis=-1), area.astype(np.int64)


class PdFa(NamedTuple):
    """Result of :func:`pd_fa`.

    Attributes:
      pd: Probability of detection (matched GT components / GT components).
      fa: False-alarm rate (unmatched predicted pixels / all pixels).
      n_gt: Number of GT components.
      n_matched: Number of matched GT components.
      false_pixels: Pixels of unmatched predicted components.
    """

    pd: float
    fa: float
    n_gt: int
    n_matched: int
    false_pixels: int


def _by_image(masks):
    """Components of ``[N, H, W]`` masks grouped by image: ``(lo, hi, centroids, areas)``.

    Image ``b``'s components sit at ``lo[b]:hi[b]``, in its own raster label order.
    """
    img, cent, area = _stack_components(masks)
    imgs = np.arange(len(masks))
    lo, hi = np.searchsorted(img, imgs, "left"), np.searchsorted(img, imgs, "right")
    return lo, hi, cent.tolist(), area  # Python floats: the pair loop is host-bound


def _match(gt_parts, pred_parts, n_pred, distance):
    """Matched GT components and false pixels of each of ``n_pred`` predicted images.

    Predicted image ``b`` is scored against GT image ``b % n_gt_images`` (the greedy
    centroid rule of :func:`pd_fa`).
    """
    g_lo, g_hi, gc, _ = gt_parts
    p_lo, p_hi, pc, pa = pred_parts
    matched = np.zeros(n_pred, np.int64)
    false_px = np.zeros(n_pred, np.int64)
    for b in range(n_pred):
        g = b % len(g_lo)
        free = list(range(p_lo[b], p_hi[b]))
        for cy, cx in gc[g_lo[g] : g_hi[g]]:
            for j in free:
                if math.sqrt((pc[j][0] - cy) ** 2 + (pc[j][1] - cx) ** 2) < distance:
                    free.remove(j)
                    matched[b] += 1
                    break
        false_px[b] = int(pa[free].sum()) if free else 0
    return matched, false_px


def _check_distance(distance):
    _validate.real(distance, name="distance")  # NumPy's error would name nothing
    if not (np.isfinite(distance) and distance > 0):
        raise ValueError(f"`distance` must be finite and > 0, got distance={distance!r}.")


def _no_target():
    return ValueError("Pd is undefined: `gt` has no target component in any image.")


def pd_fa(pred, gt, *, distance: float = 3.0) -> PdFa:
    """Pd and Fa with 8-connected components and the centroid rule (host-side).

    Args:
      pred: Boolean predictions ``[H, W]`` or ``[N, H, W]``.
      gt: Boolean ground truth of the same shape.
      distance: Match when the centroid distance is strictly below this (px, > 0).

    Raises:
      TypeError: As :func:`iou`.
      ValueError: ``distance <= 0`` or no GT component in any image (Pd undefined).
    """
    _check_distance(distance)
    pred, gt = _as_masks(pred, gt)
    # every image labelled in one call (no connection across images): the labels of an
    # image are consecutive and in its own raster order, as labelling it alone would give
    gt_parts = _by_image(gt)
    matched, false_px = _match(gt_parts, _by_image(pred), len(pred), distance)
    n_gt = len(gt_parts[2])
    if n_gt == 0:
        raise _no_target()
    n_matched, false_px = int(matched.sum()), int(false_px.sum())
    return PdFa(n_matched / n_gt, false_px / pred.size, n_gt, n_matched, false_px)


class PdFaCurve(NamedTuple):
    """Result of :func:`pd_fa_curve`: one entry per threshold (NumPy arrays ``[T]``).

    Attributes:
      threshold: The thresholds, in the order given.
      pd: Probability of detection at each threshold.
      fa: False-alarm rate at each threshold.
      n_gt: Number of GT components (the same at every threshold).
      n_matched: Matched GT components at each threshold.
      false_pixels: Pixels of unmatched predicted components at each threshold.
    """

    threshold: np.ndarray
    pd: np.ndarray
    fa: np.ndarray
    n_gt: int
    n_matched: np.ndarray
    false_pixels: np.ndarray


def pd_fa_curve(prob, gt, *, thresholds, distance: float = 3.0) -> PdFaCurve:
    """Pd and Fa of ``prob > t`` for every threshold ``t`` at once (host-side, ROC-style).

    The counts equal those of ``pd_fa(prob > t, gt, distance=distance)`` at each ``t``;
    the ground truth is labelled once and every thresholded mask in one labelling pass.

    Args:
      prob: Real scores ``[H, W]`` or ``[N, H, W]`` (probabilities, logits, ...).
      gt: Boolean ground truth of the same shape.
      thresholds: 1-D real thresholds ``[T]`` (finite; any order).
      distance: Match when the centroid distance is strictly below this (px, > 0).

    Raises:
      TypeError: Non-real or wrongly ranked ``prob``, non-1-D ``thresholds``, as
        :func:`iou` for ``gt``.
      ValueError: ``distance <= 0``, a non-finite ``prob``, an empty or non-finite
        ``thresholds``, or no GT component in any image (Pd undefined).
    """
    _check_distance(distance)
    prob = np.asarray(prob)
    if prob.dtype == np.bool_ or not np.issubdtype(prob.dtype, np.number):
        raise TypeError(f"`prob` must hold real scores, got {prob.dtype}.")
    th = np.asarray(thresholds)
    if th.ndim != 1 or not np.issubdtype(th.dtype, np.number) or th.dtype == np.bool_:
        raise TypeError(f"`thresholds` must be a 1-D real array, got {th.dtype} {th.shape}.")
    if th.size == 0 or not np.all(np.isfinite(th)):
        raise ValueError(f"`thresholds` must be non-empty and finite, got {th.tolist()}.")
    if prob.ndim not in (2, 3):
        raise TypeError(f"`prob` must be [H, W] or [N, H, W], got shape {prob.shape}.")
    if not np.all(np.isfinite(prob)):
        # NaN compares False with every threshold: it would count as "no target" silently
        raise ValueError("`prob` must be finite (it holds NaN or inf).")
    if np.shape(gt) != prob.shape:
        raise TypeError(f"`prob` {prob.shape} and `gt` {np.shape(gt)} must have the same shape.")
    _, gt = _as_masks(np.zeros(prob.shape, bool), gt)  # gt's dtype check; [N, H, W]
    prob = prob.reshape(gt.shape)
    gt_parts = _by_image(gt)
    if len(gt_parts[2]) == 0:
        raise _no_target()
    # [T * N, H, W]: threshold-major, so predicted image b is GT image b % N
    preds = (prob[None] > th.reshape(-1, 1, 1, 1)).reshape(-1, *gt.shape[1:])
    matched, false_px = _match(gt_parts, _by_image(preds), len(preds), distance)
    matched = matched.reshape(th.size, -1).sum(1)
    false_px = false_px.reshape(th.size, -1).sum(1)
    n_gt = len(gt_parts[2])
    return PdFaCurve(th, matched / n_gt, false_px / gt.size, n_gt, matched, false_px)


def points_from_masks(mask, *, max_targets: int | None = None):
    """Point labels from GT masks: the rounded centroid of each 8-connected component.

    Simulates the annotator's single click per target on datasets that ship dense masks
    (SIRST, NUDT-SIRST, IRSTD-1k). It returns *only* the points: no target type and no
    box size (the repo derives both from the mask, leaking mask information into the
    point priors; use :func:`point_priors` for leak-free priors from the image).

    Args:
      mask: Boolean masks ``[N, H, W]`` (or one ``[H, W]``).
      max_targets: Slots per image (default: the largest count); extra components are
        an error, never dropped silently.

    Returns:
      ``(points [N, K, 2] float32 (row, col), valid [N, K] bool)`` as NumPy arrays.

    Raises:
      TypeError: Non-boolean mask or wrong rank.
      ValueError: An image with more than ``max_targets`` components.
    """
    m = np.asarray(mask)
    if m.dtype != np.bool_ or m.ndim not in (2, 3):
        raise TypeError(f"`mask` must be a boolean [H, W] or [N, H, W], got {m.dtype} {m.shape}.")
    if m.ndim == 2:
        m = m[None]
    cents = [_components(x)[0] for x in m]
    if max_targets is None:
        k = max([len(c) for c in cents] + [1])
    else:
        k = _validate.python_int(max_targets, name="max_targets", minimum=1)
    pts = np.zeros((len(m), k, 2), np.float32)
    valid = np.zeros((len(m), k), bool)
    for i, c in enumerate(cents):
        if len(c) > k:
            raise ValueError(f"image {i} has {len(c)} targets > `max_targets`={k}.")
        pts[i, : len(c)] = np.round(c)
        valid[i, : len(c)] = True
    return pts, valid
