"""Oracles for the HypoSpace causal domain (spec eval_robust.md §1.4 items 1-3).

The brute-force validator is networkx (descendants + DAG test), written here, never the
code under test.
"""

import itertools

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from jaxkit import hypospace as H


def _nx_valid(adj: np.ndarray, perturbed, effects) -> bool:
    """Upstream rules with networkx: a well-formed DAG whose descendants match."""
    n = adj.shape[0]
    if not np.isin(adj, (0, 1)).all() or np.any(np.diag(adj)):
        return False
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(*np.nonzero(adj), strict=True))
    if not nx.is_directed_acyclic_graph(g):
        return False
    for i, e in zip(perturbed, effects, strict=True):
        want = {j for j in range(n) if e[j]}
        if nx.descendants(g, int(i)) != want:
            return False
    return True


def _nx_dags(n: int) -> set[frozenset]:
    """All DAG edge sets on n nodes via itertools + networkx."""
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    out = set()
    for bits in itertools.product((0, 1), repeat=len(pairs)):
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(p for p, b in zip(pairs, bits, strict=True) if b)
        if nx.is_directed_acyclic_graph(g):
            out.add(frozenset(g.edges))
    return out


def _edges(adj) -> frozenset:
    a = np.asarray(adj)
    return frozenset((int(i), int(j)) for i, j in zip(*np.nonzero(a), strict=True))


def _acyclic_codes(codes: np.ndarray, n: int) -> np.ndarray:
    """Oracle: peel sinks off packed edge codes (bit i*(n-1)+j', NumPy, no jaxkit code)."""
    out = np.zeros((len(codes), n), np.int64)  # out-neighbour masks
    for i in range(n):
        for j in range(n):
            if i != j:
                b = i * (n - 1) + j - (j > i)
                out[:, i] |= ((codes.astype(np.int64) >> b) & 1) << j
    alive = np.full(len(codes), (1 << n) - 1, np.int64)
    for _ in range(n):
        for i in range(n):
            sink = ((alive >> i) & 1).astype(bool) & ((out[:, i] & alive) == 0)
            alive = np.where(sink, alive & ~(1 << i), alive)
    return alive == 0


@pytest.mark.parametrize("n,count", [(1, 1), (2, 3), (3, 25), (4, 543), (5, 29281)])
def test_enumeration_counts(n, count):
    dags = H.enumerate_dags(n)
    assert dags.shape == (count, n, n)
    ids = H.enumerate_dag_ids(n)
    assert ids.dtype == np.uint32 and np.all(np.diff(ids.astype(np.int64)) > 0)
    np.testing.assert_array_equal(np.asarray(H.canonical_id(dags)), ids.astype(np.int32))
    if n <= 3:  # full set equality with the networkx brute force (n=4: 4096 graphs, slow-ish)
        assert {_edges(a) for a in dags} == _nx_dags(n)
    if n == 4:  # every one of the 2^12 codes: the acyclic ones are exactly ours
        every = np.arange(2**12, dtype=np.uint32)
        np.testing.assert_array_equal(every[_acyclic_codes(every, 4)], ids)


def test_enumeration_n6_count_distinct_acyclic():
    """n = 6 (OEIS A003024: 3 781 503) by source layering, no 2^30 scan: the count, all
    distinct and all acyclic (sink-peeling oracle), so exactly the labelled DAGs."""
    ids = H.enumerate_dag_ids(6)
    assert len(ids) == 3_781_503 and ids.dtype == np.uint32 and ids.max() < 2**30
    assert np.all(np.diff(ids.astype(np.int64)) > 0)
    assert _acyclic_codes(ids[::61], 6).all()


@pytest.mark.slow
def test_enumeration_n5_and_n4_sets():
    assert {_edges(a) for a in H.enumerate_dags(4)} == _nx_dags(4)
    every = np.arange(2**20, dtype=np.uint32)
    np.testing.assert_array_equal(every[_acyclic_codes(every, 5)], H.enumerate_dag_ids(5))
    assert _acyclic_codes(H.enumerate_dag_ids(6), 6).all()


def test_max_edges_cap():
    dags = np.asarray(H.enumerate_dags(3, max_edges=1))
    assert len(dags) == 1 + 6 and dags.sum(axis=(1, 2)).max() == 1


