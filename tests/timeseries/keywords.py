"""Keyword-sweep recipes for timeseries (see tests/keywords.py)."""

import tempfile

import jax
import numpy as np
import optax

from jaxkit import timeseries as ts
from tests.timeseries import cases as C

_rng = np.random.default_rng(0)
HIST = _rng.normal(size=(8, 16)).astype(np.float32)
FUT = (1.5 * _rng.normal(size=(8, 8)) + 0.5).astype(np.float32)
LAB = np.asarray([[0, 2, 2, 5], [4, 2, 0, 5]], np.int32)
V2_LAB = np.asarray([0, 2, 2, 5], np.int32)
SERIES = (np.sin(np.arange(40) / 3.0) + 0.1 * _rng.normal(size=40)).astype(np.float32)
X = _rng.normal(size=(4, 8, 1)).astype(np.float32)
IDS = np.stack([_rng.integers(0, s, 4) for s in ts.LEGACY_V1.sizes], 1).astype(np.int32)
CONF = _rng.uniform(size=(4, 4, 4)).astype(np.float32)
OPT = optax.sgd(1e-2)


def _batch():
    return ts.TESSBatch(X, 2.0 * X[:, :4], IDS, CONF, (IDS % 2).astype(np.int32))


def _tess():
    return C._models("float32")[1]


def _train_step(**kw):
    tess = _tess()
    return ts.tess_train_step(tess, OPT.init(tess), _batch(), optimizer=OPT, **kw)


def _backbone(**kw):
    sizes = dict(patch_len=4, stride=4, d_model=4, n_heads=1, n_layers=1, d_ff=8)
    return ts.PatchTST(8, 4, **{"key": jax.random.key(0), **sizes, **kw})


