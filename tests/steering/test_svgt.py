"""SVGT and the steering baselines: the spec's oracles (sequence.md §3.4)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, nn, steering
from tests._sampling_args import assert_same_errors, assert_traced_errors
from tests.steering._setup import CFG, PLEN, PROMPT, SC, SEQ, SEQ_LEN, VP, P

K, L = SC.n_bridge, SC.layer


class _LinearDisc(eqx.Module):
    w: jax.Array
    c: jax.Array

    def __call__(self, z):
        return z @ self.w + self.c


def test_value_correction_is_a_newton_step_onto_the_boundary():
    rng = np.random.default_rng(0)
    disc = _LinearDisc(jnp.asarray(rng.normal(size=8), jnp.float32), jnp.float32(0.3))
    z = jnp.asarray(rng.normal(size=(16, 8)), jnp.float32)
    dz = steering.value_correction(disc, z)
    s = np.asarray(disc(z))
    after = np.asarray(disc(z + dz))
    assert (s > 0).any() and (s <= 0).any()
    np.testing.assert_array_less(np.abs(after[s > 0]), 1e-5)
    np.testing.assert_array_equal(np.asarray(dz)[s <= 0], 0.0)


def test_insert_bridge_ragged_equals_rowwise():
    rng = np.random.default_rng(1)
    h = jnp.asarray(rng.normal(size=(2, 6, 4)), jnp.float32)
    br = jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32)
    out, pos = steering.insert_bridge(h, br, jnp.array([2, 5]))
    for b, m in enumerate((2, 5)):
        want = np.concatenate([h[b, :m], br[b], h[b, m:]])
        np.testing.assert_array_equal(out[b], want)
    np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(9), (2, 9)))


def test_forward_prompt_logits_are_the_base_models():
    f = steering.svgt_forward(P, CFG, VP, SC, SEQ, PLEN)
    base = nn.apply(P, CFG, SEQ).logits
    for b, m in enumerate(np.asarray(PLEN)):
        np.testing.assert_allclose(f.logits[b, :m], base[b, :m], atol=1e-5)
    assert f.logits.shape == (2, 9 + K, CFG.vocab_size)


def test_generation_cached_equals_recompute():
    kw = dict(key=jax.random.key(0), max_new_tokens=4)
    cached = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, **kw)
    recomp = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, mode="recompute", **kw)
    np.testing.assert_array_equal(cached.tokens, recomp.tokens)


@pytest.mark.slow
def test_generation_adapter_off_equals_base():
    kw = dict(key=jax.random.key(0), max_new_tokens=4)
    off = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, enabled=False, **kw)
    base = decoding.ar_generate(P, CFG, PROMPT, PLEN, **kw)
    np.testing.assert_array_equal(off.tokens, base.tokens)


def test_exact_refresh_equals_a_fresh_prefill():
    rng = np.random.default_rng(2)
    old, new = (jnp.asarray(rng.normal(size=(2, K, 16)), jnp.float32) for _ in range(2))
    res = jnp.asarray(rng.integers(0, 23, (2, 2)), jnp.int32)
    # [prompt ; K reserved ; 2 response tokens] per row, prompt lengths 3 and 5
    toks = np.zeros((2, 5 + K + 2), np.int32)
    for b, m in enumerate(np.asarray(PLEN)):
        toks[b, :m], toks[b, m + K : m + K + 2] = PROMPT[b, :m], res[b]
    lens = PLEN + K + 2

    def pre(br):
        iv = nn.Interventions(insert_layer=L, insert_at=PLEN, latents=br)
        return nn.prefill(P, CFG, toks, lens, max_len=12, interventions=iv).cache

    got = steering.refresh_bridge(P, CFG, pre(old), new, PLEN, layer=L)
    want = pre(new)
    for b, m in enumerate(np.asarray(PLEN)):
        span = slice(int(m), int(m) + K)
        np.testing.assert_allclose(got.k[L + 1 :, b, span], want.k[L + 1 :, b, span], atol=1e-5)
        np.testing.assert_allclose(got.v[L + 1 :, b, span], want.v[L + 1 :, b, span], atol=1e-5)
        # blocks <= l and every other slot untouched
        np.testing.assert_array_equal(got.k[: L + 1], pre(old).k[: L + 1])
    np.testing.assert_array_equal(got.length, lens)


@pytest.mark.slow
def test_stage3_gradient_reaches_only_the_generator():
    loss = lambda vp: steering.stage3_loss(vp, P, SEQ, PLEN, SEQ_LEN, lm_cfg=CFG, cfg=SC)[0]  # noqa: E731
    g = jax.jit(jax.grad(loss))(VP)
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves((g.encoder, g.disc)))
    assert any(np.any(np.asarray(x) != 0) for x in jax.tree.leaves(g.bridge))


@pytest.mark.slow
def test_stage3_training_keeps_the_backbone_bit_identical():
    before = jax.tree.map(np.array, P)
    vp, tx = VP, steering.svgt_optimizer(3)
    st = tx.init(vp)
    for i in range(2):
        vp, st, loss, aux = steering.svgt_step(
            3,
            vp,
            st,
            (SEQ, PLEN, SEQ_LEN),
            tx=tx,
            key=jax.random.key(i),
            lm_params=P,
            lm_cfg=CFG,
            cfg=SC,
        )
    assert np.isfinite(float(loss)) and float(aux.ce) > 0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, P), before)
    jax.tree.map(np.testing.assert_array_equal, vp.encoder, VP.encoder)  # frozen in stage 3
    pairs = zip(jax.tree.leaves(vp.bridge), jax.tree.leaves(VP.bridge), strict=True)
    assert any(np.any(a != b) for a, b in pairs)


@pytest.mark.slow
def test_stage1_and_2_losses_decrease_on_a_separable_toy():
    h = steering.hidden_at(P, CFG, SEQ, layer=L)
    lab = jnp.array([0, 1])
    mask = jnp.arange(9)[None] < SEQ_LEN[:, None]
    pm = jnp.arange(9)[None] < PLEN[:, None]
    for stage, batch in ((1, (h, mask, lab)), (2, (h, pm, mask & ~pm, lab))):
        tx = steering.svgt_optimizer(stage, lr=1e-2)
        vp, st = VP, tx.init(VP)
        losses = []
        for i in range(15):
            vp, st, loss, _ = steering.svgt_step(stage, vp, st, batch, tx=tx, key=jax.random.key(i))
            losses.append(float(loss))
        assert losses[-1] < 0.5 * losses[0], (stage, losses)
        jax.tree.map(np.testing.assert_array_equal, vp.bridge, VP.bridge)  # not in stages 1-2


def test_caa_vector_is_the_mean_difference():
    # negatives: the prompts inside SEQ (same array shape: one compiled program)
    v = steering.caa_vector(P, CFG, SEQ, SEQ_LEN, SEQ, PLEN, layer=L)
    hs = np.asarray(nn.apply(P, CFG, SEQ, collect=(L,)).hidden[L], np.float64)
    rows = np.arange(2)
    want = hs[rows, np.asarray(SEQ_LEN) - 1].mean(0) - hs[rows, np.asarray(PLEN) - 1].mean(0)
    np.testing.assert_allclose(v, want, atol=1e-5)
    iv = steering.steer_add(v, 2.0, layer=L)
    np.testing.assert_allclose(iv.add[L], 2.0 * v)


def test_prefix_prompts():
    out, ln = steering.prefix_prompts(PROMPT, PLEN, jnp.array([7, 8]))
    np.testing.assert_array_equal(out[:, :2], [[7, 8], [7, 8]])
    np.testing.assert_array_equal(out[:, 2:], PROMPT)
    np.testing.assert_array_equal(ln, PLEN + 2)


def test_save_restore_adapter(tmp_path):
    steering.save_adapter(tmp_path / "svgt", VP)
    like = steering.init_svgt(CFG, SC, key=jax.random.key(9))
    back = steering.restore_adapter(tmp_path / "svgt", like)
    jax.tree.map(np.testing.assert_array_equal, back, VP)
    with pytest.raises(FileNotFoundError, match="path"):
        steering.restore_adapter(tmp_path / "none", like)


def test_bad_inputs():
    with pytest.raises(ValueError, match="layer"):
        steering.init_svgt(CFG, SC._replace(layer=3), key=jax.random.key(0))
    with pytest.raises(ValueError, match="layer"):
        steering.caa_vector(P, CFG, SEQ, SEQ_LEN, PROMPT, PLEN, layer=-1)
    with pytest.raises(ValueError, match="layer"):
        steering.svgt_step(
            3,
            VP,
            None,
            (SEQ, PLEN, SEQ_LEN),
            tx=None,
            key=None,
            lm_params=P,
            lm_cfg=CFG,
            cfg=SC._replace(layer=2),
        )
    with pytest.raises(TypeError, match="bridge"):
        steering.insert_bridge(jnp.zeros((2, 4, 3)), jnp.zeros((2, 1, 5)), PLEN)
    with pytest.raises(TypeError, match="z"):
        steering.value_correction(VP.disc, jnp.zeros(8))
    with pytest.raises(ValueError, match="prompt_len"):
        steering.svgt_generate(
            P, CFG, VP, SC, PROMPT, jnp.array([0, 6]), key=jax.random.key(0), max_new_tokens=2
        )
    with pytest.raises(ValueError, match="mode"):
        steering.svgt_generate(
            P, CFG, VP, SC, PROMPT, PLEN, key=jax.random.key(0), max_new_tokens=2, mode="fast"
        )
    with pytest.raises(ValueError, match="stage"):
        steering.svgt_optimizer(4)
    small = nn.init_cache(CFG, max_len=4, batch=2)  # prompt (5) + bridge do not fit
    with pytest.raises(ValueError, match="cache|capacity|max_len"):
        steering.refresh_bridge(P, CFG, small, jnp.zeros((2, K, 16)), PLEN, layer=L)
    # the cache's own lengths: integers in [0, S] (copied to the result as they are)
    big = nn.init_cache(CFG, max_len=12, batch=2)
    for length, err in ((jnp.array([-1, 3]), ValueError), (jnp.full(2, 2.5), TypeError)):
        with pytest.raises(err, match="`cache.length`"):
            steering.refresh_bridge(
                P, CFG, big._replace(length=length), jnp.zeros((2, K, 16)), PLEN, layer=L
            )


def test_audit_bad_inputs():
    # each raises before anything runs (wave-24 audit: were silent NaN / wrong results)
    nan = float("nan")
    h, m, lab = jnp.zeros((2, 9, 16)), jnp.ones((2, 9), bool), jnp.array([0, 1])
    for bad, err, name in (
        (lambda: steering.init_svgt(CFG, SC._replace(grad_step=nan), key=jax.random.key(0)),
         ValueError, "`grad_step`"),
        (lambda: steering.init_svgt(CFG, SC._replace(n_heads=0), key=jax.random.key(0)),
         ValueError, "`n_heads`"),
        (lambda: steering.insert_bridge(h, jnp.zeros((2, K, 16)), jnp.array([3, 10])),
         ValueError, "prompt_len"),
        (lambda: steering.refresh_bridge(
            P, CFG, nn.init_cache(CFG, max_len=12, batch=2), jnp.zeros((2, K, 16)),
            jnp.array([3.0, 5.0]), layer=L), TypeError, "prompt_len"),
        (lambda: steering.caa_vector(P, CFG, SEQ[:0], SEQ_LEN[:0], PROMPT, PLEN, layer=L),
         TypeError, "positive"),
        (lambda: steering.prefix_prompts(PROMPT, jnp.array([1.5, 2.0]), jnp.array([7])),
         TypeError, "prompt_len"),
        (lambda: steering.prefix_prompts(PROMPT, jnp.array([-1, 2]), jnp.array([7])),
         ValueError, "prompt_len"),
        (lambda: steering.steer_add(jnp.ones(16), 1.0, layer=-1), ValueError, "layer"),
        (lambda: steering.steer_add(np.full(16, nan, np.float32), 1.0, layer=1), ValueError,
         "vector"),  # NaN activations before (wave 25)
        (lambda: steering.stage1_loss(VP, h, m, jnp.array([2.0, nan])), ValueError, "labels"),
        (lambda: steering.stage1_loss(VP, h, m.astype(jnp.float32), lab), TypeError, "mask"),
        (lambda: steering.stage2_loss(VP, h, m, m[:, :3], lab), TypeError, "response_mask"),
        (lambda: steering.stage3_loss(VP, P, SEQ, PLEN, jnp.array([2, 99]), lm_cfg=CFG, cfg=SC),
         ValueError, "length"),
        (lambda: steering.stage3_loss(
            VP, P, SEQ, PLEN, SEQ_LEN, lm_cfg=CFG, cfg=SC, weights=(nan, 1.0, 1.0)),
         ValueError, "weights"),
        (lambda: steering.svgt_optimizer(2, old_lr=nan), ValueError, "old_lr"),
        (lambda: steering.svgt_optimizer(1, weight_decay=-1.0), ValueError, "weight_decay"),
        (lambda: steering.svgt_step(1, VP, None, (h, m, lab), tx=None, key=3), TypeError, "key"),
    ):  # fmt: skip
        with pytest.raises(err, match=name.replace(".", r"\.")):
            bad()


def test_sampling_arguments_raise_the_decoders_errors():
    # jaxkit._tokens' checks: the same bad temperature / top_p, the same error as
    # decoding.ar_generate on the same backbone (all raise before anything compiles)
    kw0 = dict(key=jax.random.key(0), max_new_tokens=2)

    def gen(**kw):
        return steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, **kw0, **kw)

    assert_same_errors(gen, lambda **kw: decoding.ar_generate(P, CFG, PROMPT, PLEN, **kw0, **kw))


def test_traced_bad_sampling_arguments_raise_under_jit():
    @jax.jit
    def run(t, p):  # one token: the smallest sampled program
        kw = dict(key=jax.random.key(0), max_new_tokens=1, temperature=t, top_p=p)
        return steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, **kw)

    assert_traced_errors(run)
