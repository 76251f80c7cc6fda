"""TD3B: gated reward, importance weights, WDCE, KL anchor, contrastive term, train step.

TD3B fine-tunes a pretrained MDLM toward ``p*(x) ∝ p_pre(x) exp(S(x) / alpha) kappa(x)``
where ``S`` gates a binding-affinity score by a direction oracle for the requested
direction ``d* in {+1, -1}``. Everything here is a pure function; the train step is
one module-level ``jit`` (``apply_fn``, ``embed_fn`` and the optimizer static).
"""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Real

from jaxkit import _validate
from jaxkit._typing import KeyArray, PyTree, RealScalarLike, accumulation_dtype
from jaxkit.diffusion import _common
from jaxkit.diffusion._common import ApplyFn
from jaxkit.diffusion._loss import _logits_dtype
from jaxkit.sharding import gather_sharded

EmbedFn = Callable[[PyTree, Array, Array, Array], Array]
REDUCTIONS = ("sum_weights", "reference")


# ----------------------------------------------------------------------------- rewards


def _check_direction(direction, like: Array, *, name: str = "direction") -> Array:
    """``direction`` (+1 or -1, any real dtype) as an array: a scalar or one per row of ``like``.

    Another value (``0.5``, ``2``) is an error under the guard, eagerly or traced.
    """
    d = jnp.asarray(direction)
    if not jnp.issubdtype(d.dtype, jnp.integer) and not jnp.issubdtype(d.dtype, jnp.floating):
        raise TypeError(f"`{name}` must be +1 or -1 (scalar or per row), got dtype {d.dtype}.")
    if d.ndim not in (0, 1) or (d.ndim == 1 and d.shape != like.shape):
        raise TypeError(
            f"`{name}` must be a scalar or have shape {like.shape}, got shape {d.shape}."
        )
    return _validate.error_if(d, ~jnp.all((d == 1) | (d == -1)), f"`{name}` must be +1 or -1.")


def _check_scores(x, p_agonist, name: str) -> tuple[Array, Array]:
    """``(x, p_agonist)`` as arrays; ``x`` (called ``name``) floating 1-D, same shape."""
    _validate.floating(x, name=name)  # before jnp.asarray: a str names the argument
    _validate.real(p_agonist, name="p_agonist")
    x, f = jnp.asarray(x), jnp.asarray(p_agonist)
    _validate.ndim(x, 1, name=name)
    _validate.same_shape(**{name: x, "p_agonist": f})
    return x, f


def gated_reward(
    affinity: Float[ArrayLike, " B"],
    p_agonist: Float[ArrayLike, " B"],
    *,
    direction: Real[ArrayLike, "*#B"],
    tau_s: RealScalarLike = 0.1,
    a_min: RealScalarLike = 0.0,
    low_factor: RealScalarLike = 0.1,
) -> Float[Array, " B"]:
    """The TD3B reward ``S = g sigmoid(d* (f - 0.5) / tau_s)`` (``low_factor g`` if ``g < a_min``).

    Args:
      affinity: ``g``, the affinity score per sample.
      p_agonist: ``f``, the direction oracle's probability of agonism, in [0, 1].
      direction: ``d*``, +1 (agonist) or -1 (antagonist); scalar or per row.
      tau_s: Gate temperature (> 0, traced).
      a_min: Affinity below which the gate is replaced by ``low_factor`` (traced).
      low_factor: Factor for weak binders (traced).

    Returns:
      ``float[B]``.

    Raises:
      ValueError: Non-finite rewards (NaN/inf affinity or probability), ``p_agonist``
        outside [0, 1], ``direction`` not +-1, ``tau_s <= 0``.

    References:
      TD3B (ICML 2026; code chq1155/TD3B_ICML, ``td3b_scoring.py``).
    """
    g, f = _check_scores(affinity, p_agonist, "affinity")
    d = _check_direction(direction, g)
    g = _validate.all_finite(g, name="affinity")
    f = _validate.all_finite(f, name="p_agonist")
    f = _validate.error_if(f, ~jnp.all((f >= 0) & (f <= 1)), "`p_agonist` must lie in [0, 1].")
    g = _validate.guard_positive(g, tau_s, name="tau_s")
    g = _validate.guard_finite(g, a_min, name="a_min")
    g = _validate.guard_finite(g, low_factor, name="low_factor")
    return _gated(g, f, d, tau_s, a_min, low_factor)


@jax.jit
def _gated(g, f, d, tau_s, a_min, low_factor):
    dt = g.dtype
    gate = jax.nn.sigmoid(d.astype(dt) * (f.astype(dt) - 0.5) / jnp.asarray(tau_s, dt))
    return jnp.where(g < jnp.asarray(a_min, dt), jnp.asarray(low_factor, dt) * g, g * gate)


