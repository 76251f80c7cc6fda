"""``interventions=``: residual edits, inserted latents and MLP read sites.

Oracles: the plain forward is bit-identical to a frozen copy of the forward before
interventions existed (``_forward_v0``); an additive edit equals the hand-split
forward (``run_layers`` halves); an insertion equals running the lower blocks on the
sequence WITHOUT the span at gapped positions and the upper blocks on the expanded
sequence (the SVGT convention); prefill + decode steps equal the uncached forward
with the same object; generators equal host loops of uncached forwards.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, memory, nn, steering
from tests.decoding import _reference as R
from tests.nn import _forward_v0

CFG = nn.TransformerConfig(
    vocab_size=23, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=4, mlp_dim=24
)
B, T, K, L = 2, 10, 2, 1  # batch, width, inserted latents, insert layer
M = np.array([3, 5])  # prompt lengths before the span (ragged)


@pytest.fixture(scope="module")
def p():
    return nn.init_params(CFG, key=jax.random.key(0))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    toks = jnp.asarray(rng.integers(0, CFG.vocab_size, (B, T)), jnp.int32)
    lat = jnp.asarray(rng.normal(size=(B, K, CFG.d_model)), jnp.float32)
    vec = jnp.asarray(rng.normal(size=(B, CFG.d_model)), jnp.float32)
    return toks, lat, vec


def _iv(lat, vec, **kw):
    return nn.Interventions({0: vec}, insert_layer=L, insert_at=M, latents=lat, **kw)


def test_plain_forward_bit_identical(p, data):
    toks = data[0]
    old = _forward_v0.apply(p, CFG, toks, collect=(1,))
    for iv in (None, nn.Interventions()):
        new = nn.apply(p, CFG, toks, collect=(1,), interventions=iv)
        np.testing.assert_array_equal(np.asarray(new.logits), np.asarray(old.logits))
        np.testing.assert_array_equal(np.asarray(new.hidden[1]), np.asarray(old.hidden[1]))


def test_add_and_reads_match_split_forward(p, data):
    toks, _, vec = data
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    out = nn.apply(p, CFG, toks, interventions=nn.Interventions({1: vec[0]}, read_mlp=(2,)))
    h = nn.run_layers(p, CFG, nn.embed(p, CFG, toks), pos, stop=2, collect=(1,)).h
    h2 = nn.run_layers(p, CFG, h + vec[0][None, None], pos, start=2).h
    np.testing.assert_allclose(out.logits, nn.unembed(p, CFG, h2), atol=1e-5)
    # read site of block 2: h_out = h_mid + down_in @ w_down, mlp_in = rmsnorm(h_mid)
    r = out.reads[2]
    lp = jax.tree.map(lambda a: np.asarray(a[2], np.float64), p["layers"])
    down, x = np.asarray(r.down_in, np.float64), np.asarray(r.mlp_in, np.float64)
    h_mid = np.asarray(h2, np.float64) - down @ lp["w_down"]
    norm = h_mid / np.sqrt((h_mid**2).mean(-1, keepdims=True) + CFG.norm_eps) * lp["mlp_norm"]
    np.testing.assert_allclose(x, norm, atol=1e-4)
    g = x @ lp["w_gate"]
    np.testing.assert_allclose(down, g / (1 + np.exp(-g)) * (x @ lp["w_up"]), atol=1e-4)


@jax.jit  # one program for both rows (eager, its glue compiled some 30 small programs)
def _gapped_reference(p, tb, keep, vec_b, lat_b, order):
    """The lower blocks on the sequence without the span at gapped positions ``keep``, the
    latents put in (``order`` of ``[lower states ; latents]``), the upper blocks on the whole."""
    lo = nn.run_layers(p, CFG, nn.embed(p, CFG, tb), keep, stop=1).h
    lo = nn.run_layers(p, CFG, lo + vec_b[None, None], keep, start=1, stop=L + 1).h
    h = jnp.concatenate([lo, lat_b], axis=1)[:, order]
    hi = nn.run_layers(p, CFG, h, jnp.arange(T)[None], start=L + 1).h
    return nn.unembed(p, CFG, hi)[0]


def test_insertion_equals_gapped_split_forward(p, data):
    toks, lat, vec = data
    out = np.asarray(nn.apply(p, CFG, toks, interventions=_iv(lat, vec)).logits)
    toks_np, lat_np, vec_np = np.asarray(toks), np.asarray(lat), np.asarray(vec)
    for b in range(B):
        m = int(M[b])
        keep = np.r_[0:m, m + K : T]  # the sequence without the span, gapped positions
        order = np.r_[0:m, T - K : T, m : T - K]  # [lo[:, :m], latents, lo[:, m:]]
        want = _gapped_reference(
            p, toks_np[b : b + 1, keep], keep[None], vec_np[b], lat_np[b : b + 1], order
        )
        np.testing.assert_allclose(out[b, keep], np.asarray(want)[keep], atol=1e-5)


def _cached_equals_uncached(p, toks, iv, plen):
    """Prefill + two decode steps under ``iv`` equal the uncached forward's logits."""
    full = nn.apply(p, CFG, toks, interventions=iv).logits
    lg, cache = nn.prefill(p, CFG, toks, plen, max_len=T, interventions=iv)
    np.testing.assert_allclose(lg, full[np.arange(B), plen - 1], atol=1e-5)
    for s in range(2):
        nxt = toks[np.arange(B), plen + s]
        lg, cache = nn.decode_step(p, CFG, nxt, cache, interventions=iv)
        np.testing.assert_allclose(lg, full[np.arange(B), plen + s], atol=1e-5)


