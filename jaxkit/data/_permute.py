"""HOBIT epoch permutation: jitted parallel greedy over all batches at once.

**[recon]** (spec ``training.md`` section 3.2, "jittable fixed-shape version"). All
``n // B`` batches grow in parallel rounds: each batch scores its candidate pool
(seed, its kNN and their kNN, deduplicated, ``P = pool_factor * B`` slots) with the
swappable objective's marginal gains (sparse: ``O(P K)`` per batch and step), and
proposes its best non-contradicting unassigned candidate. Conflicts (several batches
proposing the same item) go to the highest gain (lowest batch index on ties); losers
re-propose (``rounds`` times). Zero-gain candidates are never proposed: slots the
greedy leaves empty, and the batches beyond ``hard_fraction``, are filled with the
unassigned items in uniformly random order. Batch order is shuffled last.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxkit import _validate as V
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.data._hobit import (
    _OBJECTIVES,
    HobitBatches,
    SparseHardness,
    _check_dup,
    _check_emb,
    _phi,
    knn_graph,
)


def _pools(nbr, seeds, p):
    """Per seed: seed, its neighbours, theirs; first occurrences in that order, ``p`` slots."""
    nb = seeds.shape[0]
    hop1 = nbr[seeds]  # [nb, k]
    hop2 = nbr[hop1].reshape(nb, -1)
    cand = jnp.concatenate([seeds[:, None], hop1, hop2], axis=1)  # [nb, L]
    order = jnp.argsort(cand, axis=1, stable=True)
    srt = jnp.take_along_axis(cand, order, axis=1)
    first_s = jnp.concatenate([jnp.ones((nb, 1), bool), srt[:, 1:] != srt[:, :-1]], axis=1)
    first = jnp.zeros_like(first_s).at[jnp.arange(nb)[:, None], order].set(first_s)
    rank = jnp.cumsum(first, axis=1) - 1
    keep = first & (rank < p)
    slot = jnp.where(keep, rank, p)  # p = dump slot
    pool = jnp.full((nb, p + 1), -1, jnp.int32).at[jnp.arange(nb)[:, None], slot].set(cand)
    return pool[:, :p]


def _pool_weights(nbr, w, pool):
    """Sparse pool weights ``(col, wv)`` of one batch's pool.

    ``col[a, k]`` is the pool position of ``nbr[pool[a], k]`` (``p`` if outside the pool)
    and ``wv[a, k]`` its weight (0 when outside, or for empty pool slots).
    """
    p = pool.shape[0]
    order = jnp.argsort(pool)
    sp = pool[order]
    rows = jnp.maximum(pool, 0)
    nb, wv = nbr[rows], w[rows].astype(accumulation_dtype(w.dtype))  # [p, k]
    pos = jnp.clip(jnp.searchsorted(sp, nb), 0, p - 1)
    hit = (sp[pos] == nb) & (pool[:, None] >= 0)
    return jnp.where(hit, order[pos], p), jnp.where(hit, wv, 0.0)


def _sparse_gains(cover, col, wv, obj):
    """Marginal gains of every pool item: segment sums of ``phi(c_a + w) - phi(c_a)``."""
    contrib = _phi(cover[:, None] + wv, obj) - _phi(cover, obj)[:, None]
    p = cover.shape[0]
    return jnp.zeros(p + 1, contrib.dtype).at[col].add(contrib)[:p]


def _column(col, wv, j):
    """``W[:, j]`` of the sparse pool matrix."""
    return jnp.sum(jnp.where(col == j, wv, 0.0), axis=1)


def _conflicts(q, d, dup, pool, margin):
    """``C[a, c]``: pool items a, c contradict (either direction within ``margin``, or dup)."""
    acc = accumulation_dtype(q.dtype)
    rows = jnp.maximum(pool, 0)
    qp, dp = q[rows].astype(acc), d[rows].astype(acc)
    s = qp @ dp.T
    diag = jnp.sum(qp * dp, axis=-1)
    c = (s >= diag[:, None] - margin) | (dup[rows][:, None] == dup[rows][None, :])
    return c | c.T


def _batches(nbr, w, q, d, dup_ids, key, margin, hard_fraction, *, batch_size, p, rounds, obj):
    n = nbr.shape[0]
    bsz = batch_size
    nb = n // bsz
    ids = jnp.arange(n, dtype=jnp.int32)
    dup = ids if dup_ids is None else dup_ids
    k_seed, k_fill, k_order = jax.random.split(key, 3)
    seeds = jax.random.permutation(k_seed, n)[:nb].astype(jnp.int32)
    pool = _pools(nbr, seeds, p)
    col, wv = jax.vmap(_pool_weights, in_axes=(None, None, 0))(nbr, w, pool)  # [nb, p, k]
    cp = jax.vmap(_conflicts, in_axes=(None, None, None, 0, None))(q, d, dup, pool, margin)
    valid = pool >= 0
    bidx = jnp.arange(nb, dtype=jnp.int32)
    active = bidx.astype(jnp.float32) < jnp.round(jnp.asarray(hard_fraction, jnp.float32) * nb)

    members = jnp.full((nb, bsz), -1, jnp.int32).at[:, 0].set(jnp.where(active, seeds, -1))
    inb = jnp.zeros((nb, p), bool).at[:, 0].set(active)
    zero = jnp.zeros(nb, jnp.int32)
    cover = jnp.where(active[:, None], jax.vmap(_column)(col, wv, zero), 0.0)
    banned = cp[:, 0, :] & active[:, None]
    assigned = jnp.zeros(n + 1, bool).at[jnp.where(active, seeds, n)].set(True)
    cnt = active.astype(jnp.int32)

    def propose(gain, st):
        members, inb, cover, banned, assigned, cnt, done = st
        ok = valid & ~inb & ~banned & ~assigned[jnp.where(valid, pool, n)]
        ok = ok & (active & (cnt < bsz) & ~done)[:, None]
        gain = jnp.where(ok, gain, -jnp.inf)
        best = jnp.argmax(gain, axis=1)
        bg = jnp.take_along_axis(gain, best[:, None], axis=1)[:, 0]
        j = jnp.take_along_axis(pool, best[:, None], axis=1)[:, 0]
        prop = bg > 0
        seg = jnp.where(prop, j, n)
        gmax = jax.ops.segment_max(jnp.where(prop, bg, -jnp.inf), seg, num_segments=n + 1)
        win = prop & (bg == gmax[seg])
        bmin = jax.ops.segment_min(jnp.where(win, bidx, nb), seg, num_segments=n + 1)
        win = win & (bidx == bmin[seg])
        members = members.at[bidx, jnp.where(win, cnt, bsz)].set(j, mode="drop")
        inb = inb.at[bidx, best].set(inb[bidx, best] | win)
        cover = cover + jnp.where(win[:, None], jax.vmap(_column)(col, wv, best), 0.0)
        ccol = jnp.take_along_axis(cp, best[:, None, None], axis=1)[:, 0, :]
        banned = banned | (ccol & win[:, None])
        assigned = assigned.at[jnp.where(win, j, n)].set(True)
        return members, inb, cover, banned, assigned, cnt + win.astype(jnp.int32), done | win

    def step(_, st):
        gain = jax.vmap(_sparse_gains, in_axes=(0, 0, 0, None))(st[2], col, wv, obj)
        st = (*st, jnp.zeros(nb, bool))
        st = jax.lax.fori_loop(0, rounds, lambda _r, s: propose(gain, s), st)
        return st[:-1]

    st = (members, inb, cover, banned, assigned, cnt)
    members, *_, assigned, _ = jax.lax.fori_loop(0, bsz - 1, step, st)

    flat = members.reshape(-1)
    empty = flat < 0
    shuffled = jax.random.permutation(k_fill, n).astype(jnp.int32)
    free_first = shuffled[jnp.argsort(assigned[shuffled], stable=True)]
    rank = jnp.cumsum(empty) - 1
    flat = jnp.where(empty, free_first[jnp.maximum(rank, 0)], flat)
    order = jax.random.permutation(k_order, nb)
    perm = flat.reshape(nb, bsz)[order].reshape(-1)
    greedy = (~empty).reshape(nb, bsz)[order].reshape(-1)
    return HobitBatches(perm, greedy)


_batches_jit = jax.jit(_batches, static_argnames=("batch_size", "p", "rounds", "obj"))


def check_batch_size(n: int, batch_size: int) -> int:
    """``batch_size`` as an int that divides ``n`` (``ValueError`` otherwise)."""
    b = V.python_int(batch_size, name="batch_size", minimum=1)
    if n % b:
        raise ValueError(
            f"`batch_size` must divide the number of examples n={n}, got batch_size={b} "
            f"(n % batch_size = {n % b}); drop or pad {n % b} examples first."
        )
    return b


def hobit_batches(
    g: SparseHardness,
    q: Float[Array, "n dim"],
    d: Float[Array, "n dim"],
    *,
    key: KeyArray,
    batch_size: int,
    margin: RealScalarLike = 0.1,
    hard_fraction: RealScalarLike = 1.0,
    dup_ids: Int[Array, " n"] | None = None,
    pool_factor: int = 4,
    rounds: int = 3,
    objective: str = "log",
) -> HobitBatches:
    """One epoch's HOBIT permutation from a sparse hardness graph (jitted parallel greedy).

    **[recon]** objective (see :mod:`jaxkit.data`). ``perm`` is a permutation of
    ``range(n)``; consecutive blocks of ``batch_size`` are the batches. No two examples
    the greedy placed in one batch contradict each other (``s_ij >= s_ii - margin`` in
    either direction, or equal ``dup_ids``), checked exactly from ``q``/``d``; slots
    the greedy leaves empty (no positive gain left in the pool) and the batches beyond
    the first ``round(hard_fraction * n / batch_size)`` are filled uniformly at random
    (``greedy`` marks the greedy slots; the random fill is not contradiction-checked).

    Args:
      g: graph from :func:`knn_graph` on the same embeddings.
      q: query embeddings ``[n, dim]``.
      d: document embeddings ``[n, dim]``.
      key: PRNG key (seeds, random fill, batch order).
      batch_size: ``B``; must divide ``n`` (static).
      margin: false-negative margin ``delta >= 0`` (traced).
      hard_fraction: share of batches built by the greedy, in ``[0, 1]`` (traced).
      dup_ids: optional int group ids (equal ids never share a greedy batch).
      pool_factor: candidate pool size ``P = pool_factor * B`` (static).
      rounds: proposal rounds per greedy step (conflict losers re-propose; static).
      objective: concave ``phi``: ``'log'`` (HOBIT recon) or ``'sqrt'`` (static).

    Returns:
      ``HobitBatches(perm [n] int32, greedy [n] bool)``.
    """
    _check_emb(q, d)
    n = q.shape[0]
    V.ndim(g.nbr, 2, name="g.nbr")
    if g.nbr.shape[0] != n or g.w.shape != g.nbr.shape:
        raise TypeError(f"`g` must be a graph over n={n} items, got nbr {g.nbr.shape}.")
    V.is_key(key)
    bsz = check_batch_size(n, batch_size)
    V.one_of(_OBJECTIVES, objective=objective)
    pf = V.python_int(pool_factor, name="pool_factor", minimum=1)
    rounds = V.python_int(rounds, name="rounds", minimum=1)
    dup_ids = _check_dup(dup_ids, n)
    q = V.guard_non_negative(q, margin, name="margin", allow_inf=True)
    q = V.guard_interval(q, hard_fraction, name="hard_fraction", low=0.0, high=1.0)
    k = g.nbr.shape[1]
    p = min(pf * bsz, 1 + k + k * k, n)
    return _batches_jit(
        g.nbr, g.w, q, d, dup_ids, key, margin, hard_fraction,
        batch_size=bsz, p=p, rounds=rounds, obj=objective,
    )  # fmt: skip


def hobit_permutation(
    q: Float[Array, "n dim"],
    d: Float[Array, "n dim"],
    *,
    key: KeyArray,
    batch_size: int,
    k: int = 64,
    tau: RealScalarLike = 0.05,
    margin: RealScalarLike = 0.1,
    hard_fraction: RealScalarLike = 1.0,
    dup_ids: Int[Array, " n"] | None = None,
    pool_factor: int = 4,
    objective: str = "log",
) -> HobitBatches:
    """:func:`knn_graph` then :func:`hobit_batches` (reuse the graph when sweeping keys)."""
    g = knn_graph(q, d, k=k, tau=tau, margin=margin, dup_ids=dup_ids)
    return hobit_batches(
        g, q, d, key=key, batch_size=batch_size, margin=margin, hard_fraction=hard_fraction,
        dup_ids=dup_ids, pool_factor=pool_factor, objective=objective,
    )  # fmt: skip


__all__ = ["check_batch_size", "hobit_batches", "hobit_permutation"]
