"""Disentanglement metrics: group-aligned latent R^2, connectivity and sub-circuit R^2.

Latents of a (Fac)RNN are identifiable only up to invertible maps within each group and a
permutation of groups, so latents are compared by group-wise affine regression plus an
optimal matching (Hungarian, ``scipy.optimize.linear_sum_assignment``), never by raw
correlations. The alignment functions run on the host (NumPy least squares and the
assignment solver; not jitted); :func:`connectivity_metrics` is jitted.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float
from scipy.optimize import linear_sum_assignment

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype


class AlignedR2(NamedTuple):
    """Result of :func:`group_aligned_r2` (host NumPy values).

    Attributes:
      score: Mean R^2 over the matched (true group, predicted group) pairs.
      matrix: ``[G_true, G_pred]`` R^2 of regressing each true group on each predicted one.
      match: ``[G_true]`` index of the predicted group matched to each true group (-1 if
        unmatched, when there are fewer predicted groups).
    """

    score: float
    matrix: np.ndarray
    match: np.ndarray


def _affine_r2(xp: np.ndarray, yt: np.ndarray) -> float:
    """R^2 of the least-squares affine map ``xp -> yt``, averaged over ``yt``'s columns."""
    design = np.concatenate([xp, np.ones((xp.shape[0], 1))], axis=1)
    coef, *_ = np.linalg.lstsq(design, yt, rcond=None)
    ss_res = np.sum((yt - design @ coef) ** 2, axis=0)
    ss_tot = np.sum((yt - yt.mean(0)) ** 2, axis=0)
    return float(np.mean(1.0 - ss_res / ss_tot)) if np.all(ss_tot > 0) else float("nan")


def _match(mat: np.ndarray) -> tuple[float, np.ndarray]:
    rows, cols = linear_sum_assignment(-np.nan_to_num(mat, nan=-np.inf, neginf=-1e30))
    match = -np.ones(mat.shape[0], np.int64)
    match[rows] = cols
    return float(np.mean(mat[rows, cols])), match


def _as_matrix(x, name: str) -> np.ndarray:
    _validate.floating(x, name=name)
    _validate.ndim(x, 2, name=name)
    _validate.nonempty(x, name=name)  # no sample: no R^2
    _validate.nonempty(x, name=name, axis=-1, what="latent")  # a mean R^2 over no latent
    a = np.asarray(x, np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"`{name}` must be finite (no NaN or inf).")
    return a


def _groups(k: int, g: int, name: str) -> int:
    g = _validate.python_int(g, name=name, minimum=1)
    if k % g:
        raise ValueError(f"`{name}` must divide the latent width {k}, got {name}={g}.")
    return g


def group_aligned_r2(
    z_pred: Float[ArrayLike, "s kp"],
    z_true: Float[ArrayLike, "s kt"],
    *,
    n_groups: int,
    n_groups_true: int | None = None,
) -> AlignedR2:
    """Group-aligned latent R^2: each true group regressed on its matched predicted group.

    How well each true latent group is recovered by one predicted group, up to an affine
    map, after the best matching of groups.
    ``matrix[g, h]`` is the R^2 (with intercept; the mean of the per-coordinate R^2 over
    the true group's coordinates, as the authors' ``r2_score`` with uniform averaging) of
    the least-squares regression of true group ``g`` on predicted group ``h``; the
    Hungarian assignment maximises the summed R^2 and ``score`` is its mean, which for
    equal group sizes is the per-coordinate mean R^2 of the group-aligned latents.
    It equals 1 for ``z_pred = blockdiag(M_1, ..., M_G) P z_true + c`` (invertible blocks,
    any group permutation ``P``). Host-side NumPy (float64); not jitted.

    Args:
      z_pred: Inferred latents ``[S, K_pred]`` (e.g. posterior means on a test set).
      z_true: Ground-truth latents ``[S, K_true]``.
      n_groups: Groups in ``z_pred`` (equal contiguous blocks).
      n_groups_true: Groups in ``z_true`` (default ``n_groups``).

    Returns:
      :class:`AlignedR2`.

    Raises:
      TypeError: If the inputs are not floating matrices with the same number of rows, or
        one has no row or no column.
      ValueError: If a group count does not divide its width, an input is not finite or
        ``z_true`` has a constant coordinate.

    Example:
      >>> import numpy as np
      >>> z = np.random.default_rng(0).normal(size=(100, 4))
      >>> res = group_aligned_r2(np.concatenate([z[:, 2:], z[:, :2]], 1), z, n_groups=2)
      >>> round(res.score, 6), res.match.tolist()
      (1.0, [1, 0])
    """
    zp, zt = _as_matrix(z_pred, "z_pred"), _as_matrix(z_true, "z_true")
    if zp.shape[0] != zt.shape[0]:
        raise TypeError(
            f"`z_pred` and `z_true` must have the same number of rows, got {zp.shape} and "
            f"{zt.shape}."
        )
    if np.any(np.ptp(zt, axis=0) == 0):
        raise ValueError("`z_true` has a constant coordinate: its R^2 is undefined.")
    gp = _groups(zp.shape[1], n_groups, "n_groups")
    gt = _groups(zt.shape[1], gp if n_groups_true is None else n_groups_true, "n_groups_true")
    dp, dt = zp.shape[1] // gp, zt.shape[1] // gt
    mat = np.array(
        [
            [
                _affine_r2(zp[:, h * dp : (h + 1) * dp], zt[:, g * dt : (g + 1) * dt])
                for h in range(gp)
            ]
            for g in range(gt)
        ]
    )
    score, match = _match(mat)
    return AlignedR2(score, mat, match)


