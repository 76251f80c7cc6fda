"""``svgt_generate(interventions=...)``: SVGT composed with other residual-stream edits.

The oracle is the backbone's own forward: the bridge as an ``nn.Interventions`` insertion
after block ``l`` joined with the user's edits (``nn.combine_interventions``), run by
``nn.apply`` on ``[prompt ; K reserved slots ; generated]`` for every new token.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, nn, steering
from jaxkit.steering._svgt import make_bridge
from tests.steering._setup import CFG, PLEN, PROMPT, SC, SEQ, VP, P

K, L = SC.n_bridge, SC.layer
N = 4
_rng = np.random.default_rng(7)
# a [D] edit below the bridge, a per-row [B, D] edit at the bridge's block, one above it
EDITS = {
    0: jnp.asarray(_rng.normal(size=16), jnp.float32),
    L: jnp.asarray(2.0 * _rng.normal(size=(2, 16)), jnp.float32),
    2: jnp.asarray(_rng.normal(size=16), jnp.float32),
}
IV = nn.Interventions(EDITS)


@jax.jit
def _edited_logits(iv, seq):
    """``nn.apply``'s logits of ``seq`` with the bridge inserted and ``iv``'s edits."""
    b, p = PROMPT.shape
    # the value module reads the block-l states of the prompt under the edits at blocks <= l
    pos = jnp.broadcast_to(jnp.arange(p), (b, p))
    h = nn.run_layers(P, CFG, nn.embed(P, CFG, PROMPT), pos, stop=L + 1, interventions=iv).h
    bridge, _ = make_bridge(VP, SC, h, PLEN)
    ins = nn.Interventions(insert_layer=L, insert_at=PLEN, latents=bridge)
    return nn.apply(P, CFG, seq, interventions=nn.combine_interventions(iv, ins)).logits


def _oracle(iv, n):
    """Greedy tokens of :func:`_edited_logits`, token by token (no cache)."""
    b, p = PROMPT.shape
    rows = [list(np.asarray(PROMPT[r, : int(PLEN[r])])) + [0] * K for r in range(b)]
    width = p + K + n  # one shape for every step (causal: the padding after is never read)
    out = []
    for _ in range(n):
        seq = jnp.asarray([r + [0] * (width - len(r)) for r in rows], jnp.int32)
        logits = _edited_logits(iv, seq)
        last = jnp.asarray([len(r) - 1 for r in rows])
        tok = np.asarray(jnp.argmax(logits[jnp.arange(b), last], -1))
        out.append(tok)
        rows = [r + [int(t)] for r, t in zip(rows, tok, strict=True)]
    return np.stack(out, axis=1)


def test_edits_act_with_the_bridge_as_the_backbones_insertion():
    kw = dict(key=jax.random.key(0), max_new_tokens=N, interventions=IV)
    cached = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, **kw).tokens
    np.testing.assert_array_equal(cached, _oracle(IV, N))
    # the edits change the generation (else the oracle above proves nothing)
    plain = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, key=kw["key"], max_new_tokens=N)
    assert not np.array_equal(plain.tokens, cached)


@jax.jit
def _forward_oracle(iv):
    """``nn.apply`` on ``SEQ`` with K reserved slots after each prompt, the bridge inserted."""
    b, t = SEQ.shape
    pos = jnp.broadcast_to(jnp.arange(t), (b, t))  # the value module reads rows < M only
    h = nn.run_layers(P, CFG, nn.embed(P, CFG, SEQ), pos, stop=L + 1, interventions=iv).h
    bridge, _ = make_bridge(VP, SC, h, PLEN)
    expanded, _ = steering.insert_bridge(
        SEQ[:, :, None].astype(jnp.float32), jnp.zeros((b, K, 1)), PLEN
    )
    ins = nn.Interventions(insert_layer=L, insert_at=PLEN, latents=bridge)
    seq = expanded[:, :, 0].astype(jnp.int32)  # [prompt ; K zeros ; response]
    return nn.apply(P, CFG, seq, interventions=nn.combine_interventions(iv, ins)).logits


def test_training_forward_under_edits():
    got = steering.svgt_forward(P, CFG, VP, SC, SEQ, PLEN, interventions=IV).logits
    np.testing.assert_allclose(got, _forward_oracle(IV), atol=2e-5, rtol=1e-5)
    plain = steering.svgt_forward(P, CFG, VP, SC, SEQ, PLEN).logits
    assert np.max(np.abs(np.asarray(got - plain))) > 1e-2  # the edits moved the logits
    with pytest.raises(ValueError, match="`interventions.read_mlp` has no output here"):
        steering.svgt_forward(
            P, CFG, VP, SC, SEQ, PLEN, interventions=nn.Interventions(read_mlp=(0,))
        )


@pytest.mark.slow
def test_recompute_and_an_edit_at_the_bridge_block_alone():
    # the uncached generator under the same edits (the cached one is the default-tier test
    # above); then the edit at block l alone through the cached generator: the oracle adds
    # it to the bridge rows (insertion, then the edit), a generator that skipped those rows
    # gives other tokens
    for iv, mode in ((IV, "recompute"), (nn.Interventions({L: EDITS[L]}), "cached")):
        kw = dict(key=jax.random.key(0), max_new_tokens=N, interventions=iv)
        got = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, mode=mode, **kw).tokens
        np.testing.assert_array_equal(
            got, _oracle(iv, N), err_msg=f"{mode}, edits at {sorted(iv.add)}"
        )


@pytest.mark.slow
def test_refreshing_generators_agree_under_edits_and_adapter_off_is_ar():
    sr = SC._replace(layer=0, refresh_every=2, ema=0.5)
    iv = nn.Interventions({0: EDITS[L], 1: EDITS[0]})
    kw = dict(key=jax.random.key(0), max_new_tokens=6, interventions=iv)
    cached = steering.svgt_generate(P, CFG, VP, sr, PROMPT, PLEN, **kw).tokens
    recomp = steering.svgt_generate(P, CFG, VP, sr, PROMPT, PLEN, mode="recompute", **kw)
    np.testing.assert_array_equal(cached, recomp.tokens)
    plain = steering.svgt_generate(P, CFG, VP, sr, PROMPT, PLEN, key=kw["key"], max_new_tokens=6)
    assert not np.array_equal(plain.tokens, cached)
    off = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, enabled=False, **kw)
    base = decoding.ar_generate(P, CFG, PROMPT, PLEN, **kw)
    np.testing.assert_array_equal(off.tokens, base.tokens)


def test_bad_interventions_name_the_argument():
    kw = dict(key=jax.random.key(0), max_new_tokens=2)

    def call(iv):
        return steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, interventions=iv, **kw)

    at = jnp.array([1, 1])
    cases = [
        # (the suite's runtime type checker answers first here, naming the parameter)
        ({1: jnp.ones(16)}, TypeError, "interventions"),
        (nn.Interventions({1: jnp.ones(15)}), TypeError, r"`interventions.add\[1\]`"),
        (nn.Interventions({1: jnp.ones((2, 5, 16))}), TypeError, r"`interventions.add\[1\]`"),
        (nn.Interventions({3: jnp.ones(16)}), ValueError, "`interventions.add` layer index"),
        (nn.Interventions(read_mlp=(0,)), ValueError, "`interventions.read_mlp`"),
        # NaN: every logit NaN, the arg-max token 0, silently (the guard's runtime error)
        (nn.Interventions({2: jnp.full(16, jnp.nan)}), Exception, r"`interventions.add\[2\]`"),
        (
            nn.Interventions(insert_layer=0, insert_at=at, n_insert=1),
            ValueError,
            "`interventions` inserts a span",
        ),
    ]
    for iv, cls, msg in cases:
        with pytest.raises(cls, match=msg):
            jax.block_until_ready(call(iv))
