"""Host-side TD3B data collection and fine-tuning loop (oracles are black boxes).

Not jitted: the reward oracle is any Python callable on NumPy tokens. The device
work inside (sampling, re-scoring, the train step) goes through the jitted public
functions, so every iteration reuses the same compiled programs.
"""

import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import _validate
from jaxkit._typing import KeyArray, PyTree
from jaxkit.diffusion._collect_rows import (
    OBJECTIVES,
    _buffer,
    _check_rows,
    _mixture_rows,
    _reward,
    _weighted_hits,
)
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._rescore import trajectory_log_prob
from jaxkit.diffusion._sample import sample
from jaxkit.diffusion._schedule import MaskingSchedule, as_schedule
from jaxkit.diffusion._step import Buffer, check_buffer, td3b_train_step
from jaxkit.diffusion._td3b import (
    EmbedFn,
    effective_sample_size,
    log_importance_weight,
)

RewardFn = Callable[[np.ndarray], dict]
"""``reward_fn(tokens int[N, L]) -> {"affinity": float[N], "p_agonist": float[N]}``."""


class ESSWarning(UserWarning):
    """The normalised importance weights collapsed onto few samples (low ESS)."""


def score(reward_fn: RewardFn, tokens) -> tuple[np.ndarray, np.ndarray]:
    """Call the oracle and check its output: ``(affinity, p_agonist)`` as float32 arrays.

    Raises:
      ValueError: Missing keys, wrong lengths or non-finite values (named).
    """
    toks = np.asarray(tokens)
    out = reward_fn(toks)
    if not isinstance(out, dict) or not {"affinity", "p_agonist"} <= set(out):
        raise ValueError(
            "`reward_fn` must return a dict with keys 'affinity' and 'p_agonist', got "
            f"{type(out).__name__} {sorted(out) if isinstance(out, dict) else ''}."
        )
    res = []
    for name in ("affinity", "p_agonist"):
        a = np.asarray(out[name], np.float32)
        if a.shape != toks.shape[:1]:
            raise ValueError(
                f"`reward_fn` returned '{name}' of shape {a.shape}, expected {toks.shape[:1]}."
            )
        if not np.all(np.isfinite(a)):
            bad = int(np.sum(~np.isfinite(a)))
            raise ValueError(
                f"`reward_fn` returned non-finite rewards: {bad} NaN/inf value(s) in '{name}'."
            )
        res.append(a)
    return res[0], res[1]


def collect_onpolicy(
    apply_fn: ApplyFn,
    params: PyTree,
    ref_params: PyTree,
    reward_fn: RewardFn,
    *,
    key: KeyArray,
    num_samples: int,
    length: int,
    direction: int,
    mask_id: int,
    num_steps: int,
    alpha: float = 0.1,
    kappa_min: float = 0.1,
    schedule: MaskingSchedule | str = "loglinear",
    objective: str = "td3b",
) -> Buffer:
    """Sample ``num_samples`` sequences from the policy, score them, weight them.

    ``log_w = sum_path (log p_pre - log p_theta) + S / alpha + log max(kappa, kappa_min)``.
    One oracle call per sample (host).
    """
    direction = _validate.python_int(direction, name="direction")
    _validate.one_of((1, -1), direction=direction)
    schedule = as_schedule(schedule)
    _validate.one_of(OBJECTIVES, objective=objective)
    template = jnp.full((num_samples, length), mask_id, jnp.int32)
    tr = sample(
        apply_fn,
        params,
        template,
        key=key,
        mask_id=mask_id,
        num_steps=num_steps,
        schedule=schedule,
        ref_params=ref_params,
    )
    return make_buffer(
        tr.tokens,
        tr.unmask_step,
        tr.log_ratio,
        reward_fn,
        direction=direction,
        alpha=alpha,
        kappa_min=kappa_min,
        objective=objective,
    )


def make_buffer(
    tokens, unmask_step, log_ratio, reward_fn, *, direction, alpha, kappa_min, objective="td3b"
):
    """Score sampled trajectories and build a :class:`Buffer` (host).

    ``objective="td3b"``: reward = :func:`gated_reward` for ``direction``; ``"affinity"``:
    the affinity-only ("equilibrium") baseline, reward = affinity, no confidence term.
    ``tokens``, ``unmask_step``: ``int[N, L]``, any values (alphabet, ``num_steps``: checked
    where used); ``log_ratio``: ``[N]`` (another dtype or shape: a named ``TypeError``).
    """
    _validate.one_of(OBJECTIVES, objective=objective)
    _check_rows(tokens, unmask_step, log_ratio)
    g, f = score(reward_fn, tokens)
    return _buffer(tokens, unmask_step, log_ratio, g, f, direction, alpha, kappa_min, objective)


