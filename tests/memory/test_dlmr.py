"""DLMR inference: the spec's oracles (sequence.md §4.4), bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, memory, nn
from tests.memory._setup import AP, CFG, DELIM, MC, PLEN, PROMPT, P

N = 6
KW = dict(key=jax.random.key(0), max_new_tokens=N)


def test_router_forced_none_equals_the_base_model():
    g = memory.dlmr_generate(P, CFG, AP, MC, nn.embed(P, CFG, PROMPT), PLEN, force_action=0, **KW)
    base = decoding.ar_generate(P, CFG, PROMPT, PLEN, **KW)
    np.testing.assert_array_equal(g.tokens, base.tokens)
    assert int(jnp.sum(g.injected)) == 0 and not bool(jnp.any(g.actions))


@pytest.mark.parametrize("action", [2, pytest.param(3, marks=pytest.mark.slow)])  # (v, 3), (r, 1)
def test_forced_injection_equals_the_uncached_forward(action):
    # every step eligible (no delimiter set) and n_max = 1: one injection, before token 0
    cfg = memory.DLMRConfig(**{**MC.__dict__, "delimiter_ids": ()})
    emb = nn.embed(P, CFG, PROMPT)
    g = memory.dlmr_generate(P, CFG, AP, cfg, emb, PLEN, force_action=action, **KW)
    bank_t, k_t = memory.action_table(cfg)
    k, bank = int(k_t[action]), int(bank_t[action])
    # every step eligible, n_max = 1: the injection comes before token 0, at slot plen
    np.testing.assert_array_equal(g.actions[:, 0], action)
    np.testing.assert_array_equal(g.injected, k)
    for b in range(2):
        m = int(PLEN[b])
        toks = np.concatenate([np.asarray(PROMPT[b, :m]), np.zeros(k, np.int32), g.tokens[b]])
        toks = jnp.asarray(toks)[None]
        h_l = nn.apply(P, CFG, toks[:, :m], collect=(cfg.layer,)).hidden[cfg.layer]
        mem, _ = memory.inject(
            AP, cfg, h_l, jnp.ones((1, m), bool), jnp.array([m]), jnp.array([bank]), jnp.array([k])
        )
        iv = memory.memory_interventions(cfg, mem[:, :k], jnp.array([m]))
        logits = nn.apply(P, CFG, toks, interventions=iv).logits[0]
        want = np.argmax(np.asarray(logits[m + k - 1 : m + k - 1 + N]), axis=-1)
        np.testing.assert_array_equal(g.tokens[b], want)


def test_injection_through_prefill_and_decode_steps_equals_the_full_forward():
    b, m, k = 2, 4, 3
    toks = jnp.asarray(np.random.default_rng(3).integers(0, 23, (b, m + k + 3)), jnp.int32)
    h_l = nn.apply(P, CFG, toks[:, :m], collect=(MC.layer,)).hidden[MC.layer]
    at = jnp.full((b,), m, jnp.int32)
    mem, _ = memory.inject(AP, MC, h_l, jnp.ones((b, m), bool), at, jnp.array([0, 1]), at * 0 + k)
    iv = memory.memory_interventions(MC, mem[:, :k], at)
    full = nn.apply(P, CFG, toks, interventions=iv).logits
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
    with pytest.raises(TypeError, match="ctx_valid"):
        memory.inject(AP, MC, jnp.ones((2, 4, 16)), jnp.ones((2, 3), bool), PLEN, PLEN, PLEN)
    with pytest.raises(ValueError, match="force_action"):
        memory.dlmr_generate(P, CFG, AP, MC, nn.embed(P, CFG, PROMPT), PLEN, force_action=9, **KW)
    with pytest.raises(ValueError, match="`k`"):
        memory.inject(
            AP, MC, jnp.ones((2, 4, 16)), jnp.ones((2, 4), bool), PLEN, PLEN * 0, PLEN * 3
        )
