"""PRISM: gauge-invariant tangent-space DP-LoRA as optax transforms.

:func:`prism_privatize` is the private aggregator (per-example tangent lifts,
one global intrinsic-norm clip over all LoRA modules, isotropic noise on the
tangent space drawn once after the cross-device reduction). :func:`prism_adaptive`
is the DP-aware adaptive update (post-processing) that returns
``retract(params, -lr U) - params``, so ``optax.apply_updates`` lands on the
retracted factors. :func:`prism` chains the two.

References:
  S. Wang, X. Zhang, "PRISM: Gauge-Invariant Tangent-Space Differentially
  Private LoRA", ICML 2026, arXiv:2606.00944 (algorithm re-derived from the
  authors' code osu-srml/PRISM-DP-LoRA, ``src/prism_cli/optim/prism.py``).
"""

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, PRNGKeyArray, PyTree, Real

from jaxkit import _validate
from jaxkit.privacy import _common as C
from jaxkit.privacy._prism_adaptive import AdaptiveOpts, _lr, adaptive_body, prism_adaptive
from jaxkit.privacy._prism_carry import follow, frame, init_carry
from jaxkit.privacy.lowrank import (
    LoraFactors,
    TangentCoords,
    check_factors,
    coords_norm_sq,
    from_coords,
    gram_cache,
    sample_tangent_coords,
    tangent_coords,
)


class PrivatizeState(NamedTuple):
    """State of a DP aggregator: step counter, base key, last noise energy, frame.

    ``noise_energy`` is the squared Frobenius norm of the noise added to the
    released quantity at the last step (on ``Z`` for LoRA modules): a function of
    the noise only, safe to log. ``frame`` (PRISM only; ``None`` elsewhere) holds,
    per LoRA module, the left singular vectors ``u`` of ``Z`` used at the last
    step: the signs of the next step's frame follow it (see
    :func:`prism_privatize`). ``frame=None`` falls back to the stateless sign rule.
    """

    count: Array
    key: Array
    noise_energy: Array
    frame: PyTree = None


def _next_state(state: PrivatizeState, energy, den, frame=None) -> PrivatizeState:
    """The state after a release: count + 1, the noise energy per ``denom^2``, ``frame``."""
    return PrivatizeState(
        state.count + jnp.ones_like(state.count),
        state.key,
        energy / jnp.square(den).astype(jnp.float32),
        frame,
    )


def _init_privatize(key, with_frame: bool = False):
    _validate.is_key(key)

    def init(params):
        frame = None
        if with_frame:
            frame = jax.tree.map(
                lambda p: jnp.zeros_like(p.a, dtype=C.acc_dtype(p.a)) if C.is_lora(p) else None,
                params,
                is_leaf=C.is_lora,
            )
        return PrivatizeState(jnp.zeros([], jnp.int32), key, jnp.zeros([], jnp.float32), frame)

    return init


def _slice_norm_sq(ga, gb, ta, tb, u, v):
    """Per-example ``||gv||^2 + ||vp||^2`` [b] of one unstacked module, as 2-D GEMMs."""
    b, m, r = ga.shape
    gv = (ga.reshape(b * m, r) @ tb).reshape(b, m, r)
    gu = (gb.reshape(-1, r) @ ta).reshape(b, -1, r)
    core = jnp.einsum("mr,bms->brs", u, gv)
    vp = gu - jnp.einsum("ns,brs->bnr", v, core)
    return jnp.sum(gv * gv, axis=(1, 2)) + jnp.sum(vp * vp, axis=(1, 2))


_UNROLL_NORMS = 16