def component_aligned_r2(
    z_pred: Float[ArrayLike, "s kp"], z_true: Float[ArrayLike, "s kt"]
) -> AlignedR2:
    """Per-dimension aligned R^2: :func:`group_aligned_r2` with one group per latent.

    Host-side NumPy; not jitted.

    Raises:
      TypeError: as :func:`group_aligned_r2` (a matrix with no column included).
      ValueError: as :func:`group_aligned_r2`.

    Example:
      >>> import numpy as np
      >>> z = np.random.default_rng(0).normal(size=(50, 3))
      >>> round(component_aligned_r2(2 * z[:, ::-1] + 1, z).score, 6)
      1.0
    """
    zp, zt = _as_matrix(z_pred, "z_pred"), _as_matrix(z_true, "z_true")
    return group_aligned_r2(zp, zt, n_groups=zp.shape[1], n_groups_true=zt.shape[1])


def sub_connectivity_r2(
    j_pred: Float[ArrayLike, "gp n n"], j_true: Float[ArrayLike, "gt n n"]
) -> AlignedR2:
    """Sub-circuit recovery: R^2 of each true ``J_g`` by its matched predicted ``J_h``.

    Entry-wise ``1 - SS_res/SS_tot`` without refitting; best group matching by Hungarian.
    Sub-circuits ``A_g B_g`` are invariant to invertible maps within a group, so a model
    that recovers the true groups matches them up to a permutation. Host-side NumPy;
    not jitted.

    Args:
      j_pred: Predicted sub-circuits ``[G_pred, N, N]`` (:func:`sub_connectivity`).
      j_true: True sub-circuits ``[G_true, N, N]``.

    Returns:
      :class:`AlignedR2` (``matrix[g, h]`` is the R^2 of true ``g`` by predicted ``h``).

    Raises:
      TypeError: If the inputs are not floating ``[G, N, N]`` stacks of the same ``N``
        with ``G >= 1``.
      ValueError: If an input is not finite.

    Example:
      >>> import numpy as np
      >>> j = np.random.default_rng(0).normal(size=(2, 3, 3))
      >>> sub_connectivity_r2(j[::-1], j).match.tolist()
      [1, 0]
    """
    for name, v in (("j_pred", j_pred), ("j_true", j_true)):
        _validate.floating(v, name=name)
        _validate.ndim(v, 3, name=name)
        _validate.nonempty(v, name=name)  # no sub-circuit: a mean R^2 over no pair
    jp, jt = np.asarray(j_pred, np.float64), np.asarray(j_true, np.float64)
    if jp.shape[1:] != jt.shape[1:] or jp.shape[1] != jp.shape[2]:
        raise TypeError(
            f"`j_pred` and `j_true` must be [G, N, N] stacks of the same N, got {jp.shape} "
            f"and {jt.shape}."
        )
    if not (np.all(np.isfinite(jp)) and np.all(np.isfinite(jt))):
        raise ValueError("`j_pred` and `j_true` must be finite (no NaN or inf).")
    mat = np.array([[_r2_np(p, t) for p in jp] for t in jt])
    score, match = _match(mat)
    return AlignedR2(score, mat, match)


