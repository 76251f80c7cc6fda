"""A procedural motion-caption generator with known word <-> joint <-> segment alignment.

A 22-joint skeleton in HumanML3D's joint order performs 1-3 primitive actions in sequence
(``then``); each action moves one body part (arms: raise, wave, punch; legs: kick, step;
torso: bend, turn; whole body: squat, jump) over a frame interval, and the caption comes
from a small grammar with synonyms. Every caption records, per segment, its word span,
body part and frames. Host-side NumPy (a data source, not jitted). Reconstructed for PST's
offline demo (the spec's kinematic generator, with displacement fields instead of full FK).
"""

from typing import NamedTuple

import jax
import numpy as np

from jaxkit import _validate

# HumanML3D joint order: pelvis, l_hip, r_hip, spine1, l_knee, r_knee, spine2, l_ankle,
# r_ankle, spine3, l_foot, r_foot, neck, l_collar, r_collar, head, l_shoulder, r_shoulder,
# l_elbow, r_elbow, l_wrist, r_wrist
REST = np.array(
    [
        [0.0, 0.95, 0.0], [0.1, 0.9, 0.0], [-0.1, 0.9, 0.0], [0.0, 1.05, 0.0],
        [0.1, 0.5, 0.0], [-0.1, 0.5, 0.0], [0.0, 1.2, 0.0], [0.1, 0.1, 0.0],
        [-0.1, 0.1, 0.0], [0.0, 1.3, 0.0], [0.1, 0.0, 0.1], [-0.1, 0.0, 0.1],
        [0.0, 1.5, 0.0], [0.08, 1.42, 0.0], [-0.08, 1.42, 0.0], [0.0, 1.65, 0.0],
        [0.18, 1.42, 0.0], [-0.18, 1.42, 0.0], [0.2, 1.15, 0.0], [-0.2, 1.15, 0.0],
        [0.2, 0.9, 0.0], [-0.2, 0.9, 0.0],
    ],
    np.float32,
)  # fmt: skip
N_JOINTS = 22
PARTS = ("left arm", "right arm", "left leg", "right leg", "torso")
PART_JOINTS = (
    (13, 16, 18, 20),
    (14, 17, 19, 21),
    (1, 4, 7, 10),
    (2, 5, 8, 11),
    (0, 3, 6, 9, 12, 15),
)
# action -> (allowed parts, verb synonyms)
ACTIONS = {
    "raise": ((0, 1), ("raises", "lifts")),
    "wave": ((0, 1), ("waves",)),
    "punch": ((0, 1), ("punches with", "strikes with")),
    "kick": ((2, 3), ("kicks with",)),
    "step": ((2, 3), ("steps forward with", "steps with")),
    "bend": ((4,), ("bends the", "leans the")),
    "turn": ((4,), ("turns the", "twists the")),
}
ACTION_NAMES = tuple(ACTIONS)
WORDS = (
    "<pad>", "a", "person", "someone", "then", "and", "the", "his", "left", "right",
    "arm", "leg", "torso", "raises", "lifts", "waves", "punches", "strikes", "with",
    "kicks", "steps", "forward", "bends", "leans", "turns", "twists",
)  # fmt: skip
VOCAB = {w: i for i, w in enumerate(WORDS)}


class MotionTextData(NamedTuple):
    """A synthetic motion-caption set with ground-truth alignment.

    Attributes:
      motion: ``float32 [N, L, 22, 3]`` joint positions.
      tokens: ``int32 [N, T]`` word ids (0 = padding; vocabulary :data:`WORDS`).
      token_mask: ``bool [N, T]`` real words.
      word_segment: ``int32 [N, T]`` segment index of each word of an action phrase
        (-1 for the subject, ``then`` and padding).
      seg_frames: ``int32 [N, S, 2]`` frame interval ``[start, end)`` per segment
        (``[0, 0)`` for absent segments).
      seg_part: ``int32 [N, S]`` body part of each segment (index into :data:`PARTS`,
        -1 absent).
      seg_action: ``int32 [N, S]`` action of each segment (index into
        :data:`ACTION_NAMES`, -1 absent).
      canonical: ``[N]`` canonical caption strings (synonyms removed), usable as the
        sentence identity for TMR's negative filtering and ``threshold`` protocol.
    """

    motion: np.ndarray
    tokens: np.ndarray
    token_mask: np.ndarray
    word_segment: np.ndarray
    seg_frames: np.ndarray
    seg_part: np.ndarray
    seg_action: np.ndarray
    canonical: np.ndarray


