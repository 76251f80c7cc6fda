"""HypoSpace causal domain: jitted validator / collection / metrics vs networkx + itertools.

(a) validate random 5-node graphs (uniform over all 2**20 digraphs, so mostly cyclic)
against one observation set: jitted ``validate`` vs a per-graph networkx loop applying
the same rules (anchor ``networkx``; target >= 50x graphs/s; admissible sets must be
identical). Default 2**16 graphs (a shared 2-core machine); ``--full`` runs 2**20.
(b) build the causal n=4 collection (847 sets): ``generate_collection`` (after compile)
vs an itertools + networkx generator of the same rules (informational; sets identical).
(c) metrics of 10**4 simulated runs (10**5 with ``--full``): vmapped ``metrics`` vs Python
sets (informational; identical values).
"""

import itertools

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np

from jaxkit import hypospace as hs


def _nx_graph(adj: np.ndarray) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(adj.shape[0]))
    g.add_edges_from(zip(*np.nonzero(adj), strict=True))
    return g


def _nx_valid(adj: np.ndarray, obs: list[tuple[int, set[int]]]) -> bool:
    if not np.isin(adj, (0, 1)).all() or np.any(np.diag(adj)):
        return False
    g = _nx_graph(adj)
    if not nx.is_directed_acyclic_graph(g):
        return False
    return all(nx.descendants(g, i) == want for i, want in obs)


def _nx_collection(n: int) -> list[tuple[str, frozenset]]:
    """Upstream-equivalent generator: itertools masks, networkx DAG test and descendants."""
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    dags = []
    for bits in itertools.product((0, 1), repeat=len(pairs)):
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(p for p, b in zip(pairs, bits, strict=True) if b)
        if nx.is_directed_acyclic_graph(g):
            rows = tuple(tuple(int(j in nx.descendants(g, i)) for j in range(n)) for i in range(n))
            dags.append((frozenset(g.edges), rows))
    singles = sorted({(i, rows[i]) for _, rows in dags for i in range(n)})
    out = []
    for k in range(1, n + 1):
        c = 0
        for combo in itertools.combinations(singles, k):
            if len({i for i, _ in combo}) < k:
                continue
            adm = frozenset(e for e, rows in dags if all(rows[i] == ef for i, ef in combo))
            if adm:
                c += 1
                out.append((f"n{k}_{c:03d}", adm))
    return out


def _edge_sets(ids: np.ndarray, n: int) -> frozenset:
    adj = np.asarray(hs.from_canonical_id(jnp.asarray(ids, jnp.int32), n=n))
    return frozenset(frozenset(zip(*map(list, np.nonzero(a)), strict=True)) for a in adj)


def bench_validate(m: int, repeats: int) -> None:
    n = 5
    key = jax.random.key(0)
    ids = jax.random.randint(key, (m,), 0, 2 ** (n * (n - 1)), jnp.int32)
    adj = hs.from_canonical_id(ids, n=n)
    dags = hs.enumerate_dags(n)
    src = np.asarray(dags[12345])
    r = np.asarray(hs.reachability(src))
    pert = np.array([0, 3], np.int32)
    obs = hs.CausalObs(jnp.asarray(pert), jnp.asarray(r[pert]), jnp.ones(2, bool))
    ours = H.time_jax(
        lambda a, p, e, k: hs.validate(a, hs.CausalObs(p, e, k)), adj, *obs, repeats=repeats
    )
    adj_np = np.asarray(adj)
    obs_nx = [(int(i), {int(j) for j in np.nonzero(r[i])[0]}) for i in pert]
    anchor = H.time_python(lambda: np.array([_nx_valid(a, obs_nx) for a in adj_np]), repeats=1)
    same = bool(np.array_equal(np.asarray(ours.output), anchor.output))
    H.emit(
        bench="hypospace",
        case="validate_random_5node_graphs",
        sizes={"graphs": m, "nodes": n, "observations": 2},
        ours=ours,
        anchor="networkx",
        anchor_t=anchor,
        target=50.0,
        note=f"identical admissible sets: {same} ({int(anchor.output.sum())} valid); "
        f"ours {m / ours.median_s:.3g} graphs/s, networkx {m / anchor.median_s:.3g} graphs/s",
        identical=same,
    )


def bench_collection() -> None:
    hs.generate_collection(4)  # compile
    ours = H.time_python(lambda: hs.generate_collection(4), repeats=3)
    anchor = H.time_python(lambda: _nx_collection(4), repeats=1)
    mine = [(t.name, _edge_sets(t.admissible, 4)) for t in ours.output]
    theirs = [(name, frozenset(frozenset(e) for e in adm)) for name, adm in anchor.output]
    same = mine == theirs
    H.emit(
        bench="hypospace",
        case="causal_collection_n4",
        sizes={"nodes": 4, "sets": len(mine)},
        ours=ours,
        anchor="networkx",
        anchor_t=anchor,
        target=None,
        note=f"host driver over jitted pieces (compile excluded); identical names, order "
        f"and admissible sets: {same}",
        identical=same,
    )


def bench_metrics(runs: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    n_q, k_max = 16, 16
    ids = rng.integers(-1, 40, size=(runs, n_q)).astype(np.int32)
    adm = np.where(np.arange(k_max) < 10, rng.permutation(40)[:k_max], -1).astype(np.int32)
    ours = H.time_jax(
        jax.vmap(hs.metrics, in_axes=(0, None)),
        jnp.asarray(ids),
        jnp.asarray(adm),
        repeats=repeats,
    )
    aset = {int(a) for a in adm if a >= 0}

    def py():
        out = []
        for row in ids:
            parsed = [int(i) for i in row if i >= 0]
            valid = [i for i in parsed if i in aset]
            out.append((len(valid) / n_q, len(set(parsed)) / n_q, len(set(valid)) / len(aset)))
        return np.array(out)

    anchor = H.time_python(py, repeats=1)
    got = np.stack([np.asarray(x) for x in ours.output[:3]], axis=1)
    same = bool(np.allclose(got, anchor.output, rtol=0, atol=1e-6))
    H.emit(
        bench="hypospace",
        case="metrics_simulated_runs",
        sizes={"runs": runs, "queries": n_q, "K": len(aset)},
        ours=ours,
        anchor="python_sets",
        anchor_t=anchor,
        target=None,
        note=f"identical metrics: {same}",
        identical=same,
    )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    bench_validate(2**20 if args.full else 2**16, args.repeats)
    bench_collection()
    bench_metrics(10**5 if args.full else 10**4, args.repeats)


if __name__ == "__main__":
    main()
