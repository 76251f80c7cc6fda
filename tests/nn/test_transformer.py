import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn

CFG = nn.TransformerConfig(
    vocab_size=23,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    mlp_dim=24,
    qkv_bias=True,
    qk_norm=True,
)


def _params(cfg=CFG, seed=0):
    p = nn.init_params(cfg, key=jax.random.key(seed))
    if cfg.qkv_bias:  # non-zero biases so that they are exercised
        ks = jax.random.split(jax.random.key(seed + 100), 3)
        for k, name in zip(ks, ("bq", "bk", "bv"), strict=True):
            p["layers"][name] = 0.3 * jax.random.normal(k, p["layers"][name].shape)
    return p


def _naive_attention(q, k, v, mask):
    q, k, v, mask = map(np.asarray, (q, k, v, mask))
    b, t, h, dh = q.shape
    g = h // k.shape[2]
    out = np.zeros_like(q, dtype=np.float64)
    for bi in range(b):
        for hi in range(h):
            for ti in range(t):
                s = np.array([q[bi, ti, hi] @ k[bi, j, hi // g] for j in range(k.shape[1])])
                s = s / np.sqrt(dh)
                s = np.where(mask[bi, ti], s, -np.inf)
                p = np.exp(s - s.max())
                p /= p.sum()
                out[bi, ti, hi] = p @ v[bi, :, hi // g]
    return out


def test_attention_matches_naive(key):
    ks = jax.random.split(key, 4)
    q = jax.random.normal(ks[0], (2, 3, 4, 8))
    k = jax.random.normal(ks[1], (2, 5, 2, 8))
    v = jax.random.normal(ks[2], (2, 5, 2, 8))
    mask = jax.random.bernoulli(ks[3], 0.6, (2, 3, 5)).at[:, :, 0].set(True)
    got = nn.attention(q, k, v, mask)
    np.testing.assert_allclose(got, _naive_attention(q, k, v, mask), atol=1e-5)


def test_fully_masked_row_is_finite(key):
    q = jax.random.normal(key, (1, 2, 2, 4))
    kv = jnp.ones((1, 3, 1, 4))
    out = nn.attention(q, kv, kv, jnp.zeros((1, 2, 3), bool))
    assert np.all(np.isfinite(out))


def test_cached_greedy_decode_equals_full_recompute():
    p = _params()
    b, p_len, n_new = 3, 7, 5
    prompts = jax.random.randint(jax.random.key(1), (b, p_len), 0, CFG.vocab_size)
    lengths = jnp.array([3, 7, 5], jnp.int32)
    max_len = p_len + n_new

    # cached path
    step = jax.jit(lambda tok, c: nn.decode_step(p, CFG, tok, c))
    logits, cache = jax.jit(lambda t, n: nn.prefill(p, CFG, t, n, max_len=max_len))(
        prompts, lengths
    )
    cached_logits, cached_toks = [], []
    for _ in range(n_new):
        tok = jnp.argmax(logits, -1).astype(jnp.int32)
        cached_logits.append(logits)
        cached_toks.append(tok)
        logits, cache = step(tok, cache)
    np.testing.assert_array_equal(cache.length, lengths + n_new)

    # recompute without cache over a fixed buffer (causal => padding after is harmless)
    buf = jnp.zeros((b, max_len), jnp.int32).at[:, :p_len].set(prompts)
    full = jax.jit(lambda t: nn.apply(p, CFG, t).logits)
    rows = jnp.arange(b)
    for s in range(n_new):
        lg = full(buf)[rows, lengths + s - 1]
        tok = jnp.argmax(lg, -1).astype(jnp.int32)
        np.testing.assert_array_equal(tok, cached_toks[s])
        np.testing.assert_allclose(lg, cached_logits[s], atol=1e-5, rtol=1e-5)
        buf = buf.at[rows, lengths + s].set(tok)


def test_chunk_on_cache_then_commit_k_rows():
    p = _params(seed=3)
    b, t0, w, cap = 3, 6, 4, 16
    toks = jax.random.randint(jax.random.key(5), (b, cap), 0, CFG.vocab_size)
    lengths = jnp.array([2, 6, 4], jnp.int32)
    pre = jax.jit(lambda t, n: nn.prefill(p, CFG, t, n, max_len=cap)[1])
    fwd = jax.jit(lambda t, c: nn.apply(p, CFG, t, cache=c))
    cache = pre(toks[:, :t0], lengths)
    rows = jnp.arange(b)[:, None]
    # chunk of W tokens at logical positions length + arange(W)
    idx = lengths[:, None] + jnp.arange(w)[None]
    chunk = toks[rows, idx]
    out = fwd(chunk, cache)
    np.testing.assert_array_equal(out.cache.length, lengths)  # not advanced
    ref = jax.jit(lambda t: nn.apply(p, CFG, t).logits)(
        toks
    )  # toks are the "true" continuation everywhere
    np.testing.assert_allclose(out.logits, ref[rows, idx], atol=1e-5, rtol=1e-5)
    # commit a different number of rows per sequence, then continue with another chunk
    k = jnp.array([1, 3, 0], jnp.int32)
    cache2 = nn.commit(out.cache, k)
    np.testing.assert_array_equal(cache2.length, lengths + k)
    idx2 = cache2.length[:, None] + jnp.arange(w)[None]
    out2 = fwd(toks[rows, idx2], cache2)
    np.testing.assert_allclose(out2.logits, ref[rows, idx2], atol=1e-5, rtol=1e-5)
    # committed K/V equal a fresh causal prefill of the same prefix
    fresh = pre(toks, jnp.full((b,), cap, jnp.int32))
    for r in range(b):
        n = int(cache2.length[r])
        np.testing.assert_allclose(cache2.k[:, r, :n], fresh.k[:, r, :n], atol=1e-5)
        np.testing.assert_allclose(cache2.v[:, r, :n], fresh.v[:, r, :n], atol=1e-5)


def test_logical_positions_permutation_invariance():
    p = _params(seed=7)
    t = 8
    toks = jax.random.randint(jax.random.key(2), (1, t), 0, CFG.vocab_size)
    pos = jnp.arange(t, dtype=jnp.int32)[None]
    ref = nn.apply(p, CFG, toks, pos).logits
    perm = jax.random.permutation(jax.random.key(3), t)
    tril = jnp.tril(jnp.ones((t, t), bool))
    mask = tril[perm][:, perm][None]  # query perm[i] may see key perm[j] iff perm[j] <= perm[i]
    out = nn.apply(p, CFG, toks[:, perm], pos[:, perm], attn_mask=mask).logits
    inv = jnp.argsort(perm)
    np.testing.assert_allclose(out[:, inv], ref, atol=1e-5, rtol=1e-5)


def test_rope_shift_invariance():
    p = _params(seed=8)
    toks = jax.random.randint(jax.random.key(4), (2, 6), 0, CFG.vocab_size)
    pos = jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (2, 6))
    a = nn.apply(p, CFG, toks, pos).logits
    b = nn.apply(p, CFG, toks, pos + 37).logits
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)


def test_out_of_range_cache_writes_are_dropped():
    p = _params(seed=9)
    cap = 8
    toks = jax.random.randint(jax.random.key(6), (2, cap), 0, CFG.vocab_size)
    fwd = jax.jit(lambda t, c: nn.apply(p, CFG, t, cache=c, overflow="drop"))
    cache = nn.init_cache(CFG, batch=2, max_len=cap)
    cache = nn.commit(fwd(toks, cache).cache, jnp.array([6, 2], jnp.int32))
    before_k = np.asarray(cache.k)
    chunk = jax.random.randint(jax.random.key(7), (2, 4), 0, CFG.vocab_size)
    out = fwd(chunk, cache)
    k = np.asarray(out.cache.k)
    # row 0: slots 6, 7 written; slots 8, 9 dropped; slots 0..5 untouched
    np.testing.assert_array_equal(k[:, 0, :6], before_k[:, 0, :6])
    assert not np.allclose(k[:, 0, 6:8], before_k[:, 0, 6:8])
    # row 1: slots 2..5 written, 6.. untouched
    np.testing.assert_array_equal(k[:, 1, :2], before_k[:, 1, :2])
    np.testing.assert_array_equal(k[:, 1, 6:], before_k[:, 1, 6:])
    # the written rows are the chunk's K at logical positions 6, 7 (row 0)
    seq = jnp.concatenate([toks[:, :6], chunk[:, :2]], 1)
    ref = fwd(seq, nn.init_cache(CFG, batch=2, max_len=cap)).cache
    np.testing.assert_allclose(k[:, 0, 6:8], ref.k[:, 0, 6:8], atol=1e-5)
    assert np.all(np.isfinite(np.asarray(out.logits)))
    np.testing.assert_array_equal(nn.commit(out.cache, 4).length, [8, 6])


def test_run_layers_split_and_collect(key):
    p = _params(seed=10)
    cfg = CFG
    toks = jax.random.randint(key, (2, 5), 0, cfg.vocab_size)
    pos = jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (2, 5))

    @jax.jit
    def run(p, toks):
        full = nn.apply(p, cfg, toks, collect=(0, 1))
        h0 = nn.embed(p, cfg, toks)
        h1, _, hid = nn.run_layers(p, cfg, h0, pos, start=0, stop=1, collect=(0,))
        h2, _, _ = nn.run_layers(p, cfg, h1, pos, start=1)
        cache = nn.init_cache(cfg, batch=2, max_len=8)
        _, c1, _ = nn.run_layers(p, cfg, h0, pos, start=0, stop=1, cache=cache)
        return full, h1, hid, h2, nn.unembed(p, cfg, h2), c1

    full, h1, hid, h2, logits, c1 = run(p, toks)
    np.testing.assert_allclose(hid[0], h1)
    np.testing.assert_allclose(full.hidden[0], h1, atol=1e-6)
    np.testing.assert_allclose(full.hidden[1], h2, atol=1e-6)
    np.testing.assert_allclose(logits, full.logits, atol=1e-5)
    # split forward on a cache writes only the layers that ran
    assert np.any(np.asarray(c1.k[0]) != 0) and np.all(np.asarray(c1.k[1]) == 0)


def test_inputs_embeds_equals_tokens(key):
    p = _params()
    toks = jax.random.randint(key, (2, 5), 0, CFG.vocab_size)
    a = nn.apply(p, CFG, toks).logits
    b = nn.apply(p, CFG, inputs_embeds=p["embed"][toks]).logits
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_encoder_is_bidirectional(key):
    for causal in (True, False):
        cfg = nn.TransformerConfig(
            vocab_size=11,
            d_model=8,
            n_layers=1,
            n_heads=2,
            n_kv_heads=1,
            head_dim=4,
            mlp_dim=8,
            causal=causal,
            tie_embeddings=True,
        )
        p = nn.init_params(cfg, key=key)
        assert "lm_head" not in p
        t1 = jnp.array([[1, 2, 3, 4]])
        t2 = t1.at[0, 3].set(7)
        a, b = nn.apply(p, cfg, t1).logits, nn.apply(p, cfg, t2).logits
        changed = not np.allclose(a[0, 0], b[0, 0])
        assert changed == (not causal)


def test_bf16_runs_and_keeps_dtype(key):
    p = nn.init_params(CFG, key=key, dtype=jnp.bfloat16)
    toks = jax.random.randint(key, (2, 5), 0, CFG.vocab_size)
    out = nn.apply(p, CFG, toks, cache=nn.init_cache(CFG, batch=2, max_len=8, dtype=jnp.bfloat16))
    assert out.logits.dtype == jnp.bfloat16 and out.cache.k.dtype == jnp.bfloat16
    ref = nn.apply(jax.tree.map(lambda a: a.astype(jnp.float32), p), CFG, toks).logits
    np.testing.assert_allclose(out.logits.astype(jnp.float32), ref, atol=0.1, rtol=0.1)


def test_errors(key):
    p = _params()
    toks = jnp.zeros((2, 3), jnp.int32)
    with pytest.raises(ValueError, match="exactly one"):
        nn.apply(p, CFG)
    with pytest.raises(TypeError, match="attn_mask"):
        nn.apply(p, CFG, toks, attn_mask=jnp.ones((2, 3, 4), bool))
    with pytest.raises(TypeError, match="tokens"):
        nn.apply(p, CFG, jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="n_kv_heads"):
        nn.TransformerConfig(
            vocab_size=5, d_model=4, n_layers=1, n_heads=3, n_kv_heads=2, head_dim=4, mlp_dim=4
        )
    with pytest.raises(ValueError, match="family"):
        nn.TransformerConfig(
            vocab_size=5,
            d_model=4,
            n_layers=1,
            n_heads=2,
            n_kv_heads=2,
            head_dim=4,
            mlp_dim=4,
            family="gpt2",
        )
    with pytest.raises(ValueError, match="max_len"):
        nn.prefill(p, CFG, toks, jnp.array([1, 2]), max_len=2)
    with pytest.raises(ValueError, match="collect"):
        nn.apply(p, CFG, toks, collect=(5,))
    with pytest.raises(ValueError, match="lengths"):
        nn.prefill(p, CFG, toks, jnp.array([0, 2]), max_len=4)
