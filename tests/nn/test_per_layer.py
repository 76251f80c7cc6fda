"""Per-layer parameter storage (``nn.unstack_layers``): every forward equals the stacked one.

Oracle: the same function on the stacked parameters of :func:`nn.init_params` (the layer
scan, already checked against the uncached forward and the HF models). The per-layer path
inlines each block on its own weights, so the values are equal bit for bit on CPU; the
comparisons allow float rounding only where XLA may fuse differently (``allclose`` at
1e-6 relative). Covered: ``apply`` with a read site, a collected block and interventions,
``outputs_at``; ``run_layers`` split in two; ``prefill`` then ``decode_step`` eagerly and
jitted; ``write_kv``; ``ar_generate``; gradients; the HF export; sharding on 8 devices.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, io, nn

CFG = nn.TransformerConfig(
    vocab_size=18,
    d_model=16,
    n_layers=3,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    mlp_dim=24,
    qkv_bias=True,
    qk_norm=True,
    sliding_window=3,
    max_window_layers=2,
)
P = nn.init_params(CFG, key=jax.random.key(0))
U = nn.unstack_layers(P)
B, T = 2, 5
TOK = jax.random.randint(jax.random.key(1), (B, T), 0, CFG.vocab_size)


def _same(a, b, what):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6, err_msg=what)


def test_unstack_and_stack_round_trip():
    assert isinstance(U["layers"], tuple) and len(U["layers"]) == CFG.n_layers
    assert U["layers"][1]["wq"].shape == P["layers"]["wq"].shape[1:]
    np.testing.assert_array_equal(U["layers"][2]["w_down"], P["layers"]["w_down"][2])
    back = nn.stack_layers(U)
    assert jax.tree.structure(back) == jax.tree.structure(P)
    for x, y in zip(jax.tree.leaves(back), jax.tree.leaves(P), strict=True):
        np.testing.assert_array_equal(x, y)
    assert nn.stack_layers(P) is P  # already stacked
    assert nn.unstack_layers(U)["layers"] == U["layers"]
    jitted = jax.jit(nn.unstack_layers)(P)
    np.testing.assert_array_equal(jitted["layers"][0]["wk"], P["layers"]["wk"][0])


@pytest.mark.slow  # the default run keeps the split run_layers, prefill and decode forms
def test_apply_with_reads_collect_interventions_and_outputs_at():
    iv = nn.Interventions(
        {0: jnp.ones((CFG.d_model,)), 2: 0.5 * jnp.ones((B, CFG.d_model))},
        insert_layer=1,
        insert_at=jnp.array([1, 2]),
        latents=jnp.ones((B, 1, CFG.d_model)),
        read_mlp=(1,),
    )
    for kw in ({}, {"collect": (0, 1)}, {"interventions": iv, "collect": (1,)}):
        _same(nn.apply(U, CFG, TOK, **kw), nn.apply(P, CFG, TOK, **kw), str(kw))
    at = (jnp.array([0, 1, 1]), jnp.array([4, 0, 3]))
    _same(nn.apply(U, CFG, TOK, outputs_at=at), nn.apply(P, CFG, TOK, outputs_at=at), "at")


def test_run_layers_split_and_write_kv():
    h = nn.embed(P, CFG, TOK)
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    cache = nn.init_cache(CFG, batch=B, max_len=8)
    for params in (P, U):
        a = nn.run_layers(params, CFG, h, pos, stop=1, cache=cache)
        b = nn.run_layers(params, CFG, a.h, pos, start=1, cache=a.cache, collect=(2,))
        if params is P:
            ref = b
        else:
            _same(b, ref, "run_layers")
    _same(
        nn.write_kv(U, CFG, h, pos, cache=cache, layer=1),
        nn.write_kv(P, CFG, h, pos, cache=cache, layer=1),
        "write_kv",
    )


def test_prefill_and_decode_steps_eager_and_jitted():
    lengths = jnp.array([T, 3])
    outs = {}
    for name, params in (("stacked", P), ("per_layer", U)):
        o = nn.prefill(params, CFG, TOK, lengths, max_len=9)
        cache, seq = o.cache, [o.logits]
        step = jax.jit(lambda p, t, c: nn.decode_step(p, CFG, t, c))
        for i in range(3):  # one eager step, two jitted
            tok = jnp.argmax(seq[-1], -1)
            o = nn.decode_step(params, CFG, tok, cache) if i == 0 else step(params, tok, cache)
            cache, seq = o.cache, [*seq, o.logits]
        outs[name] = (seq, nn.stack_layers(cache))  # per-layer params: per-layer cache
    _same(outs["per_layer"], outs["stacked"], "prefill + decode")


@pytest.mark.slow
def test_ar_generate_and_grads():
    prompts, lengths = TOK, jnp.array([T, 2])
    kw = {"key": jax.random.key(3), "max_new_tokens": 4, "temperature": 0.8}
    a = decoding.ar_generate(U, CFG, prompts, lengths, **kw)
    b = decoding.ar_generate(P, CFG, prompts, lengths, **kw)
    np.testing.assert_array_equal(a.tokens, b.tokens)

    def loss(params):
        return jnp.mean(nn.apply(params, CFG, TOK).logits ** 2)

    gu, gp = jax.grad(loss)(U), jax.grad(loss)(P)
    assert isinstance(gu["layers"], tuple)
    _same(nn.stack_layers(gu), gp, "grads")


def test_hf_export_takes_either_layout():
    a, b = io.to_hf_tensors(U, CFG), io.to_hf_tensors(P, CFG)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.slow
def test_sharding_is_kept():
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((4, 2), ("data", "model"))  # jax's default: Explicit axes
    specs = nn.param_specs(CFG)
    sharded = jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), P, specs)
    tok = jnp.concatenate([TOK, TOK[::-1]])
    lens = jnp.array([T, 3, 4, T])
    data = NamedSharding(mesh, PartitionSpec("data"))
    with jax.set_mesh(mesh):
        u = nn.unstack_layers(sharded)
        got = nn.apply(u, CFG, jax.device_put(tok, data)).logits
        first = nn.prefill(u, CFG, jax.device_put(tok, data), jax.device_put(lens, data), max_len=8)
        step = nn.decode_step(u, CFG, jnp.argmax(first.logits, -1).astype(jnp.int32), first.cache)
        back = nn.stack_layers(u)
    is_spec = lambda x: isinstance(x, PartitionSpec)  # noqa: E731
    want = nn.param_specs(CFG, per_layer=True)
    for a, s in zip(jax.tree.leaves(u), jax.tree.leaves(want, is_leaf=is_spec), strict=True):
        assert a.sharding.is_equivalent_to(NamedSharding(mesh, s), a.ndim), s
    for a, s in zip(jax.tree.leaves(back), jax.tree.leaves(specs, is_leaf=is_spec), strict=True):
        assert a.sharding.is_equivalent_to(NamedSharding(mesh, s), a.ndim), s
    cs = nn.cache_specs(CFG, per_layer=True)
    for a, s in zip(jax.tree.leaves(step.cache), jax.tree.leaves(cs, is_leaf=is_spec), strict=True):
        assert a.sharding.is_equivalent_to(NamedSharding(mesh, s), a.ndim), s
    assert got.sharding.spec == PartitionSpec("data", None, "model")
    _same(got, nn.apply(P, CFG, tok).logits, "sharded")
    ref = nn.prefill(P, CFG, tok, lens, max_len=8)
    ref = nn.decode_step(P, CFG, jnp.argmax(ref.logits, -1).astype(jnp.int32), ref.cache)
    _same((step.logits, nn.stack_layers(step.cache)), ref, "sharded decode")


def test_bad_layouts_raise_type_errors():
    with pytest.raises(TypeError, match="per-layer dicts, got 2"):
        nn.apply({**U, "layers": U["layers"][:2]}, CFG, TOK)
    with pytest.raises(TypeError, match=r"params\['layers'\]\[1\]"):
        nn.apply({**U, "layers": (U["layers"][0], P["layers"], U["layers"][2])}, CFG, TOK)
    with pytest.raises(TypeError, match="stacked weights or a tuple"):
        nn.apply({**P, "layers": [1, 2, 3][0]}, CFG, TOK)
    with pytest.raises(TypeError, match="same weights"):
        bad = dict(U["layers"][1])
        del bad["bq"]
        nn.stack_layers({**U, "layers": (U["layers"][0], bad, U["layers"][2])})
    with pytest.raises(TypeError, match="'layers' entry"):
        nn.unstack_layers({"embed": P["embed"]})
    small = dataclasses.replace(CFG, n_layers=2)
    with pytest.raises(TypeError, match="must hold 2"):
        nn.prefill(U, small, TOK, jnp.array([T, 3]), max_len=9)


@pytest.mark.slow  # the default run keeps per-layer caches through prefill + decode_step
def test_per_layer_cache_everywhere():
    """A per-layer cache gives the stacked cache's values (unstacked) in every cached call."""
    lengths = jnp.array([T, 3])
    ref = nn.prefill(P, CFG, TOK, lengths, max_len=9)
    got = nn.prefill(U, CFG, TOK, lengths, max_len=9)  # per-layer params: per-layer cache
    assert isinstance(got.cache.k, tuple) and got.cache.k[0].shape == ref.cache.k.shape[1:]
    _same(got, (ref.logits, nn.unstack_layers(ref.cache)), "prefill")
    _same(nn.stack_layers(got.cache), ref.cache, "stack_layers")
    pc = nn.unstack_layers(ref.cache)
    tok = jnp.argmax(ref.logits, -1)
    want = nn.decode_step(P, CFG, tok, ref.cache)
    for params in (P, U):  # either parameter layout with the per-layer cache
        o = jax.jit(lambda p, t, c: nn.decode_step(p, CFG, t, c))(params, tok, pc)
        _same((o.logits, nn.stack_layers(o.cache)), want, "decode_step")
    h = nn.embed(P, CFG, TOK[:, :2])
    pos = ref.cache.length[:, None] + jnp.arange(2)[None]
    a = nn.run_layers(U, CFG, h, pos, cache=pc, stop=2, collect=(1,))
    b = nn.run_layers(P, CFG, h, pos, cache=ref.cache, stop=2, collect=(1,))
    _same((a.h, a.hidden, nn.stack_layers(a.cache)), (b.h, b.hidden, b.cache), "run_layers")
    at = (jnp.array([0, 1]), jnp.array([1, 0]))
    a = nn.apply(P, CFG, TOK[:, :2], cache=pc, outputs_at=at)
    b = nn.apply(P, CFG, TOK[:, :2], cache=ref.cache, outputs_at=at)
    _same((a.logits, nn.stack_layers(a.cache)), (b.logits, b.cache), "outputs_at")
    a = nn.write_kv(P, CFG, h, pos, cache=pc, layer=2)
    b = nn.write_kv(P, CFG, h, pos, cache=ref.cache, layer=2)
    _same(nn.stack_layers(a), b, "write_kv")
    np.testing.assert_array_equal(nn.commit(pc, 2).length, nn.commit(ref.cache, 2).length)
    empty = nn.init_cache(CFG, batch=B, max_len=9, per_layer=True)
    _same(empty, nn.unstack_layers(nn.init_cache(CFG, batch=B, max_len=9)), "init_cache")
    with pytest.raises(TypeError, match="3 K and V buffers"):
        nn.decode_step(P, CFG, tok, pc._replace(k=pc.k[:2]))
    with pytest.raises(TypeError, match=r"cache.v\[1\]"):
        nn.decode_step(P, CFG, tok, pc._replace(v=(pc.v[0], pc.v[1][:, :4], pc.v[2])))
    with pytest.raises(TypeError, match="per_layer"):
        nn.init_cache(CFG, batch=B, max_len=9, per_layer=1)
