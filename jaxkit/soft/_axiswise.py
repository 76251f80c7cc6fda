"""Soft axiswise operators: argmax/max, argsort/sort, rank, top-k, quantile family.

Methods: ``"pav"`` (permutahedron projection, = softjax ``fast_soft_sort``; values
only), ``"softsort"``, ``"neuralsort"``, ``"ot"`` (entropic Sinkhorn), ``"network"``
(= softjax ``sorting_network``; ``network="bitonic"`` or ``"odd_even"``). softjax's
names ``fast_soft_sort`` and ``sorting_network`` are accepted as aliases. Defaults
follow ``jax.numpy``: ``axis=-1`` for sort/argsort/rank/top_k, ``axis=None`` for
argmax/max/quantile, ascending 1-based ranks.

``sort`` and ``rank`` with ``method="softsort"`` in mode ``"smooth"`` never form the
n x n matrix: the SoftSort kernel ``exp(-|a_k - x_j| / softness)`` over the sorted
row splits into two decaying linear recurrences (anchors below / above), evaluated
exactly by a prefix scan in O(n log n) time and memory (same values as the dense
definition to round-off; see ``_laplace_sums``). ``argsort`` returns the matrix itself
and the sparse modes need every row's threshold, so those stay O(n^2) (chunked).

References:
  Blondel et al., Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
  Prillo & Eisenschlos, SoftSort <https://arxiv.org/abs/2006.16038>, 2020.
  Grover et al., Stochastic optimization of sorting networks via continuous
  relaxations (NeuralSort) <https://arxiv.org/abs/1903.08850>, 2019.
  Cuturi, Teboul & Vert, Differentiable ranks and sorting using optimal transport
  <https://arxiv.org/abs/1905.11885>, 2019.
  Petersen et al., Differentiable sorting networks <https://arxiv.org/abs/2105.04019>, 2021.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import builtins

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike
from jaxkit.soft import _banded as BD
from jaxkit.soft import _network as NW
from jaxkit.soft import _pav
from jaxkit.soft import _smooth_sort as SM
from jaxkit.soft import _sorting as SO
from jaxkit.soft._common import (
    MODES,
    as_float,
    check_softness,
    compute_dtype,
    scal,
    standardize_and_squash,
    unsquash,
)
from jaxkit.soft._elementwise import SIGMOID_MODES
from jaxkit.soft._elementwise import abs as soft_abs
from jaxkit.soft._select import take_along_axis
from jaxkit.soft._simplex import proj_simplex
from jaxkit.soft._sorting import sort_values
from jaxkit.soft._transport_pnorm import transport_any as transport

ALIASES = {"fast_soft_sort": "pav", "sorting_network": "network"}
INDEX_METHODS = ("softsort", "neuralsort", "ot", "network")
VALUE_METHODS = ("pav", *INDEX_METHODS, "smooth_sort")
DIRECT = ("pav", "network", "smooth_sort")  # value methods that sort without a soft index
QMETHODS = ("linear", "lower", "higher", "nearest", "midpoint")
CHUNK = 128
PAV_REG = {"smooth": "kl", "c0": "l2", "c1": "p3", "c2": "p4"}  # c1: p=3/2, c2: p=4/3


# ----------------------------------------------------------------------------- helpers


def _method(method, allowed):
    method = ALIASES.get(method, method)
    V.one_of(allowed + tuple(k for k, v in ALIASES.items() if v in allowed), method=method)
    return method


def _check_common(mode, method, softness, network, abs_mode, impl="hybrid"):
    modes = (
        MODES + tuple(m for m in SIGMOID_MODES if m not in MODES) if method == "network" else MODES
    )
    V.one_of(modes, mode=mode)
    V.one_of(NW.KINDS, network=network)
    V.one_of(("hard", "soft"), abs_mode=abs_mode)
    V.one_of(_pav.IMPLS, impl=impl)
    check_softness(softness)
    if method == "smooth_sort" and mode not in ("smooth", "hard"):
        raise ValueError(f"`method='smooth_sort'` supports mode 'smooth' only; got mode={mode!r}.")


def _prep(x, axis, name="x"):
    """Validate and move ``axis`` last; returns (x_last (compute dtype), axis, orig dtype)."""
    x = as_float(x)
    dt = x.dtype
    if axis is None:
        x = jnp.ravel(x)
        axis = 0
    ax = V.axis(axis, x.ndim)
    x = V.all_finite(x, name=name)
    return jnp.moveaxis(x, ax, -1).astype(compute_dtype(dt)), ax, dt


def _guard(x, softness):
    if isinstance(softness, jax.core.Tracer):
        x = V.error_if(x, ~(jnp.asarray(softness) > 0), "`softness` must be > 0.")
    return x


def _squash(xl, standardize):
    if standardize:
        return standardize_and_squash(xl, axis=-1)
    return xl, None, None


def _neuralsort_a(xs, mode, softness, abs_mode):
    """A_j = sum_k |x_j - x_k| (exact O(n log n), or softjax's soft abs O(n^2))."""
    n = xs.shape[-1]
    if abs_mode == "soft":
        return jnp.sum(soft_abs(xs[..., :, None] - xs[..., None, :], softness, mode), axis=-2)
    perm = SO.stable_argsort(xs)
    a = jnp.take_along_axis(xs, perm, axis=-1)
    S = jnp.cumsum(a, axis=-1)
    m = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=xs.dtype), xs.shape)
    Sprev = S - a
    A_sorted = (2 * m - n - 1) * a + S[..., -1:] - S - Sprev
    return jnp.take_along_axis(A_sorted, SO.inverse_permutation(perm), axis=-1)


