"""Ancestral and confidence-ordered MDLM samplers (one ``lax.scan`` over T steps)."""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.diffusion import _common
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._loss import _logits_dtype, _uniform
from jaxkit.diffusion._schedule import MaskingSchedule, as_schedule
from jaxkit.kernels.sampling import sample_tokens

ORDERS = ("ancestral", "confidence")


class Trajectory(NamedTuple):
    """A sampled trajectory of the reverse process.

    Attributes:
      tokens: ``int32[B, L]`` final sequences (no ``[MASK]`` left at valid slots).
      unmask_step: ``int32[B, L]``: the step ``k`` (0-based) at which each slot was
        unmasked; ``-1`` for slots given in the input (never masked).
      log_prob: ``float[B]``: ``sum_k sum_{i unmasked at k} log p_theta(x_i | z_k)``
        (the token factors of the trajectory's probability; the stay/unmask factors
        depend only on the schedule and cancel in every ratio between models).
      log_ratio: ``float[B]``: ``sum_k sum_i [log p_ref - log p_theta](x_i | z_k)``;
        zeros when no reference is given.
    """

    tokens: Array
    unmask_step: Array
    log_prob: Array
    log_ratio: Array


def _grid(k, num_steps, dtype):
    t = 1.0 - k.astype(dtype) / num_steps
    s = 1.0 - (k + 1).astype(dtype) / num_steps
    return t, s


def ancestral_unmask(schedule, k, num_steps, masked, key, dtype):
    """The slots of ``masked`` the ancestral step ``t_k -> t_{k+1}`` unmasks.

    Each w.p. ``(alpha(s) - alpha(t)) / (1 - alpha(t))``; the last step unmasks all.
    """
    t, s = _grid(k, num_steps, dtype)
    p_un = jnp.where(k >= num_steps - 1, 1.0, schedule.unmask_probability(t, s))
    return masked & (_uniform(key, masked, dtype) < p_un)


def sample(
    apply_fn: ApplyFn,
    params: PyTree,
    tokens: Int[ArrayLike, "B L"],
    *,
    key: KeyArray,
    mask_id: int,
    num_steps: int,
    schedule: MaskingSchedule | str = "loglinear",
    order: str = "ancestral",
    temperature: RealScalarLike = 1.0,
    valid: Bool[ArrayLike, "B L"] | None = None,
    ref_params: PyTree | None = None,
) -> Trajectory:
    """Sample from an MDLM by running the reverse process over ``T`` steps.

    Slots of ``tokens`` equal to ``mask_id`` (and valid) are generated; other
    slots are kept (an all-``[MASK]`` input samples unconditionally, anything else
    infills). The grid is ``t_k = 1 - k / T``; at each step the denoiser gives
    ``p_theta(. | z_{t_k})`` (``[MASK]`` at ``-inf``) and a token per masked slot is
    drawn with :func:`jaxkit.kernels.sampling.sample_tokens` (``temperature``, no
    filter: its filter-free path).

    * ``order="ancestral"``: each masked slot is unmasked independently with
      probability ``(alpha(s) - alpha(t)) / (1 - alpha(t))`` (the exact reverse
      transition; the last step unmasks everything).
    * ``order="confidence"``: the number still masked after step ``k`` is
      ``floor(n0 (1 - alpha(s)) / (1 - alpha(1)))`` (``n0`` slots to generate);
      the slots unmasked are those whose drawn token has the highest model
      probability (ties to the lower index).

    All steps run in one ``lax.scan``; rows are independent, so a batch-sharded
    ``tokens`` keeps its sharding. Jitted like jax.numpy (``apply_fn``,
    ``mask_id``, ``num_steps``, ``schedule``, ``order`` static; ``temperature``
    traced).

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits [B, L, V]``.
      params: Denoiser parameters.
      tokens: ``int[B, L]`` template, ``mask_id`` at the slots to generate.
      key: PRNG key.
      mask_id: Id of ``[MASK]``.
      num_steps: T (static).
      schedule: A :class:`MaskingSchedule` or its kind name.
      order: ``"ancestral"`` or ``"confidence"`` (static).
      temperature: Sampling temperature (>= 0; 0 is greedy), traced.
      valid: ``bool[B, L]`` non-padding positions (default all).
      ref_params: Parameters of a reference model with the same ``apply_fn``
        (e.g. the pretrained one); when given, ``log_ratio`` accumulates
        ``log p_ref - log p_theta`` of every unmasked token.

    Returns:
      A :class:`Trajectory`.

    Raises:
      TypeError: Non-integer or non-rank-2 ``tokens``, ``valid`` of another shape.
      ValueError: Token ids outside the alphabet, unknown ``order``, ``num_steps < 1``,
        negative or NaN ``temperature``.

    References:
      Sahoo et al., Simple and Effective Masked Diffusion Language Models, NeurIPS
      2024 (ancestral sampler); Chang et al., MaskGIT, CVPR 2022 (confidence order).
    """
    _validate.is_key(key)
    _common.check_apply_fn(apply_fn)
    tokens, valid = _common.check_tokens(
        tokens, valid, name="tokens", allow_mask=True, mask_id=mask_id
    )
    schedule = as_schedule(schedule)
    _validate.one_of(ORDERS, order=order)
    num_steps = _validate.python_int(num_steps, name="num_steps", minimum=1)
    temperature = _validate.guard_non_negative(
        jnp.asarray(temperature), temperature, name="temperature"
    )
    vocab = _common.checked_vocab(
        apply_fn, params, tokens, valid, name="tokens", allow_mask=True, mask_id=mask_id
    )
    rows = _compact_rows(schedule, order, num_steps, tokens)
    opts = _Opts(mask_id, num_steps, schedule, order, vocab, rows, _shared_rows(tokens))
    return _sample(apply_fn, params, ref_params, tokens, valid, key, temperature, opts)


