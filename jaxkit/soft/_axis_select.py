"""Soft ``argmax``/``max``/``argmin``/``min`` and ``argtop_k``/``top_k``.

Defaults follow ``jax.numpy`` / ``lax``: ``axis=None`` for argmax/max, ``axis=-1`` for
top-k. Jitted like jax.numpy (one module-level ``jax.jit`` per function, static
choices static, ``softness`` and ``log_prob_eps`` traced).

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Int

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike
from jaxkit.soft import _axis_front as F
from jaxkit.soft import _axis_network as NWK
from jaxkit.soft import _axis_ot as OT
from jaxkit.soft import _axis_pairwise as PW
from jaxkit.soft import _banded as BD
from jaxkit.soft._axis_sort import sort_last

# ----------------------------------------------------------------------------- argmax / max


def _argmax_last(xs, softness, o, log):
    if o.method in ("softsort", "neuralsort"):
        return PW.argmax(xs, softness, o, log)
    if o.method == "ot":
        return OT.argmax(xs, softness, o), False
    return NWK.argmax(xs, softness, o), False


def _argmax_core(x, softness, log_prob_eps, *, axis, keepdims, negate, o, log):
    nd = x.ndim
    xl, ax, dt = F.prep(-x if negate else x, axis)
    n = xl.shape[-1]
    if o.mode == "hard":
        p, islog = F.onehot(jnp.argmax(xl, axis=-1), n, xl.dtype), False
    else:
        xl = F.guard(xl, softness)
        xs, _, _ = F.squash(xl, o.standardize)
        p, islog = _argmax_last(xs, softness, o, log)
    p = F.finish(p, islog, log, log_prob_eps)
    if keepdims:
        p = p.reshape((1,) * nd + (n,)) if axis is None else jnp.expand_dims(p, ax)
    return p.astype(dt)


def _max_core(x, softness, *, axis, keepdims, negate, o):
    nd = x.ndim
    x = -x if negate else x
    if o.mode == "hard":
        v = jnp.max(x, axis=axis, keepdims=keepdims)
        return -v if negate else v
    xl, ax, dt = F.prep(x, axis)
    xl = F.guard(xl, softness)
    if o.method in F.DIRECT:
        v = sort_last(xl, True, softness, o)[..., 0]
    else:
        xs, _, _ = F.squash(xl, o.standardize)
        p, _ = _argmax_last(xs, softness, o, False)
        p = p if o.gated_grad else lax.stop_gradient(p)
        v = jnp.einsum("...n,...n->...", p, xl)
    if keepdims:
        v = v.reshape((1,) * nd) if axis is None else jnp.expand_dims(v, ax)
    v = v.astype(dt)
    return -v if negate else v


_argmax_jit = jax.jit(_argmax_core, static_argnames=("axis", "keepdims", "negate", "o", "log"))
_max_jit = jax.jit(_max_core, static_argnames=("axis", "keepdims", "negate", "o"))


def _checked(x, axis, keepdims, allowed, opts, what):
    x, o = F.front(x, axis, allowed, opts)
    keepdims = V.flag(keepdims, name="keepdims")
    if (x.size if axis is None else x.shape[axis]) == 0:
        raise ValueError(f"`x` must be non-empty along `axis` for {what} (as jnp.{what}).")
    return x, o, keepdims


def _argmax(x, axis=None, keepdims=False, *, return_log_probs=False, log_prob_eps=None,
            negate=False, **opts):  # fmt: skip
    return_log_probs = F.check_lp(return_log_probs, log_prob_eps)
    what = "argmin" if negate else "argmax"
    x, o, keepdims = _checked(x, axis, keepdims, F.INDEX_METHODS, opts, what)
    return _argmax_jit(
        x, opts.get("softness", 0.1), log_prob_eps, axis=axis, keepdims=keepdims, negate=negate,
        o=o, log=return_log_probs,
    )  # fmt: skip


def argmax(
    x: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    standardize: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    ot_kwargs: dict | None = None,
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft argmax: a distribution over positions, shape ``x.shape`` without ``axis`` + ``[n]``.

    ``softsort``: ``proj_simplex(x~)``; ``neuralsort``: ``proj_simplex((n-1)x~ - A)``;
    ``ot``: two anchors; ``network``: first row of the descending network.

    ``x``, ``axis``, ``keepdims``: as ``jnp.argmax`` (``axis=None`` flattens); the other
    arguments as in :func:`argsort`.
    """
    return _argmax(**locals())


argmin = F.mirror(
    argmax,
    _argmax,
    "argmin",
    "Soft argmin = soft argmax of ``-x`` (same arguments as :func:`argmax`).",
    negate=True,
)


def _max(x, axis=None, keepdims=False, *, negate=False, **opts):
    x, o, keepdims = _checked(x, axis, keepdims, F.VALUE_METHODS, opts, "min" if negate else "max")
    s = opts.get("softness", 0.1)
    return _max_jit(x, s, axis=axis, keepdims=keepdims, negate=negate, o=o)


def max(  # noqa: A001
    x: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    standardize: bool = True,
    gated_grad: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    solver: str = "hybrid",
    ot_kwargs: dict | None = None,
) -> Array:
    """Soft max: the expectation of ``x`` under :func:`argmax`.

    ``pav``/``network``/``smooth_sort``: the first element of the descending soft sort
    (``solver`` as in :func:`sort`).
    """
    return _max(**locals())


min = F.mirror(  # noqa: A001
    max, _max, "min", "Soft min = ``-max(-x)`` (same arguments as :func:`max`).", negate=True
)