def test_collection_counts_and_order():
    c3 = H.generate_collection(3)
    c4 = H.generate_collection(4)
    for coll, per_k in ((c3, [12, 30, 19]), (c4, [32, 204, 392, 219])):
        got = [sum(t.name.startswith(f"n{k}_") for t in coll) for k in range(1, len(per_k) + 1)]
        assert got == per_k
        # names run n{k}_001, 002, ... (upstream counts from 1) in generation order
        names = [t.name for t in coll]
        want = [f"n{k}_{i:03d}" for k, m in enumerate(per_k, 1) for i in range(1, m + 1)]
        assert names == want
    assert np.isclose(np.mean([len(t.admissible) for t in c4]), 9.616, atol=5e-4)
    # order: singles sorted by (perturbed node, effect vector)
    singles = [(int(t.obs.perturbed[0]), tuple(t.obs.effects[0].tolist())) for t in c3[:12]]
    assert singles == sorted(singles)
    assert H.format_observation(1, [0, 0, 1]) == "Perturb(B) -> A:0 B:0 C:1"


def test_collection_admissible_sets_match_networkx():
    table = {_edges(a): a for a in H.enumerate_dags(3)}
    for t in H.generate_collection(3):
        want = {
            e for e, a in table.items() if _nx_valid(np.asarray(a), t.obs.perturbed, t.obs.effects)
        }
        got = {_edges(a) for a in H.from_canonical_id(t.admissible, n=3)}
        assert got == want and len(want) == len(t.admissible)


def test_validator_equals_networkx_on_random_graphs():
    rng = np.random.default_rng(0)
    n, m = 5, 400
    # random digraphs (mostly cyclic) + random DAGs + malformed entries / self loops
    dense = (rng.random((m, n, n)) < 0.3).astype(np.int8)
    dense[:, np.arange(n), np.arange(n)] = 0
    perm = np.stack([rng.permutation(n) for _ in range(m)])
    tri = np.triu((rng.random((m, n, n)) < 0.4).astype(np.int8), 1)
    dags = np.stack([t[np.ix_(p, p)] for t, p in zip(tri, perm, strict=True)])
    bad = dags[:40].copy()
    bad[:20, 0, 0] = 1
    bad[20:, 1, 2] = 2
    adj = np.concatenate([dense, dags, bad])
    for seed in range(3):
        src = dags[seed]
        r = np.asarray(H.reachability(src))
        k = seed + 1
        pert = rng.choice(n, size=k, replace=False)
        obs = H.CausalObs(pert.astype(np.int32), r[pert].astype(np.int8), np.ones(k, bool))
        got = np.asarray(H.validate(jnp.asarray(adj), obs))
        want = np.array([_nx_valid(a, pert, r[pert]) for a in adj])
        np.testing.assert_array_equal(got, want)
        assert got.sum() >= 1
    np.testing.assert_array_equal(np.asarray(H.is_dag(adj)), [_nx_valid(a, [], []) for a in adj])


def test_reachability_equals_networkx_transitive_closure():
    rng = np.random.default_rng(1)
    adj = (rng.random((50, 6, 6)) < 0.25).astype(np.int8)
    got = np.asarray(H.reachability(adj))
    for a, r in zip(adj, got, strict=True):
        g = nx.DiGraph()
        g.add_nodes_from(range(6))
        g.add_edges_from(zip(*np.nonzero(a), strict=True))
        want = np.zeros((6, 6), np.int8)
        for i in range(6):
            for j in nx.descendants(g, i):
                want[i, j] = 1
            # a node on a cycle reaches itself
            if any(i in c for c in nx.simple_cycles(g)):
                want[i, i] = 1
        np.testing.assert_array_equal(r, want)


def test_padding_rows_ignored_and_batched_obs():
    dags = H.enumerate_dags(3)
    t = H.generate_collection(3, ks=(1,))[5]
    pad = H.CausalObs(
        np.array([t.obs.perturbed[0], 2], np.int32),
        np.array([t.obs.effects[0], [1, 1, 1]], np.int8),
        np.array([True, False]),
    )
    np.testing.assert_array_equal(H.validate(dags, pad), H.validate(dags, t.obs))


