"""Shared front of the axiswise soft operators: options, validation, layout helpers.

Every public axiswise function validates its static choices here, packs them into one
hashable :class:`Opts` (a static argument of its module-level ``jax.jit`` core) and
moves the working axis last with :func:`prep`; the backends (``_axis_pairwise`` for
SoftSort/NeuralSort, ``_axis_ot``, ``_axis_network``, ``_axis_pav``) only see the last
axis.
"""

import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxkit import _validate as V
from jaxkit._typing import accumulation_dtype
from jaxkit.soft import _network as NW
from jaxkit.soft import _pav
from jaxkit.soft._common import (
    MODES,
    as_float,
    check_softness,
    flat_axis,
    guard_softness,
    scal,
    standardize_and_squash,
    tied_check,
)
from jaxkit.soft._elementwise import SIGMOID_MODES
from jaxkit.soft._simplex import proj_simplex

ALIASES = {"fast_soft_sort": "pav", "sorting_network": "network"}
INDEX_METHODS = ("softsort", "neuralsort", "ot", "network")
VALUE_METHODS = ("pav", *INDEX_METHODS, "smooth_sort")
DIRECT = ("pav", "network", "smooth_sort")  # value methods that sort without a soft index
QMETHODS = ("linear", "lower", "higher", "nearest", "midpoint")
ABS_MODES = ("hard", "soft")
CHUNK = 128
# softjax's ``ot_kwargs`` keys (Sinkhorn for mode "smooth", the p-norm solver otherwise)
OT_KEYS = ("sinkhorn_tol", "sinkhorn_max_iter", "lbfgs_tol", "lbfgs_max_iter")


class Opts(NamedTuple):
    """Static choices of one axiswise call (hashable: a static ``jax.jit`` argument)."""

    method: str
    mode: str
    standardize: bool = True
    gated_grad: bool = True
    abs_mode: str = "soft"
    network: str = "bitonic"
    solver: str = "hybrid"
    window: int | str | None = None
    ot: tuple = ()


# window="auto": the band half-width per method, used only where the band pays
AUTO_WINDOW = {"softsort": 48, "neuralsort": 16}
BAND_PAYS = 4  # neuralsort sort / rank band when n > BAND_PAYS * (2w + 1)


def band_window(o: "Opts", n: int, op: str) -> int | None:
    """Static half-width of the band for one call (``None``: the dense rows).

    An explicit ``window=w`` is kept. ``window="auto"`` bands only where it pays:
    NeuralSort ``sort`` / ``rank`` (dense rows cost O(n^2), the band O(n log n + n w))
    once ``n > 4 (2w + 1)``. SoftSort's dense smooth rows are already an exact
    O(n log n) scan for sort / rank and ``k`` (or 2) rows of O(n) for top-k / quantile,
    and NeuralSort's top-k / quantile rows are O(n log n + k n): the band (a full sort
    plus O(n w)) never beats them, so ``"auto"`` takes the dense rows there.
    """
    if o.window != "auto":
        return o.window
    w = AUTO_WINDOW[o.method]
    if o.method == "neuralsort" and op in ("sort", "rank") and n > BAND_PAYS * (2 * w + 1):
        return w
    return None


def with_window(o: "Opts", n: int, op: str) -> "Opts":
    """``o`` with ``window="auto"`` resolved for row length ``n`` and operator ``op``."""
    return o if o.window != "auto" else o._replace(window=band_window(o, n, op))


def ot_options(ot_kwargs: Any) -> tuple:
    """Softjax's ``ot_kwargs`` dict -> a sorted tuple of (key, value) pairs (static)."""
    if ot_kwargs is None:
        return ()
    if not isinstance(ot_kwargs, dict):
        raise TypeError(f"`ot_kwargs` must be a dict or None, got {type(ot_kwargs).__name__}.")
    out = []
    for k, v in sorted(ot_kwargs.items()):
        if k not in OT_KEYS:
            raise ValueError(f"`ot_kwargs` key {k!r} is not one of {OT_KEYS}.")
        if k.endswith("max_iter"):
            v = V.python_int(v, name=f"ot_kwargs[{k!r}]", minimum=1)
        else:
            V.real(v, name=f"ot_kwargs[{k!r}]")
            v = float(v)
            if not v > 0:
                raise ValueError(f"`ot_kwargs[{k!r}]` must be > 0, got {v!r}.")
        out.append((k, v))
    return tuple(out)


