"""Argument checks of DLMR's training losses and reward (TypeError / ValueError / error_if).

Each check raises eagerly on concrete values and through ``eqx.error_if`` under ``jit``
(NaN fails: every predicate is written so that a NaN is out of range).
"""

import jax.numpy as jnp

from jaxkit import _validate


def check_stage2(p, embeds, labels, ctx, at, action, *, lm_cfg, cfg):
    """Stage 2's adapter ``p`` and batch: shapes and dtypes (static), then the values.

    ``p`` (:func:`check_params`), ``embeds``, ``ctx`` floating ``[B, T, D]`` (``D``:
    ``lm_cfg.d_model``), ``labels [B, T]`` in ``[-1, V)``, ``at [B]`` in ``[0, T]``,
    ``action [B]`` in ``[0, A)``. Returns the five batch arrays (``labels``, ``at``,
    ``action`` guarded).
    """
    d, vocab_size, n_actions = lm_cfg.d_model, lm_cfg.vocab_size, cfg.n_actions
    check_params(p, name="p", cfg=cfg, d=d)
    for name, v in (("embeds", embeds), ("ctx", ctx)):
        _validate.floating(v, name=name)  # before .shape: a string names it
    for name, v in (("labels", labels), ("at", at), ("action", action)):
        _validate.integer(v, name=name)  # before jnp.asarray (a string names none)
    embeds, labels, ctx, at, action = (jnp.asarray(x) for x in (embeds, labels, ctx, at, action))
    _validate.shape(embeds, (None, None, d), name="embeds")
    b, t = embeds.shape[:2]
    _validate.shape(ctx, (b, t, d), name="ctx")
    _validate.shape(labels, (b, t), name="labels")
    for name, v in (("at", at), ("action", action)):
        _validate.shape(v, (b,), name=name)
    labels = _validate.error_if(
        labels,
        _validate.any_outside(labels, -1, vocab_size - 1),
        f"`labels` must lie in [-1, {vocab_size}) (-1: not scored).",
    )
    at = _validate.error_if(at, _validate.any_outside(at, 0, t), f"`at` must lie in [0, {t}].")
    action = _validate.ids_in(action, n_actions, name="action")
    return embeds, labels, ctx, at, action


def check_stage1(targets, target_valid, evidence, *, b: int, d: int, s: int) -> None:
    """Stage 1: ``targets [B, 2, D]``, ``target_valid bool[B, 2]``, ``evidence bool[B, 2, S]``.

    The masks must be bool: a float mask (``True`` as 0.5) would reweight the terms silently.
    """
    _validate.shape(targets, (b, 2, d), name="targets")
    _validate.boolean(target_valid, name="target_valid")  # before the shape: a str names it
    _validate.shape(target_valid, (b, 2), name="target_valid")
    if evidence is not None:
        _validate.boolean(evidence, name="evidence")
        _validate.shape(evidence, (b, 2, s), name="evidence")


def check_group(n: int, group) -> int:
    """``group`` a Python int >= 1 that divides the ``n`` rollouts."""
    group = _validate.python_int(group, name="group", minimum=1)
    if n % group:
        raise ValueError(f"the {n} rollouts must be a multiple of `group`={group}.")
    return group


def check_stage3(router_h, actions, eligible, rewards, kl_beta, *, n_actions: int, group):
    """Shapes and values of :func:`stage3_loss`'s batch; returns the guarded arrays."""
    _validate.floating(router_h, name="router_h")  # before jnp.asarray: a string names none
    _validate.boolean(eligible, name="eligible")
    _validate.real(rewards, name="rewards")
    router_h, eligible, rewards = (jnp.asarray(x) for x in (router_h, eligible, rewards))
    _validate.ndim(router_h, 3, name="router_h")
    b, n = router_h.shape[:2]
    _validate.shape(eligible, (b, n), name="eligible")
    if actions is None:
        _validate.shape(rewards, (b, n_actions), name="rewards")
    else:
        _validate.integer(actions, name="actions")
        actions = jnp.asarray(actions)
        _validate.shape(actions, (b, n), name="actions")
        _validate.shape(rewards, (b,), name="rewards")
        check_group(b, group)
        actions = _validate.ids_in(actions, n_actions, name="actions")
    rewards = _validate.all_finite(rewards, name="rewards")
    rewards = _validate.guard_non_negative(rewards, kl_beta, name="kl_beta")
    return actions, eligible, rewards


