"""The collapsed stand-in, the stratified wrapper and their exact expectations [R].

Spec eval_robust.md §1.2.6-1.2.7 (our reconstruction; the paper's "stratified decoding"
and its coverage bound could not be read). All samplers work over a candidate *table*
(``int[M]`` ids, e.g. every DAG on n nodes) with a boolean ``admissible[M]`` mask of
``H_O``, and return ``int32[N]`` ids.

- ``collapsed_probs``: the i.i.d. law of a mode-collapsed generator: over ``H_O`` the
  softmax of ``(-lam * score - zeta * log rank) / temperature`` (``score`` a simplicity
  statistic such as the edge count, ``rank`` a random order of ``H_O`` fixed by ``key``),
  times ``1 - p_invalid``; ``p_invalid`` spread uniformly over the other candidates.
- ``collapsed``: ``N`` draws from that law where, with probability ``kappa`` per query,
  the draw is restricted to not-yet-proposed ids (the prompt's "do not repeat"); one
  ``lax.scan`` over queries; avoidance stays inside the valid / invalid part drawn, so
  ``E[V] = 1 - p_invalid`` for any ``kappa``. ``kappa = 0`` is i.i.d. (``expected_metrics``
  is exact).
- ``stratum_quotas`` / ``stratified``: split the ``N`` queries over strata of a cheap
  structural statistic by largest-remainder rounding (``oracle_proportional``: weights
  ``|H_O ∩ s|``; ``blind_uniform``: equal over the strata present in the table), then draw
  within each stratum from the base law renormalised to it.
- ``expected_metrics_stratified``: ``E[R] = (1/K) sum_s sum_{h in H_O ∩ s}
  (1 - (1 - p_{h|s})^{N_s})`` and the matching ``E[V]``, ``E[U]``.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Shaped

from jaxkit import _validate as V
from jaxkit._numerics import inverse_permutation
from jaxkit.hypospace._metrics import Expected

ALLOCATIONS = ("oracle_proportional", "blind_uniform")


def _ranks(key, admissible):
    """1-based rank of every admissible candidate in a random order (others: M)."""
    u = jax.random.uniform(key, admissible.shape)
    order = jnp.argsort(jnp.where(admissible, u, 2.0))
    return (inverse_permutation(order.astype(jnp.int32)) + 1).astype(jnp.float32)


def _collapsed_probs_core(key, admissible, score, lam, zeta, temperature, p_invalid):
    f = score.dtype
    logits = (-lam * score - zeta * jnp.log(_ranks(key, admissible).astype(f))) / temperature
    logits = jnp.where(admissible, logits, -jnp.inf)
    p_adm = jax.nn.softmax(logits)
    n_inv = jnp.sum(~admissible)
    any_adm = jnp.any(admissible)
    pi = jnp.where(n_inv > 0, jnp.where(any_adm, p_invalid, 1.0), 0.0).astype(f)
    p_inv = jnp.where(admissible, 0.0, pi / jnp.maximum(n_inv, 1).astype(f))
    return jnp.where(admissible, (1.0 - pi) * jnp.where(any_adm, p_adm, 0.0), p_inv)


def _check_candidates(admissible, score):
    V.ndim(admissible, 1, name="admissible")
    V.boolean(admissible, name="admissible")  # a float 0.5 would count as admissible
    V.shape(score, jnp.shape(admissible), name="score")


def _float_score(score, admissible):
    """``score`` as floats, finite where ``admissible`` (a NaN made every probability NaN)."""
    score = jnp.asarray(score)
    score = score if jnp.issubdtype(score.dtype, jnp.floating) else score.astype(jnp.float32)
    bad = V.any_nonfinite_where(score, jnp.asarray(admissible))
    return V.error_if(score, bad, "`score` must be finite where `admissible`.")


def _guard_law(x, lam, zeta, temperature, p_invalid):
    x = V.guard_non_negative(x, lam, name="lam")
    x = V.guard_non_negative(x, zeta, name="zeta")
    x = V.guard_positive(x, temperature, name="temperature")
    return V.guard_interval(x, p_invalid, name="p_invalid", low=0.0, high=1.0, closed="left")


_collapsed_probs_jit = jax.jit(_collapsed_probs_core)


def collapsed_probs(
    admissible: Shaped[ArrayLike, " M"],
    score: Float[ArrayLike, " M"],
    *,
    lam: Float[ArrayLike, ""] = 1.0,
    zeta: Float[ArrayLike, ""] = 2.0,
    temperature: Float[ArrayLike, ""] = 1.0,
    p_invalid: Float[ArrayLike, ""] = 0.0,
    key,
) -> Float[Array, " M"]:
    """The collapsed stand-in's i.i.d. law over the candidate table (float32, sums to 1).

    ``lam, zeta >= 0``, ``temperature > 0``, ``p_invalid`` in ``[0, 1)`` are traced
    (guarded). ``lam = zeta = 0`` is uniform over ``H_O``. With no admissible candidate all
    mass goes to the invalid ones. Jitted; vmap over tasks.
    """
    _check_candidates(admissible, score)
    V.is_key(key)
    s = _guard_law(_float_score(score, admissible), lam, zeta, temperature, p_invalid)
    return _collapsed_probs_jit(key, admissible, s, lam, zeta, temperature, p_invalid)


def _restrict(w, sub, group):
    """``w`` restricted to ``sub``, each of ``group`` / its complement keeping its mass.

    A part with no mass left in ``sub`` hands its mass to the other part; with nothing
    left at all ``w`` is returned unchanged. ``group`` all True: plain conditioning.
    """
    r = jnp.where(sub, w, 0.0)
    wa, ra = jnp.sum(jnp.where(group, w, 0.0)), jnp.sum(jnp.where(group, r, 0.0))
    wi, ri = jnp.sum(jnp.where(group, 0.0, w)), jnp.sum(jnp.where(group, 0.0, r))
    ta = jnp.where(ra > 0, jnp.where(ri > 0, wa, wa + wi), 0.0)
    ti = jnp.where(ri > 0, jnp.where(ra > 0, wi, wa + wi), 0.0)
    out = jnp.where(group, r * ta / jnp.where(ra > 0, ra, 1.0), r * ti / jnp.where(ri > 0, ri, 1.0))
    return jnp.where(ra + ri > 0, out, w)


def _draw_core(key, table, p, strata, quotas, kappa, n_queries, use_strata, group):
    """Sequential draws: query ``i`` sits in stratum ``s_i`` (quotas in stratum order).

    History avoidance never moves mass between ``group`` (admissible) and the rest: with
    probability ``kappa`` each part is renormalised to its unseen members, keeping its
    mass (a part with nothing unseen keeps its law), so ``E[V]`` is unchanged by ``kappa``.

    Inverse-CDF sampling (one uniform per query, a cumsum over the candidates) rather than
    Gumbel-max, which would need ``M`` random numbers per query.
    """
    m = p.shape[0]
    ends = jnp.cumsum(quotas)
    q_stratum = jnp.searchsorted(ends, jnp.arange(n_queries, dtype=ends.dtype), side="right")
    us = jax.random.uniform(key, (n_queries, 2))

    def step(seen, inp):
        u, s = inp
        w = p
        if use_strata:
            w = _restrict(w, strata == s, group)
        fresh = jnp.where(seen, 0.0, w)
        wa, fa = jnp.sum(jnp.where(group, w, 0.0)), jnp.sum(jnp.where(group, fresh, 0.0))
        wi, fi = jnp.sum(jnp.where(group, 0.0, w)), jnp.sum(jnp.where(group, 0.0, fresh))
        fa_, fi_ = jnp.where(fa > 0, fa, 1.0), jnp.where(fi > 0, fi, 1.0)
        kept = jnp.where(
            group,
            jnp.where(fa > 0, fresh * (wa / fa_), w),
            jnp.where(fi > 0, fresh * (wi / fi_), w),
        )
        w = jnp.where(u[1] < kappa, kept, w)
        c = jnp.cumsum(w)
        j = jnp.minimum(jnp.searchsorted(c, u[0] * c[-1], side="right"), m - 1)
        return seen | (jnp.arange(m, dtype=j.dtype) == j), table[j]

    _, ids = jax.lax.scan(step, jnp.zeros((m,), bool), (us, q_stratum))
    return ids.astype(jnp.int32)


def _collapsed_core(
    key, table, admissible, score, lam, zeta, temperature, p_invalid, kappa, n_queries
):
    k_rank, k_draw = jax.random.split(key)
    p = _collapsed_probs_core(k_rank, admissible, score, lam, zeta, temperature, p_invalid)
    zeros = jnp.zeros((1,), jnp.int32)
    return _draw_core(k_draw, table, p, zeros, zeros, kappa, n_queries, False, admissible)


_collapsed_jit = jax.jit(_collapsed_core, static_argnames=("n_queries",))


def _check_table(table, admissible):
    V.ndim(table, 1, name="table")
    V.integer(table, name="table")
    V.shape(admissible, jnp.shape(table), name="admissible")
    V.boolean(admissible, name="admissible")


def collapsed(
    table: Int[ArrayLike, " M"],
    admissible: Bool[ArrayLike, " M"],
    score: Float[ArrayLike, " M"],
    n_queries: int,
    *,
    lam: Float[ArrayLike, ""] = 1.0,
    zeta: Float[ArrayLike, ""] = 2.0,
    temperature: Float[ArrayLike, ""] = 1.0,
    p_invalid: Float[ArrayLike, ""] = 0.0,
    kappa: Float[ArrayLike, ""] = 0.0,
    key,
) -> Int[Array, " N"]:
    """``n_queries`` draws of the collapsed stand-in (``int32`` ids copied from ``table``).

    The rank order and the draws use independent halves of ``key`` (the rank half is
    ``jax.random.split(key)[0]``, so ``collapsed_probs(..., key=that)`` is this law).
    ``kappa`` in ``[0, 1]``: per-query probability of avoiding earlier proposals.
    Jitted (``n_queries`` static; the rest traced).
    """
    _check_table(table, admissible)
    _check_candidates(admissible, score)
    n_queries = V.python_int(n_queries, name="n_queries", minimum=1)
    V.is_key(key)
    s = _guard_law(_float_score(score, admissible), lam, zeta, temperature, p_invalid)
    s = V.guard_interval(s, kappa, name="kappa", low=0.0, high=1.0)
    return _collapsed_jit(
        key, table, admissible, s, lam, zeta, temperature, p_invalid, kappa, n_queries
    )


def _quotas_core(admissible, strata, n_queries, num_strata, blind):
    """``blind`` may be a Python or a traced bool (the harness traces it)."""
    onehot = (strata[:, None] == jnp.arange(num_strata, dtype=strata.dtype)[None, :]).astype(
        jnp.float32
    )
    w_oracle = jnp.sum(onehot * admissible[:, None].astype(jnp.float32), axis=0)
    w_blind = (jnp.sum(onehot, axis=0) > 0).astype(jnp.float32)
    w = jnp.where(blind, w_blind, w_oracle)
    w = w / jnp.maximum(jnp.sum(w), 1.0)
    raw = n_queries.astype(jnp.float32) * w
    fl = jnp.floor(raw)
    left = n_queries - jnp.sum(fl).astype(jnp.int32)
    order = jnp.argsort(-(raw - fl), stable=True)  # largest remainder, ties: lower stratum
    extra = (inverse_permutation(order.astype(jnp.int32)) < left) & (w > 0)
    return fl.astype(jnp.int32) + extra.astype(jnp.int32)


_quotas_jit = jax.jit(_quotas_core, static_argnames=("num_strata", "blind"))


def _check_strata(strata, admissible, num_strata):
    V.shape(strata, jnp.shape(admissible), name="strata")
    V.integer(strata, name="strata")
    s = V._concrete(strata)
    if s is not None and s.size and (s.min() < 0 or s.max() >= num_strata):
        raise ValueError(f"`strata` must lie in [0, {num_strata}), got [{s.min()}, {s.max()}].")


def stratum_quotas(
    admissible: Bool[ArrayLike, " M"],
    strata: Int[ArrayLike, " M"],
    n_queries: Int[ArrayLike, ""],
    *,
    num_strata: int,
    allocation: str = "oracle_proportional",
) -> Int[Array, " S"]:
    """Largest-remainder split of ``n_queries`` over ``num_strata`` strata (``int32[S]``).

    ``oracle_proportional`` weighs stratum ``s`` by ``|H_O ∩ s|``; ``blind_uniform`` weighs
    every stratum present in the table equally (no knowledge of ``H_O``). Ties go to the
    lower stratum. ``n_queries`` is traced. Jitted.
    """
    V.ndim(admissible, 1, name="admissible")
    V.boolean(admissible, name="admissible")
    num_strata = V.python_int(num_strata, name="num_strata", minimum=1)
    V.one_of(ALLOCATIONS, allocation=allocation)
    _check_strata(strata, admissible, num_strata)
    n = jnp.asarray(n_queries, jnp.int32)
    n = V.error_if(n, n < 1, "`n_queries` must be >= 1.")
    blind = allocation == "blind_uniform"
    return _quotas_jit(jnp.asarray(admissible, bool), strata, n, num_strata, blind)


def _stratified_core(key, table, p, strata, quotas, kappa, group, n_queries):
    return _draw_core(key, table, p, strata, quotas, kappa, n_queries, True, group)


_stratified_jit = jax.jit(_stratified_core, static_argnames=("n_queries",))


def stratified(
    table: Int[ArrayLike, " M"],
    p: Float[ArrayLike, " M"],
    strata: Int[ArrayLike, " M"],
    quotas: Int[ArrayLike, " S"],
    n_queries: int,
    *,
    kappa: Float[ArrayLike, ""] = 0.0,
    admissible: Bool[ArrayLike, " M"] | None = None,
    key,
) -> Int[Array, " N"]:
    """Stratified draws: ``quotas[s]`` queries from ``p`` renormalised to stratum ``s``.

    The draws are ``int32`` ids copied from ``table`` (any integers).

    ``quotas`` (traced, e.g. from :func:`stratum_quotas`) must be >= 0 and sum to the
    static ``n_queries`` (guarded). With ``admissible`` given, the valid and invalid parts
    of ``p`` each keep their mass inside a stratum (asking a model for a stratum does not
    change its error rate; a part absent from the stratum hands its mass to the other)
    and under history avoidance. A stratum with no mass at all falls back to the whole
    law. ``kappa`` as in :func:`collapsed`. Jitted.
    """
    V.ndim(table, 1, name="table")
    V.integer(table, name="table")
    V.shape(p, jnp.shape(table), name="p")
    V.floating(p, name="p")
    V.ndim(quotas, 1, name="quotas")
    V.integer(quotas, name="quotas")
    _check_strata(strata, p, jnp.shape(quotas)[0])
    n_queries = V.python_int(n_queries, name="n_queries", minimum=1)
    V.is_key(key)
    group = _group(admissible, p)
    q = jnp.asarray(quotas)
    bad = jnp.any(q < 0) | (jnp.sum(q) != n_queries)
    q = V.error_if(q, bad, f"`quotas` must be >= 0 and sum to n_queries={n_queries}.")
    q = V.guard_interval(q, kappa, name="kappa", low=0.0, high=1.0)
    return _stratified_jit(key, table, p, strata, q, kappa, group, n_queries)


def _group(admissible, p):
    if admissible is None:
        return jnp.ones(jnp.shape(p), bool)
    V.shape(admissible, jnp.shape(p), name="admissible")
    V.boolean(admissible, name="admissible")  # a float 0.5 would count as admissible
    return jnp.asarray(admissible)


def _expected_strat_core(p, admissible, strata, quotas, group):
    num = quotas.shape[0]
    laws = jax.vmap(lambda s: _restrict(p, strata == s, group))(
        jnp.arange(num, dtype=strata.dtype)
    )  # [S, M]
    n_s = quotas.astype(p.dtype)[:, None]
    # (1 - q)^N_s; N_s = 1 kept linear so the derivative at q = 1 is right (double where:
    # no NaN cotangent from the unselected log branch)
    below = laws < 1.0
    pw = jnp.exp(n_s * jnp.log1p(-jnp.where(below, laws, 0.0)))
    miss = jnp.where(n_s == 1, 1.0 - laws, jnp.where(below, pw, 0.0))
    miss = jnp.where(n_s == 0, 1.0, miss)
    hit = 1.0 - jnp.prod(miss, axis=0)
    n = jnp.sum(quotas).astype(p.dtype)
    k = jnp.maximum(jnp.sum(admissible), 1).astype(p.dtype)
    return Expected(
        validity=jnp.sum(jnp.where(admissible[None, :], n_s * laws, 0.0)) / n,
        uniqueness=jnp.sum(hit) / n,
        recovery=jnp.sum(jnp.where(admissible, hit, 0.0)) / k,
    )


_expected_strat_jit = jax.jit(_expected_strat_core)


def expected_metrics_stratified(
    p: Float[ArrayLike, " M"],
    admissible: Bool[ArrayLike, " M"],
    strata: Int[ArrayLike, " M"],
    quotas: Int[ArrayLike, " S"],
    *,
    preserve_validity: bool = False,
) -> Expected:
    """Exact ``E[V], E[U], E[R]`` of :func:`stratified` with ``kappa = 0`` (jitted).

    Per stratum ``s`` the draw law ``q_s`` is ``p`` restricted to ``s`` (with
    ``preserve_validity``, as ``stratified(..., admissible=admissible)``: each part keeps
    its mass); ``E[R] = (1/K) sum_{h in H_O} (1 - prod_s (1 - q_s(h))^{N_s})``,
    ``E[V] = sum_s N_s q_s(H_O) / N``, ``E[U] = sum_h (1 - prod_s ...) / N``.

    ``quotas`` are query counts: any ``N_s >= 0`` with ``N >= 1`` (traced: guarded).

    Raises:
      TypeError: arguments of the wrong shape or dtype.
      ValueError: a ``strata`` entry outside ``[0, S)``, a negative ``quotas`` entry or
        ``quotas`` summing to 0 (traced: under ``jit``).
    """
    V.ndim(p, 1, name="p")
    V.floating(p, name="p")
    V.shape(admissible, jnp.shape(p), name="admissible")
    V.boolean(admissible, name="admissible")
    V.ndim(quotas, 1, name="quotas")
    V.integer(quotas, name="quotas")
    _check_strata(strata, p, jnp.shape(quotas)[0])
    V.flags(preserve_validity=preserve_validity)
    q = jnp.asarray(quotas)  # a negative N_s gave probabilities above 1, N = 0 a NaN
    q = V.error_if(q, jnp.any(q < 0) | (jnp.sum(q) < 1), "`quotas` must be >= 0, sum >= 1.")
    adm = jnp.asarray(admissible, bool)
    group = adm if preserve_validity else jnp.ones(adm.shape, bool)
    return _expected_strat_jit(p, adm, strata, q, group)
