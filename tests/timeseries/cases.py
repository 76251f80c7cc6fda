"""Conformance cases for jaxkit.timeseries (see tests/conformance.py).

Host-side pieces (extractors, the cache loader, the semi-synthetic text) are tested
directly in the other test files, not here.
"""

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
