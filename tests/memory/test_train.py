"""DLMR training: frozen backbone, the stage oracles, ablations, orbax round trip."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import memory, nn
from tests.memory._setup import AP, AT, CFG, MC, TOK, TX2, P, stage2_batch

B, T = TOK.shape
EMB = nn.embed(P, CFG, TOK)


def test_memory_forward_equals_interventions_and_base():
    ctx, _ = memory.context_states(P, CFG, MC, EMB)
    k = 3
    mem, _ = memory.inject(AP, MC, ctx, jnp.ones((B, T), bool), AT, jnp.array([0, 1]), AT * 0 + k)
    got = memory.memory_forward(P, CFG, MC, EMB, mem, AT, AT * 0 + k)
    tok, at, mem_np = np.asarray(TOK), np.asarray(AT), np.asarray(mem)  # NumPy glue
    for b in range(B):
        m = int(at[b])
        toks = np.concatenate([tok[b, :m], np.zeros(k, np.int32), tok[b, m:]])[None]
        iv = memory.memory_interventions(MC, mem_np[b : b + 1, :k], np.array([m], np.int32))
        want = nn.apply(P, CFG, toks, interventions=iv).logits[0]
        np.testing.assert_allclose(got[b, : T + k], want, atol=1e-5)
    none = memory.memory_forward(P, CFG, MC, EMB, mem, AT, AT * 0)  # k = 0: the base
    np.testing.assert_allclose(none[:, :T], nn.apply(P, CFG, TOK).logits, atol=1e-5)


def _stage2_batch(action):
    return stage2_batch(P, CFG, action)


def test_stage2_keeps_the_backbone_bit_identical_and_learns():
    before = jax.tree.map(np.array, P)
    tx = TX2
    p, st = AP, tx.init(AP)
    batch = _stage2_batch(jnp.array([2, 4], jnp.int32))
    losses = []
    for _ in range(8):
        p, st, loss, _ = memory.dlmr_step(2, p, st, batch, tx=tx, cfg=MC, lm_params=P, lm_cfg=CFG)
        losses.append(float(loss))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, P), before)
    jax.tree.map(np.testing.assert_array_equal, p.router, AP.router)  # not in stage 2
    assert losses[-1] < losses[0], losses
    # no memory anywhere: the loss is the base model's CE and has no adapter gradient
    grad2 = jax.jit(jax.grad(memory.stage2_loss), static_argnames=("lm_cfg", "cfg"))
    g = grad2(AP, P, *_stage2_batch(jnp.zeros(B, jnp.int32)), lm_cfg=CFG, cfg=MC)
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(g))


@pytest.mark.slow
def test_frozen_injector_ablation_updates_only_the_banks():
    tx = memory.dlmr_optimizer(2, train_injector=False)
    st = tx.init(AP)
    p, *_ = memory.dlmr_step(
        2, AP, st, _stage2_batch(jnp.array([2, 4])), tx=tx, cfg=MC, lm_params=P, lm_cfg=CFG
    )
    jax.tree.map(np.testing.assert_array_equal, p.injector, AP.injector)
    assert any(np.any(a != b) for a, b in zip(p.banks, AP.banks, strict=True))


def _rollouts(rewards):
    rng = np.random.default_rng(1)  # NumPy: no eager op to compile
    h = jnp.asarray(rng.normal(size=(4, 5, CFG.d_model)), jnp.float32)
    elig = rng.random((4, 5)) < 0.6
    elig[:, 0] = True
    acts = np.where(elig, rng.integers(1, MC.n_actions, (4, 5)), 0).astype(np.int32)
    return (h, jnp.asarray(acts), jnp.asarray(elig), jnp.asarray(rewards, jnp.float32))


def test_grpo_equal_rewards_zero_gradient_and_kl_zero_at_reference():
    kw = dict(cfg=MC, group=2, kl_beta=0.0)
    # jitted: eager, each of the loss's small ops compiles on its own
    grad = jax.jit(jax.grad(lambda r, ro: memory.stage3_loss(r, AP.router, *ro, **kw)[0]))
    g = grad(AP.router, _rollouts([1, 1, 0, 0]))
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(g))
    loss, aux = jax.jit(lambda ro: memory.stage3_loss(AP.router, AP.router, *ro, **kw))(
        _rollouts([1, 0, 0, 1])
    )
    assert float(aux.kl) == 0.0 and np.isfinite(float(loss))
    g = grad(AP.router, _rollouts([1, 0, 0, 1]))
    assert any(np.any(np.asarray(x) != 0) for x in jax.tree.leaves(g))
    adv = jax.jit(memory.group_advantages, static_argnums=1)(jnp.array([1.0, 3.0, 2.0, 2.0]), 2)
    np.testing.assert_allclose(adv, [-1, 1, 0, 0], atol=1e-5)


def test_stage3_step_trains_only_the_router():
    tx = memory.dlmr_optimizer(3, lr=1e-2)
    st = tx.init(AP)
    p, st, loss, aux = memory.dlmr_step(
        3, AP, st, _rollouts([1, 0, 0, 1]), tx=tx, cfg=MC, ref_router=AP.router, group=2
    )
    jax.tree.map(np.testing.assert_array_equal, (p.banks, p.injector), (AP.banks, AP.injector))
    assert any(
        np.any(a != b)
        for a, b in zip(jax.tree.leaves(p.router), jax.tree.leaves(AP.router), strict=True)
    )
    with pytest.raises(ValueError, match="group"):
        memory.dlmr_step(
            3, AP, st, _rollouts([1, 0, 0, 1]), tx=tx, cfg=MC, ref_router=AP.router, group=3
        )


@pytest.mark.slow
def test_stage1_losses_and_shared_bank():
    ctx, _ = memory.context_states(P, CFG, MC, EMB)
    rng = np.random.default_rng(2)
    tgt = jnp.asarray(rng.normal(size=(B, 2, CFG.d_model)), jnp.float32)
    batch = (ctx, jnp.ones((B, T), bool), AT, AT * 0 + 3, tgt, jnp.ones((B, 2), bool))
    tx = memory.dlmr_optimizer(1, lr=3e-2)
    p, st = AP, tx.init(AP)
    first = None
    for _ in range(6):
        p, st, loss, aux = memory.dlmr_step(1, p, st, batch, tx=tx, cfg=MC)
        first = float(loss) if first is None else first
    assert float(loss) < first
    shared = memory.DLMRConfig(**{**MC.__dict__, "shared_bank": True})
    sp = memory.init_dlmr(CFG, shared, key=jax.random.key(0))
    assert len(sp.banks) == 1 and sp.banks[0].shape == (8, CFG.d_model)
    _, aux = memory.stage1_loss(sp, *batch, cfg=shared)
    assert float(aux.sep) == 0.0


def test_reward_is_gated_by_correctness():
    r = memory.dlmr_reward(jnp.array([1.0, 0.0]), jnp.array([4, 4]), 10, budget=20, lambda_eff=0.5)
    np.testing.assert_allclose(r, [1 - 0.5 * 14 / 20, 0.0])


def test_save_restore_round_trip(tmp_path):
    memory.save_adapter(tmp_path / "a", AP)
    like = memory.init_dlmr(CFG, MC, key=jax.random.key(9))
    back = memory.restore_adapter(tmp_path / "a", like)
    jax.tree.map(np.testing.assert_array_equal, back, AP)
    with pytest.raises(FileNotFoundError):
        memory.restore_adapter(tmp_path / "none", like)
    # an adapter of the layout before the Router's standardisation leaves (mean, scale)
    memory.save_adapter(tmp_path / "old", AP._replace(router=_OldRouter(AP.router)))
    with pytest.raises(ValueError, match=r"missing.*'router\.mean', 'router\.scale'.*extra.*none"):
        memory.restore_adapter(tmp_path / "old", like)
    # the other way round (extra leaves), and another config's shapes
    old_like = AP._replace(router=_OldRouter(AP.router))
    with pytest.raises(ValueError, match=r"missing.*none.*extra.*'router\.mean', 'router\.scale'"):
        memory.restore_adapter(tmp_path / "a", old_like)
    wide = memory.init_dlmr(CFG, dataclasses.replace(MC, router_hidden=9), key=jax.random.key(9))
    with pytest.raises(ValueError, match=r"router\.l1\.w \(16, 8\) vs \(16, 9\)"):
        memory.restore_adapter(tmp_path / "a", wide)


class _OldRouter(eqx.Module):
    """The Router's layout before wave 14 (no standardisation constants)."""

    norm: eqx.nn.LayerNorm
    l1: object
    l2: object

    def __init__(self, r):
        self.norm, self.l1, self.l2 = r.norm, r.l1, r.l2


