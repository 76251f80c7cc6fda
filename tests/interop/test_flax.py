import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxkit.interop.flax import Buffer, NNXAdapter, to_nnx


def _data(key, n=32):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (n, 4))
    y = jnp.sin(x @ jax.random.normal(kw, (4, 1)))
    return x, y


class Net(nnx.Module):
    """A small real flax model: adapter-wrapped eqx MLP, then a native nnx.Linear."""

    def __init__(self, mlp, *, rngs):
        self.body = to_nnx(mlp, batch_axis=0)
        self.head = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.tanh(self.body(x))  # the adapter runs under the suite's strict rules
        with jax.numpy_rank_promotion("allow"):  # nnx.Linear broadcasts its bias
            return self.head(h)


def _mlp(key):
    return eqx.nn.MLP(4, 8, 16, 1, key=key)


def test_outputs_equal_wrapped_layer(key):
    mlp = _mlp(key)
    x, _ = _data(jax.random.key(1))
    m = to_nnx(mlp, batch_axis=0)
    np.testing.assert_array_equal(m(x), jax.vmap(mlp)(x))
    np.testing.assert_array_equal(to_nnx(mlp)(x[0]), mlp(x[0]))
    # params are nnx.Param state with the module's own initial values
    state = nnx.state(m, nnx.Param)
    leaves = jax.tree.leaves(state)
    assert len(leaves) == len(jax.tree.leaves(eqx.filter(mlp, eqx.is_array)))
    np.testing.assert_array_equal(m.params["layers.0.weight"][...], mlp.layers[0].weight)


def test_gradients_flow_to_wrapped_params(key):
    mlp = _mlp(key)
    x, y = _data(jax.random.key(1))
    model = Net(mlp, rngs=nnx.Rngs(0))

    def loss(model):
        return jnp.mean((model(x) - y) ** 2)

    grads = nnx.jit(nnx.grad(loss))(model)  # jitted: eager, every op compiled alone
    # reference: the same loss with the plain eqx module, differentiated by equinox
    head_w, head_b = model.head.kernel[...], model.head.bias[...]

    def ref_loss(mlp):
        return jnp.mean((jnp.tanh(jax.vmap(mlp)(x)) @ head_w + head_b[None] - y) ** 2)

    ref = eqx.filter_jit(eqx.filter_grad(ref_loss))(mlp)
    g0 = grads["body"]["params"]["layers.0.weight"][...]
    assert float(np.abs(np.asarray(g0)).max()) > 0
    np.testing.assert_allclose(g0, ref.layers[0].weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        grads["body"]["params"]["layers.1.bias"][...],
        ref.layers[1].bias,
        rtol=1e-5,
        atol=1e-6,
    )


def test_trains_with_optax_in_flax_model(key):
    mlp = _mlp(key)
    x, y = _data(jax.random.key(1))
    model = Net(mlp, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt):
        def loss(model):
            return jnp.mean((model(x) - y) ** 2)

        val, grads = nnx.value_and_grad(loss)(model)
        opt.update(model, grads)
        return val

    # optax.adam's bias correction mixes a Python float with an int32 count, which
    # strict promotion rejects: run the user's training loop under standard rules.
    with jax.numpy_dtype_promotion("standard"):
        losses = [float(step(model, opt)) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses
    # the wrapped params moved, and unwrap() gives the trained eqx module
    trained = model.body.unwrap()
    assert isinstance(trained, eqx.nn.MLP)
    assert not np.allclose(trained.layers[0].weight, mlp.layers[0].weight)
    np.testing.assert_array_equal(jax.vmap(trained)(x), model.body(x))


def test_pair_with_explicit_key_and_rngs(key):
    def init(*, key):
        return {"w": jax.random.normal(key, (3, 2)), "b": jnp.zeros(2)}

    def apply(p, x, *, scale=1.0):
        return scale * (x @ p["w"] + p["b"][None])

    x = jnp.ones((5, 3))
    m = to_nnx((init, apply), key=key)
    ref = init(key=key)
    np.testing.assert_array_equal(m(x), apply(ref, x))
    np.testing.assert_array_equal(m(x, scale=2.0), apply(ref, x, scale=2.0))
    np.testing.assert_array_equal(to_nnx((init, apply), key=key).params["w"][...], ref["w"])
    other = to_nnx((init, apply), key=jax.random.key(1))
    assert not np.allclose(other.params["w"][...], ref["w"])
    via_rngs = to_nnx((init, apply), rngs=nnx.Rngs(params=3))
    np.testing.assert_array_equal(
        via_rngs.params["w"][...],
        to_nnx((init, apply), rngs=nnx.Rngs(params=3)).params["w"][...],
    )
    assert isinstance(m.unwrap(), dict)


class _WithTable(eqx.Module):
    weight: jax.Array
    index: jax.Array  # integer array: a buffer, not a parameter

    def __call__(self, x):
        return x[self.index] * self.weight


def test_integer_arrays_are_buffers(key):
    layer = _WithTable(jnp.ones(3), jnp.array([2, 0, 1]))
    m = to_nnx(layer)
    assert isinstance(m.buffers["index"], Buffer)
    assert len(jax.tree.leaves(nnx.state(m, nnx.Param))) == 1
    np.testing.assert_array_equal(m(jnp.arange(3.0)), layer(jnp.arange(3.0)))
    grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(jnp.arange(3.0)))))(m)  # one program
    np.testing.assert_array_equal(grads["params"]["weight"][...], jnp.array([2.0, 0.0, 1.0]))
    assert "index" not in grads.get("buffers", {})


def test_split_merge_jit(key):
    mlp = _mlp(key)
    m = to_nnx(mlp, batch_axis=0)
    graphdef, state = nnx.split(m)
    x, _ = _data(jax.random.key(1))
    out = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, x)
    np.testing.assert_allclose(out, jax.vmap(mlp)(x), rtol=1e-6, atol=1e-6)


def test_errors(key):
    with pytest.raises(TypeError, match="`layer`"):
        to_nnx(lambda x: x)
    with pytest.raises(TypeError, match="`key`"):
        to_nnx((lambda *, key: {"w": jnp.ones(2)}, lambda p, x: x))
    with pytest.raises(ValueError, match="`rngs`"):
        to_nnx(_mlp(key), key=key, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="batch_axis"):
        to_nnx(_mlp(key), batch_axis="0")
    with pytest.raises(TypeError, match="key"):  # ignored silently before
        to_nnx(_mlp(key), key=0)
    assert isinstance(to_nnx(_mlp(key)), NNXAdapter)


def test_missing_flax_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "flax", None)  # `import flax` now fails
    monkeypatch.delitem(sys.modules, "jaxkit.interop.flax")
    with pytest.raises(ImportError, match=r"pip install 'jaxkit\[flax\]'"):
        importlib.import_module("jaxkit.interop.flax")
