"""Closed-form engrams: extract, erase, keep only, compose.

Layout: jaxkit's linear maps compute ``y = x @ w + b`` with ``w [*stack, D_in, D_out]``
(leading axes: stacked layers, e.g. a transformer's ``w_up [L, D, F]``). In this
layout the engram of memory ``k`` (the paper's ``W Sigma_k Sigma^+`` for
``W = w^T``) is

    E_k = (n_k / N) C^+ C_k w,      C = sum_k (n_k / N) C_k,

with the bias absorbed as an extra input row (``[w; b]`` against ``[x, 1]``).
``C^+`` is the eigenvalue pseudo-inverse with an explicit relative cut-off
``rcond``: eigenvalues at or below ``rcond * lambda_max`` are dropped. The cut-off
is the method's regulariser (the authors' code uses ``D * eps_f32`` on float32
mean covariances; a finer cut-off keeps near-null directions of ill-conditioned
statistics and amplifies them into a catastrophic edit). Singular statistics are
therefore handled by the cut-off, never by a NaN; a site with no rows at all, or
non-finite statistics, raises.

Per memory set S: ``sum_{k in S} E_k = (n_S / N) C^+ C_S w`` (composition is
addition), and ``sum_{all k} E_k = C^+ C w`` (``w`` on the data span).

References:
  J. Kwon et al., "AI Engram: In Search of Memory Traces in Artificial
  Intelligence", ICML 2026, arXiv:2606.14997 (edit rule and per-layer scaling as
  in the authors' code jeakwon/ai-engram, ``src/engram/editor.py``, ``scaling.py``).
"""

from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PyTree, Real

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype
from jaxkit.editing._engram_checks import (
    Engrams,
    Linear,
    _check_engrams,
    _check_layer_scale,
    _check_layers,
    _check_site_shapes,
    _selection,
)
from jaxkit.editing._stats import CovStats, check_stats, total_covariance

_SCALES = ("count_ratio", "weight_norm", "uniform")


def default_rcond(d: int) -> float:
    """The authors' cut-off ``D * eps`` of float32 for a ``D x D`` covariance (``D >= 1``)."""
    d = _validate.python_int(d, name="d", minimum=1)
    return float(d * jnp.finfo(jnp.float32).eps)


def _pinv_apply(c_total: Array, rhs: Array, rcond: Array) -> Array:
    """``C^+ rhs`` by ``eigh`` with eigenvalues ``<= rcond * max`` dropped (batched)."""
    lam, v = jnp.linalg.eigh(c_total)
    top = jnp.max(lam, axis=-1, keepdims=True)
    keep = lam > rcond * top
    inv = jnp.where(keep, 1.0 / jnp.where(keep, lam, 1.0), 0.0)
    return v @ (inv[..., :, None] * (jnp.swapaxes(v, -1, -2) @ rhs))


def _projection(w, c_target, c_total, rcond):
    acc = accumulation_dtype(w.dtype)
    rhs = c_target.astype(acc) @ w.astype(acc)
    return _pinv_apply(c_total.astype(acc), rhs, jnp.asarray(rcond, acc)).astype(w.dtype)


_projection_jit = jax.jit(_projection)


def _check_rcond(x: Any, rcond: Any, d: int) -> tuple[Any, Any]:
    if rcond is None:
        return x, default_rcond(d)
    return _validate.guard_non_negative(x, rcond, name="rcond"), rcond


def engram_projection(
    w: Float[ArrayLike, "*s din dout"],
    c_target: Float[ArrayLike, "*s din din"],
    c_total: Float[ArrayLike, "*s din din"],
    *,
    rcond: Real[ArrayLike, ""] | None = None,
) -> Float[Array, "*s din dout"]:
    """The pure projection ``C_total^+ C_target w`` (batched over leading axes).

    Args:
      w: Weights in the ``x @ w`` layout.
      c_target: Covariance of the target memory's inputs (the result scales with it).
      c_total: Covariance of all reference inputs (mean or sum: the pinv makes its
        scale irrelevant).
      rcond: Relative eigenvalue cut-off of the pseudo-inverse (traced; default
        ``D * eps_f32``). ``0`` keeps every positive eigenvalue (not advised in f64).

    Returns:
      An array like ``w`` (computed in f32, or f64 for f64).
    """
    for name, a in (("w", w), ("c_target", c_target), ("c_total", c_total)):
        _validate.floating(a, name=name)  # before jnp.asarray: a str names the argument
        _validate.min_ndim(a, 2, name=name)
    w, c_target, c_total = (jnp.asarray(a) for a in (w, c_target, c_total))
    d = w.shape[-2]
    _validate.shape(c_target, (*w.shape[:-2], d, d), name="c_target")
    _validate.shape(c_total, (*w.shape[:-2], d, d), name="c_total")
    w, rc = _check_rcond(w, rcond, d)
    c_total = _validate.all_finite(c_total, name="c_total")
    return _projection_jit(w, c_target, c_total, rc)


