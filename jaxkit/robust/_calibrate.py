"""Bulk calibration: learn a set carrying at least ``1 - alpha`` of the reference mass.

Every rule here is our reconstruction ([R] in the spec): the paper (arXiv 2601.21324)
says the bulk is learned from data with a calibrated mass but its exact rules were not
accessible. All calibrators accept sample weights (a weighted reference ``(xi_i, w_i)``:
empirical, parametric or posterior-predictive draws); zero weights drop samples, which
is how per-cell bulks are built (:func:`calibrate_cells`).
"""

import functools
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.robust._bulk import Box, Ellipsoid, Hull, Interval, Union


def _weights(weights, n: int, dtype) -> Array:
    if weights is None:
        return jnp.full((n,), 1.0 / n, dtype)
    _validate.real(weights, name="weights")  # a str names `weights`, not JAX's error
    w = jnp.asarray(weights)
    _validate.shape(w, (n,), name="weights")
    w = w.astype(dtype)
    w = _validate.error_if(
        w, ~jnp.all((w >= 0) & jnp.isfinite(w)), "`weights` must be finite and >= 0."
    )
    w = _validate.error_if(w, ~(jnp.sum(w) > 0), "`weights` must have a positive sum.")
    return w / jnp.sum(w)


def _check_alpha(x, alpha):
    return _validate.guard_interval(x, alpha, name="alpha", low=0.0, high=1.0, closed="neither")


def _sample_weights(xi, weights, *, ndim):
    """Checked sample ``xi`` (``ndim``-D, floating), its weights and the accumulation dtype.

    The weights come back normalised, in that dtype; shared by the calibrators and solvers.
    """
    _validate.floating(xi, name="xi")  # before jnp.asarray: a str names `xi`
    xi = jnp.asarray(xi)
    _validate.ndim(xi, ndim, name="xi")
    _validate.nonempty(xi, name="xi")  # the uniform weights are 1/n
    xi = _validate.all_finite(xi, name="xi")
    acc = accumulation_dtype(xi.dtype)
    return xi, _weights(weights, xi.shape[0], acc), acc


def _sample_weights_alpha(xi, weights, alpha, *, ndim):
    """:func:`_sample_weights` and ``alpha`` (in the accumulation dtype, checked)."""
    xi, w, acc = _sample_weights(xi, weights, ndim=ndim)
    alpha = _validate.real_array(alpha, name="alpha", dtype=acc)
    return xi, _check_alpha(w, alpha), alpha


def weighted_quantile(x: Array, w: Array, level: Array) -> Array:
    """Lower weighted quantile ``inf {t : F(t) >= level}`` along axis 0 (``w`` sums to 1).

    Levels ``<= 0`` give ``-inf`` and levels ``> 1`` give ``+inf`` (beyond the sample).
    """
    order = jnp.argsort(x, axis=0)
    xs = jnp.take_along_axis(x, order, axis=0)
    ws = w[order] if x.ndim == 1 else jnp.take_along_axis(w[:, None] * jnp.ones_like(x), order, 0)
    cw = jnp.cumsum(ws, axis=0)
    # Round-off guard: a level equal to a cumulative weight k/n must select point k.
    tol = 16 * jnp.finfo(cw.dtype).eps
    lvl = jnp.asarray(level, cw.dtype) - tol
    if x.ndim == 1:
        idx = jnp.searchsorted(cw, lvl, side="left")
        q = xs[jnp.clip(idx, 0, x.shape[0] - 1)]
    else:
        idx = jax.vmap(lambda c, lv: jnp.searchsorted(c, lv, side="left"), in_axes=(1, None))(
            cw, lvl
        )
        q = jnp.take_along_axis(xs, jnp.clip(idx, 0, x.shape[0] - 1)[None], axis=0)[0]
    inf = jnp.asarray(jnp.inf, q.dtype)
    q = jnp.where(level <= 0, -inf, q)
    return jnp.where(level > 1 + tol, inf, q)


# ----------------------------------------------------------------------------- interval


