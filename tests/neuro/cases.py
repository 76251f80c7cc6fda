"""Conformance cases for jaxkit.neuro (see tests/conformance.py).

Host-side functions (the NumPy alignment metrics), the training loop `fit` and the initialiser
`principal_init` are tested directly in tests/neuro (fit's compile cache included), not through
the suite.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import neuro
from tests.conformance import Bad, Case

_SLOW_ALL = ("jit", "eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding")


def _latents(key, dtype):
    k = jax.random.split(key, 3)
    mu = jax.random.normal(k[0], (8, 4))
    ls = -1.0 + 0.3 * jax.random.normal(k[1], (8, 4))
    z = mu + jnp.exp(ls) * jax.random.normal(k[2], (8, 4))
    return (z.astype(dtype), mu.astype(dtype), ls.astype(dtype))


def _pc(z, mu, log_std, *, n_total, n_groups=2):
    return neuro.partial_correlation(z, mu, log_std, n_groups=n_groups, n_total=n_total)


def _pairwise(z, mu, log_std):
    return neuro.pairwise_log_q(z, mu, log_std, n_groups=2)


def _pc_eval(mu, log_std):
    return neuro.partial_correlation_eval(
        mu, log_std, n_groups=2, key=jax.random.key(3), n_mc=2, chunk=5
    )


def _cov(key, dtype):
    x = jax.random.normal(key, (8, 12))
    return ((x @ x.T) / 12 + 0.5 * jnp.eye(8)).astype(dtype)


def _group_tc(cov):
    return neuro.gaussian_group_tc(cov, n_groups=2)


def _pairs(key, dtype):
    k = jax.random.split(key)
    return (
        jax.random.normal(k[0], (8, 4)).astype(dtype),
        jax.random.normal(k[1], (8, 4)).astype(dtype),
    )


@functools.cache
def _model(dtype, **kw):
    """The cases' model, built once per dtype (and options), eagerly even when first asked
    for under a trace: the suite's eager and traced calls then share it instead of building
    it (eager ops, or its initialiser traced into every program) on each call."""
    with jax.ensure_compile_time_eval():
        return neuro.LowRankRNN(4, 2, key=jax.random.key(1), dtype=dtype, **kw)


def _loss(x_prev, x_next, *, beta, alpha):
    model = _model(x_prev.dtype, n_groups=2)
    return neuro.facrnn_loss(
        model, x_prev, x_next, key=jax.random.key(2), n_total=100, beta=beta, alpha=alpha
    )


def _windows(key, dtype):
    k = jax.random.split(key)
    return (
        jax.random.normal(k[0], (8, 3, 4)).astype(dtype),
        jax.random.normal(k[1], (8, 4)).astype(dtype),
    )


def _encoder_loss(encoder):
    def loss(x_prev, x_next, *, beta):
        model = _model(x_prev.dtype, n_groups=2, encoder=encoder, hidden=3)
        return neuro.facrnn_loss(
            model, x_prev, x_next, key=jax.random.key(2), n_total=100, beta=beta
        )

    return loss


def _seqs(key, dtype):
    k = jax.random.split(key)
    return (
        jax.random.normal(k[0], (8, 5, 4)).astype(dtype),
        jax.random.normal(k[1], (8, 5, 4)).astype(dtype),
    )


def _encoder_case(encoder, make_args, bad):
    """``facrnn_loss`` with an amortised encoder (``"gru"`` windows, ``"bigru"`` sequences)."""
    return Case(
        name=f"neuro.facrnn_loss/{encoder}",
        fn=_encoder_loss(encoder),
        make_args=make_args,
        hparams={"beta": (0.0, 20.0)},
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),
        rtol=1e-4,
        grad_rtol=1e-3,
        bad=bad,
        slow_checks=("eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding"),
    )


def _poisson_draw(key, shape, dtype):
    """Poisson(2) counts, drawn by NumPy from ``key``'s bits (``jax.random.poisson`` compiles
    a rejection loop per shape)."""
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)))
    return jnp.asarray(rng.poisson(2.0, shape), dtype)


def _poisson_args(key, dtype):
    k = jax.random.split(key)
    z = jax.random.normal(k[0], (8, 2)).astype(dtype)
    y = _poisson_draw(k[1], (8, 4), dtype)
    return (z, y)


def _poisson_ll(z, y, *, bin_width):
    model = _model(z.dtype, obs="poisson")
    return neuro.observation_log_lik(model, z, y, bin_width=bin_width)


def _conn_args(key, dtype):
    k = jax.random.split(key)
    return (
        jax.random.normal(k[0], (8, 3, 3)).astype(dtype),
        jax.random.normal(k[1], (8, 3, 3)).astype(dtype),
    )


def _ab(key, dtype):
    k = jax.random.split(key)
    return (
        jax.random.normal(k[0], (8, 4)).astype(dtype),
        jax.random.normal(k[1], (4, 8)).astype(dtype),
    )


def _sub(A, B):
    return neuro.sub_connectivity(A, B, n_groups=2)


def _counts(key, dtype):
    return (_poisson_draw(key, (8, 3), dtype),)


def _smooth(counts, *, tau):
    return neuro.causal_smooth(counts, tau=tau)


CASES = [
    Case(
        name="neuro.partial_correlation",
        fn=_pc,
        make_args=_latents,
        hparams={"n_total": (100.0, 250.0)},
        grad_argnums=(0, 1, 2),
        shard_argnums=(0, 1, 2),
        rtol=1e-4,
        bad=(
            Bad(
                "n_groups does not divide K",
                lambda key: (_latents(key, jnp.float32), {"n_groups": 3}),
                ValueError,
                "n_groups",
            ),
            Bad(
                "n_total below the minibatch",
                lambda key: (_latents(key, jnp.float32), {"n_total": 4.0}),
                ValueError,
                "n_total",
            ),
            Bad(
                "NaN n_total",
                lambda key: (_latents(key, jnp.float32), {"n_total": float("nan")}),
                ValueError,
                "n_total",
            ),
            Bad(
                "log_std shape",
                lambda key: ((*_latents(key, jnp.float32)[:2], jnp.zeros((8, 3))), {}),
                TypeError,
                "log_std",
            ),
            Bad(
                "one sample",
                lambda key: (tuple(a[:1] for a in _latents(key, jnp.float32)), {}),
                ValueError,
                "M >= 2",
            ),
        ),
    ),
    Case(
        name="neuro.pairwise_log_q",
        fn=_pairwise,
        make_args=_latents,
        grad_argnums=(0, 1, 2),
        shard_argnums=(0,),
        bad=(
            Bad(
                "z width",
                lambda key: ((jnp.zeros((8, 3)), *_latents(key, jnp.float32)[1:]), {}),
                TypeError,
                "z",
            ),
        ),
        slow_checks=_SLOW_ALL,
    ),
    Case(
        name="neuro.partial_correlation_eval",
        fn=_pc_eval,
        make_args=lambda key, dtype: _latents(key, dtype)[1:],
        grad_argnums=(0, 1),
        shard_argnums=(),
        rtol=1e-4,
        bad=(
            Bad(
                "integer mu",
                lambda key: ((jnp.zeros((8, 4), jnp.int32), jnp.zeros((8, 4))), {}),
                TypeError,
                "mu",
            ),
        ),
        slow_checks=("eval_shape", "vmap", "dtypes", "traced_once", "grads"),
    ),
    Case(
        name="neuro.gaussian_group_tc",
        fn=_group_tc,
        make_args=lambda key, dtype: (_cov(key, dtype),),
        rtol=1e-4,
        grad_rtol=1e-3,
        bad=(
            Bad("not square", lambda key: ((jnp.eye(8)[:6],), {}), TypeError, "cov"),
            Bad(
                "not positive definite",
                lambda key: ((jnp.eye(8).at[0, 0].set(-1.0),), {}),
                Exception,
                "cov",
            ),
        ),
        slow_checks=("eval_shape", "vmap", "traced_once", "grads", "sharding"),
    ),
    Case(
        name="neuro.kl_std_normal",
        fn=neuro.kl_std_normal,
        make_args=lambda key, dtype: _latents(key, dtype)[1:],
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "shapes differ",
                lambda key: ((jnp.zeros((8, 4)), jnp.zeros((8, 3))), {}),
                TypeError,
                "log_std",
            ),
        ),
        slow_checks=_SLOW_ALL,
    ),
    Case(
        name="neuro.facrnn_loss",
        fn=_loss,
        make_args=_pairs,
        hparams={"beta": (0.0, 20.0), "alpha": (1.0, 0.5)},
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),
        rtol=1e-4,
        grad_rtol=1e-3,
        # make test keeps the area's derivative and sharding checks on partial_correlation
        slow_checks=("grads", "sharding"),
        bad=(
            Bad(
                "negative beta",
                lambda key: (_pairs(key, jnp.float32), {"beta": -1.0}),
                ValueError,
                "beta",
            ),
            Bad(
                "NaN alpha",
                lambda key: (_pairs(key, jnp.float32), {"alpha": float("nan")}),
                ValueError,
                "alpha",
            ),
            Bad(
                "wrong neuron count",
                lambda key: ((jnp.zeros((8, 5)), jnp.zeros((8, 5))), {}),
                TypeError,
                "x_prev",
            ),
            Bad(
                "x_next shape",
                lambda key: ((jnp.zeros((8, 4)), jnp.zeros((7, 4))), {}),
                TypeError,
                "x_next",
            ),
        ),
    ),
    _encoder_case(
        "gru",
        _windows,
        (
            Bad(
                "flat read-in for a GRU encoder",
                lambda key: ((jnp.zeros((8, 4)), jnp.zeros((8, 4))), {}),
                TypeError,
                "x_prev",
            ),
            Bad(
                "window width",
                lambda key: ((jnp.zeros((8, 3, 5)), jnp.zeros((8, 4))), {}),
                TypeError,
                "x_prev",
            ),
        ),
    ),
    _encoder_case(
        "bigru",
        _seqs,
        (
            Bad(
                "observations not aligned with the sequences",
                lambda key: ((jnp.zeros((8, 5, 4)), jnp.zeros((8, 4))), {}),
                TypeError,
                "x_next",
            ),
        ),
    ),
    Case(
        name="neuro.observation_log_lik/poisson",
        fn=_poisson_ll,
        make_args=_poisson_args,
        hparams={"bin_width": (0.05, 1.0)},
        grad_argnums=(0,),
        shard_argnums=(0, 1),
        rtol=1e-4,
        bad=(
            Bad(
                "bin_width = 0",
                lambda key: (_poisson_args(key, jnp.float32), {"bin_width": 0.0}),
                ValueError,
                "bin_width",
            ),
            Bad(
                "negative counts",
                lambda key: ((jnp.zeros((8, 2)), -jnp.ones((8, 4))), {"bin_width": 1.0}),
                ValueError,
                "x",
            ),
        ),
        slow_checks=("eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding"),
    ),
    Case(
        name="neuro.connectivity_metrics",
        fn=neuro.connectivity_metrics,
        make_args=_conn_args,
        grad_argnums=(0,),
        shard_argnums=(0, 1),
        rtol=1e-4,
        bad=(
            Bad(
                "shapes differ",
                lambda key: ((jnp.zeros((8, 3, 3)), jnp.zeros((8, 3, 2))), {}),
                TypeError,
                "j_true",
            ),
            Bad(
                "constant truth (R^2, Pearson r undefined)",
                lambda key: ((jnp.zeros((8, 3, 3)), jnp.ones((8, 3, 3))), {}),
                ValueError,
                "j_true",
            ),
        ),
        slow_checks=_SLOW_ALL,
    ),
    Case(
        name="neuro.sub_connectivity",
        fn=_sub,
        make_args=_ab,
        grad_argnums=(0, 1),
        shard_argnums=(0,),
        bad=(
            Bad(
                "B not transposed",
                lambda key: ((jnp.zeros((8, 4)), jnp.zeros((8, 4))), {}),
                TypeError,
                "B",
            ),
        ),
        slow_checks=_SLOW_ALL,
    ),
    Case(
        name="neuro.causal_smooth",
        fn=_smooth,
        make_args=_counts,
        hparams={"tau": (1.0, 4.0)},
        shard_argnums=(),
        bad=(
            Bad(
                "tau < 0",
                lambda key: (_counts(key, jnp.float32), {"tau": -1.0}),
                ValueError,
                "tau",
            ),
        ),
        slow_checks=("eval_shape", "vmap", "dtypes", "traced_once", "grads"),
    ),
]
