"""DLMR inference: the spec's oracles (sequence.md §4.4), bad input."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, memory, nn
from tests._sampling_args import assert_same_errors, assert_traced_errors
from tests.memory._setup import AP, CFG, DELIM, MC, NODELIM, PLEN, PROMPT, P
from tests.memory._setup import CFG as LM

N = 6
KW = dict(key=jax.random.key(0), max_new_tokens=N)
PROMPT_NP, PLEN_NP = np.asarray(PROMPT), np.asarray(PLEN)


# The router forced to the null is the base model (ar_generate), token for token: in
# test_hf.py, on the backbone loaded from a folder (bit-identical to P, asserted there).


def _forced_reference(toks, *, lm_cfg, m, k, bank):
    """Greedy tokens of one row's uncached forward with the memory of its first m tokens."""
    cfg = NODELIM
    h_l = nn.apply(P, lm_cfg, toks[:, :m], collect=(cfg.layer,)).hidden[cfg.layer]
    mem, _ = memory.inject(
        AP, cfg, h_l, jnp.ones((1, m), bool), jnp.array([m]), jnp.array([bank]), jnp.array([k])
    )
    iv = memory.memory_interventions(cfg, mem[:, :k], jnp.array([m]))
    logits = nn.apply(P, lm_cfg, toks, interventions=iv).logits[0]
    return jnp.argmax(logits[m + k - 1 : m + k - 1 + N], axis=-1)


# one program per row (eager, its glue compiled some 40 small programs)
_forced_reference_jit = jax.jit(_forced_reference, static_argnames=("lm_cfg", "m", "k", "bank"))


# (r, 1): a forced k below k_max narrows the chunk and the reserved slots; (v, 3): k_max;
# a sliding window: the lower half's cache stays slot-aligned (no window: text slots only)
@pytest.mark.parametrize(
    "action, window",
    [
        (3, None),
        pytest.param(2, None, marks=pytest.mark.slow),
        pytest.param(2, 4, marks=pytest.mark.slow),
    ],
)
def test_forced_injection_equals_the_uncached_forward(action, window):
    # every step eligible (no delimiter set) and n_max = 1: one injection, before token 0
    cfg = NODELIM
    CFG = LM if window is None else dataclasses.replace(LM, sliding_window=window, family="qwen2")
    emb = nn.embed(P, CFG, PROMPT)
    g = memory.dlmr_generate(P, CFG, AP, cfg, emb, PLEN, force_action=action, **KW)
    bank_t, k_t = memory.action_table(cfg)
    k, bank = int(k_t[action]), int(bank_t[action])
    # every step eligible, n_max = 1: the injection comes before token 0, at slot plen
    np.testing.assert_array_equal(g.actions[:, 0], action)
    np.testing.assert_array_equal(g.injected, k)
    for b in range(2):
        m = int(PLEN_NP[b])
        toks = np.concatenate([PROMPT_NP[b, :m], np.zeros(k, np.int32), np.asarray(g.tokens)[b]])
        want = _forced_reference_jit(toks[None], lm_cfg=CFG, m=m, k=k, bank=bank)
        np.testing.assert_array_equal(g.tokens[b], want)


def test_injection_through_prefill_and_decode_steps_equals_the_full_forward():
    b, m, k = 2, 4, 3
    # the glue in NumPy: no eager programs of its own
    toks = np.random.default_rng(3).integers(0, 23, (b, m + k + 3)).astype(np.int32)
    h_l = nn.apply(P, CFG, toks[:, :m], collect=(MC.layer,)).hidden[MC.layer]
    at = np.full((b,), m, np.int32)
    mem, _ = memory.inject(
        AP, MC, h_l, np.ones((b, m), bool), at, np.array([0, 1], np.int32), at * 0 + k
    )
    iv = memory.memory_interventions(MC, np.asarray(mem)[:, :k], at)
    full = np.asarray(nn.apply(P, CFG, toks, interventions=iv).logits)
    pre = nn.prefill(P, CFG, toks[:, : m + k], at + k, max_len=m + k + 3, interventions=iv)
    np.testing.assert_allclose(pre.logits, full[:, m + k - 1], atol=1e-5)
    cache = pre.cache
    for i in range(3):
        st = nn.decode_step(P, CFG, toks[:, m + k + i], cache, interventions=iv)
        cache = st.cache
        if i < 2:
            np.testing.assert_allclose(st.logits, full[:, m + k + i], atol=1e-5)
    assert not np.allclose(full, nn.apply(P, CFG, toks).logits, atol=1e-3)  # memory acts


