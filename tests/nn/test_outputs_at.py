"""``nn.apply(outputs_at=(rows, cols))``: the logits at a few slots equal the full forward's.

Oracle: ``apply(...).logits[rows, cols]`` (and, with a cache, the cache the full forward
writes), for a causal model with GQA, biases, a K/Q norm, YaRN RoPE and a sliding window on
the last block, a bidirectional one with one K/V head, and a one-block model; in f32 and
x64, gradients in x64.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn

CAUSAL = nn.TransformerConfig(
    vocab_size=17,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    mlp_dim=24,
    qkv_bias=True,
    qk_norm=True,
    rope_scaling=nn.RopeScaling("yarn", 2.0, original_max_position_embeddings=4),
    sliding_window=3,
    max_window_layers=1,  # the last block has the window
)
BIDIR = dataclasses.replace(
    CAUSAL, causal=False, n_kv_heads=1, sliding_window=None, rope_scaling=None, qk_norm=False
)
ONE = dataclasses.replace(BIDIR, n_layers=1)
B, T, CAP = 3, 6, 11
ROWS = np.array([0, 2, 1, 2, 0, 1, 2], np.int32)
COLS = np.array([5, 0, 3, 3, 0, 5, 2], np.int32)
JIT_ERROR = (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


@functools.cache
def _params(cfg, dtype=jnp.float32):
    p = nn.init_params(cfg, key=jax.random.key(0))
    rng = np.random.default_rng(1)
    p["layers"] = dict(p["layers"])
    for name in ("bq", "bk", "bv"):  # non-zero biases
        p["layers"][name] = jnp.asarray(0.5 * rng.normal(size=p["layers"][name].shape))
    return jax.tree.map(lambda a: a.astype(dtype), p)


def _tokens(cfg):
    return jnp.asarray(np.random.default_rng(2).integers(0, cfg.vocab_size, (B, T)), jnp.int32)


@pytest.mark.parametrize("cfg", [CAUSAL, BIDIR, ONE], ids=["causal", "bidir", "one_block"])
def test_outputs_at_equals_the_full_logits_at_the_slots(cfg):
    p, toks = _params(cfg), _tokens(cfg)
    pos = jnp.asarray(np.array([[0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [2, 2, 3, 3, 4, 4]]))
    mask = jnp.asarray((np.random.default_rng(3).random((B, T, T)) < 0.7) | np.eye(T, dtype=bool))
    collect = tuple(range(cfg.n_layers))
    full = nn.apply(p, cfg, toks, pos, attn_mask=mask, collect=collect)
    got = nn.apply(p, cfg, toks, pos, attn_mask=mask, collect=collect, outputs_at=(ROWS, COLS))
    assert got.logits.shape == (len(ROWS), cfg.vocab_size)
    np.testing.assert_allclose(got.logits, full.logits[ROWS, COLS], rtol=2e-5, atol=2e-5)
    for layer in collect[:-1]:  # blocks before the last are the full forward's
        np.testing.assert_allclose(got.hidden[layer], full.hidden[layer], rtol=1e-6, atol=1e-6)
    last = full.hidden[cfg.n_layers - 1][ROWS, COLS]  # the last block's output at the slots
    np.testing.assert_allclose(got.hidden[cfg.n_layers - 1], last, rtol=2e-5, atol=2e-5)
    # inputs_embeds and the default positions / mask
    h = nn.embed(p, cfg, toks)
    full = nn.apply(p, cfg, inputs_embeds=h).logits
    got = nn.apply(p, cfg, inputs_embeds=h, outputs_at=(ROWS, COLS)).logits
    np.testing.assert_allclose(got, full[ROWS, COLS], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("cfg", [CAUSAL, BIDIR], ids=["causal", "bidir"])
def test_outputs_at_with_a_cache_writes_every_row(cfg):
    """Prefill into a ragged cache: every position's K/V is written, logits at the slots."""
    p, toks = _params(cfg), _tokens(cfg)
    rng = np.random.default_rng(4)
    cache = nn.init_cache(cfg, max_len=CAP, batch=B)
    cache = cache._replace(
        k=jnp.asarray(rng.normal(size=cache.k.shape), jnp.float32),
        v=jnp.asarray(rng.normal(size=cache.v.shape), jnp.float32),
        length=jnp.array([0, 3, 5], jnp.int32),
    )
    full = nn.apply(p, cfg, toks, cache=cache)
    got = nn.apply(p, cfg, toks, cache=cache, outputs_at=(ROWS, COLS))
    np.testing.assert_allclose(got.logits, full.logits[ROWS, COLS], rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(got.cache.k, full.cache.k)
    np.testing.assert_array_equal(got.cache.v, full.cache.v)
    np.testing.assert_array_equal(got.cache.length, cache.length)


def _ragged_cache(cfg, seed=4):
    rng = np.random.default_rng(seed)
    cache = nn.init_cache(cfg, max_len=CAP, batch=B)
    return cache._replace(
        k=jnp.asarray(rng.normal(size=cache.k.shape), jnp.float32),
        v=jnp.asarray(rng.normal(size=cache.v.shape), jnp.float32),
        length=jnp.array([0, 3, 5], jnp.int32),
    )


ADD_SHAPES = ("d", "B d", "B T d")  # an additive edit's three shapes
# A slow two-block case tries one shape (each is a compile of its own; three a case made
# these cases the bulk of nn's slow tests), chosen so that every (model, shape), (site, shape) and
# (cached, shape) pair is still met; the default case and one_block try all three.
ONE_SHAPE = {
    ("causal", "first", False): "d",
    ("causal", "first", True): "B d",
    ("causal", "last", False): "B T d",
    ("bidir", "first", False): "B T d",
    ("bidir", "first", True): "d",
    ("bidir", "last", False): "B d",
    ("bidir", "last", True): "B T d",
}


def _iv_cases():
    names = {"causal": CAUSAL, "bidir": BIDIR, "one_block": ONE}
    default = ("causal", "last", True)
    for name, cfg in names.items():
        for site in ("first", "last") if cfg.n_layers > 1 else ("last",):
            for cached in (False, True):
                one = ONE_SHAPE.get((name, site, cached))
                shapes = ADD_SHAPES if one is None else (one,)
                marks = () if (name, site, cached) == default else (pytest.mark.slow,)
                case = f"{name}-{site}-{'cached' if cached else 'uncached'}"
                yield pytest.param(cfg, site, cached, shapes, id=case, marks=marks)


@pytest.mark.parametrize(("cfg", "site", "cached", "shapes"), list(_iv_cases()))
def test_outputs_at_with_interventions_equals_the_full_forward(cfg, site, cached, shapes):
    """Additive edits (of the ``shapes`` given) and inserted latents, at block 0 or the last.

    The last block's edit is applied at the slots alone; an edit at a slot outside its
    row's inserted span, and the span hidden from other queries up to its block, are read
    from the whole forward's logits (oracle) at the same slots.
    """
    p, toks = _params(cfg), _tokens(cfg)
    rng = np.random.default_rng(7)
    d, last = cfg.d_model, cfg.n_layers - 1
    layer = 0 if site == "first" else last
    cache = _ragged_cache(cfg) if cached else None
    base = np.zeros(B, np.int32) if cache is None else np.asarray(cache.length)
    lat = jnp.asarray(rng.normal(size=(B, 2, d)), jnp.float32)
    span = jnp.asarray(base + np.array([1, 3, 0]), jnp.int32)  # ROWS/COLS meet every span
    plain = nn.apply(p, cfg, toks, cache=cache).logits[ROWS, COLS]
    sizes = {"d": (d,), "B d": (B, d), "B T d": (B, T, d)}
    for add in [jnp.asarray(rng.normal(size=sizes[s]), jnp.float32) for s in shapes]:
        iv = nn.Interventions(
            {layer: add, last: 0.5 * add}, insert_layer=layer, insert_at=span, latents=lat
        )
        kw = dict(cache=cache, interventions=iv, collect=(last,))
        full = nn.apply(p, cfg, toks, **kw)
        got = nn.apply(p, cfg, toks, outputs_at=(ROWS, COLS), **kw)
        np.testing.assert_allclose(got.logits, full.logits[ROWS, COLS], rtol=2e-5, atol=2e-5)
        want = full.hidden[last][ROWS, COLS]  # after the last block's edit
        np.testing.assert_allclose(got.hidden[last], want, rtol=2e-5, atol=2e-5)
        assert np.max(np.abs(got.logits - plain)) > 1e-2  # the edits reach the slots
        if cached:
            np.testing.assert_array_equal(got.cache.k, full.cache.k)
            np.testing.assert_array_equal(got.cache.v, full.cache.v)
    if cfg.n_layers > 1:  # a read site before the last block
        iv = nn.Interventions({last: add}, read_mlp=(0,))
        full = nn.apply(p, cfg, toks, cache=cache, interventions=iv)
        got = nn.apply(p, cfg, toks, cache=cache, interventions=iv, outputs_at=(ROWS, COLS))
        np.testing.assert_allclose(got.logits, full.logits[ROWS, COLS], rtol=2e-5, atol=2e-5)
        for a, b in zip(got.reads[0], full.reads[0], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # the default run keeps outputs_at's check_grads (conformance)
def test_outputs_at_x64_values_and_grads():
    cfg = CAUSAL
    with jax.enable_x64(True):
        p = _params(cfg, jnp.float64)
        h = jnp.asarray(np.random.default_rng(5).normal(size=(B, T, cfg.d_model)))
        w = jnp.asarray(np.random.default_rng(6).normal(size=(len(ROWS), cfg.vocab_size)))

        @jax.jit
        def both(p, h):
            def full(p, h):
                return jnp.sum(w * nn.apply(p, cfg, inputs_embeds=h).logits[ROWS, COLS])

            def at(p, h):
                return jnp.sum(
                    w * nn.apply(p, cfg, inputs_embeds=h, outputs_at=(ROWS, COLS)).logits
                )

            return jax.value_and_grad(full, (0, 1))(p, h), jax.value_and_grad(at, (0, 1))(p, h)

        (v_full, g_full), (v_at, g_at) = both(p, h)
        np.testing.assert_allclose(v_at, v_full, rtol=1e-12)
        for a, b in zip(jax.tree.leaves(g_at), jax.tree.leaves(g_full), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        assert np.any(np.asarray(g_at[1]) != 0)


def test_outputs_at_bad_input():
    cfg = BIDIR
    p, toks = _params(cfg), _tokens(cfg)
    rows, cols = ROWS, COLS
    with pytest.raises(TypeError, match="outputs_at"):
        nn.apply(p, cfg, toks, outputs_at=rows)
    with pytest.raises(TypeError, match="outputs_at"):
        nn.apply(p, cfg, toks, outputs_at=(rows[:, None], cols))
    with pytest.raises(TypeError, match="outputs_at"):
        nn.apply(p, cfg, toks, outputs_at=(rows, cols.astype(np.float32)))
    with pytest.raises(TypeError, match="outputs_at"):
        nn.apply(p, cfg, toks, outputs_at=(rows, cols[:3]))
    with pytest.raises(ValueError, match="outputs_at. rows"):
        nn.apply(p, cfg, toks, outputs_at=(np.where(rows == 1, B, rows), cols))
    with pytest.raises(ValueError, match="outputs_at. cols"):
        nn.apply(p, cfg, toks, outputs_at=(rows, np.where(cols == 0, -1, cols)))
    iv = nn.Interventions({0: jnp.ones((cfg.d_model,))}, read_mlp=(1,))
    with pytest.raises(ValueError, match="read_mlp"):
        nn.apply(p, cfg, toks, interventions=iv, outputs_at=(rows, cols))

    @jax.jit
    def traced(r, c):
        return nn.apply(p, cfg, toks, outputs_at=(r, c)).logits

    with pytest.raises(JIT_ERROR, match="outputs_at. cols"):
        jax.block_until_ready(traced(rows, np.where(cols == 2, T, cols)))
