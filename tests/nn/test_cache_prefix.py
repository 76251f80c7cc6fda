"""Cached attention reads only the cache prefix its mask can see (CPU, from 256 slots).

Oracles: a NumPy float64 masked softmax attention (a fully masked query row averages every
slot, as ``nn.attention`` defines it) for each prefix width the choice can take, eagerly and
under ``jit`` with a traced mask; gradients equal those of the whole-buffer attention; whole
models: a forward over a 256-slot cache equals the same forward over a 16-slot cache holding
the same rows, and greedy ``ar_generate`` gives the same tokens with ``max_len`` 20 and 256;
``vmap`` equals a loop; a batch-sharded step keeps its sharding and values (Auto, Explicit);
lowered for GPU / TPU, only the whole buffer's products.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, nn
from jaxkit.nn._attention import attend, attend_cached, prefix_widths


def _np_attention(q, k, v, mask):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b, t, h, dh = q.shape
    g = h // k.shape[2]
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)  # head i reads kv head i // g
    s = np.einsum("bthd,bshd->bhts", q, kk) / np.sqrt(dh)
    m = np.asarray(mask)[:, None]
    s = np.where(m, s, -np.inf)
    empty = ~m.any(-1, keepdims=True)
    s = np.where(empty, 0.0, s)  # a row that sees nothing: uniform over all slots
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", p, vv)


def test_prefix_widths():
    for s in (256, 272, 300, 1024, 4096):
        w = prefix_widths(s)
        assert w[-1] == s and list(w) == sorted(set(w)) and 1 <= len(w) <= 4, (s, w)
        assert all(x % 8 == 0 and x >= 16 for x in w[:-1]), (s, w)
    assert prefix_widths(256) == (32, 64, 128, 256)
    assert prefix_widths(272) == (40, 72, 136, 272)


@pytest.mark.parametrize(("t", "hkv"), [(1, 2), (4, 4)], ids=["one_row", "grouped"])
def test_attend_cached_equals_numpy_at_every_width(t, hkv):
    b, h, dh, s = 3, 4, 8, 256  # widths 32, 64, 128, 256
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(b, t, h, dh)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(b, s, hkv, dh)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, s, hkv, dh)), jnp.float32)
    j = np.arange(s)
    jitted = jax.jit(attend_cached)
    for last in (5, 32, 33, 64, 65, 128, 129, 255, 256):  # every width, and its edges
        lim = np.array([last, max(1, last - 3), max(1, last // 2)])[:, None, None]
        mask = (j[None, None, :] < lim - np.arange(t)[None, :, None]) | (j == 0)
        mask[1, :, 2] = False  # a hole inside the prefix
        if last == 65:
            mask[2, -1, :] = False  # a row that sees no slot: the whole buffer's average
        want = _np_attention(q, k, v, mask)
        fns = (attend_cached, jitted) if last == 65 else (jitted,)  # one eager call: slow
        for fn in fns:
            got = fn(q, k, v, jnp.asarray(mask))
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=str(last))


@pytest.mark.slow
def test_attend_cached_gradients_equal_the_whole_buffer():
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.normal(size=(2, 3, 4, 8)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(2, 256, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(2, 256, 2, 8)), jnp.float32)
    mask = jnp.arange(256)[None, None, :] < jnp.array([20, 30])[:, None, None]
    mask = jnp.broadcast_to(mask, (2, 3, 256))

    def loss(f):
        return lambda q, k, v: jnp.sum(jnp.sin(f(q, k, v, mask)))

    got = jax.jit(jax.grad(loss(attend_cached), argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(loss(attend), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(got[1][:, 30:]).max()) == 0.0  # hidden slots get no gradient


CFG = nn.TransformerConfig(
    vocab_size=29, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=8, mlp_dim=48
)


@pytest.mark.slow
def test_long_cache_forward_equals_short_cache_forward():
    params = nn.init_params(CFG, key=jax.random.key(0))
    toks = jax.random.randint(jax.random.key(1), (2, 6), 0, 29)
    lengths = jnp.array([6, 4])
    short = nn.prefill(params, CFG, toks, lengths, max_len=16)
    long = nn.prefill(params, CFG, toks, lengths, max_len=256)
    np.testing.assert_allclose(long.logits, short.logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(long.cache.k[:, :, :16], short.cache.k)
    new = jax.random.randint(jax.random.key(2), (2, 3), 0, 29)
    a = jax.jit(lambda c: nn.apply(params, CFG, new, cache=c).logits)(short.cache)
    b = jax.jit(lambda c: nn.apply(params, CFG, new, cache=c).logits)(long.cache)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_ar_generate_same_tokens_with_a_long_cache():
    params = nn.init_params(CFG, key=jax.random.key(3))
    prompt = jax.random.randint(jax.random.key(4), (2, 8), 0, 29)
    plen = jnp.array([8, 5])
    kw = dict(key=jax.random.key(5), max_new_tokens=12)
    a = decoding.ar_generate(params, CFG, prompt, plen, max_len=20, **kw)
    b = decoding.ar_generate(params, CFG, prompt, plen, max_len=256, **kw)
    np.testing.assert_array_equal(b.tokens, a.tokens)
    np.testing.assert_array_equal(b.lengths, a.lengths)


def test_prefix_choice_only_on_cpu():
    # lowered for CPU: the four widths' products (2 each); for GPU / TPU: the whole
    # buffer's two products only (the platform's constant index selects them)
    q = jnp.zeros((1, 2, 4, 8))
    k = jnp.zeros((1, 256, 2, 8))
    mask = jnp.ones((1, 2, 256), bool)
    traced = jax.jit(attend_cached).trace(q, k, k, mask)
    for plat, n in (("cpu", 8), ("cuda", 2), ("tpu", 2)):
        txt = traced.lower(lowering_platforms=(plat,)).as_text()
        assert txt.count("stablehlo.dot_general") == n, plat


def test_vmap_equals_a_loop():
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.normal(size=(3, 1, 2, 4, 8)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(3, 1, 256, 4, 8)), jnp.float32)
    lim = jnp.array([10, 100, 256])  # a different width per mapped element
    mask = jnp.arange(256)[None, None, None, :] < lim[:, None, None, None]
    mask = jnp.broadcast_to(mask, (3, 1, 2, 256))
    got = jax.jit(jax.vmap(attend_cached))(q, k, k, mask)
    for i in range(3):
        want = _np_attention(q[i], k[i], k[i], mask[i])
        np.testing.assert_allclose(got[i], want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("axis_type", ["auto", "explicit"])
def test_batch_sharding_is_kept(axis_type):
    # an Auto mesh takes the prefix choice with sharded operands; an Explicit one keeps the
    # whole buffer (the documented rule); values and the batch sharding as unsharded
    kind = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}
    mesh8 = jax.make_mesh((8,), ("data",), axis_types=(kind[axis_type],))
    params = nn.init_params(CFG, key=jax.random.key(6))
    toks = jax.random.randint(jax.random.key(7), (8, 5), 0, 29)
    out = nn.prefill(params, CFG, toks, jnp.full((8,), 5), max_len=256)
    nxt = jnp.zeros((8,), jnp.int32)
    want = nn.decode_step(params, CFG, nxt, out.cache)
    data = jax.NamedSharding(mesh8, jax.P("data"))
    cache = jax.tree.map(lambda a: a, out.cache)
    cache = cache._replace(
        k=jax.device_put(cache.k, jax.NamedSharding(mesh8, jax.P(None, "data"))),
        v=jax.device_put(cache.v, jax.NamedSharding(mesh8, jax.P(None, "data"))),
        length=jax.device_put(cache.length, data),
    )
    with jax.set_mesh(mesh8):
        got = jax.jit(lambda t, c: nn.decode_step(params, CFG, t, c))(
            jax.device_put(nxt, data), cache
        )
    assert got.logits.sharding.spec[0] in ("data", ("data",)), got.logits.sharding.spec
    np.testing.assert_allclose(got.logits, want.logits, rtol=1e-5, atol=1e-5)