def temper_alpha(log_ratio, reward, log_kappa, *, alpha: float, prev: float, ess_target: float):
    """[R] Adaptive tempering: the smallest ``a`` in ``[alpha, prev]`` keeping the ESS up.

    Returns the ``a`` whose weights ``log_ratio + reward / a + log_kappa`` have
    ``ESS >= ess_target * N`` with the largest tilt ``1 / a`` (bisection on ``1/a``,
    host NumPy): ``alpha`` when that already holds, ``prev`` (never a weaker
    tilt than before, ``inf`` = none) when even ``prev`` falls short. Adaptive
    tempering as in SMC samplers (Jasra et al. 2011); a jaxkit addition to TD3B
    (which uses ``alpha`` from the first iteration).

    Raises:
      ValueError: ``alpha`` not finite and > 0, ``prev`` not > 0 (``inf`` allowed),
        ``ess_target`` outside ``(0, 1]``, non-finite inputs or lengths that disagree.
    """
    lr, r, lk = (np.asarray(x, np.float64) for x in (log_ratio, reward, log_kappa))
    n = lr.shape[0]
    _validate.finite_scalar(alpha=alpha)
    _validate.positive(alpha=alpha)
    _validate.positive(prev=prev)  # NaN fails; inf (no tilt yet) passes
    _validate.in_interval(low=0, high=1, closed="right", ess_target=ess_target)
    for name, x in (("log_ratio", lr), ("reward", r), ("log_kappa", lk)):
        if x.shape != (n,) or not np.all(np.isfinite(x)):
            raise ValueError(f"`{name}` must be {n} finite numbers, got shape {x.shape}.")

    def ess(beta):
        lw = lr + beta * r + lk
        w = np.exp(lw - lw.max())
        return w.sum() ** 2 / np.sum(w * w)

    lo, hi = 0.0 if not np.isfinite(prev) else 1.0 / prev, 1.0 / alpha
    if ess(hi) >= ess_target * n:
        return float(alpha)
    if ess(lo) < ess_target * n:
        return float(prev)
    for _ in range(40):  # ess(lo) >= target > ess(hi)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ess(mid) >= ess_target * n else (lo, mid)
    return float(1.0 / lo) if lo > 0 else float("inf")


def rescore_buffer(
    apply_fn: ApplyFn,
    params: PyTree,
    ref_params: PyTree,
    buffer: Buffer,
    *,
    mask_id: int,
    num_steps: int,
    alpha: float = 0.1,
    kappa_min: float = 0.1,
) -> Buffer:
    """Recompute each row's path log-ratio under the current policy and its weight.

    ``log_ratio = sum_path log p_pre - sum_path log p_theta`` re-evaluated along
    the stored unmasking order (the upstream tree kept a running sum of policy
    log-probabilities only, with no pretrained term: wrong after the policy moves).
    ``buffer.direction`` (not read here) is checked as :func:`td3b_loss` does: +1 or -1.
    """
    buffer = check_buffer(buffer)
    kw = {"mask_id": mask_id, "num_steps": num_steps, "valid": buffer.valid}
    lq, lp = (
        trajectory_log_prob(apply_fn, p, buffer.tokens, buffer.unmask_step, **kw)
        for p in (ref_params, params)
    )
    lr = (lq - lp).astype(jnp.float32)
    lw = log_importance_weight(
        buffer.reward, buffer.p_agonist, log_ratio=lr, alpha=alpha, kappa_min=kappa_min
    )
    return buffer._replace(log_ratio=lr, log_w=lw)


def merge_best(buffer: Buffer | None, new: Buffer, size: int) -> Buffer:
    """Best-of-buffer: keep the ``size`` rows of ``buffer`` and ``new`` with the highest reward.

    ``buffer=None`` (no earlier rows): the best ``size`` rows of ``new`` alone. Both are
    checked as by :func:`check_buffer` (and share ``L``): a TypeError naming the field.
    """
    size = _validate.python_int(size, name="size", minimum=1)
    both = new = check_buffer(new, name="new")
    if buffer is not None:
        buffer = check_buffer(buffer)
        _validate.shape(buffer.tokens, (None, np.shape(new.tokens)[1]), name="buffer.tokens")
        both = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=0), buffer, new)
    order = np.argsort(-np.asarray(both.reward), kind="stable")[:size]
    return jax.tree.map(lambda a: a[order], both)