def _lora_norm_sq(p: LoraFactors, g: LoraFactors, rcond: float, cache=None):
    """Per-example intrinsic norm^2 [b] (summed over stacked axes) and the caches.

    ``||P_T(G_i)||^2 = ||core||^2 + ||up||^2 + ||vp||^2`` (:func:`tangent_coords`),
    where ``up = gv - u core`` is orthogonal to the orthonormal ``u``, so
    ``||core||^2 + ||up||^2 = ||gv||^2`` (``gv = g_a tb``, ``core = u^T gv``) and
    only ``vp = gu - v core^T`` (``gu = g_b ta``) is formed. Computed for the whole
    batch as GEMMs over the flattened batch, ``O((m + n) r^2)`` per example, instead
    of a ``vmap`` of small per-example products. Small stacks are unrolled into one
    2-D GEMM per slice: a batched (stack-axis) einsum made XLA's CPU back end transpose
    the whole gradient and run 2-3x slower at ``r = 16``.
    """
    ns = C.n_stack(p)
    if cache is None:  # else the frame of p, given (see _prism_carry)
        cache = C.stackloop(lambda q: gram_cache(q, rcond=rcond), ns)(p)  # LAPACK: no vmap
    acc = cache.u.dtype
    ga, gb = g.a.astype(acc), g.b.astype(acc)
    st = p.a.shape[:ns]
    if math.prod(st) <= _UNROLL_NORMS:
        b = ga.shape[0]
        ga = ga.reshape(b, -1, *ga.shape[-2:])
        gb = gb.reshape(b, -1, *gb.shape[-2:])
        flat = [x.reshape(-1, *x.shape[ns:]) for x in (cache.ta, cache.tb, cache.u, cache.v)]
        total = sum(
            _slice_norm_sq(ga[:, i], gb[:, i], *(x[i] for x in flat)) for i in range(math.prod(st))
        )
        return total, cache
    gv = jnp.einsum("b...mr,...rs->b...ms", ga, cache.tb)
    gu = jnp.einsum("b...nr,...rs->b...ns", gb, cache.ta)
    core = jnp.einsum("...mr,b...ms->b...rs", cache.u, gv)
    vp = gu - jnp.einsum("...ns,b...rs->b...nr", cache.v, core)
    axes = tuple(range(1, gv.ndim))
    return jnp.sum(gv * gv, axis=axes) + jnp.sum(vp * vp, axis=axes), cache


@functools.partial(jax.jit, static_argnames=("axis_name", "rcond"))
def _privatize_update(updates, state, params, dp, *, axis_name, rcond):
    """The body of ``prism_privatize``'s update, jitted once at module level."""
    return _privatize_body(updates, state, params, dp, axis_name=axis_name, rcond=rcond)[:2]