def _displace(pose, action, part, t, rng):
    """Displacement of the joints of ``part`` at phase ``t in [0, 1]`` for ``action``."""
    d = np.zeros_like(pose)
    js = list(PART_JOINTS[part])
    side = 1.0 if part in (0, 2) else -1.0
    env = np.sin(np.pi * t)  # in and out of the pose
    w = np.linspace(0.3, 1.0, len(js))[:, None]
    if action == "raise":
        d[js] = w * env * np.array([0.1 * side, 0.6, 0.0])
    elif action == "wave":
        d[js] = w * np.array([0.25 * np.sin(6 * np.pi * t), 0.45 * env, 0.0])
    elif action == "punch":
        d[js] = w * np.array([0.0, 0.25 * env, 0.5 * np.abs(np.sin(4 * np.pi * t))])
    elif action == "kick":
        d[js] = w * env * np.array([0.0, 0.3, 0.6])
    elif action == "step":
        d[js] = w * np.array([0.0, 0.15 * np.abs(np.sin(4 * np.pi * t)), 0.4 * env])
    elif action == "bend":
        h = (pose[js, 1:2] - 0.9).clip(0)
        d[js] = h * env * np.array([0.0, -0.3, 0.8])
    elif action == "turn":
        ang = 0.9 * env
        x, z = pose[js, 0], pose[js, 2]
        d[js, 0] = x * np.cos(ang) - z * np.sin(ang) - x
        d[js, 2] = x * np.sin(ang) + z * np.cos(ang) - z
    return d


def _caption(segs, rng):
    words, seg_of, canon = [], [], []
    words += ["a", "person"] if rng.random() < 0.5 else ["someone"]
    seg_of += [-1] * len(words)
    for k, (action, part) in enumerate(segs):
        if k:
            words.append("then")
            seg_of.append(-1)
        verb = ACTIONS[action][1][rng.integers(len(ACTIONS[action][1]))].split()
        phrase = list(verb)
        if not verb[-1] == "the":
            phrase.append("the" if rng.random() < 0.5 else "his")
        phrase += PARTS[part].split()
        words += phrase
        seg_of += [k] * len(phrase)
        canon.append(f"{action} {PARTS[part]}")
    return words, seg_of, " then ".join(canon)


def chunk_phrases(tokens, mask):
    """Phrase ids ``int32 [N, T]`` of captions of :data:`WORDS`, read from the words alone.

    A rule chunker for the grammar of :func:`synthetic_motion_text`: the leading subject
    (``a person`` / ``someone``), ``then`` and padding get -1; the words between two
    ``then`` form one phrase, numbered in caption order. It never reads the generator's
    alignment (``word_segment``), which it reproduces on this grammar (tested), so a model
    can take phrase spans from the text as a chunker would give them. Host-side NumPy.
    """
    tokens = np.asarray(tokens)
    real = np.asarray(mask, bool)
    then = tokens == VOCAB["then"]
    pos = np.arange(tokens.shape[-1])
    subject = ((pos == 0) & np.isin(tokens, (VOCAB["a"], VOCAB["someone"]))) | (
        (pos == 1) & (tokens[..., :1] == VOCAB["a"]) & (tokens == VOCAB["person"])
    )
    ids = np.cumsum(then, axis=-1)
    return np.where(real & ~then & ~subject, ids, -1).astype(np.int32)


