"""Keyword-sweep recipes for data (see tests/keywords.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import data
from tests.data import cases as C

_rng = np.random.default_rng(0)
N, DIM = 8, 4
Q = _rng.normal(size=(N, DIM)).astype(np.float32)
Q /= np.linalg.norm(Q, axis=1, keepdims=True)
D = Q + 0.5 * _rng.normal(size=(N, DIM)).astype(np.float32)
D /= np.linalg.norm(D, axis=1, keepdims=True)
LABELS = np.arange(N) % 2
NBR = np.stack([np.roll(np.arange(N), -s) for s in (1, 2, 3)], 1).astype(np.int32)
W = _rng.uniform(size=(N, 3)).astype(np.float32)


def _key():
    return jax.random.key(0)


def _j(x):
    """A JAX array (these functions take ``jax.Array`` embeddings only)."""
    return jnp.asarray(x)


def _hyper(**kw):
    params, net, feats, batch, meta = C._mts_args(_key(), np.float32)
    return data.mts_hypergrad(C._mts_loss, params, net, feats, batch, meta, lr=0.1, **kw)


def _meta_step(**kw):
    params, net, opt_state, feats, batch, meta = C._meta_args(_key(), np.float32)
    return data.mts_meta_step(
        C._mts_loss, C._MTS_OPT, params, net, opt_state, feats, batch, meta, lr=0.1, **kw
    )


def _mwn(**kw):
    params, net, opt_state, batch, meta = C._mwn_args(_key(), np.float32)
    return data.mwn_meta_step(
        C._mts_loss, C._MTS_OPT, params, net, opt_state, batch, meta, lr=0.1, **kw
    )


def _l2rw(**kw):
    params, opt_state, batch, meta = C._l2rw_args(_key(), np.float32)
    return data.l2rw_step(C._mts_loss, C._MTS_OPT, params, opt_state, batch, meta, **kw)


RECIPES = {
    "jaxkit.data.kmeans_batches": lambda **kw: data.kmeans_batches(
        _j(Q), batch_size=2, **{"key": _key(), "iters": 2, **kw}
    ),
    "jaxkit.data.nn_batches": lambda **kw: data.nn_batches(
        _j(Q), _j(D), batch_size=2, **{"key": _key(), "k": 3, "pool_factor": 2, **kw}
    ),
    "jaxkit.data.knn_label_agreement": lambda **kw: data.knn_label_agreement(
        Q, LABELS, D, LABELS, **{"k": 3, **kw}
    ),
    "jaxkit.data.nearest_cosines": lambda **kw: data.nearest_cosines(Q, D, **kw),
    "jaxkit.data.knn_graph": lambda **kw: data.knn_graph(
        _j(Q), _j(D), **{"k": 3, "block": 4, **kw}
    ),
    "jaxkit.data.infonce": lambda **kw: data.infonce(Q, D, **kw),
    "jaxkit.data.mts_hypergrad": _hyper,
    "jaxkit.data.mts_meta_step": _meta_step,
    "jaxkit.data.hobit_batches": lambda **kw: data.hobit_batches(
        data.SparseHardness(_j(NBR), _j(W)), _j(Q), _j(D), batch_size=2, **{"key": _key(), **kw}
    ),
    "jaxkit.data.hobit_objective": lambda **kw: data.hobit_objective(
        _j(np.array([1, 4, 6], np.int32)), data.SparseHardness(_j(NBR), _j(W)), **kw
    ),
    "jaxkit.data.greedy_select": lambda **kw: data.greedy_select(_j(W), 2, **kw),
    "jaxkit.data.mwn_meta_step": _mwn,
    "jaxkit.data.l2rw_step": _l2rw,
    "jaxkit.data.random_batches": lambda **kw: data.random_batches(
        N, batch_size=2, **{"key": _key(), **kw}
    ),
    "jaxkit.data.hobit_permutation": lambda **kw: data.hobit_permutation(
        _j(Q), _j(D), batch_size=2, **{"key": _key(), "k": 3, **kw}
    ),
}

RECIPES.update(
    {
        "jaxkit.data.center_cosine": lambda **kw: data.center_cosine(
            _j(Q), _j(LABELS), _j(D), _j(LABELS[::-1]), **{"num_classes": 2, **kw}
        ),
        "jaxkit.data.el2n": lambda **kw: data.el2n(_j(W), _j(LABELS), **kw),
        "jaxkit.data.forgetting_update": lambda **kw: data.forgetting_update(
            data.forgetting_init(2 * N),
            _j(LABELS == 0),
            **{"idx": _j(np.arange(N, dtype=np.int32)), **kw},
        ),
        "jaxkit.data.gsnr": lambda **kw: data.gsnr(_j(W.T), **kw),
        "jaxkit.data.normalize_weights": lambda **kw: data.normalize_weights(
            _j(W[:, 0] + 0.1), **{"class_w": _j(W[:, 1] + 0.1), **kw}
        ),
    }
)

EXEMPT: dict[str, str] = {}

BROADCAST_OK: dict[str, str] = {
    "jaxkit.data.nearest_cosines:ref_emb": "the reference rows m are free (equal to `emb`'s "
    "n only in the recipe; `exclude_self` checks they are equal): the result is [n, k]",
}

ANY_INT: dict[str, str] = {
    "jaxkit.data.knn_label_agreement:labels": "class ids compared only for equality with "
    "`ref_labels` (`[y_j == y_i]`): never an index, so any integer is a valid label",
    "jaxkit.data.knn_label_agreement:ref_labels": "class ids compared only for equality with "
    "`labels` (`[y_j == y_i]`): never an index, so any integer is a valid label",
    "jaxkit.data.forgetting_update:state.count": "a running tally of forgetting events, only "
    "incremented and returned (never an index, no upper bound): any integer is carried "
    "through; its dtype is checked (a TypeError naming `state.count`)",
}
