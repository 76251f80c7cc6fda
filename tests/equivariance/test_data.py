"""Loaders: clear errors when absent, correct reads from a tiny local layout."""

import os

import numpy as np
import pytest

import jaxkit.equivariance as E


def test_md17_missing_and_present(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        E.load_md17(tmp_path, "aspirin")
    os.makedirs(tmp_path / "md17")
    np.savez(
        tmp_path / "md17" / "aspirin.npz",
        R=np.zeros((5, 3, 3)),
        z=np.array([6, 1, 1]),
        E=np.arange(5.0)[:, None],
        F=np.ones((5, 3, 3)),
    )
    d = E.load_md17(tmp_path, "aspirin")
    assert d.positions.shape == (5, 3, 3) and d.energies.shape == (5,)
    np.savez(tmp_path / "md17" / "benzene.npz", R=np.zeros((5, 3, 3)))
    with pytest.raises(ValueError, match="lacks keys"):
        E.load_md17(tmp_path, "benzene")


def test_geom_missing_and_present(tmp_path):
    with pytest.raises(FileNotFoundError, match="rdkit_folder"):
        E.load_geom(tmp_path, "train")
    drugs = tmp_path / "geom" / "rdkit_folder" / "drugs"
    os.makedirs(drugs)
    with pytest.raises(FileNotFoundError, match="split"):
        E.load_geom(tmp_path, "train")
    (drugs / "a.pickle").write_bytes(b"")
    os.makedirs(tmp_path / "geom" / "splits")
    (tmp_path / "geom" / "splits" / "train.txt").write_text("a.pickle\n")
    assert E.load_geom(tmp_path, "train") == [str(drugs / "a.pickle")]
    (tmp_path / "geom" / "splits" / "val.txt").write_text("b.pickle\n")
    with pytest.raises(FileNotFoundError, match="missing"):
        E.load_geom(tmp_path, "val")
