"""Soft quantile family and :func:`banded_error_bound`.

``quantile``, ``median``, ``percentile`` and their soft indices ``argquantile``,
``argmedian``, ``argpercentile``.

``q`` (or ``p`` for percentiles) is traced: a concrete value outside [0, 1] (or
[0, 100]) raises ``ValueError`` at once, a traced one an ``eqx.error_if`` error at run
time (NaN included), never a wrapped index. Jitted like jax.numpy (one module-level
``jax.jit`` per function, static choices static, ``softness`` and ``q`` traced).
"""

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike
from jaxkit.soft import _axis_front as F
from jaxkit.soft import _axis_network as NWK
from jaxkit.soft import _axis_ot as OT
from jaxkit.soft import _axis_pairwise as PW
from jaxkit.soft import _banded as BD
from jaxkit.soft._axis_select import _top_k
from jaxkit.soft._axis_sort import _rank, _sort, sort_last


def _rows(xl, k, kp1, two, softness, o, log):
    """Soft rows ``k`` and ``k + 1`` of the ascending argsort, and whether they are logs."""
    if o.mode == "hard":
        idx = jnp.argsort(lax.stop_gradient(xl), axis=-1, stable=True)
        return F.onehot(jnp.stack([idx[..., k], idx[..., kp1]], -1), xl.shape[-1], xl.dtype), False
    xs, _, _ = F.squash(F.guard(xl, softness), o.standardize)
    if o.method in ("softsort", "neuralsort"):
        return PW.argquantile(xs, k, kp1, softness, o, log)
    if o.method == "ot":
        return OT.argquantile(xs, k, kp1, two, softness, o), False
    return NWK.argquantile(xs, k, kp1, softness, o), False


def _mix(P, a, two, islog):
    if not two:
        return P[..., 0, :]
    if islog:  # log((1 - a) p_k + a p_{k+1}); weights 0 drop out of logsumexp
        w = jnp.stack([1.0 - a, a]).reshape((1,) * (P.ndim - 2) + (2, 1))
        return jax.nn.logsumexp(P, axis=-2, b=jnp.broadcast_to(w, P.shape))
    return (1.0 - a) * P[..., 0, :] + a * P[..., 1, :]


def _guard_q(x, q, scale, qname):
    return V.guard_interval(x, q, name=qname, low=0.0, high=scale)


def _argquantile_core(x, q, softness, log_prob_eps, *, axis, keepdims, qm, o, log, scale, qname):
    nd = x.ndim
    x = _guard_q(x, q, scale, qname)
    xl, ax, dt = F.prep(x, axis)
    n = xl.shape[-1]
    q = jnp.asarray(q) / scale

    def one(qi):
        k, a, two = F.qparams(qi.astype(xl.dtype), n, qm)
        P, islog = _rows(xl, k, jnp.minimum(k + 1, n - 1), two, softness, o, log)
        return F.finish(_mix(P, a, two, islog), islog, log, log_prob_eps)

    p = jax.vmap(one)(q) if q.ndim == 1 else one(q)
    if keepdims:
        p = (
            p.reshape(p.shape[: q.ndim] + (1,) * nd + (n,))
            if axis is None
            else (jnp.expand_dims(p, ax + q.ndim))
        )
    return p.astype(dt)