def _augment(lin: Linear) -> Array:
    if lin.b is None:
        return lin.w
    return jnp.concatenate([lin.w, lin.b[..., None, :].astype(lin.w.dtype)], axis=-2)


def _extract(layers, stats, rconds):
    proj, ratio = {}, {}
    for name, lin in layers.items():
        rcond = rconds[name]
        cov, count = stats.cov[name], stats.count[name]
        w = _augment(lin)
        d = w.shape[-2]
        cov = cov[..., :d, :d]
        acc = accumulation_dtype(w.dtype)
        c_tot, n = total_covariance(cov.astype(acc), count)
        rhs = jnp.einsum("...kde,...eo->...kdo", cov.astype(acc), w.astype(acc))
        p = _pinv_apply(c_tot[..., None, :, :], rhs, jnp.asarray(rcond, acc))
        p = jnp.moveaxis(p, -3, 0).astype(w.dtype)
        if lin.b is None:
            proj[name] = Linear(p, None)
        else:
            proj[name] = Linear(p[..., :-1, :], p[..., -1, :])
        ratio[name] = (count.astype(acc) / jnp.maximum(n, 1).astype(acc)).astype(w.dtype)
    return Engrams(proj, ratio)


_extract_jit = jax.jit(_extract)


def extract(
    layers: Mapping[str, Linear],
    stats: CovStats,
    *,
    rcond: Real[ArrayLike, ""] | None = None,
) -> Engrams:
    """Engrams of all K memories at every site: one pinv per (stacked) layer, shared.

    Args:
      layers: site -> :class:`Linear` (a bare array is a weight without bias), with
        the same names as ``stats`` (extra sites in ``stats`` are ignored).
      stats: From :func:`collect_stats` on the *original* network.
      rcond: Relative pinv cut-off (traced; default ``D * eps_f32`` with ``D`` the
        site's (augmented) input width; see the module docstring).

    Returns:
      :class:`Engrams`.

    Raises:
      TypeError: a site missing from ``stats``, shapes that do not match, counts not
        integers, or a biased layer whose statistics were collected with
        ``absorb_bias=False``.
      ValueError: a site with no rows, a negative count, non-finite statistics, or a
        bad ``rcond``.
    """
    layers = _check_layers(layers)
    stats = check_stats(stats)  # cov [*stack, K, D, D], integer counts [K] >= 0
    for site, lin in layers.items():
        if site not in stats.cov:
            raise TypeError(f"`stats` has no site {site!r} (it has {sorted(stats.cov)}).")
        cov = stats.cov[site]
        d = lin.w.shape[-2] + (lin.b is not None)
        want = (*lin.w.shape[:-2], cov.shape[-3], None, None)
        _validate.shape(cov, want, name=f"stats.cov[{site!r}]")
        if cov.shape[-1] < d:
            raise TypeError(
                f"`stats.cov[{site!r}]` is {cov.shape[-1]} wide but the layer needs {d}"
                + (" (a biased layer needs absorb_bias=True)." if lin.b is not None else ".")
            )
    covs = {s: stats.cov[s] for s in layers}
    counts = {s: stats.count[s] for s in layers}
    for s in layers:
        covs[s] = _validate.all_finite(covs[s], name=f"stats.cov[{s!r}]")
        counts[s] = _validate.error_if(
            counts[s],
            jnp.sum(counts[s]) <= 0,
            f"`stats` site {s!r} has no rows (N = 0): its covariance is empty.",
        )
    if rcond is None:
        rconds = {
            s: default_rcond(lin.w.shape[-2] + (lin.b is not None)) for s, lin in layers.items()
        }
    else:
        covs = _validate.guard_non_negative(covs, rcond, name="rcond")
        rconds = {s: rcond for s in layers}
    return _extract_jit(layers, CovStats(covs, counts), rconds)


def _scaled_sum(lin: Linear, proj: Linear, coef: Array) -> Linear:
    """``sum_k coef_k P_k`` for one site (coef ``[K]``)."""

    def comb(p):
        acc = accumulation_dtype(p.dtype)
        return jnp.tensordot(coef.astype(acc), p.astype(acc), axes=1)

    return Linear(comb(proj.w), None if proj.b is None else comb(proj.b))


