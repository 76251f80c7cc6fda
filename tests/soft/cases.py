"""Conformance cases for jaxkit.soft (one per operator family)."""

import dataclasses

import jax
import jax.numpy as jnp

import jaxkit.soft as S
from tests.conformance import Bad, Case


def _x(key, dtype, n=6):
    return (jax.random.normal(key, (8, n), jnp.float32).astype(dtype),)


def _pair(key, dtype):
    k1, k2 = jax.random.split(key)
    return (
        jax.random.normal(k1, (8, 5)).astype(dtype),
        jax.random.normal(k2, (8, 5)).astype(dtype),
    )


def _bool(key, dtype):
    return (jax.random.uniform(key, (8, 5)).astype(dtype),)


def _bad_axis(fn, **kw):
    return (
        Bad(
            "softness <= 0",
            lambda k: ((jnp.ones((2, 4)),), {**kw, "softness": 0.0}),
            ValueError,
            "softness",
        ),
        Bad(
            "axis out of range",
            lambda k: ((jnp.ones((2, 4)),), {**kw, "axis": 5}),
            ValueError,
            "axis",
        ),
        Bad("NaN input", lambda k: ((jnp.full((2, 4), jnp.nan),), kw), ValueError, "x"),
        Bad(
            "unknown method",
            lambda k: ((jnp.ones((2, 4)),), {**kw, "method": "nope"}),
            ValueError,
            "method",
        ),
    )


SOFT = {"softness": (0.3, 0.5)}
# cheap checks (eager_cache, jit, eval_shape, bad_inputs) by default, the rest slow
_LIGHT = ("grads", "vmap", "traced_once", "dtypes", "sharding")
_CACHE_ONLY = (*_LIGHT, "jit")  # eager_cache, eval_shape and bad_inputs by default

CASES = [
    Case(
        "soft.sort/pav",
        S.sort,
        _x,
        hparams=SOFT,
        static={"method": "pav"},
        bad=_bad_axis(S.sort),
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=("grads",),
    ),
    Case(
        "soft.rank/pav_l2",
        S.rank,
        _x,
        hparams=SOFT,
        static={"method": "pav", "mode": "c0"},
        bad=_bad_axis(S.rank),
        grad_atol=1e-4,
        grad_rtol=1e-4,
    ),
    Case(
        "soft.argsort/neuralsort",
        S.argsort,
        _x,
        hparams=SOFT,
        static={"method": "neuralsort"},
        bad=_bad_axis(S.argsort),
        grad_atol=1e-4,
        grad_rtol=1e-4,
    ),
    Case(
        "soft.top_k/softsort",
        # the values: the int32 indices (lax.top_k's) have no derivative for check_grads;
        # they are tested in test_logprobs.py::test_top_k_returns_hard_indices_for_every_method
        lambda x, **kw: S.top_k(x, 3, **kw)[0],
        _x,
        hparams=SOFT,
        static={"method": "softsort"},
        grad_atol=1e-4,
        grad_rtol=1e-4,
    ),
    Case(
        "soft.rank/network",
        S.rank,
        _x,
        hparams=SOFT,
        static={"method": "network", "network": "odd_even"},
        bad=_bad_axis(S.rank),
        grad_atol=1e-4,
        grad_rtol=1e-4,
    ),
    Case(
        "soft.sort/ot",
        S.sort,
        _x,
        hparams=SOFT,
        static={"method": "ot"},
        grad_modes=("rev",),
        grad_atol=1e-3,
        grad_rtol=1e-3,
        rtol=1e-4,
    ),
    # quantile puts the q axis first (as jnp.quantile): moved last so that the sharding
    # check sees the batch axis leading
    Case(
        "soft.quantile/pav",
        lambda x, **kw: jnp.moveaxis(S.quantile(x, jnp.array([0.2, 0.5]), -1, **kw), 0, -1),
        _x,
        hparams=SOFT,
        static={"method": "pav", "mode": "c0"},
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=("sharding",),
    ),  # 1.2 s
    Case(
        "soft.rank/neuralsort_banded",
        S.rank,
        _x,
        hparams=SOFT,
        static={"method": "neuralsort", "window": 2},
        bad=_bad_axis(S.rank, window=2),
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=("grads", "vmap", "traced_once"),
    ),
    Case(
        "soft.sigmoidal",
        S.sigmoidal,
        _x,
        hparams=SOFT,
        static={"mode": "c2"},
        bad=(
            Bad(
                "softness <= 0",
                lambda k: ((jnp.ones(3),), {"softness": -1.0}),
                ValueError,
                "softness",
            ),
            Bad(
                "NaN softness",
                lambda k: ((jnp.ones(3),), {"softness": float("nan")}),
                ValueError,
                "softness",
            ),
            Bad(
                "softness as a string",
                lambda k: ((jnp.ones(3),), {"softness": "0.1"}),
                TypeError,
                "softness",
            ),
            Bad(
                "unknown mode",
                lambda k: ((jnp.ones(3),), {"mode": "c3"}),
                ValueError,
                "_c1_pnorm",
            ),
        ),
    ),
    # the elementwise family's full checks run on soft.sigmoidal; the others: cheap ones
    Case(
        "soft.greater",
        S.greater,
        _pair,
        hparams=SOFT,
        grad_argnums=(0, 1),
        slow_checks=_LIGHT,
        bad=(
            Bad(
                "softness 0",
                lambda k: ((jnp.ones(3), jnp.zeros(3)), {"softness": 0.0}),
                ValueError,
                "softness",
            ),
        ),
    ),
    *[
        Case(f"soft.{name}", getattr(S, name), _x, hparams=SOFT, static=st, slow_checks=_LIGHT)
        for name, st in (
            ("softrelu", {"mode": "_c2_pnorm"}),
            ("heaviside", {"mode": "_c1_pnorm"}),
            ("sign", {}),
            ("abs", {"mode": "c1"}),
            ("relu", {"mode": "c0"}),
            ("round", {"neighbor_radius": 2}),
        )
    ],
    Case(
        "soft.clip",
        lambda x, **kw: S.clip(x, -0.5, 0.5, **kw),
        _x,
        hparams=SOFT,
        slow_checks=_LIGHT,
    ),
    *[
        Case(f"soft.{name}", getattr(S, name), _pair, hparams=SOFT, slow_checks=_LIGHT)
        for name in ("greater_equal", "less", "less_equal", "equal", "not_equal", "isclose")
    ],
    Case(
        "soft.logical_xor",
        S.logical_xor,
        lambda k, d: _bool(k, d) + _bool(jax.random.fold_in(k, 1), d),
        grad_argnums=(0, 1),
    ),
    Case(
        "soft.take_along_axis",
        S.take_along_axis,
        lambda k, d: (_x(k, d)[0], jax.nn.softmax(jax.random.normal(k, (8, 3, 6))).astype(d)),
        grad_argnums=(0, 1),
    ),
    Case("soft.sqrt", S.sqrt, lambda k, d: (jnp.abs(_x(k, d)[0]) + 0.5,)),
]


