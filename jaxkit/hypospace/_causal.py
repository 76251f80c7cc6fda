"""HypoSpace causal-graph domain: DAGs from single-node perturbation observations.

Semantics from the authors' generator and validator [C] (spec eval_robust.md §1.2.2):
perturbing node ``i`` of a DAG ``G`` reads 1 on every descendant of ``i`` (reachable by a
directed path) and 0 elsewhere, ``i`` itself included. A hypothesis is valid for an
observation set iff it is a DAG whose descendant row of every perturbed node equals the
observed effects. Hypotheses are ``[..., n, n]`` integer (or bool) adjacency matrices,
``adj[i, j] = 1`` for the edge ``i -> j``.

Malformed hypotheses (an entry outside {0, 1}, a self loop) and cyclic ones are scored
invalid, never an error: upstream makes them parse failures, so a sampler that emits them
must be scored, not crash. Only a static shape/dtype problem raises.
"""

import itertools
import math
from collections.abc import Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Int, Shaped

from jaxkit import _validate as V
from jaxkit.hypospace._dagenum import enumerate_dag_ids
from jaxkit.hypospace._metrics import _check_task_ids
from jaxkit.hypospace._voxel import _int_or_bool

MAX_ENUM_NODES = 6  # int32 edge codes (30 bits at n = 6)


class CausalObs(NamedTuple):
    """A padded observation set (a pytree, so it batches under ``vmap``).

    Attributes:
      perturbed: ``int32[k_max]`` perturbed node of each observation.
      effects: ``int8[k_max, n]`` observed effect rows (``effects[o, perturbed[o]] = 0``).
      mask: ``bool[k_max]`` which rows are real (padding rows are ignored).
    """

    perturbed: Int[ArrayLike, " k"]
    effects: Int[ArrayLike, "k n"]
    mask: Bool[ArrayLike, " k"]


class CausalTask(NamedTuple):
    """One observation set of a collection (host-side record).

    Attributes:
      name: upstream's id ``n{k}_{counter:03d}`` (counter per k, from 1).
      obs: the observations (``k_max = k``, all rows real).
      admissible: ``int32[K]`` sorted canonical ids of the admissible DAGs ``H_O``.
    """

    name: str
    obs: CausalObs
    admissible: np.ndarray


def _check_adj(adj, name: str = "adj") -> int:
    V.min_ndim(adj, 2, name=name)
    n = jnp.shape(adj)[-1]
    if jnp.shape(adj)[-2] != n:
        raise TypeError(f"`{name}` must be [..., n, n], got shape {jnp.shape(adj)}.")
    _int_or_bool(adj, name)
    if n < 1:
        raise ValueError(f"`{name}` needs at least one node, got shape {jnp.shape(adj)}.")
    return int(n)


def _rows_core(adj):
    """Descendant sets as bitmasks: ``rows[..., i]`` has bit ``j`` iff i reaches j (n <= 31).

    ``ceil(log2 n)`` squarings ``R_i <- R_i | OR_{j in R_i} R_j``: elementwise integer ops
    only (no matmul), so XLA fuses the whole closure for any batch.
    """
    n = adj.shape[-1]
    shifts = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), adj.shape)
    rows = jnp.sum(jnp.where(adj != 0, jnp.left_shift(1, shifts), 0), axis=-1, dtype=jnp.int32)
    for _ in range(max(0, math.ceil(math.log2(n)))):  # paths of length 1 .. 2**t >= n
        new = rows
        for j in range(n):
            hit = (jnp.right_shift(rows, j) & 1) == 1
            new = new | jnp.where(hit, jnp.broadcast_to(rows[..., j : j + 1], rows.shape), 0)
        rows = new
    return rows


def _on_cycle(rows):
    n = rows.shape[-1]
    shifts = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), rows.shape)
    return (jnp.right_shift(rows, shifts) & 1) == 1


def _reach_core(adj):
    n = adj.shape[-1]
    if n > 31:  # bitmasks do not fit: boolean matrix squarings
        r = (adj != 0).astype(jnp.int32)
        for _ in range(math.ceil(math.log2(n))):
            r = jnp.minimum(r + jnp.matmul(r, r), 1)
        return r.astype(jnp.int8)
    rows = _rows_core(adj)
    shape = (*rows.shape, n)
    shifts = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), shape)
    return (jnp.right_shift(jnp.broadcast_to(rows[..., None], shape), shifts) & 1).astype(jnp.int8)


_reach_jit = jax.jit(_reach_core)