def test_delimiter_gating_and_n_max():
    cfg = memory.DLMRConfig(**{**MC.__dict__, "n_max": 2})
    g = memory.dlmr_generate(P, CFG, AP, cfg, nn.embed(P, CFG, PROMPT), PLEN, force_action=1, **KW)
    t, e, a = (np.asarray(x) for x in (g.tokens, g.eligible, g.actions))
    prev = np.concatenate([np.full((2, 1), -1), t[:, :-1]], axis=1)
    n_before = np.cumsum(np.concatenate([np.zeros((2, 1)), a[:, :-1] > 0], 1), 1)
    np.testing.assert_array_equal(e, (prev == DELIM) & (n_before < 2))
    np.testing.assert_array_equal(a > 0, e)
    np.testing.assert_array_equal(g.n_injections, e.sum(1))


def test_router_reads_a_normalised_state():
    # the residual stream's scale and a shift shared by its features do not move the router
    # (its input is layer-normalised, without parameters); a different state does
    h = (np.random.default_rng(3).normal(size=(4, LM.d_model)) * 5.0).astype(np.float32)
    router = eqx.filter_jit(lambda r, x: r(x))  # one program (eager: one per op)
    lg = np.asarray(router(AP.router, h))
    np.testing.assert_allclose(
        np.asarray(router(AP.router, 40.0 * h + 7.0)), lg, rtol=1e-4, atol=1e-4
    )
    other = np.asarray(router(AP.router, h[::-1].copy()))
    assert np.abs(other - lg).max() > 1e-2


def test_router_masking_gives_null_only_when_ineligible():
    from jaxkit.memory._dlmr import action_mask

    m = np.asarray(action_mask(MC, jnp.array([False, True])))
    np.testing.assert_array_equal(m[0], [True] + [False] * 4)
    assert m[1].all()
    fixed = memory.DLMRConfig(**{**MC.__dict__, "fixed_k": 3})
    m = np.asarray(action_mask(fixed, jnp.array([True])))
    np.testing.assert_array_equal(m[0], [False, False, True, False, True])


def test_bad_input():
    with pytest.raises(ValueError, match="budget"):
        memory.DLMRConfig(layer=0, budgets=(0, 2))
    with pytest.raises(ValueError, match="cfg.layer"):
        memory.init_dlmr(
            CFG, memory.DLMRConfig(layer=2, bank_sizes=(16, 16)), key=jax.random.key(0)
        )
    with pytest.raises(TypeError, match="prompt_embeds"):
        memory.dlmr_generate(P, CFG, AP, MC, jnp.ones((2, 5, 7)), PLEN, **KW)
    with pytest.raises(TypeError, match="`prompt_embeds` must hold at least one sample"):
        memory.dlmr_generate(P, CFG, AP, MC, nn.embed(P, CFG, PROMPT)[:0], PLEN[:0], **KW)
    with pytest.raises(TypeError, match="ctx_valid"):
        memory.inject(AP, MC, jnp.ones((2, 4, 16)), jnp.ones((2, 3), bool), PLEN, PLEN, PLEN)
    with pytest.raises(ValueError, match="force_action"):
        memory.dlmr_generate(P, CFG, AP, MC, nn.embed(P, CFG, PROMPT), PLEN, force_action=9, **KW)
    with pytest.raises(ValueError, match="`k`"):
        memory.inject(
            AP, MC, jnp.ones((2, 4, 16)), jnp.ones((2, 4), bool), PLEN, PLEN * 0, PLEN * 3
        )
    # issue 13: an `at` past the context read all of it at clipped distances, silently
    with pytest.raises(ValueError, match=r"`at` must lie in \[0, 4\]"):
        memory.inject(
            AP, MC, jnp.ones((2, 4, 16)), jnp.ones((2, 4), bool), PLEN, PLEN * 0, PLEN * 0
        )
    with pytest.raises(ValueError, match="`at` must be >= 0"):
        memory.memory_interventions(MC, jnp.ones((2, 1, 16)), -PLEN)


