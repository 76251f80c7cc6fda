"""Tensor parallelism with nn.param_specs on the 8 fake CPU devices (an Auto mesh with
the same specs is exercised by tests/pod: one device vs a data x model mesh)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxkit import nn

CFG = nn.TransformerConfig(
    vocab_size=16,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    mlp_dim=16,
    qkv_bias=True,
)


@pytest.fixture(scope="module")
def setup():
    p = nn.init_params(CFG, key=jax.random.key(0))
    # inputs and glue in NumPy: no eager programs of their own
    toks = np.random.default_rng(1).integers(0, 16, (4, 6)).astype(np.int32)
    lens = np.array([3, 6, 2, 5], np.int32)
    first = nn.prefill(p, CFG, toks, lens, max_len=8)
    nxt = np.argmax(np.asarray(first.logits), -1).astype(np.int32)
    return p, toks, lens, nn.apply(p, CFG, toks).logits, nn.decode_step(p, CFG, nxt, first.cache)


def _place(mesh, p, toks, lens):
    specs = nn.param_specs(CFG)
    assert jax.tree.structure(specs, is_leaf=lambda s: isinstance(s, P)) == jax.tree.structure(p)
    ps = jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), p, specs)
    ts = jax.device_put(toks, NamedSharding(mesh, P("data", None)))
    ls = jax.device_put(lens, NamedSharding(mesh, P("data")))
    return ps, ts, ls


def test_tensor_parallel_under_an_explicit_mesh(setup):
    p, toks, lens, ref, step = setup
    mesh = jax.make_mesh((4, 2), ("data", "model"))  # jax's default: Explicit axes
    assert set(mesh.axis_types) == {AxisType.Explicit}
    ps, ts, ls = _place(mesh, p, toks, lens)
    with jax.set_mesh(mesh):
        out = nn.apply(ps, CFG, ts).logits
        first = nn.prefill(ps, CFG, ts, ls, max_len=8)
        nxt = jnp.argmax(first.logits, -1).astype(jnp.int32)
        got = nn.decode_step(ps, CFG, nxt, first.cache)
        like = nn.init_cache(CFG, max_len=8, like=ls)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    assert out.sharding.spec == P("data", None, "model")
    np.testing.assert_allclose(got.logits, step.logits, atol=1e-5)
    np.testing.assert_allclose(got.cache.k, step.cache.k, atol=1e-5)
    assert (
        got.cache.k.sharding.spec == nn.cache_specs(CFG).k == P(None, "data", None, "model", None)
    )
    # init_cache(like=) carries the batch sharding of `like`
    assert like.k.sharding.spec[1] == "data" and like.length.sharding.spec == P("data")
    np.testing.assert_array_equal(like.length, 0)
