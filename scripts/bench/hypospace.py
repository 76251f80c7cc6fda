"""HypoSpace causal domain: jitted validator / collection / metrics vs networkx + itertools.

(a) validate random 5-node graphs (uniform over all 2**20 digraphs, so mostly cyclic)
against one observation set: jitted ``validate`` vs a per-graph networkx loop applying
the same rules (anchor ``networkx``; target >= 50x graphs/s; admissible sets must be
identical). Default 2**16 graphs (a shared 2-core machine); ``--full`` runs 2**20.
(b) build the causal n=4 collection (847 sets): ``generate_collection`` (after compile)
vs an itertools + networkx generator of the same rules (informational; sets identical).
(c) metrics of 10**4 simulated runs (10**5 with ``--full``): vmapped ``metrics`` vs Python
sets (informational; identical values).
(d) Boolean domain (full operators, depth 2; 65 expressions, 80 observation sets):
validate 2**12 proposed expressions (2**16 with ``--full``) against every set — jitted
``validate_boolean`` on truth tables vs a plain-Python recursive evaluation of each
expression tree on the observed rows (anchor ``python``; identical verdicts).
(e) 3D voxel domain (3x3 grid, 4 layers): validate 2**14 random layer stacks (2**17 with
``--full``) against one top view, compat and strict — jitted ``validate_voxel`` vs
upstream's explicit layer loop in plain Python (anchor ``python``; identical verdicts).
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


def _py_eval(key, x: int, y: int) -> int:
    if key[0] == "VAR":
        return x if key[1] == "x" else y
    if key[0] == "NOT":
        return 1 - _py_eval(key[1], x, y)
    vals = [_py_eval(c, x, y) for c in key[1]]
    return int(all(vals)) if key[0] == "AND" else int(any(vals))


def bench_boolean(m: int, repeats: int) -> None:
    table = hs.enumerate_expressions("full", 2)
    tasks = hs.boolean_collection("full", 2)
    rng = np.random.default_rng(0)
    prop = rng.integers(0, len(table.keys), size=m)
    masks = np.asarray([int(t.obs.mask) for t in tasks], np.int32)
    outs = np.asarray([int(t.obs.out) for t in tasks], np.int32)
    truth = jnp.asarray(table.truth[prop])

    def ours_fn(tr, mk, ot):
        return hs.validate_boolean(tr[None, :], hs.BooleanObs(mk[:, None], ot[:, None]))

    ours = H.time_jax(ours_fn, truth, jnp.asarray(masks), jnp.asarray(outs), repeats=repeats)
    keys = [table.keys[i] for i in prop]
    rows = [[(r >> 1, r & 1, (o >> r) & 1) for r in range(4) if (mk >> r) & 1]
            for mk, o in zip(masks.tolist(), outs.tolist(), strict=True)]  # fmt: skip

    def py():
        return np.array([[all(_py_eval(k, x, y) == v for x, y, v in obs) for k in keys]
                         for obs in rows])  # fmt: skip

    anchor = H.time_python(py, repeats=1)
    same = bool(np.array_equal(np.asarray(ours.output), anchor.output))
    H.emit(
        bench="hypospace",
        case="boolean_validate_full_d2",
        sizes={"proposals": m, "sets": len(tasks), "expressions": len(table.keys)},
        ours=ours,
        anchor="python",
        anchor_t=anchor,
        target=None,
        note=f"identical verdicts: {same} ({int(anchor.output.sum())} valid pairs); "
        f"ours {m * len(tasks) / ours.median_s:.3g} checks/s",
        identical=same,
    )


def _py_voxel(layers: np.ndarray, top: np.ndarray, max_height: int, strict: bool) -> bool:
    """Upstream's validator as a layer loop (plus the cap when strict)."""
    if not np.isin(layers, (0, 1)).all():
        return False
    seen = np.zeros_like(top)
    for layer in layers:
        seen = seen | layer
    if not np.array_equal(seen, top):
        return False
    for z in range(1, len(layers)):
        for r in range(top.shape[0]):
            for c in range(top.shape[1]):
                if layers[z, r, c] == 1 and layers[z - 1, r, c] != 1:
                    return False
    if strict:
        return bool(layers.sum(axis=0).max() <= max_height)
    return True


def bench_voxel(m: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    top = np.zeros((3, 3), np.int8)
    top[0, 0] = top[1, 2] = 1
    # candidate stacks near the admissible set: random heights 0..4 on the top view's
    # cells plus 5 % stray blocks, so every verdict occurs
    h = rng.integers(1, 5, size=(m, 3, 3)) * top[None]
    layers = (np.arange(4)[None, :, None, None] < h[:, None]).astype(np.int8)
    layers |= (rng.random(layers.shape) < 0.02).astype(np.int8)
    lj = jnp.asarray(layers)
    for strict in (False, True):
        ours = H.time_jax(
            lambda a, t, s=strict: hs.validate_voxel(a, t, max_height=3, strict=s),
            lj, jnp.asarray(top), repeats=repeats,
        )  # fmt: skip
        anchor = H.time_python(
            lambda s=strict: np.array([_py_voxel(a, top, 3, s) for a in layers]), repeats=1
        )
        same = bool(np.array_equal(np.asarray(ours.output), anchor.output))
        H.emit(
            bench="hypospace",
            case="voxel_validate_3x3",
            sizes={"stacks": m, "layers": 4, "grid": 3, "mode": "strict" if strict else "compat"},
            ours=ours,
            anchor="python",
            anchor_t=anchor,
            target=None,
            note=f"identical verdicts: {same} ({int(anchor.output.sum())} valid); ours "
            f"{m / ours.median_s:.3g} stacks/s, python {m / anchor.median_s:.3g} stacks/s",
            identical=same,
        )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    bench_validate(2**20 if args.full else 2**16, args.repeats)
    bench_collection()
    bench_metrics(10**5 if args.full else 10**4, args.repeats)
    bench_boolean(2**16 if args.full else 2**12, args.repeats)
    bench_voxel(2**17 if args.full else 2**14, args.repeats)


if __name__ == "__main__":
    main()
