"""Reader for the authors' dataset JSON files (spec eval_robust.md §1.5) — host-side.

Formats as the authors' generators write them [C] (``causal/generate_causal_dataset*.py``,
``boolean/boolean_dataset.py``, ``3d/generate_3d_dataset_complete.py``):

- causal: ``{"metadata", "datasets_by_n_observations": {"1": [...], ...}}`` or, with
  ``--fixed``, ``{"metadata", "datasets": [...]}``; each set has ``observation_set_id``,
  ``observations`` (``perturbed_node``, ``effects`` {node: 0/1}), ``nodes`` and
  ``ground_truth_graphs`` (``{"nodes", "edges": [[u, v], ...]}``).
- Boolean: the same two layouts; ``metadata`` has ``operators`` and ``max_depth``; each
  set has ``observations`` (``inputs`` {"x", "y"}, ``output``) and
  ``ground_truth_expressions`` (``formula``, sympy's string with ``&|~`` spelled
  ``AND OR NOT``).
- 3D: ``{"metadata": {"grid_size", "max_height", ...}, "observation_sets": [...]}``; each
  set has ``observation_id``, ``observation`` (``g*g`` digits, row-major) and
  ``ground_truth_structures`` (``{"layers": ["g*g digits", ...]}``, bottom first).

Sets are returned in file order (upstream flattens ``datasets_by_n_observations`` in its
key order), as the task records of the in-process generators, so a loaded file and
``generate_collection`` / ``boolean_collection`` / ``voxel_collection`` compare equal.
Nothing is downloaded: a missing file is a ``FileNotFoundError``, a malformed one a
``ValueError`` naming the entry.
"""

import json
import os
import random

import numpy as np

from jaxkit import _validate as V
from jaxkit.hypospace._boolean import OPS, BooleanObs, BooleanTask, enumerate_expressions
from jaxkit.hypospace._causal import CausalObs, CausalTask, _edge_code
from jaxkit.hypospace._parse import boolean_key
from jaxkit.hypospace._voxel import VoxelTask, _check_ids


def _sets(doc: dict, where: str) -> list:
    if "datasets_by_n_observations" in doc:
        by_k = doc["datasets_by_n_observations"]
        if not isinstance(by_k, dict):
            raise ValueError(f"{where}: `datasets_by_n_observations` must be an object.")
        return [s for sets in by_k.values() for s in sets]
    if "datasets" in doc:
        return list(doc["datasets"])
    raise ValueError(
        f"{where}: not an upstream HypoSpace dataset (no `datasets_by_n_observations`, "
        "`datasets` or `observation_sets`)."
    )


def _causal(s: dict) -> CausalTask:
    nodes = list(s["nodes"])
    n = len(nodes)
    if n * (n - 1) > 31:
        raise ValueError(f"{n} nodes: canonical ids fit int32 only for n <= 6")
    pos = {v: i for i, v in enumerate(nodes)}
    pert = [pos[o["perturbed_node"]] for o in s["observations"]]
    eff = [[int(o["effects"][v]) for v in nodes] for o in s["observations"]]
    ids = []
    for g in s["ground_truth_graphs"]:
        adj = np.zeros((n, n), np.int8)
        for u, v in g["edges"]:
            adj[pos[u], pos[v]] = 1
        ids.append(_edge_code(adj))
    obs = CausalObs(np.asarray(pert, np.int32), np.asarray(eff, np.int8), np.ones(len(pert), bool))
    return CausalTask(str(s["observation_set_id"]), obs, np.sort(np.asarray(ids, np.int32)))


def _boolean(s: dict, ops: str, table_ids: dict) -> BooleanTask:
    mask = out = 0
    for o in s["observations"]:
        r = 2 * int(o["inputs"]["x"]) + int(o["inputs"]["y"])
        mask |= 1 << r
        out |= int(o["output"]) << r
    ids = []
    for g in s["ground_truth_expressions"]:
        key = boolean_key(g["formula"])
        if key not in table_ids:
            raise ValueError(f"formula {g['formula']!r} is not in the `{ops}` space")
        ids.append(table_ids[key])
    obs = BooleanObs(np.int32(mask), np.int32(out))
    return BooleanTask(str(s["observation_set_id"]), obs, np.sort(np.asarray(ids, np.int32)))