def _compose(layers, engrams, coefficients, base, layer_scale):
    out = {}
    for name, lin in layers.items():
        coef = coefficients * engrams.ratio[name].astype(coefficients.dtype)
        delta = _scaled_sum(lin, engrams.projection[name], coef)
        s = layer_scale.get(name, None) if layer_scale is not None else None
        out[name] = _combine(lin, delta, base, 1.0 if s is None else s)
    return out


def _combine(lin: Linear, delta: Linear, base, scale) -> Linear:
    def one(w, dw):
        acc = accumulation_dtype(w.dtype)
        sc = jnp.asarray(scale, acc)
        sc = sc.reshape(sc.shape + (1,) * (dw.ndim - sc.ndim))
        return (jnp.asarray(base, acc) * w.astype(acc) + sc * dw).astype(w.dtype)

    b = None if lin.b is None else one(lin.b, delta.b)
    return Linear(one(lin.w, delta.w), b)


_compose_jit = jax.jit(_compose)


def compose(
    layers: Mapping[str, Linear],
    engrams: Engrams,
    coefficients: Float[ArrayLike, " K"],
    *,
    base: Real[ArrayLike, ""] = 1.0,
    layer_scale: Mapping[str, ArrayLike] | None = None,
) -> dict[str, Linear]:
    """Any linear combination ``base * W + s_l * sum_k c_k E_k`` at every site.

    ``erase`` is ``base=1, c = -alpha * 1_S`` and ``keep_only`` is ``base=0, c = 1_S``;
    adding and removing memories mixes signs.

    Args:
      layers: site -> :class:`Linear` (the original weights).
      engrams: From :func:`extract` on these layers.
      coefficients: ``c [K]`` (traced).
      base: Weight of the original layer (traced).
      layer_scale: Optional site -> per-layer factor ``s_l`` (a scalar, or
        ``[*stack]`` for stacked sites; traced); missing sites use 1.

    Returns:
      site -> :class:`Linear`, in the layers' dtypes.

    Raises:
      ValueError: a NaN or infinite ``coefficients``, ``base`` or ``layer_scale`` (traced:
        under ``jit``).
    """
    layers = _check_layers(layers)
    k = _check_engrams(layers, engrams)
    _validate.floating(coefficients, name="coefficients")  # before jnp.asarray: a str
    coefficients = jnp.asarray(coefficients)
    _validate.shape(coefficients, (k,), name="coefficients")
    _validate.real(base, name="base")
    ls = _check_layer_scale(layer_scale, layers)
    coefficients = _validate.all_finite(coefficients, name="coefficients")
    coefficients = _validate.guard_finite(coefficients, base, name="base")
    return _compose_jit(layers, engrams, coefficients, base, ls)


def _erase(layers, engrams, sel_ids, alpha, layer_scale, *, scale):
    k = next(iter(engrams.ratio.values())).shape[0]
    sel = jnp.any(sel_ids[:, None] == jnp.arange(k, dtype=jnp.int32)[None, :], axis=0)
    acc = accumulation_dtype(next(iter(layers.values())).w.dtype)
    sel = sel.astype(acc)
    alpha = jnp.asarray(alpha, acc)
    # P_S = sum_{k in S} (n_k / n_S) P_k; the edit is W - alpha * f_l * P_S
    pieces, factors = {}, {}
    for name, lin in layers.items():
        r = engrams.ratio[name].astype(acc)
        n_s = jnp.sum(sel * r)
        coef = sel * r / jnp.where(n_s > 0, n_s, 1.0)
        pieces[name] = _scaled_sum(lin, engrams.projection[name], coef)
        if scale == "count_ratio":
            factors[name] = n_s
        elif scale == "uniform":
            factors[name] = jnp.asarray(1.0, acc)
        else:
            wa, pa = _augment(lin).astype(acc), _augment(pieces[name]).astype(acc)
            factors[name] = jnp.linalg.norm(pa, axis=(-2, -1)) / jnp.maximum(
                jnp.linalg.norm(wa, axis=(-2, -1)), jnp.finfo(acc).tiny
            )
    if scale == "weight_norm":
        top = jnp.max(jnp.stack([jnp.max(f) for f in factors.values()]))
        factors = {n: f / jnp.where(top > 0, top, 1.0) for n, f in factors.items()}
    out = {}
    for name, lin in layers.items():
        f = factors[name]
        if layer_scale is not None and name in layer_scale:
            f = f * layer_scale[name].astype(acc)
        out[name] = _combine(lin, pieces[name], 1.0, -alpha * f)
    return out


_erase_jit = jax.jit(_erase, static_argnames=("scale",))