def reachability(adj: Shaped[ArrayLike, "..."]) -> Int[Array, "... n n"]:
    """Transitive closure ``R[i, j] = 1`` iff a directed path of length >= 1 joins i to j.

    ``ceil(log2 n)`` squarings of int32 bitmask rows for ``n <= 31`` (boolean matrix
    squarings ``min(R + R @ R, 1)`` above, no overflow). Any nonzero entry counts as an
    edge. ``R[i, i] = 1`` iff ``i`` lies on a cycle. Jitted; batches over
    leading axes.
    """
    _check_adj(adj)
    return _reach_jit(adj)


def _well_formed(adj):
    a = adj.astype(jnp.int32)
    entries = jnp.all((a == 0) | (a == 1), axis=(-2, -1))
    diag = jnp.all(jnp.diagonal(a, axis1=-2, axis2=-1) == 0, axis=-1)
    return entries & diag


def _is_dag_core(adj):
    r = _reach_core(adj)
    return _well_formed(adj) & jnp.all(jnp.diagonal(r, axis1=-2, axis2=-1) == 0, axis=-1)


_is_dag_jit = jax.jit(_is_dag_core)


def is_dag(adj: Shaped[ArrayLike, "..."]) -> Bool[Array, "..."]:
    """True iff ``adj`` is a well-formed (entries in {0, 1}, no self loop) acyclic graph.

    ``adj`` is ``[..., n, n]``: any leading batch axes, one result each.
    """
    _check_adj(adj)
    return _is_dag_jit(adj)


def _validate_core(adj, perturbed, effects, mask):
    n = adj.shape[-1]
    if n > 31:
        r = _reach_core(adj)  # [..., n, n]
        ok = _well_formed(adj) & jnp.all(jnp.diagonal(r, axis1=-2, axis2=-1) == 0, axis=-1)
        rows = jnp.take(r, jnp.clip(perturbed, 0, n - 1), axis=-2)  # [..., k, n]
        eff = jnp.broadcast_to((effects != 0).astype(jnp.int8), rows.shape)
        match = jnp.all(rows == eff, axis=-1)
    else:
        rows = _rows_core(adj)  # [..., n] bitmasks
        ok = _well_formed(adj) & ~jnp.any(_on_cycle(rows), axis=-1)
        w = jnp.left_shift(1, jnp.arange(n, dtype=jnp.int32))
        eff_bits = jnp.sum(jnp.where(effects != 0, jnp.broadcast_to(w, effects.shape), 0), axis=-1)
        got = jnp.take(rows, jnp.clip(perturbed, 0, n - 1), axis=-1)  # [..., k]
        match = got == jnp.broadcast_to(eff_bits, got.shape)
    match = match | jnp.broadcast_to(~mask, match.shape)
    return ok & jnp.all(match, axis=-1)


_validate_jit = jax.jit(_validate_core)


def _check_obs(obs: CausalObs, n: int, *, name: str = "obs") -> None:
    """Static checks of a :class:`CausalObs` over ``n`` nodes (and its concrete node ids)."""
    if not isinstance(obs, CausalObs):
        raise TypeError(f"`{name}` must be a CausalObs, got {type(obs).__name__}.")
    V.ndim(obs.perturbed, 1, name=f"{name}.perturbed")
    V.integer(obs.perturbed, name=f"{name}.perturbed")
    V.shape(obs.effects, (jnp.shape(obs.perturbed)[0], n), name=f"{name}.effects")
    _int_or_bool(obs.effects, f"{name}.effects")  # a float 0.5 would read as an effect
    V.shape(obs.mask, (jnp.shape(obs.perturbed)[0],), name=f"{name}.mask")
    if jnp.result_type(obs.mask) != jnp.bool_:
        raise TypeError(f"`{name}.mask` must be bool, got dtype {jnp.result_type(obs.mask)}.")
    p = V._concrete(obs.perturbed)
    m = V._concrete(obs.mask)
    if p is not None and m is not None and np.any(m & ((p < 0) | (p >= n))):
        raise ValueError(f"`{name}.perturbed` must lie in [0, {n}), got {p.tolist()}.")


def _check_task(task: CausalTask, *, name: str = "task") -> int:
    """Check a :class:`CausalTask` (host-side record): its ``obs`` and ``admissible`` ids.

    Returns the node count ``n``; ``admissible`` must lie in ``[0, 2**(n(n-1)))``.
    """
    if not isinstance(task, CausalTask):
        raise TypeError(f"`{name}` must be a CausalTask, got {type(task).__name__}.")
    if not isinstance(task.obs, CausalObs):
        raise TypeError(f"`{name}.obs` must be a CausalObs, got {type(task.obs).__name__}.")
    V.ndim(task.obs.effects, 2, name=f"{name}.obs.effects")
    n = int(jnp.shape(task.obs.effects)[1])
    _check_obs(task.obs, n, name=f"{name}.obs")
    _check_task_ids(task.admissible, 2 ** (n * (n - 1)), name=f"{name}.admissible")
    return n