def _grid(text, g: int, what: str) -> np.ndarray:
    if isinstance(text, str):
        if len(text) != g * g or set(text) - {"0", "1"}:
            raise ValueError(f"{what} must be {g * g} digits 0/1, got {text!r}")
        return np.asarray([int(c) for c in text], np.int8).reshape(g, g)
    a = np.asarray(text, np.int8)
    if a.shape != (g, g):
        raise ValueError(f"{what} must be {g}x{g}, got shape {a.shape}")
    return a


def _voxel(s: dict, g: int, max_height: int) -> VoxelTask:
    top = _grid(s["observation"], g, "`observation`")
    w = (max_height + 1) ** np.arange(g * g - 1, -1, -1, dtype=np.int64)
    ids = []
    for st in s["ground_truth_structures"]:
        layers = np.stack([_grid(x, g, "a layer") for x in st["layers"]])
        if np.any(layers[1:] > layers[:-1]) or len(layers) > max_height:
            raise ValueError("a ground-truth structure is unsupported or over `max_height`")
        ids.append(int(layers.sum(axis=0).reshape(-1).astype(np.int64) @ w))
    name = str(s["observation_id"])
    return VoxelTask(name, top, np.sort(np.asarray(ids, np.int32)))


def load_upstream_json(path: str | os.PathLike) -> list:
    """Tasks of an upstream dataset JSON file, in file order (host-side, local files only).

    Detects the domain from the layout (module docstring) and returns ``CausalTask``,
    ``BooleanTask`` or ``VoxelTask`` records equal to the in-process generators' (names,
    observations, sorted admissible ids). Boolean ground-truth formulas are read with our
    parser and looked up in :func:`enumerate_expressions` for the file's operators and
    depth. Raises ``FileNotFoundError`` when ``path`` does not exist (nothing is ever
    downloaded) and ``ValueError`` for a file that is not JSON or not an upstream layout.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`path` must be a str or os.PathLike, got {type(path).__name__}.")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"`path` {os.fspath(path)!r} does not exist: place the upstream dataset JSON there "
            "(nothing is downloaded) or generate the collection in process."
        )
    with open(path, encoding="utf-8") as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"`path` {os.fspath(path)!r} is not valid JSON: {e}") from e
    where = f"`path` {os.fspath(path)!r}"
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: the top level must be an object.")
    meta = doc.get("metadata", {})
    try:
        if "observation_sets" in doc:
            g, max_height = _check_ids(int(meta["grid_size"]), int(meta["max_height"]))
            return [_voxel(s, g, max_height) for s in doc["observation_sets"]]
        sets = _sets(doc, where)
        if not sets:
            return []
        if "ground_truth_graphs" in sets[0]:
            return [_causal(s) for s in sets]
        if "ground_truth_expressions" in sets[0]:
            opset = set(meta.get("operators", sets[0].get("operators", ())))
            names = [k for k, v in OPS.items() if set(v) == opset]
            if not names:
                raise ValueError(f"operators {sorted(opset)} are not an upstream operator set")
            depth = int(meta.get("max_depth", sets[0].get("max_depth")))
            table = enumerate_expressions(names[0], depth)
            table_ids = {k: i for i, k in enumerate(table.keys)}
            return [_boolean(s, names[0], table_ids) for s in sets]
        raise ValueError("sets have neither `ground_truth_graphs` nor `ground_truth_expressions`")
    except (KeyError, TypeError, IndexError) as e:
        raise ValueError(f"{where}: malformed upstream dataset (missing or bad {e}).") from e
    except ValueError as e:
        if str(e).startswith(where):
            raise
        raise ValueError(f"{where}: {e}") from e


def sample_sets(tasks, n_samples: int, *, seed: int | None = 33550336) -> list:
    """Upstream's draw of the observation sets a run scores (host-side).

    ``random.seed(seed); random.sample(tasks, min(n_samples, len(tasks)))`` over the
    flattened collection in upstream order [C] (README seed 33550336), through a private
    ``random.Random`` so the global generator is untouched. With the collections in
    upstream order this reproduces the sets of a published upstream run.
    """
    import operator

    tasks = list(tasks)
    n_samples = operator.index(n_samples)
    if n_samples < 1:
        raise ValueError(f"`n_samples` must be >= 1, got {n_samples}.")
    if seed is not None:  # random.Random would hash a str, a float or a tuple silently
        seed = V.python_int(seed, name="seed")
    return random.Random(seed).sample(tasks, min(n_samples, len(tasks)))
