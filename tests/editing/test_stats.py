"""Streaming statistics: brute-force oracle, row ids, stacking, merge, psum, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import editing
from tests.editing._helpers import brute_stats


def _rows(bt):
    return {"a": bt}


def _stacked(bt):
    # two stacked layers seeing different rows: [2, R, D]
    return {"s": jnp.stack([bt, 2.0 * bt[:, ::-1]])}


@pytest.mark.parametrize("method", ["grouped", pytest.param("masked", marks=pytest.mark.slow)])
def test_stats_match_brute_force(method):
    rng = np.random.default_rng(0)
    nb, b, d, k = 3, 12, 4, 4
    x = rng.normal(size=(nb, b, d)).astype(np.float32)
    ids = rng.integers(-1, k, size=(nb, b)).astype(np.int32)  # -1: rows outside every memory
    ids[0, 0] = 3
    st = editing.collect_stats(
        lambda p, bt: _rows(bt), None, x, ids, num_memories=k, method=method, block=5
    )
    cov, cnt = brute_stats(x.reshape(-1, d), ids.reshape(-1), k)
    np.testing.assert_allclose(st.cov["a"], cov, atol=2e-6)
    np.testing.assert_array_equal(st.count["a"], cnt)


@pytest.mark.slow
def test_stats_per_row_ids_stacked_and_rows_per_example():
    rng = np.random.default_rng(1)
    nb, b, p, d, k = 2, 3, 4, 3, 2
    x = rng.normal(size=(nb, b * p, d)).astype(np.float32)
    per_row = rng.integers(-1, k, size=(nb, b, p)).astype(np.int32)
    st = editing.collect_stats(_stacked_fn, None, x, per_row, num_memories=k, absorb_bias=False)
    rows = x.reshape(-1, d)
    rows2 = 2.0 * x[:, :, ::-1].reshape(-1, d)
    for layer, r in enumerate((rows, rows2)):
        cov, cnt = brute_stats(r, per_row.reshape(-1), k, absorb_bias=False)
        np.testing.assert_allclose(st.cov["s"][layer], cov, atol=2e-6)
        np.testing.assert_array_equal(st.count["s"], cnt)
    # one id per example: each example's p rows share it (example-major rows)
    per_ex = rng.integers(0, k, size=(nb, b)).astype(np.int32)
    st = editing.collect_stats(lambda q, bt: _rows(bt), None, x, per_ex, num_memories=k)
    cov, cnt = brute_stats(rows, np.repeat(per_ex.reshape(-1), p), k)
    np.testing.assert_allclose(st.cov["a"], cov, atol=2e-6)
    np.testing.assert_array_equal(st.count["a"], cnt)


def _stacked_fn(p, bt):
    return _stacked(bt)


@pytest.mark.slow
def test_merge_and_psum_equal_one_pass(mesh8):
    rng = np.random.default_rng(2)
    nb, b, d, k = 8, 4, 3, 3
    x = rng.normal(size=(nb, b, d)).astype(np.float32)
    ids = rng.integers(0, k, size=(nb, b)).astype(np.int32)
    fn = _rows_fn
    whole = editing.collect_stats(fn, None, x, ids, num_memories=k)
    a = editing.collect_stats(fn, None, x[:3], ids[:3], num_memories=k)
    c = editing.collect_stats(fn, None, x[3:], ids[3:], num_memories=k)
    merged = editing.merge_stats(a, c)
    np.testing.assert_allclose(merged.cov["a"], whole.cov["a"], atol=2e-6)
    np.testing.assert_array_equal(merged.count["a"], whole.count["a"])

    def shard(xs, ii):
        return editing.collect_stats(fn, None, xs, ii, num_memories=k, axis_name="data")

    # check_vma=False: eqx.error_if's cond mixes varying and invariant values
    f = jax.shard_map(
        shard,
        mesh=mesh8,
        in_specs=(jax.P("data"), jax.P("data")),
        out_specs=jax.P(),
        check_vma=False,
    )
    with jax.set_mesh(mesh8):
        put = [jax.device_put(a, jax.NamedSharding(mesh8, jax.P("data"))) for a in (x, ids)]
        out = jax.jit(f)(*put)
    np.testing.assert_allclose(out.cov["a"], whole.cov["a"], atol=2e-6)
    np.testing.assert_array_equal(out.count["a"], whole.count["a"])


def _rows_fn(p, bt):
    return _rows(bt)


def test_stats_bad_input():
    x = jnp.ones((2, 4, 3))
    with pytest.raises(ValueError, match="`ids`"):
        editing.collect_stats(_rows_fn, None, x, jnp.full((2, 4), 5), num_memories=3)
    with pytest.raises(ValueError, match="`ids`"):
        editing.collect_stats(_rows_fn, None, x, jnp.full((2, 4), -2), num_memories=3)
    with pytest.raises(TypeError, match="`ids`"):
        editing.collect_stats(_rows_fn, None, x, jnp.zeros((2, 3), jnp.int32), num_memories=3)
    with pytest.raises(TypeError, match="`ids`"):
        editing.collect_stats(_rows_fn, None, x, jnp.zeros((2, 4)), num_memories=3)
    with pytest.raises(ValueError, match="`num_memories`"):
        editing.collect_stats(_rows_fn, None, x, jnp.zeros((2, 4), jnp.int32), num_memories=0)
    with pytest.raises(ValueError, match="`method`"):
        editing.collect_stats(
            _rows_fn, None, x, jnp.zeros((2, 4), jnp.int32), num_memories=2, method="x"
        )
    # traced ids out of range: runtime error under jit
    f = jax.jit(lambda i: editing.collect_stats(_rows_fn, None, x, i, num_memories=3))
    with pytest.raises(Exception, match="`ids`"):
        jax.block_until_ready(f(jnp.full((2, 4), 7)))