def test_sampling_arguments_raise_the_decoders_errors():
    # jaxkit._tokens' checks: the same bad temperature / top_p, the same error as
    # decoding.ar_generate on the same backbone (all raise before anything compiles)
    emb = nn.embed(P, CFG, PROMPT)

    def gen(**kw):
        return memory.dlmr_generate(P, CFG, AP, MC, emb, PLEN, **KW, **kw)

    assert_same_errors(gen, lambda **kw: decoding.ar_generate(P, CFG, PROMPT, PLEN, **KW, **kw))


def test_traced_bad_sampling_arguments_raise_under_jit():
    emb = nn.embed(P, CFG, PROMPT)

    @jax.jit
    def run(t, p):  # force_action=0, one token: the smallest sampled program
        kw = dict(key=jax.random.key(0), max_new_tokens=1, force_action=0)
        return memory.dlmr_generate(P, CFG, AP, MC, emb, PLEN, temperature=t, top_p=p, **kw)

    assert_traced_errors(run)


@pytest.mark.slow
def test_two_injections_equal_an_uncached_split_forward():
    # every step eligible, n_max = 2: spans before tokens 0 and 1 (k = 3 each)
    cfg = memory.DLMRConfig(**{**MC.__dict__, "delimiter_ids": (), "n_max": 2})
    g = memory.dlmr_generate(P, CFG, AP, cfg, nn.embed(P, CFG, PROMPT), PLEN, force_action=2, **KW)
    k, L = 3, cfg.layer
    for b in range(2):
        m = int(PLEN[b])
        t0 = int(g.tokens[b, 0])
        iv1 = None
        # span 1 from the prompt's block-l states
        h_l = nn.apply(P, CFG, PROMPT[b : b + 1, :m], collect=(L,)).hidden[L]
        one = jnp.ones((1, m), bool)
        m1, _ = memory.inject(AP, cfg, h_l, one, jnp.array([m]), jnp.array([0]), jnp.array([k]))
        iv1 = memory.memory_interventions(cfg, m1[:, :k], jnp.array([m]))
        seq = jnp.concatenate([PROMPT[b, :m], jnp.zeros(k, jnp.int32), jnp.array([t0])])[None]
        h2 = nn.apply(P, CFG, seq, interventions=iv1, collect=(L,)).hidden[L]
        valid = jnp.arange(m + k + 1)[None] < m  # prompt and token 0, not span 1
        valid = valid | (jnp.arange(m + k + 1)[None] == m + k)
        m2, _ = memory.inject(
            AP, cfg, h2, valid, jnp.array([m + k + 1]), jnp.array([0]), jnp.array([k])
        )
        # the full expanded row, uncached, blocks <= l hiding both spans
        toks = [*np.asarray(PROMPT[b, :m]), *[0] * k, t0, *[0] * k, *np.asarray(g.tokens[b, 1:])]
        toks = jnp.asarray(toks, jnp.int32)[None]
        n = toks.shape[1]
        e = jnp.arange(n)
        span = ((e >= m) & (e < m + k)) | ((e >= m + k + 1) & (e < m + 2 * k + 1))
        causal = e[None, :] <= e[:, None]
        low = (causal & (~span[None, :] | (e[None, :] == e[:, None])))[None]
        pos = e[None]
        lo = nn.run_layers(P, CFG, nn.embed(P, CFG, toks), pos, stop=L + 1, attn_mask=low)
        mem = jnp.zeros((1, n, CFG.d_model)).at[:, m : m + k].set(m1[:, :k])
        mem = mem.at[:, m + k + 1 : m + 2 * k + 1].set(m2[:, :k])
        h = jnp.where(span[None, :, None], mem, lo.h)
        up = nn.run_layers(P, CFG, h, pos, start=L + 1, attn_mask=causal[None])
        lg = nn.unembed(P, CFG, up.h)[0]
        reads = [m + k - 1, m + 2 * k] + list(range(m + 2 * k + 1, n - 1))
        np.testing.assert_array_equal(
            np.argmax(np.asarray(lg[jnp.asarray(reads)]), -1), g.tokens[b]
        )
    np.testing.assert_array_equal(g.n_injections, 2)