def log_importance_weight(
    reward: Float[ArrayLike, " B"],
    p_agonist: Float[ArrayLike, " B"],
    *,
    log_ratio: Float[ArrayLike, "*#B"] = 0.0,
    alpha: RealScalarLike = 0.1,
    kappa_min: RealScalarLike = 0.1,
) -> Float[Array, " B"]:
    """``log w = log_ratio + S / alpha + log max(kappa, kappa_min)``, ``kappa = max(f, 1 - f)``.

    ``log_ratio = sum_path (log p_pre - log p_theta)`` of the trajectory (0 on
    policy with the pretrained model). These terms enter *before* the softmax
    normalisation of :func:`wdce_loss`.

    Raises:
      ValueError: Non-finite ``reward`` or ``log_ratio`` (a clear error, never a
        silent NaN weight), ``p_agonist`` NaN or outside [0, 1], ``alpha <= 0``.
    """
    r, f = _check_scores(reward, p_agonist, "reward")
    r = _validate.all_finite(r, name="reward")
    f = _validate.all_finite(f, name="p_agonist")  # a NaN gave a NaN weight, 1.5 a wrong one
    f = _validate.error_if(f, ~jnp.all((f >= 0) & (f <= 1)), "`p_agonist` must lie in [0, 1].")
    lr = _validate.all_finite(
        _validate.real_array(log_ratio, name="log_ratio", dtype=r.dtype), name="log_ratio"
    )
    r = _validate.guard_positive(r, alpha, name="alpha")
    r = _validate.guard_interval(r, kappa_min, name="kappa_min", low=0.0, high=1.0, closed="right")
    return _log_w(r, f, lr, alpha, kappa_min)


@jax.jit
def _log_w(r, f, lr, alpha, kappa_min):
    dt = r.dtype
    f = f.astype(dt)
    kappa = jnp.maximum(jnp.maximum(f, 1.0 - f), jnp.asarray(kappa_min, dt))
    return lr + r / jnp.asarray(alpha, dt) + jnp.log(kappa)


def effective_sample_size(log_w: Float[ArrayLike, " N"]) -> Float[Array, ""]:
    """ESS ``1 / sum(wbar^2)`` of ``wbar = softmax(log_w)`` (in [1, N]; 1 = collapse).

    Raises:
      TypeError: ``log_w`` not a float vector, or empty.
      ValueError: a NaN or ``+inf`` entry, or every entry ``-inf`` (traced: under ``jit``).
    """
    _validate.floating(log_w, name="log_w")  # before jnp.asarray: a str names `log_w`
    lw = jnp.asarray(log_w)
    _validate.ndim(lw, 1, name="log_w")
    _validate.nonempty(lw, name="log_w")
    bad = jnp.any(jnp.isnan(lw) | (lw == jnp.inf)) | ~jnp.any(lw > -jnp.inf)
    msg = "`log_w` must have no NaN or +inf entry and at least one finite entry."
    return _ess(_validate.error_if(lw, bad, msg))


@jax.jit
def _ess(lw):
    wbar = jax.nn.softmax(lw.astype(accumulation_dtype(lw.dtype)))
    return (1.0 / jnp.sum(wbar * wbar)).astype(lw.dtype)


# ----------------------------------------------------------------------------- losses


def _lam_mask(key, valid, acc):
    """Per-row ``lambda ~ U(0, 1)`` and a mask of each valid slot w.p. lambda."""
    k1, k2 = jax.random.split(key)
    sh = jax.typeof(valid).sharding
    lam = jax.random.uniform(
        k1, valid.shape[:1], acc, out_sharding=jax.typeof(valid[:, 0]).sharding
    )
    u = jax.random.uniform(k2, valid.shape, acc, out_sharding=sh)
    return lam, valid & (u < lam[:, None])


def wdce_terms(
    apply_fn, params, x0, log_w, valid, key, *, mask_id, replicates, lam_clip, reduction
):
    acc = accumulation_dtype(_logits_dtype(params))
    wbar = jax.nn.softmax(jax.lax.stop_gradient(log_w).astype(acc))
    n = x0.shape[0]
    pos_attn = _common.positions_and_mask(x0, valid)  # the same for every replicate

    def one(total, k):
        lam, masked = _lam_mask(k, valid, acc)
        z = jnp.where(masked, jnp.int32(mask_id), x0)
        log_p = _common.denoise(apply_fn, params, z, valid, mask_id, pos_attn)
        nll = jnp.where(masked, -_common.gather_log_prob(log_p, x0), 0.0)
        weight = jnp.minimum(1.0 / jnp.maximum(lam, 1e-30), jnp.asarray(lam_clip, acc))
        return total + weight * jnp.sum(nll, axis=-1), None

    keys = jax.random.split(key, replicates)
    per_row, _ = jax.lax.scan(one, jnp.zeros_like(wbar), keys)
    loss = jnp.sum(wbar * per_row) / replicates
    if reduction == "reference":
        loss = loss / n
    return loss, wbar


