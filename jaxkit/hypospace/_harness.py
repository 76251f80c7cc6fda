"""The HypoSpace harness: run a sampler on every task of a collection, V/U/R by K.

Host-side driver (not a jitted public function) over one module-level jitted core that
vmaps a sampler and the metrics over tasks. A task is a row of a boolean admissible mask
over a candidate table (``Candidates``: ids, a simplicity score, a stratum per candidate);
the query budget is upstream's ``N = max(1, int(K * query_multiplier))`` [C]. Queries are
padded to a static ``n_max`` and masked, so one compile serves every K.

``mode`` (spec §1.3): ``"strict"`` scores a proposal valid iff it is admissible and counts
every parsed proposal towards uniqueness; ``"compat"`` reproduces upstream's scorer: only
candidates passing upstream's in-space test (``Candidates.in_space``; Boolean: sympy depth,
NOR as two levels, NOT over OR read as the disallowed NOR in ``extended``) are valid and
counted for uniqueness, and an optional per-task ``compat_valid`` mask adds proposals
upstream accepts outside ``H_O`` (3D: over the height cap). The closed-form ``expected``
metrics are the strict ones.
"""

import dataclasses
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int

from jaxkit import _validate as V
from jaxkit.hypospace._boolean import TOP_OPS, enumerate_expressions
from jaxkit.hypospace._causal import canonical_id, enumerate_dags
from jaxkit.hypospace._metrics import Expected, Metrics, _metrics_core
from jaxkit.hypospace._samplers import (
    ALLOCATIONS,
    _collapsed_probs_core,
    _draw_core,
    _expected_strat_core,
    _quotas_core,
)

KINDS = ("uniform_space", "uniform_admissible", "enumerative", "collapsed")
MODES = ("compat", "strict")


class Candidates(NamedTuple):
    """A domain's candidate table.

    ``ids int32[M]``, ``score float32[M]`` (simplicity, e.g. edge count), ``strata
    int32[M]`` in ``[0, num_strata)``; ``in_space bool[M]`` upstream's in-space test
    (``mode="compat"``; ``None``: every candidate passes).
    """

    ids: np.ndarray
    score: np.ndarray
    strata: np.ndarray
    num_strata: int
    in_space: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """Which sampler the harness runs (spec §1.2.6).

    ``kind`` in ``uniform_space | uniform_admissible | enumerative | collapsed``;
    ``stratified`` wraps the (non-enumerative) base with ``allocation`` quotas. The
    continuous knobs are passed to the jitted core as traced values.
    """

    kind: str = "collapsed"
    stratified: bool = False
    allocation: str = "oracle_proportional"
    lam: float = 1.0
    zeta: float = 2.0
    temperature: float = 1.0
    p_invalid: float = 0.0
    kappa: float = 0.0

    def __post_init__(self):
        V.one_of(KINDS, kind=self.kind)
        V.one_of(ALLOCATIONS, allocation=self.allocation)
        stratified = V.flag(self.stratified, name="stratified")  # NumPy's bool: hashable
        object.__setattr__(self, "stratified", stratified)
        if self.stratified and self.kind == "enumerative":
            raise ValueError("`stratified` wraps an i.i.d. base; `kind='enumerative'` has none.")
        V.non_negative(lam=self.lam)
        V.non_negative(zeta=self.zeta)
        V.positive(temperature=self.temperature)
        V.in_interval(low=0.0, high=1.0, closed="left", p_invalid=self.p_invalid)
        V.in_interval(low=0.0, high=1.0, kappa=self.kappa)


class Report(NamedTuple):
    """Per-task results.

    ``k`` (= |H_O|), ``n_queries``, sampled ``metrics`` and the closed-form ``expected``
    metrics (exact for ``kappa = 0``).
    """

    k: Int[Array, " T"]
    n_queries: Int[Array, " T"]
    metrics: Metrics
    expected: Expected