_stage1 = jax.jit(memory.stage1_loss, static_argnames=("cfg",))


def test_stage1_evidence_term_is_the_log_read_mass():
    ctx, _ = memory.context_states(P, CFG, MC, EMB)
    tgt = jnp.zeros((B, 2, CFG.d_model), jnp.float32) + 1.0
    valid = jnp.array([[True, False], [False, True]])
    j = jnp.arange(T)[None, :]
    before = j < AT[:, None]
    base = (ctx, jnp.ones((B, T), bool), AT, AT * 0 + 3, tgt, valid)
    _, aux0 = _stage1(AP, *base, cfg=MC)
    assert float(aux0.read) == 0.0  # no evidence given
    # evidence = every slot the injector may read: the term is -log(mass on the context)
    ev_all = jnp.stack([before, before], 1)
    loss, aux = _stage1(AP, *base, ev_all, cfg=MC)
    np.testing.assert_allclose(float(loss - aux.read), float(aux0.align + aux0.xneg + aux0.sep))
    assert 0.0 < float(aux.read) < np.log(T)  # the latents take some mass, not all
    # slots at or after the injection point are never read: evidence there is -log(1e-6)
    ev_after = jnp.stack([~before, ~before], 1)
    _, aux_after = _stage1(AP, *base, ev_after, cfg=MC)
    np.testing.assert_allclose(float(aux_after.read), -np.log(1e-6), rtol=1e-4)


