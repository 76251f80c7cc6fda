"""Keyword-sweep recipes for editing (see tests/keywords.py)."""

import functools

import numpy as np

from jaxkit import editing

K, D, O = 3, 4, 2
_rng = np.random.default_rng(0)
IMAGES = _rng.normal(size=(2, 2, 5, 5)).astype(np.float32)
W = _rng.normal(size=(D, O)).astype(np.float32)
PW = _rng.normal(size=(K, D, O)).astype(np.float32)
RATIO = np.asarray([0.2, 0.3, 0.5], np.float32)
MEMORIES = np.asarray([0, 2], np.int32)
COEF = np.asarray([1.0, -0.5, 0.25], np.float32)
_ROWS = _rng.normal(size=(K, 10, D + 1)).astype(np.float32)
_ROWS[..., -1] = 1.0
COV = np.einsum("krd,kre->kde", _ROWS, _ROWS) / 10  # per-memory covariances (augmented)
COUNT = np.asarray([10, 10, 10], np.int32)
X = _rng.normal(size=(6, D)).astype(np.float32)
LABELS = np.asarray([0, 1, 0, 1, 1, 0], np.int32)
IDS = np.asarray([0, 1, 2, 0, 1, 2], np.int32)
BATCHES = _rng.normal(size=(2, 6, D)).astype(np.float32)
BATCH_IDS = _rng.integers(-1, K, size=(2, 6)).astype(np.int32)


def _layers():
    return {"a": editing.Linear(W)}


def _engrams():
    return editing.Engrams({"a": editing.Linear(PW)}, {"a": RATIO})


def _apply(layers, x):
    h = x @ layers["a"].w
    return h, {"h": h}


def _taps(params, batch):
    return {"a": batch}


RECIPES = {
    "jaxkit.editing.conv_patches": functools.partial(editing.conv_patches, IMAGES, 3),
    "jaxkit.editing.criteria": lambda **kw: editing.criteria(
        _apply, _layers(), _engrams(), X, LABELS, IDS, **kw
    ),
    "jaxkit.editing.compose": lambda **kw: editing.compose(_layers(), _engrams(), COEF, **kw),
    "jaxkit.editing.engram_projection": lambda **kw: editing.engram_projection(
        W, COV[0, :D, :D], COV.mean(0)[:D, :D], **kw
    ),
    "jaxkit.editing.erase": lambda **kw: editing.erase(_layers(), _engrams(), MEMORIES, **kw),
    "jaxkit.editing.extract": lambda **kw: editing.extract(
        {"a": editing.Linear(W, np.zeros(O, np.float32))},
        editing.CovStats({"a": COV}, {"a": COUNT}),
        **kw,
    ),
    "jaxkit.editing.collect_stats": lambda **kw: editing.collect_stats(
        _taps, None, BATCHES, BATCH_IDS, num_memories=K, **kw
    ),
}

_KERNEL = _rng.normal(size=(O, 2, 3, 3)).astype(np.float32)

RECIPES.update(
    {
        "jaxkit.editing.conv_weight_to_linear": functools.partial(
            editing.conv_weight_to_linear, _KERNEL
        ),
        "jaxkit.editing.linear_to_conv_weight": functools.partial(
            editing.linear_to_conv_weight, _KERNEL.reshape(O, -1).T, _KERNEL.shape
        ),
        "jaxkit.editing.keep_only": lambda **kw: editing.keep_only(
            _layers(), _engrams(), MEMORIES, **kw
        ),
        "jaxkit.editing.memit_erase": functools.partial(editing.memit_erase, W, X[:2], X[2:]),
        "jaxkit.editing.natural_gradient_erase": functools.partial(
            editing.natural_gradient_erase, W, X[:2], X
        ),
    }
)

_SITES = {"a": lambda p: p["fc"]["w"]}
_STATS = editing.CovStats({"a": COV}, {"a": COUNT})
_L, _F = 2, 3  # a stacked jaxkit.nn MLP: w_gate, w_up [L, D, F], w_down [L, F, D]
_MLP = {
    "layers": {
        "w_gate": _rng.normal(size=(_L, D, _F)).astype(np.float32),
        "w_up": _rng.normal(size=(_L, D, _F)).astype(np.float32),
        "w_down": _rng.normal(size=(_L, _F, D)).astype(np.float32),
    }
}

RECIPES.update(
    {
        "jaxkit.editing.set_layers": lambda **kw: editing.set_layers(
            {"fc": {"w": W}}, _SITES, editing.get_layers({"fc": {"w": 2 * W}}, _SITES), **kw
        ),
        "jaxkit.editing.merge_stats": lambda **kw: editing.merge_stats(_STATS, _STATS, **kw),
        "jaxkit.editing.set_transformer_layers": lambda **kw: editing.set_transformer_layers(
            _MLP, editing.transformer_layers(_MLP), **kw
        ),
    }
)

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.editing.criteria:inputs": "a pytree only the user's `apply_fn` reads: the library "
    "checks each leaf's leading batch axis against `labels`; the feature axes are the user's",
    "jaxkit.editing.collect_stats:ids": "[nb, B] (per example) or [nb, B, P] (per row), "
    "documented: [nb, B, 1] is the per-row form with P = 1 (the same statistics)",
    "jaxkit.editing.keep_only:memories": "an int id (rank 0) or a 1-D array of ids, as documented",
    "jaxkit.editing.erase:memories": "an int id (rank 0) or a 1-D array of ids, as documented",
}

BROADCAST_OK: dict[str, str] = {
    "jaxkit.editing.memit_erase:x_keep": "the m preserved keys are free rows (`w`'s leading "
    "size equals m only in the recipe); the edited weight is `w`-shaped for any m",
}

EMPTY_EXEMPT: dict[str, str] = {
    "jaxkit.editing.criteria:inputs": "a pytree only the user's `apply_fn` reads: the library "
    "checks each leaf's leading batch axis against `labels` (an empty one raises naming "
    "`inputs`); the feature axes are the user's network's, so its error is the user's",
}

_COUNT = (
    "row counts: any integer >= 0 (a million rows is a valid count, there is no upper "
    "bound); a negative count raises naming it"
)
ANY_INT: dict[str, str] = {
    "jaxkit.editing.extract:stats.count['a']": _COUNT,
    "jaxkit.editing.merge_stats:a.count['a']": _COUNT,
    "jaxkit.editing.merge_stats:b.count['a']": _COUNT,
}