@functools.partial(jax.jit, static_argnames=("method",))
def _interval_core(xi, w, alpha, method):
    acc = accumulation_dtype(xi.dtype)
    x = xi.astype(acc)
    if method == "equal_tail":
        lo = weighted_quantile(x, w, alpha / 2)
        lo = jnp.where(jnp.isfinite(lo), lo, jnp.min(x))
        hi = weighted_quantile(x, w, 1 - alpha / 2)
    else:
        order = jnp.argsort(x)
        xs, ws = x[order], w[order]
        cw = jnp.cumsum(ws)
        before = cw - ws
        tol = 16 * jnp.finfo(acc).eps
        j = jnp.searchsorted(cw, before + (1 - alpha) - tol, side="left")
        ok = (j < x.shape[0]) & (ws > 0)
        width = jnp.where(ok, xs[jnp.clip(j, 0, x.shape[0] - 1)] - xs, jnp.inf)
        i = jnp.argmin(width)
        lo, hi = xs[i], xs[jnp.clip(j[i], 0, x.shape[0] - 1)]
    return Interval(lo=lo.astype(xi.dtype), hi=hi.astype(xi.dtype))


def calibrate_interval(
    xi: Float[ArrayLike, " n"],
    *,
    alpha: RealScalarLike = 0.05,
    weights: Float[ArrayLike, " n"] | None = None,
    method: str = "equal_tail",
) -> Interval:
    """Interval bulk for scalar outcomes with weighted mass ``>= 1 - alpha`` (in-sample).

    ``"equal_tail"``: ``[q(alpha/2), q(1 - alpha/2)]`` with lower weighted quantiles.
    ``"shortest"``: the shortest window of sorted samples with mass ``>= 1 - alpha`` (the
    HPD interval for unimodal predictive draws). Reconstruction [R].

    Args:
      xi: Samples of the reference, shape ``(n,)``.
      alpha: Bulk miss rate in (0, 1) (traced).
      weights: Sample weights (>= 0, normalised here); uniform if omitted.
      method: ``"equal_tail"`` or ``"shortest"``.

    Returns:
      The calibrated :class:`Interval`.

    Raises:
      TypeError: If ``xi`` is not a floating array of shape ``(n,)`` with ``n >= 1``.
      ValueError: If ``alpha`` is outside (0, 1) or ``method`` is unknown.
    """
    _validate.one_of(("equal_tail", "shortest"), method=method)
    xi, w, alpha = _sample_weights_alpha(xi, weights, alpha, ndim=1)
    return _interval_core(xi, w, alpha, method)


# ----------------------------------------------------------------------------- box


@functools.partial(jax.jit, static_argnames=("bonferroni",))
def _box_core(xi, w, alpha, bonferroni):
    acc = accumulation_dtype(xi.dtype)
    x = xi.astype(acc)
    a = alpha / x.shape[1] if bonferroni else alpha
    lo = weighted_quantile(x, w, a / 2)
    lo = jnp.where(jnp.isfinite(lo), lo, jnp.min(x, axis=0))
    hi = weighted_quantile(x, w, 1 - a / 2)
    return Box(center=((lo + hi) / 2).astype(xi.dtype), half=((hi - lo) / 2).astype(xi.dtype))


def calibrate_box(
    xi: Float[ArrayLike, "n d"],
    *,
    alpha: RealScalarLike = 0.05,
    weights: Float[ArrayLike, " n"] | None = None,
    bonferroni: bool = True,
) -> Box:
    """Box bulk from per-coordinate equal-tail weighted quantiles (in-sample).

    With ``bonferroni=True`` each coordinate uses level ``alpha / d`` (``alpha / (2d)`` per
    tail), so the union bound gives joint mass ``>= 1 - alpha``. Reconstruction [R].

    Args:
      xi: Samples, shape ``(n, d)``.
      alpha: Bulk miss rate in (0, 1) (traced).
      weights: Sample weights; uniform if omitted.
      bonferroni: Split ``alpha`` over the ``d`` coordinates.

    Returns:
      The calibrated :class:`Box`.

    Raises:
      TypeError: If ``xi`` is not a floating array of shape ``(n, d)`` with ``n >= 1``.
      ValueError: If ``alpha`` is outside (0, 1).
    """
    bonferroni = _validate.flag(bonferroni, name="bonferroni")
    xi, w, alpha = _sample_weights_alpha(xi, weights, alpha, ndim=2)
    return _box_core(xi, w, alpha, bonferroni)


# ----------------------------------------------------------------------------- ellipsoid


def _weighted_cov(x, w):
    mu = jnp.sum(w[:, None] * x, axis=0)
    c = x - mu[None]
    # a sum over samples, not a matmul: keeps a sample axis sharded on 'data' unambiguous
    return mu, jnp.sum(w[:, None, None] * c[:, :, None] * c[:, None, :], axis=0), c