def _laplace_sums(a, v, softness):
    """``sum_i exp(-|a_k - a_i| / softness) v_i / sum_i exp(-|a_k - a_i| / softness)``.

    For rows ``a`` sorted ascending (``(..., n)``) and values ``v`` (``(..., n)``), in
    O(n log n) without the n x n kernel: the sum splits into the anchors below and above
    ``a_k``, each a linear recurrence ``L_k = v_k + exp(-(a_k - a_{k-1})/softness)
    L_{k-1}`` with decay factors in ``(0, 1]`` (so no overflow at any softness),
    evaluated by a parallel prefix scan. This is exactly the smooth SoftSort row
    ``softmax_i(-|a_k - a_i| / softness)`` applied to ``v``.
    """
    t = scal(softness, a.dtype)
    d = jnp.exp(-(a[..., 1:] - a[..., :-1]) / t)[..., None]  # (..., n-1, 1)
    zero = jnp.zeros_like(d[..., :1, :])
    vals = jnp.stack([v, jnp.ones_like(v)], -1)  # numerator and denominator together
    ax = vals.ndim - 2

    def comb(x, y):
        return x[0] * y[0], x[1] * y[0] + y[1]

    lo = lax.associative_scan(comb, (jnp.concatenate([zero, d], -2), vals), axis=ax)[1]
    rd = jnp.flip(jnp.concatenate([d, zero], -2), -2)
    hi = jnp.flip(lax.associative_scan(comb, (rd, jnp.flip(vals, -2)), axis=ax)[1], -2)
    tot = lo + hi - vals
    return tot[..., 0] / tot[..., 1]


def _map_chunks(f, rows):
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


def _row_scores(xs, rows_param, kind, A=None):
    """Scores ``(..., r, [n])`` whose simplex projection gives the soft permutation rows."""
    if kind == "softsort":  # rows_param: anchors (..., r)
        return -jnp.abs(rows_param[..., :, None] - xs[..., None, :])
    # neuralsort, rows_param: coefficients (r,)
    c = rows_param.reshape((1,) * (xs.ndim - 1) + (-1, 1))
    return -(c * xs[..., None, :] + A[..., None, :])


def _rows(xs, rows_param, kind, softness, mode, A=None):
    """Soft permutation rows ``(..., r, [n])`` for the given per-row parameters."""
    return proj_simplex(_row_scores(xs, rows_param, kind, A), softness, mode)


# ----------------------------------------------------------------------------- log-probabilities


def _check_lp(return_log_probs, log_prob_eps):
    if not isinstance(return_log_probs, bool):
        raise TypeError(
            f"`return_log_probs` must be a static Python bool, got {return_log_probs!r}."
        )
    if log_prob_eps is not None:
        V.finite_scalar(log_prob_eps=log_prob_eps)
        V.in_interval(low=0, high=1, closed="neither", log_prob_eps=log_prob_eps)


def _simplex(s, softness, mode, log):
    """``(proj_simplex(s), False)``, or ``(log_softmax(s / softness), True)`` when a
    smooth-mode log-probability is requested (exact in log space, never ``log(0)``)."""
    if log and mode == "smooth":
        return jax.nn.log_softmax(s / scal(softness, s.dtype), axis=-1), True
    return proj_simplex(s, softness, mode), False


def _finish(v, islog, log, eps):
    """Soft index ``v`` (``islog``: already ``log p``) -> ``p`` or ``log p`` (last axis).

    Without ``eps`` the log is exact (``-inf`` where ``p == 0``); with ``eps`` p is floored
    at ``eps`` and renormalised *before* the log, so values and gradients stay finite.
    """
    if not log:
        return v
    if eps is None:
        return v if islog else jnp.log(jnp.maximum(v, 0))
    e = scal(eps, v.dtype)
    if islog:  # log(max(p, e) / sum) computed in log space
        lv = jnp.maximum(v, jnp.log(e))
        return lv - jax.nn.logsumexp(lv, axis=-1, keepdims=True)
    pf = jnp.maximum(v, e)
    return jnp.log(pf / jnp.sum(pf, axis=-1, keepdims=True))


def _ns_coef(n, dtype, descending, idx=None):
    i = jnp.arange(1, n + 1) if idx is None else idx
    if descending and idx is None:
        i = i[::-1]
    return (n + 1 - 2 * i).astype(dtype)


def _onehot(idx, n, dtype):
    return jax.nn.one_hot(idx, n, dtype=dtype, axis=-1)


def _back(v, ax, dt):
    return jnp.moveaxis(v, -1, ax).astype(dt)


def _back_index(p, ax, dt):
    return jnp.moveaxis(p, -2, ax).astype(dt)


def _net_p(xs, softness, mode, network, standardize, n, descending):
    _, ms, partner = NW.forward(xs, softness, mode, network, standardize)
    npad = ms.shape[-1] if ms.ndim else n
    P = NW.dense_p(ms, partner, npad, xs.dtype)[..., :n, :n]
    P = P / jnp.clip(jnp.sum(P, -1, keepdims=True), min=1e-10)
    return jnp.flip(P, -2) if descending else P


# ----------------------------------------------------------------------------- argsort / sort