def _task_core(key, table, adm, valid, counted, score, strata, n, params, n_max, n_strata):
    """One task; every entry of ``params`` is traced (one compile serves every sampler).

    ``params = (kind code, stratified, blind, lam, zeta, temperature, p_invalid, kappa)``.
    """
    code, strat, blind, lam, zeta, temp, p_inv, kappa = params
    f = jnp.float32
    k_p, k_d = jax.random.split(key)
    k = jnp.sum(adm)
    p_space = jnp.full(adm.shape, 1.0 / adm.shape[0], f)
    p_adm = jnp.where(adm, 1.0 / jnp.maximum(k, 1).astype(f), 0.0)
    p_col = _collapsed_probs_core(k_p, adm, score, lam, zeta, temp, p_inv)
    p = jnp.where(code == 0, p_space, jnp.where(code == 1, p_adm, p_col))
    quotas = _quotas_core(adm, strata, n, n_strata, blind)
    quotas = jnp.where(
        strat, quotas, jnp.where(jnp.arange(n_strata) == 0, n, 0).astype(quotas.dtype)
    )
    strata = jnp.where(strat, strata, 0)
    qi = jnp.arange(n_max, dtype=n.dtype)
    order = jnp.argsort(jnp.where(adm, jax.random.uniform(k_d, adm.shape), 2.0))
    ids_enum = table[order][qi % jnp.maximum(k, 1)]
    nk = jnp.minimum(n, k).astype(f)
    e_enum = Expected(jnp.asarray(1.0, f), nk / n.astype(f), nk / jnp.maximum(k, 1).astype(f))
    ids = _draw_core(k_d, table, p, strata, quotas, kappa, n_max, True, adm)
    e_iid = _expected_strat_core(p, adm, strata, quotas, adm)  # one stratum: the i.i.d. formula
    enum = code == 2
    ids = jnp.where(qi < n, jnp.where(enum, ids_enum, ids), -1)
    expected = jax.tree.map(lambda a, b: jnp.where(enum, a, b), e_enum, e_iid)
    idx = jnp.argmax(table[None, :] == ids[:, None], axis=1)  # ids are table entries
    m = _metrics_core(ids, jnp.where(adm, table, -1), valid[idx], counted[idx])
    scale = f(n_max) / n.astype(f)
    m = Metrics(m.validity * scale, m.uniqueness * scale, m.recovery, m.parse_rate * scale)
    return m, expected


_tasks_jit = jax.jit(
    jax.vmap(_task_core, in_axes=(0, None, 0, 0, None, None, None, 0, None, None, None)),
    static_argnums=(9, 10),
)


def _check_candidates(c: Candidates, *, name: str = "candidates") -> np.ndarray:
    """Check a :class:`Candidates` table (host-side record); returns ``in_space`` (bool[M]).

    ``ids`` are names compared only for equality, but a negative one would read as padding;
    a ``strata`` entry outside ``[0, num_strata)`` would fall in no stratum (no quota).
    """
    if not isinstance(c, Candidates):
        raise TypeError(f"`{name}` must be a Candidates, got {type(c).__name__}.")
    V.ndim(c.ids, 1, name=f"{name}.ids")
    V.integer(c.ids, name=f"{name}.ids")
    m = jnp.shape(c.ids)[0]
    V.shape(c.score, (m,), name=f"{name}.score")
    V.shape(c.strata, (m,), name=f"{name}.strata")
    V.integer(c.strata, name=f"{name}.strata")
    num = V.python_int(c.num_strata, name=f"{name}.num_strata", minimum=1)
    ids, strata = np.asarray(c.ids), np.asarray(c.strata)
    if m and int(ids.min()) < 0:
        raise ValueError(f"`{name}.ids` must be >= 0 (a negative id is padding), got {ids.min()}.")
    if m and (int(strata.min()) < 0 or int(strata.max()) >= num):
        raise ValueError(
            f"`{name}.strata` must lie in [0, {num}), got [{strata.min()}, {strata.max()}]."
        )
    if c.in_space is None:
        return np.ones(m, bool)
    V.shape(c.in_space, (m,), name=f"{name}.in_space")
    V.boolean(c.in_space, name=f"{name}.in_space")
    return np.asarray(c.in_space)


def task_masks(admissible_ids: list, table_ids) -> np.ndarray:
    """``bool[T, M]``: row ``t`` marks the table entries listed in ``admissible_ids[t]``."""
    table_ids = np.asarray(table_ids)
    if len(admissible_ids) == 0:
        raise ValueError("`admissible_ids` must list at least one task.")
    return np.stack([np.isin(table_ids, np.asarray(a)) for a in admissible_ids])


def causal_candidates(n: int) -> Candidates:
    """Every DAG on ``n <= 5`` nodes; score and stratum = edge count (spec §1.2.6)."""
    dags = enumerate_dags(n)
    edges = np.asarray(jnp.sum(dags, axis=(-2, -1), dtype=jnp.int32))
    ids = np.asarray(canonical_id(dags), np.int32)
    return Candidates(ids, edges.astype(np.float32), edges.astype(np.int32), n * (n - 1) + 1)


