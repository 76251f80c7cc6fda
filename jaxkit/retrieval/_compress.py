"""PST's token compressor: DPC-KNN clustering and weighted merging of tokens.

The segment stage of PST's pyramid compresses ``N`` tokens into ``ceil(ratio * N)`` by
density-peak clustering with k nearest neighbours (DPC-KNN, the TCFormer / HBI lineage:
HBI's ``models/cluster.py``), then merges each cluster into one token with learned
importance weights. For tokens ``x_i`` of width ``D``:

- distance ``d_ij = ||x_i - x_j|| / sqrt(D)``;
- density ``rho_i = exp(-mean_{j in kNN(i)} d_ij^2)``, the k nearest *including* ``i``
  itself (as the authors' lineage computes it: ``topk`` over the row of the distance
  matrix); compared and ranked in log space (``log rho_i + log delta_i``), the same order
  without the float underflow that gives every token of far-apart data a zero density;
- ``delta_i = min_{j denser than i} d_ij``, and for the densest token the largest distance
  between two tokens of the sequence;
- centres: the ``n_centers`` largest scores ``rho_i * delta_i``; each token joins its
  nearest centre (a centre always joins itself);
- merged token ``sum_i w_i x_i / sum_i w_i`` over the cluster, ``w_i = exp(log_weight_i)``.

Decisions of ours (the spec and the lineage leave them open), marked [R]:

- ties in density are broken by position (the earlier token counts as denser), not by
  the lineage's uniform noise of 1e-6, so the clustering needs no key and is exact;
- the centre slots are ordered by the centres' positions (not by score), so merged tokens
  keep the sequence order of their centres, which a time-ordered pyramid needs;
- padding (``mask`` False) is never a neighbour, a denser token or a centre, and joins no
  cluster (``assign = -1``); a sequence with fewer valid tokens than ``n_centers`` leaves
  the last slots empty (``Clusters.valid`` False, merged token 0).

The rule is not scale-invariant (the density is ``exp`` of a squared distance): feed
normalised tokens (after a LayerNorm, as the lineage's are); at large scales the density
term dominates the score. The assignment is discrete (computed without gradients);
gradients reach the tokens and the importance weights through :func:`merge_tokens`.

References:
  W. Zeng et al., "Not All Tokens Are Equal: Human-centric Visual Analysis via Token
  Clustering Transformer" (TCFormer), CVPR 2022; P. Jin et al., "Video-Text as Game
  Players: Hierarchical Banzhaf Interaction for Cross-Modal Representation Learning"
  (HBI), CVPR 2023 (code jpthu17/HBI); M. Du et al., "Study on density peaks clustering
  based on k-nearest neighbors and principal component analysis", Knowledge-Based
  Systems 2016 (DPC-KNN).
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype


class Clusters(NamedTuple):
    """Result of :func:`dpc_knn`.

    Attributes:
      assign: ``int32 [*batch, N]``: the slot in ``[0, n_centers)`` of each token's
        cluster, ``-1`` for padding.
      centers: ``int32 [*batch, n_centers]``: the position of each slot's centre token, in
        increasing order; ``-1`` for an empty slot.
      valid: ``bool [*batch, n_centers]``: the slot holds a cluster.
    """

    assign: Array
    centers: Array
    valid: Array


def _sq_dists(x: Array) -> Array:
    """``||x_i - x_j||^2 / D`` ``[N, N]`` from the Gram matrix (zero diagonal, >= 0)."""
    sq = jnp.sum(x * x, axis=-1)
    d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
    return jnp.where(jnp.eye(x.shape[0], dtype=bool), 0.0, d2) / x.shape[-1]


def _batched(one, n_lead: int):
    """``one`` vmapped over the flattened leading axes (of arg 0, beyond its last ``n_lead``)."""

    def run(*args):
        lead = args[0].shape[: args[0].ndim - n_lead]
        size = math.prod(lead)  # not -1: a zero-size trailing shape makes -1 ambiguous
        flat = [a.reshape(size, *a.shape[len(lead) :]) for a in args]
        out = jax.vmap(one)(*flat)
        return jax.tree.map(lambda o: o.reshape(*lead, *o.shape[1:]), out)

    return run


def _dpc_knn_one(x, mask, n_centers, k):
    """One sequence ``x [N, D]``, ``mask [N]``."""
    x = jax.lax.stop_gradient(x.astype(accumulation_dtype(x.dtype)))
    n = x.shape[0]
    pos = jnp.arange(n, dtype=jnp.int32)
    d2 = _sq_dists(x)
    both = mask[:, None] & mask[None, :]
    # density: mean squared distance to the k nearest valid tokens (self included)
    near = -jax.lax.top_k(-jnp.where(both, d2, jnp.inf), min(k, n))[0]
    got = jnp.isfinite(near)
    cnt = jnp.maximum(jnp.sum(got, -1), 1).astype(x.dtype)
    # log density: exp(-mean) would underflow to 0 for every token of far-apart data
    # (mean d^2 above ~100 in f32) and leave the centres to the tie-break alone
    log_rho = -jnp.sum(jnp.where(got, near, 0.0), -1) / cnt
    # delta: distance to the nearest denser token (ties: the earlier position is denser)
    dist = jnp.sqrt(d2)
    denser = (log_rho[None, :] > log_rho[:, None]) | (
        (log_rho[None, :] == log_rho[:, None]) & (pos[None, :] < pos[:, None])
    )
    denser = denser & both
    far = jnp.max(jnp.where(both, dist, 0.0))
    delta = jnp.min(jnp.where(denser, dist, jnp.inf), axis=-1)
    delta = jnp.where(jnp.isfinite(delta), delta, far)
    # rank by log(rho * delta); a valid token with delta = 0 (a duplicate) ranks below every
    # other valid token but above padding
    log_score = log_rho + jnp.log(jnp.where(delta > 0, delta, 1.0))
    lowest = jnp.finfo(x.dtype).min
    score = jnp.where(mask, jnp.where(delta > 0, log_score, lowest), -jnp.inf)
    top_score, top = jax.lax.top_k(score, n_centers)
    centers = jnp.sort(jnp.where(top_score > -jnp.inf, top, n + top))  # valid first
    valid = centers < n
    centers = jnp.where(valid, centers, -1).astype(jnp.int32)
    to_c = jnp.where(valid[None, :], d2[:, jnp.maximum(centers, 0)], jnp.inf)  # [N, C]
    is_c = (pos[:, None] == centers[None, :]) & valid[None, :]
    assign = jnp.where(jnp.any(is_c, -1), jnp.argmax(is_c, -1), jnp.argmin(to_c, -1))
    assign = jnp.where(mask, assign, -1).astype(jnp.int32)
    return Clusters(assign, centers, valid)


def _dpc_knn(x, mask, n_centers, k):
    one = functools.partial(_dpc_knn_one, n_centers=n_centers, k=k)
    return _batched(one, 2)(x, mask)


_dpc_knn_jit = jax.jit(_dpc_knn, static_argnames=("n_centers", "k"))


def _check_mask(x: Array, mask, name: str = "mask") -> Array:
    if mask is None:
        return jnp.ones(x.shape[:-1], bool)
    _validate.boolean(mask, name=name)
    _validate.shape(mask, x.shape[:-1], name=name)
    return jnp.asarray(mask)


def dpc_knn(
    x: Float[ArrayLike, "*batch n d"],
    mask: Bool[ArrayLike, "*batch n"] | None = None,
    *,
    n_centers: int,
    k: int = 3,
) -> Clusters:
    """Cluster tokens by DPC-KNN (density peaks with k nearest neighbours).

    See the module docstring for the rule and the decisions marked [R]. Batched over
    leading axes; jitted; ``O(N^2 D)`` per sequence (one Gram matrix). Non-finite tokens
    raise (they would make every distance NaN and the clustering arbitrary).

    Args:
      x: Tokens.
      mask: Valid tokens (``None``: all valid).
      n_centers: Clusters per sequence, ``1 <= n_centers <= N`` (static).
      k: Neighbours in the density, self included (static, ``>= 1``; the lineage's 3;
        more than the valid tokens averages over those there are).

    Returns:
      :class:`Clusters` (assignments, centre positions, slot validity).

    Raises:
      TypeError: ``x`` not a floating array of rank >= 2 with ``N >= 1`` and ``D >= 1``, or
        ``mask`` not a boolean array of shape ``x.shape[:-1]``.
      ValueError: ``n_centers`` outside ``[1, N]``, ``k < 1``, or a non-finite token
        (under ``jit`` a runtime error).

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
      >>> dpc_knn(x, n_centers=2, k=2).assign.tolist()
      [0, 0, 1, 1]
    """
    _validate.floating(x, name="x")
    _validate.min_ndim(x, 2, name="x")
    x = jnp.asarray(x)
    n = x.shape[-2]
    if n < 1:
        raise TypeError(f"`x` must hold at least one token, got shape {x.shape}.")
    # distances are divided by D: no features would make them NaN
    _validate.nonempty(x, name="x", axis=-1, what="feature")
    c = _validate.python_int(n_centers, name="n_centers", minimum=1)
    if c > n:
        raise ValueError(f"`n_centers` must be at most the {n} tokens of `x`, got {c}.")
    k = _validate.python_int(k, name="k", minimum=1)
    mask = _check_mask(x, mask)
    x = _validate.error_if(
        x, _validate.any_nonfinite_where(x, mask[..., None]), "`x` has a non-finite valid token."
    )
    return _dpc_knn_jit(x, mask, n_centers=c, k=k)


def _merge_one(x, assign, log_weight, n_centers):
    """One sequence ``x [N, D]``, ``assign [N]``, ``log_weight [N]``."""
    acc = accumulation_dtype(x.dtype)
    member = assign[:, None] == jnp.arange(n_centers, dtype=assign.dtype)[None, :]  # [N, C]
    lw = jnp.where(member, log_weight.astype(acc)[:, None], -jnp.inf)
    top = jnp.max(lw, axis=0)
    top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
    e = jnp.where(member, jnp.exp(lw - top[None, :]), 0.0)
    tot = jnp.sum(e, axis=0)
    w = e / jnp.where(tot > 0, tot, 1.0)[None, :]
    xs = jnp.where((assign >= 0)[:, None], x.astype(acc), 0.0)  # padding never leaks (NaN)
    return (w.T @ xs).astype(x.dtype)


def _merge(x, assign, log_weight, n_centers):
    one = functools.partial(_merge_one, n_centers=n_centers)
    return _batched(one, 2)(x, assign, log_weight)


_merge_jit = jax.jit(_merge, static_argnames=("n_centers",))


def merge_tokens(
    x: Float[ArrayLike, "*batch n d"],
    assign: Int[ArrayLike, "*batch n"],
    log_weight: Float[ArrayLike, "*batch n"] | None = None,
    *,
    n_centers: int,
) -> Float[Array, "*batch n_centers d"]:
    """Merge each cluster into its importance-weighted mean token.

    ``merged_c = sum_{i: assign_i = c} w_i x_i / sum_{i: assign_i = c} w_i`` with
    ``w_i = exp(log_weight_i)`` (the lineage's ``exp(MLP(x_i))``), a softmax within each
    cluster, so any finite log-weights are safe. Tokens with ``assign = -1`` join no
    cluster and their values never matter (NaN padding is fine); a slot without tokens
    gives 0. Differentiable in ``x`` and ``log_weight``;
    jitted; a batched one-hot product (``O(N C D)``), no scatter.

    Args:
      x: Tokens.
      assign: Cluster slot per token in ``[0, n_centers)`` or ``-1`` (from :func:`dpc_knn`).
      log_weight: Log importance per token (``None``: plain means).
      n_centers: Number of slots (static).

    Returns:
      Merged tokens ``[*batch, n_centers, D]`` in ``x``'s dtype.

    Raises:
      TypeError: ``x`` not floating, ``assign`` not integer, or shapes that do not match.
      ValueError: ``n_centers < 1``, an id outside ``[-1, n_centers)`` or a non-finite
        ``log_weight`` of a member (under ``jit`` runtime errors).

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([[1.0], [3.0], [10.0]])
      >>> merge_tokens(x, jnp.array([0, 0, 1]), n_centers=2)[:, 0].tolist()
      [2.0, 10.0]
    """
    _validate.floating(x, name="x")
    _validate.min_ndim(x, 2, name="x")
    x = jnp.asarray(x)
    c = _validate.python_int(n_centers, name="n_centers", minimum=1)
    _validate.integer(assign, name="assign")
    _validate.shape(assign, x.shape[:-1], name="assign")
    assign = jnp.asarray(assign)
    if log_weight is None:
        log_weight = jnp.zeros(x.shape[:-1], x.dtype)
    _validate.floating(log_weight, name="log_weight")
    _validate.shape(log_weight, x.shape[:-1], name="log_weight")
    log_weight = jnp.asarray(log_weight)
    assign = _validate.error_if(
        assign,
        _validate.any_outside(assign, -1, c - 1),
        f"`assign` must lie in [-1, {c}) for n_centers={c}.",
    )
    log_weight = _validate.error_if(
        log_weight,
        _validate.any_nonfinite_where(log_weight, assign >= 0),
        "`log_weight` has a non-finite entry for a token in a cluster.",
    )
    return _merge_jit(x, assign, log_weight, n_centers=c)
