"""PRISM's DP-aware adaptive update (post-processing of the privatized tangent vectors).

:func:`prism_adaptive` returns ``retract(params, -lr U) - params``, so
``optax.apply_updates`` lands on the retracted factors.

References:
  S. Wang, X. Zhang, "PRISM: Gauge-Invariant Tangent-Space Differentially
  Private LoRA", ICML 2026, arXiv:2606.00944.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, PyTree, Real

from jaxkit import _validate
from jaxkit.privacy import _common as C
from jaxkit.privacy._lowrank_retract import _balance_from_cache, _retract_core
from jaxkit.privacy._lowrank_tangent import _horizontal
from jaxkit.privacy._prism_carry import next_carry
from jaxkit.privacy.lowrank import LoraFactors, gram_cache


class PrismAdaptiveState(NamedTuple):
    """Moments of :func:`prism_adaptive` (LoRA: ``mu`` factor-shaped, ``nu`` r x r).

    ``carry`` (:func:`prism` only, ``None`` elsewhere): per LoRA module, the factors
    of the last retraction with their frame, so the next step needs no QR or SVD for it.
    """

    count: Array
    mu: PyTree
    nu: PyTree
    carry: PyTree = None


class AdaptiveOpts(NamedTuple):
    """The static options of :func:`prism_adaptive` (one hashable jit argument)."""

    rcond: float
    horizontal: bool
    adaptive: bool
    debias: bool
    floor_mode: str


def _lr(learning_rate, count):
    if callable(learning_rate):
        return jnp.asarray(learning_rate(count))
    return jnp.asarray(learning_rate)


def _frame_qr(u, r0, d):
    """``[u r0, d] = Q R`` with ``Q = [u, Q_p]`` for orthonormal ``u`` (``[m, r]``).

    The part of ``d`` orthogonal to ``u`` (projected twice, so orthogonality holds to
    round-off) gets a thin QR of ``m x r`` instead of the ``m x 2r`` one of ``[u r0, d]``.
    """
    c1 = u.T @ d
    p = d - u @ c1
    c2 = u.T @ p
    qp, rp = jnp.linalg.qr(p - u @ c2)
    top = jnp.concatenate([r0, c1 + c2], axis=1)
    bot = jnp.concatenate([jnp.zeros_like(r0), rp], axis=1)
    return jnp.concatenate([u, qp], axis=1), jnp.concatenate([top, bot], axis=0)


def _retract_balanced(cache, q, pb, d, *, eta, frame=False):
    """:func:`retract` (aligned) of balanced factors ``pb = (u sqrt(S) Q, v sqrt(S) Q)``.

    ``cache`` holds ``u, v, s`` and ``q`` the gauge ``Q`` (from :func:`_balance_from_cache`):
    the frame ``u`` (``v``) is already an orthonormal basis of ``col(pb.a)`` (``col(pb.b)``).
    """
    acc = cache.u.dtype
    r0 = jnp.sqrt(jnp.maximum(cache.s, 0.0))[:, None] * q
    a, b, da, db = (x.astype(acc) for x in (*pb, *d))
    qr_u = _frame_qr(cache.u, r0, da)
    qr_v = _frame_qr(cache.v, r0, db)
    return _retract_core(a, b, qr_u, qr_v, eta, True, pb.a.dtype, frame)


def _precond(v, floor, cond_max, eps):
    v = 0.5 * (v + v.T)
    lam, e = jnp.linalg.eigh(v)
    lmax = jnp.maximum(jnp.max(lam), 0.0)
    lam = jnp.maximum(jnp.maximum(lam, floor), lmax / cond_max)
    return (e * ((lam + eps) ** -0.5)[None, :]) @ e.T


def _module(p, d, mu, nu, cache, q, t, lr, std2, hp, opts: AdaptiveOpts):
    """One (unstacked) module; with ``q`` also the retraction's frame ``(u, v, s, q)``."""
    b1, b2, eps, floor_factor, cond_max, weight_decay = hp
    rcond, horizontal, adaptive, debias, floor_mode = opts
    if cache is None:  # else gram_cache(p) from the aggregator (column signs may differ)
        cache = gram_cache(p, rcond=rcond)
    acc = cache.u.dtype
    carry = q is not None  # q: the balancing rotation, known from the frame
    pb, g, git, q = _balance_from_cache(p, cache, q=q)
    pb = LoraFactors(pb.a.astype(acc), pb.b.astype(acc))
    da, db = d.a.astype(acc) @ g, d.b.astype(acc) @ git
    # balanced and aligned: pb = (u sqrt(S) Q, v sqrt(S) Q), so both Gram matrices are
    # Q^T S Q with the known eigendecomposition (s, Q^T) (no eigh), and u, v are
    # orthonormal bases of their column spaces (the retraction's QRs shrink to m x r).
    # The pseudo-inverses (gram_cache's LAPACK part) only where the de-biasing or the
    # geometry floor reads them.
    if debias or floor_mode == "geometry":
        cb = gram_cache(pb, rcond=rcond)
    if horizontal:
        eig = (cache.s.astype(acc), q.T)
        da, db = _horizontal(pb, LoraFactors(da, db), eig, eig)
    m, r = pb.a.shape
    n = pb.b.shape[0]
    if adaptive:
        b1_, b2_ = jnp.asarray(b1, acc), jnp.asarray(b2, acc)
        mu_a = b1_ * mu.a + (1 - b1_) * da
        mu_b = b1_ * mu.b + (1 - b1_) * db
        nu_a = b2_ * nu.a + (1 - b2_) * (da.T @ da) / m
        nu_b = b2_ * nu.b + (1 - b2_) * (db.T @ db) / n
        c1 = 1 - b1_**t
        c2 = 1 - b2_**t
        va, vb = nu_a / c2, nu_b / c2
        s2 = std2.astype(acc)
        if debias:
            va = va - s2 * (m - r) / m * cb.n_inv
            vb = vb - s2 * cb.m_inv
        ff = jnp.asarray(floor_factor, acc)
        base = ff * s2
        if floor_mode == "geometry":
            fa = jnp.maximum(base, ff * s2 * (m - r) / m * jnp.trace(cb.n_inv) / r)
            fb = jnp.maximum(base, ff * s2 * jnp.trace(cb.m_inv) / r)
        else:
            fa = fb = base
        cm, ep = jnp.asarray(cond_max, acc), jnp.asarray(eps, acc)
        ua = (mu_a / c1) @ _precond(va, fa, cm, ep)
        ub = (mu_b / c1) @ _precond(vb, fb, cm, ep)
        new_mu, new_nu = LoraFactors(mu_a, mu_b), LoraFactors(nu_a, nu_b)
    else:
        ua, ub = da, db
        new_mu, new_nu = mu, nu
    wd = jnp.asarray(weight_decay, acc)
    ua, ub = ua + wd * pb.a, ub + wd * pb.b
    new = _retract_balanced(cache, q, pb, LoraFactors(-ua, -ub), eta=lr.astype(acc), frame=carry)
    new, parts = new if carry else (new, None)
    upd = LoraFactors(
        (new.a - p.a.astype(acc)).astype(p.a.dtype), (new.b - p.b.astype(acc)).astype(p.b.dtype)
    )
    return upd, new_mu, new_nu, (new, parts)