def _privatize_body(updates, state, params, dp, *, axis_name, rcond, frames=None):
    """``prism_privatize``'s update plus the per-node caches ``gram_cache(params)``.

    ``dp``: ``(clip_norm, noise_multiplier, denom)``. ``frames``: per flattened node,
    ``(gram_cache(p), q)`` known beforehand (``None`` at other leaves), or ``None``
    (computed here). Returns the release, the state, the caches and the ``q``'s (or
    ``None``), column signs following the state's last frame.
    """
    clip_norm, noise_multiplier, denom = dp
    nd = C.norm_dtype(jax.tree.leaves(params))
    cn, std, den = C.dp_constants(
        nd, clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=denom
    )
    p_nodes, treedef = jax.tree.flatten(params, is_leaf=C.is_lora)
    g_nodes = treedef.flatten_up_to(updates)

    # 1. per-example norms, global over modules
    sq = []
    caches = []
    given = frames if frames is not None else [None] * len(p_nodes)
    for p, g, fr in zip(p_nodes, g_nodes, given, strict=True):
        if C.is_lora(p):
            s, cache = _lora_norm_sq(p, g, rcond, None if fr is None else fr[0])
            sq.append(s.astype(nd))
            caches.append(cache)
        else:
            sq.append(C.per_example_sq_norm(g, nd))
            caches.append(None)
    norms = jnp.sqrt(sum(sq))
    alpha = C.clip_factors(norms, cn, nd)
    refs = treedef.flatten_up_to(state.frame) if state.frame is not None else [None] * len(p_nodes)
    qs = [None if fr is None else fr[1] for fr in given]
    for i, (p, c, r) in enumerate(zip(p_nodes, caches, refs, strict=True)):
        if r is not None and c is not None:
            caches[i], qs[i] = C.stackmap(follow, C.n_stack(p))(c, qs[i], r)
    qs = None if frames is None else qs

    # 2. clipped sums, reduced across devices, then noise drawn once
    step_key = jax.random.fold_in(state.key, state.count)
    out = []
    energy = jnp.zeros([], jnp.float32)
    for i, (p, g, cache) in enumerate(zip(p_nodes, g_nodes, caches, strict=True)):
        k = jax.random.fold_in(step_key, i)
        if C.is_lora(p):
            acc = cache.u.dtype
            al = alpha.astype(acc)
            sa = C.weighted_sum(al, g.a.astype(acc))
            sb = C.weighted_sum(al, g.b.astype(acc))
            if axis_name is not None:
                sa, sb = jax.lax.psum((sa, sb), axis_name)
            sa, sb = C.guard_finite_sum(sa), C.guard_finite_sum(sb)
            ns = C.n_stack(p)
            coords = C.stackmap(tangent_coords, ns)(
                LoraFactors(p.a.astype(acc), p.b.astype(acc)), LoraFactors(sa, sb), cache
            )
            keys = C.stack_keys(k, p.a.shape[:ns])
            noise = C.stackmap(lambda c, kk: sample_tangent_coords(c, std=std, key=kk), ns)(
                cache, keys
            )
            energy = energy + jnp.sum(C.stackmap(coords_norm_sq, ns)(noise)).astype(jnp.float32)
            rel = TangentCoords(
                *((x + z) / den.astype(acc) for x, z in zip(coords, noise, strict=True))
            )
            d = C.stackmap(from_coords, ns)(
                LoraFactors(p.a.astype(acc), p.b.astype(acc)), rel, cache
            )
            out.append(LoraFactors(C.cast_like(d.a, p.a), C.cast_like(d.b, p.b)))
        else:
            r, e = C.dense_release(g, alpha, std, den, k, axis_name)
            energy = energy + e
            out.append(C.cast_like(r, p))
    frame = None
    if state.frame is not None:
        frame = treedef.unflatten(
            [
                c.u.astype(r.dtype) if c is not None else None
                for c, r in zip(caches, refs, strict=True)
            ]
        )
    return treedef.unflatten(out), _next_state(state, energy, den, frame), caches, qs


def _check_update_args(updates, params) -> None:
    """Eager checks shared by ``prism_privatize``'s and ``prism``'s updates.

    Per-example gradients mirroring ``params``, valid factors in every LoRA module.
    """
    C.check_per_example(updates, params)
    for p in jax.tree.leaves(params, is_leaf=C.is_lora):
        if C.is_lora(p):
            check_factors(p, name="params")