def _guard_obs(obs: CausalObs, n: int) -> CausalObs:
    """``obs`` with a run-time range check of a traced ``perturbed`` (it was clipped)."""
    if V._concrete(obs.perturbed) is not None and V._concrete(obs.mask) is not None:
        return obs  # checked on the host by _check_obs
    p = jnp.asarray(obs.perturbed)
    bad = jnp.any(jnp.asarray(obs.mask) & ((p < 0) | (p >= n)))
    p = V.error_if(p, bad, f"`obs.perturbed` must lie in [0, {n}) where `obs.mask`.")
    return obs._replace(perturbed=p)


def validate(adj: Shaped[ArrayLike, "..."], obs: CausalObs) -> Bool[Array, "..."]:
    """Score hypotheses against an observation set: DAG and every effect row matches.

    Args:
      adj: ``[..., n, n]`` candidate adjacency matrices (any integer or bool dtype).
      obs: the observation set, effects over the same ``n`` nodes.

    Returns:
      ``bool[...]``: valid iff well formed, acyclic and, for every real observation,
      ``reachability(adj)[perturbed] == effects`` (effects read as nonzero = 1).
      Cyclic or malformed candidates are False. Jitted; batches over leading axes
      (``admissible_mask`` is this function on an enumerated table).
    """
    n = _check_adj(adj)
    _check_obs(obs, n)
    obs = _guard_obs(obs, n)
    return _validate_jit(adj, obs.perturbed, obs.effects, obs.mask)


admissible_mask = validate


def _bit_index(n: int) -> np.ndarray:
    """``[n, n]`` bit position of each off-diagonal edge (-1 on the diagonal)."""
    idx = -np.ones((n, n), np.int64)
    b = 0
    for i in range(n):
        for j in range(n):
            if i != j:
                idx[i, j] = b
                b += 1
    return idx


def _canon_core(adj):
    n = adj.shape[-1]
    idx = _bit_index(n)
    w = np.where(idx >= 0, np.left_shift(1, np.maximum(idx, 0)), 0).astype(np.int32)
    a = (adj != 0).astype(jnp.int32)
    return jnp.sum(a * jnp.broadcast_to(jnp.asarray(w), a.shape), axis=(-2, -1), dtype=jnp.int32)


_canon_jit = jax.jit(_canon_core)


def canonical_id(adj: Shaped[ArrayLike, "..."]) -> Int[Array, "..."]:
    """Edge-set code: bit ``i*(n-1) + j'`` set for edge ``i -> j`` (``j' = j - (j > i)``).

    int32, so ``n <= 6`` (30 bits); the diagonal is ignored (check validity first). Two
    hypotheses share an id iff they have the same edge set (upstream's md5 identity).
    ``adj`` is ``[..., n, n]``: any leading batch axes, one id each.
    """
    n = _check_adj(adj)
    if n * (n - 1) > 31:
        raise ValueError(f"`adj` has n={n} nodes; canonical ids fit int32 only for n <= 6.")
    return _canon_jit(adj)


def _decode_core(ids, n):
    idx = _bit_index(n)
    shape = (*ids.shape, n, n)
    shift = jnp.broadcast_to(jnp.asarray(np.maximum(idx, 0), jnp.int32), shape)
    bits = (jnp.broadcast_to(ids[..., None, None], shape) >> shift) & 1
    adj = jnp.where(jnp.broadcast_to(jnp.asarray(idx >= 0), shape), bits, 0)
    # failed query: self loops only (arithmetic, not a select, so the batch's sharding
    # carries over from `ids` under an explicit mesh)
    failed = (ids[..., None, None] < 0).astype(adj.dtype)
    eye = jnp.eye(n, dtype=adj.dtype).reshape((1,) * ids.ndim + (n, n))
    return (adj * (1 - failed) + eye * failed).astype(jnp.int8)


_decode_jit = jax.jit(_decode_core, static_argnames=("n",))


def from_canonical_id(ids: Int[ArrayLike, "..."], *, n: int) -> Int[Array, "... n n"]:
    """Inverse of :func:`canonical_id`: ``int8[..., n, n]`` adjacency (jitted).

    A negative id (a failed query) decodes to self loops only, which :func:`validate`
    scores invalid. ``ids`` has any shape (one matrix per id).
    """
    n = V.python_int(n, name="n", minimum=1)
    if n * (n - 1) > 31:
        raise ValueError(f"`n` must be <= 6 for int32 ids, got n={n}.")
    V.integer(ids, name="ids")
    ids = jnp.asarray(ids, jnp.int32)
    top = 2 ** (n * (n - 1)) - 1
    msg = f"`ids` must be < 2**(n(n-1)) = {top + 1} (negative: a failed query)."
    return _decode_jit(V.error_if(ids, jnp.any(ids > top), msg), n)


