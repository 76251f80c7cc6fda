"""``nn.write_kv``: a block's K/V rows alone equal those the whole block writes."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn
from tests.conformance import without_jaxtyping
from tests.nn import cases

# the conformance config (biases on), with a K norm and a third block
CFG = dataclasses.replace(cases.CFG, qk_norm=True, n_layers=3)
B, T, CAP = 2, 3, 9


@functools.cache
def _params():
    # inputs drawn with NumPy and built once: no eager jax.random programs of their own
    p = nn.init_params(CFG, key=jax.random.key(0))
    rng = np.random.default_rng(1)
    p["layers"] = dict(p["layers"])
    for name in ("bq", "bk", "bv"):  # non-zero biases
        p["layers"][name] = jnp.asarray(0.5 * rng.normal(size=p["layers"][name].shape), jnp.float32)
    return p


@pytest.mark.parametrize("layer", [0, 2])
def test_write_kv_equals_the_rows_run_layers_writes(layer):
    p = _params()
    rng = np.random.default_rng(2)
    h = jnp.asarray(rng.normal(size=(B, T, CFG.d_model)), jnp.float32)
    # ragged committed lengths and positions that are not the slots
    cache = nn.init_cache(CFG, max_len=CAP, batch=B)
    cache = cache._replace(
        k=jnp.asarray(rng.normal(size=cache.k.shape), jnp.float32),
        v=jnp.asarray(rng.normal(size=cache.v.shape), jnp.float32),
        length=jnp.array([2, 5], jnp.int32),
    )
    pos = jnp.array([[7, 8, 9], [3, 4, 5]], jnp.int32)
    want = nn.run_layers(p, CFG, h, pos, start=layer, stop=layer + 1, cache=cache).cache
    got = nn.write_kv(p, CFG, h, pos, cache=cache, layer=layer)
    np.testing.assert_allclose(got.k, want.k, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.v, want.v, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.length, cache.length)
    # the rows written are the new ones, and only block `layer`'s
    changed = np.any(np.asarray(got.k) != np.asarray(cache.k), axis=(3, 4))
    for b, n in enumerate((2, 5)):
        expect = np.zeros((CFG.n_layers, CAP), bool)
        expect[layer, n : n + T] = True
        np.testing.assert_array_equal(changed[:, b], expect)


def test_write_kv_overflow_and_bad_input():
    p = _params()
    h = jnp.ones((B, T, CFG.d_model))
    pos = jnp.zeros((B, T), jnp.int32)
    cache = nn.init_cache(CFG, max_len=CAP, batch=B)
    full = cache._replace(length=jnp.array([CAP - 1, 0], jnp.int32))
    dropped = nn.write_kv(p, CFG, h, pos, cache=full, layer=1, overflow="drop")
    assert not np.any(np.asarray(dropped.k[1, 0, : CAP - 1]))  # only slot CAP - 1 written
    assert np.any(np.asarray(dropped.k[1, 0, CAP - 1]))
    with pytest.raises(Exception, match="overflows"):
        jax.block_until_ready(nn.write_kv(p, CFG, h, pos, cache=full, layer=1))
    with pytest.raises(ValueError, match="layer"):
        nn.write_kv(p, CFG, h, pos, cache=cache, layer=3)
    with pytest.raises(TypeError, match="h"):
        nn.write_kv(p, CFG, h[..., :4], pos, cache=cache, layer=0)
    with pytest.raises(TypeError, match="cache"):
        nn.write_kv(p, CFG, h, pos, cache=None, layer=0)
    with without_jaxtyping(), pytest.raises(TypeError, match="`like` must be a"):  # was JAX's
        nn.init_cache(CFG, max_len=CAP, like="0.1")