RECIPES = {
    "jaxkit.timeseries.BoWForecaster": lambda **kw: ts.BoWForecaster(
        _tess().backbone, 5, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.timeseries.LLMExtractor": lambda **kw: ts.LLMExtractor(lambda p, s: "", **kw),
    "jaxkit.timeseries.RuleExtractor": lambda **kw: ts.RuleExtractor({}, **kw),
    "jaxkit.timeseries.ConfidenceGate": lambda **kw: ts.ConfidenceGate(
        ts.LEGACY_V1, 4, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.timeseries.PatchTST": _backbone,
    "jaxkit.timeseries.RevIN": lambda **kw: ts.RevIN(2, **kw),
    "jaxkit.timeseries.TESSForecaster": lambda **kw: ts.TESSForecaster(
        _tess().backbone, ts.LEGACY_V1, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.timeseries.sampled_confidence": lambda **kw: ts.sampled_confidence(
        ["Oscillate"] * 3 + ["Recover"], ts.LEGACY_V1.primitive("shape"), **kw
    ),
    "jaxkit.timeseries.fit_thresholds": lambda **kw: ts.fit_thresholds(
        HIST, FUT, schema=ts.LEGACY_V1, **kw
    ),
    "jaxkit.timeseries.inject_event": lambda **kw: ts.inject_event(HIST[:2], FUT[:2], LAB, **kw),
    "jaxkit.timeseries.make_semisynthetic": lambda **kw: ts.make_semisynthetic(
        SERIES, context_len=12, horizon=4, **{"key": jax.random.key(0), "stride": 4, **kw}
    ),
    "jaxkit.timeseries.render_text": lambda **kw: ts.render_text(
        V2_LAB, rng=np.random.default_rng(0), noisy=np.ones(4, bool), **kw
    ),
    "jaxkit.timeseries.sliding_windows": lambda **kw: ts.sliding_windows(SERIES, 12, 4, **kw),
    "jaxkit.timeseries.fit_forecaster": lambda **kw: ts.fit_forecaster(
        _tess(), _batch(), optimizer=OPT, steps=2, batch_size=2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.timeseries.tess_loss": lambda **kw: ts.tess_loss(_tess(), _batch(), **kw),
    "jaxkit.timeseries.tess_train_step": _train_step,
}

_BOW = (np.ones((4, 6)) / 6).astype(np.float32)
_TH = ts.Thresholds(np.asarray([0.3, 1.0], np.float32), np.asarray([-0.2, 0.4], np.float32))

RECIPES.update(
    {
        "jaxkit.timeseries.bow_forecast": lambda **kw: ts.bow_forecast(
            C._bow_model("float32"), X, _BOW, **kw
        ),
        "jaxkit.timeseries.gate_targets": lambda **kw: ts.gate_targets(IDS, IDS % 2, **kw),
        "jaxkit.timeseries.oracle_labels": lambda **kw: ts.oracle_labels(
            HIST, FUT, _TH, **{"schema": ts.V2, **kw}
        ),
        "jaxkit.timeseries.primitive_scores": lambda **kw: ts.primitive_scores(HIST, FUT, **kw),
        "jaxkit.timeseries.patchtst_forecast": lambda **kw: ts.patchtst_forecast(
            _tess().backbone, X, **kw
        ),
        "jaxkit.timeseries.tess_forecast": lambda **kw: ts.tess_forecast(
            _tess(), X, IDS, CONF, **kw
        ),
    }
)

# Classes' ``__call__`` (tests/arrays.py): one unbatched example each, tiny shapes.
_LEX = {p.name: {} for p in ts.LEGACY_V1.primitives}
_ANSWER = "Step1: Analysis: flat.\n" + "\n".join(
    f"{ts.answer_key(p)}: {p.neutral}" for p in ts.LEGACY_V1.primitives
)
H1 = HIST[0, :4].astype(np.float64)  # one history window [L]
TOK = _rng.normal(size=(3, 4)).astype(np.float32)  # patch tokens [N, D]
PREFIX = _rng.normal(size=(4, 4)).astype(np.float32)  # prefix tokens [K, D]
GATE = np.full((4,), 0.5, np.float32)  # [K]
CTX = _rng.normal(size=(4,)).astype(np.float32)  # pooled history embedding [D]


def _llm(prompt, seed):
    """A deterministic stand-in LLM: every primitive's neutral label."""
    del prompt, seed
    return _ANSWER


RECIPES.update(
    {
        "jaxkit.timeseries.BoWForecaster.__call__": lambda **kw: C._bow_model("float32")(
            X[0], _BOW[0], **kw
        ),
        "jaxkit.timeseries.LLMExtractor.__call__": lambda **kw: ts.LLMExtractor(
            _llm, n_samples=1, max_retries=0
        )("Sales rose.", H1, ts.LEGACY_V1, **{"key": jax.random.key(0), **kw}),
        "jaxkit.timeseries.RuleExtractor.__call__": lambda **kw: ts.RuleExtractor(_LEX)(
            "flat", H1, ts.LEGACY_V1, **kw
        ),
        "jaxkit.timeseries.ConfidenceGate.__call__": lambda **kw: _tess().gate(
            IDS[0], CONF[0], CTX, **kw
        ),
        "jaxkit.timeseries.EncoderLayer.__call__": lambda **kw: _tess().backbone.layers[0](
            TOK, PREFIX, GATE, **kw
        ),
        "jaxkit.timeseries.PatchTST.__call__": lambda **kw: _tess().backbone(X[0], **kw),
        "jaxkit.timeseries.TESSForecaster.__call__": lambda **kw: _tess()(
            X[0], IDS[0], CONF[0], GATE, **kw
        ),
    }
)


def _head(**kw):
    bb = _tess().backbone
    return bb.head(*bb.embed(X[0]), **kw)


def _denormalize(**kw):
    rev = _tess().backbone.revin
    return rev.denormalize(2.0 * X[0, :4], rev.normalize(X[0])[1], **kw)


# Public methods (tests/arrays.py): one unbatched example each, tiny shapes.
RECIPES.update(
    {
        "jaxkit.timeseries.PatchTST.embed": lambda **kw: _tess().backbone.embed(X[0], **kw),
        "jaxkit.timeseries.PatchTST.head": _head,
        "jaxkit.timeseries.PatchTST.encode": lambda **kw: _tess().backbone.encode(
            TOK, PREFIX, GATE, **kw
        ),
        "jaxkit.timeseries.RevIN.normalize": lambda **kw: _tess().backbone.revin.normalize(
            X[0], **kw
        ),
        "jaxkit.timeseries.RevIN.denormalize": _denormalize,
    }
)


def _extraction(ids):
    """One window's :class:`Extraction` of ``LEGACY_V1`` with the label ids ``ids``."""
    probs = tuple(np.full(n, 1.0 / n, np.float32) for n in ts.LEGACY_V1.sizes)
    return ts.Extraction(np.asarray(ids, np.int32), probs, *np.ones((3, 4), np.float32))


def _cache():
    """Three windows' :class:`CachedExtractions` of ``LEGACY_V1`` (N = 3, K = 4)."""
    ids = IDS[:3]
    return ts.CachedExtractions(
        sample_id=np.arange(3, dtype=np.int64),
        label_ids=ids,
        gt_label_ids=ids[::-1].copy(),
        gate_target=(ids == ids[::-1]).astype(np.int32),
        margin=np.ones((3, 4)),
        self_consistency=np.ones((3, 4)),
        parse_rate=np.ones((3, 4)),
        valid_count=np.full((3, 4), 4, np.int32),
        num_samples=np.full((3, 4), 4, np.int32),
        probs=tuple(np.full((3, n), 1.0 / n) for n in ts.LEGACY_V1.sizes),
    )


def _save_cache(**kw):
    """Write :func:`_cache` into a temporary folder (removed after the call)."""
    with tempfile.TemporaryDirectory(prefix="jaxkit-kw-") as root:
        return ts.save_cache(root, _cache(), **{"dataset": "toy", "split": "train", **kw})


RECIPES.update(
    {
        "jaxkit.timeseries.confidence_features": lambda **kw: ts.confidence_features(
            [_extraction(IDS[0]), _extraction(IDS[1])], **kw
        ),
        "jaxkit.timeseries.save_cache": _save_cache,
    }
)

NO_RECIPE: dict[str, str] = {
    "jaxkit.timeseries.Extractor.__call__": "a Protocol's signature (no body): "
    "LLMExtractor.__call__ and RuleExtractor.__call__ are swept",
}

ANY_RANK: dict[str, str] = {
    "jaxkit.timeseries.sliding_windows:series": "[T, ...]: any trailing axes, windowed in time",
    "jaxkit.timeseries.make_semisynthetic:series": "[T, ...] read by its first column "
    "(documented): [T, 1] is that series",
}

_SOFT_TARGET = (
    "the gate's BCE target: 0/1 of any real dtype, and a float in [0, 1] is a soft target "
    "by design (`softplus(g) - t * g`; tests/timeseries/test_bow.py); outside [0, 1] or "
    "NaN (the probe's 1.5) a ValueError naming the field"
)

ANY_DTYPE: dict[str, str] = {
    "jaxkit.timeseries.tess_loss:batch.gate_target": _SOFT_TARGET,
    "jaxkit.timeseries.tess_train_step:batch.gate_target": _SOFT_TARGET,
    "jaxkit.timeseries.fit_forecaster:data.gate_target": _SOFT_TARGET,
}

ANY_INT: dict[str, str] = {
    "jaxkit.timeseries.save_cache:data.sample_id": "window identifiers, written as they are "
    "(any integer; `load_cache` sorts by them)",
    "jaxkit.timeseries.save_cache:data.num_samples": "a count of sampled answers: no upper "
    "bound; one below `data.valid_count` (a negative one too) raises",
    "jaxkit.timeseries.gate_targets:pred_ids": "label ids compared only for equality with "
    "`oracle_ids` (no schema is read)",
    "jaxkit.timeseries.gate_targets:oracle_ids": "label ids compared only for equality with "
    "`pred_ids` (no schema is read)",
}

EXEMPT: dict[str, str] = {
    "jaxkit.timeseries.build_prompt:role": "free text: the analyst role written into the prompt",
    "jaxkit.timeseries.LLMExtractor:role": "free text: the analyst role written into the prompt",
}
