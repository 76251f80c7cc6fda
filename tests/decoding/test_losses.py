import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn
from jaxkit.decoding import (
    dual_stream_batch,
    dual_stream_mask,
    reorder_mlm_loss,
    topological_reorder,
    wedlm_loss,
)
from tests.decoding._models import MASK, V, tiny


@functools.cache  # one jitted forward per config, shared by the tests
def _apply_fn(cfg):
    return jax.jit(lambda p, t, q, m: nn.apply(p, cfg, t, q, attn_mask=m).logits)


def test_dual_stream_mask_equals_brute_force():
    L, bs = 7, 3
    got = np.asarray(dual_stream_mask(L, bs))
    want = np.zeros((2 * L, 2 * L), bool)
    for q in range(2 * L):
        for k in range(2 * L):
            qp, kp = q >= L, k >= L
            qi, ki = q % L, k % L
            if not qp and not kp:
                want[q, k] = ki <= qi
            elif qp and not kp:
                want[q, k] = ki // bs < qi // bs
            elif qp and kp:
                want[q, k] = (ki // bs == qi // bs) and ki <= qi
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("per_block", [True, False])
def test_dual_stream_batch_counts_and_reordering(per_block):
    B, L, bs = 4, 10, 4  # last block is partial
    rng = np.random.default_rng(0)
    tok = jnp.asarray(rng.integers(0, MASK, (B, L)), jnp.int32)
    lm = jnp.asarray(np.arange(L)[None, :] >= 2).repeat(B, 0)
    bt = dual_stream_batch(
        tok, lm, key=jax.random.key(3), block_size=bs, mask_token_id=MASK, per_block=per_block
    )
    pos = np.asarray(bt.positions[:, L:])
    mm = np.asarray(bt.mlm_mask)
    w = np.asarray(bt.mlm_weights)
    for b in range(B):
        # prediction stream is a within-block permutation, observed first (ascending)
        assert sorted(pos[b]) == list(range(L))
        np.testing.assert_array_equal(pos[b] // bs, np.arange(L) // bs)
        np.testing.assert_array_equal(np.asarray(bt.mlm_labels[b]), np.asarray(tok[b])[pos[b]])
        ids = np.asarray(bt.input_ids[b, L:])
        np.testing.assert_array_equal(ids == MASK, mm[b])
        for k in range(-(-L // bs)):
            sl = slice(k * bs, min((k + 1) * bs, L))
            blk_m, blk_p = mm[b, sl], pos[b, sl]
            n_m = blk_m.sum()
            assert not blk_m[: len(blk_m) - n_m].any()  # observed first
            assert (np.diff(blk_p[: len(blk_m) - n_m]) > 0).all()  # ascending
            assert (np.diff(blk_p[len(blk_m) - n_m :]) > 0).all()
            assert np.all(np.asarray(lm[b])[blk_p[blk_m]])  # only maskable masked
        # masked counts follow round(gamma * n) with gamma = 1/weight
        if per_block:
            for k in range(-(-L // bs)):
                sl = slice(k * bs, min((k + 1) * bs, L))
                if mm[b, sl].any():
                    g = 1.0 / w[b, sl][mm[b, sl]][0]
                    n = int(np.asarray(lm[b])[k * bs : min((k + 1) * bs, L)].sum())
                    assert mm[b, sl].sum() == int(np.round(g * n))
        elif mm[b].any():
            g = 1.0 / w[b][mm[b]][0]
            assert mm[b].sum() == int(np.round(g * int(np.asarray(lm[b]).sum())))
    # AR labels are shifted, masked on the prompt
    np.testing.assert_array_equal(bt.ar_labels[:, :-1], tok[:, 1:])
    np.testing.assert_array_equal(bt.ar_mask[:, :-1], lm[:, 1:])
    assert not bool(bt.ar_mask[:, -1].any())


def test_dual_stream_logits_equal_per_block_forwards():
    params, cfg = tiny(0)
    f = _apply_fn(cfg)
    B, L, bs = 2, 8, 4
    rng = np.random.default_rng(1)
    tok = jnp.asarray(rng.integers(0, MASK, (B, L)), jnp.int32)
    lm = jnp.ones((B, L), bool)
    bt = dual_stream_batch(tok, lm, key=jax.random.key(0), block_size=bs, mask_token_id=MASK)
    logits = f(
        params, bt.input_ids, bt.positions, jnp.broadcast_to(bt.attn_mask, (B, 2 * L, 2 * L))
    )
    # the references' inputs in NumPy (eager jnp glue compiled a program per op and shape)
    causal = np.broadcast_to(np.tril(np.ones((L, L), bool)), (B, L, L))
    tok_np, ids, qs = np.asarray(tok), np.asarray(bt.input_ids), np.asarray(bt.positions)
    logits = np.asarray(logits)
    # memory stream = ordinary causal forward
    mem = f(params, tok, np.broadcast_to(np.arange(L, dtype=np.int32), (B, L)), causal)
    np.testing.assert_allclose(logits[:, :L], mem, atol=1e-5, rtol=1e-5)
    for k in range(L // bs):
        # [x_{< block k} ; reordered block k], right-padded to L (causal => exact)
        t = np.zeros((B, L), np.int32)
        q = np.zeros((B, L), np.int32)
        t[:, : k * bs], t[:, k * bs : (k + 1) * bs] = (
            tok_np[:, : k * bs],
            ids[:, L + k * bs :][:, :bs],
        )
        q[:, : k * bs], q[:, k * bs : (k + 1) * bs] = np.arange(k * bs), qs[:, L + k * bs :][:, :bs]
        ref = np.asarray(f(params, t, q, causal))[:, k * bs : (k + 1) * bs]
        np.testing.assert_allclose(
            logits[:, L + k * bs : L + (k + 1) * bs], ref, atol=1e-5, rtol=1e-5
        )


def test_wedlm_loss_equals_hand_computed():
    params, cfg = tiny(1)
    f = _apply_fn(cfg)
    B, L, bs = 2, 8, 4
    rng = np.random.default_rng(2)
    tok = jnp.asarray(rng.integers(0, MASK, (B, L)), jnp.int32)
    lm = jnp.asarray(np.arange(L)[None, :] >= 1).repeat(B, 0)
    bt = dual_stream_batch(tok, lm, key=jax.random.key(5), block_size=bs, mask_token_id=MASK)
    assert int(bt.mlm_mask.sum()) > 0
    logits = np.asarray(
        f(params, bt.input_ids, bt.positions, jnp.broadcast_to(bt.attn_mask, (B, 2 * L, 2 * L))),
        np.float64,
    )
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    mm, w = np.asarray(bt.mlm_mask), np.asarray(bt.mlm_weights, np.float64)
    lab = np.asarray(bt.mlm_labels)
    num = den = 0.0
    for b in range(B):
        for i in range(L):
            if mm[b, i]:
                num += w[b, i] * -logp[b, L + i, lab[b, i]]
                den += w[b, i]
    mlm = num / den
    tok_np, lm_np = np.asarray(tok), np.asarray(lm)  # NumPy indexing: no eager programs
    ar_terms = [
        -logp[b, i, tok_np[b, i + 1]] for b in range(B) for i in range(L - 1) if lm_np[b, i + 1]
    ]
    ar = float(np.mean(ar_terms))
    # jitted (eager, the loss's small ops compiled some 40 programs); ar_weight is traced:
    # both weights run one program
    loss_fn = jax.jit(wedlm_loss, static_argnums=0, static_argnames="weighting")
    for wa in (1.0, 0.5):
        loss, m = loss_fn(f, params, bt, ar_weight=wa)
        np.testing.assert_allclose(float(m["mlm"]), mlm, rtol=1e-5)
        np.testing.assert_allclose(float(m["ar"]), ar, rtol=1e-5)
        np.testing.assert_allclose(float(loss), (mlm + wa * ar) / (1 + wa), rtol=1e-5)
    uni = np.mean([-logp[b, L + i, lab[b, i]] for b in range(B) for i in range(L) if mm[b, i]])
    _, m = loss_fn(f, params, bt, weighting="uniform")
    np.testing.assert_allclose(float(m["mlm"]), uni, rtol=1e-5)
    g = jax.jit(jax.grad(lambda p: wedlm_loss(f, p, bt)[0]))(params)  # eager: ~40 compiles
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(g))


def test_reorder_mlm_loss_matches_manual_reorder():
    params, cfg = tiny(2)
    f = _apply_fn(cfg)
    B, L = 2, 8
    rng = np.random.default_rng(3)
    tok = jnp.asarray(rng.integers(0, MASK, (B, L)), jnp.int32)
    lm = jnp.ones((B, L), bool)
    m = jnp.asarray([[0, 1, 0, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0, 1, 0]], bool)
    loss = reorder_mlm_loss(f, params, tok, m, lm, mask_token_id=MASK)
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    tp, pp, perm = topological_reorder(tok, pos, m, mask_token_id=MASK)
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((L, L), bool)), (B, L, L))
    lg = np.asarray(f(params, tp, pp, causal), np.float64)
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    num = den = 0.0
    m_np, tok_np = np.asarray(m), np.asarray(tok)  # NumPy indexing: no eager programs
    for b in range(B):
        g = float(m_np[b].sum()) / L
        n_obs = L - int(m_np[b].sum())
        for j, logical in enumerate(np.flatnonzero(m_np[b])):
            num += (1 / g) * -logp[b, n_obs + j, tok_np[b, logical]]  # own token, no shift
            den += 1 / g
    np.testing.assert_allclose(float(loss), num / den, rtol=1e-5)


def test_loss_bad_inputs():
    tok = jnp.zeros((2, 8), jnp.int32)
    with pytest.raises(TypeError, match="loss_mask"):
        dual_stream_batch(
            tok,
            jnp.ones((2, 8), jnp.int32),
            key=jax.random.key(0),
            block_size=4,
            mask_token_id=MASK,
        )
    with pytest.raises(ValueError, match="`block_size`"):
        dual_stream_batch(
            tok, jnp.ones((2, 8), bool), key=jax.random.key(0), block_size=0, mask_token_id=MASK
        )
    # a wrong type is a TypeError (True is not taken as 1)
    with pytest.raises(TypeError, match="`block_size`"):
        dual_stream_batch(
            tok, jnp.ones((2, 8), bool), key=jax.random.key(0), block_size=True, mask_token_id=MASK
        )
    with pytest.raises(TypeError, match="`length`"):
        dual_stream_mask(True, 2)
    params, cfg = tiny(0)
    bt = dual_stream_batch(
        tok, jnp.ones((2, 8), bool), key=jax.random.key(0), block_size=4, mask_token_id=MASK
    )
    with pytest.raises(ValueError, match="`weighting`"):
        wedlm_loss(_apply_fn(cfg), params, bt, weighting="nope")
    with pytest.raises(TypeError, match="batch"):
        wedlm_loss(_apply_fn(cfg), params, tuple(bt))
    with pytest.raises(TypeError, match="tokens"):
        dual_stream_batch(
            tok[:, :0], jnp.ones((2, 0), bool), key=jax.random.key(0), block_size=4, mask_token_id=0
        )
    with pytest.raises(TypeError, match="loss_mask"):
        reorder_mlm_loss(
            _apply_fn(cfg), params, tok, tok > 0, jnp.ones((2, 8), jnp.int32), mask_token_id=MASK
        )
    # a traced negative or NaN ar_weight raises under jit (it gave a NaN or negative loss)
    f = jax.jit(lambda w: wedlm_loss(_apply_fn(cfg), params, bt, ar_weight=w)[0])
    assert np.isfinite(f(1.0))
    for w in (-1.0, np.nan):
        with pytest.raises(Exception, match="`ar_weight`"):
            jax.block_until_ready(f(w))
    assert V > MASK


def test_loss_labels_outside_the_vocabulary_raise():
    # take_along_axis would clamp a label past the logits' vocabulary (a silent wrong loss);
    # a DualStreamBatch built by hand, or tokens only masked (never fed to the model), reach it
    params, cfg = tiny(0)
    tok = jnp.ones((2, 8), jnp.int32)
    bt = dual_stream_batch(
        tok, jnp.ones((2, 8), bool), key=jax.random.key(0), block_size=4, mask_token_id=MASK
    )
    assert bool(bt.mlm_mask.any()) and bool(bt.ar_mask.any())
    assert np.isfinite(wedlm_loss(_apply_fn(cfg), params, bt)[0])
    for field, mask in (("mlm_labels", bt.mlm_mask), ("ar_labels", bt.ar_mask)):
        for bad in (V, -1):
            labels = jnp.where(mask, bad, getattr(bt, field))
            with pytest.raises(ValueError, match=f"`batch.{field}` must hold token ids"):
                wedlm_loss(_apply_fn(cfg), params, bt._replace(**{field: labels}))
    # a label the loss does not read is free: the same loss (its gather filled a NaN)
    ref = wedlm_loss(_apply_fn(cfg), params, bt)[0]
    for field, mask in (("mlm_labels", bt.mlm_mask), ("ar_labels", bt.ar_mask)):
        for bad in (V, -100):
            labels = jnp.where(mask, getattr(bt, field), bad)
            got = wedlm_loss(_apply_fn(cfg), params, bt._replace(**{field: labels}))[0]
            np.testing.assert_array_equal(got, ref)
    # a field of the wrong dtype is a TypeError naming it (JAX's own names nothing)
    for field in ("input_ids", "positions", "mlm_labels", "ar_labels", "mlm_mask", "ar_mask"):
        bad = getattr(bt, field).astype(jnp.float32) + 0.5
        with pytest.raises(TypeError, match=f"`batch.{field}` must be"):
            wedlm_loss(_apply_fn(cfg), params, bt._replace(**{field: bad}))
    f = jax.jit(lambda b: wedlm_loss(_apply_fn(cfg), params, b)[0])
    with pytest.raises(Exception, match="`batch.mlm_labels`"):
        jax.block_until_ready(f(bt._replace(mlm_labels=jnp.where(bt.mlm_mask, V, 0))))
    masked = jnp.zeros((2, 8), bool).at[:, 3].set(True)
    bad_tok = tok.at[:, 3].set(V + 5)  # masked: the model never sees it, only the loss does
    with pytest.raises(ValueError, match="`tokens` must hold token ids"):
        reorder_mlm_loss(_apply_fn(cfg), params, bad_tok, masked, masked, mask_token_id=MASK)
