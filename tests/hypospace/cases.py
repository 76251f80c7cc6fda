"""Conformance cases for jaxkit.hypospace (see tests/conformance.py).

Host-side `enumerate_dags` / `generate_collection` are tested directly in test_causal.py.
The validator, the metrics and the expectations carry every check by default; the small
helpers keep their cheap checks by default and the rest in the slow tier.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import hypospace as H
from tests.conformance import Bad, Case

N = 4


def _validate(adj, perturbed, effects, mask):
    return H.validate(adj, H.CausalObs(perturbed, effects, mask))


def _graphs(key):
    k1, k2 = jax.random.split(key)
    dense = (jax.random.uniform(k1, (8, N, N)) < 0.3).astype(jnp.int8)
    tri = jnp.triu((jax.random.uniform(k2, (8, N, N)) < 0.5).astype(jnp.int8), 1)
    return jnp.where(jnp.arange(8)[:, None, None] < 4, dense, tri)  # cyclic and DAGs


def _validate_args(key, dtype):
    adj = _graphs(key)
    r = np.asarray(H.reachability(adj[5]))
    perturbed = jnp.array([0, 2], jnp.int32)
    effects = jnp.asarray(r[[0, 2]], jnp.int8)
    return adj, perturbed, effects, jnp.array([True, True])


def _bad_float(key):
    adj, p, e, m = _validate_args(key, jnp.float32)
    return (adj.astype(jnp.float32), p, e, m), {}


def _bad_node(key):
    adj, p, e, m = _validate_args(key, jnp.float32)
    return (adj, jnp.array([0, N], jnp.int32), e, m), {}


def _bad_width(key):
    adj, p, e, m = _validate_args(key, jnp.float32)
    return (adj, p, e[:, :2], m), {}


def _metrics_args(key, dtype):
    """8 runs (the batch axis, sharded) of 6 queries against 5 padded admissible ids."""
    k1, k2 = jax.random.split(key)
    ids = jax.random.randint(k1, (8, 6), -1, 12, jnp.int32)
    adm = jnp.where(jnp.arange(5) < 3, jax.random.permutation(k2, 12)[:5], -1)
    return ids, jnp.broadcast_to(adm.astype(jnp.int32), (8, 5))


# One run's query axis is reduced by sorts, which a sharded 1-D `ids` does not survive in
# jax 0.10.2; runs are the parallel axis, so the case is the metrics vmapped over runs.
_metrics_runs = jax.vmap(H.metrics)


def _expected(p, admissible, *, n_queries=3):
    return H.expected_metrics(p, admissible, n_queries)


def _expected_args(key, dtype):
    p = jax.nn.softmax(jax.random.normal(key, (8,), jnp.float32)).astype(dtype)
    p = p / jnp.sum(p)
    return p, jnp.arange(8) % 3 != 0


def _ids_args(key, dtype):
    return (jax.random.randint(key, (8,), 0, 2 ** (N * (N - 1)), jnp.int32),)


def _from_id(ids):
    return H.from_canonical_id(ids, n=N)


def _uniform(table):
    return H.uniform_space(table, 5, key=jax.random.key(0))


def _enumerative(table):
    return H.enumerative(table, 5, key=jax.random.key(0))


_HELPER_SLOW = ("jit", "vmap", "traced_once", "dtypes", "sharding")
M = 12
_KEY = jax.random.key(5)


def _cands_args(key, dtype):
    """8 tasks over a 12-candidate table: admissible masks (>= 1 each), scores, strata."""
    k1, k2 = jax.random.split(key)
    adm = (jax.random.uniform(k1, (8, M)) < 0.5).at[:, 0].set(True)
    score = jax.random.randint(k2, (8, M), 0, 4).astype(jnp.float32)
    return adm, score


def _cprobs(adm, score, lam, zeta, p_invalid):
    return jax.vmap(
        lambda a, s: H.collapsed_probs(a, s, lam=lam, zeta=zeta, p_invalid=p_invalid, key=_KEY)
    )(adm, score)


def _cprobs_args(key, dtype):
    adm, score = _cands_args(key, dtype)
    return adm, score.astype(dtype)


def _quotas(adm, strata, *, allocation):
    return jax.vmap(lambda a, s: H.stratum_quotas(a, s, 7, num_strata=4, allocation=allocation))(
        adm, strata
    )


def _quotas_args(key, dtype):
    adm, score = _cands_args(key, dtype)
    return adm, score.astype(jnp.int32)


def _estrat(p, adm, strata, quotas):
    return jax.vmap(lambda *a: H.expected_metrics_stratified(*a, preserve_validity=True))(
        p, adm, strata, quotas
    )


def _estrat_args(key, dtype):
    adm, score = _cands_args(key, dtype)
    strata = score.astype(jnp.int32)
    p = jax.vmap(lambda a, s: H.collapsed_probs(a, s, p_invalid=0.1, key=_KEY))(adm, score)
    quotas = jax.vmap(lambda a, s: H.stratum_quotas(a, s, 7, num_strata=4))(adm, strata)
    return p.astype(dtype), adm, strata, quotas


def _vbool(truth, mask, out):
    return H.validate_boolean(truth, H.BooleanObs(mask, out))


def _vbool_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    truth = jax.random.randint(k1, (8, 5), 0, 16, jnp.int32)
    mask = jax.random.randint(k2, (8, 1), 1, 16, jnp.int32)
    return truth, mask, jax.random.randint(k3, (8, 1), 0, 16, jnp.int32)


_TOP = jnp.array([[1, 0, 0], [0, 1, 1], [0, 0, 0]], jnp.int8)


def _vvox(layers):
    return H.validate_voxel(layers, _TOP, max_height=3, strict=True)


def _vvox_args(key, dtype):
    h = _TOP.astype(jnp.int32)[None] * jax.random.randint(key, (8, 3, 3), 1, 5)
    z = jnp.broadcast_to(jnp.arange(4)[None, :, None, None], (8, 4, 3, 3))
    layers = (z < jnp.broadcast_to(h[:, None], (8, 4, 3, 3))).astype(jnp.int8)
    return (layers.at[:2, 3, 2, 2].set(1),)  # two floating blocks


def _collapsed(adm, score, kappa):
    table = jnp.arange(M, dtype=jnp.int32)
    return H.collapsed(table, adm[0], score[0], 6, kappa=kappa, p_invalid=0.1, key=_KEY)


def _stratified(p, adm, strata, quotas):
    table = jnp.arange(M, dtype=jnp.int32)
    return H.stratified(
        table, p[0], strata[0], jnp.array([2, 2, 2, 1]), 7, admissible=adm[0], key=_KEY
    )


CASES = [
    Case(
        "hypospace.validate",
        _validate,
        _validate_args,
        grad_modes=(),
        dtypes=(jnp.float32,),  # integer hypotheses, boolean output
        slow_checks=("sharding",),  # make test: the metrics cases' sharding checks
        bad=(
            Bad("float adjacency", _bad_float, TypeError, "`adj`"),
            Bad("perturbed node out of range", _bad_node, ValueError, "`obs.perturbed`"),
            Bad("effects over other nodes", _bad_width, TypeError, "`obs.effects`"),
        ),
    ),
    Case(
        "hypospace.metrics",
        _metrics_runs,
        _metrics_args,
        grad_modes=(),
        shard_argnums=(0, 1),
        dtypes=(jnp.float32,),
        bad=(
            Bad(
                "float ids",
                lambda k: ((jnp.zeros((8, 6)), _metrics_args(k, None)[1]), {}),
                TypeError,
                "ids",
            ),
        ),
    ),
    Case(
        "hypospace.expected_metrics",
        _expected,
        _expected_args,
        grad_argnums=(0,),
        grad_eps=1e-6,
        rtol=1e-4,
        dtypes=(jnp.float32,),
        bad=(
            Bad(
                "p not a distribution",
                lambda k: ((jnp.full(8, 0.5), jnp.ones(8, bool)), {}),
                ValueError,
                "`p`",
            ),
        ),
    ),
    Case(
        "hypospace.reachability",
        H.reachability,
        lambda k, dt: (_graphs(k),),
        grad_modes=(),
        dtypes=(jnp.float32,),
        bad=(Bad("not square", lambda k: ((_graphs(k)[:, :, :2],), {}), TypeError, "`adj`"),),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.canonical_id",
        H.canonical_id,
        lambda k, dt: (_graphs(k),),
        grad_modes=(),
        dtypes=(jnp.float32,),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.from_canonical_id",
        _from_id,
        _ids_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        bad=(
            Bad("float ids", lambda k: ((jnp.zeros(8),), {}), TypeError, "ids"),
            Bad("id past the edge set", lambda k: ((jnp.full(8, 2**30),), {}), ValueError, "ids"),
        ),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.uniform_space",
        _uniform,
        _ids_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.enumerative",
        _enumerative,
        _ids_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(),
        bad=(
            Bad(
                "empty admissible set",
                lambda k: ((-jnp.ones(8, jnp.int32),), {}),
                ValueError,
                "`admissible`",
            ),
        ),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.collapsed_probs",
        _cprobs,
        _cprobs_args,
        hparams={"lam": (1.0, 0.5), "zeta": (2.0, 1.0), "p_invalid": (0.05, 0.2)},
        grad_argnums=(1,),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        slow_checks=(*_HELPER_SLOW, "grads"),
    ),
    Case(
        "hypospace.stratum_quotas",
        _quotas,
        _quotas_args,
        static={"allocation": "oracle_proportional"},
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "unknown allocation",
                lambda k: (_quotas_args(k, jnp.float32), {"allocation": "greedy"}),
                ValueError,
                "`allocation`",
            ),
        ),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.expected_metrics_stratified",
        _estrat,
        _estrat_args,
        grad_argnums=(0,),
        grad_eps=1e-6,
        rtol=1e-4,
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1, 2, 3),
        slow_checks=("grads",),  # x64 finite differences: the area's test budget
    ),
    Case(
        "hypospace.collapsed",
        _collapsed,
        _cands_args,
        hparams={"kappa": (0.0, 0.5)},
        grad_modes=(),
        vmap=False,
        dtypes=(jnp.float32,),
        shard_argnums=(),
        bad=(
            Bad(
                "kappa > 1",
                lambda k: (_cands_args(k, jnp.float32), {"kappa": 1.5}),
                ValueError,
                "`kappa`",
            ),
        ),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.stratified",
        _stratified,
        _estrat_args,
        grad_modes=(),
        vmap=False,
        dtypes=(jnp.float32,),
        shard_argnums=(),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.validate_boolean",
        _vbool,
        _vbool_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1, 2),
        bad=(
            Bad(
                "empty row mask",
                lambda k: (
                    (
                        _vbool_args(k, None)[0],
                        jnp.zeros((8, 1), jnp.int32),
                        jnp.zeros((8, 1), jnp.int32),
                    ),
                    {},
                ),
                ValueError,
                "`obs.mask`",
            ),
        ),
        slow_checks=_HELPER_SLOW,
    ),
    Case(
        "hypospace.validate_voxel",
        _vvox,
        _vvox_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        bad=(
            Bad(
                "float layers",
                lambda k: ((_vvox_args(k, None)[0].astype(jnp.float32),), {}),
                TypeError,
                "`layers`",
            ),
        ),
        slow_checks=_HELPER_SLOW,
    ),
]