def prism_privatize(
    *,
    clip_norm: Real[ArrayLike, ""],
    noise_multiplier: Real[ArrayLike, ""],
    denom: Real[ArrayLike, ""],
    key: PRNGKeyArray,
    axis_name: str | None = None,
    rcond: float = 1e-6,
) -> optax.GradientTransformation:
    """PRISM's private aggregator over a pytree of LoRA factors.

    ``update(per_example_grads, state, params)``: every leaf of ``per_example_grads``
    has a leading batch axis; LoRA modules are :class:`LoraFactors` nodes (with
    optional stacked-layer axes), other leaves are treated as Euclidean
    parameters. For example ``i`` the factor gradients are lifted to tangent
    coordinates of ``T_Z``; the global intrinsic norm
    ``s_i = sqrt(sum_l ||P_T(G_il)||^2 + sum_other ||g_i||^2)`` sets
    ``alpha_i = min(1, C / s_i)``; the clipped sum is reduced over ``axis_name``
    (if given, inside ``shard_map``) and then, once, isotropic Gaussian noise
    of std ``sigma C`` on the tangent space (``(m + n) r`` normals per module) is
    added from ``fold_in(key, step)``. The release is divided by ``denom``
    (expected batch size) and returned in factor form
    (``dA b^T + a dB^T`` is the privatized tangent vector). Sensitivity of the
    sum is ``C``: the standard subsampled Gaussian accounting applies.

    Args:
      clip_norm: Clipping norm ``C`` (> 0). ``inf`` disables clipping and is allowed
        only with ``noise_multiplier=0``: the noise std is ``sigma C``, so noise needs a
        finite ``C`` (``ValueError``, or an ``eqx.error_if`` error under ``jit``).
      noise_multiplier: ``sigma`` (>= 0).
      denom: Normaliser, the expected batch size ``q N``.
      key: Base PRNG key; step ``t`` uses ``fold_in(key, t)``.
      axis_name: Mesh axis of the batch when run inside ``shard_map``.
      rcond: Pseudo-inverse cut-off of the Gram matrices.

    Returns:
      An ``optax.GradientTransformation`` with state :class:`PrivatizeState`.

    The noise is drawn in the frame ``(u, v)`` of ``Z``'s singular vectors,
    which is gauge-invariant up to the sign of each column. A stateless sign
    rule (largest entry positive) flips when two entries tie, and then two runs
    that differ only by round-off (e.g. two gauges) draw different noise from
    then on. So the state carries the last frame and each step keeps the signs
    that overlap with it (decision of ours; noise distribution and privacy are
    unchanged, since the frame depends on ``Z`` only).

    Raises:
      ValueError: For ``clip_norm <= 0`` or NaN, ``noise_multiplier < 0``,
        ``denom <= 0``, or ``clip_norm=inf`` with ``noise_multiplier > 0`` (concrete
        values at construction; traced ones raise at run time under ``jit``).
      TypeError: If the gradients do not mirror ``params`` plus a batch axis.

    References:
      Wang & Zhang, PRISM, ICML 2026, arXiv:2606.00944.
    """
    C.check_dp_hparams(clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=denom)
    C.check_rcond(rcond)
    _validate.is_key(key)

    def update(updates, state, params=None):
        _check_update_args(updates, params)
        dp = (clip_norm, noise_multiplier, denom)
        return _privatize_update(updates, state, params, dp, axis_name=axis_name, rcond=rcond)

    return optax.GradientTransformation(_init_privatize(key, with_frame=True), update)