def argsort(
    x: ArrayLike,
    axis: int | None = -1,
    *,
    descending: bool = False,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    standardize: bool = True,
    abs_mode: str = "hard",
    network: str = "bitonic",
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft argsort: a soft permutation ``(..., n, ..., [n])``; row i is the i-th smallest.

    Args:
      x: input array.
      axis: axis to sort (``None`` flattens).
      descending: sort largest first.
      softness: temperature (> 0), traced.
      mode: ``"hard"`` (one-hot of ``jnp.argsort``), ``"smooth"``, ``"c0"``, ``"c1"``, ``"c2"``.
      method: ``"neuralsort"``, ``"softsort"``, ``"ot"`` or ``"network"``.
      standardize: squash ``x`` through ``sigmoid(zscore(x))`` first (softjax default).
      abs_mode: NeuralSort row sums with the exact ``|.|`` (``"hard"``, original
        NeuralSort, O(n log n)) or softjax's soft abs (``"soft"``, parity).
      network: ``"bitonic"`` or ``"odd_even"`` for ``method="network"``.
      return_log_probs: static bool; return ``log p`` instead of the soft index ``p``.
        Sparse modes (``c0``/``c1``/``c2``, one-hot ``hard``) give exact ``-inf`` where
        ``p == 0`` (their gradient there is not finite); ``mode="smooth"`` with
        ``softsort``/``neuralsort`` uses ``log_softmax`` directly (finite even for huge
        score gaps where ``log(softmax)`` underflows to ``-inf``).
      log_prob_eps: with ``return_log_probs``: floor ``p`` at this value in (0, 1),
        renormalise along the index axis, then take the log (finite values and
        gradients). Ignored without ``return_log_probs``.

    Returns:
      Soft index (or its log), dtype of ``x``.

    References:
      Grover et al. 2019; Prillo & Eisenschlos 2020; Cuturi et al. 2019; Petersen et al. 2021.
    """
    method = _method(method, INDEX_METHODS)
    _check_common(mode, method, softness, network, abs_mode)
    _check_lp(return_log_probs, log_prob_eps)
    lp = (return_log_probs, log_prob_eps)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if mode == "hard" or n == 0:
        idx = jnp.argsort(lax.stop_gradient(xl), axis=-1, descending=descending, stable=True)
        return _back_index(_finish(_onehot(idx, n, xl.dtype), False, *lp), ax, dt)
    xl = _guard(xl, softness)
    xs, _, _ = _squash(xl, standardize)
    islog = False
    if method == "softsort":
        anchors = sort_values(xs, descending)
        P, islog = _simplex(_row_scores(xs, anchors, "softsort"), softness, mode, return_log_probs)
    elif method == "neuralsort":
        A = _neuralsort_a(xs, mode, softness, abs_mode)
        P, islog = _simplex(
            _row_scores(xs, _ns_coef(n, xs.dtype, descending), "neuralsort", A),
            softness,
            mode,
            return_log_probs,
        )
    elif method == "ot":
        anchors = jnp.linspace(0, n, n, dtype=xs.dtype) / n
        if descending:
            anchors = anchors[::-1]
        mu = jnp.ones((n,), xs.dtype) / n
        P = jnp.swapaxes(transport(xs, anchors, mu, mu, softness, mode), -1, -2)
    else:
        P = _net_p(xs, softness, mode, network, standardize, n, descending)
    return _back_index(_finish(P, islog, *lp), ax, dt)


def sort(
    x: ArrayLike,
    axis: int | None = -1,
    *,
    descending: bool = False,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "pav",
    standardize: bool = True,
    gated_grad: bool = True,
    abs_mode: str = "hard",
    network: str = "bitonic",
    impl: str = "hybrid",
    window: int | None = None,
    _bound: bool = False,
) -> Array:
    """Soft sort along ``axis`` (ascending unless ``descending``).

    ``method="pav"`` (default) projects onto the permutahedron (O(n log n), monotone
    output, exact hard sort below a data-dependent softness); ``impl`` picks the PAV
    algorithm (``"hybrid"``, ``"rounds"``, ``"sequential"``). Index methods return the
    expectation of ``x`` under the soft argsort (``gated_grad=False`` stops the gradient
    through the soft index). Other arguments as in :func:`argsort`.

    ``window=w`` (static int, ``method`` ``"softsort"``/``"neuralsort"``, mode
    ``"smooth"``) truncates every soft-permutation row to the ``2w + 1`` nearest sorted
    positions: O(n log n + n w) time and memory instead of O(n^2). The difference to
    the dense result (``window=None``) is certified at run time by
    :func:`banded_error_bound` (same for :func:`rank`, :func:`top_k`, :func:`quantile`).

    References:
      Blondel et al., Fast differentiable sorting and ranking
      <https://arxiv.org/abs/2002.08871>, 2020.
    """
    method = _method(method, VALUE_METHODS)
    _check_common(mode, method, softness, network, abs_mode, impl)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if mode == "hard" or n == 0:
        return _back(sort_values(xl, descending), ax, dt)
    xl = _guard(xl, softness)
    if window is not None:  # banded softsort / neuralsort (jaxkit.soft._banded)
        BD.check(window, method, mode, abs_mode)
        out = BD.sort_last(xl, descending, softness, method, standardize, gated_grad, window)
        return _back(out[1] if _bound else out[0], ax, dt)
    out = _sort_last(
        xl, descending, softness, mode, method, standardize, gated_grad, abs_mode, network, impl
    )
    return _back(out, ax, dt)


def _sort_last(
    xl, descending, softness, mode, method, standardize, gated_grad, abs_mode, network, impl
):
    n = xl.shape[-1]
    if method == "smooth_sort":  # no standardize (as softjax): the logit would amplify errors
        anchors = jnp.arange(n, dtype=xl.dtype) / builtins.max(n - 1, 1)
        out = SM.project(anchors / scal(softness, xl.dtype), xl, softness)
        return jnp.flip(out, -1) if descending else out
    xs, mean, std = _squash(xl, standardize)
    if method == "pav":
        anchors = jnp.arange(n, dtype=xs.dtype) / builtins.max(n - 1, 1)
        z = anchors / scal(softness, xs.dtype)
        out = _pav.project_permutahedron(z, xs, reg=PAV_REG[mode], impl=impl, z_order="asc")
        if descending:
            out = jnp.flip(out, -1)
        return unsquash(out, mean, std) if standardize else out
    if method == "network":
        vals, _, _ = NW.forward(xs, softness, mode, network, standardize)
        out = vals[..., :n]
        if descending:
            out = jnp.flip(out, -1)
        return unsquash(out, mean, std) if standardize else out
    if method == "ot":
        P = argsort(
            xl,
            -1,
            descending=descending,
            softness=softness,
            mode=mode,
            method="ot",
            standardize=standardize,
        )
        if not gated_grad:
            P = lax.stop_gradient(P)
        return jnp.einsum("...kn,...n->...k", P, xl)
    if method == "softsort" and mode == "smooth":
        # exact O(n log n) smooth SoftSort: the kernel exp(-|a_k - x_j|/t) over sorted x
        perm = SO.stable_argsort(xs)
        a = jnp.take_along_axis(xs, perm, axis=-1)
        a = a if gated_grad else lax.stop_gradient(a)
        out = _laplace_sums(a, jnp.take_along_axis(xl, perm, axis=-1), softness)
        return jnp.flip(out, -1) if descending else out
    # fused chunked softsort / neuralsort: never store the n x n matrix for backward
    if method == "softsort":
        anchors = sort_values(xs, descending)
        rows = jnp.moveaxis(anchors, -1, 0)

        def f(ch):
            P = _rows(xs, jnp.moveaxis(ch, 0, -1), "softsort", softness, mode)
            P = P if gated_grad else lax.stop_gradient(P)
            return jnp.einsum("...kn,...n->...k", P, xl)
    else:
        A = _neuralsort_a(xs, mode, softness, abs_mode)
        rows = _ns_coef(n, xs.dtype, descending)

        def f(ch):
            P = _rows(xs, ch, "neuralsort", softness, mode, A)
            P = P if gated_grad else lax.stop_gradient(P)
            return jnp.einsum("...kn,...n->...k", P, xl)

    return _map_chunks(f, rows)


# ----------------------------------------------------------------------------- rank


def rank(
    x: ArrayLike,
    axis: int | None = -1,
    *,
    descending: bool = False,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "pav",
    standardize: bool = True,
    abs_mode: str = "hard",
    network: str = "bitonic",
    impl: str = "hybrid",
    window: int | None = None,
    _bound: bool = False,
) -> Array:
    """Soft 1-based ranks along ``axis`` (ascending: the smallest gets 1).

    ``method="pav"``: permutahedron projection of ``x / softness`` onto ``P(1..n)``;
    ``"network"``: matrix-free transposed sweeps (O(n log^2 n) memory); pairwise
    methods use fused chunked reductions. ``descending=True`` ranks the largest 1
    (softjax's default). ``window=w`` selects the banded SoftSort/NeuralSort path (see
    :func:`sort` and :func:`banded_error_bound`).

    References:
      Blondel et al., Fast differentiable sorting and ranking
      <https://arxiv.org/abs/2002.08871>, 2020.
    """
    method = _method(method, VALUE_METHODS)
    _check_common(mode, method, softness, network, abs_mode, impl)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if mode == "hard" or n == 0:
        idx = jnp.argsort(lax.stop_gradient(xl), axis=-1, descending=descending, stable=True)
        r = jnp.argsort(idx, axis=-1) + 1
        return _back(r.astype(xl.dtype), ax, dt)
    xl = _guard(xl, softness)
    if window is not None:  # banded softsort / neuralsort (jaxkit.soft._banded)
        BD.check(window, method, mode, abs_mode)
        out = BD.rank_last(xl, descending, softness, method, standardize, window)
        return _back(out[1] if _bound else out[0], ax, dt)
    if method == "smooth_sort":  # no standardize, as softjax
        scale = builtins.max(n - 1, 1)
        w = jnp.arange(1, n + 1, dtype=xl.dtype) / scale
        z = (-xl if descending else xl) / scal(softness, xl.dtype)
        return _back(SM.project(z, w, softness) * scale, ax, dt)
    xs, _, _ = _squash(xl, standardize)
    nums = jnp.arange(1, n + 1, dtype=xs.dtype)
    if method == "pav":
        scale = builtins.max(n - 1, 1)
        w = nums / scale
        z = (-xs if descending else xs) / scal(softness, xs.dtype)
        r = _pav.project_permutahedron(z, w, reg=PAV_REG[mode], impl=impl, w_order="asc") * scale
    elif method == "softsort" and mode == "smooth":
        # exact O(n log n) smooth SoftSort ranks: x_j is itself an anchor (a = sorted xs)
        perm = SO.stable_argsort(xs)
        a = jnp.take_along_axis(xs, perm, axis=-1)
        r = _laplace_sums(a, jnp.broadcast_to(nums, a.shape), softness)
        r = jnp.take_along_axis(r, SO.inverse_permutation(perm), axis=-1)
        if descending:
            r = (n + 1) - r
    elif method == "softsort":
        anchors = sort_values(xs, descending)

        def f(ch):  # ch: (c, ...) elements
            xc = jnp.moveaxis(ch, 0, -1)
            P = proj_simplex(-jnp.abs(xc[..., :, None] - anchors[..., None, :]), softness, mode)
            return jnp.einsum("...cn,n->...c", P, nums)

        r = _map_chunks(f, jnp.moveaxis(xs, -1, 0))
    elif method == "neuralsort":
        A = _neuralsort_a(xs, mode, softness, abs_mode)
        coef = _ns_coef(n, xs.dtype, descending)
        k = -(-n // CHUNK)
        pad = k * CHUNK - n
        cpad = jnp.concatenate([coef, jnp.zeros((pad,), coef.dtype)])
        npad = jnp.concatenate([nums, jnp.zeros((pad,), nums.dtype)])
        valid = jnp.concatenate([jnp.ones((n,), xs.dtype), jnp.zeros((pad,), xs.dtype)])

        def body(acc, ch):
            c, nm, vd = ch
            if mode == "smooth":  # unnormalised exp rows, 1/Z folded into the row weights
                sc = _row_scores(xs, c, "neuralsort", A) / scal(softness, xs.dtype)
                e = jnp.exp(sc - lax.stop_gradient(jnp.max(sc, axis=-1, keepdims=True)))
                iz = 1.0 / jnp.sum(e, axis=-1)  # (..., c)
                wv = iz * jnp.broadcast_to(vd, iz.shape)
                wn = iz * jnp.broadcast_to(nm, iz.shape)
                return (
                    acc[0] + jnp.einsum("...cn,...c->...n", e, wv),
                    acc[1] + jnp.einsum("...cn,...c->...n", e, wn),
                ), None
            P = _rows(xs, c, "neuralsort", softness, mode, A)
            return (
                acc[0] + jnp.einsum("...cn,c->...n", P, vd),
                acc[1] + jnp.einsum("...cn,c->...n", P, nm),
            ), None

        zero = jnp.zeros_like(xs)
        if n <= CHUNK:  # one chunk: no padded rows, no scan, no recompute in backward
            (cs, ws), _ = body((zero, zero), (coef, nums, jnp.ones((n,), xs.dtype)))
        else:
            (cs, ws), _ = lax.scan(
                jax.checkpoint(body),
                (zero, zero),
                (cpad.reshape(k, CHUNK), npad.reshape(k, CHUNK), valid.reshape(k, CHUNK)),
            )
        r = ws / jnp.clip(cs, min=1e-10)
    elif method == "ot":
        anchors = jnp.linspace(0, n, n, dtype=xs.dtype) / n
        if descending:
            anchors = anchors[::-1]
        mu = jnp.ones((n,), xs.dtype) / n
        G = transport(xs, anchors, mu, mu, softness, mode)
        G = G / jnp.clip(jnp.sum(G, -1, keepdims=True), min=1e-10)
        r = jnp.einsum("...ij,j->...i", G, nums)
    else:  # matrix-free network: rank_j = (P~^T nums)_j / (P~^T 1)_j, P~ = diag(1/rowsum) P
        _, ms, partner = NW.forward(xs, softness, mode, network, standardize)
        npad = ms.shape[-1]
        padz = jnp.repeat(jnp.zeros_like(xs[..., :1]), npad - n, axis=-1)
        ones = jnp.concatenate([jnp.ones_like(xs), padz], -1)
        rows = NW.apply(ones, ms, partner)[..., :n]  # row sums of P[:n, :n]
        rows = jnp.clip(rows, min=1e-10)
        nm = nums[::-1] if descending else nums
        c1 = jnp.concatenate([jnp.broadcast_to(nm, xs.shape) / rows, padz], -1)
        c0 = jnp.concatenate([1.0 / rows, padz], -1)
        num = NW.apply_t(c1, ms, partner)[..., :n]
        den = NW.apply_t(c0, ms, partner)[..., :n]
        r = num / jnp.clip(den, min=1e-10)
    return _back(r, ax, dt)


# ----------------------------------------------------------------------------- argmax / max


def argmax(
    x: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    standardize: bool = True,
    abs_mode: str = "hard",
    network: str = "bitonic",
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft argmax: a distribution over positions, shape ``x.shape`` without ``axis`` + ``[n]``.

    ``softsort``: ``proj_simplex(x~)``; ``neuralsort``: ``proj_simplex((n-1)x~ - A)``;
    ``ot``: two anchors; ``network``: first row of the descending network.

    Args:
      x, axis, keepdims: as ``jnp.argmax`` (``axis=None`` flattens).
      softness, mode, method, standardize, abs_mode, network: as in :func:`argsort`.
      return_log_probs, log_prob_eps: log-probabilities, as in :func:`argsort`.

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    method = _method(method, INDEX_METHODS)
    _check_common(mode, method, softness, network, abs_mode)
    _check_lp(return_log_probs, log_prob_eps)
    nd = jnp.ndim(x)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if n == 0:
        raise ValueError("`x` must be non-empty along `axis` for argmax (as jnp.argmax).")
    islog = False
    if mode == "hard":
        p = _onehot(jnp.argmax(xl, axis=-1), n, xl.dtype)
    else:
        xl = _guard(xl, softness)
        xs, _, _ = _squash(xl, standardize)
        if method == "softsort":
            p, islog = _simplex(xs, softness, mode, return_log_probs)
        elif method == "neuralsort":
            p, islog = _simplex(
                (n - 1) * xs - _neuralsort_a(xs, mode, softness, abs_mode),
                softness,
                mode,
                return_log_probs,
            )
        elif method == "ot":
            anchors = jnp.array([0.0, 1.0], xs.dtype)
            mu = jnp.ones((n,), xs.dtype) / n
            nu = jnp.array([(n - 1) / n, 1 / n], xs.dtype)
            p = transport(xs, anchors, mu, nu, softness, mode)[..., 1]
        else:
            p = _net_p(xs, softness, mode, network, standardize, n, True)[..., 0, :]
    p = _finish(p, islog, return_log_probs, log_prob_eps)
    if keepdims:
        p = p.reshape((1,) * nd + (n,)) if axis is None else jnp.expand_dims(p, ax)
    return p.astype(dt)


def argmin(x: ArrayLike, axis: int | None = None, keepdims: bool = False, **kwargs) -> Array:
    """Soft argmin = soft argmax of ``-x`` (same keywords, incl. ``return_log_probs`` and
    ``log_prob_eps``)."""
    return argmax(-as_float(x), axis, keepdims, **kwargs)


def max(
    x: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,
    *,  # noqa: A001
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    standardize: bool = True,
    gated_grad: bool = True,
    abs_mode: str = "hard",
    network: str = "bitonic",
    impl: str = "hybrid",
) -> Array:
    """Soft max: expectation of ``x`` under :func:`argmax` (``pav``/``network``: first
    element of the descending soft sort)."""
    method = _method(method, VALUE_METHODS)
    _check_common(mode, method, softness, network, abs_mode, impl)
    x = as_float(x)
    nd = x.ndim
    if mode == "hard":
        return jnp.max(x, axis=axis, keepdims=keepdims)
    xl, ax, dt = _prep(x, axis)
    if xl.shape[-1] == 0:
        raise ValueError("`x` must be non-empty along `axis` for max (as jnp.max).")
    if method in DIRECT:
        xl = _guard(xl, softness)
        v = _sort_last(
            xl, True, softness, mode, method, standardize, gated_grad, abs_mode, network, impl
        )[..., 0]
    else:
        p = argmax(
            xl,
            -1,
            softness=softness,
            mode=mode,
            method=method,
            standardize=standardize,
            abs_mode=abs_mode,
            network=network,
        )
        p = p if gated_grad else lax.stop_gradient(p)
        v = jnp.einsum("...n,...n->...", p.astype(xl.dtype), xl)
    if keepdims:
        v = v.reshape((1,) * nd) if axis is None else jnp.expand_dims(v, ax)
    return v.astype(dt)


def min(
    x: ArrayLike,
    axis: int | None = None,
    keepdims: bool = False,  # noqa: A001
    **kwargs,
) -> Array:
    """Soft min = ``-max(-x)``."""
    return -max(-as_float(x), axis, keepdims, **kwargs)


# ----------------------------------------------------------------------------- quantiles


def _qparams(q, n, qm):
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


def _check_q(q):
    q = jnp.asarray(q)
    if q.ndim > 1:
        raise TypeError(f"`q` must be a scalar or 1-D, got shape {q.shape}.")
    V.in_interval(low=0, high=1, q=q)
    return q


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
    abs_mode: str = "hard",
    network: str = "bitonic",
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft index of the ``q``-quantile (``q`` scalar or 1-D, prepended to the output).

    ``quantile_method`` mirrors ``jnp.quantile``'s ``method``; the two-row methods mix the
    soft rows ``k`` and ``k+1`` (with ``log_softmax`` rows the mix is a weighted
    ``logsumexp``).

    Args:
      x, q, axis, keepdims, quantile_method: as ``jnp.quantile``.
      softness, mode, method, standardize, abs_mode, network: as in :func:`argsort`.
      return_log_probs, log_prob_eps: log-probabilities, as in :func:`argsort`.
    """
    method = _method(method, INDEX_METHODS)
    _check_common(mode, method, softness, network, abs_mode)
    V.one_of(QMETHODS, quantile_method=quantile_method)
    _check_lp(return_log_probs, log_prob_eps)
    q = _check_q(q)
    if q.ndim == 1:
        return jax.vmap(
            lambda qi: argquantile(
                x,
                qi,
                axis,
                keepdims,
                softness=softness,
                mode=mode,
                method=method,
                quantile_method=quantile_method,
                standardize=standardize,
                abs_mode=abs_mode,
                network=network,
                return_log_probs=return_log_probs,
                log_prob_eps=log_prob_eps,
            )
        )(q)
    nd = jnp.ndim(x)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if n == 0:
        raise ValueError("`x` must be non-empty along `axis` for a quantile.")
    q = q.astype(xl.dtype)
    k, a, two = _qparams(q, n, quantile_method)
    kp1 = jnp.minimum(k + 1, n - 1)
    islog = False
    if mode == "hard":
        idx = jnp.argsort(lax.stop_gradient(xl), axis=-1, stable=True)
        P = _onehot(jnp.stack([idx[..., k], idx[..., kp1]], -1), n, xl.dtype)
    else:
        xl = _guard(xl, softness)
        xs, _, _ = _squash(xl, standardize)
        if method == "softsort":
            srt = sort_values(xs)
            anchors = jnp.stack([srt[..., k], srt[..., kp1]], -1)
            P, islog = _simplex(
                _row_scores(xs, anchors, "softsort"), softness, mode, return_log_probs
            )
        elif method == "neuralsort":
            A = _neuralsort_a(xs, mode, softness, abs_mode)
            coef = _ns_coef(n, xs.dtype, False, jnp.stack([k + 1, k + 2]))
            P, islog = _simplex(
                _row_scores(xs, coef, "neuralsort", A), softness, mode, return_log_probs
            )
        elif method == "ot":
            mu = jnp.ones((n,), xs.dtype) / n
            if two:
                kf, k1f = k.astype(xs.dtype), kp1.astype(xs.dtype)
                nu = jnp.stack(
                    [kf / n, jnp.full_like(kf, 1 / n), (k1f - kf) / n, (n - k1f - 1) / n]
                )
                anchors = jnp.array([0.0, 1 / 3, 2 / 3, 1.0], xs.dtype)
                G = transport(xs, anchors, mu, nu.astype(xs.dtype), softness, mode)
                P = jnp.swapaxes(G[..., 1:3], -1, -2)
            else:
                kf = k.astype(xs.dtype)
                nu = jnp.stack([kf / n, jnp.full_like(kf, 1 / n), (n - kf - 1) / n])
                anchors = jnp.array([0.0, 0.5, 1.0], xs.dtype)
                G = transport(xs, anchors, mu, nu, softness, mode)
                P = jnp.swapaxes(G[..., 1:2], -1, -2)
                P = jnp.concatenate([P, P], -2)
        else:
            Pf = _net_p(xs, softness, mode, network, standardize, n, False)
            P = jnp.stack([Pf[..., k, :], Pf[..., kp1, :]], -2)
    if not two:
        p = P[..., 0, :]
    elif islog:  # log((1 - a) p_k + a p_{k+1}); weights 0 drop out of logsumexp
        w = jnp.stack([1.0 - a, a]).reshape((1,) * (P.ndim - 2) + (2, 1))
        p = jax.nn.logsumexp(P, axis=-2, b=jnp.broadcast_to(w, P.shape))
    else:
        p = (1.0 - a) * P[..., 0, :] + a * P[..., 1, :]
    p = _finish(p, islog, return_log_probs, log_prob_eps)
    if keepdims:
        p = p.reshape((1,) * nd + (n,)) if axis is None else jnp.expand_dims(p, ax)
    return p.astype(dt)


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
    abs_mode: str = "hard",
    network: str = "bitonic",
    impl: str = "hybrid",
    window: int | None = None,
    _bound: bool = False,
) -> Array:
    """Soft ``jnp.quantile`` (``q`` scalar or 1-D, prepended to the output).

    ``pav``/``network``: interpolate the soft-sorted values; index methods: expectation
    under :func:`argquantile`.
    """
    method = _method(method, VALUE_METHODS)
    _check_common(mode, method, softness, network, abs_mode, impl)
    V.one_of(QMETHODS, quantile_method=quantile_method)
    q = _check_q(q)
    x = as_float(x)
    if mode == "hard":
        return jnp.quantile(
            x, q.astype(x.dtype), axis=axis, keepdims=keepdims, method=quantile_method
        )
    if q.ndim == 1:
        return jax.vmap(
            lambda qi: quantile(
                x,
                qi,
                axis,
                keepdims,
                softness=softness,
                mode=mode,
                method=method,
                quantile_method=quantile_method,
                standardize=standardize,
                gated_grad=gated_grad,
                abs_mode=abs_mode,
                network=network,
                impl=impl,
                window=window,
                _bound=_bound,
            )
        )(q)
    nd = x.ndim
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if n == 0:
        raise ValueError("`x` must be non-empty along `axis` for a quantile.")
    if window is not None:  # banded softsort / neuralsort (jaxkit.soft._banded)
        BD.check(window, method, mode, abs_mode)
        k, a, two = _qparams(q.astype(xl.dtype), n, quantile_method)
        v, b = BD.quantile_last(
            _guard(xl, softness),
            k,
            jnp.minimum(k + 1, n - 1),
            a,
            two,
            softness,
            method,
            standardize,
            gated_grad,
            window,
        )
        v = b if _bound else v
    elif method in DIRECT:
        xl = _guard(xl, softness)
        s = _sort_last(
            xl, False, softness, mode, method, standardize, gated_grad, abs_mode, network, impl
        )
        k, a, two = _qparams(q.astype(xl.dtype), n, quantile_method)
        v = s[..., k]
        if two:
            v = (1.0 - a) * v + a * s[..., jnp.minimum(k + 1, n - 1)]
    else:
        p = argquantile(
            xl,
            q,
            -1,
            softness=softness,
            mode=mode,
            method=method,
            quantile_method=quantile_method,
            standardize=standardize,
            abs_mode=abs_mode,
            network=network,
        ).astype(xl.dtype)
        p = p if gated_grad else lax.stop_gradient(p)
        v = jnp.einsum("...n,...n->...", p, xl)
    if keepdims:
        v = v.reshape((1,) * nd) if axis is None else jnp.expand_dims(v, ax)
    return v.astype(dt)