class _Opts(NamedTuple):
    """The sampler's static (hashed) options."""

    mask_id: int
    num_steps: int
    schedule: MaskingSchedule
    order: str
    vocab: int
    rows: int
    shared: int = 0


def _compact_rows(schedule, order, num_steps, tokens) -> int:
    """Rows of the ancestral sampler's compacted forward (0: every step runs all rows).

    A row's denoiser output at step ``k`` is used only if the step unmasks one of its
    slots, which the ancestral sampler decides before the forward (independently of the
    tokens). From an all-``[MASK]`` row of length ``L`` a slot is unmasked at step ``k``
    w.p. ``q_k = (alpha(t_{k+1}) - alpha(t_k)) / (1 - alpha(1))`` (the last step takes
    the rest), so a row is needed w.p. ``f_k = 1 - (1 - q_k)^L`` (less for infilling).
    The compacted forward holds ``ceil(f B + 2 sd)`` rows (``f = max_k f_k``); a step
    needing more runs all rows. Used when that is at most 0.8 B, outside explicit meshes.
    """
    b, length = tokens.shape
    if order != "ancestral" or not jax.typeof(tokens).sharding.mesh.empty:
        return 0
    with jax.ensure_compile_time_eval():  # host numbers, also under an outer jit
        a = [float(schedule.alpha(1.0 - k / num_steps)) for k in range(num_steps)]
        a1 = float(schedule.alpha(1.0))
    q = [(a[k + 1] - a[k]) / (1.0 - a1) for k in range(num_steps - 1)]
    q.append((1.0 - a[-1]) / (1.0 - a1))
    f = min(1.0, max(1.0 - (1.0 - min(max(qk, 0.0), 1.0)) ** length for qk in q))
    rows = math.ceil(f * b + 2.0 * math.sqrt(b * f * (1.0 - f)))
    return rows if rows <= 0.8 * b else 0