def options(
    allowed: tuple[str, ...],
    *,
    method: str,
    mode: str = "smooth",
    softness: Any = 0.1,
    standardize: bool = True,
    gated_grad: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    solver: str = "hybrid",
    window: Any = None,
    ot_kwargs: Any = None,
) -> Opts:
    """Validate the static choices (and a concrete ``softness``) of one call."""
    method = ALIASES.get(method, method)
    V.one_of(allowed + tuple(k for k, v in ALIASES.items() if v in allowed), method=method)
    modes = MODES
    if method == "network":
        modes = MODES + tuple(m for m in SIGMOID_MODES if m not in MODES)
    V.one_of(modes, mode=mode)
    V.one_of(NW.KINDS, network=network)
    if abs_mode is not None:
        V.one_of(ABS_MODES, abs_mode=abs_mode)
    V.one_of(_pav.SOLVERS, solver=solver)
    standardize = V.flag(standardize, name="standardize")  # Python bools: Opts is static
    gated_grad = V.flag(gated_grad, name="gated_grad")
    check_softness(softness)
    if method == "smooth_sort" and mode not in ("smooth", "hard"):
        raise ValueError(f"`method='smooth_sort'` supports mode 'smooth' only; got mode={mode!r}.")
    if isinstance(window, str):
        if window != "auto":
            raise ValueError(f"`window` must be None, 'auto' or an int >= 0; got {window!r}.")
    elif window is not None:
        window = V.python_int(window, name="window", minimum=0)
    if window is not None:
        if method not in ("softsort", "neuralsort"):
            raise ValueError(
                f"`window` needs `method` in ('softsort', 'neuralsort'); got method={method!r}."
            )
        if mode not in ("smooth", "hard"):
            raise NotImplementedError(f"`window` supports mode 'smooth' only; got mode={mode!r}.")
        if abs_mode == "soft":
            raise ValueError(
                "`window` needs `abs_mode='hard'` (the monotone decay that certifies "
                "the tail holds for the exact |.|); got abs_mode='soft'."
            )
        abs_mode = "hard"
    # default: softjax's soft |.| (exact |.| on the banded path)
    abs_mode = "soft" if abs_mode is None else abs_mode
    return Opts(
        method,
        mode,
        standardize,
        gated_grad,
        abs_mode,
        network,
        solver,
        window,
        ot_options(ot_kwargs),
    )


def check_lp(return_log_probs: Any, log_prob_eps: Any) -> bool:
    """Check the log-prob options; ``return_log_probs`` as a Python bool (a static argument)."""
    return_log_probs = V.flag(return_log_probs, name="return_log_probs")
    if log_prob_eps is not None:
        V.real(log_prob_eps, name="log_prob_eps")
        V.finite_scalar(log_prob_eps=log_prob_eps)
        V.in_interval(low=0, high=1, closed="neither", log_prob_eps=log_prob_eps)
    return return_log_probs


def check_axis(axis: Any, x: Any) -> None:
    """``axis`` must be None or a Python int in range (checked before the jitted core)."""
    if axis is None:
        return
    V.axis(V.python_int(axis, name="axis"), jnp.ndim(x))


def check_q(q: Any, name: str = "q") -> jax.Array:
    """``q``: real scalar or 1-D in [0, 1]; a concrete value is checked at once."""
    V.real(q, name=name)
    q = jnp.asarray(q)
    if q.ndim > 1:
        raise TypeError(f"`{name}` must be a scalar or 1-D, got shape {q.shape}.")
    V.in_interval(low=0, high=1, **{name: q})
    return q


_nonfinite = jax.jit(lambda x: ~jnp.all(jnp.isfinite(x)))  # one dispatch when eager


def finite_input(x: Any, name: str = "x") -> jax.Array:
    """``x`` as a float array; NaN/inf raise (``ValueError`` eagerly, error_if traced).

    Traced, the check rides on a scalar zero subtracted from ``x`` (:func:`tied_check`).
    """
    x = as_float(x, name=name)
    bad, msg = _nonfinite(x), f"`{name}` must be finite (no NaN or inf)."
    if not isinstance(bad, jax.core.Tracer):
        return V.error_if(x, bad, msg)  # concrete: raises now or returns x
    return tied_check(x, lambda z: V.error_if(z, bad, msg))


def prep(x, axis):
    """Move ``axis`` last in the compute dtype; returns (x_last, axis, original dtype)."""
    x = as_float(x, name="x")
    dt = x.dtype
    x, ax = flat_axis(x, axis)
    return jnp.moveaxis(x, ax, -1).astype(accumulation_dtype(dt)), ax, dt


guard = guard_softness


def back(v, ax, dt):
    return jnp.moveaxis(v, -1, ax).astype(dt)


def back_index(p, ax, dt):
    return jnp.moveaxis(p, -2, ax).astype(dt)


def onehot(idx, n, dtype):
    return jax.nn.one_hot(idx, n, dtype=dtype, axis=-1)


