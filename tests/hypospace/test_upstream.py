"""The upstream dataset JSON reader: files written here in the authors' layouts (spec
§1.5; the generators' ``json.dump`` output, incl. sympy's formula strings for Boolean) load
to the same tasks, in the same order, as the in-process generators; bad files raise."""

import json

import numpy as np
import pytest

from jaxkit import hypospace as H

NODES = "ABCDEF"
OPS = {"full": ["NOR", "OR", "NOT", "AND"], "extended": ["OR", "NOT", "AND"]}


def _causal_doc(n, fixed_k=None):
    """A causal file as upstream writes it, from networkx-free host arithmetic."""
    dags = np.asarray(H.enumerate_dags(n))
    ids = np.asarray(H.canonical_id(dags))
    by_id = dict(zip(ids.tolist(), dags, strict=True))
    nodes = list(NODES[:n])

    def entry(t, k):
        obs = []
        for p, e in zip(t.obs.perturbed, t.obs.effects, strict=True):
            eff = {nodes[j]: int(v) for j, v in enumerate(e)}
            obs.append(
                {
                    "perturbed_node": nodes[p],
                    "effects": eff,
                    "string": H.format_observation(int(p), e),
                }
            )
        gts = []
        for i in t.admissible[::-1]:  # any order: the reader sorts
            a = by_id[int(i)]
            gts.append(
                {
                    "nodes": nodes,
                    "edges": [[nodes[u], nodes[v]] for u, v in zip(*np.nonzero(a), strict=True)],
                }
            )
        return {
            "observation_set_id": t.name,
            "n_observations": k,
            "observations": obs,
            "ground_truth_graphs": gts,
            "n_compatible_graphs": len(gts),
            "nodes": nodes,
            "max_edges": n * (n - 1) // 2,
        }

    meta = {"nodes": nodes, "max_edges": None, "hypothesis_space_size": len(dags)}
    if fixed_k:
        tasks = H.generate_collection(n, (fixed_k,))
        return {"metadata": meta, "datasets": [entry(t, fixed_k) for t in tasks]}, tasks
    tasks = H.generate_collection(n)
    by_k = {}
    for t in tasks:
        k = len(t.obs.perturbed)
        by_k.setdefault(k, []).append(entry(t, k))  # int keys: json writes "1", "2", ...
    return {"metadata": meta, "datasets_by_n_observations": by_k}, tasks


def _same(loaded, want):
    assert [t.name for t in loaded] == [t.name for t in want]
    for a, b in zip(loaded, want, strict=True):
        for x, y in zip(a, b, strict=True):
            for u, v in zip(
                np.atleast_1d(x) if isinstance(x, str) else x,
                np.atleast_1d(y) if isinstance(y, str) else y,
                strict=True,
            ):
                np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("fixed_k", [None, 2])
def test_causal_file_equals_generator(tmp_path, fixed_k):
    doc, tasks = _causal_doc(3, fixed_k)
    p = tmp_path / "causal.json"
    p.write_text(json.dumps(doc, indent=2))
    loaded = H.load_upstream_json(p)
    assert len(loaded) == (61 if fixed_k is None else 30)
    _same(loaded, tasks)
    assert loaded[0].name == f"n{fixed_k or 1}_001"


def _sympy_formula(key):
    """Upstream's formula string: sympy's printing, '&|~' spelled out as the generator does."""
    sp = pytest.importorskip("sympy")

    def build(e):
        if e[0] == "VAR":
            return sp.Symbol(e[1])
        if e[0] == "NOT":
            return sp.Not(build(e[1]), evaluate=False)
        op = sp.And if e[0] == "AND" else sp.Or
        return op(*[build(c) for c in e[1]], evaluate=False)

    s = str(build(key))
    return s.replace("&", " AND ").replace("|", " OR ").replace("~", "NOT ")