def ledoit_wolf(x: Array, w: Array) -> tuple[Array, Array]:
    """Weighted mean and Ledoit-Wolf covariance (shrinkage towards ``tr(S)/d * I``).

    Intensity ``min(b2, d2) / d2`` with ``d2 = ||S - m I||_F^2`` and
    ``b2 = sum_i w_i^2 ||c_i c_i^T - S||_F^2`` (``w = 1/n`` gives Ledoit & Wolf 2004, as
    ``sklearn.covariance.ledoit_wolf``).
    """
    mu, s, c = _weighted_cov(x, w)
    d = x.shape[1]
    m = jnp.trace(s) / d
    eye = jnp.eye(d, dtype=x.dtype)
    d2 = jnp.sum((s - m * eye) ** 2)
    outer = c[:, :, None] * c[:, None, :] - s[None]
    b2 = jnp.sum(w**2 * jnp.sum(outer**2, axis=(1, 2)))
    shrink = jnp.where(d2 > 0, jnp.minimum(b2, d2) / jnp.where(d2 > 0, d2, 1.0), 1.0)
    return mu, shrink * m * eye + (1 - shrink) * s


def _fit_shape(x, w, shrinkage):
    if shrinkage == "ledoit_wolf":
        return ledoit_wolf(x, w)
    mu, s, _ = _weighted_cov(x, w)
    if shrinkage == "none":
        return mu, s
    d = x.shape[1]
    lam = jnp.asarray(shrinkage, x.dtype)
    return mu, lam * jnp.trace(s) / d * jnp.eye(d, dtype=x.dtype) + (1 - lam) * s


def _scores(mu, chol, x):
    sol = jax.scipy.linalg.solve_triangular(chol, (x - mu[None]).T, lower=True)
    return jnp.sqrt(jnp.sum(sol * sol, axis=0))


@functools.partial(jax.jit, static_argnames=("n_fit", "shrinkage", "conformal"))
def _ellipsoid_core(xi, w, alpha, key, n_fit, shrinkage, conformal):
    acc = accumulation_dtype(xi.dtype)
    x = xi.astype(acc)
    if conformal:
        perm = jax.random.permutation(key, x.shape[0])
        x, w = x[perm], w[perm]
        xf, wf = x[:n_fit], w[:n_fit]
        xc, wc = x[n_fit:], w[n_fit:]
        wf = wf / jnp.sum(wf)
        wc = wc / jnp.sum(wc)
        m = x.shape[0] - n_fit
        level = (1 - alpha) * (m + 1) / m  # split-conformal order statistic for equal weights
    else:
        xf, wf, xc, wc, level = x, w, x, w, 1 - alpha
    mu, sigma = _fit_shape(xf, wf, shrinkage)
    chol = jnp.linalg.cholesky(sigma)
    chol = _validate.error_if(
        chol, ~jnp.all(jnp.isfinite(chol)), "`xi`: the fitted covariance is singular."
    )
    r = weighted_quantile(_scores(mu, chol, xc), wc, level)
    return Ellipsoid(
        center=mu.astype(xi.dtype), chol=chol.astype(xi.dtype), radius=r.astype(xi.dtype)
    )


