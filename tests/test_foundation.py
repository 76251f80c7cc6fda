import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import _validate, sharding
from jaxkit.kernels import _dispatch


def test_positive_names_argument():
    with pytest.raises(ValueError, match="`softness` must be > 0"):
        _validate.positive(softness=0.0)
    _validate.positive(softness=0.5)
    _validate.positive(softness=jnp.float32(1.0))


def test_checks_skip_tracers():
    jax.jit(lambda s: (_validate.positive(softness=s), s)[1])(jnp.float32(-1.0))


def test_interval_and_options():
    with pytest.raises(ValueError, match=r"`delta` must lie in \[0, 1\)"):
        _validate.in_interval(low=0, high=1, closed="left", delta=1.0)
    with pytest.raises(ValueError, match="`method` must be one of 'a', 'b'; got 'c'"):
        _validate.one_of(("a", "b"), method="c")


def test_shape_dtype_rank_errors_are_type_errors():
    with pytest.raises(TypeError, match="`x` must be a floating array"):
        _validate.floating(jnp.ones(3, jnp.int32), name="x")
    with pytest.raises(TypeError, match="`x` must have rank 2"):
        _validate.ndim(jnp.ones(3), 2, name="x")
    with pytest.raises(TypeError, match=r"`x` must have shape \(\*, 3\)"):
        _validate.shape(jnp.ones((2, 4)), (None, 3), name="x")
    with pytest.raises(TypeError, match="`a` and `b` must have the same shape"):
        _validate.same_shape(b=jnp.ones(2), a=jnp.ones(3))
    with pytest.raises(ValueError, match="`axis`=2 is out of range"):
        _validate.axis(2, 2)
    assert _validate.axis(-1, 3) == 2


def test_error_if_concrete_and_traced():
    with pytest.raises(ValueError, match="`x` must be finite"):
        _validate.all_finite(jnp.array([1.0, jnp.nan]), name="x")
    f = jax.jit(lambda x: _validate.all_finite(x, name="x") * 2)
    np.testing.assert_allclose(f(jnp.ones(2)), 2.0)
    with pytest.raises(Exception, match="`x` must be finite"):
        jax.block_until_ready(f(jnp.array([jnp.inf, 1.0])))


def test_is_key():
    _validate.is_key(jax.random.key(0))
    _validate.is_key(jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="`key` must be a PRNG key"):
        _validate.is_key(3)


def test_dispatch_paths():
    calls = []
    ref = lambda: calls.append("ref") or "ref"
    ker = lambda interpret: calls.append(("ker", interpret)) or "ker"
    assert _dispatch.dispatch("xla", reference=ref, kernel=ker) == "ref"
    assert _dispatch.dispatch("pallas_interpret", reference=ref, kernel=ker) == "ker"
    assert calls[-1] == ("ker", True)
    assert _dispatch.dispatch("auto", reference=ref, kernel=ker, backend="cpu") == "ref"
    assert _dispatch.dispatch("auto", reference=ref, kernel=ker, backend="gpu") == "ker"
    assert calls[-1] == ("ker", False)

    def cannot(interpret):
        raise NotImplementedError("shape not supported")

    assert _dispatch.dispatch("auto", reference=ref, kernel=cannot, backend="gpu") == "ref"
    with pytest.raises(NotImplementedError):
        _dispatch.dispatch("pallas", reference=ref, kernel=cannot)
    with pytest.raises(ValueError, match="`implementation` must be one of"):
        _dispatch.dispatch("triton", reference=ref, kernel=ker)


def test_mesh_and_shard_batch():
    mesh = sharding.make_mesh(model=2)
    assert dict(mesh.shape) == {"data": 4, "model": 2}
    x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    xs = sharding.shard_batch({"x": x}, mesh)["x"]
    assert xs.sharding.spec == jax.P("data", None)
    np.testing.assert_array_equal(np.asarray(xs), x)
    with pytest.raises(ValueError, match="not divisible"):
        sharding.shard_batch(np.ones((6, 2)), mesh)
    with pytest.raises(ValueError, match="`model` must be a positive divisor"):
        sharding.make_mesh(model=3)


def test_rowwise_matches_global(mesh8):
    x = jax.random.normal(jax.random.key(1), (16, 5))
    f = lambda a: jnp.sort(a, axis=-1) * 2
    xs = jax.device_put(x, jax.NamedSharding(mesh8, jax.P("data", None)))
    got = jax.jit(sharding.rowwise(f, mesh8))(xs)
    np.testing.assert_allclose(got, f(x))
    assert got.sharding.spec[0] == "data"
    with pytest.raises(ValueError, match="`axis` must be one of"):
        sharding.rowwise(f, mesh8, axis="model")


def test_eight_fake_devices():
    assert jax.device_count() == 8