@pytest.mark.parametrize("ops,depth", [("full", 2), ("extended", 1)])
def test_boolean_file_equals_generator(tmp_path, ops, depth):
    table = H.enumerate_expressions(ops, depth)
    formulas = [_sympy_formula(k) for k in table.keys]
    tasks = H.boolean_collection(ops, depth)
    by_k = {}
    for t in tasks:
        rows = [r for r in range(4) if (int(t.obs.mask) >> r) & 1]
        obs = [
            {"inputs": {"x": r >> 1, "y": r & 1}, "output": (int(t.obs.out) >> r) & 1} for r in rows
        ]
        gts = [{"formula": formulas[i], "truth_table": {}} for i in t.admissible]
        by_k.setdefault(str(len(rows)), []).append(
            {
                "observation_set_id": t.name,
                "n_observations": len(rows),
                "observations": obs,
                "ground_truth_expressions": gts,
                "n_compatible_expressions": len(gts),
            }
        )
    meta = {"variables": ["x", "y"], "operators": OPS[ops], "max_depth": depth}
    p = tmp_path / "boolean.json"
    p.write_text(json.dumps({"metadata": meta, "datasets_by_n_observations": by_k}))
    _same(H.load_upstream_json(p), tasks)


def test_voxel_file_equals_generator(tmp_path):
    tasks = H.voxel_collection(3, 3, 2, fixed=False)
    sets = []
    for t in tasks:
        gts = []
        for i in t.admissible:
            h = np.asarray([(int(i) // 4 ** (8 - c)) % 4 for c in range(9)])
            layers = ["".join(str(int(v)) for v in (h > z)) for z in range(h.max())]
            gts.append({"layers": layers, "hash": "x"})
        top = "".join(str(int(v)) for v in t.top.reshape(-1))
        sets.append(
            {
                "observation_id": t.name,
                "observation": top,
                "ground_truth_structures": gts,
                "n_compatible_structures": len(gts),
            }
        )
    meta = {"grid_size": 3, "max_blocks": 2, "max_height": 3, "n_observation_sets": len(sets)}
    p = tmp_path / "3d.json"
    p.write_text(json.dumps({"metadata": meta, "observation_sets": sets}))
    loaded = H.load_upstream_json(p)
    assert len(loaded) == 45 and loaded[0].name == "g3_h3_b1_001"
    _same(loaded, tasks)


def test_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        H.load_upstream_json(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        H.load_upstream_json(bad)
    bad.write_text(json.dumps({"metadata": {}, "something": []}))
    with pytest.raises(ValueError, match="not an upstream HypoSpace dataset"):
        H.load_upstream_json(bad)
    doc, _ = _causal_doc(3, 1)
    del doc["datasets"][0]["ground_truth_graphs"][0]["edges"]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="malformed upstream dataset"):
        H.load_upstream_json(bad)
    sets = [{"observation_id": "g", "observation": "1100", "ground_truth_structures": []}]
    bad.write_text(
        json.dumps({"metadata": {"grid_size": 3, "max_height": 3}, "observation_sets": sets})
    )
    with pytest.raises(ValueError, match="9 digits"):
        H.load_upstream_json(bad)
    gts = [{"formula": "x AND z", "truth_table": {}}]
    obs = [{"inputs": {"x": 0, "y": 0}, "output": 0}]
    ds = [{"observation_set_id": "n1", "observations": obs, "ground_truth_expressions": gts}]
    bad.write_text(
        json.dumps({"metadata": {"operators": ["AND", "OR"], "max_depth": 1}, "datasets": ds})
    )
    with pytest.raises(ValueError, match="not in the `basic` space"):
        H.load_upstream_json(bad)
    with pytest.raises(TypeError, match="path"):
        H.load_upstream_json(3)


def test_sample_sets_reproduces_a_published_run():
    """A third-party run of the authors' causal runner (NUS-ML/_HypoSpace,
    causal/results/n3_all_observations_gpt-4o.json: 20 sets, seed 33550336) scored these
    sets first, with these K; upstream's draw over our n = 3 collection gives the same."""
    published = [("n3_006", 1), ("n3_017", 1), ("n2_016", 2), ("n3_004", 1), ("n2_022", 4),
                 ("n3_010", 2), ("n2_003", 4), ("n2_029", 3)]  # fmt: skip
    got = H.sample_sets(H.generate_collection(3), 20, seed=33550336)
    assert len(got) == 20 and len({t.name for t in got}) == 20
    assert [(t.name, len(t.admissible)) for t in got[:8]] == published
    assert len(H.sample_sets(got, 50)) == 20
    with pytest.raises(ValueError, match="`n_samples`"):
        H.sample_sets(got, 0)
