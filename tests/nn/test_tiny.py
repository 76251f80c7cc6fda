import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxkit import io, nn


@pytest.mark.parametrize("task", ["counting", "noisy_counting", "copy"])
def test_tasks_follow_their_rule(task, key):
    d = nn.tiny_task(task, key=key, batch=16, length=12)
    assert d.tokens.shape == (16, 12) and d.tokens.dtype == jnp.int32
    assert int(d.tokens.max()) < nn.tiny_task_vocab(task)
    acc = nn.tiny_task_accuracy(task, d.tokens, start=d.prompt_len)
    if task == "noisy_counting":
        level0 = np.asarray(d.tokens[:, 0] == 33)
        assert level0.any() and np.all(np.asarray(acc)[level0] == 1.0)
    else:
        np.testing.assert_array_equal(acc, 1.0)
    # the accuracy oracle can fail: corrupt one scored token per row
    bad = d.tokens.at[:, -2].set((d.tokens[:, -2] + 1) % 16)
    assert np.all(np.asarray(nn.tiny_task_accuracy(task, bad, start=d.prompt_len)) < 1.0)


def test_fixture_loads_and_solves_its_task():
    fx = io.load_fixture("tiny_lm")
    assert fx.info["task"] == "counting"
    n = sum(x.size for x in jax.tree.leaves(fx.params))
    assert 5_000 < n < 100_000
    d = nn.tiny_task("counting", key=jax.random.key(99), batch=32, length=16)
    logits = jax.jit(lambda t: nn.apply(fx.params, fx.cfg, t).logits)(d.tokens[:, :-1])
    pred = np.asarray(jnp.argmax(logits, -1))[:, 1:]
    assert np.mean(pred == np.asarray(d.tokens[:, 2:])) > 0.99
    with pytest.raises(ValueError, match="fixture"):
        io.load_fixture("does_not_exist")


def test_param_specs_tensor_parallel_matches_replicated(key):
    cfg = nn.TransformerConfig(
        vocab_size=16,
        d_model=16,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=4,
        mlp_dim=16,
        qkv_bias=True,
    )
    p = nn.init_params(cfg, key=key)
    specs = nn.param_specs(cfg)
    assert jax.tree.structure(specs, is_leaf=lambda s: isinstance(s, P)) == jax.tree.structure(p)
    toks = jax.random.randint(key, (4, 6), 0, 16)
    ref = nn.apply(p, cfg, toks).logits
    mesh = jax.make_mesh(
        (2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:4]
    )
    ps = jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), p, specs)
    ts = jax.device_put(toks, NamedSharding(mesh, P("data", None)))
    with jax.set_mesh(mesh):
        out = jax.jit(lambda p, t: nn.apply(p, cfg, t).logits)(ps, ts)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    assert nn.cache_specs(cfg).k == P(None, "data", None, "model", None)
