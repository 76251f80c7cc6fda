"""DLMR's three training stages [R]: pure losses, optax optimizers, one jitted step.

The backbone is frozen everywhere: it enters under ``stop_gradient`` and is never an
optimizer argument. Stage 1 (latent memory construction) shapes the banks and the
injector with an alignment, a cross-negative and a separation loss; stage 2
(memory interface) trains them by cross-entropy on answers with one memory
injection per sequence under the routes the caller draws; stage 3 trains the
router alone by cost-aware GRPO on rollouts of :func:`dlmr_generate`. The exact
forms of all three are not published: the ones here are the spec's [R] forms.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array

from jaxkit import _validate
from jaxkit._optim import optax_update
from jaxkit.memory._checks import check_params, check_stage1, check_stage2, check_stage3
from jaxkit.memory._dlmr import (
    REASONING,
    VISUAL,
    DLMRConfig,
    DLMRParams,
    action_mask,
    action_table,
    check_config,
    check_inject_args,
    check_lm_for_injector,
    inject_reads,
    inject_traced,
    lookup,
)
from jaxkit.memory._forward import _memory_forward
from jaxkit.memory._reward import group_advantages

# ----------------------------------------------------------------------------- stage 1


class Stage1Aux(NamedTuple):
    """The terms of :func:`stage1_loss`.

    Alignment, cross-bank InfoNCE, bank separation, evidence reading (0 without
    ``evidence``).
    """

    align: Array
    xneg: Array
    sep: Array
    read: Array


def _cos(a, b):
    a = a / (jnp.linalg.norm(a, axis=-1, keepdims=True) + 1e-8)
    b = b / (jnp.linalg.norm(b, axis=-1, keepdims=True) + 1e-8)
    return jnp.sum(a * b, axis=-1)


def _pool(mem, valid):
    w = valid.astype(jnp.float32)[..., None]
    return jnp.sum(mem * w, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)


def stage1_loss(
    p: DLMRParams,
    ctx,
    ctx_valid,
    at,
    k,
    targets,
    target_valid,
    evidence=None,
    *,
    cfg: DLMRConfig,
    temperature=0.07,
    margin=0.0,
    lm_params=None,
    lm_cfg=None,
):
    """Stage 1 [R]: ``L_align + L_xneg + L_sep (+ L_read)``.

    For each bank ``s`` the memory ``M^s`` of the same context (:func:`inject`) is
    pooled (mean over its ``k`` tokens): ``L_align = 1 - cos(pool M^s, tau^s)``;
    ``L_xneg = InfoNCE(q = pool M^s, pos = tau^s, neg = pool M^{other})`` at
    ``temperature``; ``L_sep = relu(cos(mean Z^v, mean Z^r) - margin)`` (0 with a
    shared bank). ``targets [B, 2, D]`` the role targets (``tau^v``: e.g. the mean
    block-l state of the image tokens; ``tau^r``: the state of the latest step
    conclusion), ``target_valid bool[B, 2]`` which exist.

    ``evidence bool[B, 2, S]`` (optional, [R] a jaxkit addition): the context slots
    that hold each role's evidence (e.g. the queried image cell, the referred step
    conclusion). ``L_read = -log sum_{j in evidence} reads_j`` teaches the injector
    *where* to read (``reads``: its first cross block's attention on the context,
    :meth:`~jaxkit.memory.Injector.forward`); the alignment alone gives the pointer a
    weak, averaged signal and on the toy grid never leaves the uniform read. The tiny
    injector only (the LoRA replica, which needs ``lm_params``/``lm_cfg``, has no
    read pointer).

    Returns:
      ``(loss, Stage1Aux)``.

    Raises:
      TypeError: A batch array of the wrong shape or dtype (``target_valid`` and
        ``evidence`` must be bool), or ``evidence`` without the tiny injector.
      ValueError: ``temperature`` not > 0, ``margin`` not finite, or an index out of range.
    """
    if evidence is not None and cfg.injector != "tiny":
        raise TypeError("`evidence`: the read term needs the tiny injector.")
    _validate.integer(at, name="at")  # before jnp.asarray (a string names none)
    ctx, ctx_valid, at, _, k = check_inject_args(p, cfg, ctx, ctx_valid, at, 0 * jnp.asarray(at), k)
    b, d = ctx.shape[0], p.banks[0].shape[1]
    check_stage1(targets, target_valid, evidence, b=b, d=d, s=ctx.shape[1])
    k = _validate.guard_positive(k, temperature, name="temperature")
    k = _validate.guard_finite(k, margin, name="margin")
    mems, reads = [], []
    lm = (jax.lax.stop_gradient(lm_params), lm_cfg) if lm_params is not None else (None, lm_cfg)
    for s in (VISUAL, REASONING):
        bank = jnp.full((b,), s, jnp.int32)
        m, v, r = inject_reads(p, cfg, ctx, ctx_valid, at, bank, k, None, *lm)
        mems.append(_pool(m, v))
        reads.append(r)
    w = target_valid.astype(jnp.float32)
    tgt = targets.astype(jnp.float32)
    align, xneg = 0.0, 0.0
    for s in (VISUAL, REASONING):
        q, o = mems[s], mems[1 - s]
        pos, neg = _cos(q, tgt[:, s]), _cos(q, o)
        align = align + jnp.sum(w[:, s] * (1.0 - pos))
        lg = jnp.stack([pos, neg], axis=-1) / temperature
        xneg = xneg + jnp.sum(w[:, s] * -jax.nn.log_softmax(lg, axis=-1)[:, 0])
    n = jnp.maximum(jnp.sum(w), 1.0)
    align, xneg = align / n, xneg / n
    if cfg.shared_bank:
        sep = jnp.zeros((), jnp.float32)
    else:
        sep = jax.nn.relu(_cos(jnp.mean(p.banks[0], 0), jnp.mean(p.banks[1], 0)) - margin)
    if evidence is None:
        read = jnp.zeros((), jnp.float32)
    else:
        ev = evidence.astype(jnp.float32)
        hit = jnp.stack([jnp.sum(reads[s] * ev[:, s], -1) for s in (VISUAL, REASONING)], 1)
        wr = w * (jnp.sum(ev, -1) > 0).astype(jnp.float32)
        read = jnp.sum(wr * -jnp.log(hit + 1e-6)) / jnp.maximum(jnp.sum(wr), 1.0)
    return align + xneg + sep + read, Stage1Aux(align, xneg, sep, read)


# ----------------------------------------------------------------------------- stage 2


def stage2_loss(p: DLMRParams, lm_params, embeds, labels, ctx, at, action, *, lm_cfg, cfg):
    """Stage 2 [R]: cross-entropy of ``labels`` with one memory injection per row.

    ``embeds [B, T, D]`` the teacher-forced sequence, ``labels int[B, T]`` the token
    to predict after position ``t`` (-1: not scored), ``ctx [B, T, D]`` its block-l
    states (:func:`context_states`), ``at int[B]`` the injection point (memory after
    position ``at - 1``, e.g. a delimiter), ``action int[B]`` the route (0: none;
    the caller draws random routes, spec §4.2). The prediction after position
    ``t`` is read at the expanded index of token ``t + 1`` minus one (the last memory
    slot after the injection point), as in generation. For the LoRA replica ``ctx`` is
    the embeddings (:func:`context_states`).
    """
    embeds, labels, ctx, at, action = check_stage2(
        p, embeds, labels, ctx, at, action, lm_cfg=lm_cfg, cfg=cfg
    )
    lm_params = jax.lax.stop_gradient(lm_params)
    bank_t, k_t = action_table(cfg)
    bank, k = lookup(bank_t, action), lookup(k_t, action)
    j = jnp.arange(ctx.shape[1], dtype=jnp.int32)[None, :]
    valid = jnp.ones(ctx.shape[:2], bool)
    mem, _ = inject_traced(p, cfg, ctx, valid, at, bank, k, None, lm_params, lm_cfg)
    logits = _memory_forward(lm_params, embeds, mem, at, k, lm_cfg=lm_cfg, cfg=cfg)
    nxt = j + 1
    read = nxt + jnp.where(nxt >= at[:, None], k[:, None], 0) - 1
    lg = jnp.take_along_axis(logits, read[:, :, None], axis=1).astype(jnp.float32)
    lab = jnp.clip(labels, 0, lm_cfg.vocab_size - 1)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(lg), lab[:, :, None], axis=-1)[..., 0]
    w = (labels >= 0).astype(jnp.float32)
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


# ----------------------------------------------------------------------------- stage 3


class Stage3Aux(NamedTuple):
    """The terms of :func:`stage3_loss`: policy gradient, KL to the reference, advantage std."""

    policy: Array
    kl: Array
    advantage_std: Array


def _log_policy(router, cfg, h, eligible):
    lg = router(h)
    mask = action_mask(cfg, eligible)
    lg = jnp.where(mask, lg, -1e9)  # finite: masked probabilities are exactly 0, no NaN grads
    return jax.nn.log_softmax(lg, axis=-1), mask


def stage3_loss(router, ref_router, router_h, actions, eligible, rewards, *, cfg, group, kl_beta):
    """Stage 3 [R]: cost-aware GRPO on the router alone.

    ``-mean_r A_r mean_{eligible i} log pi(a_ri | h_ri) + kl_beta KL(pi || pi_ref)``
    with group-normalised advantages (:func:`group_advantages`; zero when a group's
    rewards are equal) and the KL averaged over eligible steps. Ineligible steps
    (only the null is allowed) carry no gradient. Rewards: :func:`dlmr_reward`.

    ``actions=None``: the exact expected reward of one decision per row, for tasks
    where every route can be scored (e.g. by :func:`memory_forward`): ``router_h
    [B, 1, D]``, ``eligible bool[B, 1]``, ``rewards [B, A]`` the reward of each action;
    the loss is ``-mean_b sum_a pi(a | h_b) R_ba + kl_beta KL`` (no sampling noise;
    ``group`` and the advantage std, reported 0, are unused). [R] a jaxkit addition.
    Jitted at module level (``cfg``, ``group`` static; ``kl_beta`` traced).

    Raises:
      TypeError: shapes or dtypes that disagree.
      ValueError: ``actions`` outside ``[0, n_actions)``, rollouts not a multiple of
        ``group``, non-finite ``rewards``, a NaN or negative ``kl_beta`` (traced values:
        under ``jit``).
    """
    actions, eligible, rewards = check_stage3(
        router_h, actions, eligible, rewards, kl_beta, n_actions=cfg.n_actions, group=group
    )
    return _stage3_core(
        router, ref_router, router_h, actions, eligible, rewards, kl_beta, cfg=cfg, group=group
    )


def _stage3(router, ref_router, router_h, actions, eligible, rewards, kl_beta, *, cfg, group):
    if actions is None:
        h0, e0 = router_h[:, 0], eligible[:, 0]
        logp, mask = _log_policy(router, cfg, h0, e0)
        pi = jnp.where(mask, jnp.exp(logp), 0.0)
        w = e0.astype(jnp.float32)
        gain = jnp.sum(pi * jax.lax.stop_gradient(rewards.astype(jnp.float32)), -1)
        policy = -jnp.sum(w * gain) / jnp.maximum(jnp.sum(w), 1.0)
        return _with_kl(
            policy, logp, mask, w, ref_router, cfg, h0, e0, kl_beta, jnp.zeros((), jnp.float32)
        )
    adv = jax.lax.stop_gradient(group_advantages(rewards, group))
    logp, mask = _log_policy(router, cfg, router_h, eligible)
    lp_a = jnp.take_along_axis(logp, actions[..., None], axis=-1)[..., 0]
    w = eligible.astype(jnp.float32)
    n_e = jnp.maximum(jnp.sum(w, axis=1), 1.0)
    lp_a = jnp.where(eligible, lp_a, 0.0)
    policy = -jnp.mean(adv * jnp.sum(lp_a, axis=1) / n_e)
    return _with_kl(
        policy, logp, mask, w, ref_router, cfg, router_h, eligible, kl_beta, jnp.std(adv)
    )


_stage3_core = jax.jit(_stage3, static_argnames=("cfg", "group"))


def _with_kl(policy, logp, mask, w, ref_router, cfg, router_h, eligible, kl_beta, adv_std):
    ref_logp, _ = _log_policy(jax.lax.stop_gradient(ref_router), cfg, router_h, eligible)
    pr = jnp.exp(logp)
    kl_i = jnp.sum(jnp.where(mask, pr * (logp - ref_logp), 0.0), -1)
    kl = jnp.sum(kl_i * w) / jnp.maximum(jnp.sum(w), 1.0)
    return policy + kl_beta * kl, Stage3Aux(policy, kl, adv_std)


# ----------------------------------------------------------------------------- optimizers


def dlmr_optimizer(
    stage: int, *, lr: float | optax.Schedule = 1e-3, train_injector: bool = True
) -> optax.GradientTransformation:
    """The optax transform of a stage (groups by the adapter's top-level field).

    Stages 1-2: the banks and the injector (``train_injector=False``: the frozen
    injector ablation, the banks only), Adam ``lr``, clip 1.0; stage 3: the router
    only. Everything else gets zero updates (the backbone is never an input).
    ``lr``: a number or an optax schedule (step -> rate, e.g.
    ``optax.warmup_cosine_decay_schedule``).
    """
    stage = _validate.python_int(stage, name="stage")
    _validate.one_of((1, 2, 3), stage=stage)
    if not callable(lr):
        _validate.positive(lr=lr)
    _validate.flags(train_injector=train_injector)
    train = {1: ("banks", "injector"), 2: ("banks", "injector"), 3: ("router",)}[stage]
    if not train_injector:
        train = tuple(t for t in train if t != "injector")

    def labels(p):
        return DLMRParams(
            *(
                jax.tree.map(lambda _, f=f: "train" if f in train else "frozen", getattr(p, f))
                for f in DLMRParams._fields
            )
        )

    tx = optax.multi_transform({"train": optax.adam(lr), "frozen": optax.set_to_zero()}, labels)
    return optax.chain(optax.clip_by_global_norm(1.0), tx)


@functools.partial(jax.jit, static_argnames=("stage", "tx", "lm_cfg", "cfg", "group"))
def _step(p, opt_state, batch, lm_params, ref_router, hp, *, stage, tx, lm_cfg, cfg, group):
    if stage == 1:
        (loss, aux), g = jax.value_and_grad(stage1_loss, has_aux=True)(
            p, *batch, cfg=cfg, temperature=hp[0], margin=hp[1], lm_params=lm_params, lm_cfg=lm_cfg
        )
    elif stage == 2:
        loss, g = jax.value_and_grad(stage2_loss)(p, lm_params, *batch, lm_cfg=lm_cfg, cfg=cfg)
        aux = None
    else:

        def f(router):
            return stage3_loss(router, ref_router, *batch, cfg=cfg, group=group, kl_beta=hp[0])

        (loss, aux), gr = jax.value_and_grad(f, has_aux=True)(p.router)
        g = jax.tree.map(jnp.zeros_like, p)._replace(router=gr)
    p, opt_state = optax_update(tx, g, opt_state, p)
    return p, opt_state, loss, aux


def dlmr_step(
    stage: int,
    p: DLMRParams,
    opt_state,
    batch: tuple,
    *,
    tx,
    cfg: DLMRConfig,
    lm_params=None,
    lm_cfg=None,
    ref_router=None,
    group: int = 1,
    temperature=0.07,
    margin=0.0,
    kl_beta=0.02,
):
    """One optimizer step of a stage (jitted at module level; build ``tx`` once).

    ``batch``: stage 1 ``(ctx, ctx_valid, at, k, targets, target_valid[, evidence])``
    (with ``lm_params``/``lm_cfg`` for the LoRA replica); stage 2
    ``(embeds, labels, ctx, at, action)`` with ``lm_params``/``lm_cfg``; stage 3
    ``(router_h, actions, eligible, rewards)`` (a :class:`DLMRGeneration`'s fields
    and :func:`dlmr_reward`) with ``ref_router`` and the static ``group`` size, or
    ``(router_h [B, 1, D], None, eligible [B, 1], rewards [B, A])``: the exact expected
    reward (:func:`stage3_loss` with ``actions=None``).
    ``temperature``/``margin`` (stage 1) and ``kl_beta`` (stage 3) are traced.
    Returns ``(p, opt_state, loss, aux)``. The backbone is an input, never updated.

    Raises:
      TypeError: an ``opt_state`` that is not ``tx.init(p)``'s tree and shapes.
      ValueError: a bad stage, rewards not a multiple of ``group``, bad configs.
    """
    stage = _validate.python_int(stage, name="stage")
    _validate.one_of((1, 2, 3), stage=stage)
    if not isinstance(cfg, DLMRConfig):
        raise TypeError(f"`cfg` must be a DLMRConfig, got {type(cfg).__name__}.")
    check_params(p, name="p", cfg=cfg)
    group = _validate.python_int(group, name="group", minimum=1)
    if stage == 2:
        check_config(lm_cfg, cfg)
    if stage == 1:
        check_lm_for_injector(cfg, lm_params, lm_cfg, "stage 1")
    if stage == 3:
        if ref_router is None:
            raise TypeError("stage 3 needs `ref_router` (the initial router).")
        n = jnp.shape(batch[3])[0]
        if batch[1] is not None and n % group:
            raise ValueError(f"the {n} rollouts must be a multiple of `group`={group}.")
    for name, v in (("temperature", temperature), ("kl_beta", kl_beta), ("margin", margin)):
        _validate.real(v, name=name)
    # both checked whatever the stage (a bad value is an error even where the stage ignores it)
    temp = _validate.guard_positive(
        jnp.asarray(temperature, jnp.float32), temperature, name="temperature"
    )
    beta = _validate.guard_non_negative(jnp.asarray(kl_beta, jnp.float32), kl_beta, name="kl_beta")
    hp = (
        temp if stage == 1 else beta,
        _validate.guard_finite(jnp.asarray(margin, jnp.float32), margin, name="margin"),
    )
    return _step(
        p,
        opt_state,
        tuple(batch),
        lm_params,
        ref_router,
        hp,
        stage=stage,
        tx=tx,
        lm_cfg=lm_cfg,
        cfg=cfg,
        group=group,
    )