def median(x: ArrayLike, axis: int | None = None, keepdims: bool = False, **kwargs) -> Array:
    """Soft median (``quantile(x, 0.5, quantile_method="midpoint")``, as ``jnp.median``)."""
    return quantile(x, 0.5, axis, keepdims, quantile_method="midpoint", **kwargs)


def argmedian(x: ArrayLike, axis: int | None = None, keepdims: bool = False, **kwargs) -> Array:
    """Soft index of the median (keywords of :func:`argquantile`, incl.
    ``return_log_probs`` and ``log_prob_eps``)."""
    return argquantile(x, 0.5, axis, keepdims, quantile_method="midpoint", **kwargs)


def percentile(
    x: ArrayLike, p: ArrayLike, axis: int | None = None, keepdims: bool = False, **kwargs
) -> Array:
    """Soft ``jnp.percentile`` (``p`` in [0, 100])."""
    return quantile(x, jnp.asarray(p) / 100.0, axis, keepdims, **kwargs)


def argpercentile(
    x: ArrayLike, p: ArrayLike, axis: int | None = None, keepdims: bool = False, **kwargs
) -> Array:
    """Soft index of the ``p``-th percentile (keywords of :func:`argquantile`, incl.
    ``return_log_probs`` and ``log_prob_eps``)."""
    return argquantile(x, jnp.asarray(p) / 100.0, axis, keepdims, **kwargs)