def prism(
    learning_rate: Real[ArrayLike, ""] | Callable[[Array], Array],
    *,
    clip_norm: Real[ArrayLike, ""],
    noise_multiplier: Real[ArrayLike, ""],
    denom: Real[ArrayLike, ""],
    key: PRNGKeyArray,
    b1: Real[ArrayLike, ""] = 0.9,
    b2: Real[ArrayLike, ""] = 0.999,
    eps: Real[ArrayLike, ""] = 1e-8,
    floor_factor: Real[ArrayLike, ""] = 0.5,
    floor_mode: str = "scalar",
    cond_max: Real[ArrayLike, ""] = 1e4,
    debias: bool = False,
    horizontal: bool = True,
    adaptive: bool = True,
    weight_decay: Real[ArrayLike, ""] = 0.0,
    axis_name: str | None = None,
    rcond: float = 1e-6,
) -> optax.GradientTransformation:
    """PRISM: ``optax.chain(prism_privatize(...), prism_adaptive(...))``.

    ``update(per_example_grads, state, params)`` returns ``retracted - params``;
    ``optax.apply_updates(params, update)`` gives the new (balanced, aligned)
    factors. Defaults follow the authors' trainer (floor 0.5, scalar floors,
    ``cond_max`` 1e4, horizontal lift on, de-biasing off).

    The state also carries the factors of the last retraction with their frame
    (singular vectors and values of ``Z``, balancing rotation): when the next
    ``params`` are those factors (to within 16 ulps, as ``optax.apply_updates`` leaves
    them), that step takes its frame from the state instead of a QR, SVD and polar
    decomposition per module (same result up to round-off); other ``params`` (the
    first step, factors changed outside) get the frame recomputed. The frame is a
    function of the released factors only, so the privacy argument is unchanged.

    Args:
      learning_rate: Step size or schedule.
      clip_norm: See :func:`prism_privatize`.
      noise_multiplier: See :func:`prism_privatize`.
      denom: See :func:`prism_privatize`.
      key: See :func:`prism_privatize`.
      axis_name: See :func:`prism_privatize`.
      b1: See :func:`prism_adaptive`.
      b2: See :func:`prism_adaptive`.
      eps: See :func:`prism_adaptive`.
      floor_factor: See :func:`prism_adaptive`.
      floor_mode: See :func:`prism_adaptive`.
      cond_max: See :func:`prism_adaptive`.
      debias: See :func:`prism_adaptive`.
      horizontal: See :func:`prism_adaptive`.
      adaptive: See :func:`prism_adaptive`.
      weight_decay: See :func:`prism_adaptive`.
      rcond: Pseudo-inverse cut-off.

    Returns:
      The chained ``optax.GradientTransformation``.

    Example:
      >>> import optax
      >>> from jaxkit.privacy import lowrank
      >>> f = lowrank.balanced_random_init(key=jax.random.key(0), m=6, n=5, rank=2)
      >>> tx = prism(0.1, clip_norm=1.0, noise_multiplier=1.0, denom=4.0,
      ...            key=jax.random.key(1))
      >>> g = jax.tree.map(lambda x: jnp.ones((4, *x.shape)), f)
      >>> upd, _ = tx.update(g, tx.init(f), f)
      >>> optax.apply_updates(f, upd).a.shape
      (6, 2)

    References:
      Wang & Zhang, PRISM, ICML 2026, arXiv:2606.00944.
    """
    std = C.scalar_std(noise_multiplier, clip_norm, denom)
    chained = optax.chain(
        prism_privatize(
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            denom=denom,
            key=key,
            axis_name=axis_name,
            rcond=rcond,
        ),
        prism_adaptive(
            learning_rate,
            noise_std=std,
            b1=b1,
            b2=b2,
            eps=eps,
            floor_factor=floor_factor,
            floor_mode=floor_mode,
            cond_max=cond_max,
            debias=debias,
            horizontal=horizontal,
            adaptive=adaptive,
            weight_decay=weight_decay,
            rcond=rcond,
        ),
    )
    hp = (b1, b2, eps, floor_factor, cond_max, weight_decay)
    dp = (clip_norm, noise_multiplier, denom)
    opts = AdaptiveOpts(rcond, horizontal, adaptive, debias, floor_mode)

    def init(params):
        s_priv, s_adapt = chained.init(params)
        return s_priv, s_adapt._replace(carry=init_carry(params))

    def update(updates, state, params=None, **extra_args):
        # the chain's update, fused: the aggregator's frame gram_cache(params) is reused
        # by the adaptive step instead of being recomputed (same result up to round-off)
        del extra_args
        _check_update_args(updates, params)
        lr = _lr(learning_rate, state[1].count)
        lr = C.guard_opt_hparams(lr, learning_rate=learning_rate, **dict(zip(_HP, hp, strict=True)))
        return _prism_update(
            updates, state, params, dp, lr, std, hp, axis_name=axis_name, opts=opts
        )

    return optax.GradientTransformationExtraArgs(init, update)


_HP = ("b1", "b2", "eps", "floor_factor", "cond_max", "weight_decay")


@functools.partial(jax.jit, static_argnames=("axis_name", "opts"))
def _prism_update(updates, state, params, dp, lr, std, hp, *, axis_name, opts):
    """``prism``'s update: privatize, then the adaptive step on the same frames.

    The frames come from the last step's retraction when ``params`` are its result
    (``_prism_carry``); the retraction of this step leaves the next step's.
    """
    s_priv, s_adapt = state
    frames = None
    if s_adapt.carry is not None:  # None: a state without the carry (frames computed)
        p_nodes, treedef = jax.tree.flatten(params, is_leaf=C.is_lora)
        c_nodes = treedef.flatten_up_to(s_adapt.carry)
        frames = [
            frame(p, c, opts.rcond) if C.is_lora(p) else None
            for p, c in zip(p_nodes, c_nodes, strict=True)
        ]
    priv, s_priv, caches, qs = _privatize_body(
        updates, s_priv, params, dp, axis_name=axis_name, rcond=opts.rcond, frames=frames
    )
    out, s_adapt = adaptive_body(priv, s_adapt, params, lr, std, hp, caches, opts, qs=qs)
    return out, (s_priv, s_adapt)