def calibrate_ellipsoid(
    xi: Float[ArrayLike, "n d"],
    *,
    alpha: RealScalarLike = 0.05,
    key: KeyArray | None = None,
    weights: Float[ArrayLike, " n"] | None = None,
    split: float = 0.5,
    shrinkage: str | float = "ledoit_wolf",
    conformal: bool = True,
) -> Ellipsoid:
    """Ellipsoid bulk: centre and shape fitted on one split, radius calibrated on the other.

    Split-conformal (default): a random permutation (``key``) sends ``round(split * n)``
    samples to the fit split (weighted mean ``mu``, covariance ``Sigma = L L^T``, Ledoit-Wolf
    shrinkage by default) and the remaining ``m`` to the calibration split, whose scores
    ``s_j = ||L^{-1}(xi_j - mu)||`` give the radius ``r = s_(ceil((m+1)(1-alpha)))`` (for
    equal weights; weighted samples use the weighted quantile at level
    ``(1-alpha)(m+1)/m``), so ``P(xi_new in B) >= 1 - alpha`` under exchangeability. With
    ``conformal=False`` everything is in-sample (under-covers; spec pitfall).
    ``shrinkage=1.0`` gives a ball in the metric ``tr(S)/d * I``. Reconstruction [R].

    Args:
      xi: Samples, shape ``(n, d)``.
      alpha: Bulk miss rate in (0, 1) (traced).
      key: PRNG key for the split (required when ``conformal``).
      weights: Sample weights; uniform if omitted.
      split: Fraction of samples used to fit the shape (static).
      shrinkage: ``"ledoit_wolf"``, ``"none"`` or a fixed intensity in [0, 1].
      conformal: Calibrate the radius on a held-out split.

    Returns:
      The calibrated :class:`Ellipsoid`.

    Raises:
      TypeError: If ``xi`` is not a floating array of shape ``(n, d)`` with ``n >= 1``, or
        ``key`` is not a PRNG key (or is None when ``conformal``).
      ValueError: If ``alpha`` is outside (0, 1), or the calibration split has fewer than
        ``1/alpha - 1`` samples (the conformal radius would be infinite).
    """
    conformal = _validate.flag(conformal, name="conformal")
    if key is not None:
        _validate.is_key(key)
    _validate.floating(xi, name="xi")  # before jnp.asarray: a str names `xi`
    xi = jnp.asarray(xi)
    _validate.ndim(xi, 2, name="xi")
    _validate.nonempty(xi, name="xi")
    if isinstance(shrinkage, str):
        _validate.one_of(("ledoit_wolf", "none"), shrinkage=shrinkage)
    else:
        _validate.in_interval(low=0.0, high=1.0, shrinkage=shrinkage)
        shrinkage = float(shrinkage)
    n = xi.shape[0]
    acc = accumulation_dtype(xi.dtype)
    w = _weights(weights, n, acc)
    alpha = _validate.real_array(alpha, name="alpha", dtype=acc)
    w = _check_alpha(w, alpha)
    n_fit = n
    if conformal:
        if key is None:
            raise TypeError("`key` is required when `conformal=True` (it draws the split).")
        _validate.in_interval(low=0.0, high=1.0, closed="neither", split=split)
        n_fit = int(round(split * n))
        m = n - n_fit
        if n_fit < 2 or m < 1:
            raise ValueError(f"`xi`: split={split} of n={n} leaves too few samples per split.")
        w = _validate.error_if(
            w,
            alpha < 1.0 / (m + 1),
            f"`alpha` too small for the calibration split: m={m} samples need "
            f"alpha >= 1/(m+1) = {1.0 / (m + 1):.4g} (else the radius is infinite).",
        )
    else:
        key = jax.random.key(0)  # unused
    return _ellipsoid_core(xi, w, alpha, key, n_fit, shrinkage, conformal)


def calibrate_ball(
    xi: Float[ArrayLike, "n d"],
    *,
    alpha: RealScalarLike = 0.05,
    key: KeyArray | None = None,
    weights: Float[ArrayLike, " n"] | None = None,
    split: float = 0.5,
    conformal: bool = True,
) -> Ellipsoid:
    """Ball bulk: :func:`calibrate_ellipsoid` with full shrinkage (``Sigma = tr(S)/d * I``).

    Raises:
      TypeError: As :func:`calibrate_ellipsoid` (e.g. an ``xi`` without samples).
      ValueError: As :func:`calibrate_ellipsoid`.
    """
    return calibrate_ellipsoid(
        xi, alpha=alpha, key=key, weights=weights, split=split, shrinkage=1.0, conformal=conformal
    )


# ----------------------------------------------------------------------------- hull


def depth_scores(x: Array, w: Array, depth: str) -> Array:
    """Outlyingness of each sample.

    Mahalanobis distance to the weighted mean (pseudo-inverse covariance) or Euclidean
    distance to the weighted coordinate-wise median.
    """
    if depth == "mahalanobis":
        mu, s, c = _weighted_cov(x, w)
        return jnp.sqrt(jnp.maximum(jnp.sum((c @ jnp.linalg.pinv(s)) * c, axis=1), 0))
    med = weighted_quantile(x, w, jnp.asarray(0.5, x.dtype))
    return jnp.sqrt(jnp.sum((x - med[None]) ** 2, axis=1))


@functools.partial(jax.jit, static_argnames=("depth",))
def _hull_core(xi, w, alpha, depth):
    acc = accumulation_dtype(xi.dtype)
    x = xi.astype(acc)
    s = depth_scores(x, w, depth)
    thr = weighted_quantile(s, w, 1 - alpha)
    return Hull(points=xi, mask=(s <= thr) & (w > 0))