def check_reward(correct, budget, lambda_eff):
    """``correct`` in ``[0, 1]``, ``budget`` finite and > 0, ``lambda_eff`` finite."""
    c = jnp.asarray(correct, jnp.float32)
    bad = _validate.any_outside(c, 0.0, 1.0) | _validate.any_nonfinite(c)
    c = _validate.error_if(c, bad, "`correct` must lie in [0, 1] (no NaN).")
    c = _validate.guard_positive(c, budget, name="budget")
    return _validate.guard_finite(c, lambda_eff, name="lambda_eff")


def check_injector(ctx, ctx_valid, dist, latents, now, latents_valid, *, d: int) -> None:
    """Check :meth:`Injector.forward`'s batch (shapes, dtypes; ``D = d``: ``d_model``).

    ``ctx [B, S, D]``, ``ctx_valid bool[B, S]``, ``dist int[B, S]``, ``latents [B, K, D]``,
    ``now [B, D]``, ``latents_valid bool[B, K]`` (or ``None``).
    Host-side, before any ``jnp.asarray`` (a string names its argument); reads only dtypes and
    shapes, so tracers pass. A float mask (``True`` as 0.5) or float distances (truncated
    by the one-hot) would be read silently: both are a ``TypeError``.
    """
    for name, v in (("ctx", ctx), ("latents", latents), ("now", now)):
        _validate.floating(v, name=name)
    _validate.boolean(ctx_valid, name="ctx_valid")
    _validate.integer(dist, name="dist")
    if latents_valid is not None:
        _validate.boolean(latents_valid, name="latents_valid")
    _validate.shape(ctx, (None, None, d), name="ctx")
    b, s = jnp.shape(ctx)[:2]
    _validate.shape(ctx_valid, (b, s), name="ctx_valid")
    _validate.shape(dist, (b, s), name="dist")
    _validate.shape(latents, (b, None, d), name="latents")
    _validate.shape(now, (b, d), name="now")
    if latents_valid is not None:
        _validate.shape(latents_valid, (b, jnp.shape(latents)[1]), name="latents_valid")


def check_router_states(h, *, d: int, rank: int | None = None) -> None:
    """Router states: a floating ``h [*B, D]`` (``rank``: exactly that rank) with ``D = d``."""
    _validate.floating(h, name="h")  # before .astype / jnp.asarray: a str names `h`
    if rank is not None:
        _validate.ndim(h, rank, name="h")
    if jnp.ndim(h) < 1 or jnp.shape(h)[-1] != d:
        raise TypeError(f"`h` must have trailing dimension d_model={d}, got shape {jnp.shape(h)}.")


def check_params(p, *, name: str, cfg=None, d: int | None = None) -> None:
    """A :class:`DLMRParams`'s banks, static (dtypes and shapes only: free under ``jit``).

    ``p.banks``: floating ``[M, D]`` banks, one with ``cfg.shared_bank`` and two otherwise
    (no ``cfg``: one or two), each of ``M >= cfg.k_max`` rows; ``D = d`` (default: the
    first bank's width). A TypeError naming ``name.banks[i]``.
    """
    banks = getattr(p, "banks", None)
    if not isinstance(banks, tuple | list):
        raise TypeError(f"`{name}` must be DLMRParams, got {type(p).__name__}.")
    want = (1, 2) if cfg is None else (1,) if cfg.shared_bank else (2,)
    if len(banks) not in want:
        n = " or ".join(map(str, want))
        raise TypeError(f"`{name}.banks` must hold {n} bank(s), got {len(banks)}.")
    m = 0 if cfg is None else cfg.k_max
    for i, z in enumerate(banks):
        _validate.floating(z, name=f"{name}.banks[{i}]")
        _validate.ndim(z, 2, name=f"{name}.banks[{i}]")
        d = jnp.shape(z)[1] if d is None else d
        _validate.shape(z, (None, d), name=f"{name}.banks[{i}]")
        if jnp.shape(z)[0] < m:
            raise TypeError(
                f"`{name}.banks[{i}]` must hold >= k_max={m} latents, got shape {jnp.shape(z)}."
            )
