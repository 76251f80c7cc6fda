"""Conformance cases for jaxkit.timeseries (see tests/conformance.py).

Host-side pieces (extractors, the cache loader, the semi-synthetic text) are tested
directly in the other test files, not here.
"""

import functools

import jax
import jax.numpy as jnp

from jaxkit import timeseries as ts
from tests.conformance import Bad, Case

_SLOW = ("jit", "eval_shape", "vmap", "dtypes", "traced_once", "grads", "sharding")


def _windows(key, dtype):
    k = jax.random.split(key)
    hist = jax.random.normal(k[0], (8, 16)).astype(dtype)
    fut = (1.5 * jax.random.normal(k[1], (8, 8)) + 0.5).astype(dtype)
    return hist, fut


def _labels_args(key, dtype):
    th = ts.Thresholds(jnp.asarray([0.3, 1.0], dtype), jnp.asarray([-0.2, 0.4], dtype))
    return (*_windows(key, dtype), th)


def _labels(hist, fut, th):
    return ts.oracle_labels(hist, fut, th, schema=ts.V2)


def _fit(hist, fut):
    return ts.fit_thresholds(hist, fut, schema=ts.LEGACY_V1)


def _nonfinite(key):
    hist, fut = _windows(key, jnp.float32)
    return (hist, fut.at[2, 5].set(jnp.inf)), {}


CASES = [
    Case(
        name="timeseries.primitive_scores",
        fn=ts.primitive_scores,
        make_args=_windows,
        grad_argnums=(0, 1),
        rtol=1e-4,
        bad=(
            Bad("non-finite spike", _nonfinite, ValueError, "fut"),
            Bad(
                "one-step window",
                lambda key: ((jnp.zeros((8, 4)), jnp.zeros((8, 1))), {}),
                ValueError,
                "fut",
            ),
        ),
        slow_checks=("grads", "sharding"),
    ),
    Case(
        name="timeseries.oracle_labels",
        fn=_labels,
        make_args=_labels_args,
        grad_modes=(),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "non-finite spike",
                lambda key: (_nonfinite(key)[0] + _labels_args(key, jnp.float32)[2:], {}),
                ValueError,
                "fut",
            ),
            Bad(
                "decreasing shift thresholds",
                lambda key: (
                    (
                        *_windows(key, jnp.float32),
                        ts.Thresholds(jnp.asarray([1.0, 0.3]), jnp.asarray([-0.2, 0.4])),
                    ),
                    {},
                ),
                ValueError,
                "thresholds.shift",
            ),
        ),
        slow_checks=("vmap", "dtypes", "traced_once", "sharding"),
    ),
    Case(
        name="timeseries.fit_thresholds",
        fn=_fit,
        make_args=_windows,
        grad_modes=(),
        shard_argnums=(),
        vmap=False,
        bad=(Bad("non-finite spike", _nonfinite, ValueError, "fut"),),
        slow_checks=_SLOW,
    ),
]


@functools.cache
def _models(dtype_name):
    """One tiny model pair per dtype (building them eagerly is most of a case's time)."""
    with jax.ensure_compile_time_eval():  # concrete even if first reached under a trace
        return _build_models(dtype_name)


def _build_models(dtype_name):
    dtype = jnp.dtype(dtype_name)
    bb = ts.PatchTST(
        8,
        4,
        channels=1,
        patch_len=4,
        stride=4,
        d_model=4,
        n_heads=1,
        n_layers=1,
        d_ff=8,
        key=jax.random.key(0),
        dtype=dtype,
    )
    return bb, ts.TESSForecaster(bb, ts.LEGACY_V1, key=jax.random.key(1), gate_width=4)


def _model_args(key, dtype):
    k = jax.random.split(key, 5)
    bb, tess = _models(jnp.dtype(dtype).name)
    x = jax.random.normal(k[2], (8, 8, 1)).astype(dtype)
    ids = jnp.stack(
        [
            jax.random.randint(jax.random.fold_in(k[3], i), (8,), 0, s)
            for i, s in enumerate(ts.LEGACY_V1.sizes)
        ],
        1,
    )
    conf = jax.random.uniform(k[4], (8, 4, 4)).astype(dtype)
    return bb, tess, x, ids, conf