def _quantile_core(x, q, softness, *, axis, keepdims, qm, o, scale, qname, bound=False):
    x = _guard_q(x, q, scale, qname)
    q = jnp.asarray(q) / scale
    if o.mode == "hard":
        return jnp.quantile(x, q.astype(x.dtype), axis=axis, keepdims=keepdims, method=qm)
    nd = x.ndim
    xl, ax, dt = F.prep(x, axis)
    n = xl.shape[-1]
    xl = F.guard(xl, softness)
    o = F.with_window(o, n, "quantile")

    def one(qi):
        k, a, two = F.qparams(qi.astype(xl.dtype), n, qm)
        kp1 = jnp.minimum(k + 1, n - 1)
        if bound and o.window is None:  # window="auto" took the dense rows: exact
            return jnp.zeros_like(xl[..., 0])
        if o.window is not None:
            v, b = BD.quantile_last(
                xl, k, kp1, a, two, softness, o.method, o.standardize, o.gated_grad, o.window
            )
            return b if bound else v
        if o.method in F.DIRECT:
            s = sort_last(xl, False, softness, o)
            v = s[..., k]
            return (1.0 - a) * v + a * s[..., kp1] if two else v
        P, _ = _rows(xl, k, kp1, two, softness, o, False)
        p = _mix(P, a, two, False)
        p = p if o.gated_grad else lax.stop_gradient(p)
        return jnp.einsum("...n,...n->...", p, xl)

    v = jax.vmap(one)(q) if q.ndim == 1 else one(q)
    if keepdims:
        v = (
            v.reshape(v.shape[: q.ndim] + (1,) * nd)
            if axis is None
            else (jnp.expand_dims(v, ax + q.ndim))
        )
    return v.astype(dt)


_QSTATIC = ("axis", "keepdims", "qm", "o", "scale", "qname")
_argquantile_jit = jax.jit(_argquantile_core, static_argnames=(*_QSTATIC, "log"))
_quantile_jit = jax.jit(_quantile_core, static_argnames=(*_QSTATIC, "bound"))


def _check(x, q, axis, keepdims, quantile_method, scale, qname, allowed, opts):
    V.one_of(F.QMETHODS, quantile_method=quantile_method)
    keepdims = V.flag(keepdims, name="keepdims")
    V.real(q, name=qname)
    q = jnp.asarray(q)
    if q.ndim > 1:
        raise TypeError(f"`{qname}` must be a scalar or 1-D, got shape {q.shape}.")
    V.in_interval(low=0, high=scale, **{qname: q})
    x, o = F.front(x, axis, allowed, opts)
    if (x.size if axis is None else x.shape[axis]) == 0:
        raise ValueError("`x` must be non-empty along `axis` for a quantile.")
    return x, q, o, keepdims


def _argquantile(x, q, axis=None, keepdims=False, *, quantile_method="linear",
                 return_log_probs=False, log_prob_eps=None, scale=1.0, qname="q",
                 **opts):  # fmt: skip
    return_log_probs = F.check_lp(return_log_probs, log_prob_eps)
    qm = quantile_method
    x, q, o, keepdims = _check(x, q, axis, keepdims, qm, scale, qname, F.INDEX_METHODS, opts)
    return _argquantile_jit(
        x, q, opts.get("softness", 0.1), log_prob_eps, axis=axis, keepdims=keepdims, qm=qm, o=o,
        log=return_log_probs, scale=scale, qname=qname,
    )  # fmt: skip


def _quantile(x, q, axis=None, keepdims=False, *, quantile_method="linear", scale=1.0,
              qname="q", bound=False, **opts):  # fmt: skip
    qm = quantile_method
    x, q, o, keepdims = _check(x, q, axis, keepdims, qm, scale, qname, F.VALUE_METHODS, opts)
    return _quantile_jit(
        x, q, opts.get("softness", 0.1), axis=axis, keepdims=keepdims, qm=qm, o=o, scale=scale,
        qname=qname, bound=bound,
    )  # fmt: skip


