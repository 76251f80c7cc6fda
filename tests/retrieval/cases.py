"""Conformance cases for jaxkit.retrieval (see tests/conformance.py)."""

import jax
import jax.numpy as jnp

from jaxkit import retrieval
from tests.conformance import Bad, Case

N = 4  # players in the sampled/tabulated games


def _values(key, dtype):
    return (jax.random.normal(key, (8, 2**N)).astype(dtype),)


def _game_args(key, dtype):
    k = jax.random.split(key, 3)
    return (
        jax.random.uniform(k[0], (8, 2, 3), minval=-1, maxval=1).astype(dtype),
        jax.random.normal(k[1], (8, 2)).astype(dtype),
        jax.random.normal(k[2], (8, 3)).astype(dtype),
    )


def _wti_args(key, dtype):
    k = jax.random.split(key, 2)
    return (
        *_game_args(key, dtype),
        jax.random.bernoulli(k[0], 0.6, (8, 2)),
        jax.random.bernoulli(k[1], 0.6, (8, 3)),
    )


def _table(t, m):
    idx = jnp.sum(jnp.where(m, 2 ** jnp.arange(m.shape[-1]), 0))
    return t[idx]


def _one_table(key, dtype):
    return (jax.random.normal(key, (2**N,)).astype(dtype),)


def _stratified(t, *, n_samples=8):
    return retrieval.stii_stratified(
        _table, t, n_players=N, key=jax.random.key(0), n_samples=n_samples
    )


def _permutation(t, *, n_perms=4):
    return retrieval.stii_permutation(
        _table, t, n_players=N, key=jax.random.key(0), n_perms=n_perms
    )


def _scores(key, dtype):
    return (jax.random.normal(key, (8, 4, 4)).astype(dtype),)


def _nce(scores, *, tau):
    return retrieval.info_nce(scores, tau=tau)


def _tokens(key, dtype):
    k = jax.random.split(key, 6)
    return (
        jax.random.normal(k[0], (8, 3, 4)).astype(dtype),
        jax.random.normal(k[1], (8, 3)).astype(dtype),
        jax.random.bernoulli(k[2], 0.7, (8, 3)).at[:, 0].set(True),
        jax.random.normal(k[3], (8, 2, 4)).astype(dtype),
        jax.random.normal(k[4], (8, 2)).astype(dtype),
        jax.random.bernoulli(k[5], 0.7, (8, 2)).at[:, 0].set(True),
    )


def _align_args(key, dtype):
    k = jax.random.split(key, 4)
    return (
        jax.random.normal(k[0], (8, 3, 2)).astype(dtype),
        jax.random.normal(k[1], (8, 3, 2)).astype(dtype),
        jax.random.bernoulli(k[2], 0.7, (8, 3)),
        jax.random.bernoulli(k[3], 0.7, (8, 2)),
    )


def _align(sim, phi, mask_a, mask_b, *, tau_s, tau_phi):
    return retrieval.stii_alignment_loss(sim, phi, mask_a, mask_b, tau_s=tau_s, tau_phi=tau_phi)


def _pyr_args(key, dtype):
    k = jax.random.split(key)
    return (
        jax.random.normal(k[0], (8, 5, 5)).astype(dtype),
        jax.random.normal(k[1], (5, 5)).astype(dtype),
    )


def _pyr(local, glob, *, tau):
    return retrieval.pyramid_consistency(local, glob, tau=tau)


def _tokens_mask(key, dtype):
    k = jax.random.split(key)
    x = jax.random.normal(k[0], (8, 6, 3)).astype(dtype)
    return (x, jax.random.bernoulli(k[1], 0.8, (8, 6)).at[:, 0].set(True))


def _dpc(x, mask):
    return retrieval.dpc_knn(x, mask, n_centers=3, k=2)


def _merge_args(key, dtype):
    k = jax.random.split(key, 3)
    return (
        jax.random.normal(k[0], (8, 6, 3)).astype(dtype),
        jax.random.randint(k[1], (8, 6), -1, 3),
        jax.random.normal(k[2], (8, 6)).astype(dtype),
    )


