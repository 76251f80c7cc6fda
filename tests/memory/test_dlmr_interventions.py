"""``dlmr_generate(interventions=...)``: steering a DLMR model while it decodes.

Oracles: with the router forced to the null it is ``decoding.ar_generate`` with the same
edits; a forced injection equals the uncached forward with the user's edits combined into
the memory's ``nn.Interventions`` (an edit at ``cfg.layer`` reaches the memory rows).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, memory, nn
from tests.memory._setup import AP, CFG, MC, NODELIM, PLEN, PROMPT, P

N = 6
KW = dict(key=jax.random.key(0), max_new_tokens=N)
PROMPT_NP, PLEN_NP = np.asarray(PROMPT), np.asarray(PLEN)
_rng = np.random.default_rng(1)
VEC = 0.8 * _rng.normal(size=CFG.d_model).astype(np.float32)  # [D]
ROWS = 0.8 * _rng.normal(size=(2, CFG.d_model)).astype(np.float32)  # [B, D]


def test_bad_interventions_raise_naming_them():
    # all raise in the eager checks, before anything compiles
    emb = nn.embed(P, CFG, PROMPT)

    def gen(iv):
        return memory.dlmr_generate(P, CFG, AP, NODELIM, emb, PLEN, interventions=iv, **KW)

    d = CFG.d_model
    # the suite's runtime type checker raises first (naming the parameter); without it,
    # `_tokens.check_interventions`: "`interventions` must be an nn.Interventions"
    with pytest.raises(TypeError, match="interventions"):
        gen({1: VEC})
    for vec in (np.ones(d + 1, np.float32), np.ones((3, d), np.float32), np.ones((2, 5, d), "f4")):
        with pytest.raises(TypeError, match=r"`interventions.add\[1\]` must have shape"):
            gen(nn.Interventions({1: vec}))
    for layer in (-1, CFG.n_layers):
        with pytest.raises(ValueError, match=r"`interventions.add` layer index must lie in"):
            gen(nn.Interventions({layer: VEC}))
    with pytest.raises(ValueError, match="`interventions.read_mlp`"):
        gen(nn.Interventions(read_mlp=(0,)))
    with pytest.raises(Exception, match=r"`interventions.add\[0\]` must be finite"):
        jax.block_until_ready(gen(nn.Interventions({0: np.full(CFG.d_model, np.inf, "f4")})))
    ins = nn.Interventions(insert_layer=1, insert_at=np.array([3, 5], np.int32), n_insert=1)
    with pytest.raises(ValueError, match="`interventions` inserts a span.*dlmr_generate"):
        gen(ins)


def test_steered_null_router_is_steered_ar_generate():
    # force_action=0: the base model, so the steered base model (ar_generate's edits) token
    # for token; the router reads the steered last-block state; edits change the tokens
    iv = nn.Interventions({0: VEC, 2: ROWS})  # [D] below cfg.layer, [B, D] at the top
    emb = nn.embed(P, CFG, PROMPT)
    g = memory.dlmr_generate(P, CFG, AP, MC, emb, PLEN, force_action=0, interventions=iv, **KW)
    want = decoding.ar_generate(P, CFG, PROMPT, PLEN, interventions=iv, **KW)
    np.testing.assert_array_equal(g.tokens, want.tokens)
    assert int(jnp.sum(g.injected)) == 0
    # router_h[:, i]: the steered model's last-block output at the position before token i
    # (rows right-padded: causal attention, the padding reads nothing earlier)
    toks = np.zeros((2, PROMPT.shape[1] + N), np.int32)
    for b in range(2):
        m = int(PLEN_NP[b])
        toks[b, : m + N] = np.concatenate([PROMPT_NP[b, :m], np.asarray(g.tokens[b])])
    top = CFG.n_layers - 1
    h = np.asarray(nn.apply(P, CFG, toks, collect=(top,), interventions=iv).hidden[top])
    for b in range(2):
        m = int(PLEN_NP[b])
        np.testing.assert_allclose(g.router_h[b], h[b, m - 1 : m - 1 + N], atol=1e-4)
    # an empty object is the plain program; the edits act
    plain = memory.dlmr_generate(
        P, CFG, AP, MC, emb, PLEN, force_action=0, interventions=nn.Interventions(), **KW
    )
    base = decoding.ar_generate(P, CFG, PROMPT, PLEN, **KW)
    np.testing.assert_array_equal(plain.tokens, base.tokens)
    assert not np.array_equal(np.asarray(g.tokens), np.asarray(plain.tokens))


def _steered_reference(toks, user, *, cfg, m, k, bank):
    """Greedy tokens of one row's uncached forward: the user's edits and the memory of m tokens.

    The memory reads the steered block-``l`` states; the user's edits and the memory span
    are combined into one ``nn.Interventions`` (at block ``l``: the latents, then the edit).
    """
    h_l = nn.apply(P, CFG, toks[:, :m], collect=(cfg.layer,), interventions=user)
    mem, _ = memory.inject(
        AP,
        cfg,
        h_l.hidden[cfg.layer],
        jnp.ones((1, m), bool),
        jnp.array([m]),
        jnp.array([bank]),
        jnp.array([k]),
    )
    span = memory.memory_interventions(cfg, mem[:, :k], jnp.array([m]))
    iv = nn.combine_interventions(user, span)
    logits = nn.apply(P, CFG, toks, interventions=iv).logits[0]
    return jnp.argmax(logits[m + k - 1 : m + k - 1 + N], axis=-1)


_steered_reference_jit = jax.jit(_steered_reference, static_argnames=("cfg", "m", "k", "bank"))


# layer 1: edits below, at ([B, D]: the memory rows get it) and above cfg.layer; layer 0
# (the same adapter: its shapes do not depend on the layer): two blocks above it, so the
# chunk runs a middle block before the last one
@pytest.mark.slow
@pytest.mark.parametrize("layer", [1, 0])
def test_steered_forced_injection_equals_the_uncached_forward(layer):
    # every step eligible, n_max = 1: one injection of k = 3 before token 0, at slot plen
    cfg, action = memory.DLMRConfig(**{**NODELIM.__dict__, "layer": layer}), 2
    adds = {0: VEC, 1: ROWS, 2: -VEC}
    emb = nn.embed(P, CFG, PROMPT)
    g = memory.dlmr_generate(
        P, CFG, AP, cfg, emb, PLEN, force_action=action, interventions=nn.Interventions(adds), **KW
    )
    bank_t, k_t = memory.action_table(cfg)
    k, bank = int(k_t[action]), int(bank_t[action])
    np.testing.assert_array_equal(g.actions[:, 0], action)
    np.testing.assert_array_equal(g.injected, k)
    plain = memory.dlmr_generate(P, CFG, AP, cfg, emb, PLEN, force_action=action, **KW)
    assert not np.array_equal(np.asarray(g.tokens), np.asarray(plain.tokens))  # edits act
    for b in range(2):
        m = int(PLEN_NP[b])
        toks = np.concatenate([PROMPT_NP[b, :m], np.zeros(k, np.int32), np.asarray(g.tokens)[b]])
        user = nn.Interventions({l: v if v.ndim == 1 else v[b : b + 1] for l, v in adds.items()})
        want = _steered_reference_jit(toks[None], user, cfg=cfg, m=m, k=k, bank=bank)
        np.testing.assert_array_equal(g.tokens[b], want)
