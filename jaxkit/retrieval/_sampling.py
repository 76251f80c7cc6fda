"""Monte-Carlo estimators of the order-2 Shapley-Taylor index for games too large to enumerate.

Both are unbiased for every pair: the size-stratified sampler (a fixed number of draws per
coalition size ``s``, weighted by ``P(s) = 2(n-1-s)/(n(n-1))``) and the permutation
estimator (``delta_ij v`` at the players preceding both ``i`` and ``j`` in a uniform
permutation, permutations shared by all pairs). Part of PST's engine (reconstructed from
HBI and TMR); singletons are exact (``v({i}) - v(empty)``, ``n + 1`` evaluations).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray, accumulation_dtype


class STIIEstimate(NamedTuple):
    """A sampled order-2 Shapley-Taylor index.

    Attributes:
      pairs: ``[n, n]`` symmetric estimate of ``STII_ij`` (zero diagonal).
      singles: ``[n]`` exact singleton indices ``v({i}) - v(empty)``.
      stderr: ``[n, n]`` estimated standard error of ``pairs`` (zero diagonal).
    """

    pairs: Float[Array, "n n"]
    singles: Float[Array, " n"]
    stderr: Float[Array, "n n"]


def size_probabilities(n_players: int) -> np.ndarray:
    """``P(s) = 2 (n-1-s) / (n (n-1))`` for ``s = 0 .. n-2`` (size of ``S`` in STII)."""
    n = n_players
    s = np.arange(n - 1)
    return 2.0 * (n - 1 - s) / (n * (n - 1))


def stratum_allocation(n_players: int, n_samples: int) -> np.ndarray:
    """Draws per size stratum: proportional to ``P(s)``, at least 2 each, summing to total."""
    p = size_probabilities(n_players)
    k = len(p)
    extra = n_samples - 2 * k
    raw = p * extra
    m = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - m), kind="stable")
    m[order[: extra - int(m.sum())]] += 1
    return m + 2


def _pair_index(n: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(n, k=1)
    return i.astype(np.int32), j.astype(np.int32)


def _deltas(value_fn, params, base, i, j):
    """``delta_ij v(S)`` for boolean coalitions ``base [..., n]`` and pairs ``i, j [...]``."""
    n = base.shape[-1]
    oi = jax.nn.one_hot(i, n, dtype=bool)
    oj = jax.nn.one_hot(j, n, dtype=bool)
    masks = jnp.stack([base | oi | oj, base | oi, base | oj, base], axis=-2)
    flat = masks.reshape(-1, n)
    vals = jax.vmap(lambda m: value_fn(params, m))(flat).reshape(masks.shape[:-1])
    acc = accumulation_dtype(vals.dtype)
    vals = vals.astype(acc)
    return vals[..., 0] - vals[..., 1] - vals[..., 2] + vals[..., 3], vals.dtype


def _singles(value_fn, params, n):
    masks = jnp.concatenate([jnp.zeros((1, n), bool), jnp.eye(n, dtype=bool)])
    v = jax.vmap(lambda m: value_fn(params, m))(masks)
    return v[1:] - v[0]


def _safe_sqrt(x):
    """``sqrt`` whose derivative at 0 is 0 rather than inf/NaN (double where)."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1)), 0)


def _symmetric(vec, n, dtype):
    i, j = _pair_index(n)
    out = jnp.zeros((n, n), dtype).at[i, j].set(vec.astype(dtype))
    return out + out.T


def _estimate(value_fn, params, n, est, se):
    """The :class:`STIIEstimate` of pair estimates ``est`` (standard errors ``se``)."""
    single = _singles(value_fn, params, n)
    dt = single.dtype
    return STIIEstimate(_symmetric(est, n, dt), single, _symmetric(se, n, dt))


def _stratified_core(value_fn, params, key, n_players, n_samples):
    n = n_players
    pi, pj = _pair_index(n)
    alloc = stratum_allocation(n, n_samples)
    sizes = np.repeat(np.arange(n - 1, dtype=np.int32), alloc)  # [K] static
    u = jax.random.uniform(key, (len(pi), n_samples, n))
    block = jax.nn.one_hot(pi, n, dtype=bool) | jax.nn.one_hot(pj, n, dtype=bool)
    u = jnp.where(block[:, None, :], 2.0, u)  # i and j never join S
    kth = jnp.take_along_axis(  # the (s+1)-th smallest draw: S = the s smallest
        jnp.sort(u, axis=-1),
        jnp.broadcast_to(jnp.asarray(sizes)[None, :, None], (*u.shape[:2], 1)),
        axis=-1,
    )
    base = u < kth
    d, acc = _deltas(value_fn, params, base, pi[:, None], pj[:, None])  # [P, K]
    p = size_probabilities(n)
    seg = jnp.asarray(sizes)
    m = jnp.asarray(alloc, acc)[None]
    sums = jax.vmap(lambda x: jax.ops.segment_sum(x, seg, num_segments=n - 1))(d)
    means = sums / m
    sq = jax.vmap(lambda x: jax.ops.segment_sum(x, seg, num_segments=n - 1))(
        (d - means[:, seg]) ** 2
    )
    var = sq / (m - 1)
    est = means @ jnp.asarray(p, acc)
    se = _safe_sqrt((var / m) @ jnp.asarray(p**2, acc))
    return _estimate(value_fn, params, n, est, se)


_stratified = jax.jit(_stratified_core, static_argnames=("value_fn", "n_players", "n_samples"))