def _merge(x, assign, log_weight):
    return retrieval.merge_tokens(x, assign, log_weight, n_centers=3)


_BAD_VALUES = (
    Bad("one player", lambda key: ((jnp.zeros((8, 2)),), {}), ValueError, "values"),
    Bad("not a power of two", lambda key: ((jnp.zeros((8, 6)),), {}), TypeError, "values"),
    Bad("integer values", lambda key: ((jnp.zeros((8, 4), jnp.int32),), {}), TypeError, "values"),
)

CASES = [
    Case(
        name="retrieval.stii_exact",
        fn=retrieval.stii_exact,
        make_args=_values,
        bad=_BAD_VALUES,
        rtol=1e-4,
    ),
    Case(
        name="retrieval.banzhaf_exact",
        fn=retrieval.banzhaf_exact,
        make_args=_values,
        bad=_BAD_VALUES,
        rtol=1e-4,
        # the default run keeps grads and bad inputs (the core is jitted at module level, so
        # eager is jit; stii_exact shares the rest)
        slow_checks=(
            "jit",
            "eval_shape",
            "vmap",
            "dtypes",
            "traced_once",
            "sharding",
            "eager_cache",
        ),
    ),
    Case(
        name="retrieval.moebius_transform",
        fn=retrieval.moebius_transform,
        make_args=_values,
        bad=_BAD_VALUES[1:],
        rtol=1e-4,
        slow_checks=("jit", "eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding"),
    ),
    Case(
        name="retrieval.cross_modal_stii",
        fn=retrieval.cross_modal_stii,
        make_args=_game_args,
        grad_argnums=(0, 1, 2),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(
            Bad(
                "21 players",
                lambda key: ((jnp.zeros((11, 10)), jnp.zeros(11), jnp.zeros(10)), {}),
                ValueError,
                "sim",
            ),
            Bad(
                "weights do not match",
                lambda key: ((jnp.zeros((8, 2, 3)), jnp.zeros((8, 3)), jnp.zeros((8, 3))), {}),
                TypeError,
                "w_a",
            ),
        ),
        slow_checks=("grads", "vmap", "dtypes", "sharding"),
    ),
    Case(
        name="retrieval.wti_value",
        fn=retrieval.wti_value,
        make_args=_wti_args,
        grad_argnums=(0, 1, 2),
        shard_argnums=(0, 1, 2, 3, 4),
        rtol=1e-4,
        bad=(
            Bad(
                "integer mask",
                lambda key: (
                    (*_game_args(key, jnp.float32), jnp.ones((8, 2), bool), jnp.ones((8, 3))),
                    {},
                ),
                TypeError,
                "mask_b",
            ),
        ),
        slow_checks=("jit", "eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding"),
    ),
    Case(
        name="retrieval.stii_stratified",
        fn=_stratified,
        make_args=_one_table,
        vmap=False,  # vmapped over keys in tests/retrieval/test_sampling.py
        shard_argnums=(),
        rtol=1e-4,
        slow_checks=("dtypes", "traced_once", "grads"),
        bad=(
            Bad(
                "too few samples",
                lambda key: (_one_table(key, jnp.float32), {"n_samples": 5}),
                ValueError,
                "n_samples",
            ),
        ),
    ),
    Case(
        name="retrieval.stii_permutation",
        fn=_permutation,
        make_args=_one_table,
        vmap=False,
        shard_argnums=(),
        rtol=1e-4,
        bad=(
            Bad(
                "one permutation",
                lambda key: (_one_table(key, jnp.float32), {"n_perms": 1}),
                ValueError,
                "n_perms",
            ),
        ),
        slow_checks=("jit", "eval_shape", "dtypes", "traced_once", "grads"),
    ),
    Case(
        name="retrieval.info_nce",
        fn=_nce,
        make_args=_scores,
        hparams={"tau": (0.1, 0.3)},
        rtol=1e-4,
        bad=(
            Bad(
                "tau = 0", lambda key: (_scores(key, jnp.float32), {"tau": 0.0}), ValueError, "tau"
            ),
            Bad("not square", lambda key: ((jnp.zeros((8, 3, 4)),), {}), TypeError, "scores"),
            Bad("empty batch", lambda key: ((jnp.zeros((8, 0, 0)),), {}), TypeError, "scores"),
        ),
    ),
    Case(
        name="retrieval.token_scores",
        fn=retrieval.token_scores,
        make_args=_tokens,
        grad_argnums=(0, 1, 3, 4),
        vmap=False,  # batches are the first axes already
        shard_argnums=(3, 4, 5),
        rtol=1e-4,
        bad=(
            Bad(
                "feature sizes differ",
                lambda key: (
                    (
                        *_tokens(key, jnp.float32)[:3],
                        jnp.zeros((8, 2, 5)),
                        *_tokens(key, jnp.float32)[4:],
                    ),
                    {},
                ),
                TypeError,
                "text_tokens",
            ),
        ),
        slow_checks=("grads", "dtypes", "traced_once", "sharding"),
    ),
    Case(
        name="retrieval.stii_alignment_loss",
        fn=_align,
        make_args=_align_args,
        hparams={"tau_s": (0.1, 0.5), "tau_phi": (0.2, 0.4)},
        shard_argnums=(),
        rtol=1e-4,
        bad=(
            Bad(
                "tau_phi < 0",
                lambda key: (_align_args(key, jnp.float32), {"tau_phi": -1.0}),
                ValueError,
                "tau_phi",
            ),
            Bad(
                "float mask",
                lambda key: (
                    (*_align_args(key, jnp.float32)[:2], jnp.ones((8, 3)), jnp.ones((8, 2), bool)),
                    {},
                ),
                TypeError,
                "mask_a",
            ),
        ),
        slow_checks=("grads", "dtypes", "vmap", "eval_shape"),
    ),
    Case(
        name="retrieval.pyramid_consistency",
        fn=_pyr,
        make_args=_pyr_args,
        grad_argnums=(1,),  # the local stages are stop_gradient-ed targets
        hparams={"tau": (0.1, 0.5)},
        shard_argnums=(),
        rtol=1e-4,
        bad=(
            Bad(
                "global not square",
                lambda key: ((jnp.zeros((8, 5, 5)), jnp.zeros((5, 4))), {}),
                TypeError,
                "local_scores",
            ),
        ),
        slow_checks=("grads", "dtypes", "vmap", "eval_shape", "jit", "traced_once"),
    ),
    Case(
        name="retrieval.dpc_knn",
        fn=_dpc,
        make_args=_tokens_mask,
        grad_modes=(),  # a discrete assignment
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "more centres than tokens",
                lambda key: ((jnp.zeros((2, 3)), jnp.ones(2, bool)), {}),
                ValueError,
                "n_centers",
            ),
            Bad(
                "float mask",
                lambda key: ((jnp.zeros((6, 3)), jnp.ones(6)), {}),
                TypeError,
                "mask",
            ),
        ),
        # default: bad inputs (the oracles in test_compress.py run the jitted core)
        slow_checks=(
            "jit",
            "eval_shape",
            "dtypes",
            "traced_once",
            "sharding",
            "eager_cache",
            "vmap",
        ),
    ),
    Case(
        name="retrieval.merge_tokens",
        fn=_merge,
        make_args=_merge_args,
        grad_argnums=(0, 2),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(
            Bad(
                "float assign",
                lambda key: ((jnp.zeros((6, 3)), jnp.zeros(6), jnp.zeros(6)), {}),
                TypeError,
                "assign",
            ),
        ),
        # default: grads and bad inputs (the core is jitted at module level)
        slow_checks=(
            "jit",
            "eval_shape",
            "dtypes",
            "traced_once",
            "sharding",
            "vmap",
            "eager_cache",
        ),
    ),
]