@functools.partial(jax.jit, static_argnames=("apply_fn", "opts"))
def _sample(apply_fn, params, ref_params, tokens, valid, key, temperature, opts):
    mask_id, num_steps, schedule, order, vocab, rows, shared = opts
    tokens = _common.guard_alphabet(
        tokens, tokens, vocab, name="tokens", allow_mask=True, mask_id=mask_id
    )
    out_dt = _logits_dtype(params)
    acc = jnp.float64 if out_dt == jnp.float64 else jnp.float32
    gen = valid & (tokens == mask_id)
    n0 = jnp.sum(gen, axis=-1).astype(acc)
    zero_row = jnp.zeros_like(n0)
    step0 = jnp.where(gen, jnp.int32(0), jnp.int32(-1))
    init = (tokens, step0, zero_row, zero_row)
    pos_attn = _common.positions_and_mask(tokens, valid)  # loop-invariant: built once

    def forwards(z, need, k):
        """``log p`` (and ``log q`` under ``ref_params``); rows not in ``need`` may be 0."""
        if not shared:
            return per_row(z, need)

        def copies(z, need):  # every row's input is row 0's: a block of copies of it
            sub = jax.tree.map(lambda a: a[:shared], (z, valid, pos_attn))
            outs = _forwards(apply_fn, params, ref_params, *sub[:2], mask_id, sub[2])
            return jax.tree.map(lambda o: o[jnp.zeros_like(n0, jnp.int32)], outs)

        # step 0 of a batch whose rows all start alike (unconditional sampling)
        return jax.lax.cond((k == 0) & same, copies, per_row, z, need)

    def per_row(z, need):
        if not rows:
            return _forwards(apply_fn, params, ref_params, z, valid, mask_id, pos_attn)

        def compact(z, need):
            idx = jnp.nonzero(need, size=rows, fill_value=0)[0]  # the needed rows first
            sub = jax.tree.map(lambda a: a[idx], (z, valid, pos_attn))
            outs = _forwards(apply_fn, params, ref_params, *sub[:2], mask_id, sub[2])
            # back by a gather (XLA:CPU scatters are slow): a needed row's place in the
            # block; other rows get some needed row's output, which is never read
            back = jnp.clip(jnp.cumsum(need) - 1, 0, rows - 1)
            return jax.tree.map(lambda o: o[back], outs)

        def every(z, need):
            return _forwards(apply_fn, params, ref_params, z, valid, mask_id, pos_attn)

        return jax.lax.cond(jnp.sum(need) <= rows, compact, every, z, need)

    if shared:  # off under explicit meshes (a row slice of a sharded batch)
        same = jnp.all(tokens == tokens[:1]) & jnp.all(valid == valid[:1])

    def body(carry, inputs):
        z, step, lp, lr = carry
        k, kk = inputs
        k_tok, k_u = jax.random.split(kk)
        masked = valid & (z == mask_id)
        if order == "ancestral":  # the unmasked slots first: only their rows need a forward
            new = ancestral_unmask(schedule, k, num_steps, masked, k_u, acc)
            log_p, log_q = forwards(z, jnp.any(new, axis=-1), k)
        else:
            log_p, log_q = forwards(z, None, k)
        draw = sample_tokens(log_p, key=k_tok, temperature=temperature, stats="logits")
        tok = draw.token
        if order == "confidence":
            _, s = _grid(k, num_steps, acc)
            a1 = schedule.alpha(jnp.asarray(1.0, acc))
            frac = (1.0 - schedule.alpha(s)) / (1.0 - a1)
            keep = jnp.floor(n0 * frac + 1e-6).astype(jnp.int32)
            keep = jnp.where(k == num_steps - 1, 0, keep)
            n_un = jnp.maximum(jnp.sum(masked, axis=-1) - keep, 0)
            score = jnp.where(masked, draw.probability.astype(acc), -1.0)
            rank = jnp.argsort(jnp.argsort(-score, axis=-1, stable=True), axis=-1)
            new = masked & (rank < n_un[:, None])
        lp_tok = _common.gather_log_prob(log_p, tok)
        lp_new = jnp.sum(jnp.where(new, lp_tok, 0.0), axis=-1).astype(acc)
        if ref_params is not None:
            lq_new = jnp.sum(jnp.where(new, _common.gather_log_prob(log_q, tok), 0.0), -1)
            lr = lr + lq_new.astype(acc) - lp_new
        z = jnp.where(new, tok, z)
        step = jnp.where(new, k, step)
        return (z, step, lp + lp_new, lr), None

    keys = jax.random.split(key, num_steps)
    ks = jnp.arange(num_steps, dtype=jnp.int32)
    (z, step, lp, lr), _ = jax.lax.scan(body, init, (ks, keys))
    step = jnp.where(gen, step, -1)
    return Trajectory(z, step, lp.astype(out_dt), lr.astype(out_dt))


def _shared_rows(tokens) -> int:
    """Rows of step 0's forward when every row starts from the same input (0: off).

    Unconditional sampling starts every row from the same all-``[MASK]`` input, so one
    row's step-0 output serves the batch (an exact saving: the denoiser is a function
    of its input). The block holds ``ceil(256 / L)`` copies of row 0 rather than one:
    XLA:CPU's matrix kernels round a block of a few rows differently in the last bit,
    and with this block the bench's trajectories (B = 128, L = 12) are those of the
    per-row forward bit for bit (at L = 24 with d_model = 128 the last bits still
    differ). Off under explicit meshes and when the block would not be smaller than B.
    """
    b, length = tokens.shape
    rows = -(-256 // max(length, 1))
    if not jax.typeof(tokens).sharding.mesh.empty or rows >= b:
        return 0
    return rows


def _forwards(apply_fn, params, ref_params, z, valid, mask_id, pos_attn):
    log_p = _common.denoise(apply_fn, params, z, valid, mask_id, pos_attn)
    if ref_params is None:
        return log_p, None
    return log_p, _common.denoise(apply_fn, ref_params, z, valid, mask_id, pos_attn)


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
    unmask_step = jnp.asarray(unmask_step)
    _validate.integer(unmask_step, name="unmask_step")
    if unmask_step.shape != tokens.shape:
        raise TypeError(
            f"`unmask_step` must have the shape of `tokens` {tokens.shape}, got "
            f"{unmask_step.shape} (length mismatch)."
        )
    num_steps = _validate.python_int(num_steps, name="num_steps", minimum=1)
    _common.checked_vocab(
        apply_fn, params, tokens, valid, name="tokens", allow_mask=False, mask_id=mask_id
    )
    return _traj_lp(
        apply_fn,
        params,
        tokens,
        unmask_step.astype(jnp.int32),
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
