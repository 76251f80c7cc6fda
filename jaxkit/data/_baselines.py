"""Batching baselines for HOBIT: random, TAS-style k-means, naive nearest-neighbour.

All return a permutation of ``range(n)`` whose consecutive blocks of ``batch_size``
are the batches (``batch_size`` must divide ``n``), with batch order shuffled. Jitted.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxkit import _validate as V
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.data._hobit import SparseHardness, _check_emb, _knn_graph_jit
from jaxkit.data._permute import _batches_jit, check_batch_size, pool_sizes


def _random(key, *, n):
    return jax.random.permutation(key, n).astype(jnp.int32)


_random_jit = jax.jit(_random, static_argnames=("n",))


def random_batches(n: int, *, key: KeyArray, batch_size: int) -> Int[Array, " n"]:
    """Uniformly random batches: a random permutation of ``range(n)``."""
    n = V.python_int(n, name="n", minimum=1)
    check_batch_size(n, batch_size)
    V.is_key(key)
    return _random_jit(key, n=n)


def _kmeanspp(x, key, n_clusters):
    """k-means++ seeding: each next centre drawn with probability proportional to D^2."""
    keys = jax.random.split(key, n_clusters)
    first = x[jax.random.randint(keys[0], (), 0, x.shape[0])]
    cent = jnp.zeros((n_clusters, x.shape[1]), x.dtype).at[0].set(first)
    d2 = jnp.sum((x - first[None, :]) ** 2, axis=1)

    def body(c, st):
        cent, d2 = st
        logits = jnp.log(jnp.maximum(d2, 1e-30))
        nxt = x[jax.random.categorical(keys[c], logits)]
        return cent.at[c].set(nxt), jnp.minimum(d2, jnp.sum((x - nxt[None, :]) ** 2, axis=1))

    return jax.lax.fori_loop(1, n_clusters, body, (cent, d2))[0]


def _kmeans(q, key, *, batch_size, n_clusters, iters):
    n = q.shape[0]
    x = q.astype(accumulation_dtype(q.dtype))
    k_init, k_perm, k_lab, k_order = jax.random.split(key, 4)
    cent = _kmeanspp(x, k_init, n_clusters)

    def assign(c):
        dist = jnp.sum(c * c, axis=1)[None, :] - 2.0 * x @ c.T
        return jnp.argmin(dist, axis=1)

    def lloyd(_, c):
        lab = assign(c)
        oh = jax.nn.one_hot(lab, n_clusters, dtype=x.dtype)
        cnt = jnp.sum(oh, axis=0)
        new = (oh.T @ x) / jnp.maximum(cnt, 1.0)[:, None]
        return jnp.where(cnt[:, None] > 0, new, c)

    lab = assign(jax.lax.fori_loop(0, iters, lloyd, cent))
    relabel = jax.random.permutation(k_lab, n_clusters)[lab]  # random cluster order
    shuffled = jax.random.permutation(k_perm, n)
    flat = shuffled[jnp.argsort(relabel[shuffled], stable=True)].astype(jnp.int32)
    nb = n // batch_size
    return flat.reshape(nb, batch_size)[jax.random.permutation(k_order, nb)].reshape(-1)


_kmeans_jit = jax.jit(_kmeans, static_argnames=("batch_size", "n_clusters", "iters"))


def kmeans_batches(
    q: Float[Array, "n dim"],
    *,
    key: KeyArray,
    batch_size: int,
    n_clusters: int | None = None,
    iters: int = 10,
) -> Int[Array, " n"]:
    """TAS-style batches: k-means on the queries, batches filled cluster by cluster.

    Lloyd's algorithm (``iters`` steps from k-means++ seeding) with ``n_clusters``
    (default ``n // batch_size``); examples sorted by cluster (random order within and
    across clusters), cut into consecutive batches, batch order shuffled.
    """
    V.ndim(q, 2, name="q")
    V.floating(q, name="q")
    n = q.shape[0]
    bsz = check_batch_size(n, batch_size)
    V.is_key(key)
    nc = n // bsz if n_clusters is None else n_clusters
    nc = V.python_int(nc, name="n_clusters", minimum=1)
    if nc > n:
        raise ValueError(f"`n_clusters` must be <= n={n}, got {nc}.")
    iters = V.python_int(iters, name="iters", minimum=0)
    return _kmeans_jit(q, key, batch_size=bsz, n_clusters=nc, iters=iters)


def nn_batches(
    q: Float[Array, "n dim"],
    d: Float[Array, "n dim"],
    *,
    key: KeyArray,
    batch_size: int,
    k: int = 64,
    tau: RealScalarLike = 0.05,
    pool_factor: int = 4,
) -> Int[Array, " n"]:
    """Naive nearest-neighbour batching: HOBIT's machinery with no false-negative filter.

    The kNN graph and the parallel greedy of :func:`hobit_batches` with the margin
    filter, duplicate ids and contradiction checks all switched off (``margin=-inf``)
    and the gains summed over each batch's own queries (``ground="batch"``): every step
    adds the neighbour that most raises the batch's in-batch loss, false negatives
    included. (With the pool objective's gains, as before, its batches were less hard
    than k-means' on the demo: mean in-batch InfoNCE 1.00 vs 1.77 after one epoch.)
    """
    _check_emb(q, d)
    n = q.shape[0]
    bsz = check_batch_size(n, batch_size)
    V.is_key(key)
    k = V.python_int(k, name="k", minimum=1)
    if k >= n:
        raise ValueError(f"`k` must be < n={n}, got k={k}.")
    p, p2 = pool_sizes(pool_factor, bsz, k, n)
    q = V.guard_positive(q, tau, name="tau")
    g: SparseHardness = _knn_graph_jit(q, d, None, tau, -jnp.inf, k=k, block=min(1024, n))
    out = _batches_jit(
        g.nbr, g.w, q, d, None, key, -jnp.inf, 1.0,
        batch_size=bsz, p=p, p2=p2, rounds=3, refills=2, waves=min(4, n // bsz), obj="log",
        ground="batch",
    )  # fmt: skip
    return out.perm


__all__ = ["kmeans_batches", "nn_batches", "random_batches"]
