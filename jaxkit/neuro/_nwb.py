"""A local NWB reader for FacRNN's real-data path (e.g. NLB MC_Maze, DANDI 000128).

NWB files are HDF5; this reads the few groups FacRNN needs with ``h5py`` (the ``neuro``
extra), without ``pynwb``: spike times of the sorted units (``/units/spike_times`` with its
ragged index ``/units/spike_times_index``), the trial table (``/intervals/trials/
start_time`` and ``stop_time``) and, optionally, one behavioural time series
(``/processing/behavior/<name>/data`` with ``timestamps``, e.g. ``hand_vel``). Spikes are
binned into counts on a regular grid; behaviour is linearly interpolated to the bin
centres. Nothing is downloaded: files must already be on disk.
"""

import os
import pathlib
from typing import NamedTuple

import numpy as np

from jaxkit import _extras, _validate

LAYOUT = (
    "an NWB (HDF5) file with /units/spike_times and /units/spike_times_index (ragged "
    "spike times per unit, seconds), optionally /intervals/trials/{start_time,stop_time} "
    "and /processing/behavior/<name>/{data,timestamps}"
)


class NWBData(NamedTuple):
    """Binned activity from :func:`load_nwb` (NumPy, host side).

    Attributes:
      counts: ``float32[T, N]`` spike counts per bin and unit.
      bin_edges: ``float64[T + 1]`` bin edges in seconds.
      trials: ``float64[n_trials, 2]`` (start, stop) times (``[0, 2]`` if the file has no
        trial table).
      behavior: ``float32[T, D]`` the behavioural series at the bin centres, or ``None``.
      path: The file read.
    """

    counts: np.ndarray
    bin_edges: np.ndarray
    trials: np.ndarray
    behavior: np.ndarray | None
    path: str


def _find(root) -> pathlib.Path:
    if root is None:
        env = os.environ.get("JAXKIT_DATA_DIR")
        if env is None:
            raise FileNotFoundError(
                f"no `root` given and JAXKIT_DATA_DIR is not set; expected {LAYOUT}."
            )
        root = pathlib.Path(env) / "nwb"
    p = pathlib.Path(root)
    if p.is_file():
        return p
    if p.is_dir():
        files = sorted(p.rglob("*.nwb"))
        if files:
            return files[0]
        raise FileNotFoundError(f"no *.nwb file under `{p}`; expected {LAYOUT}.")
    raise FileNotFoundError(f"`{p}` does not exist; expected {LAYOUT}.")


def load_nwb(
    root: str | os.PathLike | None = None,
    *,
    bin_width: float = 0.02,
    behavior: str | None = None,
    t_start: float | None = None,
    t_stop: float | None = None,
) -> NWBData:
    """Read sorted spikes (and optionally behaviour) from a local NWB file, binned.

    Host-side (NumPy and ``h5py``); not jitted. The counts feed :func:`causal_smooth`
    and :func:`fit` with ``obs="poisson"``.

    Args:
      root: An ``.nwb`` file, or a folder searched recursively for the first ``*.nwb``
        (sorted); default ``$JAXKIT_DATA_DIR/nwb``.
      bin_width: Bin width in seconds ``> 0``.
      behavior: Name of a series under ``/processing/behavior`` (e.g. ``"hand_vel"``).
      t_start: Start of the binned window (default: the first trial start, else the first
        spike).
      t_stop: End of the window (default: the last trial stop, else the bin holding the
        last spike). Only whole bins are kept.

    Returns:
      :class:`NWBData`.

    Raises:
      FileNotFoundError: No such file, or no ``*.nwb`` in the folder (the message gives
        the expected layout).
      ImportError: ``h5py`` is not installed (``pip install 'jaxkit[neuro]'``).
      KeyError: The file lacks the units table or the named behaviour series.
      ValueError: ``bin_width`` not finite and > 0; ``t_start`` or ``t_stop`` not finite; an
        empty window; a malformed index.
    """
    _validate.positive(bin_width=bin_width)
    for name, t in (("t_start", t_start), ("t_stop", t_stop)):
        if t is not None:
            _validate.finite_scalar(**{name: t})
    path = _find(root)
    h5py = _extras.require("h5py", extra="neuro", what="load_nwb reads NWB files with h5py")
    with h5py.File(path, "r") as f:
        if "units/spike_times" not in f or "units/spike_times_index" not in f:
            raise KeyError(f"`{path}` has no /units/spike_times(_index); expected {LAYOUT}.")
        times = np.asarray(f["units/spike_times"][()], np.float64)
        index = np.asarray(f["units/spike_times_index"][()], np.int64)
        trials = np.zeros((0, 2))
        if "intervals/trials/start_time" in f and "intervals/trials/stop_time" in f:
            trials = np.stack(
                [f["intervals/trials/start_time"][()], f["intervals/trials/stop_time"][()]], 1
            ).astype(np.float64)
        beh = None
        if behavior is not None:
            key = f"processing/behavior/{behavior}"
            if f"{key}/data" not in f or f"{key}/timestamps" not in f:
                raise KeyError(f"`{path}` has no /{key}/(data, timestamps).")
            beh = (
                np.asarray(f[f"{key}/data"][()], np.float64),
                np.asarray(f[f"{key}/timestamps"][()], np.float64),
            )
    if index.ndim != 1 or np.any(np.diff(index) < 0) or (index.size and index[-1] > times.size):
        raise ValueError(f"`{path}`: /units/spike_times_index is not a valid ragged index.")
    lo = t_start if t_start is not None else (trials[:, 0].min() if len(trials) else times.min())
    hi = t_stop if t_stop is not None else (trials[:, 1].max() if len(trials) else times.max())
    # a window ending at the last spike gets one more bin, so that spike is counted
    spike_end = t_stop is None and not len(trials)
    n_bins = int(np.floor((hi - lo) / bin_width + 1e-9)) + int(spike_end)
    if n_bins < 1:
        raise ValueError(f"empty window [{lo}, {hi}] for bin_width={bin_width}.")
    edges = lo + bin_width * np.arange(n_bins + 1)
    starts = np.concatenate([[0], index[:-1]])
    counts = np.stack(
        [np.histogram(times[a:b], edges)[0] for a, b in zip(starts, index, strict=True)], 1
    ).astype(np.float32)
    out_beh = None
    if beh is not None:
        data, ts = beh
        data = data.reshape(len(data), -1)
        centres = 0.5 * (edges[:-1] + edges[1:])
        out_beh = np.stack(
            [np.interp(centres, ts, data[:, d]) for d in range(data.shape[1])], 1
        ).astype(np.float32)
    return NWBData(counts, edges, trials, out_beh, str(path))