# ----------------------------------------------------------------------------- top-k


def argtop_k_last(xl, k, softness, o, log, idx=None):
    """Soft top-k rows ``(..., k, [n])`` of the guarded ``xl`` and whether they are logs."""
    if o.window is not None:
        _, P, _ = BD.top_k_last(xl, k, softness, o.method, o.standardize, o.gated_grad, o.window)
        return P, False
    xs, _, _ = F.squash(xl, o.standardize)
    if o.method in ("softsort", "neuralsort"):
        return PW.argtop_k(xs, k, softness, o, log, idx)
    if o.method == "ot":
        return OT.argtop_k(xs, k, softness, o), False
    return NWK.argtop_k(xs, k, softness, o), False


def _argtop_k_core(x, softness, log_prob_eps, *, k, axis, o, log):
    xl, ax, dt = F.prep(x, axis)
    n = xl.shape[-1]
    if o.mode == "hard":
        P, islog = F.onehot(lax.top_k(xl, k)[1], n, xl.dtype), False
    else:
        o = F.with_window(o, n, "top_k")
        P, islog = argtop_k_last(F.guard(xl, softness), k, softness, o, log)
    return F.back_index(F.finish(P, islog, log, log_prob_eps), ax, dt)


def _top_k_core(x, softness, *, k, axis, o, bound=False):
    xl, ax, dt = F.prep(x, axis)
    ti = lax.top_k(lax.stop_gradient(xl), k)[1]
    idx = F.back(ti, ax, jnp.int32)
    if o.mode == "hard":
        return F.back(lax.top_k(xl, k)[0], ax, dt), idx
    xl = F.guard(xl, softness)
    o = F.with_window(o, xl.shape[-1], "top_k")
    if bound and o.window is None:  # window="auto" took the dense rows: exact
        return F.back(jnp.zeros_like(xl[..., :k]), ax, dt), idx
    if o.window is not None:
        v, _, b = BD.top_k_last(xl, k, softness, o.method, o.standardize, o.gated_grad, o.window)
        v = b if bound else v
    elif o.method in F.DIRECT:
        v = sort_last(xl, True, softness, o)[..., :k]
    elif o.method == "softsort" and o.mode == "smooth":
        xs, _, _ = F.squash(xl, o.standardize)
        a = PW.top_k_anchors(xs, k, ti)
        v = PW.anchored_values(xs, a, xl, softness, o.gated_grad)
    else:
        p, _ = argtop_k_last(xl, k, softness, o, False, ti)
        p = p if o.gated_grad else lax.stop_gradient(p)
        v = jnp.einsum("...kn,...n->...k", p, xl)
    return F.back(v, ax, dt), idx


_argtop_k_jit = jax.jit(_argtop_k_core, static_argnames=("k", "axis", "o", "log"))
_top_k_jit = jax.jit(_top_k_core, static_argnames=("k", "axis", "o", "bound"))


def _check_k(x, k, axis):
    k = V.python_int(k, name="k", minimum=1)
    n = jnp.shape(x)[axis]
    if k > n:
        raise ValueError(f"`k` must satisfy 0 < k <= {n}, got k={k}.")
    return k


def argtop_k(
    x: ArrayLike,
    k: int,
    axis: int = -1,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    standardize: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    window: int | str | None = None,
    ot_kwargs: dict | None = None,
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft indices of the ``k`` largest entries, shape ``(..., k, ..., [n])``.

    ``network`` computes the k rows matrix-free (k transposed sweeps); ``window`` gives
    the banded SoftSort/NeuralSort rows (see :func:`sort`).

    ``x``, ``k`` (static Python int), ``axis``: as ``lax.top_k`` along ``axis``;
    ``window``: banded rows, as in :func:`sort`; the other arguments as in :func:`argsort`.
    """
    return _argtop_k(**locals())


def _argtop_k(x, k, axis=-1, *, return_log_probs=False, log_prob_eps=None, **opts):
    return_log_probs = F.check_lp(return_log_probs, log_prob_eps)
    x, o = F.front(x, V.python_int(axis, name="axis"), F.INDEX_METHODS, opts)
    k, s = _check_k(x, k, axis), opts.get("softness", 0.1)
    return _argtop_k_jit(x, s, log_prob_eps, k=k, axis=axis, o=o, log=return_log_probs)


def _top_k(x, k, axis=-1, *, bound=False, **opts):
    x, o = F.front(x, V.python_int(axis, name="axis"), F.VALUE_METHODS, opts)
    k, s = _check_k(x, k, axis), opts.get("softness", 0.1)
    return _top_k_jit(x, s, k=k, axis=axis, o=o, bound=bound)


def top_k(
    x: ArrayLike,
    k: int,
    axis: int = -1,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    standardize: bool = True,
    gated_grad: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    solver: str = "hybrid",
    window: int | str | None = None,
    ot_kwargs: dict | None = None,
) -> tuple[Array, Int[Array, "..."]]:
    """Soft ``lax.top_k`` along ``axis``: ``(values, indices)`` for every method and mode.

    ``values`` ``(..., k, ...)`` are the soft top-k values: the first ``k`` of the
    descending soft sort (``pav``, ``network``, ``smooth_sort``) or their expectation
    under the soft top-k index (index methods; ``gated_grad=False`` stops the gradient
    through it). ``indices`` (int32, same shape) are always the *hard* indices of the
    ``k`` largest entries, as ``lax.top_k`` returns them (no gradient). The soft index
    itself is :func:`argtop_k`'s result. Other arguments as in :func:`sort`.
    """
    return _top_k(**locals())