def fine_tune(
    apply_fn: ApplyFn,
    embed_fn: EmbedFn | None,
    params: PyTree,
    reward_fn: RewardFn,
    *,
    key: KeyArray,
    direction: int,
    length: int,
    mask_id: int,
    optimizer: optax.GradientTransformation,
    iterations: int,
    samples_per_iter: int = 128,
    steps_per_iter: int = 10,
    num_steps: int = 12,
    collection: str = "onpolicy",
    buffer_size: int = 128,
    alpha: float = 0.1,
    kappa_min: float = 0.1,
    replicates: int = 4,
    kl_weight: float = 0.1,
    contrastive_weight: float = 0.1,
    ess_warn: float = 0.05,
    ref_params: PyTree | None = None,
    objective: str = "td3b",
    reduction: str = "sum_weights",
    ess_target: float | None = None,
    proposal_window: int = 1,
    defensive: bool = False,
) -> tuple[PyTree, list[dict]]:
    """The TD3B outer loop (host): collect, (re)weight, update; returns ``(params, history)``.

    ``collection="onpolicy"``: each iteration trains on the fresh samples;
    ``"best_of_buffer"``: fresh samples are merged into a buffer of ``buffer_size``
    rows kept by reward, whose log-ratios are re-scored under the current policy
    each iteration. ``ref_params`` (default: the initial ``params``) is the
    pretrained anchor. ``history[i]`` holds the step metrics (``ess`` included),
    the mean reward, direction accuracy of the fresh samples and the oracle calls so
    far, and ``weighted_direction_accuracy``: the direction accuracy of the training
    buffer under its normalised weights (what the update fits towards). When
    ``ess < ess_warn * N`` an :class:`ESSWarning` is issued (never an error).
    ``objective="affinity"`` trains the affinity-only baseline (reward = affinity).
    ``steps_per_iter`` optimiser steps are taken on each collected buffer, each on a
    fresh masking of it: the authors' ``resample_every_n_step = 10`` (one step per
    epoch, a new collection every 10 epochs), the default.
    ``reduction`` is passed to :func:`td3b_train_step`: with ``"sum_weights"`` the
    WDCE term is a per-sequence cross-entropy (about ``L`` nats) while the KL anchor is
    a per-slot mean, so ``kl_weight`` (and ``contrastive_weight``) act about ``N``
    times more weakly than in the authors' code, whose WDCE is ``"reference"``
    (divided by the buffer size ``N``); use ``"reference"`` for their balance.

    ``ess_target`` **[R]** (a jaxkit addition; ``None``, the default, is the authors'
    method): adaptive tempering of ``alpha``. Each iteration tilts by ``1 / alpha_k``,
    the largest tilt not above ``1 / alpha`` whose fresh on-policy weights keep
    ``ESS >= ess_target * N`` (:func:`temper_alpha`; ``alpha_k`` never increases and
    starts untilted), so the policy follows ``p_pre exp(S / alpha_k)`` down to the
    TD3B target instead of fitting a collapsed batch (at ``alpha = 0.1`` the
    pretrained model's own batch has an ESS of a few rows). Once ``alpha_k = alpha``
    the objective, hence its fixed point ``p*``, is TD3B's; ``history[i]["alpha"]``
    records ``alpha_k``.

    ``proposal_window`` **[R]** (a jaxkit addition; ``1``, the default, is the authors'
    on-policy batch; needs ``collection="onpolicy"``): train on the fresh batches of
    the last ``K = proposal_window`` policies together, each row weighted against the
    mixture that produced the window (deterministic-mixture importance sampling,
    Veach & Guibas 1995; Owen & Zhou 2000):
    ``log_ratio = log p_pre(path) - log mean_j p_theta_j(path)``, every path
    re-scored under every policy of the window (:func:`trajectory_log_prob`). The
    weights stay valid for the rows of older policies (plain replay under the current
    policy's ratio is not) and a row is down-weighted only where the whole window
    over-samples it, not where one policy does; the target ``p*`` is unchanged.
    ``defensive=True`` keeps the first batch (drawn from the initial policy, the
    pretrained model when ``ref_params`` is None) in the window for good: defensive
    importance sampling (Hesterberg 1995), the path ratio ``p_pre / mixture`` is then at
    most ``K`` whatever the policy does, so a collapsed policy cannot blow the weights up.
    """
    _validate.is_key(key)
    _validate.one_of(("onpolicy", "best_of_buffer"), collection=collection)
    _validate.one_of(OBJECTIVES, objective=objective)
    _validate.flags(defensive=defensive)
    iterations = _validate.python_int(iterations, name="iterations", minimum=0)
    direction = _validate.python_int(direction, name="direction")
    _validate.one_of((1, -1), direction=direction)
    if ess_target is not None:
        _validate.real(ess_target, name="ess_target")  # float("0.1") parsed a string
        if not 0.0 < float(ess_target) <= 1.0:
            raise ValueError(f"`ess_target` must lie in (0, 1] or be None, got {ess_target}.")
    samples_per_iter = _validate.python_int(samples_per_iter, name="samples_per_iter", minimum=1)
    steps_per_iter = _validate.python_int(steps_per_iter, name="steps_per_iter", minimum=0)
    buffer_size = _validate.python_int(buffer_size, name="buffer_size", minimum=1)
    _validate.finite_scalar(ess_warn=ess_warn)  # host-side threshold of the ESSWarning
    _validate.non_negative(ess_warn=ess_warn)
    window = _validate.python_int(proposal_window, name="proposal_window", minimum=1)
    if window > 1 and collection != "onpolicy":
        raise ValueError("`proposal_window` > 1 needs collection='onpolicy'.")
    if defensive and window < 2:
        raise ValueError("`defensive=True` needs proposal_window >= 2.")
    template = jnp.full((samples_per_iter, length), mask_id, jnp.int32)
    a_it = alpha if ess_target is None else float("inf")
    past: list[dict] = []  # proposal_window: the window's batches and policies
    ref = params if ref_params is None else ref_params
    opt_state = optimizer.init(params)
    buffer = None
    history, calls = [], 0
    for it in range(iterations):
        k_s, k_t, key = jax.random.split(key, 3)
        tr = sample(
            apply_fn,
            params,
            template,
            key=k_s,
            mask_id=mask_id,
            num_steps=num_steps,
            ref_params=ref,
        )
        g, f = score(reward_fn, tr.tokens)
        calls += samples_per_iter
        if ess_target is not None:
            k_min = 1.0 if objective == "affinity" else kappa_min
            s = np.asarray(_reward(g, f, direction, objective))
            zero = np.zeros_like(s)  # the weight's log-kappa term alone, by its own formula
            log_kappa = log_importance_weight(zero, f, log_ratio=zero, alpha=1.0, kappa_min=k_min)
            a_it = temper_alpha(
                tr.log_ratio, s, log_kappa, alpha=alpha, prev=a_it, ess_target=ess_target
            )
        fresh = _buffer(
            tr.tokens, tr.unmask_step, tr.log_ratio, g, f, direction, a_it, kappa_min, objective
        )
        if window > 1:
            rows = _mixture_rows(
                past, window, it, params, tr, g, f, apply_fn, mask_id, num_steps, defensive
            )
            buffer = _buffer(*rows, direction, a_it, kappa_min, objective)
        elif collection == "onpolicy" or buffer is None:
            buffer = fresh if collection == "onpolicy" else merge_best(None, fresh, buffer_size)
        else:
            buffer = rescore_buffer(
                apply_fn,
                params,
                ref,
                buffer,
                mask_id=mask_id,
                num_steps=num_steps,
                alpha=a_it,
                kappa_min=1.0 if objective == "affinity" else kappa_min,
            )
            buffer = merge_best(buffer, fresh, buffer_size)
        ess = float(effective_sample_size(buffer.log_w))
        n = buffer.tokens.shape[0]
        if ess < ess_warn * n:
            warnings.warn(
                f"TD3B iteration {it}: effective sample size {ess:.1f} of {n} rows is below "
                f"{ess_warn:g} N; the weights have collapsed (consider a larger alpha).",
                ESSWarning,
                stacklevel=2,
            )
        for j in range(steps_per_iter):
            params, opt_state, m = td3b_train_step(
                apply_fn,
                embed_fn,
                optimizer,
                params,
                opt_state,
                ref,
                buffer,
                key=jax.random.fold_in(k_t, j),
                mask_id=mask_id,
                replicates=replicates,
                kl_weight=kl_weight,
                contrastive_weight=contrastive_weight,
                reduction=reduction,
            )
        f = np.asarray(fresh.p_agonist)
        rec = {k: float(v) for k, v in m.items()} if steps_per_iter else {"ess": ess}
        rec.update(
            iteration=it,
            alpha=a_it,
            buffer_ess=ess,
            mean_reward=float(np.mean(np.asarray(fresh.reward))),
            mean_affinity=float(np.mean(np.asarray(fresh.affinity))),
            direction_accuracy=float(np.mean((f >= 0.5) == (direction > 0))),
            weighted_direction_accuracy=_weighted_hits(buffer, direction),
            oracle_calls=calls,
        )
        history.append(rec)
    return params, history
