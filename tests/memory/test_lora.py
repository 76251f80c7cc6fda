"""The LoRA-replica injector (spec §4.2 / §4.4 oracle 2): zero LoRA is the frozen LM,
a LoRA is a merge-free view that never touches the backbone, one adapter per bank."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import memory, nn, privacy
from tests.memory._setup import CFG, PLEN, PROMPT, P

LC = memory.DLMRConfig(
    layer=1,
    bank_sizes=(4, 4),
    budgets=(1, 3),
    n_max=1,
    injector="lora_replica",
    lora_rank=2,
)
FRESH = memory.init_dlmr(CFG, LC, key=jax.random.key(3))
L = CFG.n_layers
_rng = np.random.default_rng(11)
TOK = jnp.asarray(_rng.integers(0, 23, (2, 6)), jnp.int32)
AT_NP, BANK_NP, K_NP = np.array([4, 6], np.int32), np.array([0, 1], np.int32), np.array([3, 1])
AT, BANK, K = jnp.asarray(AT_NP), jnp.asarray(BANK_NP), jnp.asarray(K_NP)


def _trained(ap):
    """Non-zero ``a`` factors (PEFT's lora_B): a LoRA that changes the replica."""

    def f(x, key=[0]):  # noqa: B006  (a counter for distinct keys)
        if isinstance(x, privacy.LoraFactors):
            key[0] += 1
            return x._replace(a=0.3 * jax.random.normal(jax.random.key(key[0]), x.a.shape))
        return x

    adapters = tuple(
        jax.tree.map(f, a, is_leaf=lambda x: isinstance(x, privacy.LoraFactors))
        for a in ap.injector.adapters
    )
    return ap._replace(injector=_with(ap.injector, adapters))


def _with(inj, adapters):
    return eqx.tree_at(lambda i: i.adapters, inj, adapters)


@jax.jit  # one program for both banks' adapters (eager: one per op and shape)
def _merged(adapter, scale):
    """``W + scale (a b^T)^T`` written out here (the test's own merge)."""
    out = {**P, "layers": dict(P["layers"])}
    for name, f in adapter["layers"].items():
        if f is not None:
            out["layers"][name] = P["layers"][name] + scale * jnp.einsum("lnr,lmr->lnm", f.b, f.a)
    return out


def _replica_oracle(params, ap, b):
    """The LM (``params``) on ``[E_<at ; Z^(bank)_{1:k}]``: last-block states at the latents."""
    m, k, s = int(AT_NP[b]), int(K_NP[b]), int(BANK_NP[b])
    # the glue in NumPy (the embedding is per token: rows of the whole batch's)
    seq = np.concatenate([np.asarray(nn.embed(P, CFG, TOK))[b, :m], np.asarray(ap.banks[s])[:k]])
    out = nn.apply(params, CFG, inputs_embeds=seq[None], collect=(L - 1,)).hidden[L - 1]
    return np.asarray(out)[0, m:]


def _inject(ap):
    ctx, _ = memory.context_states(P, CFG, LC, nn.embed(P, CFG, TOK))
    valid = jnp.ones(ctx.shape[:2], bool)
    return memory.inject(ap, LC, ctx, valid, AT, BANK, K, lm_params=P, lm_cfg=CFG)[0]


def test_zero_lora_is_the_frozen_lm_forward():
    mem = np.asarray(_inject(FRESH))
    for b in range(2):
        np.testing.assert_allclose(mem[b, : K_NP[b]], _replica_oracle(P, FRESH, b), atol=1e-5)


def test_lora_is_a_merge_free_view_with_one_adapter_per_bank():
    before = jax.tree.map(np.array, P)
    ap = _trained(FRESH)
    mem = np.asarray(_inject(ap))
    for b in range(2):
        ad = ap.injector.adapters[BANK_NP[b]]
        want = _replica_oracle(_merged(ad, LC.lora_alpha / LC.lora_rank), ap, b)
        np.testing.assert_allclose(mem[b, : K_NP[b]], want, atol=1e-4)
        assert not np.allclose(want, _replica_oracle(P, ap, b), atol=1e-3)  # the LoRA acts
    # the other bank's adapter gives another memory for the same row
    other = _inject(ap._replace(injector=_with(ap.injector, ap.injector.adapters[::-1])))
    assert not np.allclose(np.asarray(other)[0, :3], mem[0, :3], atol=1e-3)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, P), before)


