"""Banzhaf interaction index (order 2): exact through the Moebius transform, and sampled.

HBI (Jin et al., CVPR 2023), PST's predecessor, scores cross-modal token pairs with the
Banzhaf interaction ``B_ij = 2^{-(n-2)} sum_{S subset N-{i,j}} delta_ij v(S)`` (every
coalition of the other players equally likely), estimated by Monte Carlo. It is the
comparison the spec asks of the STII engine (§3.3); both share the coalition order of
:func:`all_masks` and the value functions of :func:`game_values`.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray
from jaxkit.retrieval import _sampling, _stii


class Banzhaf(NamedTuple):
    """Exact order-2 Banzhaf interaction indices of a game.

    Attributes:
      pairs: ``[..., n, n]`` symmetric pair indices ``B_ij`` (zero diagonal).
      singles: ``[..., n]`` Banzhaf values ``B_i = 2^{-(n-1)} sum_{S subset N-{i}}
        (v(S + i) - v(S))``.
    """

    pairs: Float[Array, "*batch n n"]
    singles: Float[Array, "*batch n"]


class BanzhafEstimate(NamedTuple):
    """A sampled order-2 Banzhaf interaction index.

    Attributes:
      pairs: ``[n, n]`` symmetric estimate of ``B_ij`` (zero diagonal).
      stderr: ``[n, n]`` estimated standard error of ``pairs`` (zero diagonal).
    """

    pairs: Float[Array, "n n"]
    stderr: Float[Array, "n n"]


@jax.jit
def _banzhaf_core(values):
    a, b, size = _stii._moebius_bits(values)
    n, acc = b.shape[-1], b.dtype
    lead = (1,) * (a.ndim - 1)
    half = jnp.exp2(-jnp.maximum(size - 1, 0).astype(acc)).reshape(*lead, 2**n)
    pair_w = jnp.where(size >= 2, 2.0, 0.0).astype(acc).reshape(*lead, 2**n)
    hi = jax.lax.Precision.HIGHEST
    # a_T / 2^{|T|-2} over T containing both, a_T / 2^{|T|-1} over T containing i
    pairs = jnp.einsum("...t,ti,tj->...ij", a * half * pair_w, b, b, precision=hi)
    pairs = pairs * (1 - jnp.eye(n, dtype=acc)).reshape(*lead, n, n)
    singles = jnp.einsum("...t,ti->...i", a * half, b, precision=hi)
    return Banzhaf(pairs.astype(values.dtype), singles.astype(values.dtype))


def banzhaf_exact(values: Float[ArrayLike, "*batch masks"]) -> Banzhaf:
    """Exact order-2 Banzhaf interaction index of every pair, and the Banzhaf values.

    With the Moebius coefficients ``a`` of ``v`` (:func:`moebius_transform`),
    ``B_ij = sum_{T superset of {i,j}} a(T) / 2^{|T|-2}`` and
    ``B_i = sum_{T containing i} a(T) / 2^{|T|-1}``, both from one pass over the
    coalitions (``O(n^2 2^n)``), as :func:`stii_exact` does with its own weights.
    Batched over leading axes, jitted once at module level; f32 accumulation (f64 for
    f64 input).

    Args:
      values: ``values[..., m]`` = v(coalition ``m``), bit ``i`` of ``m`` = player ``i``;
        ``2 <= n <= 20`` players.

    Returns:
      A :class:`Banzhaf` ``(pairs [..., n, n], singles [..., n])`` in the input dtype.

    Raises:
      TypeError: If ``values`` is not floating or its last axis is not a power of two.
      ValueError: If ``n < 2`` or ``n > 20`` players.

    Example:
      >>> import jax.numpy as jnp
      >>> out = banzhaf_exact(jnp.array([0.0, 1.0, 2.0, 4.0]))  # a({0,1}) = 1
      >>> out.pairs.tolist(), out.singles.tolist()
      ([[0.0, 1.0], [1.0, 0.0]], [1.5, 2.5])

    References:
      Grabisch, Roubens, "An axiomatic approach to the concept of interaction among
      players in cooperative games", Int. J. Game Theory 1999; Jin et al., "Video-Text
      as Game Players: Hierarchical Banzhaf Interaction for Cross-Modal Representation
      Learning", CVPR 2023.
    """
    n = _stii._n_from_values(values)
    if n < 2:
        raise ValueError(
            f"`values` describes n = {n} player(s); pair interactions need n >= 2 "
            f"(last axis of length >= 4)."
        )
    return _banzhaf_core(jnp.asarray(values))


def _mc_core(value_fn, params, key, n_players, n_samples):
    n = n_players
    pi, pj = _sampling._pair_index(n)
    base = jax.random.bernoulli(key, 0.5, (len(pi), n_samples, n))
    block = jax.nn.one_hot(pi, n, dtype=bool) | jax.nn.one_hot(pj, n, dtype=bool)
    base = base & ~block[:, None, :]  # i and j never join S
    d, _ = _sampling._deltas(value_fn, params, base, pi[:, None], pj[:, None])  # [P, K]
    est = jnp.mean(d, axis=-1)
    se = _sampling._safe_sqrt(jnp.var(d, axis=-1, ddof=1) / n_samples)
    dt = jnp.result_type(est)
    return BanzhafEstimate(_sampling._symmetric(est, n, dt), _sampling._symmetric(se, n, dt))


_mc = jax.jit(_mc_core, static_argnames=("value_fn", "n_players", "n_samples"))


def banzhaf_mc(
    value_fn, params, *, n_players: int, key: KeyArray, n_samples: int = 100
) -> BanzhafEstimate:
    """Monte-Carlo Banzhaf interaction of every pair (HBI's estimator; unbiased).

    For each pair, ``n_samples`` coalitions ``S`` of the other players, each player in
    ``S`` with probability 1/2 independently: the mean of ``delta_ij v(S)`` is unbiased
    for ``B_ij``. ``4 n_samples`` value calls per pair (HBI draws 100). ``value_fn``,
    ``n_players`` and ``n_samples`` are static; ``params`` and ``key`` are traced.

    Args:
      value_fn: ``(params, mask bool[n]) -> scalar``, jittable and vmappable.
      params: The game's parameters (any pytree).
      n_players: Number of players ``n >= 2`` (nothing is enumerated).
      key: A PRNG key.
      n_samples: Coalitions per pair, ``>= 2`` (the standard error needs two).

    Returns:
      A :class:`BanzhafEstimate` ``(pairs, stderr)``.

    Raises:
      TypeError: If ``value_fn`` is not callable, a leaf of ``params`` is not numeric,
        ``key`` is not a key, or a size is not a Python int.
      ValueError: If ``n_players < 2`` or ``n_samples < 2``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> f = lambda p, m: jnp.sum(jnp.where(m, p, 0.0)) + jnp.where(m[0] & m[1], 1.0, 0.0)
      >>> est = banzhaf_mc(f, jnp.ones(3), n_players=3, key=jax.random.key(0), n_samples=4)
      >>> float(est.pairs[0, 1]), float(est.pairs[1, 2])
      (1.0, 0.0)
    """
    n = _sampling._check_common(value_fn, key, n_players, params)
    k = _validate.python_int(n_samples, name="n_samples", minimum=2)
    return _mc(value_fn, params, key, n_players=n, n_samples=k)
