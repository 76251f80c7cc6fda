"""Ancestral and confidence-ordered MDLM samplers (one ``lax.scan`` over T steps).

The sampler's static planning (the compacted forwards' sizes, :func:`_compact_sizes`,
and its helpers) lives in :mod:`jaxkit.diffusion._sample_plan`; re-exported here.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int

from jaxkit import _validate, nn
from jaxkit._typing import KeyArray, PyTree, RealScalarLike
from jaxkit.diffusion import _common, _steer
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._loss import _logits_dtype, _uniform
from jaxkit.diffusion._sample_plan import _compact_sizes as _compact_sizes
from jaxkit.diffusion._sample_plan import _max_unmask_probability as _max_unmask_probability
from jaxkit.diffusion._sample_plan import _shared as _shared
from jaxkit.diffusion._sample_plan import _still_masked as _still_masked
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
    interventions: nn.Interventions | None = None,
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
      transition; the last step unmasks everything); this is decided first, and
      tokens are drawn only at the slots a step unmasks.
    * ``order="confidence"``: the number still masked after step ``k`` is
      ``floor(n0 (1 - alpha(s)) / (1 - alpha(1)))`` (``n0`` slots to generate);
      the slots unmasked are those whose drawn token has the highest model
      probability (ties to the lower index).

    All steps run in one ``lax.scan``; rows are independent, so a batch-sharded
    ``tokens`` keeps its sharding. Jitted like jax.numpy (``apply_fn``,
    ``mask_id``, ``num_steps``, ``schedule``, ``order`` static; ``temperature``
    traced).

    Args:
      apply_fn: ``apply_fn(params, tokens, positions, attn_mask) -> logits [B, L, V]``;
        with a slot form ``apply_fn.logits_at`` (as :func:`transformer_denoiser`'s) the
        ancestral order computes logits only at the slots it draws.
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
        ``log p_ref - log p_theta`` of every unmasked token. The reference is another
        model: ``interventions`` do not edit it.
      interventions: Additive edits of the sampled model (an ``nn.Interventions`` with
        ``add={layer: vec}`` only, ``vec`` of shape ``[D]`` or ``[B, D]``, ``B`` the rows of
        ``tokens``), e.g. a steering vector of :func:`jaxkit.steering.steer_add`. They act
        at every position of every denoiser forward of both orders (a ``[B, D]`` edit: row
        ``i`` always gets its own vector, also in the ancestral order's forwards on a
        subset of rows), passed as ``apply_fn(..., interventions=iv)`` (and to
        ``logits_at``); the check reads the denoiser's config ``apply_fn.cfg``, which
        :func:`transformer_denoiser`'s carries. Vectors are traced: another steering
        vector of the same shape reuses the compiled program. None (or an empty object):
        the unsteered sampler, ``apply_fn`` called without the keyword.

    Returns:
      A :class:`Trajectory`.

    Raises:
      TypeError: Non-integer or non-rank-2 ``tokens``, ``valid`` of another shape,
        ``key`` not a PRNG key; an edit of another shape (naming
        ``interventions.add[l]``); edits with an ``apply_fn`` without ``cfg``.
      ValueError: Token ids outside the alphabet, unknown ``order``, ``num_steps < 1``,
        negative or NaN ``temperature``; ``interventions`` with an insertion or read
        sites, or a NaN/inf edit (naming ``interventions.add[l]``).

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
        _validate.real_array(temperature, name="temperature"), temperature, name="temperature"
    )
    edits = _steer.check(interventions, apply_fn, tokens.shape[0])
    vocab = _common.checked_vocab(
        apply_fn, params, tokens, valid, name="tokens", allow_mask=True, mask_id=mask_id
    )
    rows, slots = _compact_sizes(schedule, order, num_steps, tokens)
    opts = _Opts(mask_id, num_steps, schedule, order, vocab, rows, _shared(tokens), slots)
    return _sample(apply_fn, params, ref_params, tokens, valid, key, temperature, opts, edits)


class _Opts(NamedTuple):
    """The sampler's static (hashed) options."""

    mask_id: int
    num_steps: int
    schedule: MaskingSchedule
    order: str
    vocab: int
    rows: tuple[int, ...]
    shared: bool = False
    slots: int = 0