def calibrate_hull(
    xi: Float[ArrayLike, "n d"],
    *,
    alpha: RealScalarLike = 0.05,
    weights: Float[ArrayLike, " n"] | None = None,
    depth: str = "mahalanobis",
) -> Hull:
    """Hull bulk: the convex hull of the samples of smallest depth score.

    Keeps the samples whose score is within the weighted ``1 - alpha`` quantile (so the
    hull holds ``>= 1 - alpha`` of the sample mass, in-sample).

    ``depth="mahalanobis"`` (distance to the weighted mean) or ``"median"`` (distance to the
    coordinate-wise weighted median). Reconstruction [R].

    Args:
      xi: Samples, shape ``(n, d)``; the hull's candidate vertices.
      alpha: Bulk miss rate in (0, 1) (traced).
      weights: Sample weights; uniform if omitted (zero-weight samples are never kept).
      depth: ``"mahalanobis"`` or ``"median"``.

    Returns:
      A :class:`Hull` over ``xi`` with the retained ones masked in.

    Raises:
      TypeError: If ``xi`` is not a floating array of shape ``(n, d)`` with ``n >= 1``.
      ValueError: If ``alpha`` is outside (0, 1) or ``depth`` is unknown.
    """
    _validate.one_of(("mahalanobis", "median"), depth=depth)
    xi, w, alpha = _sample_weights_alpha(xi, weights, alpha, ndim=2)
    return _hull_core(xi, w, alpha, depth)


# ----------------------------------------------------------------------------- cells


def calibrate_cells(
    xi: Float[ArrayLike, "n d"],
    cells: Int[ArrayLike, " n"],
    *,
    n_cells: int,
    alpha: RealScalarLike = 0.05,
    kind: str = "hull",
    labels: ArrayLike | None = None,
    weights: Float[ArrayLike, " n"] | None = None,
) -> Union:
    """One bulk per cell (e.g. class x group), returned as a :class:`Union`.

    Each member is calibrated on its cell's samples (the others get weight zero), in-sample
    (``kind`` ``"hull"`` (Mahalanobis depth), ``"box"`` or ``"ellipsoid"``
    (``conformal=False``, Ledoit-Wolf)). Every cell must hold samples. Reconstruction [R].

    Args:
      xi: Samples, shape ``(n, d)``.
      cells: Cell index of each sample in ``[0, n_cells)``.
      n_cells: Number of cells (static).
      alpha: Miss rate per cell in (0, 1).
      kind: Bulk kind per cell.
      labels: Label attached to each member (e.g. its class, +1/-1); default ``0..c-1``.
      weights: Sample weights; uniform if omitted.

    Returns:
      A :class:`Union` of ``n_cells`` members.

    Raises:
      TypeError: If ``xi`` is not a floating array of shape ``(n, d)`` with ``n >= 1``, or
        ``cells`` is not an integer array of shape ``(n,)``.
      ValueError: If a ``cells`` entry lies outside ``[0, n_cells)`` or a cell holds no
        sample (traced: under ``jit``).
    """
    _validate.one_of(("hull", "box", "ellipsoid"), kind=kind)
    n_cells = _validate.python_int(n_cells, name="n_cells", minimum=1)
    _validate.floating(xi, name="xi")  # before jnp.asarray: a str names `xi`
    xi = jnp.asarray(xi)
    _validate.ndim(xi, 2, name="xi")
    _validate.nonempty(xi, name="xi")
    _validate.integer(cells, name="cells")
    cells = jnp.asarray(cells)
    _validate.shape(cells, (xi.shape[0],), name="cells")
    # an id outside [0, n_cells) matched no cell: its sample was dropped silently
    cells = _validate.ids_in(cells, n_cells, name="cells")
    acc = accumulation_dtype(xi.dtype)
    w = _weights(weights, xi.shape[0], acc)
    onehot = (cells[None, :] == jnp.arange(n_cells, dtype=cells.dtype)[:, None]).astype(acc) * w[
        None
    ]
    onehot = _validate.error_if(
        onehot, ~jnp.all(jnp.sum(onehot, axis=1) > 0), "`cells`: every cell must hold samples."
    )
    if kind == "hull":
        members = jax.vmap(lambda wc: calibrate_hull(xi, alpha=alpha, weights=wc))(onehot)
    elif kind == "box":
        members = jax.vmap(lambda wc: calibrate_box(xi, alpha=alpha, weights=wc))(onehot)
    else:
        members = jax.vmap(
            lambda wc: calibrate_ellipsoid(xi, alpha=alpha, weights=wc, conformal=False)
        )(onehot)
    if labels is None:
        labels = jnp.arange(n_cells, dtype=xi.dtype)
    labels = jnp.asarray(labels, xi.dtype)
    _validate.shape(labels, (n_cells,), name="labels")
    return Union(members=members, labels=labels)


def conformal_size_ok(m: int, alpha: float) -> bool:
    """Whether ``m`` calibration samples give a finite split-conformal radius at ``alpha``."""
    return math.ceil((m + 1) * (1 - alpha)) <= m
