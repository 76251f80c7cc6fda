"""HumanML3D / KIT-ML folder loader (host-side; never downloads).

Reads the layout of the HumanML3D release (``new_joints/<id>.npy``, ``new_joint_vecs/<id>.npy``,
``texts/<id>.txt`` with ``caption#tokens#start#end`` lines, ``<split>.txt`` id lists);
KIT-ML uses the same layout with 21 joints at 12.5 fps. Sub-clip captions (non-zero
start/end in seconds) are cropped; mirrored ``M``-prefixed ids follow their split file.
"""

import os
from typing import NamedTuple

import numpy as np

from jaxkit import _validate

FPS = {"humanml3d": 20.0, "kitml": 12.5}


class MotionCaption(NamedTuple):
    """One (motion, caption) pair of a loaded split.

    Attributes:
      id: Clip id (``M`` prefix for mirrored clips).
      motion: ``[T, J, 3]`` joints (``new_joints``) or ``[T, F]`` features.
      caption: The caption text.
      tokens: ``word/POS`` tokens of the caption.
    """

    id: str
    motion: np.ndarray
    caption: str
    tokens: tuple[str, ...]


def load_motion_text(
    root: str, split: str, *, dataset: str = "humanml3d", motion: str = "new_joints"
) -> list[MotionCaption]:
    """Load every (motion, caption) pair of ``split`` from a HumanML3D/KIT-ML folder.

    Each line ``caption#w1/POS w2/POS ...#start#end`` of ``texts/<id>.txt`` gives one
    pair; ``start == end == 0`` (or NaN) is the whole clip, otherwise frames
    ``[start*fps, end*fps)`` (20 fps for HumanML3D, 12.5 for KIT-ML). Ids missing a
    motion file are skipped, as in the datasets' own loaders. Host-side; not jitted.

    Args:
      root: Dataset folder (containing ``texts/``, ``new_joints/``, ``<split>.txt``).
      split: ``"train"``, ``"val"``, ``"test"`` or ``"all"``.
      dataset: ``"humanml3d"`` or ``"kitml"`` (sets the frame rate).
      motion: ``"new_joints"`` (``[T, J, 3]``) or ``"new_joint_vecs"`` (``[T, 263]``).

    Returns:
      A list of :class:`MotionCaption`.

    Raises:
      ValueError: For an unknown ``split``, ``dataset`` or ``motion``.
      FileNotFoundError: If the folder or its split file is absent (the message says
        what to place where; nothing is downloaded).
    """
    _validate.one_of(("train", "val", "test", "all"), split=split)
    _validate.one_of(tuple(FPS), dataset=dataset)
    _validate.one_of(("new_joints", "new_joint_vecs"), motion=motion)
    split_file = os.path.join(str(root), f"{split}.txt")
    if not os.path.isdir(str(root)) or not os.path.isfile(split_file):
        raise FileNotFoundError(
            f"{dataset} not found: expected `root` = {root!r} to hold {split}.txt, texts/ "
            f"and {motion}/ (the HumanML3D/KIT-ML release layout; see "
            "github.com/EricGuo5513/HumanML3D). jaxkit never downloads datasets; use "
            "jaxkit.retrieval.synthetic_motion_text for offline work."
        )
    fps = FPS[dataset]
    with open(split_file) as f:
        ids = [line.strip() for line in f if line.strip()]
    out: list[MotionCaption] = []
    for cid in ids:
        mpath = os.path.join(str(root), motion, f"{cid}.npy")
        tpath = os.path.join(str(root), "texts", f"{cid}.txt")
        if not (os.path.isfile(mpath) and os.path.isfile(tpath)):
            continue
        data = np.load(mpath)
        with open(tpath) as f:
            for line in f:
                parts = line.strip().split("#")
                if len(parts) < 4 or not parts[0]:
                    continue
                start, end = (float(x) if x not in ("", "nan") else 0.0 for x in parts[2:4])
                clip = data
                if start != 0.0 or end != 0.0:
                    clip = data[int(start * fps) : int(end * fps)]
                if len(clip) == 0:
                    continue
                out.append(MotionCaption(cid, clip, parts[0], tuple(parts[1].split())))
    return out
