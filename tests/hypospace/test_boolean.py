"""Boolean genetic-interaction domain (spec eval_robust.md §1.2.4, §1.4 items 1-3, 6).

Oracles: the spec's count table (re-running the authors' generator), truth tables by
evaluating the canonical strings with Python's own operators, a brute-force row check,
the x <-> y swap invariance, and the exact baseline rows of §1.4.6.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import hypospace as H

# ops, depth: |H|, distinct truth tables, sets per k, K range, compat-rejected ground truths
TABLE = {
    ("basic", 1): (4, 4, [6, 13, 12, 4], (1, 4), 0),
    ("basic", 2): (10, 4, [6, 13, 12, 4], (2, 10), 0),
    ("extended", 1): (6, 6, [8, 22, 20, 6], (1, 4), 0),
    ("extended", 2): (34, 14, [8, 24, 32, 14], (1, 20), 1),
    ("full", 1): (7, 7, [8, 22, 22, 7], (1, 4), 1),
    ("full", 2): (65, 16, [8, 24, 32, 16], (1, 40), 31),
}


@pytest.mark.parametrize("ops_depth", list(TABLE), ids=[f"{o}{d}" for o, d in TABLE])
def test_counts(ops_depth):
    size, tables, per_k, (kmin, kmax), rejected = TABLE[ops_depth]
    t = H.enumerate_expressions(*ops_depth)
    tasks = H.boolean_collection(*ops_depth)
    assert len(t.keys) == len(set(t.text)) == size
    assert len(set(t.truth.tolist())) == tables
    assert [sum(x.name.startswith(f"n{k}_") for x in tasks) for k in range(1, 5)] == per_k
    ks = [len(x.admissible) for x in tasks]
    assert (min(ks), max(ks)) == (kmin, kmax)
    assert int((~t.in_space_compat).sum()) == rejected
    assert np.all(t.level <= ops_depth[1]) and np.all(t.level <= t.ref_depth)


def _py_eval(text, x, y):
    expr = text.replace("NOT", "not").replace("AND", "and").replace("OR", "or")
    return int(bool(eval(expr, {}, {"x": bool(x), "y": bool(y)})))  # noqa: S307


def test_truth_tables_and_validator_brute_force():
    t = H.enumerate_expressions("full", 2)
    rows = [(r >> 1, r & 1) for r in range(4)]
    want = np.array([[_py_eval(s, x, y) for x, y in rows] for s in t.text])
    got = (t.truth[:, None] >> np.arange(4)) & 1
    np.testing.assert_array_equal(got, want)
    ids = np.arange(len(t.keys))
    for task in H.boolean_collection("full", 2)[::7]:
        m, o = int(task.obs.mask), int(task.obs.out)
        brute = [
            i for i in ids if all(want[i, r] == (o >> r) & 1 for r in range(4) if (m >> r) & 1)
        ]
        assert task.admissible.tolist() == brute
        mask = np.asarray(H.validate_boolean(t.truth, task.obs))
        assert np.flatnonzero(mask).tolist() == brute


def _swap(e):
    if e[0] == "VAR":
        return ("VAR", {"x": "y", "y": "x"}[e[1]])
    if e[0] == "NOT":
        return ("NOT", _swap(e[1]))
    return (e[0], frozenset(_swap(c) for c in e[1]))


def test_swap_invariance():
    """Swapping x <-> y maps H onto itself and H_O(O) onto H_O(swap O)."""
    t = H.enumerate_expressions("extended", 2)
    index = {k: i for i, k in enumerate(t.keys)}
    perm = np.array([index[_swap(k)] for k in t.keys])  # KeyError if H is not closed
    swap_row = [0, 2, 1, 3]  # (x, y) -> (y, x) on rows r = 2x + y
    tasks = {(int(x.obs.mask), int(x.obs.out)): x for x in H.boolean_collection("extended", 2)}

    def sw(bits):
        return sum(((bits >> r) & 1) << swap_row[r] for r in range(4))

    for (m, o), task in tasks.items():
        other = tasks[(sw(m), sw(o))]
        assert sorted(perm[task.admissible].tolist()) == other.admissible.tolist()


@pytest.mark.parametrize(
    "ops,r_oracle,v_uni,r_uni",
    [
        ("basic", 0.695, 0.429, 0.348),
        ("extended", 0.691, 0.192, 0.170),
        ("full", 0.668, 0.188, 0.164),
    ],
)
def test_exact_baselines(ops, r_oracle, v_uni, r_uni):
    """Spec §1.4.6, depth 2, multiplier 1.0: oracle-uniform R and uniform(H) V / R."""
    t = H.enumerate_expressions(ops, 2)
    tasks = H.boolean_collection(ops, 2)
    adm = np.stack([np.isin(np.arange(len(t.keys)), x.admissible) for x in tasks])
    n = jnp.asarray(np.maximum(1, adm.sum(1)), jnp.int32)
    m = adm.shape[1]
    p_or = jnp.asarray(adm / adm.sum(1, keepdims=True), jnp.float32)
    p_un = jnp.full(adm.shape, 1.0 / m, jnp.float32)
    e_or = jax.vmap(H.expected_metrics)(p_or, jnp.asarray(adm), n)
    e_un = jax.vmap(H.expected_metrics)(p_un, jnp.asarray(adm), n)
    assert abs(float(jnp.mean(e_or.recovery)) - r_oracle) < 5e-4
    assert abs(float(jnp.mean(e_un.validity)) - v_uni) < 5e-4
    assert abs(float(jnp.mean(e_un.recovery)) - r_uni) < 5e-4


def test_boolean_errors():
    with pytest.raises(ValueError, match="`ops`"):
        H.enumerate_expressions("xor", 1)
    with pytest.raises(ValueError, match="`depth`"):
        H.enumerate_expressions("basic", -1)
    with pytest.raises(ValueError, match="`obs.mask`"):
        H.validate_boolean(np.arange(4), H.BooleanObs(np.int32(0), np.int32(0)))
    traced = jax.jit(lambda m: H.validate_boolean(np.arange(4), H.BooleanObs(m, np.int32(0))))
    for m in (0, 0x1F):  # an empty mask matched every table, high bits were dropped (wave 25)
        with pytest.raises(Exception, match="`obs.mask`"):
            jax.block_until_ready(traced(np.int32(m)))
    with pytest.raises(TypeError, match="`truth`"):
        H.validate_boolean(np.zeros(4, np.float32), H.BooleanObs(np.int32(1), np.int32(0)))
    for t in (16, -1):  # issue 13: high bits were dropped (2**20 read as the table 0)
        with pytest.raises(ValueError, match="`truth` must lie in"):
            H.validate_boolean(np.array([3, t]), H.BooleanObs(np.int32(1), np.int32(0)))
    assert H.format_boolean_observation(1, 1) == "(x=0, y=1) -> 1"
    names = [t.name for t in H.boolean_collection("basic", 1)]
    assert names[0] == "n1_inputs_00_outputs_0" and "n2_inputs_00_11_outputs_01" in names
