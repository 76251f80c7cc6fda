"""Soft ``argsort``, ``sort`` and ``rank`` (front-ends over the method backends).

Methods: ``"pav"`` (permutahedron projection, = softjax ``fast_soft_sort``; values
only), ``"softsort"``, ``"neuralsort"``, ``"ot"`` (entropic Sinkhorn / p-norm OT),
``"network"`` (= softjax ``sorting_network``; ``network="bitonic"`` or
``"odd_even"``), ``"smooth_sort"``. softjax's names ``fast_soft_sort`` and
``sorting_network`` are accepted as aliases. Defaults follow ``jax.numpy``:
``axis=-1``, ascending, 1-based ranks (the smallest gets 1).

Every public function is jitted like jax.numpy: one module-level ``jax.jit`` whose
static arguments are the discrete choices (method, mode, axis, flags, sizes), with
``softness`` traced, so sweeps over it never recompile and eager calls hit the cache.

References:
  Blondel et al., Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
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
from jaxkit.soft import _axis_pav as PV
from jaxkit.soft import _banded as BD
from jaxkit.soft._common import unsquash
from jaxkit.soft._sorting import sort_values

# ----------------------------------------------------------------------------- backends


def argsort_last(xs, descending, softness, o, log):
    """Soft permutation rows ``(..., n, [n])`` of the squashed ``xs``, and whether logs."""
    if o.method in ("softsort", "neuralsort"):
        return PW.argsort(xs, descending, softness, o, log)
    if o.method == "ot":
        return OT.argsort(xs, descending, softness, o), False
    return NWK.argsort(xs, descending, softness, o), False


def sort_last(xl, descending, softness, o, bound=False):
    """Soft-sorted values of ``xl`` along the last axis (``bound``: the banded bound)."""
    if o.window is not None:
        out = BD.sort_last(
            xl, descending, softness, o.method, o.standardize, o.gated_grad, o.window
        )
        return out[1] if bound else out[0]
    if o.method in ("pav", "smooth_sort"):
        return PV.sort(xl, descending, softness, o)
    xs, mean, std = F.squash(xl, o.standardize)
    if o.method == "network":
        out = NWK.sort(xs, descending, softness, o)
        return unsquash(out, mean, std) if o.standardize else out
    if o.method == "ot":
        P = OT.argsort(xs, descending, softness, o)
        P = P if o.gated_grad else lax.stop_gradient(P)
        return jnp.einsum("...kn,...n->...k", P, xl)
    return PW.sort(xl, xs, descending, softness, o)


def _argsort_core(x, softness, log_prob_eps, *, axis, descending, o, log):
    xl, ax, dt = F.prep(x, axis)
    n = xl.shape[-1]
    if o.mode == "hard" or n == 0:
        idx = jnp.argsort(lax.stop_gradient(xl), axis=-1, descending=descending, stable=True)
        P, islog = F.onehot(idx, n, xl.dtype), False
    else:
        xl = F.guard(xl, softness)
        xs, _, _ = F.squash(xl, o.standardize)
        P, islog = argsort_last(xs, descending, softness, o, log)
    return F.back_index(F.finish(P, islog, log, log_prob_eps), ax, dt)


def _sort_core(x, softness, *, axis, descending, o, bound=False):
    xl, ax, dt = F.prep(x, axis)
    if o.mode == "hard" or xl.shape[-1] == 0:
        return F.back(sort_values(xl, descending), ax, dt)
    xl = F.guard(xl, softness)
    o = F.with_window(o, xl.shape[-1], "sort")
    if bound and o.window is None:  # window="auto" took the dense rows: exact
        return F.back(jnp.zeros_like(xl), ax, dt)
    return F.back(sort_last(xl, descending, softness, o, bound), ax, dt)


def _rank_core(x, softness, *, axis, descending, o, bound=False):
    xl, ax, dt = F.prep(x, axis)
    n = xl.shape[-1]
    if o.mode == "hard" or n == 0:
        idx = jnp.argsort(lax.stop_gradient(xl), axis=-1, descending=descending, stable=True)
        return F.back((jnp.argsort(idx, axis=-1) + 1).astype(xl.dtype), ax, dt)
    xl = F.guard(xl, softness)
    o = F.with_window(o, n, "rank")
    if bound and o.window is None:  # window="auto" took the dense rows: exact
        return F.back(jnp.zeros_like(xl), ax, dt)
    if o.window is not None:
        out = BD.rank_last(xl, descending, softness, o.method, o.standardize, o.window)
        return F.back(out[1] if bound else out[0], ax, dt)
    xs, _, _ = F.squash(xl, o.standardize)
    if o.method in ("pav", "smooth_sort"):
        r = PV.rank(xl, xs, descending, softness, o)
    elif o.method in ("softsort", "neuralsort"):
        r = PW.rank(xs, descending, softness, o)
    elif o.method == "ot":
        r = OT.rank(xs, descending, softness, o)
    else:
        r = NWK.rank(xs, descending, softness, o)
    return F.back(r, ax, dt)


_STATIC = ("axis", "descending", "o")
_argsort_jit = jax.jit(_argsort_core, static_argnames=(*_STATIC, "log"))
_sort_jit = jax.jit(_sort_core, static_argnames=(*_STATIC, "bound"))
_rank_jit = jax.jit(_rank_core, static_argnames=(*_STATIC, "bound"))


def _descending(descending):
    return V.flag(descending, name="descending")


# ----------------------------------------------------------------------------- public


def argsort(
    x: ArrayLike,
    axis: int | None = -1,
    *,
    descending: bool = False,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    standardize: bool = True,
    abs_mode: str | None = None,
    network: str = "bitonic",
    ot_kwargs: dict | None = None,
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft argsort: a soft permutation ``(..., n, ..., [n])``; row i is the i-th smallest.

    Args:
      x: input array of any rank.
      axis: axis to sort (``None`` flattens).
      descending: sort largest first.
      softness: temperature (> 0), traced.
      mode: ``"hard"`` (one-hot of ``jnp.argsort``), ``"smooth"``, ``"c0"``, ``"c1"``, ``"c2"``.
      method: ``"neuralsort"``, ``"softsort"``, ``"ot"`` or ``"network"``.
      standardize: squash ``x`` through ``sigmoid(zscore(x))`` first (softjax default).
      abs_mode: NeuralSort row sums ``A_j = sum_k |x_j - x_k|`` with softjax's soft
        ``|.|`` in the same mode and softness (``"soft"``, the default, as softjax, O(n^2))
        or the exact ``|.|`` (``"hard"``, original NeuralSort, O(n log n)).
      network: ``"bitonic"`` or ``"odd_even"`` for ``method="network"``.
      ot_kwargs: softjax's OT solver options for ``method="ot"``: ``sinkhorn_tol``,
        ``sinkhorn_max_iter`` (mode ``"smooth"``), ``lbfgs_tol``, ``lbfgs_max_iter``
        (the p-norm modes; our p-norm solver is a Newton method, the pair sets its
        tolerance and iteration limit). Unknown keys raise ``ValueError``. A p-norm
        row whose solve stops above its tolerance (past the round-off floor) comes back
        as NaN instead of an unconverged plan: raise ``lbfgs_max_iter`` if that happens.
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
    return _argsort(**locals())


def _argsort(x, axis=-1, *, descending=False, return_log_probs=False, log_prob_eps=None, **opts):
    return_log_probs = F.check_lp(return_log_probs, log_prob_eps)
    x, o = F.front(x, axis, F.INDEX_METHODS, opts)
    s, d = opts.get("softness", 0.1), _descending(descending)
    return _argsort_jit(x, s, log_prob_eps, axis=axis, descending=d, o=o, log=return_log_probs)


def _sort(x, axis=-1, *, descending=False, bound=False, **opts):
    x, o = F.front(x, axis, F.VALUE_METHODS, opts)
    d = _descending(descending)
    return _sort_jit(x, opts.get("softness", 0.1), axis=axis, descending=d, o=o, bound=bound)


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
    abs_mode: str | None = None,
    network: str = "bitonic",
    solver: str = "hybrid",
    window: int | str | None = None,
    ot_kwargs: dict | None = None,
) -> Array:
    """Soft sort along ``axis`` (ascending unless ``descending``).

    ``method="pav"`` (default) projects onto the permutahedron (O(n log n), monotone
    output, exact hard sort below a data-dependent softness); ``solver`` picks the PAV
    algorithm (``"hybrid"``, ``"rounds"``, ``"sequential"``; same result). Index methods
    return the expectation of ``x`` under the soft argsort (``gated_grad=False`` stops
    the gradient through the soft index). Other arguments as in :func:`argsort`.

    ``window=w`` (static int, ``method`` ``"softsort"``/``"neuralsort"``, mode
    ``"smooth"``) truncates every soft-permutation row to the ``2w + 1`` nearest sorted
    positions: O(n log n + n w) time and memory instead of O(n^2); it uses the exact
    ``|.|`` (``abs_mode="hard"``). The difference to the dense result (``window=None``,
    ``abs_mode="hard"``) is certified at run time by :func:`banded_error_bound` (same
    for :func:`rank`, :func:`top_k`, :func:`quantile`). ``window="auto"`` bands only
    where the band pays (NeuralSort sort / rank rows longer than ``4 (2w + 1)`` with
    ``w = 16``) and takes the dense rows (exact ``|.|``) everywhere else; the choice is
    static in ``n`` (see ``_axis_front.band_window``).

    Jitted like jax.numpy (module level, static choices static, ``softness`` traced).

    References:
      Blondel et al., Fast differentiable sorting and ranking
      <https://arxiv.org/abs/2002.08871>, 2020.
    """
    return _sort(**locals())


def _rank(x, axis=-1, *, descending=False, bound=False, **opts):
    x, o = F.front(x, axis, F.VALUE_METHODS, opts)
    d = _descending(descending)
    return _rank_jit(x, opts.get("softness", 0.1), axis=axis, descending=d, o=o, bound=bound)


rank = F.mirror(
    sort,
    _rank,
    "rank",
    """Soft 1-based ranks along ``axis`` (ascending: the smallest gets 1).

    ``method="pav"``: permutahedron projection of ``x / softness`` onto ``P(1..n)``;
    ``"network"``: matrix-free transposed sweeps (O(n log^2 n) memory); pairwise
    methods use fused chunked reductions. ``descending=True`` ranks the largest 1
    (softjax's default). ``window=w`` selects the banded SoftSort/NeuralSort path (see
    :func:`sort` and :func:`banded_error_bound`). Other arguments as in :func:`sort`
    (no ``gated_grad``: ranks do not weight ``x`` by the soft index).

    Jitted like jax.numpy (module level, static choices static, ``softness`` traced).

    References:
      Blondel et al., Fast differentiable sorting and ranking
      <https://arxiv.org/abs/2002.08871>, 2020.
    """,
    drop=("gated_grad",),
)
