import equinox as eqx
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit.interop.haiku import HaikuAdapter, to_haiku


def _data(key, n=32):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (n, 4))
    y = jnp.sin(x @ jax.random.normal(kw, (4, 1)))
    return x, y


def _mlp(key):
    return eqx.nn.MLP(4, 8, 16, 1, key=key)


def _net(mlp):
    """A small real haiku model: adapter-wrapped eqx MLP, then a native hk.Linear."""

    def forward(x):
        h = jax.nn.tanh(to_haiku(mlp, batch_axis=0, name="body")(x))
        with jax.numpy_rank_promotion("allow"):  # hk.Linear broadcasts its bias
            return hk.Linear(1, name="head")(h)

    return hk.without_apply_rng(hk.transform(forward))


def test_outputs_equal_wrapped_layer(key):
    mlp = _mlp(key)
    x, _ = _data(jax.random.key(1))
    f = hk.without_apply_rng(hk.transform(lambda x: to_haiku(mlp, batch_axis=0)(x)))
    params = f.init(None, x)  # no rng needed: values come from the module
    np.testing.assert_array_equal(f.apply(params, x), jax.vmap(mlp)(x))
    np.testing.assert_array_equal(params["haiku_adapter"]["layers.0.weight"], mlp.layers[0].weight)
    assert len(jax.tree.leaves(params)) == len(jax.tree.leaves(eqx.filter(mlp, eqx.is_array)))
    g = hk.without_apply_rng(hk.transform(lambda x: to_haiku(mlp)(x)))
    np.testing.assert_array_equal(g.apply(g.init(None, x[0]), x[0]), mlp(x[0]))


def test_gradients_flow_to_wrapped_params(key):
    mlp = _mlp(key)
    x, y = _data(jax.random.key(1))
    net = _net(mlp)
    params = net.init(jax.random.key(2), x)

    def loss(params):
        return jnp.mean((net.apply(params, x) - y) ** 2)

    grads = jax.jit(jax.grad(loss))(params)  # jitted: eager, every op compiled alone
    w, b = params["head"]["w"], params["head"]["b"]

    def ref_loss(mlp):
        return jnp.mean((jnp.tanh(jax.vmap(mlp)(x)) @ w + b[None] - y) ** 2)

    ref = eqx.filter_jit(eqx.filter_grad(ref_loss))(mlp)
    g0 = grads["body"]["layers.0.weight"]
    assert float(np.abs(np.asarray(g0)).max()) > 0
    np.testing.assert_allclose(g0, ref.layers[0].weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        grads["body"]["layers.1.bias"], ref.layers[1].bias, rtol=1e-5, atol=1e-6
    )


def test_trains_with_optax_in_haiku_model(key):
    mlp = _mlp(key)
    x, y = _data(jax.random.key(1))
    net = _net(mlp)
    params = net.init(jax.random.key(2), x)
    opt = optax.adam(1e-2)

    @jax.jit
    def step(params, state):
        val, g = jax.value_and_grad(lambda p: jnp.mean((net.apply(p, x) - y) ** 2))(params)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, val

    # optax.adam mixes a Python float with an int32 count (rejected by strict
    # promotion): the user's training loop runs under standard rules.
    with jax.numpy_dtype_promotion("standard"):
        state = opt.init(params)
        losses = []
        for _ in range(40):
            params, state, val = step(params, state)
            losses.append(float(val))
    assert losses[-1] < 0.5 * losses[0], losses
    assert not np.allclose(params["body"]["layers.0.weight"], mlp.layers[0].weight)


def test_pair_uses_only_explicit_key(key):
    calls = []

    def init(*, key):
        if not isinstance(key, jax.core.Tracer):  # a real run, not eval_shape's trace
            calls.append(1)
        return {"w": jax.random.normal(key, (3, 2)), "b": jnp.zeros(2)}

    def apply(p, x):
        return x @ p["w"] + p["b"][None]

    x = jnp.ones((5, 3))
    f = hk.transform(lambda x: to_haiku((init, apply), key=key)(x))
    p1 = f.init(jax.random.key(7), x)
    p2 = f.init(jax.random.key(8), x)  # haiku's rng does not affect the values
    ref = init(key=key)
    np.testing.assert_array_equal(p1["haiku_adapter"]["w"], ref["w"])
    np.testing.assert_array_equal(p2["haiku_adapter"]["w"], ref["w"])
    n = len(calls)
    np.testing.assert_array_equal(f.apply(p1, None, x), apply(ref, x))
    assert len(calls) == n  # apply does not re-run init


class _WithTable(eqx.Module):
    weight: jax.Array
    index: jax.Array

    def __call__(self, x):
        return x[self.index] * self.weight


def test_integer_arrays_are_state(key):
    layer = _WithTable(jnp.ones(3), jnp.array([2, 0, 1]))
    f = hk.without_apply_rng(hk.transform_with_state(lambda x: to_haiku(layer)(x)))
    params, state = f.init(None, jnp.arange(3.0))
    assert list(params["haiku_adapter"]) == ["weight"]
    np.testing.assert_array_equal(state["haiku_adapter"]["index"], layer.index)
    out, _ = f.apply(params, state, jnp.arange(3.0))
    np.testing.assert_array_equal(out, layer(jnp.arange(3.0)))


def test_errors(key):
    f = hk.transform(lambda x: to_haiku(lambda x: x)(x))
    with pytest.raises(TypeError, match="`layer`"):
        f.init(None, jnp.ones(2))
    g = hk.transform(lambda x: to_haiku((lambda *, key: {"w": jnp.ones(2)}, lambda p, x: x))(x))
    with pytest.raises(TypeError, match="`key`"):
        g.init(None, jnp.ones(2))
    h = hk.transform(lambda x: type(to_haiku(_mlp(key))) is HaikuAdapter)
    assert h.apply({}, None, None)


def test_missing_haiku_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "haiku", None)  # `import haiku` now fails
    monkeypatch.delitem(sys.modules, "jaxkit.interop.haiku")
    with pytest.raises(ImportError, match=r"pip install 'jaxkit\[haiku\]'"):
        importlib.import_module("jaxkit.interop.haiku")