# ----------------------------------------------------------------------------- top-k


def argtop_k(
    x: ArrayLike,
    k: int,
    axis: int = -1,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    standardize: bool = True,
    abs_mode: str = "hard",
    network: str = "bitonic",
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft indices of the ``k`` largest entries, shape ``(..., k, ..., [n])``.

    ``network`` computes the k rows matrix-free (k transposed sweeps).

    Args:
      x, k, axis: as ``lax.top_k`` along ``axis``.
      softness, mode, method, standardize, abs_mode, network: as in :func:`argsort`.
      return_log_probs, log_prob_eps: log-probabilities, as in :func:`argsort`.
    """
    method = _method(method, INDEX_METHODS)
    _check_common(mode, method, softness, network, abs_mode)
    _check_lp(return_log_probs, log_prob_eps)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if not isinstance(k, int) or not 0 < k <= n:
        raise ValueError(f"`k` must be an int with 0 < k <= {n}, got k={k!r}.")
    if mode == "hard":
        _, idx = lax.top_k(xl, k)
        P, islog = _onehot(idx, n, xl.dtype), False
    else:
        P, islog = _argtop_k_last(
            xl, k, softness, mode, method, standardize, abs_mode, network, return_log_probs
        )
    return _back_index(_finish(P, islog, return_log_probs, log_prob_eps), ax, dt)


def _argtop_k_last(xl, k, softness, mode, method, standardize, abs_mode, network, log):
    """Soft top-k rows ``(..., k, [n])`` of ``xl`` (last axis), and whether they are logs."""
    n = xl.shape[-1]
    xl = _guard(xl, softness)
    xs, _, _ = _squash(xl, standardize)
    if method == "softsort":
        anchors, _ = lax.top_k(xs, k)
        return _simplex(_row_scores(xs, anchors, "softsort"), softness, mode, log)
    if method == "neuralsort":
        A = _neuralsort_a(xs, mode, softness, abs_mode)
        coef = _ns_coef(n, xs.dtype, False, jnp.arange(n - k + 1, n + 1)[::-1])
        return _simplex(_row_scores(xs, coef, "neuralsort", A), softness, mode, log)
    elif method == "ot":
        mu = jnp.ones((n,), xs.dtype) / n
        if k == n:
            anchors = (jnp.linspace(0, n, n, dtype=xs.dtype) / n)[::-1]
            P = jnp.swapaxes(transport(xs, anchors, mu, mu, softness, mode), -1, -2)
        else:
            anchors = (jnp.linspace(0, k, k + 1, dtype=xs.dtype) / k)[::-1]
            nu = jnp.concatenate(
                [jnp.ones((k,), xs.dtype) / n, jnp.full((1,), (n - k) / n, xs.dtype)]
            )
            P = jnp.swapaxes(transport(xs, anchors, mu, nu, softness, mode), -1, -2)[..., :k, :]
    else:
        _, ms, partner = NW.forward(xs, softness, mode, network, standardize)
        npad = ms.shape[-1]
        padz = jnp.repeat(jnp.zeros_like(xs[..., :1]), npad - n, axis=-1)
        rows = NW.apply(jnp.concatenate([jnp.ones_like(xs), padz], -1), ms, partner)[..., :n]
        # descending row i = ascending row n-1-i; P^T e_r gives row r of P
        E = jnp.eye(npad, dtype=xs.dtype)[jnp.arange(n - 1, n - 1 - k, -1)]  # (k, npad)
        E = jnp.broadcast_to(E, (*xs.shape[:-1], k, npad))
        R = jax.vmap(lambda e: NW.apply_t(e, ms, partner), in_axes=-2, out_axes=-2)(E)
        rsel = rows[..., jnp.arange(n - 1, n - 1 - k, -1)]
        P = R[..., :n] / jnp.clip(rsel[..., None], min=1e-10)
    return P, False


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
    abs_mode: str = "hard",
    network: str = "bitonic",
    impl: str = "hybrid",
    window: int | None = None,
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
    _bound: bool = False,
) -> tuple[Array, Array | None] | Array:
    """Soft ``lax.top_k`` along ``axis``: (values ``(..., k, ...)``, soft index or ``None``).

    ``pav`` and ``network`` return the first ``k`` of the descending soft sort and no
    soft index (as softjax); use :func:`argtop_k` for the network's soft index rows.
    ``return_log_probs``/``log_prob_eps`` (see :func:`argtop_k`) apply to the returned
    soft index only; the values are always computed from the probabilities.
    """
    method = _method(method, VALUE_METHODS)
    _check_common(mode, method, softness, network, abs_mode, impl)
    _check_lp(return_log_probs, log_prob_eps)
    lp = (return_log_probs, log_prob_eps)
    xl, ax, dt = _prep(x, axis)
    n = xl.shape[-1]
    if not isinstance(k, int) or not 0 < k <= n:
        raise ValueError(f"`k` must be an int with 0 < k <= {n}, got k={k!r}.")
    if mode == "hard":
        v, idx = lax.top_k(xl, k)
        return _back(v, ax, dt), _back_index(_finish(_onehot(idx, n, xl.dtype), False, *lp), ax, dt)
    if window is not None:  # banded softsort / neuralsort (jaxkit.soft._banded)
        BD.check(window, method, mode, abs_mode)
        v, P, b = BD.top_k_last(
            _guard(xl, softness), k, softness, method, standardize, gated_grad, window
        )
        return (
            _back(b, ax, dt)
            if _bound
            else (_back(v, ax, dt), _back_index(_finish(P, False, *lp), ax, dt))
        )
    if method in DIRECT:
        xl = _guard(xl, softness)
        s = _sort_last(
            xl, True, softness, mode, method, standardize, gated_grad, abs_mode, network, impl
        )
        return _back(s[..., :k], ax, dt), None
    raw, islog = _argtop_k_last(
        xl, k, softness, mode, method, standardize, abs_mode, network, return_log_probs
    )
    p = jnp.exp(raw) if islog else raw  # islog: smooth log_softmax, finite everywhere
    pv = p if gated_grad else lax.stop_gradient(p)
    v = jnp.einsum("...kn,...n->...k", pv, xl)
    return _back(v, ax, dt), _back_index(_finish(raw, islog, *lp), ax, dt)