def wdce_loss(
    apply_fn: ApplyFn,
    params: PyTree,
    x0: Int[ArrayLike, "N L"],
    log_w: Float[ArrayLike, " N"],
    *,
    key: KeyArray,
    mask_id: int,
    replicates: int = 16,
    valid: Bool[ArrayLike, "N L"] | None = None,
    lam_clip: RealScalarLike = 1e5,
    reduction: str = "sum_weights",
) -> Float[Array, ""]:
    """Weighted denoising cross-entropy over a buffer (TR2-D2 / MDNS, used by TD3B).

    ``wbar = softmax(stop_gradient(log_w))``; each row is replicated ``R`` times,
    each replicate draws ``lambda ~ U(0, 1)`` and masks each valid slot w.p.
    ``lambda``: ``L = sum_n wbar_n mean_r min(1/lambda, lam_clip) sum_{i masked}
    -log p_theta(x_{n,i} | z)`` (``reduction="sum_weights"``); ``"reference"``
    divides by N as the authors' mean over N*R rows does. Its minimiser is the
    self-normalised importance-sampling target ``p* ∝ q_buffer * w``.

    Raises:
      TypeError: Shapes that do not line up (``log_w`` not ``[N]``, ``valid`` not ``[N, L]``);
        ``key`` not a PRNG key.
      ValueError: Token ids outside the alphabet, non-finite ``log_w``, unknown
        ``reduction``, ``replicates < 1``.
    """
    _validate.is_key(key)
    _common.check_apply_fn(apply_fn)
    x0, valid = _common.check_tokens(x0, valid, name="x0", allow_mask=False, mask_id=mask_id)
    log_w = _check_log_w(log_w, x0)
    replicates = _validate.python_int(replicates, name="replicates", minimum=1)
    _validate.one_of(REDUCTIONS, reduction=reduction)
    _common.checked_vocab(apply_fn, params, x0, valid, name="x0", allow_mask=False, mask_id=mask_id)
    log_w = _validate.guard_positive(log_w, lam_clip, name="lam_clip")
    return _wdce(apply_fn, params, x0, log_w, valid, key, lam_clip, mask_id, replicates, reduction)


def _check_log_w(log_w, x0):
    _validate.floating(log_w, name="log_w")  # before jnp.asarray: a str names `log_w`
    lw = jnp.asarray(log_w)
    if lw.shape != x0.shape[:1]:
        raise TypeError(
            f"`log_w` must have shape {x0.shape[:1]} (one weight per row of `x0`), got "
            f"{lw.shape} (length mismatch)."
        )
    return _validate.all_finite(lw, name="log_w")


@functools.partial(jax.jit, static_argnames=("apply_fn", "mask_id", "replicates", "reduction"))
def _wdce(apply_fn, params, x0, log_w, valid, key, lam_clip, mask_id, replicates, reduction):
    loss, _ = wdce_terms(
        apply_fn,
        params,
        x0,
        log_w,
        valid,
        key,
        mask_id=mask_id,
        replicates=replicates,
        lam_clip=lam_clip,
        reduction=reduction,
    )
    return loss.astype(_logits_dtype(params))


def kl_terms(apply_fn, params, ref_params, x0, valid, key, *, mask_id):
    acc = accumulation_dtype(_logits_dtype(params))
    _, masked = _lam_mask(key, valid, acc)
    z = jnp.where(masked, jnp.int32(mask_id), x0)
    pos_attn = _common.positions_and_mask(x0, valid)
    log_p = _common.denoise(apply_fn, params, z, valid, mask_id, pos_attn)
    log_q = jax.lax.stop_gradient(
        _common.denoise(apply_fn, ref_params, z, valid, mask_id, pos_attn)
    )
    p = jnp.exp(log_p)
    # 0 log 0 := 0 (the [MASK] column and any other zero of p); finite where q has zeros
    # that p shares
    diff = jnp.where(p > 0, log_p - jnp.where(p > 0, log_q, 0.0), 0.0)
    kl = jnp.sum(p * diff, axis=-1)
    kl = jnp.where(masked, kl, 0.0)  # carry-over: unmasked slots contribute nothing
    return jnp.sum(kl) / jnp.maximum(jnp.sum(valid), 1).astype(acc)