def _r2_np(pred: np.ndarray, true: np.ndarray) -> float:
    ss_tot = np.sum((true - true.mean()) ** 2)
    return float(1.0 - np.sum((pred - true) ** 2) / ss_tot) if ss_tot > 0 else float("nan")


class ConnectivityMetrics(NamedTuple):
    """Entry-wise agreement of a fitted connectivity with the truth."""

    mae: Float[Array, "*batch"]
    rmse: Float[Array, "*batch"]
    r2: Float[Array, "*batch"]
    pearson: Float[Array, "*batch"]


def _conn(j, jt):
    acc = accumulation_dtype(j.dtype)
    n = j.shape[-2] * j.shape[-1]  # not -1: an empty batch has no size to infer it from
    a = j.reshape(*j.shape[:-2], n).astype(acc)
    b = jt.reshape(*jt.shape[:-2], n).astype(acc)
    d = a - b
    mae = jnp.mean(jnp.abs(d), -1)
    rmse = jnp.sqrt(jnp.mean(d * d, -1))
    bc = b - jnp.mean(b, -1, keepdims=True)
    ac = a - jnp.mean(a, -1, keepdims=True)
    r2 = 1 - jnp.sum(d * d, -1) / jnp.sum(bc * bc, -1)
    # A constant j_pred (e.g. a zero-initialised model) has no correlation: r = 0, defined
    # (double where: a finite gradient). Constancy is max == min, not a zero centred sum,
    # which rounding leaves slightly positive.
    flat = jnp.max(a, -1) == jnp.min(a, -1)
    den = jnp.sqrt(jnp.sum(ac * ac, -1) * jnp.sum(bc * bc, -1))
    pearson = jnp.where(flat, 0.0, jnp.sum(ac * bc, -1) / jnp.where(flat, 1.0, den))
    out = ConnectivityMetrics(*(v.astype(j.dtype) for v in (mae, rmse, r2, pearson)))
    const = jnp.any(jnp.max(b, -1) == jnp.min(b, -1))
    return _validate.error_if(out, const, _CONSTANT_TRUTH)


_conn_jit = jax.jit(_conn)
_CONSTANT_TRUTH = "`j_true` is constant (in some batch entry): its R^2 and Pearson r are undefined."


def connectivity_metrics(
    j_pred: Float[ArrayLike, "*batch n m"], j_true: Float[ArrayLike, "*batch n m"]
) -> ConnectivityMetrics:
    """MAE, RMSE, R^2 and Pearson r of a connectivity's entries against the truth.

    R^2 is ``1 - SS_res/SS_tot`` (no refit); batched over leading axes. Jitted.

    A constant ``j_true`` leaves R^2 and Pearson r undefined (``SS_tot = 0``): it raises
    (``ValueError`` for a concrete one, a run-time error under ``jit``) instead of returning
    NaN. A constant ``j_pred`` (e.g. a zero-initialised model) is defined: Pearson r is 0
    (no linear association) and R^2 follows the formula.

    Args:
      j_pred: Fitted connectivity, e.g. :func:`connectivity` ``[..., N, N]``.
      j_true: True connectivity, same shape.

    Returns:
      :class:`ConnectivityMetrics`, each ``[...]``.

    Raises:
      TypeError: If the inputs are not floating matrices of the same shape.
      ValueError: If ``j_true`` is constant (in any batch entry).

    Example:
      >>> import jax.numpy as jnp
      >>> j = jnp.arange(4.0).reshape(2, 2)
      >>> float(connectivity_metrics(j, j).r2)
      1.0
    """
    _validate.floating_pair(j_pred, j_true, names=("j_pred", "j_true"), rank=2)
    jt = _validate._concrete(j_true)  # concrete: checked on the host, ValueError now
    if jt is not None and jt.size and np.any(np.ptp(jt.reshape(*jt.shape[:-2], -1), -1) == 0):
        raise ValueError(_CONSTANT_TRUTH)
    return _conn_jit(jnp.asarray(j_pred), jnp.asarray(j_true))