@functools.partial(jax.jit, static_argnames=("apply_fn", "opts"))
def _sample(apply_fn, params, ref_params, tokens, valid, key, temperature, opts, edits=None):
    mask_id, num_steps, schedule, order, vocab, rows, shared, slots = opts
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
    # the rows' loop-invariant inputs: positions and mask, the edits one vector per row
    ctx = (pos_attn, _steer.per_row(edits or {}, tokens.shape[0]))
    fwd = functools.partial(_forwards, apply_fn, params, ref_params, mask_id=mask_id)
    logits_at = _common.slot_form(apply_fn) if slots else None
    if logits_at is not None:
        fwd_at = functools.partial(_forwards_at, logits_at, params, ref_params)
    length = tokens.shape[1]

    if shared:  # off under explicit meshes (a row slice of a sharded batch)
        # Every row starts from the same input (unconditional sampling): the first row's
        # output serves each row that has nothing unmasked yet (all rows at step 0).
        same = jnp.all(tokens == tokens[:1]) & jnp.all(valid == valid[:1])
        if edits:  # and, steered, the same edits
            same = same & _steer.rows_alike(ctx[1])
        first = jax.tree.map(lambda a: a[:1], (tokens, *ctx))
        shapes = jax.eval_shape(fwd, *first)
        first_out = jax.lax.cond(
            same,
            lambda: fwd(*first),
            lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes),
        )
    sizes = ((0,) if shared else ()) + rows  # the compacted blocks (0: no forward)

    def by_block(z, need, block_of, whole, every):
        """The forward on the smallest block of ``sizes`` that holds the rows it must run.

        Those are the rows of ``need`` (``None``: all) not served by the first row's output;
        ``block_of(size, z, fresh, reuse)`` runs a block, ``whole(z)`` the forward when there
        are no blocks, ``every(z)`` the one on every row (more rows than the largest block).
        """
        need = jnp.ones_like(n0, bool) if need is None else need
        reuse = same & jnp.all(z == tokens, axis=-1) if shared else jnp.zeros_like(need)
        fresh = need & ~reuse
        if not sizes:
            return whole(z)
        branches = [functools.partial(block_of, size) for size in sizes]
        branches.append(lambda z, fresh, reuse: every(z))
        i = jnp.sum(jnp.sum(fresh) > jnp.asarray(sizes, jnp.int32))
        return jax.lax.switch(i, branches, z, fresh, reuse)

    def forwards(z, need, at):
        """``at(logits, row_of)`` of the denoiser's (and the reference's) raw logits.

        ``logits`` is a block of rows and ``row_of[b]`` row ``b``'s place in it (``None``:
        the whole batch in order); rows not in ``need`` (``None``: all needed) may get any
        row's place. The forward runs on the block :func:`by_block` picks.
        """

        def full(z):
            return at(fwd(z, *ctx), None)

        return by_block(z, need, functools.partial(block, at), full, full)

    def block(at, size, z, fresh, reuse):
        """The forward on the first ``size`` rows of ``fresh``; ``reuse`` rows read row 0's."""
        place = _places(fresh, size) if size else jnp.zeros_like(fresh, jnp.int32)
        if size:
            idx = jnp.nonzero(fresh, size=size, fill_value=0)[0]
            outs = fwd(*jax.tree.map(lambda a: a[idx], (z, *ctx)))
        if not shared:
            return at(outs, place)
        if size:
            outs = jax.tree.map(lambda f, o: jnp.concatenate([f, o]), first_out, outs)
            place = place + 1
        return at(first_out if not size else outs, jnp.where(reuse, 0, place))

    def forwards_at(z, need, b_i, l_i):
        """:func:`forwards` through the denoiser's slot form: raw logits at ``(b_i, l_i)``.

        The same blocks and row choice; the forward's last block runs only at the slots
        (``[N, V]``), a slot of a row served by the first row reads that row's output. More
        rows than the largest block (rare) take the full forward's logits at the slots.
        """
        return by_block(
            z,
            need,
            functools.partial(block_at, b_i, l_i),
            lambda z: fwd_at(z, *ctx, b_i, l_i),
            # more rows than the largest block (rare): the full forward, a smaller compile
            lambda z: jax.tree.map(lambda o: o[b_i, l_i], fwd(z, *ctx)),
        )

    def block_at(b_i, l_i, size, z, fresh, reuse):
        """:func:`block` at the slots: the block's rows' logits at ``(b_i, l_i)`` only."""
        if size:
            place = _places(fresh, size)
            idx = jnp.nonzero(fresh, size=size, fill_value=0)[0]
            outs = fwd_at(*jax.tree.map(lambda a: a[idx], (z, *ctx)), place[b_i], l_i)
        if not shared:
            return outs
        first = jax.tree.map(lambda f: f[0, l_i], first_out)
        if not size:
            return first
        pick = reuse[b_i][:, None]
        return jax.tree.map(lambda f, o: jnp.where(pick, f, o), first, outs)

    def draw(logits, key):
        """A token per slot from SUBS ``log p [..., V]`` of ``logits``; its ``log p``, ``log q``."""
        log_p, log_q = (None if x is None else _common.subs_log_probs(x, mask_id) for x in logits)
        d = sample_tokens(log_p, key=key, temperature=temperature, stats="logits")
        lp, lq = (
            None if x is None else _common.gather_log_prob(x, d.token) for x in (log_p, log_q)
        )
        return d, lp, lq

    def draw_new(z, new, key):
        """Tokens at the slots of ``new`` (elsewhere unused) and their ``log p``, ``log q``."""
        need = jnp.any(new, axis=-1)
        if not slots:
            d, lp, lq = draw(forwards(z, need, _rows_at), key)
            return d.token, lp, lq
        flat = new.reshape(-1)

        def few(z, need):  # forward on the needed rows, drawn at the unmasked slots only
            idx = jnp.nonzero(flat, size=slots, fill_value=0)[0]
            b_i, l_i = idx // length, idx % length

            def at(logits, row_of):
                r = b_i if row_of is None else row_of[b_i]
                return jax.tree.map(lambda o: o[r, l_i], logits)

            if logits_at is None:
                logits = forwards(z, need, at)
            else:  # the denoiser's last block runs at the drawn slots only
                logits = forwards_at(z, need, b_i, l_i)
            d, lp, lq = draw(logits, key)
            outs = jax.tree.map(lambda o: o[_places(flat, slots)], (d.token, lp, lq))
            return jax.tree.map(lambda o: o.reshape(new.shape), outs)

        def every(z, need):  # more slots than the draw holds: every row, every slot
            d, lp, lq = draw(fwd(z, *ctx), key)
            return d.token, lp, lq

        return jax.lax.cond(jnp.sum(flat) <= slots, few, every, z, need)

    def body(carry, inputs):
        z, step, lp, lr = carry
        k, kk = inputs
        k_tok, k_u = jax.random.split(kk)
        masked = valid & (z == mask_id)
        if order == "ancestral":  # the unmasked slots first: only they need a token
            new = ancestral_unmask(schedule, k, num_steps, masked, k_u, acc)
            tok, lp_tok, lq_tok = draw_new(z, new, k_tok)
        else:
            d, lp_tok, lq_tok = draw(forwards(z, None, _rows_at), k_tok)
            tok = d.token
            _, s = _grid(k, num_steps, acc)
            a1 = schedule.alpha(jnp.asarray(1.0, acc))
            frac = (1.0 - schedule.alpha(s)) / (1.0 - a1)
            keep = jnp.floor(n0 * frac + 1e-6).astype(jnp.int32)
            keep = jnp.where(k == num_steps - 1, 0, keep)
            n_un = jnp.maximum(jnp.sum(masked, axis=-1) - keep, 0)
            score = jnp.where(masked, d.probability.astype(acc), -1.0)
            new = masked & (_rank(score) < n_un[:, None])
        lp_new = jnp.sum(jnp.where(new, lp_tok, 0.0), axis=-1).astype(acc)
        if ref_params is not None:
            lq_new = jnp.sum(jnp.where(new, lq_tok, 0.0), -1)
            lr = lr + lq_new.astype(acc) - lp_new
        z = jnp.where(new, tok, z)
        step = jnp.where(new, k, step)
        return (z, step, lp + lp_new, lr), None

    keys = jax.random.split(key, num_steps)
    ks = jnp.arange(num_steps, dtype=jnp.int32)
    (z, step, lp, lr), _ = jax.lax.scan(body, init, (ks, keys))
    step = jnp.where(gen, step, -1)
    return Trajectory(z, step, lp.astype(out_dt), lr.astype(out_dt))