def kl_to_reference(
    apply_fn: ApplyFn,
    params: PyTree,
    ref_params: PyTree,
    x0: Int[ArrayLike, "N L"],
    *,
    key: KeyArray,
    mask_id: int,
    valid: Bool[ArrayLike, "N L"] | None = None,
) -> Float[Array, ""]:
    """The KL anchor ``mean_valid KL(p_theta(.|z) || p_ref(.|z))``, ``lambda ~ U(0,1)`` masking.

    Zero when ``params`` equals ``ref_params``; the reference forward is
    ``stop_gradient``; unmasked (carried-over) slots contribute 0 and padding is
    excluded from the mean.
    """
    _validate.is_key(key)
    _common.check_apply_fn(apply_fn)
    x0, valid = _common.check_tokens(x0, valid, name="x0", allow_mask=False, mask_id=mask_id)
    _common.checked_vocab(apply_fn, params, x0, valid, name="x0", allow_mask=False, mask_id=mask_id)
    return _kl(apply_fn, params, ref_params, x0, valid, key, mask_id)


@functools.partial(jax.jit, static_argnames=("apply_fn", "mask_id"))
def _kl(apply_fn, params, ref_params, x0, valid, key, mask_id):
    out = kl_terms(apply_fn, params, ref_params, x0, valid, key, mask_id=mask_id)
    return out.astype(_logits_dtype(params))


def contrastive_margin(
    emb: Float[ArrayLike, "N D"],
    labels: Real[ArrayLike, " N"],
    *,
    margin: RealScalarLike = 1.0,
    adaptive: bool = True,
) -> Float[Array, ""]:
    """Margin loss ``mean_{same} ||e_i - e_j||^2 + mean_{diff} max(0, m - ||e_i - e_j||)^2``.

    Pairs ``i != j``; labels are the requested directions ``d*`` (+1 or -1, integer or
    floating, as ``direction`` elsewhere; another value raises) of the samples (never
    ``sign(gated reward)``, which is always +1 and switches the term off). ``adaptive``:
    ``m = max(margin, 1.5 * mean dissimilar distance)`` with no gradient through ``m``. A
    batch with a single label gives 0.

    Raises:
      TypeError: ``emb`` not ``[N, D]`` floating (``D >= 1``) or ``labels`` not ``[N]``.
      ValueError: A label other than +1 or -1 (under ``jit``, an ``eqx.error_if`` error).
    """
    _validate.floating(emb, name="emb")  # before jnp.asarray: a str names the argument
    _validate.real(labels, name="labels")
    e = jnp.asarray(emb)
    _validate.ndim(e, 2, name="emb")
    _validate.nonempty(e, name="emb", axis=-1, what="feature")
    _validate.ndim(labels, 1, name="labels")
    lab = _check_direction(labels, e[:, 0], name="labels")
    adaptive = _validate.flag(adaptive, name="adaptive")
    e = _validate.guard_positive(e, margin, name="margin")
    return _contrastive(e, lab, margin, adaptive=adaptive)


@functools.partial(jax.jit, static_argnames=("adaptive",))
def _contrastive(e, lab, margin, *, adaptive):
    dt = e.dtype
    acc = accumulation_dtype(dt)
    x, lab = gather_sharded(e.astype(acc)), gather_sharded(lab)  # all pairs need every row
    diff = x[:, None, :] - x[None, :, :]
    sq = jnp.sum(diff * diff, axis=-1)
    off = ~jnp.eye(x.shape[0], dtype=bool)
    dist = jnp.where(off, jnp.sqrt(jnp.where(off, sq, 1.0)), 0.0)  # safe sqrt at i == j
    same = off & (lab[:, None] * lab[None, :] > 0)
    other = off & (lab[:, None] * lab[None, :] < 0)
    n_same = jnp.maximum(jnp.sum(same), 1).astype(acc)
    n_other = jnp.maximum(jnp.sum(other), 1).astype(acc)
    m = jnp.asarray(margin, acc)
    if adaptive:
        mean_other = jax.lax.stop_gradient(jnp.sum(jnp.where(other, dist, 0.0)) / n_other)
        m = jnp.maximum(m, 1.5 * mean_other)
    pos = jnp.sum(jnp.where(same, sq, 0.0)) / n_same
    neg = jnp.sum(jnp.where(other, jnp.maximum(m - dist, 0.0) ** 2, 0.0)) / n_other
    both = jnp.any(other)
    return jnp.where(both, pos + neg, 0.0).astype(dt)