def _patchtst_args(key, dtype):
    bb, _, x, _, _ = _model_args(key, dtype)
    return bb, x


def _tess_args(key, dtype):
    return _model_args(key, dtype)[1:]


def _tess_y(tess, x, ids, conf):
    return ts.tess_forecast(tess, x, ids, conf)


def _loss_args(key, dtype):
    _, tess, x, ids, conf = _model_args(key, dtype)
    y = (2.0 * x[:, :4]).astype(dtype)
    return tess, x, y, ids, conf


def _loss(tess, x, y, ids, conf, *, lambda_gate, gate_offset=0):
    batch = ts.TESSBatch(x, y, ids, conf, (ids % 2 + gate_offset).astype(jnp.int32))
    return ts.tess_loss(tess, batch, lambda_gate=lambda_gate)


def _bad_label(key):
    _, tess, x, ids, conf = _model_args(key, jnp.float32)
    return (tess, x, ids.at[0, 2].set(5), conf), {}


def _short_x(key):
    _, tess, x, ids, conf = _model_args(key, jnp.float32)
    return (tess, x[:, :6], ids, conf), {}


CASES += [
    Case(
        name="timeseries.patchtst_forecast",
        fn=ts.patchtst_forecast,
        make_args=_patchtst_args,
        grad_argnums=(1,),
        shard_argnums=(1,),
        rtol=1e-4,
        bad=(
            Bad(
                "non-finite history",
                lambda key: (
                    (_patchtst_args(key, jnp.float32)[0], jnp.full((8, 8, 1), jnp.nan)),
                    {},
                ),
                ValueError,
                "x",
            ),
        ),
        slow_checks=("vmap", "grads", "dtypes", "sharding", "traced_once"),
    ),
    Case(
        name="timeseries.tess_forecast",
        fn=_tess_y,
        make_args=_tess_args,
        # the gate reads the history embedding through stop_gradient (by design: the gate-off
        # model trains as PatchTST), so finite differences in `x` or the encoder weights differ
        # from autodiff by that term: the derivative oracle is taken in the confidences
        grad_argnums=(3,),
        shard_argnums=(1, 2, 3),
        rtol=1e-4,
        bad=(
            Bad("unknown primitive label", _bad_label, ValueError, "label_ids"),
            Bad("series shorter than the window", _short_x, TypeError, "x"),
        ),
        slow_checks=("grads", "vmap", "dtypes", "sharding", "eval_shape", "traced_once"),
    ),
    Case(
        name="timeseries.tess_loss",
        fn=_loss,
        make_args=_loss_args,
        hparams={"lambda_gate": (0.1, 0.5)},
        grad_argnums=(2, 4),  # targets and confidences: see tess_forecast on stop_gradient
        shard_argnums=(1, 2, 3, 4),
        vmap=False,
        rtol=1e-4,
        grad_modes=("rev",),
        slow_checks=_SLOW,
        bad=(
            Bad(
                "gate target 2",
                lambda key: (_loss_args(key, jnp.float32), {"gate_offset": 2}),
                ValueError,
                "gate_target",
            ),
        ),
    ),
]


def _bow_args(key, dtype):
    bb, _, x, _, _ = _model_args(key, dtype)
    bow_model = _bow_model(jnp.dtype(dtype).name)
    bow = jax.random.dirichlet(jax.random.fold_in(key, 9), jnp.ones(6), (8,)).astype(dtype)
    return bow_model, x, bow


@functools.cache
def _bow_model(dtype_name):
    bb, _ = _models(dtype_name)
    with jax.ensure_compile_time_eval():  # concrete even if first reached under a trace
        return ts.BoWForecaster(bb, 6, key=jax.random.key(2), n_tokens=2)


def _bow_nan(key):
    m, x, bow = _bow_args(key, jnp.float32)
    return (m, x, bow.at[0, 1].set(jnp.nan)), {}


CASES += [
    Case(
        name="timeseries.bow_forecast",
        fn=ts.bow_forecast,
        make_args=_bow_args,
        grad_argnums=(1, 2),
        shard_argnums=(1, 2),
        rtol=1e-4,
        bad=(Bad("non-finite bag of words", _bow_nan, ValueError, "bow"),),
        slow_checks=("vmap", "grads", "dtypes", "sharding", "traced_once"),
    ),
]