def erase(
    layers: Mapping[str, Linear],
    engrams: Engrams,
    memories: ArrayLike,
    *,
    alpha: Real[ArrayLike, ""] = 1.0,
    scale: str = "count_ratio",
    layer_scale: Mapping[str, ArrayLike] | None = None,
) -> dict[str, Linear]:
    """Erase memories ``S``: ``W <- W - alpha * f_l * P_S`` at every site.

    ``P_S = C^+ C_S [w; b]`` is the pure projection onto the memories' statistics
    and ``f_l`` the per-layer factor chosen by ``scale``:

    - ``"count_ratio"`` (default, the paper's edit at ``alpha = 1``): ``f_l = n_S / N``,
      so the edit subtracts ``sum_{k in S} E_k``;
    - ``"weight_norm"``: ``f_l = r_l / max_l r_l`` with ``r_l = ||P_S,l|| / ||W_l||``
      (Frobenius, over all sites and stacked layers; the authors' adaptive norm, p = 1);
    - ``"uniform"``: ``f_l = 1``.

    Args:
      layers: site -> :class:`Linear` (original weights).
      engrams: From :func:`extract`.
      memories: Memory ids to erase (an int or a 1-D int array; duplicates count once).
      alpha: Edit strength (traced).
      scale: Per-layer factor (static).
      layer_scale: Optional extra site -> factor (scalar or ``[*stack]``; traced).

    Raises:
      ValueError: a memory id outside ``[0, K)`` (a runtime error under ``jit``),
        an unknown ``scale``, a non-finite ``alpha``.
    """
    layers = _check_layers(layers)
    k = _check_engrams(layers, engrams)
    _validate.one_of(_SCALES, scale=scale)
    _validate.real(alpha, name="alpha")
    ids = _selection(memories, k)
    ids = _validate.error_if(
        ids, ~jnp.isfinite(jnp.asarray(alpha)), f"`alpha` must be finite, got {alpha!r}."
    )
    ls = _check_layer_scale(layer_scale, layers)
    return _erase_jit(layers, engrams, ids, alpha, ls, scale=scale)


def keep_only(
    layers: Mapping[str, Linear], engrams: Engrams, memories: ArrayLike
) -> dict[str, Linear]:
    """The engram-only network of memories ``S``: ``sum_{k in S} E_k`` at every site.

    ``memories``: an int id or a 1-D int array of ids (duplicates count once), as in
    :func:`erase`.

    Raises:
      ValueError: a memory id outside ``[0, K)`` (a runtime error under ``jit``).
    """
    layers = _check_layers(layers)
    k = _check_engrams(layers, engrams)
    ids = _selection(memories, k)
    return _keep_jit(layers, engrams, ids)


def _keep(layers, engrams, ids):
    k = next(iter(engrams.ratio.values())).shape[0]
    acc = accumulation_dtype(next(iter(layers.values())).w.dtype)
    sel = jnp.any(ids[:, None] == jnp.arange(k, dtype=jnp.int32)[None, :], axis=0).astype(acc)
    return _compose(layers, engrams, sel, 0.0, None)


_keep_jit = jax.jit(_keep)


Site = Callable[[PyTree], Any]


def get_layers(params: PyTree, sites: Mapping[str, Site]) -> dict[str, Linear]:
    """Read sites out of any pytree: ``sites[name](params)`` returns ``w`` or ``(w, b)``.

    Host-side helper (not jitted); e.g. ``{"fc1": lambda m: m.weights[0]}`` for a
    ``jaxkit.nn.MLP`` without biases, or ``lambda p: p["layers"]["w_up"]`` for a
    transformer's stacked MLP weights.
    """
    out = {}
    for name, get in sites.items():
        v = get(params)
        out[name] = Linear(*v) if isinstance(v, tuple) else Linear(v)
    return out


def set_layers(params: PyTree, sites: Mapping[str, Site], layers: Mapping[str, Linear]) -> PyTree:
    """Write edited sites back into ``params`` (``eqx.tree_at``; host-side helper).

    Raises ``KeyError`` for a site of ``sites`` missing from ``layers``, ``TypeError`` for one
    not a floating :class:`Linear` of the shapes of the weight (and bias) it replaces.
    """
    for name, get in sites.items():
        if name not in layers:
            raise KeyError(f"`layers` has no site {name!r} (one per entry of `sites`).")
        lin = _check_layers({name: layers[name]})[name]
        _check_site_shapes(lin, get(params), name)
        replace = lin.w if lin.b is None else (lin.w, lin.b)
        params = eqx.tree_at(get, params, replace=replace)
    return params
