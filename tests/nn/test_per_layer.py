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
        outs[name] = (seq, cache)
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
    with jax.set_mesh(mesh):
        u = nn.unstack_layers(sharded)
        got = nn.apply(
            u, CFG, jax.device_put(tok, NamedSharding(mesh, PartitionSpec("data")))
        ).logits
    for k, s in specs["layers"].items():
        a = u["layers"][1][k]
        assert a.sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec(*s[1:])), a.ndim), k
    assert got.sharding.spec == PartitionSpec("data", None, "model")
    _same(got, nn.apply(P, CFG, tok).logits, "sharded")


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
