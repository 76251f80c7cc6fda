"""The transformer backbone. Most tests share one config (with Qwen2's sliding window on
block 1 and YaRN RoPE scaling, so cached decoding, logical positions and the split
forward are all checked with both switched on) and the shapes (B, T) = (2, 8), so the
module-level jitted functions compile once for the whole file."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn
from tests.nn import _forward_v0

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
    rope_scaling=nn.RopeScaling("yarn", 2.0, original_max_position_embeddings=8),
    sliding_window=4,
    max_window_layers=1,
)
B, T, CAP = 2, 8, 12
# what an eqx.error_if guard raises at run time under jit
JIT_ERROR = (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


@pytest.fixture(scope="module")
def p():
    p = nn.init_params(CFG, key=jax.random.key(0))
    ks = jax.random.split(jax.random.key(100), 3)
    for k, name in zip(ks, ("bq", "bk", "bv"), strict=True):  # exercise the biases
        p["layers"][name] = 0.3 * jax.random.normal(k, p["layers"][name].shape)
    return p


@pytest.fixture(scope="module")
def toks():  # NumPy draws: no jax.random kernels to compile
    return jnp.asarray(np.random.default_rng(1).integers(0, CFG.vocab_size, (B, CAP)), jnp.int32)


def _naive_attention(q, k, v, mask):
    q, k, v, mask = map(np.asarray, (q, k, v, mask))
    b, t, h, dh = q.shape
    g = h // k.shape[2]
    out = np.zeros_like(q, dtype=np.float64)
    for bi in range(b):
        for hi in range(h):
            for ti in range(t):
                s = np.array([q[bi, ti, hi] @ k[bi, j, hi // g] for j in range(k.shape[1])])
                s = np.where(mask[bi, ti], s / np.sqrt(dh), -np.inf)
                if np.all(np.isinf(s)):  # fully masked row: uniform average
                    s = np.zeros_like(s)
                w = np.exp(s - s.max())
                out[bi, ti, hi] = (w / w.sum()) @ v[bi, :, hi // g]
    return out


def test_attention_matches_naive():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 4, 8)).astype(np.float32)
    k = rng.normal(size=(2, 5, 2, 8)).astype(np.float32)
    v = rng.normal(size=(2, 5, 2, 8)).astype(np.float32)
    mask = rng.random((2, 3, 5)) < 0.6
    mask[:, :, 0] = True
    mask[1, 2] = False  # one fully masked row: finite, uniform
    got = nn.attention(q, k, v, mask)
    np.testing.assert_allclose(got, _naive_attention(q, k, v, mask), atol=1e-5)


@pytest.mark.parametrize("s", [5, 64])
def test_one_row_attention_matches_naive(s):
    # one query row, Hkv = 2: the in-place form, its kv-head column by a masked sum
    # (S Hkv < 128) or by slices (S Hkv >= 128)
    rng = np.random.default_rng(s)
    q = rng.normal(size=(2, 1, 4, 8)).astype(np.float32)
    k = rng.normal(size=(2, s, 2, 8)).astype(np.float32)
    v = rng.normal(size=(2, s, 2, 8)).astype(np.float32)
    mask = rng.random((2, 1, s)) < 0.6
    mask[:, :, 0] = True
    got = nn.attention(q, k, v, mask)
    np.testing.assert_allclose(got, _naive_attention(q, k, v, mask), atol=1e-5)


def test_cached_greedy_decode_equals_full_recompute(p, toks):
    prompts = toks[:, :T]
    lengths = jnp.array([3, 8], jnp.int32)
    n_new = CAP - T
    out = nn.prefill(p, CFG, prompts, lengths, max_len=CAP)
    assert isinstance(out, nn.StepOutput)
    logits, cache = out
    cached_logits, cached_toks = [], []
    for _ in range(n_new):  # the glue in NumPy: no eager jax programs of its own
        tok = np.argmax(np.asarray(logits), -1).astype(np.int32)
        cached_logits.append(np.asarray(logits))
        cached_toks.append(tok)
        step = nn.decode_step(p, CFG, jnp.asarray(tok), cache)
        assert isinstance(step, nn.StepOutput)
        logits, cache = step
    np.testing.assert_array_equal(cache.length, lengths + n_new)
    # recompute without cache over a fixed buffer (causal => padding after is harmless)
    buf = np.zeros((B, CAP), np.int32)
    buf[:, :T] = np.asarray(prompts)
    rows, lens = np.arange(B), np.asarray(lengths)
    for s in range(n_new):
        lg = np.asarray(nn.apply(p, CFG, jnp.asarray(buf)).logits)[rows, lens + s - 1]
        tok = np.argmax(lg, -1).astype(np.int32)
        np.testing.assert_array_equal(tok, cached_toks[s])
        np.testing.assert_allclose(lg, cached_logits[s], atol=1e-5, rtol=1e-5)
        buf[rows, lens + s] = tok


def test_decode_step_equals_the_rolled_layer_scan_bit_for_bit(p, toks):
    # A one-token cached forward unrolls its layer scan; the frozen pre-intervention
    # forward (_forward_v0) runs the rolled scan with per-layer cache slices as xs/ys.
    # Ragged lengths, the sliding window on block 1, biases, qk-norm and YaRN all on.
    lengths = jnp.array([3, 8], jnp.int32)
    logits, cache = nn.prefill(p, CFG, toks[:, :T], lengths, max_len=CAP)
    for _ in range(3):
        tok = jnp.argmax(logits, -1).astype(jnp.int32)
        old = _forward_v0.apply(p, CFG, tok[:, None], cache=cache)
        new = nn.apply(p, CFG, tok[:, None], cache=cache)
        np.testing.assert_array_equal(new.logits, old.logits)
        np.testing.assert_array_equal(new.cache.k, old.cache.k)
        np.testing.assert_array_equal(new.cache.v, old.cache.v)
        logits, cache = nn.decode_step(p, CFG, tok, cache)
        np.testing.assert_array_equal(logits, old.logits[:, 0])
        np.testing.assert_array_equal(cache.k, old.cache.k)


def _while_bodies(hlo: str) -> list[str]:
    names = set(re.findall(r"body=%([\w.\-]+)", hlo))
    comps = re.split(r"\n(?=%|ENTRY)", hlo)
    return [c for c in comps if c.lstrip("%").split(" ", 1)[0] in names]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="reads XLA:CPU's program text")
def test_decode_loop_reads_the_weights_without_a_per_step_copy(p, toks):
    # In a caller's decode loop every block's weight slice is loop-invariant and hoisted:
    # no while body (the decode loop's or a layer loop's) computes a [D, mlp] weight slice.
    # (The rolled layer scan sliced, i.e. copied, every block's weights every step.)
    cache = nn.prefill(p, CFG, toks[:, :T], jnp.array([3, 8], jnp.int32), max_len=CAP).cache

    def loop(p, c):
        def body(c, _):
            tok = jnp.argmax(c[0], -1).astype(jnp.int32)
            return tuple(nn.decode_step(p, CFG, tok, c[1])), tok

        return jax.lax.scan(body, (jnp.zeros((B, CFG.vocab_size)), c), None, length=4)[1]

    hlo = jax.jit(loop).lower(p, cache).compile().as_text()
    bodies = _while_bodies(hlo)
    assert bodies, "no while loop in the decode program"
    d, f = CFG.d_model, CFG.mlp_dim
    made = re.compile(
        rf"= f32\[(1,)?({d},{f}|{f},{d})\]\S* (?!get-tuple-element|parameter|bitcast)"
    )
    assert not any(made.search(b) for b in bodies)


def test_chunk_on_cache_then_commit_k_rows(p, toks):
    w = 2
    lengths = np.array([2, 6], np.int32)  # index glue in NumPy: no eager programs
    cache = nn.prefill(p, CFG, toks[:, :T], lengths, max_len=CAP).cache
    rows, tk = np.arange(B)[:, None], np.asarray(toks)
    ref = np.asarray(nn.apply(p, CFG, toks).logits)  # toks: the "true" continuation everywhere
    idx = lengths[:, None] + np.arange(w)[None]
    out = nn.apply(p, CFG, tk[rows, idx], cache=cache)
    np.testing.assert_array_equal(out.cache.length, lengths)  # not advanced
    np.testing.assert_allclose(out.logits, ref[rows, idx], atol=1e-5, rtol=1e-5)
    # commit a different number of rows per sequence, then continue with another chunk
    k = np.array([1, 0], np.int32)
    cache2 = nn.commit(out.cache, k)
    np.testing.assert_array_equal(cache2.length, lengths + k)
    idx2 = np.asarray(cache2.length)[:, None] + np.arange(w)[None]
    out2 = nn.apply(p, CFG, tk[rows, idx2], cache=cache2)
    np.testing.assert_allclose(out2.logits, ref[rows, idx2], atol=1e-5, rtol=1e-5)
    # committed K/V equal a fresh causal prefill of the same prefix
    fresh = nn.prefill(p, CFG, toks[:, :T], np.full((B,), T, np.int32), max_len=CAP).cache
    c2k, c2v, fk, fv = (np.asarray(a) for a in (cache2.k, cache2.v, fresh.k, fresh.v))
    for r in range(B):
        n = int(cache2.length[r])
        np.testing.assert_allclose(c2k[:, r, :n], fk[:, r, :n], atol=1e-5)
        np.testing.assert_allclose(c2v[:, r, :n], fv[:, r, :n], atol=1e-5)


def test_logical_positions_permutation_and_shift_invariance(p, toks):
    x = np.asarray(toks[:, :T])  # the glue in NumPy: no eager programs of its own
    pos = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    ref = nn.apply(p, CFG, x, pos).logits
    # a permuted physical order with the matching mask gives the same logits
    perm = np.random.default_rng(3).permutation(T)
    tril = np.tril(np.ones((T, T), bool))
    mask = np.broadcast_to(tril[perm][:, perm], (B, T, T))
    out = np.asarray(nn.apply(p, CFG, x[:, perm], pos[:, perm], attn_mask=mask).logits)
    np.testing.assert_allclose(out[:, np.argsort(perm)], ref, atol=1e-5, rtol=1e-5)
    # RoPE (scaled) and the window are relative: shifting every position is a no-op
    shifted = nn.apply(p, CFG, x, pos + 37).logits
    np.testing.assert_allclose(shifted, ref, atol=1e-4, rtol=1e-4)


def test_default_mask_checks_its_cache():
    cache = nn.init_cache(CFG, batch=B, max_len=T)
    m = np.asarray(nn.default_mask(CFG, batch=B, t=2, cache=nn.commit(cache, T)))
    assert m.shape == (B, 2, T) and m.all()  # a full cache: every slot visible
    with pytest.raises(TypeError, match="`cache.k`"):  # a cache of another batch
        nn.default_mask(CFG, batch=B + 1, t=2, cache=cache)
    bad = cache._replace(length=jnp.array([T + 1, -1], jnp.int32))  # past [0, S]: no cache's
    with pytest.raises(ValueError, match=rf"`cache.length` must lie in \[0, {T}\]"):
        nn.default_mask(CFG, batch=B, t=2, cache=bad)


def test_cache_overflow_is_an_explicit_choice(p, toks):
    cache = nn.init_cache(CFG, batch=B, max_len=T)
    cache = nn.commit(nn.apply(p, CFG, toks[:, :T], cache=cache).cache, jnp.array([6, 2]))
    chunk = toks[:, T : T + 4]
    # the default raises: eagerly (ValueError) and under jit (an eqx.error_if error)
    with pytest.raises(ValueError, match="overflow"):
        nn.apply(p, CFG, chunk, cache=cache)
    with pytest.raises(JIT_ERROR, match="overflow"):
        jax.jit(lambda c: nn.apply(p, CFG, chunk, cache=c).logits)(cache)
    full = nn.commit(cache, 8)
    with pytest.raises(ValueError, match="overflow"):
        nn.decode_step(p, CFG, toks[:, 0], full)
    with pytest.raises(ValueError, match="overflow"):
        nn.apply(p, CFG, toks[:, :T], overflow="clip")
    # a negative or non-integer `cache.length` (a cache built by hand) is rejected too
    neg = cache._replace(length=jnp.array([-1, 2], jnp.int32))
    with pytest.raises(ValueError, match=r"`cache.length` must lie in \[0, 7\]"):
        nn.decode_step(p, CFG, toks[:, 0], neg)
    with pytest.raises(JIT_ERROR, match="`cache.length`"):
        jax.jit(lambda c: nn.apply(p, CFG, chunk, cache=c).logits)(neg)
    for f in (lambda c: nn.apply(p, CFG, chunk, cache=c), lambda c: nn.commit(c, 1)):
        with pytest.raises(TypeError, match="`cache.length` must be an integer array"):
            f(cache._replace(length=cache.length.astype(jnp.float32)))
    # "drop": row 0 writes slots 6, 7 and drops 8, 9; row 1 writes slots 2..5
    before_k = np.asarray(cache.k)
    out = nn.apply(p, CFG, chunk, cache=cache, overflow="drop")
    k = np.asarray(out.cache.k)
    np.testing.assert_array_equal(k[:, 0, :6], before_k[:, 0, :6])
    assert not np.allclose(k[:, 0, 6:8], before_k[:, 0, 6:8])
    np.testing.assert_array_equal(k[:, 1, :2], before_k[:, 1, :2])
    np.testing.assert_array_equal(k[:, 1, 6:], before_k[:, 1, 6:])
    # the written rows are the chunk's K at logical positions 6, 7 (row 0)
    seq = jnp.concatenate([toks[:, :6], chunk[:, :2]], 1)
    ref = nn.apply(p, CFG, seq, cache=nn.init_cache(CFG, batch=B, max_len=T)).cache
    np.testing.assert_allclose(k[:, 0, 6:8], ref.k[:, 0, 6:8], atol=1e-5)
    assert np.all(np.isfinite(np.asarray(out.logits)))
    np.testing.assert_array_equal(nn.commit(out.cache, 4).length, [8, 6])
    # decode_step on a full cache with "drop": nothing written, length stays at capacity
    st = nn.decode_step(p, CFG, toks[:, 0], full, overflow="drop")
    np.testing.assert_array_equal(st.cache.length, [8, 8])
    np.testing.assert_array_equal(st.cache.k, full.k)


def test_token_ids_outside_the_vocabulary_raise(p, toks):
    bad = toks[:, :T].at[1, 3].set(CFG.vocab_size)
    bad = jnp.roll(bad, -3, axis=1)  # the bad id sits at position 0 of row 1
    for fn in (
        lambda t: nn.apply(p, CFG, t).logits,
        lambda t: nn.embed(p, CFG, t),
        lambda t: nn.decode_step(p, CFG, t[:, 0], nn.init_cache(CFG, batch=B, max_len=4)).logits,
        lambda t: nn.prefill(p, CFG, t, jnp.full((B,), T), max_len=T).logits,
    ):
        with pytest.raises(ValueError, match="tokens"):
            fn(bad)
    # negative ids too, and the traced guard under jit (an eqx.error_if error)
    with pytest.raises(JIT_ERROR, match="tokens"):
        jax.jit(lambda t: nn.apply(p, CFG, t).logits)(bad * jnp.array([[1], [-1]]))


def test_run_layers_split_and_collect(p, toks):
    x = np.asarray(toks[:, :T])  # the glue in NumPy: no eager programs of its own
    pos = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    full = nn.apply(p, CFG, x, collect=(0, 1))
    h0 = nn.embed(p, CFG, x)
    first = nn.run_layers(p, CFG, h0, pos, start=0, stop=1, collect=(0,))
    assert isinstance(first, nn.LayersOutput) and first.cache is None
    h1, hid = first.h, first.hidden
    h2 = nn.run_layers(p, CFG, h1, pos, start=1).h
    c1 = nn.run_layers(
        p, CFG, h0, pos, start=0, stop=1, cache=nn.init_cache(CFG, batch=B, max_len=T)
    ).cache
    np.testing.assert_allclose(hid[0], h1)
    np.testing.assert_allclose(full.hidden[0], h1, atol=1e-6)
    np.testing.assert_allclose(full.hidden[1], h2, atol=1e-6)
    np.testing.assert_allclose(nn.unembed(p, CFG, h2), full.logits, atol=1e-5)
    # split forward on a cache writes only the layers that ran
    assert np.any(np.asarray(c1.k[0]) != 0) and np.all(np.asarray(c1.k[1]) == 0)
    # inputs_embeds is the same forward as tokens
    emb = nn.apply(p, CFG, inputs_embeds=np.asarray(p["embed"])[x]).logits
    np.testing.assert_allclose(emb, full.logits, atol=1e-6)


def test_sliding_window_limits_what_a_query_sees(p, toks):
    x = np.asarray(toks[:, :T])  # the glue in NumPy: no eager programs of its own
    base = np.asarray(nn.apply(p, CFG, x).logits)
    x2 = x.copy()
    x2[:, 0] = (x[:, 0] + 1) % CFG.vocab_size
    # position 0 is outside block 1's window of the last query, but block 0 attends
    # fully, so a change there still reaches the last query through the residual...
    assert not np.allclose(nn.apply(p, CFG, x2).logits[:, -1], base[:, -1])
    # ...while with the window on every block, position T-1 cannot see position 0
    every = nn.TransformerConfig(**{**CFG.__dict__, "max_window_layers": 0})
    both = np.asarray(nn.apply(p, every, np.concatenate([x, x2])).logits)[:, -1]
    np.testing.assert_allclose(both[:B], both[B:], atol=1e-6)


def test_encoder_is_bidirectional(key):
    cfg = nn.TransformerConfig(
        vocab_size=11,
        d_model=8,
        n_layers=1,
        n_heads=2,
        n_kv_heads=1,
        head_dim=4,
        mlp_dim=8,
        causal=False,
        tie_embeddings=True,
    )
    p = nn.init_params(cfg, key=key)
    assert "lm_head" not in p
    t1 = jnp.array([[1, 2, 3, 4]])
    t2 = t1.at[0, 3].set(7)
    out = nn.apply(p, cfg, jnp.concatenate([t1, t2])).logits
    assert not np.allclose(out[0, 0], out[1, 0])  # position 0 sees position 3
    # (the causal model's blindness to later tokens: the cached-decoding tests)


def test_bf16_runs_and_keeps_dtype(p, toks):
    pb = jax.jit(lambda p: jax.tree.map(lambda a: a.astype(jnp.bfloat16), p))(p)  # one program
    cache = nn.init_cache(CFG, batch=B, max_len=T, dtype=jnp.bfloat16)
    out = nn.apply(pb, CFG, toks[:, :T], cache=cache)
    assert out.logits.dtype == jnp.bfloat16 and out.cache.k.dtype == jnp.bfloat16
    ref = nn.apply(p, CFG, toks[:, :T]).logits
    np.testing.assert_allclose(np.asarray(out.logits).astype(np.float32), ref, atol=0.1, rtol=0.1)


def test_errors(p):
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
    small = dict(vocab_size=5, d_model=4, n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="family"):
        nn.TransformerConfig(**small, mlp_dim=4, family="gpt2")
    with pytest.raises(NotImplementedError, match="dynamic"):
        nn.TransformerConfig(**small, mlp_dim=4, rope_scaling={"type": "dynamic", "factor": 2})
    with pytest.raises(ValueError, match="sliding_window"):
        nn.TransformerConfig(**small, mlp_dim=4, sliding_window=0)
    with pytest.raises(ValueError, match="max_len"):
        nn.prefill(p, CFG, toks, jnp.array([1, 2]), max_len=2)
    with pytest.raises(ValueError, match="collect"):
        nn.apply(p, CFG, toks, collect=(5,))
    with pytest.raises(ValueError, match="lengths"):
        nn.prefill(p, CFG, toks, jnp.array([0, 2]), max_len=4)
    with pytest.raises(TypeError, match="start"):
        nn.run_layers(p, CFG, jnp.zeros((2, 3, 16)), jnp.zeros((2, 3), int), start=0.5)
    with pytest.raises(TypeError, match="batch"):
        nn.init_cache(CFG, max_len=4)
    # a non-finite or non-real theta / eps, a non-bool flag (inf gave no rotation / h = 0)
    for bad, err in (
        ({"rope_theta": float("inf")}, ValueError),
        ({"norm_eps": float("inf")}, ValueError),
        ({"rope_theta": "1e4"}, TypeError),
        ({"causal": 1}, TypeError),
    ):
        with pytest.raises(err, match=next(iter(bad))):
            nn.TransformerConfig(**small, mlp_dim=4, **bad)
    with pytest.raises(ValueError, match="attention_factor"):
        nn.RopeScaling("yarn", 2.0, original_max_position_embeddings=8, attention_factor=-1.0)
    with pytest.raises(TypeError, match="model_axis"):
        nn.param_specs(CFG, model_axis=3)
    # nn.attention checks its arguments (it reshaped or broadcast them opaquely)
    q, kv = np.ones((2, 3, 2, 4), np.float32), np.ones((2, 5, 1, 4), np.float32)
    m = np.ones((2, 3, 5), bool)
    with pytest.raises(TypeError, match="k"):
        nn.attention(np.ones((2, 3, 3, 4), np.float32), np.ones((2, 5, 2, 4), np.float32), kv, m)
    with pytest.raises(TypeError, match="mask"):
        nn.attention(q, kv, kv, m[..., :4])
    with pytest.raises(TypeError, match="mask"):
        nn.attention(q, kv, kv, m.astype(np.int32))
    with pytest.raises(TypeError, match="q"):
        nn.attention(q[0], kv, kv, m)
