"""The NWB loader on a tiny HDF5 file written here in NWB layout (host side)."""

import sys

import numpy as np
import pytest

from jaxkit import neuro

h5py = pytest.importorskip("h5py")  # the `neuro` extra


def _write(path, spikes, trials=None, vel=None):
    with h5py.File(path, "w") as f:
        f.create_dataset("units/spike_times", data=np.concatenate(spikes))
        f.create_dataset("units/spike_times_index", data=np.cumsum([len(s) for s in spikes]))
        if trials is not None:
            f.create_dataset("intervals/trials/start_time", data=trials[:, 0])
            f.create_dataset("intervals/trials/stop_time", data=trials[:, 1])
        if vel is not None:
            f.create_dataset("processing/behavior/hand_vel/data", data=vel[0])
            f.create_dataset("processing/behavior/hand_vel/timestamps", data=vel[1])


def test_load_nwb_bins_spikes_and_behaviour(tmp_path):
    r = np.random.default_rng(0)
    spikes = [np.sort(r.uniform(0.05, 0.95, n)) for n in (7, 0, 13)]
    trials = np.asarray([[0.0, 0.5], [0.5, 1.0]])
    ts = np.linspace(0, 1, 101)
    vel = np.stack([np.sin(ts), ts**2], 1)
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "a.nwb", spikes, trials, (vel, ts))
    d = neuro.load_nwb(tmp_path, bin_width=0.1, behavior="hand_vel")
    assert d.counts.shape == (10, 3) and d.behavior.shape == (10, 2)
    brute = np.zeros((10, 3))
    for u, s in enumerate(spikes):
        for t in s:
            brute[int(t // 0.1), u] += 1  # no spike sits on an edge (uniform draws)
    np.testing.assert_array_equal(d.counts, brute)
    np.testing.assert_allclose(d.bin_edges, np.arange(11) * 0.1, atol=1e-12)
    np.testing.assert_array_equal(d.trials, trials)
    centres = np.arange(10) * 0.1 + 0.05
    np.testing.assert_allclose(d.behavior[:, 0], np.sin(centres), atol=1e-4)
    # no trial table: the window spans the spikes
    _write(tmp_path / "b.nwb", spikes)
    d2 = neuro.load_nwb(tmp_path / "b.nwb", bin_width=0.05)
    assert d2.trials.shape == (0, 2) and d2.counts.sum() == 20


def test_load_nwb_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        neuro.load_nwb(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=r"\*\.nwb"):
        neuro.load_nwb(tmp_path)
    monkeypatch.delenv("JAXKIT_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="JAXKIT_DATA_DIR"):
        neuro.load_nwb()
    with h5py.File(tmp_path / "empty.nwb", "w") as f:
        f.create_dataset("acquisition/x", data=np.zeros(3))
    with pytest.raises(KeyError, match="units"):
        neuro.load_nwb(tmp_path / "empty.nwb")
    _write(tmp_path / "ok.nwb", [np.asarray([0.1, 0.2])])
    with pytest.raises(KeyError, match="hand_vel"):
        neuro.load_nwb(tmp_path / "ok.nwb", behavior="hand_vel")
    with pytest.raises(ValueError, match="bin_width"):
        neuro.load_nwb(tmp_path / "ok.nwb", bin_width=0.0)
    monkeypatch.setitem(sys.modules, "h5py", None)  # as if the neuro extra were missing
    with pytest.raises(ImportError, match=r"pip install 'jaxkit\[neuro\]'"):
        neuro.load_nwb(tmp_path / "ok.nwb")