def test_relabelling_invariance():
    n = 4
    dags = H.enumerate_dags(n)
    ids = np.asarray(H.canonical_id(dags))
    rng = np.random.default_rng(2)
    tasks = H.generate_collection(n)
    for t in [tasks[i] for i in rng.choice(len(tasks), 12, replace=False)]:
        pi = rng.permutation(n)  # node v -> pi[v]
        inv = np.argsort(pi)
        obs = H.CausalObs(
            pi[t.obs.perturbed].astype(np.int32),
            t.obs.effects[:, inv],
            t.obs.mask,
        )
        got = np.sort(ids[np.asarray(H.admissible_mask(dags, obs))])
        mapped = H.from_canonical_id(t.admissible, n=n)
        mapped = np.asarray(mapped)[:, inv][:, :, inv]
        want = np.sort(np.asarray(H.canonical_id(mapped)))
        np.testing.assert_array_equal(got, want)


def test_canonical_roundtrip_and_distinct():
    dags = H.enumerate_dags(4)
    ids = np.asarray(H.canonical_id(dags))
    assert len(set(ids.tolist())) == len(ids)
    np.testing.assert_array_equal(H.from_canonical_id(ids, n=4), dags)


def test_bad_inputs():
    dags = H.enumerate_dags(3)
    obs = H.generate_collection(3, ks=(1,))[0].obs
    with pytest.raises(TypeError, match="`adj`"):
        H.validate(dags[0, 0], obs)
    with pytest.raises(TypeError, match="`adj`"):
        H.validate(dags[:, :, :2], obs)
    with pytest.raises(TypeError, match="`adj`"):
        H.validate(dags.astype(jnp.float32), obs)
    with pytest.raises(TypeError, match="`obs.effects`"):
        H.validate(H.enumerate_dags(4), obs)
    with pytest.raises(ValueError, match="`obs.perturbed`"):
        H.validate(dags, obs._replace(perturbed=np.array([3], np.int32)))
    traced = jax.jit(lambda p: H.validate(dags, obs._replace(perturbed=p)))
    with pytest.raises(Exception, match="`obs.perturbed`"):  # was clipped to node 2 (wave 25)
        jax.block_until_ready(traced(np.array([3], np.int32)))
    with pytest.raises(TypeError, match="obs"):  # the jaxtyping hook or our check
        H.validate(dags, (obs.perturbed, obs.effects, obs.mask))
    with pytest.raises(ValueError, match="`n`"):
        H.enumerate_dags(7)
    with pytest.raises(ValueError, match="`n`"):
        H.enumerate_dag_ids(0)
    with pytest.raises(ValueError, match="`n`"):
        H.enumerate_dags(0)
    with pytest.raises(ValueError, match="`ks`"):
        H.generate_collection(3, ks=(4,))
    with pytest.raises(ValueError, match="`n`"):
        H.from_canonical_id(np.zeros(2, np.int32), n=7)


def test_malformed_never_crash_under_jit():
    obs = H.generate_collection(3, ks=(1,))[0].obs
    failed = H.from_canonical_id(np.array([-1, 0], np.int32), n=3)  # -1 = failed query
    np.testing.assert_array_equal(H.validate(failed, obs), [False, True])
    weird = jnp.array([[[0, 5, 0], [0, 0, 0], [0, 0, 0]], [[0, -1, 0], [0, 0, 0], [0, 0, 0]]])
    out = jax.jit(H.validate)(weird, obs)
    assert not np.asarray(out).any()


def test_large_n_matmul_path_equals_networkx():
    """n > 31 leaves the bitmask rows for boolean matrix squarings."""
    rng = np.random.default_rng(3)
    n = 33
    adj = (rng.random((2, n, n)) < 0.03).astype(np.int8)
    adj[:, np.arange(n), np.arange(n)] = 0
    adj[1] = np.triu(adj[1], 1)  # a DAG
    r1 = np.asarray(H.reachability(adj[1]))
    pert = np.array([0, 5], np.int32)
    obs = H.CausalObs(pert, r1[pert].astype(np.int8), np.ones(2, bool))
    got = np.asarray(H.validate(adj, obs))
    want = [_nx_valid(a, pert, r1[pert]) for a in adj]
    np.testing.assert_array_equal(got, want)
    assert got[1]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(*np.nonzero(adj[1]), strict=True))
    for i in range(n):
        assert set(np.nonzero(r1[i])[0].tolist()) == nx.descendants(g, i)