def test_memory_of_budget_k_reads_only_the_first_k_latents():
    # Z_{1:k} only (spec Eq. 5): latents past k change nothing in the first k tokens
    h = jax.random.normal(jax.random.key(4), (2, 5, CFG.d_model))
    args = (h, jnp.ones((2, 5), bool), PLEN, jnp.array([0, 1]), jnp.array([1, 1]))
    m1, _ = memory.inject(AP, MC, *args)
    banks = tuple(z.at[1:].add(1.0) for z in AP.banks)
    m2, _ = memory.inject(AP._replace(banks=banks), MC, *args)
    np.testing.assert_allclose(m1[:, :1], m2[:, :1], rtol=1e-6, atol=1e-6)
    assert not np.allclose(m1[:, 1:], m2[:, 1:])


def test_the_injector_on_the_filled_prefix_equals_it_on_the_whole_context():
    # dlmr_generate's injector context: text entries in order, ``ctx_pos`` their slots; it
    # runs on the narrowest static width that holds every row's filled entries
    from types import SimpleNamespace

    from jaxkit.memory._dlmr import inject_traced
    from jaxkit.memory._generate import _context_widths, _memory

    assert _context_widths(20) == (8, 16, 20) and _context_widths(48) == (16, 24, 48)
    assert _context_widths(5) == (5,)
    width = 3
    ctx = jax.random.normal(jax.random.key(4), (2, 20, CFG.d_model))
    bank, k = jnp.array([0, 1]), jnp.array([3, 1])
    injected = jnp.array([0, 4], jnp.int32)  # row 1: a 4-token memory after its slot 1
    j = jnp.arange(20, dtype=jnp.int32)[None, :]

    @jax.jit  # one program for the three fillings (eager, each call compiled its switch)
    def both(n):
        valid = j < n[:, None]
        pos = jnp.where(valid, jnp.where(j < 2, j, j + injected[:, None]), 99)
        st = SimpleNamespace(ctx=ctx, ctx_pos=pos, injected=injected, mem_slot=jnp.zeros((2, 99)))
        at = n + injected
        got = _memory(AP, st, at, bank, k, cfg=MC, width=width, lm=(None, None))
        want, _ = inject_traced(AP, MC, ctx, valid, at, bank, k, width, None, None, pos)
        return got, want, valid, at

    for filled in ((3, 7), (9, 12), (3, 17)):  # widths 8, 16, 20
        got, want, valid, at = both(jnp.array(filled, jnp.int32))
        np.testing.assert_allclose(got, want, atol=1e-5)
    # the slots matter (row 1's distances): the default slots (entry index) differ (`at` kept
    # within the context's 20 slots, as `inject` requires)
    at = jnp.minimum(at, ctx.shape[1])
    assert not np.allclose(got, memory.inject(AP, MC, ctx, valid, at, bank, k)[0][:, :width])


def test_router_standardize_fits_its_features():
    # fresh: the constants are the identity; fitted: each feature has mean 0, std 1 over
    # the sample states, the MLP reads them (logits change), and no gradient reaches them
    rng = np.random.default_rng(5)
    h = jnp.asarray(rng.normal(size=(64, LM.d_model)) + np.linspace(0.0, 5.0, LM.d_model), "f4")

    @jax.jit  # one program (eager, each of these small ops compiled on its own)
    def run(router, h):
        r = router.standardize(h)
        g = jax.grad(lambda rt: jnp.sum(rt(h) ** 2))(r)
        return jax.vmap(router.norm)(h), router.features(h), r.features(h), r(h), router(h), g

    ln, feats, f, lg_fit, lg, g = run(AP.router, h)
    np.testing.assert_allclose(np.asarray(feats), np.asarray(ln), atol=1e-6)
    f = np.asarray(f)
    np.testing.assert_allclose(f.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(f.std(0), 1.0, atol=1e-3)
    assert np.abs(np.asarray(lg_fit) - np.asarray(lg)).max() > 1e-2
    assert float(jnp.abs(g.mean).max()) == 0.0 and float(jnp.abs(g.scale).max()) == 0.0
