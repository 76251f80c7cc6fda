"""Empirical privacy audit: a canary membership test with Clopper-Pearson bounds.

Runs a release mechanism many times on two neighbouring inputs (with and
without a canary example), scores each release by its alignment with the
canary, picks a threshold on one half of the trials and turns the true/false
positive counts of the other half into a 95% lower bound on ``epsilon``
(Jagielski et al. 2020; Nasr et al. 2021). A correct ``(epsilon, delta)``-DP
mechanism keeps the bound below its accounted ``epsilon``; a broken one (noise or
clipping off) exceeds it.

References:
  M. Jagielski, J. Ullman, A. Oprea, "Auditing Differentially Private Machine
  Learning: How Private is Private SGD?", NeurIPS 2020.
  M. Nasr et al., "Adversary Instantiation: Lower Bounds for Differentially
  Private Machine Learning", IEEE S&P 2021.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree

from jaxkit import _validate


class AuditResult(NamedTuple):
    """Outcome of :func:`canary_audit`.

    Attributes:
      epsilon_lower: Lower bound on ``epsilon`` at the given confidence.
      threshold: Score threshold chosen on the calibration half.
      tpr, fpr: Empirical rates on the evaluation half.
      trials: Releases per world (with / without the canary).
    """

    epsilon_lower: float
    threshold: float
    tpr: float
    fpr: float
    trials: int


class Interval(NamedTuple):
    """A confidence interval ``[low, high]`` (from :func:`clopper_pearson`)."""

    low: float
    high: float


def _betainc(a, b, x) -> float:
    return float(jax.scipy.special.betainc(jnp.float32(a), jnp.float32(b), jnp.float32(x)))


def _beta_ppf(p, a, b) -> float:
    """Quantile of Beta(a, b) by bisection on the regularized incomplete beta."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _betainc(a, b, mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson(k: int, n: int, *, alpha: float = 0.05) -> Interval:
    """Two-sided ``1 - alpha`` Clopper-Pearson interval of a binomial proportion ``k / n``.

    A host utility (Python floats in and out, bisection on the host).

    Returns:
      :class:`Interval` ``(low, high)``.

    Raises:
      TypeError: If ``k`` or ``n`` is not a Python int.
      ValueError: Unless ``0 <= k <= n``, ``n >= 1`` and ``0 < alpha < 1``.
    """
    k = _validate.python_int(k, name="k", minimum=0)
    n = _validate.python_int(n, name="n", minimum=1)
    if k > n:
        raise ValueError(f"`k` must be <= `n`, got k={k}, n={n}.")
    _validate.real(alpha, name="alpha")
    _validate.in_interval(low=0.0, high=1.0, closed="neither", alpha=alpha)
    lo = 0.0 if k == 0 else _beta_ppf(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else _beta_ppf(1 - alpha / 2, k + 1, n - k)
    return Interval(lo, hi)


def _eps_from_rates(fpr_hi: float, fnr_hi: float, delta: float) -> float:
    best = 0.0
    for num, den in ((1 - delta - fnr_hi, fpr_hi), (1 - delta - fpr_hi, fnr_hi)):
        if num > 0 and den > 0:
            best = max(best, math.log(num / den))
    return best


def _point_eps(tp: int, fp: int, n: int) -> float:
    # smoothed point estimate used only to choose the threshold
    return math.log((tp + 0.5) / (n + 1)) - math.log((fp + 0.5) / (n + 1))


def _check_worlds(base: PyTree, canary: PyTree) -> None:
    """Each leaf of ``base`` is the matching leaf of ``canary`` with a leading batch axis."""
    b_leaves, b_tree = jax.tree.flatten_with_path(base)
    c_leaves, c_tree = jax.tree.flatten_with_path(canary)
    if b_tree != c_tree:
        raise TypeError(
            f"`base` and `canary` must have the same tree structure, got {b_tree} and {c_tree}."
        )
    for (path, b), (_, c) in zip(b_leaves, c_leaves, strict=True):
        where = jax.tree_util.keystr(path)
        if np.ndim(b) < 1 or np.shape(b)[1:] != np.shape(c):
            raise TypeError(
                f"`base{where}` must be `canary{where}` with a leading batch axis: shape "
                f"(batch, *{np.shape(c)}), got {np.shape(b)}."
            )


def canary_audit(
    release: Callable[[PyTree, jax.Array], PyTree],
    *,
    base: PyTree,
    canary: PyTree,
    key: PRNGKeyArray,
    trials: int = 1000,
    delta: float = 1e-5,
    confidence: float = 0.95,
    score: Callable[[PyTree], jax.Array] | None = None,
) -> AuditResult:
    """Lower-bound the ``epsilon`` of ``release`` with a canary membership test.

    A host utility, not a traceable function: it runs ``release`` ``2 * trials``
    times (one ``jax.jit`` of the vmapped release, compiled per call, serves both worlds),
    then picks the threshold and the bounds with NumPy on the host. Do not call it
    under ``jit``.

    World "in": the per-example gradients ``base`` plus one row equal to
    ``canary``; world "out": the same with that row zero (an example that
    contributes nothing, i.e. add/remove adjacency with fixed shapes). Each world
    is released ``trials`` times with fresh keys; the score of a release is
    ``score(released)`` (default: its inner product with ``canary``). The
    threshold is chosen on the first half of the trials and the Clopper-Pearson
    bounds (``confidence`` shared by the two rates) on the second half give
    ``epsilon >= log((1 - delta - FNR_hi) / FPR_hi)`` (and the symmetric form).

    Args:
      release: ``release(per_example_grads, key) -> released pytree`` (one DP step).
      base: Per-example gradients of the other examples (leading batch axis).
      canary: One example's gradient (no batch axis).
      key: PRNG key for the trials.
      trials: Releases per world (>= 2).
      delta: The ``delta`` of the claim.
      confidence: Confidence level of the bound.
      score: Optional scalar score of a release.

    Returns:
      :class:`AuditResult`.

    Raises:
      TypeError: If ``trials`` is not a Python int, or a leaf of ``base`` is not the
        matching leaf of ``canary`` with a leading batch axis.
      ValueError: For ``trials < 2`` or ``delta``/``confidence`` outside ``(0, 1)``.
    """
    trials = _validate.python_int(trials, name="trials", minimum=2)
    _validate.in_interval(low=0.0, high=1.0, closed="neither", delta=delta)
    _validate.in_interval(low=0.0, high=1.0, closed="neither", confidence=confidence)
    _validate.is_key(key)
    _check_worlds(base, canary)
    flat_canary = jnp.concatenate(
        [jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(canary)]
    )
    if score is None:

        def score(r: Any) -> jax.Array:
            v = jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(r)])
            return jnp.dot(v, flat_canary)

    def one(k, row):
        grads = jax.tree.map(
            lambda b, c: jnp.concatenate([b, c[None].astype(b.dtype)], 0), base, row
        )
        return score(release(grads, k))

    # one compilation serves both worlds (the canary row is an argument)
    worlds = jax.jit(jax.vmap(one, in_axes=(0, None)))
    k_in, k_out = jax.random.split(key)
    s_in = np.asarray(worlds(jax.random.split(k_in, trials), canary), np.float64)
    zero = jax.tree.map(jnp.zeros_like, canary)
    s_out = np.asarray(worlds(jax.random.split(k_out, trials), zero), np.float64)
    h = trials // 2
    cal_in, cal_out, ev_in, ev_out = s_in[:h], s_out[:h], s_in[h:], s_out[h:]
    cands = np.unique(np.concatenate([cal_in, cal_out]))
    best_t, best = float(cands[0]), -np.inf
    for t in cands:
        tp, fp = int(np.sum(cal_in >= t)), int(np.sum(cal_out >= t))
        e = _point_eps(tp, fp, h)
        if e > best:
            best, best_t = e, float(t)
    n = len(ev_in)
    tp, fp = int(np.sum(ev_in >= best_t)), int(np.sum(ev_out >= best_t))
    alpha = 1 - confidence
    # one-sided bounds at level alpha/2 each (union bound over the two rates)
    fpr_hi = clopper_pearson(fp, n, alpha=alpha).high
    fnr_hi = clopper_pearson(n - tp, n, alpha=alpha).high
    return AuditResult(_eps_from_rates(fpr_hi, fnr_hi, delta), best_t, tp / n, fp / n, trials)