def _one_decision(rewards):
    h = jax.random.normal(jax.random.key(4), (3, 1, CFG.d_model))
    return (h, None, jnp.ones((3, 1), bool), jnp.asarray(rewards, jnp.float32))


def test_stage3_exact_expected_reward():
    # every action scored: the loss is -mean_b sum_a pi_ba R_ba; action-constant rewards
    # give no policy gradient, a better action gains probability, the KL is 0 at the ref
    kw = dict(cfg=MC, group=1, kl_beta=0.0)
    a = MC.n_actions
    r = np.zeros((3, a), np.float32)
    r[:, 2] = 1.0
    # jitted: eager, each of the loss's small ops compiles on its own
    grad = jax.jit(jax.grad(lambda rt, ro: memory.stage3_loss(rt, AP.router, *ro, **kw)[0]))
    policy = jax.jit(lambda rt, h: jax.nn.softmax(rt(h[:, 0]), -1))
    loss, aux = jax.jit(lambda ro: memory.stage3_loss(AP.router, AP.router, *ro, **kw))(
        _one_decision(r)
    )
    pi = np.asarray(policy(AP.router, _one_decision(r)[0]))
    np.testing.assert_allclose(float(loss), -pi[:, 2].mean(), rtol=1e-5)
    assert float(aux.kl) == 0.0
    g = grad(AP.router, _one_decision(np.tile(np.arange(3.0)[:, None], (1, a))))
    assert max(float(np.abs(x).max()) for x in jax.tree.leaves(g)) < 1e-6
    tx = memory.dlmr_optimizer(3, lr=1e-2)
    p, st = AP, tx.init(AP)
    for _ in range(5):
        p, st, _, _ = memory.dlmr_step(
            3, p, st, _one_decision(r), tx=tx, cfg=MC, ref_router=AP.router
        )
    after = np.asarray(policy(p.router, _one_decision(r)[0]))
    assert np.all(after[:, 2] > pi[:, 2] + 0.02)
    jax.tree.map(np.testing.assert_array_equal, (p.banks, p.injector), (AP.banks, AP.injector))