@pytest.mark.slow
def test_generation_with_the_replica_equals_the_uncached_forward_and_null_is_the_base():
    cfg = memory.DLMRConfig(**{**LC.__dict__, "delimiter_ids": ()})
    ap = _trained(FRESH)
    emb = nn.embed(P, CFG, PROMPT)
    kw = dict(key=jax.random.key(0), max_new_tokens=4)
    g = memory.dlmr_generate(P, CFG, ap, cfg, emb, PLEN, force_action=4, **kw)  # (r, k=3)
    null = memory.dlmr_generate(P, CFG, ap, cfg, emb, PLEN, force_action=0, **kw)
    base = memory.dlmr_generate(P, CFG, FRESH, cfg, emb, PLEN, force_action=0, **kw)
    np.testing.assert_array_equal(null.tokens, base.tokens)  # LoRA never on the decode path
    k = 3
    for b in range(2):
        m = int(PLEN[b])
        toks = np.concatenate([np.asarray(PROMPT[b, :m]), np.zeros(k, np.int32), g.tokens[b]])
        toks = jnp.asarray(toks)[None]
        mem, _ = memory.inject(
            ap,
            cfg,
            nn.embed(P, CFG, toks[:, :m]),
            jnp.ones((1, m), bool),
            jnp.array([m]),
            jnp.array([1]),
            jnp.array([k]),
            lm_params=P,
            lm_cfg=CFG,
        )
        iv = memory.memory_interventions(cfg, mem[:, :k], jnp.array([m]))
        logits = nn.apply(P, CFG, toks, interventions=iv).logits[0]
        want = np.argmax(np.asarray(logits[m + k - 1 : m + k - 1 + 4]), axis=-1)
        np.testing.assert_array_equal(g.tokens[b], want)


@pytest.mark.slow
def test_stage2_trains_the_adapters_and_keeps_the_backbone():
    before = jax.tree.map(np.array, P)
    emb = nn.embed(P, CFG, TOK)
    ctx, _ = memory.context_states(P, CFG, LC, emb)
    labels = jnp.concatenate([TOK[:, 1:], jnp.full((2, 1), -1, jnp.int32)], axis=1)
    batch = (emb, labels, ctx, AT, jnp.array([2, 4], jnp.int32))
    tx = memory.dlmr_optimizer(2, lr=3e-2)
    p, st = FRESH, tx.init(FRESH)
    losses = []
    for _ in range(6):
        p, st, loss, _ = memory.dlmr_step(2, p, st, batch, tx=tx, cfg=LC, lm_params=P, lm_cfg=CFG)
        losses.append(float(loss))
    assert losses[-1] < losses[0], losses
    a0 = [f.a for f in jax.tree.leaves(p.injector.adapters[0], is_leaf=_is_f) if _is_f(f)]
    assert any(np.abs(np.asarray(a)).max() > 0 for a in a0)  # lora_B left zero
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, P), before)


def _is_f(x):
    return isinstance(x, privacy.LoraFactors)


def test_bad_input():
    ctx = jnp.ones((2, 6, CFG.d_model))
    with pytest.raises(TypeError, match="lm_params"):
        memory.inject(FRESH, LC, ctx, jnp.ones((2, 6), bool), AT, BANK, K)
    with pytest.raises(ValueError, match="lora_targets"):
        memory.DLMRConfig(layer=0, injector="lora_replica", lora_targets=("q", "x"))
    with pytest.raises(ValueError, match="injector"):
        memory.DLMRConfig(layer=0, injector="big")


def test_audit_lora_apply_nan_scale_raises():
    # wave-24 audit: a NaN scale was a NaN backbone
    lc = memory.DLMRConfig(
        layer=1, bank_sizes=(4, 4), budgets=(1, 3), injector="lora_replica", lora_rank=2
    )
    ad = memory.init_dlmr(CFG, lc, key=jax.random.key(3)).injector.adapters[0]
    with pytest.raises(ValueError, match="scale"):
        memory.lora_apply(P, ad, float("nan"))