@functools.partial(jax.jit, static_argnames=("opts",))
def _adaptive_update(updates, state, params, lr, noise_std, hp, *, opts):
    """The body of ``prism_adaptive``'s update, jitted once at module level."""
    return adaptive_body(updates, state, params, lr, noise_std, hp, None, opts)


def adaptive_body(updates, state, params, lr, noise_std, hp, caches, opts: AdaptiveOpts, qs=None):
    """``prism_adaptive``'s update, given (or not) the frames of ``params``.

    ``caches``: per flattened node, ``gram_cache(params)`` (column signs may be
    flipped; the result is invariant to them) or ``None`` (computed here). ``qs``:
    per node the balancing rotation of that frame, or ``None``; given, the state's
    ``carry`` receives the retraction's factors and frame (``_prism_carry``).
    """
    count = state.count + jnp.ones_like(state.count)
    t = count.astype(jnp.float32)
    std2 = jnp.square(jnp.asarray(noise_std, jnp.float32))
    b1, b2, eps, floor_factor, cond_max, weight_decay = hp
    p_nodes, treedef = jax.tree.flatten(params, is_leaf=C.is_lora)
    d_nodes = treedef.flatten_up_to(updates)
    mu_nodes = treedef.flatten_up_to(state.mu)
    nu_nodes = treedef.flatten_up_to(state.nu)
    if caches is None:
        caches = [None] * len(p_nodes)
    carries = None if qs is None else []
    qs = [None] * len(p_nodes) if qs is None else qs
    outs, mus, nus = [], [], []
    for p, d, mu, nu, ca, q in zip(p_nodes, d_nodes, mu_nodes, nu_nodes, caches, qs, strict=True):
        if C.is_lora(p):
            t_acc = t.astype(C.acc_dtype(p.a))
            fn = C.stackloop(  # LAPACK inside: one stacked slice per call (see stackloop)
                lambda p_, d_, mu_, nu_, ca_, q_, ta=t_acc: _module(
                    p_, d_, mu_, nu_, ca_, q_, ta, lr, std2, hp, opts
                ),
                C.n_stack(p),
            )
            u, mu2, nu2, (new, parts) = fn(p, d, mu, nu, ca, q)
            if carries is not None:
                carries.append(next_carry(new, parts, ca.u))
        else:
            acc = C.acc_dtype(p)
            dd = d.astype(acc)
            if opts.adaptive:
                dirn, mu2, nu2 = C.adam_direction(dd, mu, nu, t, b1, b2, eps)
            else:
                mu2, nu2, dirn = mu, nu, dd
            dirn = dirn + jnp.asarray(weight_decay, acc) * p.astype(acc)
            u = (-lr.astype(acc) * dirn).astype(p.dtype)
            if carries is not None:
                carries.append(None)
        outs.append(u)
        mus.append(mu2)
        nus.append(nu2)
    carry = None if carries is None else treedef.unflatten(carries)
    return treedef.unflatten(outs), PrismAdaptiveState(
        count, treedef.unflatten(mus), treedef.unflatten(nus), carry
    )


