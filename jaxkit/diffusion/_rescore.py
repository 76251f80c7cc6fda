"""Re-scoring a stored MDLM trajectory under other parameters (the path log-probability)."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate
from jaxkit._typing import PyTree
from jaxkit.diffusion import _common
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._loss import _logits_dtype


def trajectory_log_prob(
    apply_fn: ApplyFn,
    params: PyTree,
    tokens: Int[ArrayLike, "B L"],
    unmask_step: Int[ArrayLike, "B L"],
    *,
    mask_id: int,
    num_steps: int,
    valid: Bool[ArrayLike, "B L"] | None = None,
) -> Float[Array, " B"]:
    """Re-score a stored trajectory under ``params``: ``sum_k sum_{i at k} log p(x_i | z_k)``.

    ``z_k`` holds the tokens with ``unmask_step < k`` (``-1``: always present) and
    ``[MASK]`` elsewhere, exactly the states the sampler visited. The log-ratio of
    a buffer entry after the policy changed is
    ``trajectory_log_prob(ref) - trajectory_log_prob(policy)``, i.e.
    ``sum (log p_pre - log p_theta)`` over the path (never a running sum of policy
    log-probabilities alone, the upstream tree bug).

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits``.
      params: Parameters to score under.
      tokens: ``int[B, L]`` final tokens of the trajectories.
      unmask_step: ``int[B, L]`` from :class:`Trajectory` (in ``[-1, num_steps)``).
      mask_id: Id of ``[MASK]``.
      num_steps: T of the sampler that made the trajectories (static).
      valid: ``bool[B, L]`` non-padding positions.

    Returns:
      ``float[B]`` in the parameters' dtype.
    """
    _common.check_apply_fn(apply_fn)
    tokens, valid = _common.check_tokens(
        tokens, valid, name="tokens", allow_mask=False, mask_id=mask_id
    )
    num_steps = _validate.python_int(num_steps, name="num_steps", minimum=1)
    unmask_step = _common.check_unmask_step(unmask_step, tokens, num_steps)
    _common.checked_vocab(
        apply_fn, params, tokens, valid, name="tokens", allow_mask=False, mask_id=mask_id
    )
    return _traj_lp(
        apply_fn,
        params,
        tokens,
        unmask_step,
        valid,
        mask_id=mask_id,
        num_steps=num_steps,
    )


@functools.partial(jax.jit, static_argnames=("apply_fn", "mask_id", "num_steps"))
def _traj_lp(apply_fn, params, tokens, unmask_step, valid, *, mask_id, num_steps):
    out_dt = _logits_dtype(params)
    acc = jnp.float64 if out_dt == jnp.float64 else jnp.float32
    pos_attn = _common.positions_and_mask(tokens, valid)

    def body(total, k):
        z = jnp.where(unmask_step < k, tokens, jnp.int32(mask_id))
        log_p = _common.denoise(apply_fn, params, z, valid, mask_id, pos_attn)
        here = valid & (unmask_step == k)
        lp = jnp.where(here, _common.gather_log_prob(log_p, tokens), 0.0)
        return total + jnp.sum(lp, axis=-1).astype(acc), None

    total0 = jnp.zeros_like(tokens[:, 0], dtype=acc)
    total, _ = jax.lax.scan(body, total0, jnp.arange(num_steps, dtype=jnp.int32))
    return total.astype(out_dt)