def argquantile(
    x: ArrayLike,
    q: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    quantile_method: str = "linear",
    standardize: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    ot_kwargs: dict | None = None,
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft index of the ``q``-quantile (``q`` scalar or 1-D, prepended to the output).

    ``quantile_method`` mirrors ``jnp.quantile``'s ``method``; the two-row methods mix the
    soft rows ``k`` and ``k+1`` (with ``log_softmax`` rows the mix is a weighted
    ``logsumexp``).

    ``x``, ``q`` (in [0, 1], traced), ``axis``, ``keepdims``, ``quantile_method``: as
    ``jnp.quantile``; ``softness``, ``mode``, ``method``, ``standardize``, ``abs_mode``,
    ``network``, ``ot_kwargs``, ``return_log_probs``, ``log_prob_eps``: as in
    :func:`argsort`.
    """
    return _argquantile(**locals())


def quantile(
    x: ArrayLike,
    q: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "pav",
    quantile_method: str = "linear",
    standardize: bool = True,
    gated_grad: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    solver: str = "hybrid",
    window: int | str | None = None,
    ot_kwargs: dict | None = None,
) -> Array:
    """Soft ``jnp.quantile`` (``q`` scalar or 1-D in [0, 1], traced; prepended to the output).

    ``pav``/``network``/``smooth_sort``: interpolate the soft-sorted values; index
    methods: expectation under :func:`argquantile`. Other arguments as in :func:`sort`.
    """
    return _quantile(**locals())


# The median is the midpoint quantile at q = 0.5 (as ``jnp.median``).
_MEDIAN = {"drop": ("q", "quantile_method"), "q": 0.5, "quantile_method": "midpoint"}
median = F.mirror(
    quantile,
    _quantile,
    "median",
    """Soft median (``quantile(x, 0.5, quantile_method="midpoint")``, as ``jnp.median``).""",
    **_MEDIAN,
)
argmedian = F.mirror(
    argquantile,
    _argquantile,
    "argmedian",
    "Soft index of the median (arguments of :func:`argquantile`).",
    **_MEDIAN,
)
percentile = F.mirror(
    quantile,
    _quantile,
    "percentile",
    "Soft ``jnp.percentile`` (``p`` in [0, 100], traced; arguments of :func:`quantile`).",
    rename={"q": "p"},
    scale=100.0,
    qname="p",
)
argpercentile = F.mirror(
    argquantile,
    _argquantile,
    "argpercentile",
    "Soft index of the ``p``-th percentile (``p`` in [0, 100]; arguments of :func:`argquantile`).",
    rename={"q": "p"},
    scale=100.0,
    qname="p",
)


_BOUNDED = {"sort": _sort, "rank": _rank, "top_k": _top_k, "quantile": _quantile}


def banded_error_bound(
    op: str,
    x: ArrayLike,
    *args,
    window: int | str,
    softness: RealScalarLike = 0.1,
    method: str = "neuralsort",
    **kwargs,
) -> Array:
    """Certified bound on ``|banded - dense|`` for the output of a banded operator.

    ``banded_error_bound("sort", x, window=w, softness=s, method=m, ...)`` bounds,
    element by element, the difference between ``jaxkit.soft.sort(x, window=w, ...)``
    and the exact (dense) ``jaxkit.soft.sort(x, abs_mode="hard", ...)`` with the same
    arguments, in exact arithmetic (add a few ulps of the output for floating-point
    rounding). The bound is computed at run time from the actual gaps of ``x`` (see
    :mod:`jaxkit.soft._banded`); it costs O(n log n + n w) and is traceable (jitted
    like the operator itself).

    Args:
      op: ``"sort"``, ``"rank"``, ``"top_k"`` (values) or ``"quantile"``.
      x: input array of any rank (the operator works along its ``axis``).
      *args: the operator's positional arguments after ``x`` (``k`` for top_k, ``q`` for
        quantile; ``axis`` may also be given positionally).
      window: half-width ``w`` of the band (static int >= 0), or ``"auto"`` (the
        bound is 0 where ``"auto"`` takes the dense rows).
      softness: temperature (> 0), traced.
      method: ``"neuralsort"`` or ``"softsort"``.
      **kwargs: the operator's other keyword arguments (``axis``, ``descending``,
        ``standardize``, ``quantile_method``, ``keepdims``).

    Returns:
      The bound, shaped like the operator's (value) output, dtype of ``x``.

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    V.one_of(tuple(_BOUNDED), op=op)
    if "bound" in kwargs:
        raise TypeError("banded_error_bound() got an unexpected keyword argument 'bound'")
    if window != "auto":
        V.python_int(window, name="window", minimum=0)
    out = _BOUNDED[op](
        x, *args, window=window, softness=softness, method=method, bound=True, **kwargs
    )
    return out[0] if op == "top_k" else out
