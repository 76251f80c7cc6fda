"""Host-side loaders for the SIRST (NUAA), NUDT-SIRST and IRSTD-1k folder layouts.

Not jitted (file I/O). Reads a local folder only (no download). Tolerated variants:

* image folder ``images/`` (SIRST, NUDT-SIRST) or ``IRSTD1k_Img/`` (IRSTD-1k);
* mask folder ``masks/``, ``labels/``, ``full-supervised/`` or ``IRSTD1k_Label/``;
* mask file names equal to the image id or with a suffix such as ``_pixels0`` (SIRST);
* split files ``mode/{split}.txt`` (the repo's SIRST3), ``{split}.txt`` at the root
  (IRSTD-1k), ``idx_*/{split}.txt`` (SIRST's ``idx_427``) or ``img_idx/{split}*.txt``
  (NUDT-SIRST in BasicIRSTD), one id per line (extension optional);
* images as PNG/BMP/JPG; masks are binarised at > 127 (resize masks with nearest, never
  bilinear, if you resize).

Needs Pillow (``pip install jaxkit[irstd]``).
"""

import glob
import os
from typing import NamedTuple

import numpy as np

from jaxkit import _validate
from jaxkit._extras import require

IMAGE_DIRS = ("images", "IRSTD1k_Img")
MASK_DIRS = ("masks", "labels", "full-supervised", "IRSTD1k_Label")
MASK_SUFFIXES = ("", "_pixels0")
EXTENSIONS = (".png", ".bmp", ".jpg", ".jpeg", ".tif", ".tiff")


class IRSTDSplit(NamedTuple):
    """A loaded split: ids, grey images in [0, 1] (float32 ``[H, W]``), boolean masks."""

    ids: list[str]
    images: list[np.ndarray]
    masks: list[np.ndarray]


def _first_dir(root, names, what):
    for n in names:
        if os.path.isdir(os.path.join(root, n)):
            return os.path.join(root, n)
    raise FileNotFoundError(f"no {what} folder under {root!r}: looked for {list(names)}.")


def _split_file(root, split):
    tried = [os.path.join(root, "mode", f"{split}.txt"), os.path.join(root, f"{split}.txt")]
    for path in tried:
        if os.path.isfile(path):
            return path
    for pattern in (f"idx_*/{split}.txt", f"img_idx/{split}.txt", f"img_idx/{split}_*.txt"):
        hits = sorted(glob.glob(os.path.join(root, pattern)))
        tried.append(os.path.join(root, pattern))
        if hits:
            return hits[0]
    raise FileNotFoundError(f"no split file for split {split!r} under {root!r}: tried {tried}.")


def _find(folder, stem, suffixes):
    for suf in suffixes:
        for ext in EXTENSIONS:
            path = os.path.join(folder, stem + suf + ext)
            if os.path.isfile(path):
                return path
    return None


def load_irstd_folder(root: str, split: str, *, limit: int | None = None) -> IRSTDSplit:
    """Load one split of a SIRST / NUDT-SIRST / IRSTD-1k style folder (host-side).

    Args:
      root: Dataset folder (e.g. ``.../IRSTD-1k``).
      split: Split name (``"train"``, ``"trainval"``, ``"val"``, ``"test"``).
      limit: Read at most this many ids (for quick runs).

    Returns:
      :class:`IRSTDSplit` with images converted to grey float32 in [0, 1] and masks
      binarised (``> 127``).

    Raises:
      FileNotFoundError: ``root`` missing, no image/mask folder, no split file, or an
        id whose image or mask is absent (the message names what was tried).
      ValueError: An empty split file, or an image and mask of different sizes.
      ImportError: Pillow is not installed.
    """
    if limit is not None:
        limit = _validate.python_int(limit, name="limit", minimum=0)
    if not os.path.isdir(root):
        raise FileNotFoundError(
            f"dataset folder {root!r} does not exist (download SIRST / NUDT-SIRST / IRSTD-1k "
            "yourself and pass its local path as `root`)."
        )
    pil_image = require("PIL.Image", extra="irstd", what="load_irstd_folder needs Pillow")
    img_dir = _first_dir(root, IMAGE_DIRS, "image")
    mask_dir = _first_dir(root, MASK_DIRS, "mask")
    with open(_split_file(root, split)) as f:
        ids = [os.path.splitext(line.strip())[0] for line in f if line.strip()]
    if not ids:
        raise ValueError(f"the split file for {split!r} under {root!r} lists no ids.")
    if limit is not None:
        ids = ids[:limit]
    images, masks = [], []
    for i in ids:
        ip = _find(img_dir, i, ("",))
        mp = _find(mask_dir, i, MASK_SUFFIXES)
        if ip is None or mp is None:
            missing = "image" if ip is None else "mask"
            raise FileNotFoundError(
                f"{missing} for id {i!r} not found in {img_dir!r} / {mask_dir!r}."
            )
        with pil_image.open(ip) as im:
            img = np.asarray(im.convert("L"), np.float32) / 255.0
        with pil_image.open(mp) as im:
            m = np.asarray(im.convert("L")) > 127
        if img.shape != m.shape:
            raise ValueError(f"id {i!r}: image {img.shape} and mask {m.shape} differ in size.")
        images.append(img)
        masks.append(m)
    return IRSTDSplit(ids, images, masks)
