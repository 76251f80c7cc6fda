"""The toy peptide world of the TD3B demo (spec §2.5) and the authors' CSV loader.

Host-side (NumPy): a first-order Markov "nature" over the 20 amino acids, and two
synthetic oracles with independent features, so that direction is not predictable
from affinity. Not jitted.
"""

import csv
import os
import pathlib

import numpy as np

from jaxkit import _validate

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
"""The 20 amino-acid letters of the toy peptide vocabulary (token ``i`` is letter ``i``)."""
TOY_MASK_ID = 20
TOY_LENGTH = 12
_HYDROPHOBIC = np.array([c in "AILMFVW" for c in AMINO_ACIDS])
_POSITIVE = np.array([c in "KR" for c in AMINO_ACIDS])
_NEGATIVE = np.array([c in "DE" for c in AMINO_ACIDS])


def toy_nature(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(initial [20], transition [20, 20])`` of the peaked random Markov chain."""
    seed = _validate.python_int(seed, name="seed", minimum=0)
    rng = np.random.default_rng(seed)
    init = rng.dirichlet(np.full(20, 0.5))
    trans = rng.dirichlet(np.full(20, 0.15), size=20)
    return init, trans


def toy_nature_sample(n: int, *, seed: int, length: int = TOY_LENGTH) -> np.ndarray:
    """``int32[n, length]`` sequences from :func:`toy_nature` (chain seed 0, draws ``seed``)."""
    n = _validate.python_int(n, name="n", minimum=0)
    length = _validate.python_int(length, name="length", minimum=1)
    seed = _validate.python_int(seed, name="seed", minimum=0)
    init, trans = toy_nature(0)
    rng = np.random.default_rng(seed)
    out = np.empty((n, length), np.int32)
    out[:, 0] = rng.choice(20, size=n, p=init)
    cum = np.cumsum(trans, axis=1)
    for i in range(1, length):
        u = rng.random(n)[:, None]
        out[:, i] = np.minimum((u > cum[out[:, i - 1]]).sum(axis=1), 19)
    return out


def toy_oracle(tokens) -> dict:
    """The toy's black-box oracles (host): ``{"affinity", "p_agonist"}`` per row.

    Affinity ``sigmoid(#hydrophobic {A,I,L,M,F,V,W} at positions 3..8 - 3)``;
    ``p_agonist = sigmoid(2 (#{K,R} - #{D,E}) at positions 0..3)``.
    """
    t = np.asarray(tokens)
    if t.ndim != 2 or t.shape[1] < 9 or not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"`tokens` must be int[B, L >= 9], got {t.dtype} {t.shape}.")
    if np.any((t < 0) | (t >= 20)):
        raise ValueError("`tokens` must hold amino-acid ids in [0, 20).")
    hyd = _HYDROPHOBIC[t[:, 3:9]].sum(axis=1)
    charge = _POSITIVE[t[:, :4]].sum(axis=1).astype(np.int64) - _NEGATIVE[t[:, :4]].sum(axis=1)
    return {
        "affinity": (1 / (1 + np.exp(-(hyd - 3.0)))).astype(np.float32),
        "p_agonist": (1 / (1 + np.exp(-2.0 * charge))).astype(np.float32),
    }


def load_binder_csv(path) -> dict[str, list]:
    """Read the authors' target/binder CSV (``Target_Sequence, Ligand_Sequence, label``).

    Host-side; never downloads. Returns the three columns as lists (labels as int).

    Raises:
      FileNotFoundError: With a message saying where to put the file when absent.
      ValueError: When a required column is missing.
    """
    p = pathlib.Path(os.fspath(path))
    if not p.is_file():
        raise FileNotFoundError(
            f"TD3B binder CSV not found at {str(p)!r}. jaxkit never downloads data: place the "
            "authors' CSV (columns Target_Sequence, Ligand_Sequence, label) there, or run the "
            "toy world (jaxkit.diffusion.toy_oracle) instead."
        )
    with p.open(newline="") as f:
        rows = list(csv.DictReader(f))
    need = ("Target_Sequence", "Ligand_Sequence", "label")
    have = rows[0].keys() if rows else []
    missing = [c for c in need if c not in have]
    if missing:
        raise ValueError(f"`path`: the CSV lacks column(s) {missing}; it has {list(have)}.")
    return {
        "Target_Sequence": [r["Target_Sequence"] for r in rows],
        "Ligand_Sequence": [r["Ligand_Sequence"] for r in rows],
        "label": [int(float(r["label"])) for r in rows],
    }
