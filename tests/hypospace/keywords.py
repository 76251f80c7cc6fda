"""Keyword-sweep recipes for hypospace (see tests/keywords.py)."""

import functools

import jax
import numpy as np

from jaxkit import hypospace as H

ADM = np.array([1, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0], bool)
SCORE = np.array([0, 1, 2, 1, 3, 2, 0, 1, 1, 3, 2, 0], np.float32)
TABLE = np.arange(100, 112, dtype=np.int32)
P = np.full(12, 1 / 12, np.float32)
STRATA = np.arange(12, dtype=np.int32) % 2
QUOTAS = np.array([2, 1], np.int32)
HEIGHTS = np.array([[1, 0], [2, 0]], np.int8)
LAYERS = np.array([[[1, 0], [1, 0]], [[0, 0], [1, 0]]], np.int8)  # heights 1 0 / 2 0
TOP = (HEIGHTS > 0).astype(np.int8)
ADMISSIBLE = np.array([100, 103, -1], np.int32)  # ids, padded with -1


class _Scripted:
    """A fake LLM client (no network): answers ``text`` to every prompt."""

    def __init__(self, text):
        self.text = text

    def __call__(self, prompt):
        return self.text, {"prompt_tokens": 1, "completion_tokens": 1}


def _causal_task():
    return H.generate_collection(3, (1,))[0]


def _evaluate(**kw):
    c = H.boolean_candidates("basic", 1)
    tasks = H.boolean_collection("basic", 1)[:2]
    adm = H.task_masks([t.admissible for t in tasks], c.ids)
    return H.evaluate(c, adm, H.SamplerSpec("uniform_space"), **{"key": jax.random.key(0), **kw})


ADJ = np.array([[[0, 1, 0], [0, 0, 1], [0, 0, 0]], [[0, 1, 0], [0, 0, 0], [1, 0, 0]]], np.int8)
IDS = np.array([0, 5, 17], np.int32)
_CAUSAL_OBS = H.CausalObs(np.array([0], np.int32), np.array([[0, 1, 1]], np.int8), np.array([True]))
_BOOLEAN_OBS = H.BooleanObs(np.int32(3), np.int32(1))