# One case per array-wise operator family runs every check by default (sort/pav,
# rank/pav_l2, argsort/neuralsort, top_k/softsort, quantile/pav); the other methods keep
# only their cheap eager-cache and bad-input checks there and run the rest in
# `make test-slow`.
_ALL = ("jit", "eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding")
_SLOW_EXTRA = {
    "soft.quantile/pav": ("grads", "vmap", "traced_once", "sharding"),
    "soft.top_k/softsort": ("grads", "vmap", "traced_once"),
    "soft.argsort/neuralsort": ("grads", "vmap", "traced_once"),
    "soft.rank/pav_l2": ("vmap", "traced_once"),
    "soft.rank/network": _ALL,
    "soft.sort/ot": _ALL,
    "soft.rank/neuralsort_banded": _ALL,
}
CASES = [
    dataclasses.replace(c, slow_checks=_SLOW_EXTRA[c.name]) if c.name in _SLOW_EXTRA else c
    for c in CASES
]


R_SCHED = S.random.exponential_schedule(1.0, 0.01, 10)


# jaxkit.soft.random: the key is an argument (traced under jit/vmap), logits/p lead.
def _rand_args(key, dtype, kind):
    kx, ks = jax.random.split(key)
    if kind == "logits":
        x = jax.random.normal(kx, (8, 5), jnp.float32)
    else:
        x = jax.random.uniform(kx, (8, 5), jnp.float32, 0.1, 0.9)
    return (x.astype(dtype), ks)


_RBAD = (
    Bad("not a key", lambda k: ((jnp.zeros((8, 5)), jnp.ones(3)), {}), TypeError, "key"),
    Bad(
        "softness <= 0",
        lambda k: ((jnp.zeros((8, 5)), jax.random.key(0)), {"softness": 0.0}),
        ValueError,
        "softness",
    ),
    Bad(
        "NaN softness",
        lambda k: ((jnp.zeros((8, 5)), jax.random.key(0)), {"softness": float("nan")}),
        ValueError,
        "softness",
    ),
)
CASES += [
    Case(
        "soft.random.categorical",
        lambda x, k, **kw: S.random.categorical(k, x, **kw),
        lambda k, d: _rand_args(k, d, "logits"),
        hparams=SOFT,
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=("grads", "vmap", "traced_once"),
        bad=(
            *_RBAD,
            Bad(
                "NaN logits",
                lambda k: ((jnp.full((8, 5), jnp.nan), jax.random.key(0)), {}),
                ValueError,
                "logits",
            ),
        ),
    ),
    Case(
        "soft.random.bernoulli",
        lambda p, k, **kw: S.random.bernoulli(k, p, **kw),
        lambda k, d: _rand_args(k, d, "p"),
        hparams=SOFT,
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=_LIGHT,
        bad=(
            *_RBAD,
            Bad(
                "p > 1", lambda k: ((jnp.full((8, 5), 1.5), jax.random.key(0)), {}), ValueError, "p"
            ),
        ),
    ),
]
CASES += [
    Case(
        "soft.rank/ot_c1",
        S.rank,
        _x,
        hparams=SOFT,
        static={"method": "ot", "mode": "c1"},
        grad_modes=("rev",),
        grad_atol=1e-4,
        grad_rtol=1e-4,
        rtol=1e-4,
        slow_checks=_ALL,
    ),
]

