"""Keyword-sweep recipes for neuro (see tests/keywords.py)."""

import functools
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import neuro

_rng = np.random.default_rng(0)
X = _rng.normal(size=(8, 4)).astype(np.float32)
Z = _rng.normal(size=(8, 2)).astype(np.float32)
Z4 = _rng.normal(size=(8, 4)).astype(np.float32)
LOG_STD = (-1.0 + 0.3 * _rng.normal(size=(8, 4))).astype(np.float32)
LORENZ = _rng.normal(size=(12, 3)).astype(np.float32)
J = _rng.normal(size=(4, 4)).astype(np.float32)
JG = _rng.normal(size=(2, 4, 4)).astype(np.float32)
A = _rng.normal(size=(4, 2)).astype(np.float32)
B = _rng.normal(size=(2, 4)).astype(np.float32)
COV = (np.eye(4) + 0.1 * (Z4.T @ Z4) / 8).astype(np.float32)


@functools.cache
def _model():
    return neuro.LowRankRNN(4, 2, key=jax.random.key(1))


@functools.cache
def _nwb_file():
    """A tiny NWB-layout HDF5 file (two units, a trial table), written once."""
    import h5py

    path = os.path.join(tempfile.mkdtemp(prefix="jaxkit-kw-"), "a.nwb")
    spikes = [np.sort(_rng.uniform(0.05, 0.95, n)) for n in (5, 7)]
    with h5py.File(path, "w") as f:
        f.create_dataset("units/spike_times", data=np.concatenate(spikes))
        f.create_dataset("units/spike_times_index", data=np.cumsum([len(s) for s in spikes]))
        f.create_dataset("intervals/trials/start_time", data=np.asarray([0.0, 0.5]))
        f.create_dataset("intervals/trials/stop_time", data=np.asarray([0.5, 1.0]))
    return path


def _key():
    return jax.random.key(0)


RECIPES = {
    "jaxkit.neuro.ica_baseline": lambda **kw: neuro.ica_baseline(_model(), X, **kw),
    "jaxkit.neuro.lorenz_thomas": lambda **kw: neuro.lorenz_thomas(
        10, **{"substeps": 2, "burn_in": 5, **kw}
    ),
    "jaxkit.neuro.synthetic_lowrank": lambda **kw: neuro.synthetic_lowrank(
        LORENZ, **{"key": _key(), "n_neurons": 6, **kw}
    ),
    "jaxkit.neuro.principal_init": lambda **kw: neuro.principal_init(
        _model(), X[:-1], X[1:], **{"key": _key(), **kw}
    ),
    "jaxkit.neuro.facrnn_loss": lambda **kw: neuro.facrnn_loss(
        _model(), X[:-1], X[1:], n_total=100, **{"key": _key(), **kw}
    ),
    "jaxkit.neuro.observation_log_lik": lambda **kw: neuro.observation_log_lik(
        _model(), Z, X, **kw
    ),
    "jaxkit.neuro.group_aligned_r2": lambda **kw: neuro.group_aligned_r2(Z4, Z4, n_groups=2, **kw),
    "jaxkit.neuro.load_nwb": lambda **kw: neuro.load_nwb(_nwb_file(), **{"bin_width": 0.1, **kw}),
    "jaxkit.neuro.partial_correlation_eval": lambda **kw: neuro.partial_correlation_eval(
        Z4, LOG_STD, n_groups=2, **{"key": _key(), "n_mc": 2, "chunk": 4, **kw}
    ),
    "jaxkit.neuro.total_correlation": lambda **kw: neuro.total_correlation(
        Z4, LOG_STD, **{"key": _key(), "n_mc": 2, "chunk": 4, **kw}
    ),
    "jaxkit.neuro.fit": lambda **kw: neuro.fit(
        _model(), X[:-1], X[1:], steps=2, **{"key": _key(), "batch_size": 4, **kw}
    ),
    "jaxkit.neuro.lagged_windows": functools.partial(neuro.lagged_windows, X, window=2),
    "jaxkit.neuro.component_aligned_r2": functools.partial(neuro.component_aligned_r2, Z4, Z4),
    "jaxkit.neuro.connectivity_metrics": functools.partial(neuro.connectivity_metrics, J, J),
    "jaxkit.neuro.sub_connectivity_r2": functools.partial(neuro.sub_connectivity_r2, JG, JG),
    "jaxkit.neuro.causal_smooth": functools.partial(neuro.causal_smooth, X, tau=2.0),
    "jaxkit.neuro.posterior_log_std": functools.partial(neuro.posterior_log_std, 100, 2),
    "jaxkit.neuro.sub_connectivity": functools.partial(neuro.sub_connectivity, A, B, n_groups=2),
    "jaxkit.neuro.gaussian_group_tc": functools.partial(neuro.gaussian_group_tc, COV, n_groups=2),
    "jaxkit.neuro.kl_std_normal": functools.partial(neuro.kl_std_normal, Z4, LOG_STD),
    "jaxkit.neuro.pairwise_log_q": functools.partial(
        neuro.pairwise_log_q, Z4, Z4, LOG_STD, n_groups=2
    ),
    "jaxkit.neuro.partial_correlation": functools.partial(
        neuro.partial_correlation, Z4, Z4, LOG_STD, n_groups=2, n_total=100
    ),
    "jaxkit.neuro.LowRankRNN": lambda **kw: neuro.LowRankRNN(4, 2, **{"key": _key(), **kw}),
    "jaxkit.neuro.GRUEncoder": lambda **kw: neuro.GRUEncoder(
        4, 2, dtype=jnp.float32, **{"key": _key(), **kw}
    ),
    "jaxkit.neuro.BiGRUEncoder": lambda **kw: neuro.BiGRUEncoder(
        4, 2, dtype=jnp.float32, **{"key": _key(), **kw}
    ),
}


@functools.cache
def _gru(cls):
    return cls(4, 2, hidden=3, dtype=jnp.float32, key=_key())


WIN = X[:6].reshape(3, 2, 4)  # causal windows [B, W, N]
SEQ = X.reshape(2, 4, 4)  # sequences [B, T, N]

RECIPES.update(
    {
        "jaxkit.neuro.GRUEncoder.__call__": lambda **kw: _gru(neuro.GRUEncoder)(WIN, **kw),
        "jaxkit.neuro.BiGRUEncoder.__call__": lambda **kw: _gru(neuro.BiGRUEncoder)(SEQ, **kw),
        "jaxkit.neuro.LowRankRNN.encode": lambda **kw: _model().encode(X, **kw),
        "jaxkit.neuro.LowRankRNN.decode": lambda **kw: _model().decode(Z, X, **kw),
    }
)

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.neuro.causal_smooth:counts": "`[t, ...]`: time on axis 0, any trailing axes",
    "jaxkit.neuro.GRUEncoder.__call__:windows": "`[..., W, N]`: any leading batch axes "
    "(LowRankRNN.encode maps them)",
    "jaxkit.neuro.BiGRUEncoder.__call__:seqs": "`[..., T, N]`: any leading batch axes "
    "(LowRankRNN.encode maps them)",
    "jaxkit.neuro.LowRankRNN.encode:x_prev": "`[..., N]` (GRU: `[..., W, N]`, BiGRU: "
    "`[..., T, N]`): any leading batch axes (facrnn_loss reads `[M, N]` and `[R, T, N]`)",
    "jaxkit.neuro.LowRankRNN.decode:z": "`[..., K]`: any leading batch axes (facrnn_loss "
    "decodes `[M, K]` and `[R, T, K]`); `u` must then have `z`'s leading axes",
}