RECIPES = {
    "jaxkit.hypospace.validate_boolean": functools.partial(
        H.validate_boolean, np.arange(5, dtype=np.int32), _BOOLEAN_OBS
    ),
    "jaxkit.hypospace.admissible_mask": functools.partial(H.admissible_mask, ADJ, _CAUSAL_OBS),
    "jaxkit.hypospace.canonical_id": functools.partial(H.canonical_id, ADJ),
    "jaxkit.hypospace.from_canonical_id": functools.partial(H.from_canonical_id, IDS, n=3),
    "jaxkit.hypospace.is_dag": functools.partial(H.is_dag, ADJ),
    "jaxkit.hypospace.reachability": functools.partial(H.reachability, ADJ),
    "jaxkit.hypospace.expected_metrics": functools.partial(H.expected_metrics, P, ADM, 3),
    "jaxkit.hypospace.metrics": functools.partial(
        H.metrics, np.array([100, 103, 7, -1], np.int32), ADMISSIBLE
    ),
    "jaxkit.hypospace.heights_from_layers": functools.partial(H.heights_from_layers, LAYERS),
    "jaxkit.hypospace.voxel_id": functools.partial(H.voxel_id, HEIGHTS, max_height=2),
    "jaxkit.hypospace.enumerate_dags": functools.partial(H.enumerate_dags, 3),
    "jaxkit.hypospace.generate_collection": functools.partial(H.generate_collection, 3),
    "jaxkit.hypospace.evaluate": _evaluate,
    "jaxkit.hypospace.causal_prompt": lambda **kw: H.causal_prompt(_causal_task(), [], **kw),
    "jaxkit.hypospace.openai_client": functools.partial(
        H.openai_client, base_url="http://127.0.0.1:9/v1", model="m", api_key="k"
    ),
    "jaxkit.hypospace.parse_causal": functools.partial(H.parse_causal, "Graph: A->B", 3),
    "jaxkit.hypospace.run_causal": lambda **kw: H.run_causal(
        _Scripted("Graph: A->B"), _causal_task(), 1, **kw
    ),
    "jaxkit.hypospace.run_boolean": lambda **kw: H.run_boolean(
        _Scripted("Expression: x"),
        H.boolean_collection("basic", 1)[0],
        1,
        ops="basic",
        depth=1,
        **kw,
    ),
    "jaxkit.hypospace.run_voxel": lambda **kw: H.run_voxel(
        _Scripted("Structure:\nLayer 1:\n1 0\n0 0"),
        H.voxel_collection(2, 2, 1)[0],
        1,
        max_height=2,
        **kw,
    ),  # fmt: skip
    "jaxkit.hypospace.collapsed": lambda **kw: H.collapsed(
        TABLE, ADM, SCORE, 3, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.hypospace.collapsed_probs": lambda **kw: H.collapsed_probs(
        ADM, SCORE, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.hypospace.stratified": lambda **kw: H.stratified(
        TABLE, P, STRATA, QUOTAS, 3, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.hypospace.uniform_space": lambda **kw: H.uniform_space(
        TABLE, 3, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.hypospace.uniform_admissible": lambda **kw: H.uniform_admissible(
        ADMISSIBLE, 3, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.hypospace.enumerative": lambda **kw: H.enumerative(
        ADMISSIBLE, 3, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.hypospace.sample_sets": lambda **kw: H.sample_sets(list(range(5)), 2, **kw),
    "jaxkit.hypospace.layers_from_heights": functools.partial(H.layers_from_heights, HEIGHTS),
    "jaxkit.hypospace.validate_voxel": functools.partial(H.validate_voxel, LAYERS, TOP),
    "jaxkit.hypospace.voxel_collection": lambda **kw: H.voxel_collection(
        **{"g": 2, "max_height": 2, **kw}
    ),
    "jaxkit.hypospace.SamplerSpec": H.SamplerSpec,
    "jaxkit.hypospace.expected_metrics_stratified": functools.partial(
        H.expected_metrics_stratified, P, ADM, STRATA, QUOTAS
    ),
    "jaxkit.hypospace.stratum_quotas": lambda **kw: H.stratum_quotas(
        ADM, STRATA, 3, num_strata=2, **kw
    ),
    "jaxkit.hypospace.by_k": lambda **kw: H.by_k(_evaluate(), **kw),
    "jaxkit.hypospace.boolean_prompt": lambda **kw: H.boolean_prompt(
        H.boolean_collection("basic", 1)[0], [], **{"ops": "basic", "depth": 1, **kw}
    ),
    "jaxkit.hypospace.voxel_prompt": lambda **kw: H.voxel_prompt(
        H.voxel_collection(2, 2, 1)[0], [], **{"max_height": 2, **kw}
    ),
}

_RECORD = "a record the library returns, not an input"
EXEMPT: dict[str, str] = {
    **{
        f"jaxkit.hypospace.Usage:{kw}": _RECORD
        for kw in ("calls", "errors", "parse_failures", "prompt_tokens", "completion_tokens")
    },
    "jaxkit.hypospace.LLMRun:mode": _RECORD,
}

_ADJ_BATCH = "[..., n, n]: any leading batch axes, one result each (documented)"
ANY_RANK = {
    "jaxkit.hypospace.validate_boolean:truth": "truth codes of any shape, broadcast with `obs`",
    "jaxkit.hypospace.admissible_mask:adj": _ADJ_BATCH,
    "jaxkit.hypospace.canonical_id:adj": _ADJ_BATCH,
    "jaxkit.hypospace.is_dag:adj": _ADJ_BATCH,
    "jaxkit.hypospace.reachability:adj": _ADJ_BATCH,
    "jaxkit.hypospace.from_canonical_id:ids": "ids of any shape, one [n, n] matrix each",
    "jaxkit.hypospace.heights_from_layers:layers": (
        "[..., L, g, g]: any leading batch axes (documented); rank < 3 raises"
    ),
    "jaxkit.hypospace.voxel_id:heights": (
        "[..., g, g]: any leading batch axes (documented); rank < 2 raises"
    ),
    "jaxkit.hypospace.validate_voxel:layers": (
        "[..., L, g, g]: leading batch axes, one score each (documented); rank < 3 raises"
    ),
}

_COPIED = "candidate ids copied to the output, never used as an index (any int32 id is a name)"
_PADDED = "ids copied to the output, never used as an index; negative entries are padding"
ANY_INT: dict[str, str] = {
    "jaxkit.hypospace.from_canonical_id:ids": (
        "any negative id is the failed-query sentinel (documented); above 2**(n(n-1)) raises"
    ),
    "jaxkit.hypospace.metrics:ids": (
        "proposed ids compared only for equality with `admissible`; any negative is a failed "
        "query (documented)"
    ),
    "jaxkit.hypospace.metrics:admissible": (
        "ids compared only for equality with `ids`; negative entries are padding (documented)"
    ),
    "jaxkit.hypospace.collapsed:table": _COPIED,
    "jaxkit.hypospace.stratified:table": _COPIED,
    "jaxkit.hypospace.uniform_space:table": _PADDED,
    "jaxkit.hypospace.uniform_admissible:admissible": _PADDED,
    "jaxkit.hypospace.enumerative:admissible": _PADDED,
    "jaxkit.hypospace.evaluate:candidates.ids": (
        "candidate ids are names, compared only for equality (any id >= 0, its space's "
        "bound unknown to the table); a negative one, read as padding, raises (tested)"
    ),
    "jaxkit.hypospace.by_k:report.k": (
        "|H_O| per task, a count bucketed by value: any K >= 0 is valid (past the last edge: "
        "the last bucket); a negative one, in no bucket, raises (tested)"
    ),
    "jaxkit.hypospace.by_k:report.n_queries": (
        "query budgets, not read by by_k: any N >= 1 is valid; below 1 raises (tested)"
    ),
    "jaxkit.hypospace.expected_metrics_stratified:quotas": (
        "query counts: any N_s >= 0 is valid (a larger one is more queries); a negative one "
        "or a zero sum raises (tested)"
    ),
}