def simplex(s, softness, mode, log):
    """Soft index rows ``(p, False)``, or ``(log p, True)`` for smooth-mode log-probabilities.

    ``p = proj_simplex(s)``; the smooth log is ``log_softmax(s / softness)`` (exact in log
    space, never ``log(0)``).
    """
    if log and mode == "smooth":
        return jax.nn.log_softmax(s / scal(softness, s.dtype), axis=-1), True
    return proj_simplex(s, softness, mode), False


def finish(v, islog, log, eps):
    """Soft index ``v`` (``islog``: already ``log p``) -> ``p`` or ``log p`` (last axis).

    Without ``eps`` the log is exact (``-inf`` where ``p == 0``); with ``eps`` p is floored
    at ``eps`` and renormalised *before* the log, so values and gradients stay finite.
    """
    if not log:
        return jnp.exp(v) if islog else v
    if eps is None:
        return v if islog else jnp.log(jnp.maximum(v, 0))
    e = scal(eps, v.dtype)
    if islog:  # log(max(p, e) / sum) computed in log space
        lv = jnp.maximum(v, jnp.log(e))
        return lv - jax.nn.logsumexp(lv, axis=-1, keepdims=True)
    pf = jnp.maximum(v, e)
    return jnp.log(pf / jnp.sum(pf, axis=-1, keepdims=True))


def map_chunks(f, rows):
    """``f(rows_chunk) -> (..., c)``: map over chunks of the leading axis with remat."""
    n = rows.shape[0]
    if n <= CHUNK:
        return f(rows)
    k = -(-n // CHUNK)
    pad = k * CHUNK - n
    r = jnp.concatenate([rows, jnp.broadcast_to(rows[:1], (pad, *rows.shape[1:]))]) if pad else rows
    out = lax.map(jax.checkpoint(f), r.reshape(k, CHUNK, *rows.shape[1:]))  # (k, ..., c)
    out = jnp.moveaxis(out, 0, -2)
    out = out.reshape(*out.shape[:-2], k * CHUNK)
    return out[..., :n]


def qparams(q, n, qm):
    """Row ``k``, weight ``a`` of row ``k + 1``, and whether two rows mix (``jnp.quantile``).

    ``qm`` is ``jnp.quantile``'s ``method``.
    """
    p = q * (n - 1)
    if qm == "linear":
        k = jnp.floor(p).astype(jnp.int32)
        return k, p - k.astype(p.dtype), True
    if qm == "lower":
        return jnp.clip(jnp.floor(p).astype(jnp.int32), 0, n - 1), jnp.zeros_like(p), False
    if qm == "higher":
        return jnp.clip(jnp.ceil(p).astype(jnp.int32), 0, n - 1), jnp.zeros_like(p), False
    if qm == "nearest":
        k = jnp.where(p - jnp.floor(p) <= 0.5, jnp.floor(p), jnp.ceil(p)).astype(jnp.int32)
        return k, jnp.zeros_like(p), False
    k = jnp.floor(p).astype(jnp.int32)
    a = jnp.where(jnp.isclose(p, jnp.round(p)), 0.0, 0.5).astype(p.dtype)
    return k, a, True


def squash(xl, standardize):
    """``(sigmoid(zscore(xl)), mean, std)`` if ``standardize`` else ``(xl, None, None)``."""
    if standardize:
        return standardize_and_squash(xl, axis=-1)
    return xl, None, None


def front(x: Any, axis: Any, allowed: tuple[str, ...], opts: dict) -> tuple[jax.Array, Opts]:
    """Validate one call's options and ``axis``; ``x`` as a finite float array."""
    o = options(allowed, **opts)
    x = finite_input(x)
    check_axis(axis, x)
    return x, o


def mirror(fn, impl, name, doc, *, rename=None, drop=(), **fixed):
    """A public function with ``fn``'s signature that calls ``impl``.

    The signature is ``fn``'s with ``rename``d and ``drop``ped parameters; a call binds its
    arguments with their defaults and returns ``impl(**arguments, **fixed)``.
    """
    rename = rename or {}
    params = [
        p.replace(name=rename.get(p.name, p.name))
        for p in inspect.signature(fn).parameters.values()
        if p.name not in drop
    ]
    sig = inspect.signature(fn).replace(parameters=params)
    back_names = {v: k for k, v in rename.items()}

    def wrapped(*args, **kwargs):
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        return impl(**{back_names.get(k, k): v for k, v in b.arguments.items()}, **fixed)

    wrapped.__signature__ = sig
    wrapped.__name__ = wrapped.__qualname__ = name
    wrapped.__doc__ = doc
    wrapped.__module__ = fn.__module__
    return wrapped