def _places(need, size):
    """Each entry's place in a block holding the first ``size`` entries of ``need``.

    A needed entry's place is the count of needed entries before it (outputs come back
    by a gather: XLA:CPU scatters are slow); other entries get some needed entry's
    place, whose output is never read.
    """
    return jnp.clip(jnp.cumsum(need) - 1, 0, size - 1)


def _rows_at(logits, row_of):
    """The whole batch's logits from a block (``row_of``: each row's place; ``None``: all)."""
    return logits if row_of is None else jax.tree.map(lambda o: o[row_of], logits)


_PAIRWISE_MAX = 64  # rows up to this length rank by one pairwise comparison


def _rank(score):
    """Descending rank along the last axis, ties to the lower index (0 = highest).

    ``rank_i = #{j : s_j > s_i} + #{j < i : s_j = s_i}``: one pairwise comparison
    instead of two sorts for short rows (``n <= _PAIRWISE_MAX``); longer rows take the
    stable double ``argsort`` of ``-s`` (the same ranks; the comparison's ``n x n`` block
    per row would cost more than the sorts).
    """
    n = score.shape[-1]
    if n > _PAIRWISE_MAX:
        order = jnp.argsort(-score, axis=-1, stable=True)
        return jnp.argsort(order, axis=-1, stable=True).astype(jnp.int32)
    si, sj = score[..., :, None], score[..., None, :]
    before = jnp.arange(n)[None, :] < jnp.arange(n)[:, None]  # [i, j]: j < i
    ahead = (sj > si) | ((sj == si) & before.reshape((1,) * (score.ndim - 1) + (n, n)))
    return jnp.sum(ahead, axis=-1, dtype=jnp.int32)


def _forwards(apply_fn, params, ref_params, z, pos_attn, edits=None, *, mask_id):
    """Raw (checked) logits of the denoiser and, if given, of the reference.

    ``edits`` (``{layer: [B, D]}``) steer the denoiser only: the reference is another model.
    """
    f = functools.partial(_common.denoise_logits, apply_fn, z=z, pos_attn=pos_attn, mask_id=mask_id)
    return f(params, **_steer.keywords(edits)), (None if ref_params is None else f(ref_params))


def _forwards_at(logits_at, params, ref_params, z, pos_attn, edits, rows, cols):
    """Raw logits ``[N, V]`` at ``(rows, cols)``: the slot form (and the reference's)."""

    def f(p, **kw):
        out = logits_at(p, z, *pos_attn, rows, cols, **kw)
        if out.ndim != 2 or out.shape[0] != rows.shape[0]:
            raise TypeError(
                f"`apply_fn.logits_at` must return logits of shape {(rows.shape[0], '*')}, "
                f"got {out.shape}."
            )
        return out

    return f(params, **_steer.keywords(edits)), (None if ref_params is None else f(ref_params))
