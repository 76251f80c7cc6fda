"""Local-folder loaders for MD17 and GEOM-Drugs (never download).

Both take an explicit ``root`` (examples pass ``data_dir``, which their argparse may
default from ``JAXKIT_DATA_DIR``; the library never reads the environment) and raise
``FileNotFoundError`` describing the expected layout when the files are absent.

Layouts:

- MD17: ``<root>/md17/<molecule>.npz`` or ``<root>/md17_<molecule>.npz`` (the sGDML
  release; keys ``R`` [T, n_atoms, 3] positions in Angstrom, ``z`` [n_atoms] atomic
  numbers, ``E`` [T] or [T, 1] energies, ``F`` [T, n_atoms, 3] forces).
- GEOM-Drugs: ``<root>/geom/rdkit_folder/drugs/*.pickle`` (one pickle per molecule,
  from ``rdkit_folder.tar.gz``) plus split index files
  ``<root>/geom/splits/<split>.txt`` (one pickle file name per line) or ``.npy``
  (an array of such names). Reading the pickles needs RDKit.

References:
  Chmiela et al., "Machine learning of accurate energy-conserving molecular force
  fields", Science Advances 2017 (MD17). Axelrod, Gomez-Bombarelli, "GEOM, energy-
  annotated molecular conformations for property prediction and molecular
  generation", Scientific Data 2022.
"""

import os
import pickle
from typing import Any, NamedTuple

import numpy as np

MD17_MOLECULES = (
    "aspirin",
    "benzene",
    "ethanol",
    "malonaldehyde",
    "naphthalene",
    "salicylic",
    "toluene",
    "uracil",
)


class MD17(NamedTuple):
    """One MD17 trajectory (NumPy arrays)."""

    positions: np.ndarray
    atomic_numbers: np.ndarray
    energies: np.ndarray
    forces: np.ndarray


def load_md17(root: str | os.PathLike, molecule: str) -> MD17:
    """Load an MD17 trajectory from a local folder.

    Args:
      root: Dataset root folder.
      molecule: e.g. ``"aspirin"`` (see ``MD17_MOLECULES``; other names are tried too).

    Returns:
      :class:`MD17` with positions ``[T, n, 3]``, atomic numbers ``[n]``, energies
      ``[T]`` and forces ``[T, n, 3]``.

    Raises:
      FileNotFoundError: If no file is found (the message gives the expected layout).
      ValueError: If the file lacks the keys ``R``, ``z``, ``E``, ``F``.
    """
    root = os.fspath(root)
    candidates = [
        os.path.join(root, "md17", f"{molecule}.npz"),
        os.path.join(root, f"md17_{molecule}.npz"),
        os.path.join(root, "md17", f"md17_{molecule}.npz"),
    ]
    path = next((c for c in candidates if os.path.isfile(c)), None)
    if path is None:
        raise FileNotFoundError(
            f"MD17 file for `molecule`={molecule!r} not found under `root`={root!r}. "
            "Expected one of: " + ", ".join(candidates) + ". jaxkit never downloads "
            "data: fetch the sGDML MD17 .npz files yourself and place them there."
        )
    with np.load(path, allow_pickle=False) as d:
        missing = [k for k in ("R", "z", "E", "F") if k not in d]
        if missing:
            raise ValueError(f"MD17 file {path} lacks keys {missing} (has {list(d)}).")
        return MD17(
            np.asarray(d["R"]),
            np.asarray(d["z"]),
            np.asarray(d["E"]).reshape(-1),
            np.asarray(d["F"]),
        )


def load_geom(root: str | os.PathLike, split: str) -> list[str]:
    """Paths of the GEOM-Drugs molecule pickles listed in a split.

    Args:
      root: Dataset root folder.
      split: Split name, e.g. ``"train"``, ``"val"``, ``"test"``.

    Returns:
      Sorted list of absolute pickle paths (read them with :func:`read_geom_pickle`).

    Raises:
      FileNotFoundError: If the drugs folder or the split index is missing (the
        message gives the expected layout), or a listed pickle is absent.
    """
    root = os.fspath(root)
    drugs = os.path.join(root, "geom", "rdkit_folder", "drugs")
    split_txt = os.path.join(root, "geom", "splits", f"{split}.txt")
    split_npy = os.path.join(root, "geom", "splits", f"{split}.npy")
    layout = (
        f"expected {drugs}/*.pickle (from GEOM's rdkit_folder.tar.gz) and "
        f"{split_txt} (one pickle name per line) or {split_npy}. jaxkit never "
        "downloads data."
    )
    if not os.path.isdir(drugs):
        raise FileNotFoundError(f"GEOM-Drugs folder not found under `root`={root!r}: " + layout)
    if os.path.isfile(split_txt):
        with open(split_txt) as f:
            names = [ln.strip() for ln in f if ln.strip()]
    elif os.path.isfile(split_npy):
        names = [str(n) for n in np.load(split_npy, allow_pickle=False).tolist()]
    else:
        raise FileNotFoundError(f"GEOM split index for `split`={split!r} not found: " + layout)
    paths = [n if os.path.isabs(n) else os.path.join(drugs, n) for n in names]
    absent = [p for p in paths if not os.path.isfile(p)]
    if absent:
        raise FileNotFoundError(
            f"{len(absent)} pickle(s) listed in split {split!r} are missing, e.g. {absent[0]}."
        )
    return sorted(paths)


def read_geom_pickle(path: str | os.PathLike) -> dict[str, Any]:
    """Unpickle one GEOM molecule (needs RDKit: its conformers are RDKit ``Mol``s).

    Only open files you trust: pickles can run code.
    """
    try:
        import rdkit  # noqa: F401
    except ImportError as e:
        raise ImportError("Reading GEOM pickles needs RDKit: pip install rdkit") from e
    with open(path, "rb") as f:
        return pickle.load(f)
