"""HypoSpace metrics, i.i.d. baseline samplers and their closed-form expectations.

Metric definitions are the authors' code's [C] (spec eval_robust.md §1.2.1), for ``N``
queries returning canonical ids (``-1`` = a query that never parsed):

- validity ``V = n_valid / N``, valid proposals counted with duplicates;
- uniqueness ``U = n_distinct / N``, distinct parsed proposals, valid or not;
- recovery ``R = |distinct valid proposals| / K``, ``K = |H_O|``;
- parse rate ``= n_parsed / N``.

``metrics(..., valid=, counted=)`` takes a mode's per-query judgement where upstream's scorer
departs from membership in ``H_O`` (``compat`` vs ``strict``, spec §1.3).

A proposal is valid iff its id is in the admissible set (the validator is exact, so the
admissible set is the valid set). Expectations for i.i.d. samplers (spec §1.2.7, [R]):
``E[V] = sum_{H_O} p``, ``E[U] = sum_h (1 - (1 - p_h)^N) / N``,
``E[R] = sum_{H_O} (1 - (1 - p_h)^N) / K``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate as V


class Metrics(NamedTuple):
    """Per-run HypoSpace scores (float32 scalars, or batched)."""

    validity: Float[Array, "..."]
    uniqueness: Float[Array, "..."]
    recovery: Float[Array, "..."]
    parse_rate: Float[Array, "..."]


def _metrics_core(ids, admissible, valid=None, counted=None):
    n = ids.shape[-1]
    ids = ids.astype(jnp.int32)
    adm = admissible.astype(jnp.int32)
    k = jnp.sum(adm >= 0)
    parsed = ids >= 0
    # membership by an [N, K] comparison (N, K are query / answer counts, small)
    eq = ids[:, None] == jnp.broadcast_to(adm[None, :], (n, adm.shape[0]))
    member = parsed & jnp.any(eq, axis=1)
    valid = member if valid is None else parsed & valid.astype(bool)
    counted = parsed if counted is None else parsed & counted.astype(bool)
    s = jnp.sort(jnp.where(counted, ids, -1))
    first = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    n_distinct = jnp.sum(first & (s >= 0))
    sv = jnp.sort(jnp.where(valid & member, ids, -1))
    firstv = jnp.concatenate([jnp.ones((1,), bool), sv[1:] != sv[:-1]])
    n_found = jnp.sum(firstv & (sv >= 0))
    f = jnp.float32
    return Metrics(
        validity=jnp.sum(valid).astype(f) / n,
        uniqueness=n_distinct.astype(f) / n,
        recovery=n_found.astype(f) / jnp.maximum(k, 1).astype(f),
        parse_rate=jnp.sum(parsed).astype(f) / n,
    )


_metrics_jit = jax.jit(_metrics_core)


def metrics(
    ids: Int[ArrayLike, " N"],
    admissible: Int[ArrayLike, " K"],
    *,
    valid: Bool[ArrayLike, " N"] | None = None,
    counted: Bool[ArrayLike, " N"] | None = None,
) -> Metrics:
    """Validity, uniqueness, recovery and parse rate of one run (jitted; vmap over runs).

    Args:
      ids: ``int[N]`` proposed canonical ids, ``-1`` (any negative) for a failed query;
        compared only for equality with ``admissible`` (any integer is an id).
      admissible: ``int[K_max]`` distinct admissible ids, padded with ``-1`` (any negative);
        ``K`` is the number of non-negative entries (recovery is 0 when ``K = 0``).
      valid: optional ``bool[N]`` validity of each query as a mode's validator judged it
        (default: the id is admissible, ``mode="strict"``). Upstream's scorer differs
        (``mode="compat"``, spec §1.3): a 3D answer over the height cap is valid yet never
        in ``H_O``; a Boolean ground truth outside upstream's in-space test is invalid.
        Recovery only counts proposals that are both valid and admissible.
      counted: optional ``bool[N]``, which parsed proposals count towards uniqueness
        (default all; upstream's Boolean scorer counts only in-space ones).
    """
    V.ndim(ids, 1, name="ids")
    V.ndim(admissible, 1, name="admissible")
    V.integer(ids, name="ids")
    V.integer(admissible, name="admissible")
    V.nonempty(ids, name="ids")
    if jnp.shape(admissible)[0] == 0:
        raise ValueError("`admissible` must have K_max >= 1 entries (pad with -1).")
    for name, x in (("valid", valid), ("counted", counted)):
        if x is not None:
            V.shape(x, jnp.shape(ids), name=name)
            if jnp.result_type(x) != jnp.bool_:
                raise TypeError(f"`{name}` must be bool, got dtype {jnp.result_type(x)}.")
    return _metrics_jit(ids, admissible, valid, counted)


def _sample_masked(key, mask, n_queries):
    logits = jnp.where(mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits, shape=(n_queries,))


_sample_jit = jax.jit(_sample_masked, static_argnames=("n_queries",))


def _check_table(table, name):
    V.ndim(table, 1, name=name)
    V.integer(table, name=name)


def _check_task_ids(ids, top: int, *, name: str) -> None:
    """A task record's ``admissible``: ``int[K]`` ids in ``[0, top)`` (host-side, no padding).

    An id off the space can never match a proposal (recovery silently 0), and ``int(0.5)``
    would truncate a float id to another hypothesis.
    """
    V.ndim(ids, 1, name=name)
    V.integer(ids, name=name)
    a = np.asarray(ids)
    if a.size and (int(a.min()) < 0 or int(a.max()) >= top):
        raise ValueError(f"`{name}` must lie in [0, {top}), got [{a.min()}, {a.max()}].")


def _check_admissible(admissible):
    """:func:`_check_table`, and (when concrete) at least one id that is not padding."""
    _check_table(admissible, "admissible")
    a = V._concrete(admissible)
    if a is not None and not (a >= 0).any():
        raise ValueError("`admissible` holds no id (all entries are padding).")


def uniform_space(table: Int[ArrayLike, " M"], n_queries: int, *, key) -> Int[Array, " N"]:
    """I.i.d. uniform draws over a candidate table (random guessing over ``H``).

    ``table`` is ``int[M]`` candidate ids (e.g. ``canonical_id(enumerate_dags(n))``), copied
    as they are; entries < 0 are padding and never drawn. Returns ``int32[n_queries]`` ids.
    """
    _check_table(table, "table")
    t = V._concrete(table)
    if t is not None and not (t >= 0).any():
        raise ValueError("`table` holds no id (empty, or all entries are padding).")
    n_queries = V.python_int(n_queries, name="n_queries", minimum=1)
    V.is_key(key)
    idx = _sample_jit(key, jnp.asarray(table) >= 0, n_queries)
    return jnp.asarray(table, jnp.int32)[idx]


def uniform_admissible(
    admissible: Int[ArrayLike, " K"], n_queries: int, *, key
) -> Int[Array, " N"]:
    """The oracle sampler: i.i.d. uniform over ``H_O`` (valid but memoryless).

    ``admissible`` is padded with ``-1`` as in :func:`metrics`; it must hold one id.
    """
    _check_admissible(admissible)
    return uniform_space(admissible, n_queries, key=key)


def _enumerative_core(key, admissible, n_queries):
    adm = admissible.astype(jnp.int32)
    u = jax.random.uniform(key, adm.shape)
    order = jnp.argsort(jnp.where(adm >= 0, u, 2.0))  # random order, padding last
    k = jnp.maximum(jnp.sum(adm >= 0), 1)
    return adm[order][jnp.arange(n_queries) % k]


_enumerative_jit = jax.jit(_enumerative_core, static_argnames=("n_queries",))


def enumerative(admissible: Int[ArrayLike, " K"], n_queries: int, *, key) -> Int[Array, " N"]:
    """Perfect-memory sampler: a random permutation of ``H_O``, cycled when ``N > K``.

    With ``N = K`` it scores ``V = U = R = 1``; with ``N = mK`` it scores ``V = R = 1``,
    ``U = 1/m``. ``admissible`` is padded with ``-1`` as in :func:`metrics`.
    """
    _check_admissible(admissible)
    n_queries = V.python_int(n_queries, name="n_queries", minimum=1)
    V.is_key(key)
    return _enumerative_jit(key, admissible, n_queries)


class Expected(NamedTuple):
    """Closed-form expected metrics of an i.i.d. sampler."""

    validity: Float[Array, "..."]
    uniqueness: Float[Array, "..."]
    recovery: Float[Array, "..."]


def _expected_core(p, admissible, n_queries):
    n_queries = jnp.asarray(n_queries, p.dtype)
    hit = 1.0 - jnp.exp(n_queries * jnp.log1p(-jnp.minimum(p, 1.0)))
    hit = jnp.where(p >= 1.0, 1.0, hit)
    k = jnp.maximum(jnp.sum(admissible), 1).astype(p.dtype)
    return Expected(
        validity=jnp.sum(jnp.where(admissible, p, 0.0)),
        uniqueness=jnp.sum(hit) / n_queries,
        recovery=jnp.sum(jnp.where(admissible, hit, 0.0)) / k,
    )


_expected_jit = jax.jit(_expected_core)  # n_queries traced: one compile for every K


def expected_metrics(
    p: Float[ArrayLike, " M"], admissible: Bool[ArrayLike, " M"], n_queries: Int[ArrayLike, ""]
) -> Expected:
    """Exact ``E[V], E[U], E[R]`` of ``n_queries`` i.i.d. draws from ``p`` over a table.

    ``p`` (floating, sums to 1 over the table; failed queries are not modelled) and the
    boolean ``admissible`` mask are aligned with the candidate table. ``n_queries`` is an
    int or a traced integer scalar (one compile for every K; vmap over tasks). Jitted.
    """
    V.ndim(p, 1, name="p")
    V.floating(p, name="p")
    V.shape(admissible, jnp.shape(p), name="admissible")
    V.boolean(admissible, name="admissible")  # a float 0.5 would count as admissible
    if isinstance(n_queries, bool):
        raise TypeError("`n_queries` must be an int, got bool.")
    V.ndim(n_queries, 0, name="n_queries")
    V.integer(n_queries, name="n_queries")
    n_arr = jnp.asarray(n_queries, jnp.int32)
    n_arr = V.error_if(n_arr, n_arr < 1, "`n_queries` must be >= 1.")
    pv = V._concrete(p)
    if pv is not None and not (pv.min() >= 0 and abs(float(pv.sum()) - 1.0) <= 1e-3):
        raise ValueError(f"`p` must be a probability vector (>= 0, sum 1), sum={pv.sum()}.")
    if pv is None:  # traced: the same check at run time (NaN fails it)
        p = jnp.asarray(p)
        ok = jnp.all(p >= 0) & (jnp.abs(jnp.sum(p) - 1.0) <= 1e-3)
        p = V.error_if(p, ~ok, "`p` must be a probability vector (>= 0, sum 1, no NaN).")
    return _expected_jit(p, jnp.asarray(admissible, bool), n_arr)