def boolean_candidates(ops: str, depth: int) -> Candidates:
    """Every expression of the Boolean space; score = node count, stratum = top operator."""
    t = enumerate_expressions(ops, depth)
    ids = np.arange(len(t.keys), dtype=np.int32)
    return Candidates(ids, t.size.astype(np.float32), t.top_op, len(TOP_OPS), t.in_space_compat)


def evaluate(
    candidates: Candidates,
    admissible: Bool[np.ndarray, "T M"],
    spec: SamplerSpec,
    *,
    key,
    query_multiplier: float = 1.0,
    n_queries: int | None = None,
    chunk: int = 256,
    mode: str = "compat",
    compat_valid: Bool[np.ndarray, "T M"] | None = None,
) -> Report:
    """Run ``spec`` once on every task (row of ``admissible``) and score it.

    Host-side driver. ``N = max(1, int(K * query_multiplier))`` per task [C], or the fixed
    ``n_queries``. Task ``t`` uses ``jax.random.fold_in(key, t)``. Tasks run in vmapped
    chunks of ``chunk``; ``n_max`` (the padded query axis) is ``max N`` rounded up to 8.
    ``mode`` is ``"compat"`` (upstream's scorer, the default as in the spec) or
    ``"strict"`` (see the module docstring); ``compat_valid`` (``bool[T, M]``, a superset
    of ``admissible``) is only read in compat mode.

    Raises:
      TypeError: ``candidates`` or ``spec`` of the wrong type (``candidates.ids`` and
        ``.strata`` integer ``[M]``, ``.in_space`` bool ``[M]`` or None), ``admissible`` not
        ``bool[T, M]`` with ``T >= 1`` tasks and ``M`` the number of candidates,
        ``compat_valid`` not a bool array of that shape, or ``key`` not a PRNG key.
      ValueError: a negative ``candidates.ids``, a ``candidates.strata`` outside
        ``[0, num_strata)``, ``compat_valid`` missing an admissible candidate, an unknown ``mode``,
        ``query_multiplier`` not > 0, ``chunk`` or ``n_queries`` < 1.
    """
    in_space = _check_candidates(candidates)
    if not isinstance(spec, SamplerSpec):
        raise TypeError(f"`spec` must be a SamplerSpec, got {type(spec).__name__}.")
    adm = np.asarray(admissible)
    if adm.dtype != bool or adm.ndim != 2 or adm.shape[1] != len(candidates.ids):
        raise TypeError(
            f"`admissible` must be bool[T, {len(candidates.ids)}], got {adm.dtype}{adm.shape}."
        )
    V.nonempty(adm, name="admissible")  # no task: no query budget, nothing to report
    V.one_of(MODES, mode=mode)
    cv = adm if compat_valid is None else np.asarray(compat_valid)
    if cv.dtype != bool or cv.shape != adm.shape:
        raise TypeError(f"`compat_valid` must be bool{adm.shape}, got {cv.dtype}{cv.shape}.")
    if np.any(adm & ~cv):
        raise ValueError("`compat_valid` must include every admissible candidate.")
    if mode == "strict":
        valid_m, counted = adm, np.ones_like(in_space)
    else:
        valid_m, counted = cv & in_space[None, :], in_space
    V.is_key(key)
    V.positive(query_multiplier=query_multiplier)
    chunk = V.python_int(chunk, name="chunk", minimum=1)
    k = adm.sum(axis=1)
    if n_queries is None:
        n = np.maximum(1, (k * query_multiplier).astype(np.int64))
    else:
        n = np.full_like(k, V.python_int(n_queries, name="n_queries", minimum=1))
    n_max = int(8 * math.ceil(n.max() / 8))
    params = (
        jnp.int32(KINDS.index(spec.kind)),
        jnp.bool_(spec.stratified),
        jnp.bool_(spec.allocation == "blind_uniform"),
        *(jnp.float32(getattr(spec, a)) for a in ("lam", "zeta", "temperature", "p_invalid")),
        jnp.float32(spec.kappa),
    )
    table = jnp.asarray(candidates.ids, jnp.int32)
    score = jnp.asarray(candidates.score, jnp.float32)
    strata = jnp.asarray(candidates.strata, jnp.int32)
    t = len(adm)
    chunk = min(chunk, t)
    pad = -t % chunk  # the last chunk is padded with repeats: one compile per shape
    adm_p = np.concatenate([adm, adm[:pad]]) if pad else adm
    val_p = np.concatenate([valid_m, valid_m[:pad]]) if pad else valid_m
    counted_j = jnp.asarray(counted)
    n_p = np.concatenate([n, n[:pad]]) if pad else n
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(t + pad))
    outs = []
    for s in range(0, t + pad, chunk):
        sl = slice(s, s + chunk)
        outs.append(
            _tasks_jit(
                keys[sl], table, jnp.asarray(adm_p[sl]), jnp.asarray(val_p[sl]), counted_j,
                score, strata,
                jnp.asarray(n_p[sl], jnp.int32), params, n_max, candidates.num_strata,
            )
        )  # fmt: skip
    m, e = jax.tree.map(lambda *xs: jnp.concatenate(xs)[:t], *outs)
    return Report(jnp.asarray(k, jnp.int32), jnp.asarray(n, jnp.int32), m, e)


