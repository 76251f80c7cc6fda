"""DLMR's stage-3 reward and group-normalised advantages [R] (pure, jit-friendly)."""

import jax.numpy as jnp

from jaxkit.memory._checks import check_group, check_reward


def group_advantages(rewards, group: int):
    """``(R - mean_G R) / (std_G R + 1e-6)`` over consecutive groups of ``group`` rollouts.

    Raises:
      TypeError: ``group`` not a Python int; ``rewards`` not 1-D.
      ValueError: ``group < 1`` or not dividing the number of rollouts.
    """
    rewards = jnp.asarray(rewards)
    if rewards.ndim != 1:
        raise TypeError(f"`rewards` must have rank 1, got shape {rewards.shape}.")
    group = check_group(rewards.shape[0], group)
    r = rewards.astype(jnp.float32).reshape(-1, group)
    a = (r - jnp.mean(r, 1, keepdims=True)) / (jnp.std(r, 1, keepdims=True) + 1e-6)
    return a.reshape(-1)


def dlmr_reward(correct, injected, generated, *, budget, lambda_eff):
    """``R = R_task + lambda_eff R_task R_eff``, ``R_eff = -(injected + generated) / budget``.

    [R] (the paper's R_eff is not recovered); gated by correctness so that the
    efficiency term cannot teach "always null" on wrong answers. ``correct``: 1/0, or
    the probability of a correct answer (the expected ``R_task`` of a sampled answer,
    e.g. the softmax of the right token when every route is scored).

    Raises:
      ValueError: ``correct`` outside ``[0, 1]`` or NaN, ``budget`` not finite and > 0,
        a non-finite ``lambda_eff`` (traced values: under ``jit``).
    """
    c = check_reward(correct, budget, lambda_eff)
    cost = (jnp.asarray(injected, jnp.float32) + jnp.asarray(generated, jnp.float32)) / budget
    return c - lambda_eff * c * cost