def enumerate_dags(n: int, max_edges: int | None = None) -> Int[Array, "M n n"]:
    """All labelled DAGs on ``n <= 6`` nodes (optionally <= ``max_edges`` edges).

    Host-side: :func:`enumerate_dag_ids` (source layering in NumPy, no ``2^(n(n-1))``
    scan) decoded by the jitted :func:`from_canonical_id`; sorted by canonical id. Counts
    1, 3, 25, 543, 29 281, 3 781 503 (OEIS A003024). At ``n = 6`` the ``int8`` adjacency
    is 136 MB; prefer the packed codes of :func:`enumerate_dag_ids` (15 MB) there.
    """
    n = V.python_int(n, name="n", minimum=1)
    if n > MAX_ENUM_NODES:
        raise ValueError(f"`n` must be <= {MAX_ENUM_NODES} for enumeration, got n={n}.")
    ids = enumerate_dag_ids(n)
    if max_edges is not None:
        max_edges = V.python_int(max_edges, name="max_edges", minimum=0)
        ids = ids[np.bitwise_count(ids) <= max_edges]
    return _decode_jit(jnp.asarray(ids.astype(np.int32)), n)


def generate_collection(
    n: int, ks: tuple[int, ...] | None = None, *, max_edges: int | None = None
) -> list[CausalTask]:
    """Every observation set on ``n`` nodes with >= 1 admissible DAG, in upstream order.

    Host-side (not jitted). As the authors' generator [C]: list every distinct single
    observation realised by some DAG, sorted by perturbed node then effect vector
    (lexicographic, node order); for each ``k`` in ``ks`` (default ``1..n``) take every
    k-combination (``itertools.combinations`` order) with distinct perturbed nodes, keep
    it iff some DAG reproduces all its rows, and record those DAGs as ``H_O``. Names are
    upstream's ``n{k}_{counter:03d}`` (counter from 1). Counts: n=3: 12/30/19 (61);
    n=4: 32/204/392/219 (847).
    """
    dags = enumerate_dags(n, max_edges)
    if ks is None:
        ks = tuple(range(1, n + 1))
    if isinstance(ks, str | bytes) or not isinstance(ks, Iterable):
        raise TypeError(f"`ks` must be a sequence of ints (or None), got {ks!r}.")
    ks = tuple(V.python_int(k, name="ks", minimum=1) for k in ks)
    if any(k > n for k in ks):
        raise ValueError(f"`ks` must lie in [1, {n}], got {ks}.")
    ids = np.asarray(_canon_jit(dags))
    rows = np.asarray(_reach_jit(dags)).astype(np.int8)  # [M, n, n], zero diagonal
    singles = sorted(
        {(i, tuple(int(v) for v in rows[m, i])) for m in range(len(dags)) for i in range(n)}
    )
    match = np.stack([np.all(rows[:, i, :] == np.asarray(e), axis=-1) for i, e in singles])
    tasks: list[CausalTask] = []
    for k in ks:
        counter = 0
        for combo in itertools.combinations(range(len(singles)), k):
            nodes = [singles[c][0] for c in combo]
            if len(set(nodes)) < k:
                continue
            ok = np.logical_and.reduce(match[list(combo)], axis=0)
            if not ok.any():
                continue
            obs = CausalObs(
                perturbed=np.asarray(nodes, np.int32),
                effects=np.asarray([singles[c][1] for c in combo], np.int8),
                mask=np.ones((k,), bool),
            )
            adm = np.sort(ids[ok]).astype(np.int32)
            counter += 1  # upstream numbers from 1
            tasks.append(CausalTask(f"n{k}_{counter:03d}", obs, adm))
    return tasks


def format_observation(perturbed: int, effects, names: str | None = None) -> str:
    """Upstream string form, e.g. ``Perturb(B) -> A:0 B:0 C:1`` (host-side)."""
    e = [int(v) for v in np.asarray(effects)]
    names = names or "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(e)]
    perturbed = V.python_int(perturbed, name="perturbed", minimum=0)
    if perturbed >= len(e) or len(names) < len(e):
        raise ValueError(
            f"`perturbed`={perturbed} must index the {len(e)} effects, with a name for each."
        )
    return f"Perturb({names[perturbed]}) -> " + " ".join(f"{names[j]}:{v}" for j, v in enumerate(e))


def _edge_code(adj) -> int:
    """The upstream graph id: off-diagonal adjacency entries, row-major, as bits (host-side)."""
    n = adj.shape[0]
    bit, code = 0, 0
    for i in range(n):
        for j in range(n):
            if i != j:
                code |= int(adj[i, j] != 0) << bit
                bit += 1
    return code