def test_cached_steps_equal_uncached_forward(p, data):
    toks, lat, vec = data
    _cached_equals_uncached(p, toks, _iv(lat, vec), M + K + 1)  # words, span, one more word


@pytest.mark.parametrize("extra", [0, 1], ids=["prompt_ends_in_span", "after_span"])
def test_cached_steps_equal_uncached_forward_at_the_last_block(p, data, extra):
    # edits at the last block: the prefill runs that block at each row's last prompt
    # position only (its edit applied there: a latent when that position lies in the span)
    toks, lat, vec = data
    last = CFG.n_layers - 1
    iv = nn.Interventions({last: vec, 0: vec}, insert_layer=last, insert_at=M, latents=lat)
    _cached_equals_uncached(p, toks, iv, M + K + extra)


def test_edit_at_every_layer_matches_per_layer_forward(p, data):
    # One edit per block, of every accepted shape: the layer scan must add block l's
    # vector after block l only (each block picks its own edit by its traced index).
    toks, _, vec = data
    rng = np.random.default_rng(1)
    d = CFG.d_model
    adds = {0: vec, 1: jnp.asarray(rng.normal(size=(d,)), jnp.float32)}
    adds[2] = jnp.asarray(rng.normal(size=(B, T, d)), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    h, want_hidden = nn.embed(p, CFG, toks), {}
    for layer in range(CFG.n_layers):  # the per-layer reference: one block per call
        h = nn.run_layers(p, CFG, h, pos, start=layer, stop=layer + 1).h
        a = adds[layer]
        h = h + (a if a.ndim == 3 else a.reshape(-1, 1, d))
        want_hidden[layer] = h
    want = nn.unembed(p, CFG, h)
    out = nn.apply(p, CFG, toks, collect=(0, 1), interventions=nn.Interventions(adds))
    np.testing.assert_allclose(out.logits, want, atol=1e-5)
    for layer in (0, 1):
        np.testing.assert_allclose(out.hidden[layer], want_hidden[layer], atol=1e-5)
    # cached: prefill + decode steps with an edit at every layer ([D] / [B, D] only)
    adds[2] = adds[1][::-1]
    iv = nn.Interventions(adds)
    full = nn.apply(p, CFG, toks, interventions=iv).logits
    plen = jnp.asarray([4, 6])
    lg, cache = nn.prefill(p, CFG, toks, plen, max_len=T, interventions=iv)
    np.testing.assert_allclose(lg, full[np.arange(B), plen - 1], atol=1e-5)
    for s in range(2):
        lg, cache = nn.decode_step(p, CFG, toks[np.arange(B), plen + s], cache, interventions=iv)
        np.testing.assert_allclose(lg, full[np.arange(B), plen + s], atol=1e-5)


def _host_logits(iv_row):
    def logits(params, cfg, seq, pos):  # right-padded to a fixed width: causal => exact
        n = len(seq)
        t, q = np.zeros((1, 16), np.int32), np.zeros((1, 16), np.int32)
        t[0, :n], q[0, :n] = seq, pos
        out = nn.apply(params, cfg, t, q, interventions=iv_row).logits[0, :n]
        return np.asarray(out, np.float32)

    return logits


@pytest.mark.slow
def test_generators_equal_uncached_host_loops(p, data, monkeypatch):
    toks, lat, vec = data
    iv = _iv(lat, vec)
    plen = jnp.asarray(M + K + 1)
    n = 3
    ar = decoding.ar_generate(
        p, CFG, toks, plen, key=jax.random.key(0), max_new_tokens=n, interventions=iv
    )
    we = decoding.wedlm_generate(
        p,
        CFG,
        toks,
        plen,
        key=jax.random.key(0),
        mask_token_id=22,
        max_new_tokens=n,
        window=2,
        interventions=iv,
    )
    for b in range(B):
        row = nn.Interventions(
            {0: vec[b]}, insert_layer=L, insert_at=M[b : b + 1], latents=lat[b : b + 1]
        )
        monkeypatch.setattr(R, "_logits", _host_logits(row))
        prompt = list(np.asarray(toks[b, : int(plen[b])]))
        np.testing.assert_array_equal(ar.tokens[b], R.ar_greedy_row(p, CFG, prompt, n_new=n))
        want, _ = R.wedlm_reference_row(
            p, CFG, prompt, mask=22, n_new=n, window=2, tau=0.4, lam=0.02
        )
        np.testing.assert_array_equal(we.tokens[b, : we.lengths[b]], want)


def test_combined_interventions_equal_the_split_forwards(p, data):
    # combine_interventions: edits of several objects at one block are summed (the split
    # forward adds both), an insertion and read sites are kept; oracles as above
    toks, lat, vec = data
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    full = jnp.asarray(np.random.default_rng(1).normal(size=(B, T, CFG.d_model)), jnp.float32)
    iv = nn.combine_interventions(
        nn.Interventions({1: vec[0]}), None, nn.Interventions({1: full}, read_mlp=(2,))
    )
    assert iv.read_mlp == (2,) and iv.insert_layer is None
    out = nn.apply(p, CFG, toks, interventions=iv)
    h = nn.run_layers(p, CFG, nn.embed(p, CFG, toks), pos, stop=2).h
    h2 = nn.run_layers(p, CFG, h + vec[0][None, None] + full, pos, start=2).h
    np.testing.assert_allclose(out.logits, nn.unembed(p, CFG, h2), atol=1e-5)
    assert out.reads[2].mlp_in.shape == (B, T, CFG.d_model)
    # a steering vector ([D]) and a per-row edit ([B, D]) at block 0, a memory span of
    # jaxkit.memory after block L: the gapped split forward of the insertion test
    halves = (steering.steer_add(vec[0], 0.5, layer=0), nn.Interventions({0: vec - 0.5 * vec[:1]}))
    span = memory.memory_interventions(memory.DLMRConfig(layer=L), lat, M)
    iv = nn.combine_interventions(halves[0], span, halves[1])
    assert (iv.insert_layer, iv.n_insert) == (L, K)
    out = np.asarray(nn.apply(p, CFG, toks, interventions=iv).logits)
    for b in range(B):
        m = int(M[b])
        keep = np.r_[0:m, m + K : T]
        order = np.r_[0:m, T - K : T, m : T - K]
        want = _gapped_reference(
            p, toks[b : b + 1, keep], keep[None], vec[b], lat[b : b + 1], order
        )
        np.testing.assert_allclose(out[b, keep], np.asarray(want)[keep], atol=1e-5)
    # nothing to combine: the plain forward, bit for bit
    plain = nn.apply(p, CFG, toks).logits
    for iv in (nn.combine_interventions(), nn.combine_interventions(None, nn.Interventions())):
        got = nn.apply(p, CFG, toks, interventions=iv).logits
        np.testing.assert_array_equal(np.asarray(got), np.asarray(plain))


@pytest.mark.slow  # two generator programs; the default run keeps the forward oracles above
def test_combined_interventions_in_a_jitted_generator(p, data):
    # the inputs traced: the same tokens as one hand-built object with the same edits
    toks, lat, vec = data
    plen = jnp.asarray(M + K + 1)

    @jax.jit
    def gen(v, lat):
        both = nn.combine_interventions(
            steering.steer_add(v[0], 0.5, layer=0),
            memory.memory_interventions(memory.DLMRConfig(layer=L), lat, M),
            nn.Interventions({0: v - 0.5 * v[:1]}),
        )
        kw = dict(key=jax.random.key(0), max_new_tokens=2, interventions=both)
        return decoding.ar_generate(p, CFG, toks, plen, **kw).tokens

    kw = dict(key=jax.random.key(0), max_new_tokens=2, interventions=_iv(lat, vec))
    np.testing.assert_array_equal(
        gen(vec, lat), decoding.ar_generate(p, CFG, toks, plen, **kw).tokens
    )


def test_bad_combinations_name_the_entry(p, data):
    toks, lat, vec = data
    span = nn.Interventions(insert_layer=L, insert_at=M, latents=lat)
    with pytest.raises(ValueError, match=r"`interventions\[0\]` and `interventions\[2\]`"):
        nn.combine_interventions(
            span, None, nn.Interventions(insert_layer=0, insert_at=M, n_insert=1)
        )
    with pytest.raises(TypeError, match=r"`interventions\[1\]` must be an Interventions"):
        nn.combine_interventions(span, {0: vec})
    bad = [
        (vec, vec[:1]),  # [B, D] rows of two batch sizes
        (vec, jnp.ones(CFG.d_model + 1)),  # two widths
        (jnp.ones((B, T, CFG.d_model)), jnp.ones((B, T - 1, CFG.d_model))),  # two lengths
        (vec, jnp.ones((1, T, CFG.d_model))),  # a batch of 1 the forward would not take
    ]
    for a, b in bad:
        with pytest.raises(TypeError, match=r"`interventions\[1\]\.add\[0\]` has shape"):
            nn.combine_interventions(nn.Interventions({0: a}), nn.Interventions({0: b}))


def test_bad_interventions(p, data):
    toks, lat, vec = data
    with pytest.raises(ValueError, match="layer index"):
        nn.apply(p, CFG, toks, interventions=nn.Interventions({3: vec}))
    with pytest.raises(ValueError, match="layer index"):
        nn.apply(p, CFG, toks, interventions=nn.Interventions(read_mlp=(-1,)))
    with pytest.raises(TypeError, match="add"):
        nn.apply(p, CFG, toks, interventions=nn.Interventions({0: jnp.ones(5)}))
    with pytest.raises(TypeError, match="latents"):
        nn.apply(p, CFG, toks, interventions=_iv(lat[:, :, :4], vec))
    with pytest.raises(TypeError, match="insert_at"):
        nn.Interventions(insert_layer=0, insert_at=jnp.ones(2), latents=lat)
    with pytest.raises(ValueError, match="insert_layer"):
        nn.Interventions(latents=lat)
    with pytest.raises(TypeError, match="interventions"):
        nn.apply(p, CFG, toks, interventions={0: vec})
    with pytest.raises(TypeError, match="in generation"):
        decoding.ar_generate(
            p,
            CFG,
            toks,
            jnp.array([4, 4]),
            key=jax.random.key(0),
            max_new_tokens=2,
            interventions=nn.Interventions({0: jnp.ones((B, T, 16))}),
        )
    # a NaN edit would make every logit NaN and the arg-max token 0, silently: the
    # generators' shared check raises, naming the edit, eagerly and under jit
    nan_edit = nn.Interventions({1: jnp.full(16, jnp.nan)})

    def gen(iv):
        return decoding.ar_generate(
            p, CFG, toks, jnp.array([4, 4]), key=jax.random.key(0), max_new_tokens=2,
            interventions=iv,
        ).tokens  # fmt: skip

    for call in (gen, jax.jit(gen)):
        with pytest.raises(Exception, match=r"`interventions.add\[1\]` must be finite"):
            jax.block_until_ready(call(nan_edit))