def _permutation_core(value_fn, params, key, n_players, n_perms):
    n = n_players
    pi, pj = _pair_index(n)
    u = jax.random.uniform(key, (n_perms, n))
    pos = jnp.argsort(jnp.argsort(u, axis=-1), axis=-1)  # position of each player
    lim = jnp.minimum(pos[:, pi], pos[:, pj])  # [R, P]
    base = pos[:, None, :] < lim[:, :, None]  # players before both
    d, acc = _deltas(value_fn, params, base, pi[None, :], pj[None, :])  # [R, P]
    est = jnp.mean(d, axis=0)
    se = _safe_sqrt(jnp.var(d, axis=0, ddof=1) / n_perms)
    return _estimate(value_fn, params, n, est, se)


_permutation = jax.jit(_permutation_core, static_argnames=("value_fn", "n_players", "n_perms"))


def _check_common(value_fn, key, n_players, params):
    if not callable(value_fn):
        raise TypeError(f"`value_fn` must be callable, got {type(value_fn).__name__}.")
    _validate.leaves(params, name="params", keys=True)  # any shape: value_fn's business
    _validate.is_key(key)
    return _validate.python_int(n_players, name="n_players", minimum=2)


def stii_stratified(
    value_fn, params, *, n_players: int, key: KeyArray, n_samples: int
) -> STIIEstimate:
    """Size-stratified unbiased estimate of the order-2 STII of every pair.

    ``STII_ij = sum_s P(s) E[delta_ij v(S) | |S| = s]`` with ``P(s) = 2(n-1-s)/(n(n-1))``,
    ``s = 0..n-2``, and ``S`` uniform among the size-``s`` subsets of ``N - {i, j}``.
    Each pair gets ``n_samples`` draws split over the ``n - 1`` strata proportionally to
    ``P(s)`` (at least 2 per stratum); the estimate ``sum_s P(s) mean_s`` is unbiased for
    any such allocation and, unlike drawing ``s`` at random (which has exactly the
    permutation estimator's per-pair variance), removes the between-size variance.
    ``4 n_samples`` value calls per pair. ``value_fn``, ``n_players`` and ``n_samples``
    are static; ``params`` and ``key`` are traced (jitted once at module level).

    Args:
      value_fn: ``(params, mask bool[n]) -> scalar``, jittable and vmappable.
      params: The game's parameters (any pytree).
      n_players: Number of players ``n >= 2`` (no upper limit: nothing is enumerated).
      key: A PRNG key.
      n_samples: Draws per pair, ``>= 2 (n - 1)``.

    Returns:
      An :class:`STIIEstimate` ``(pairs, singles, stderr)``.

    Raises:
      TypeError: If ``value_fn`` is not callable, a leaf of ``params`` is not numeric,
        ``key`` is not a key, or a size is not a Python int.
      ValueError: If ``n_players < 2`` or ``n_samples < 2 (n_players - 1)``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> f = lambda p, m: jnp.sum(jnp.where(m, p, 0.0)) + jnp.where(m[0] & m[1], 1.0, 0.0)
      >>> est = stii_stratified(f, jnp.ones(3), n_players=3, key=jax.random.key(0),
      ...                       n_samples=4)
      >>> est.pairs.round(6).tolist()
      [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]

    References:
      Sundararajan, Dhamdhere, Agarwal, "The Shapley Taylor Interaction Index",
      ICML 2020, arXiv:1902.05622. Stratification: Maleki et al., "Bounding the
      estimation error of sampling-based Shapley value approximation", 2013.
    """
    n = _check_common(value_fn, key, n_players, params)
    k = _validate.python_int(n_samples, name="n_samples")
    if k < 2 * (n - 1):
        raise ValueError(
            f"`n_samples` must be >= 2 (n_players - 1) = {2 * (n - 1)} (two draws per size "
            f"stratum), got n_samples={k}."
        )
    return _stratified(value_fn, params, key, n_players=n, n_samples=k)


def stii_permutation(
    value_fn, params, *, n_players: int, key: KeyArray, n_perms: int
) -> STIIEstimate:
    """Permutation estimate of the order-2 STII of every pair: ``E_pi[delta_ij v(S_pi)]``.

    ``S_pi`` is the set of players preceding both ``i`` and ``j`` in a uniform random
    permutation ``pi``; the ``n_perms`` permutations are shared by all pairs (so pair
    estimates are correlated, each one unbiased). ``4 n_perms`` value calls per pair.
    ``value_fn``, ``n_players`` and ``n_perms`` are static; ``params`` and ``key`` traced.

    Args:
      value_fn: ``(params, mask bool[n]) -> scalar``, jittable and vmappable.
      params: The game's parameters (any pytree).
      n_players: Number of players ``n >= 2``.
      key: A PRNG key.
      n_perms: Number of permutations, ``>= 2`` (the standard error needs two).

    Returns:
      An :class:`STIIEstimate` ``(pairs, singles, stderr)``.

    Raises:
      TypeError: If ``value_fn`` is not callable, a leaf of ``params`` is not numeric,
        ``key`` is not a key, or a size is not a Python int.
      ValueError: If ``n_players < 2`` or ``n_perms < 2``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> f = lambda p, m: jnp.sum(jnp.where(m, p, 0.0)) + jnp.where(m[0] & m[1], 1.0, 0.0)
      >>> est = stii_permutation(f, jnp.ones(3), n_players=3, key=jax.random.key(0),
      ...                        n_perms=8)
      >>> float(est.pairs[0, 1]), float(est.pairs[1, 2])
      (1.0, 0.0)

    References:
      Sundararajan, Dhamdhere, Agarwal, "The Shapley Taylor Interaction Index",
      ICML 2020, arXiv:1902.05622.
    """
    n = _check_common(value_fn, key, n_players, params)
    r = _validate.python_int(n_perms, name="n_perms", minimum=2)
    return _permutation(value_fn, params, key, n_players=n, n_perms=r)
