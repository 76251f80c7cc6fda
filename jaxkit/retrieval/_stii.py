"""Exact Shapley-Taylor interaction index (order 2) through a fast Moebius transform.

Coalitions are integer masks: player ``i`` is in coalition ``m`` iff bit ``i`` of ``m``
is set, so a game on ``n`` players is a value vector of length ``2**n``. The Moebius
transform is ``n`` butterfly passes over the bit axes (``O(n 2^n)``); the order-2 STII of
every pair then follows from one weighted Gram product of the mask matrix
(Sundararajan, Dhamdhere, Agarwal, ICML 2020). PST (reconstructed from its predecessors
HBI and TMR) uses it to score cross-modal token pairs.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype

MAX_PLAYERS = 20


class STII(NamedTuple):
    """Order-2 Shapley-Taylor interaction indices of a game.

    Attributes:
      pairs: ``[..., n, n]`` symmetric matrix of pair indices ``STII_ij`` (zero diagonal).
      singles: ``[..., n]`` singleton indices ``STII_i = v({i}) - v(empty)``.
    """

    pairs: Float[Array, "*batch n n"]
    singles: Float[Array, "*batch n"]


def all_masks(n_players: int) -> Bool[np.ndarray, "masks n"]:
    """Return the ``[2**n, n]`` boolean matrix whose row ``m`` holds the bits of ``m``.

    Row ``m`` is coalition ``{i : bit i of m is set}``; this is the coalition order of
    every function in this module (the value vector's index). Host-side NumPy (a constant
    for a static ``n_players``); not jitted.

    Args:
      n_players: Number of players, ``1 <= n_players <= 20``.

    Returns:
      A NumPy ``bool`` array of shape ``[2**n_players, n_players]``.

    Raises:
      TypeError: If ``n_players`` is not a Python int.
      ValueError: If ``n_players`` is outside ``[1, 20]``.

    Example:
      >>> all_masks(2).astype(int).tolist()
      [[0, 0], [1, 0], [0, 1], [1, 1]]
    """
    n = _validate.python_int(n_players, name="n_players", minimum=1)
    _check_max(n, "n_players")
    return _masks_np(n)


def _masks_np(n: int) -> np.ndarray:
    idx = np.arange(2**n, dtype=np.int64)
    return ((idx[:, None] >> np.arange(n)) & 1).astype(bool)


def _check_max(n: int, name: str) -> None:
    if n > MAX_PLAYERS:
        raise ValueError(
            f"`{name}` implies n = {n} players; exact Shapley-Taylor enumerates all 2**n "
            f"coalitions and is limited to n <= {MAX_PLAYERS} (use stii_stratified or "
            "stii_permutation for larger games)."
        )


def _n_from_values(values, name: str = "values") -> int:
    _validate.floating(values, name=name)
    _validate.min_ndim(values, 1, name=name)
    size = jnp.shape(values)[-1]
    n = int(size).bit_length() - 1
    if size < 1 or 2**n != size:
        raise TypeError(
            f"`{name}` must have a last axis of length 2**n (one value per coalition), "
            f"got length {size}."
        )
    _check_max(n, name)
    return n


def _moebius(v: Array, n: int) -> Array:
    """``n`` butterfly passes: ``a[.., bit i = 1] -= a[.., bit i = 0]`` for each bit."""
    batch = v.shape[:-1]
    for i in range(n):
        x = v.reshape(*batch, 2 ** (n - 1 - i), 2, 2**i)
        x0, x1 = x[..., 0, :], x[..., 1, :]
        v = jnp.stack([x0, x1 - x0], axis=-2).reshape(*batch, 2**n)
    return v


@jax.jit
def _moebius_core(values):
    n = values.shape[-1].bit_length() - 1
    acc = accumulation_dtype(values.dtype)
    return _moebius(values.astype(acc), n).astype(values.dtype)


def moebius_transform(values: Float[ArrayLike, "*batch masks"]) -> Float[Array, "*batch masks"]:
    """Moebius transform ``a(T) = sum_{S subset T} (-1)^{|T|-|S|} v(S)`` of a game.

    ``values[..., m]`` is ``v`` of coalition ``m`` (bit ``i`` = player ``i``, see
    :func:`all_masks`); the transform runs as ``n`` in-place butterfly passes, one per
    bit axis (``O(n 2^n)`` instead of ``O(3^n)``), accumulating in f32 (f64 for f64
    input) and batched over leading axes. Jitted once at module level.

    Args:
      values: Game values over all ``2**n`` coalitions, ``1 <= n <= 20``.

    Returns:
      The Moebius coefficients ``a`` in the same coalition order and dtype.

    Raises:
      TypeError: If ``values`` is not floating or its last axis is not a power of two.
      ValueError: If that implies more than 20 players.

    Example:
      >>> import jax.numpy as jnp
      >>> moebius_transform(jnp.array([0.0, 1.0, 2.0, 4.0])).tolist()
      [0.0, 1.0, 2.0, 1.0]

    References:
      Grabisch, Marichal, Roubens, "Equivalent representations of set functions",
      Math. Oper. Res. 2000.
    """
    n = _n_from_values(values)
    if n < 1:
        raise TypeError("`values` must describe at least one player (length >= 2).")
    return _moebius_core(jnp.asarray(values))


def _moebius_bits(values):
    """Moebius coefficients, the 0/1 mask matrix (accumulation dtype) and coalition sizes."""
    n = values.shape[-1].bit_length() - 1
    acc = accumulation_dtype(values.dtype)
    a = _moebius(values.astype(acc), n)
    bits = (jnp.arange(2**n, dtype=jnp.int32)[:, None] >> jnp.arange(n, dtype=jnp.int32)[None]) & 1
    return a, bits.astype(acc), jnp.sum(bits, axis=-1)


@jax.jit
def _stii_core(values):
    a, b, size = _moebius_bits(values)
    n, acc = b.shape[-1], b.dtype
    npairs = jnp.maximum(size * (size - 1), 1).astype(acc)
    inv_pairs = jnp.where(size >= 2, 2.0 / npairs, 0.0)
    lead = (1,) * (a.ndim - 1)
    w = a * inv_pairs.reshape(*lead, 2**n)  # a_T / C(|T|, 2) for |T| >= 2, else 0
    pairs = jnp.einsum("...t,ti,tj->...ij", w, b, b, precision=jax.lax.Precision.HIGHEST)
    pairs = pairs * (1 - jnp.eye(n, dtype=acc)).reshape(*lead, n, n)
    singles = a[..., 2 ** jnp.arange(n)]
    return STII(pairs.astype(values.dtype), singles.astype(values.dtype))


def stii_exact(values: Float[ArrayLike, "*batch masks"]) -> STII:
    """Exact order-2 Shapley-Taylor interaction index of every pair of players.

    With the Moebius coefficients ``a`` of ``v`` (:func:`moebius_transform`),
    ``STII_ij = sum_{T superset of {i,j}} a(T) / C(|T|, 2)`` and ``STII_i = a({i})``;
    equivalently ``STII_ij = (2/n) sum_{S subset N-{i,j}} delta_ij v(S) / C(n-1, |S|)``.
    All pairs come from one product ``B^T diag(w) B`` with ``B`` the ``[2^n, n]`` mask
    matrix and ``w_T = a_T / C(|T|, 2)``: ``O(n^2 2^n)`` work from a single pass over the
    coalitions. Efficiency holds: ``sum_i STII_i + sum_{i<j} STII_ij = v(N) - v(empty)``.
    Batched over leading axes (one game per row) and jitted once at module level;
    accumulates in f32 (f64 for f64 input). Use :func:`game_values` to tabulate a
    value function over all coalitions.

    Args:
      values: ``values[..., m]`` = v(coalition ``m``), bit ``i`` of ``m`` = player ``i``;
        ``2 <= n <= 20`` players (the last axis has length ``2**n``).

    Returns:
      An :class:`STII` ``(pairs [..., n, n], singles [..., n])`` in the input dtype.

    Raises:
      TypeError: If ``values`` is not floating or its last axis is not a power of two.
      ValueError: If ``n < 2`` or ``n > 20`` players.

    Example:
      >>> import jax.numpy as jnp
      >>> v = jnp.array([0.0, 1.0, 2.0, 4.0])  # a({0,1}) = 1
      >>> out = stii_exact(v)
      >>> out.pairs.tolist(), out.singles.tolist()
      ([[0.0, 1.0], [1.0, 0.0]], [1.0, 2.0])

    References:
      Sundararajan, Dhamdhere, Agarwal, "The Shapley Taylor Interaction Index",
      ICML 2020, arXiv:1902.05622.
    """
    n = _n_from_values(values)
    if n < 2:
        raise ValueError(
            f"`values` describes n = {n} player(s); pair interactions need n >= 2 "
            f"(last axis of length >= 4)."
        )
    return _stii_core(jnp.asarray(values))


def _game_values_core(value_fn, params, n_players):
    masks = jnp.asarray(_masks_np(n_players))
    return jax.vmap(lambda m: value_fn(params, m))(masks)


_game_values = jax.jit(_game_values_core, static_argnames=("value_fn", "n_players"))


def game_values(value_fn, params, *, n_players: int) -> Float[Array, " masks"]:
    """Tabulate ``value_fn(params, mask)`` over all ``2**n_players`` coalitions.

    ``value_fn`` maps a pytree of parameters and a ``bool [n_players]`` coalition mask to
    a scalar; it is ``vmap``-ed over the rows of :func:`all_masks`. ``value_fn`` is a
    static argument (pass the same function object to hit the compile cache); ``params``
    are traced, so batches of games go through ``jax.vmap`` over ``params``.

    Args:
      value_fn: ``(params, mask) -> scalar``, jittable and vmappable.
      params: The game's parameters (any pytree of arrays).
      n_players: Number of players, ``1 <= n_players <= 20``.

    Returns:
      The ``[2**n_players]`` value vector, ready for :func:`stii_exact`.

    Raises:
      TypeError: If ``value_fn`` is not callable or ``n_players`` is not a Python int.
      ValueError: If ``n_players`` is outside ``[1, 20]``.

    Example:
      >>> import jax.numpy as jnp
      >>> f = lambda p, m: jnp.sum(jnp.where(m, p, 0.0))
      >>> game_values(f, jnp.array([1.0, 2.0]), n_players=2)
      Array([0., 1., 2., 3.], dtype=float32)
    """
    if not callable(value_fn):
        raise TypeError(f"`value_fn` must be callable, got {type(value_fn).__name__}.")
    n = _validate.python_int(n_players, name="n_players", minimum=1)
    _check_max(n, "n_players")
    return _game_values(value_fn, params, n_players=n)
