"""Inference-time baselines at a counted oracle budget: best-of-N / SIR and SMC.

``sir_resample`` and ``reverse_step`` are jitted (module level); the loops that
call the black-box oracle (``best_of_n``, ``smc_sample``) run on the host and
report how many oracle calls they spent.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.diffusion import _common
from jaxkit.diffusion._collect import RewardFn, score
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._sample import ancestral_unmask, sample
from jaxkit.diffusion._schedule import MaskingSchedule, as_schedule
from jaxkit.diffusion._td3b import gated_reward
from jaxkit.kernels.sampling import sample_tokens


class Guided(NamedTuple):
    """Samples from an inference-time baseline and the oracle calls they cost."""

    tokens: np.ndarray
    oracle_calls: int


def sir_resample(
    tokens: Int[ArrayLike, "N L"],
    reward: Float[ArrayLike, " N"],
    *,
    key: KeyArray,
    alpha: RealScalarLike,
    num_out: int,
) -> Array:
    """Sampling-importance-resampling: ``num_out`` rows drawn w.p. ``softmax(S / alpha)``.

    The rows of ``tokens`` are copied whole, so any integer ids are carried through.

    Raises:
      TypeError: ``tokens`` not an integer ``[N, L]`` array, ``reward`` not a real ``[N]``
        array; ``key`` not a PRNG key.
      ValueError: Non-finite rewards, ``alpha <= 0``.
    """
    _validate.is_key(key)
    _validate.integer(tokens, name="tokens")  # before jnp.asarray: a str names the argument
    _validate.real(reward, name="reward")
    tokens, r = jnp.asarray(tokens), jnp.asarray(reward)
    _validate.ndim(tokens, 2, name="tokens")
    if r.shape != tokens.shape[:1]:
        raise TypeError(f"`reward` must have shape {tokens.shape[:1]}, got {r.shape}.")
    num_out = _validate.python_int(num_out, name="num_out", minimum=1)
    r = _validate.all_finite(r, name="reward")
    r = _validate.guard_positive(r, alpha, name="alpha")
    return _sir(tokens, r, key, alpha, num_out=num_out)


@functools.partial(jax.jit, static_argnames=("num_out",))
def _sir(tokens, r, key, alpha, *, num_out):
    logits = r.astype(jnp.float32) / jnp.asarray(alpha, jnp.float32)
    idx = jax.random.categorical(key, logits, shape=(num_out,))
    return tokens[idx]


def reverse_step(
    apply_fn: ApplyFn,
    params: PyTree,
    z: Int[ArrayLike, "B L"],
    step: Int[ArrayLike, ""],
    *,
    key: KeyArray,
    mask_id: int,
    num_steps: int,
    schedule: MaskingSchedule | str = "loglinear",
) -> tuple[Array, Array]:
    """One ancestral step ``t_k -> t_{k+1}`` of :func:`sample` and the denoised guess.

    Returns:
      ``(z_next, x_hat)``: the next noisy state and ``z_next`` with its masks filled
      by the model's arg-max (what SMC scores with the oracle).

    Raises:
      TypeError: bad tokens; a non-integer ``step``; ``key`` not a PRNG key; ``apply_fn``
        not callable.
      ValueError: ``step`` outside ``[0, num_steps)``, a token id of ``z`` outside the
        alphabet ``[0, V)`` of ``apply_fn``'s logits (traced: under ``jit``).
    """
    _validate.is_key(key)
    _common.check_apply_fn(apply_fn)
    z, valid = _common.check_tokens(z, None, name="z", allow_mask=True, mask_id=mask_id)
    vocab = _common.checked_vocab(
        apply_fn, params, z, valid, name="z", allow_mask=True, mask_id=mask_id
    )
    num_steps = _validate.python_int(num_steps, name="num_steps", minimum=1)
    step = jnp.asarray(step)
    _validate.integer(step, name="step")
    _validate.ndim(step, 0, name="step")
    step = _validate.ids_in(step, num_steps, name="step")
    return _reverse_step(
        apply_fn,
        params,
        z,
        valid,
        step.astype(jnp.int32),
        key,
        mask_id=mask_id,
        num_steps=num_steps,
        schedule=as_schedule(schedule),
        vocab=vocab,
    )


@functools.partial(
    jax.jit, static_argnames=("apply_fn", "mask_id", "num_steps", "schedule", "vocab")
)
def _reverse_step(apply_fn, params, z, valid, k, key, *, mask_id, num_steps, schedule, vocab):
    z = _common.guard_alphabet(z, z, vocab, name="z", allow_mask=True, mask_id=mask_id)
    k_tok, k_u = jax.random.split(key)
    log_p = _common.denoise(apply_fn, params, z, valid, mask_id)
    draw = sample_tokens(log_p, key=k_tok)
    new = ancestral_unmask(schedule, k, num_steps, valid & (z == mask_id), k_u, jnp.float32)
    z = jnp.where(new, draw.token, z)
    x_hat = jnp.where(z == mask_id, jnp.argmax(log_p, axis=-1).astype(jnp.int32), z)
    return z, x_hat


def _gated(reward_fn, tokens, direction):
    g, f = score(reward_fn, tokens)
    return np.asarray(gated_reward(jnp.asarray(g), jnp.asarray(f), direction=direction))


def best_of_n(
    apply_fn: ApplyFn,
    params: PyTree,
    reward_fn: RewardFn,
    *,
    key: KeyArray,
    n: int,
    num_out: int,
    length: int,
    direction: int,
    mask_id: int,
    num_steps: int,
    alpha: float = 0.1,
) -> Guided:
    """Draw ``n`` samples, score each (``n`` oracle calls), SIR-resample ``num_out`` (host)."""
    _validate.is_key(key)
    k1, k2 = jax.random.split(key)
    tmpl = jnp.full((n, length), mask_id, jnp.int32)
    tr = sample(apply_fn, params, tmpl, key=k1, mask_id=mask_id, num_steps=num_steps)
    s = _gated(reward_fn, tr.tokens, direction)
    out = sir_resample(tr.tokens, jnp.asarray(s), key=k2, alpha=alpha, num_out=num_out)
    return Guided(np.asarray(out), n)


def smc_sample(
    apply_fn: ApplyFn,
    params: PyTree,
    reward_fn: RewardFn,
    *,
    key: KeyArray,
    num_particles: int,
    length: int,
    direction: int,
    mask_id: int,
    num_steps: int,
    alpha: float = 0.1,
) -> Guided:
    """SMC guidance at inference (host loop; ``num_particles * num_steps`` oracle calls).

    After each reverse step the arg-max completion of every particle is scored and
    the particles are resampled with weights ``exp((r_k - r_{k-1}) / alpha)``.
    """
    _validate.is_key(key)
    _validate.finite_scalar(alpha=alpha)  # host-side: the weights divide by it in NumPy
    _validate.positive(alpha=alpha)
    z = jnp.full((num_particles, length), mask_id, jnp.int32)
    r_prev = np.zeros(num_particles)
    calls = 0
    for k in range(num_steps):
        key, k_step, k_res = jax.random.split(key, 3)
        z, x_hat = reverse_step(
            apply_fn, params, z, k, key=k_step, mask_id=mask_id, num_steps=num_steps
        )
        r = _gated(reward_fn, x_hat, direction)
        calls += num_particles
        logw = (r - r_prev) / alpha
        w = np.exp(logw - logw.max())
        idx = np.asarray(
            jax.random.choice(k_res, num_particles, (num_particles,), p=jnp.asarray(w / w.sum()))
        )
        z, r_prev = z[idx], r[idx]
    return Guided(np.asarray(z), calls)