def synthetic_motion_text(
    n: int,
    *,
    key,
    length: int = 40,
    max_segments: int = 3,
    max_words: int = 24,
    split: str = "random",
    held_out: tuple[tuple[str, str], ...] = (
        ("raise", "kick"),
        ("wave", "step"),
        ("punch", "bend"),
    ),
    noise: float = 0.01,
) -> MotionTextData:
    """Generate ``n`` motion clips with captions and their word/joint/segment alignment.

    Each clip has 1..``max_segments`` consecutive segments (random frame split of
    ``length`` frames), each one action on one body part (side chosen at random), plus a
    slow random root drift and Gaussian noise. ``split="compositional_train"`` never pairs
    two consecutive actions listed in ``held_out``; ``"compositional_test"`` always
    contains one held-out consecutive pair (so test captions compose seen actions in
    unseen orders); ``"random"`` has no constraint. Host-side NumPy seeded from ``key``.

    Args:
      n: Number of clips (>= 1).
      key: PRNG key (its bits seed NumPy).
      length: Frames per clip (>= 4 per segment).
      max_segments: 1..3.
      max_words: Token length ``T`` (>= 22; captions are at most 22 words).
      split: ``"random"``, ``"compositional_train"`` or ``"compositional_test"``.
      held_out: Ordered action pairs reserved for the compositional test split.
      noise: Standard deviation of the positional noise.

    Returns:
      A :class:`MotionTextData`.

    Raises:
      TypeError: If a size is not an int or ``key`` is not a key.
      ValueError: For an unknown ``split``, ``max_segments`` outside 1..3, or sizes too
        small.

    Example:
      >>> import jax
      >>> d = synthetic_motion_text(2, key=jax.random.key(0))
      >>> d.motion.shape, d.tokens.shape
      ((2, 40, 22, 3), (2, 24))
    """
    n = _validate.python_int(n, name="n", minimum=1)
    _validate.is_key(key)
    max_segments = _validate.python_int(max_segments, name="max_segments", minimum=1)
    if max_segments > 3:
        raise ValueError(f"`max_segments` must be <= 3, got max_segments={max_segments}.")
    length = _validate.python_int(length, name="length", minimum=4 * max_segments)
    max_words = _validate.python_int(max_words, name="max_words", minimum=22)
    _validate.one_of(("random", "compositional_train", "compositional_test"), split=split)
    _validate.finite_scalar(noise=noise)
    _validate.non_negative(noise=noise)
    seed = np.asarray(
        jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    )
    rng = np.random.default_rng(seed.astype(np.uint64).tolist())
    held = set(held_out)
    S = max_segments
    out = {
        "motion": np.zeros((n, length, N_JOINTS, 3), np.float32),
        "tokens": np.zeros((n, max_words), np.int32),
        "word_segment": np.full((n, max_words), -1, np.int32),
        "seg_frames": np.zeros((n, S, 2), np.int32),
        "seg_part": np.full((n, S), -1, np.int32),
        "seg_action": np.full((n, S), -1, np.int32),
    }
    canonical = []
    for i in range(n):
        while True:
            k = int(rng.integers(2 if split == "compositional_test" else 1, S + 1))
            acts = [ACTION_NAMES[a] for a in rng.integers(len(ACTION_NAMES), size=k)]
            pairs = set(zip(acts[:-1], acts[1:], strict=True))
            if split == "compositional_train" and pairs & held:
                continue
            if split == "compositional_test" and not pairs & held:
                continue
            break
        segs = [(a, int(rng.choice(ACTIONS[a][0]))) for a in acts]
        cuts = (
            np.sort(rng.choice(np.arange(4, length - 3), size=k - 1, replace=False))
            if k > 1
            else []
        )
        bounds = [0, *[int(c) for c in cuts], length]
        pose = np.repeat(REST[None], length, 0).copy()
        for s, (a, part) in enumerate(segs):
            f0, f1 = bounds[s], bounds[s + 1]
            for f in range(f0, f1):
                pose[f] += _displace(REST, a, part, (f - f0 + 0.5) / (f1 - f0), rng)
            out["seg_frames"][i, s] = (f0, f1)
            out["seg_part"][i, s] = part
            out["seg_action"][i, s] = ACTION_NAMES.index(a)
        drift = np.cumsum(rng.normal(0, 0.005, (length, 1, 3)), axis=0)
        out["motion"][i] = pose + drift + rng.normal(0, noise, pose.shape)
        words, seg_of, canon = _caption(segs, rng)
        out["tokens"][i, : len(words)] = [VOCAB[w] for w in words]
        out["word_segment"][i, : len(words)] = seg_of
        canonical.append(canon)
    return MotionTextData(
        motion=out["motion"],
        tokens=out["tokens"],
        token_mask=out["tokens"] > 0,
        word_segment=out["word_segment"],
        seg_frames=out["seg_frames"],
        seg_part=out["seg_part"],
        seg_action=out["seg_action"],
        canonical=np.asarray(canonical),
    )