# PAV p-norm modes and smooth_sort (soft_modes): cheap checks by default, the rest slow.
CASES += [
    Case(
        "soft.rank/pav_c1",
        S.rank,
        _x,
        hparams=SOFT,
        static={"method": "pav", "mode": "c1"},
        bad=_bad_axis(S.rank, mode="c1"),
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=_ALL,
    ),
    Case(
        "soft.sort/smooth_sort",
        S.sort,
        _x,
        hparams=SOFT,
        static={"method": "smooth_sort"},
        bad=_bad_axis(S.sort, method="smooth_sort")
        + (
            Bad(
                "smooth_sort with mode c0",
                lambda k: ((jnp.ones((2, 4)),), {"method": "smooth_sort", "mode": "c0"}),
                ValueError,
                "mode",
            ),
        ),
        grad_atol=1e-4,
        grad_rtol=1e-4,
        rtol=1e-4,
        slow_checks=_ALL,
    ),
]

# Gumbel-Sinkhorn (jaxkit.soft.random.gumbel_sinkhorn): a batch of 8 (4, 4) score matrices.
CASES += [
    Case(
        "soft.random.gumbel_sinkhorn",
        lambda la, k, **kw: S.random.gumbel_sinkhorn(k, la, **kw),
        lambda k, d: (
            jax.random.normal(jax.random.fold_in(k, 1), (8, 4, 4)).astype(d),
            jax.random.split(k)[0],
        ),
        hparams=SOFT,
        static={"n_iters": 8},
        grad_atol=1e-4,
        grad_rtol=1e-4,
        slow_checks=_LIGHT,
        bad=(
            Bad(
                "not square",
                lambda k: ((jnp.zeros((8, 3, 4)), jax.random.key(0)), {"softness": 0.5}),
                TypeError,
                "log_alpha",
            ),
            Bad(
                "softness <= 0",
                lambda k: ((jnp.zeros((8, 4, 4)), jax.random.key(0)), {"softness": 0.0}),
                ValueError,
                "softness",
            ),
            Bad(
                "NaN log_alpha",
                lambda k: ((jnp.full((8, 4, 4), jnp.nan), jax.random.key(0)), {"softness": 0.5}),
                ValueError,
                "log_alpha",
            ),
        ),
    ),
]

# the other public samplers of jaxkit.soft.random (every one is called 30 times eagerly by
# the eager_cache check): cheap checks by default, jit/vmap/traced_once slow. Their
# derivatives are checked by tests/soft/test_random.py::test_check_grads_x64, bfloat16 and
# sharding by the family's full cases above (categorical, bernoulli, gumbel_sinkhorn).
# Known gap: permutation(independent=True) draws its noise replicated, and its output
# loses the batch sharding (so no sharding check here).
_EXTRA = {
    "slow_checks": _CACHE_ONLY,
    "grad_modes": (),
    "dtypes": (jnp.float32,),
    "shard_argnums": (),
}
_p8 = lambda k, d: _rand_args(k, d, "p")  # noqa: E731
_lg8 = lambda k, d: _rand_args(k, d, "logits")  # noqa: E731
CASES += [
    Case(
        "soft.random.choice",
        lambda x, k, **kw: S.random.choice(k, x, (3,), axis=1, **kw),
        _lg8,
        hparams=SOFT,
        **_EXTRA,
    ),
    Case(
        "soft.random.permutation",
        lambda x, k, **kw: S.random.permutation(k, x, axis=1, independent=True, **kw),
        _lg8,
        hparams=SOFT,
        **_EXTRA,
    ),
    Case(
        "soft.random.permutation/gumbel_sinkhorn",
        lambda x, k, **kw: S.random.permutation(k, x, axis=1, **kw),
        _lg8,
        hparams=SOFT,
        static={"method": "gumbel_sinkhorn", "n_iters": 5},
        **_EXTRA,
    ),
    Case(
        "soft.random.multinomial",
        lambda p, k, **kw: S.random.multinomial(k, 3, p, **kw),
        _p8,
        hparams=SOFT,
        **_EXTRA,
    ),
    Case(
        "soft.random.binomial",
        lambda p, k, **kw: S.random.binomial(k, 3, p, **kw),
        _p8,
        hparams=SOFT,
        **_EXTRA,
    ),
    Case(
        "soft.random.rademacher",
        lambda p, k, **kw: p * S.random.rademacher(k, (8, 5), p.dtype, **kw),
        _p8,
        hparams=SOFT,
        **_EXTRA,
    ),
    Case(
        "soft.random.categorical_st",
        lambda x, k, **kw: S.random.categorical_st(k, x, **kw),
        _lg8,
        hparams=SOFT,
        **_EXTRA,
    ),
    Case(
        "soft.random.exponential_schedule",
        lambda t, **kw: R_SCHED(t),
        lambda k, d: (jnp.arange(8.0, dtype=d),),
        **_EXTRA,
    ),
]