def _check_report(report: Report, *, name: str = "report") -> np.ndarray:
    """Check a :class:`Report` (host-side record); returns ``k``.

    ``k`` and ``n_queries`` integer ``[T]`` counts (``k >= 0``: a negative one would fall
    in no bucket; ``n_queries >= 1``), every field of ``metrics`` and ``expected`` ``[T]``.
    """
    if not isinstance(report, Report):
        raise TypeError(f"`{name}` must be a Report (from evaluate), got {type(report).__name__}.")
    V.ndim(report.k, 1, name=f"{name}.k")
    t = jnp.shape(report.k)
    for field, low in (("k", 0), ("n_queries", 1)):
        x = getattr(report, field)
        V.shape(x, t, name=f"{name}.{field}")
        V.integer(x, name=f"{name}.{field}")
        x = np.asarray(x)
        if x.size and int(x.min()) < low:
            raise ValueError(f"`{name}.{field}` must be counts >= {low}, got {x.min()}.")
    for field, kind in (("metrics", Metrics), ("expected", Expected)):
        rec = getattr(report, field)
        if not isinstance(rec, kind):
            raise TypeError(
                f"`{name}.{field}` must be a {kind.__name__}, got {type(rec).__name__}."
            )
        for f in kind._fields:
            V.shape(getattr(rec, f), t, name=f"{name}.{field}.{f}")
    return np.asarray(report.k)


def _check_edges(edges) -> tuple[int, ...]:
    """``by_k``'s bucket edges: a non-empty, strictly increasing sequence of ints >= 0."""
    if not isinstance(edges, (tuple, list)):
        raise TypeError(f"`edges` must be a tuple or list of ints, got {edges!r}.")
    edges = tuple(V.python_int(e, name="edges", minimum=0) for e in edges)
    if not edges or any(a >= b for a, b in itertools.pairwise(edges)):
        raise ValueError(f"`edges` must be non-empty and strictly increasing, got {edges}.")
    return edges


def by_k(report: Report, edges=(2, 8, 24)) -> list[dict]:
    """Mean V/U/R (sampled and expected) per K bucket (host-side).

    Buckets ``K <= e0`` (``K = 0`` included), ``e0 < K <= e1``, ..., ``K > e_last``; empty
    ones are left out, so the rows' ``sets`` always sum to the number of tasks. Also
    ``R_std``, the population (ddof = 0, as upstream) std of recovery.

    Raises:
      TypeError: ``report`` not a :class:`Report` with integer ``k`` / ``n_queries``
        ``[T]`` and every metric ``[T]``; ``edges`` not a sequence of Python ints.
      ValueError: a negative ``report.k`` or a ``report.n_queries`` below 1; ``edges``
        empty, negative or not strictly increasing.
    """
    k = _check_report(report)
    edges = _check_edges(edges)
    lows = (-1, *edges)
    highs = (*edges, np.inf)
    rows = []
    for lo, hi in zip(lows, highs, strict=True):
        sel = (k > lo) & (k <= hi)
        if not sel.any():
            continue
        label = f"K<={hi}" if lo == -1 else (f"K>{lo}" if hi == np.inf else f"{lo}<K<={hi}")
        m = {
            f: float(np.mean(np.asarray(getattr(report.metrics, f))[sel])) for f in Metrics._fields
        }
        x = {
            f: float(np.mean(np.asarray(getattr(report.expected, f))[sel]))
            for f in Expected._fields
        }
        rows.append({
            "bucket": label, "sets": int(sel.sum()), "V": m["validity"], "U": m["uniqueness"],
            "R": m["recovery"], "R_std": float(np.std(np.asarray(report.metrics.recovery)[sel])),
            "parse": m["parse_rate"], "E_V": x["validity"], "E_U": x["uniqueness"],
            "E_R": x["recovery"],
        })  # fmt: skip
    return rows