def prism_adaptive(
    learning_rate: Real[ArrayLike, ""] | Callable[[Array], Array],
    *,
    noise_std: Real[ArrayLike, ""] = 0.0,
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
    rcond: float = 1e-6,
) -> optax.GradientTransformation:
    """PRISM's DP-aware, gauge-invariant adaptive update with retraction.

    Input: the privatized tangent vectors in factor form (from
    :func:`prism_privatize`). Per LoRA module, in the balanced gauge aligned
    with ``params``: optional horizontal lift; first moments ``m_A, m_B`` and
    rank-space second moments ``V_A = E[D_A^T D_A]/m``, ``V_B = E[D_B^T D_B]/n``
    (bias-corrected; with ``debias`` minus the expected noise part
    ``std^2 (m-r)/m N^{-1}``, ``std^2 M^{-1}``); preconditioner
    ``(V + eps)^{-1/2}`` by ``eigh`` with eigenvalue floor (``floor_factor std^2``;
    ``'geometry'``: the mean noise eigenvalue) and condition clamp
    ``lambda >= lambda_max / cond_max``; then the rank-``r`` retraction of
    ``Z - lr (U_A b^T + a U_B^T)``. The returned update is
    ``retracted - params``. Non-LoRA leaves get Adam. With ``adaptive=False`` the
    direction is the tangent vector itself (Riemannian SGD).

    Args:
      learning_rate: Step size or an optax schedule.
      noise_std: ``sigma C / denom`` of the aggregator (floors, de-biasing).
      b1: First-moment decay in ``[0, 1)``.
      b2: Second-moment decay in ``[0, 1)``.
      eps: Eigenvalue offset of the preconditioner (Adam's ``eps`` for other leaves).
      floor_factor: Floor multiplier of ``noise_std^2``.
      floor_mode: ``'scalar'`` or ``'geometry'``.
      cond_max: Condition-number clamp of the preconditioner.
      debias: Subtract the expected noise second moment.
      horizontal: Apply the horizontal (gauge-fixing) lift first.
      adaptive: Use the preconditioned moments (else plain Riemannian step).
      weight_decay: Adds ``weight_decay * a`` (and ``b``) to the direction.
      rcond: Pseudo-inverse cut-off.

    Returns:
      An ``optax.GradientTransformation`` with state :class:`PrismAdaptiveState`.

    References:
      Wang & Zhang, PRISM, ICML 2026, arXiv:2606.00944.
    """
    _validate.one_of(("scalar", "geometry"), floor_mode=floor_mode)
    hps = dict(
        learning_rate=learning_rate,
        noise_std=noise_std,
        b1=b1,
        b2=b2,
        eps=eps,
        floor_factor=floor_factor,
        cond_max=cond_max,
        weight_decay=weight_decay,
    )
    C.check_opt_hparams(**hps)  # NaN, inf and out-of-range values raise (traced: in update)
    debias = _validate.flag(debias, name="debias")
    horizontal = _validate.flag(horizontal, name="horizontal")
    adaptive = _validate.flag(adaptive, name="adaptive")
    C.check_rcond(rcond)

    def init(params):
        def one(p):
            if C.is_lora(p):
                acc = C.acc_dtype(p.a)
                r = p.a.shape[-1]
                st = p.a.shape[:-2]
                mu = LoraFactors(jnp.zeros_like(p.a, dtype=acc), jnp.zeros_like(p.b, dtype=acc))
                nu = LoraFactors(jnp.zeros((*st, r, r), acc), jnp.zeros((*st, r, r), acc))
                return mu, nu
            acc = C.acc_dtype(p)
            return jnp.zeros_like(p, dtype=acc), jnp.zeros_like(p, dtype=acc)

        nodes, treedef = jax.tree.flatten(params, is_leaf=C.is_lora)
        pairs = [one(p) for p in nodes]
        return PrismAdaptiveState(
            jnp.zeros([], jnp.int32),
            treedef.unflatten([q[0] for q in pairs]),
            treedef.unflatten([q[1] for q in pairs]),
        )

    opts = AdaptiveOpts(rcond, horizontal, adaptive, debias, floor_mode)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("`params` must be given to prism_adaptive.update.")
        return _adaptive_update(
            updates,
            state,
            params,
            C.guard_opt_hparams(_lr(learning_rate, state.count), **hps),
            noise_std,
            (b1, b2, eps, floor_factor, cond_max, weight_decay),
            opts=opts,
        )

    return optax.GradientTransformation(init, update)