def test_optimizer_takes_a_schedule():
    # the rate follows the schedule: an all-zero one gives zero updates, a constant one the
    # float rate's updates (optax on the router's gradient-sized ones)
    g = jax.tree.map(jnp.ones_like, AP)
    outs = []
    for lr in (lambda n: jnp.zeros((), jnp.float32), lambda n: jnp.full((), 3e-2), 3e-2):
        tx = memory.dlmr_optimizer(3, lr=lr)
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes int/float
            # jitted: eager, each of Adam's small ops compiled on its own
            outs.append(jax.jit(lambda g, p, tx=tx: tx.update(g, tx.init(p), p)[0].router)(g, AP))
    assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(outs[0]))
    jax.tree.map(np.testing.assert_allclose, outs[1], outs[2])
    assert all(np.all(np.asarray(u) != 0) for u in jax.tree.leaves(outs[1].l1))


def test_audit_bad_inputs():
    # wave-24 audit: each was a silent NaN, a silently clipped value or an opaque error
    nan = float("nan")
    s = 6
    ctx, valid = jnp.ones((2, s, CFG.d_model)), jnp.ones((2, s), bool)
    b1 = (ctx, valid, jnp.array([2, 3]), jnp.array([1, 3]), jnp.ones((2, 2, 16)), valid[:, :2])
    b2 = stage2_batch(P, CFG, [1, 2])
    rw = jnp.array([1.0, 0.0, 1.0, 0.0])
    for bad, err, name in (
        (lambda: memory.stage1_loss(AP, *b1, cfg=MC, temperature=0.0), ValueError, "temperature"),
        (lambda: memory.stage1_loss(AP, *b1, cfg=MC, margin=nan), ValueError, "margin"),
        (lambda: memory.stage1_loss(AP, *b1[:4], b1[4][:, :1], b1[5], cfg=MC), TypeError,
         "targets"),
        (lambda: memory.stage1_loss(AP, *b1[:5], jnp.where(b1[5], 0.5, 0.0), cfg=MC), TypeError,
         "target_valid"),  # a float mask would reweight the terms silently
        (lambda: memory.stage1_loss(AP, *b1, jnp.ones((2, 2, s)), cfg=MC), TypeError,
         "evidence"),
        (lambda: memory.stage2_loss(AP, P, b2[0], b2[1].at[0, 0].set(99), *b2[2:], lm_cfg=CFG,
                                    cfg=MC), ValueError, "labels"),
        (lambda: memory.stage2_loss(AP, P, *b2[:4], jnp.array([9, 1]), lm_cfg=CFG, cfg=MC),
         ValueError, "action"),
        (lambda: memory.group_advantages(rw, 3), ValueError, "group"),
        (lambda: memory.dlmr_reward(rw, 1, 1, budget=0.0, lambda_eff=0.1), ValueError, "budget"),
        (lambda: memory.dlmr_reward(rw, 1, 1, budget=1.0, lambda_eff=nan), ValueError,
         "lambda_eff"),
        (lambda: memory.dlmr_reward(2 * rw, 1, 1, budget=1.0, lambda_eff=0.1), ValueError,
         "correct"),
        (lambda: memory.inject(AP, MC, ctx[:0], valid[:0], *[jnp.zeros(0, jnp.int32)] * 3),
         TypeError, "ctx"),
        (lambda: memory.DLMRConfig(layer=1, lora_alpha=float("inf")), ValueError, "lora_alpha"),
    ):  # fmt: skip
        with pytest.raises(err, match=name):
            bad()


def test_audit_traced_bad_values_raise_under_jit():
    rw = jnp.array([1.0, 0.0])
    f = jax.jit(lambda b, lam: memory.dlmr_reward(rw, 1, 1, budget=b, lambda_eff=lam))
    with pytest.raises(Exception, match="budget"):
        jax.block_until_ready(f(jnp.nan, 0.1))
