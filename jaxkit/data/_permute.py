"""HOBIT epoch permutation: jitted parallel greedy over all batches at once.

**[recon]** (spec ``training.md`` section 3.2, "jittable fixed-shape version"). All
``n // B`` batches grow in parallel rounds: each batch scores its candidate pool
(seed, its kNN and their kNN, deduplicated, ``P = pool_factor * B`` slots) with the
swappable objective's marginal gains (sparse: ``O(P K)`` per batch and step), and
proposes its best non-contradicting unassigned candidate. Conflicts (several batches
proposing the same item) go to the highest gain (lowest batch index on ties); losers
re-propose (``rounds`` times); a batch keeps stepping until it is full or no
candidate with positive gain is left. When its pool runs dry, the pool is rebuilt
from the still-unassigned 1-hop neighbours of all its members (``refills`` times).
Batches are built in ``waves``: the seeds of each wave are drawn from the items the
earlier waves left unassigned, so seeds follow the remaining data (with all seeds
drawn at once, dense regions get more seeds than they have items for and the
sparse regions' items end in the random fill: 25% of slots instead of 11% on the
bench, summed in-batch objective 0.85x instead of 1.07x apricot's sequential
greedy). Zero-gain candidates are never proposed: slots the greedy leaves empty,
and the batches beyond ``hard_fraction``, are filled with the unassigned items in
uniformly random order. Batch order is shuffled last. ``ground`` says whose gains are
summed: the whole pool's queries (``"pool"``, the submodular [recon] objective) or only
the batch's own plus the candidate's (``"batch"``, the batch's in-batch loss).
"""

import functools

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
    _check_graph,
    _phi,
    knn_graph,
)


def _pools(nbr, roots, assigned, hops, p):
    """Candidate pool per batch: ``roots``, then their unassigned ``hops``-hop neighbours.

    First occurrences in that order, ``p`` slots (``-1`` when empty).
    """
    nb, r = roots.shape
    n = nbr.shape[0]
    parts, front = [roots], roots
    for _ in range(hops):
        front = jnp.where(front[..., None] >= 0, nbr[jnp.maximum(front, 0)], -1)
        front = front.reshape(nb, -1)
        parts.append(front)
    cand = jnp.concatenate(parts, axis=1)  # [nb, L]
    free = ~assigned[jnp.where(cand >= 0, cand, n)]
    is_root = jnp.arange(cand.shape[1]) < r
    cand = jnp.where((cand >= 0) & (is_root[None, :] | free), cand, n)  # n: dropped
    # first occurrences: each item's lowest position, by a scatter-min into an [nb, n + 1]
    # table (no sort of the [nb, L] candidates)
    pos = jnp.broadcast_to(jnp.arange(cand.shape[1], dtype=jnp.int32), cand.shape)
    bi = jnp.arange(nb)[:, None]
    lowest = jnp.full((nb, n + 1), cand.shape[1], jnp.int32).at[bi, cand].min(pos)
    first = (lowest[bi, cand] == pos) & (cand < n)
    rank = jnp.cumsum(first, axis=1) - 1
    slot = jnp.where(first & (rank < p), rank, p)  # p = dump slot
    pool = jnp.full((nb, p + 1), -1, jnp.int32).at[bi, slot].set(cand)
    return pool[:, :p]


def _pool_weights(nbr, w, pool):
    """Sparse pool weights ``(col, wv)`` of one batch's pool.

    ``col[a, k]`` is the pool position of ``nbr[pool[a], k]`` (``p`` if outside the pool)
    and ``wv[a, k]`` its weight (0 when outside, or for empty pool slots).
    """
    p = pool.shape[0]
    n = nbr.shape[0]
    valid = pool >= 0
    # pool position of every item (p when outside): one scatter, then a gather per edge
    where = (
        jnp.full(n + 1, p, jnp.int32)
        .at[jnp.where(valid, pool, n)]
        .set(jnp.arange(p, dtype=jnp.int32))
    )
    rows = jnp.maximum(pool, 0)
    nb, wv = nbr[rows], w[rows].astype(accumulation_dtype(w.dtype))  # [p, k]
    col = jnp.where(valid[:, None], where[nb], p)
    return col, jnp.where(col < p, wv, 0.0)


def _sparse_gains(cover, col, wv, inb, obj, ground, bsz):
    """Marginal gains of every pool item: segment sums of ``phi(c_a + w) - phi(c_a)``.

    ``ground="pool"``: over every pool query ``a`` (the submodular [recon] objective).
    ``ground="batch"``: over the batch's own queries only, plus the candidate's own term
    ``phi(c_j)`` (its query against the batch's documents): the exact increase of the
    batch's summed in-batch loss ``sum_{i in S} phi(sum_{j in S} w_ij)`` (not submodular).
    Only the (at most ``bsz``) member rows are gathered, in pool order, so the segment
    sums add the same terms in the same order as over all ``p`` rows with zeros.
    """
    p = cover.shape[0]
    if ground == "batch":
        rank = jnp.cumsum(inb) - 1
        rows = (
            jnp.full(bsz + 1, p, jnp.int32)
            .at[jnp.where(inb, rank, bsz)]
            .set(jnp.arange(p, dtype=jnp.int32))[:bsz]
        )  # member rows in pool order; p: padding (weight 0, dump column)
        cover_pad = jnp.concatenate([cover, jnp.zeros(1, cover.dtype)])
        col_pad = jnp.concatenate([col, jnp.full((1, col.shape[1]), p, col.dtype)])
        wv_pad = jnp.concatenate([wv, jnp.zeros((1, wv.shape[1]), wv.dtype)])
        c, cl, wm = cover_pad[rows], col_pad[rows], wv_pad[rows]
        contrib = _phi(c[:, None] + wm, obj) - _phi(c, obj)[:, None]
        gain = jnp.zeros(p + 1, contrib.dtype).at[cl].add(contrib)[:p]
        return gain + _phi(cover, obj)
    contrib = _phi(cover[:, None] + wv, obj) - _phi(cover, obj)[:, None]
    return jnp.zeros(p + 1, contrib.dtype).at[col].add(contrib)[:p]


def _column(col, wv, j):
    """``W[:, j]`` of the sparse pool matrix."""
    return jnp.sum(jnp.where(col == j, wv, 0.0), axis=1)


def _conflicts(q, d, dup, pool, margin):
    """``C[a, c]``: pool items a, c contradict (either direction within ``margin``, or dup).

    ``margin=None``: duplicates only (``exclude="dup"``; no similarity product).
    """
    rows = jnp.maximum(pool, 0)
    c = dup[rows][:, None] == dup[rows][None, :]
    if margin is None:
        return c
    acc = accumulation_dtype(q.dtype)
    qp, dp = q[rows].astype(acc), d[rows].astype(acc)
    s = qp @ dp.T
    diag = jnp.sum(qp * dp, axis=-1)
    c = (s >= diag[:, None] - margin) | c
    return c | c.T


def _grow(st, pool, nbr, w, q, d, dup, margin, *, bsz, rounds, obj, ground):
    """Greedy growth of every batch from its candidate ``pool`` (members already in it).

    Steps until every batch is full or no batch can add a positive-gain item; each
    step every batch proposes its best allowed candidate, conflicts go to the highest
    gain (lowest batch index on ties), losers re-propose (``rounds`` times).
    """
    members, cnt, assigned = st
    nb, p = pool.shape
    n = nbr.shape[0]
    bidx = jnp.arange(nb, dtype=jnp.int32)
    col, wv = jax.vmap(_pool_weights, in_axes=(None, None, 0))(nbr, w, pool)  # [nb, p, k]
    cp = jax.vmap(_conflicts, in_axes=(None, None, None, 0, None))(q, d, dup, pool, margin)
    valid = pool >= 0
    inb = valid & jnp.any(pool[:, :, None] == members[:, None, :], axis=2)
    inb_pad = jnp.concatenate([inb, jnp.zeros((nb, 1), bool)], axis=1)
    hit = jnp.take_along_axis(inb_pad, col.reshape(nb, -1), axis=1).reshape(col.shape)
    cover = jnp.sum(jnp.where(hit, wv, 0.0), axis=2)
    banned = jnp.any(cp & inb[:, None, :], axis=2)
    lower = bidx[None, :] < bidx[:, None]  # [b, c]: batch c has the lower index

    def propose(gain, s):
        members, inb, cover, banned, assigned, cnt, done = s
        ok = valid & ~inb & ~banned & ~assigned[jnp.where(valid, pool, n)]
        ok = ok & ((cnt > 0) & (cnt < bsz) & ~done)[:, None]
        gain = jnp.where(ok, gain, -jnp.inf)
        best = jnp.argmax(gain, axis=1)
        bg = jnp.take_along_axis(gain, best[:, None], axis=1)[:, 0]
        j = jnp.take_along_axis(pool, best[:, None], axis=1)[:, 0]
        prop = bg > 0
        # a proposer wins unless another batch proposes the same item with a higher gain,
        # or the same gain and a lower index ([nb, nb] comparisons, no [n] segment tables)
        rival = prop[:, None] & prop[None, :] & (j[:, None] == j[None, :])
        beats = (bg[None, :] > bg[:, None]) | ((bg[None, :] == bg[:, None]) & lower)
        win = prop & ~jnp.any(rival & beats, axis=1)
        members = members.at[bidx, jnp.where(win, cnt, bsz)].set(j, mode="drop")
        inb = inb.at[bidx, best].set(inb[bidx, best] | win)
        cover = cover + jnp.where(win[:, None], jax.vmap(_column)(col, wv, best), 0.0)
        ccol = jnp.take_along_axis(cp, best[:, None, None], axis=1)[:, 0, :]
        banned = banned | (ccol & win[:, None])
        assigned = assigned.at[jnp.where(win, j, n)].set(True)
        s = (members, inb, cover, banned, assigned, cnt + win.astype(jnp.int32), done | win)
        return s, jnp.any(prop & ~win)  # any loser left to re-propose

    def step(s):
        t, _, members, inb, cover, banned, assigned, cnt = s
        gain = jax.vmap(_sparse_gains, in_axes=(0, 0, 0, 0, None, None, None))(
            cover, col, wv, inb, obj, ground, bsz
        )
        s = (members, inb, cover, banned, assigned, cnt, jnp.zeros(nb, bool))

        # a round without conflicts leaves no loser, and the rounds after it would change
        # nothing (each batch's allowed candidates only shrink): stop there
        def again(rs):
            return (rs[0] < rounds) & rs[1]

        def one_round(rs):
            s, lost = propose(gain, rs[2])
            return rs[0] + 1, lost, s

        _, _, s = jax.lax.while_loop(again, one_round, (jnp.int32(0), jnp.array(True), s))
        return (t + 1, jnp.any(s[-1]), *s[:-1])

    def more(s):
        t, progressed, *_, cnt = s
        return (t < bsz - 1) & progressed & jnp.any((cnt > 0) & (cnt < bsz))

    s = (jnp.int32(0), jnp.array(True), members, inb, cover, banned, assigned, cnt)
    s = jax.lax.while_loop(more, step, s)
    return s[2], s[-1], s[-2]


def _batches(
    nbr, w, q, d, dup_ids, key, margin, hard_fraction, *,
    batch_size, p, p2, rounds, refills, waves, obj, exclude="margin", ground="pool",
):  # fmt: skip
    n = nbr.shape[0]
    # pairs barred from sharing a greedy batch: within the margin or duplicates ("margin"),
    # or duplicates only ("dup"; margin pairs then only weigh 0 in the objective)
    cmargin = margin if exclude == "margin" else None
    bsz = batch_size
    nb = n // bsz
    dup = jnp.arange(n, dtype=jnp.int32) if dup_ids is None else dup_ids
    k_seed, k_fill, k_order = jax.random.split(key, 3)
    bidx = jnp.arange(nb, dtype=jnp.int32)
    active = bidx.astype(jnp.float32) < jnp.round(jnp.asarray(hard_fraction, jnp.float32) * nb)
    assigned = jnp.zeros(n + 1, bool)
    grow = functools.partial(
        _grow,
        nbr=nbr,
        w=w,
        q=q,
        d=d,
        dup=dup,
        margin=cmargin,
        bsz=bsz,
        rounds=rounds,
        obj=obj,
        ground=ground,
    )
    per = -(-nb // waves)
    active = jnp.pad(active, (0, per * waves - nb)).reshape(waves, per)

    def wave(assigned, xs):  # later waves seed from the still-unassigned items
        act, i = xs
        u = jax.random.uniform(jax.random.fold_in(k_seed, i), (n,))
        free_first = jnp.argsort(u + assigned[:n].astype(u.dtype)).astype(
            jnp.int32
        )  # free ones first
        seeds = jnp.where(act, free_first[:per], -1)
        members = jnp.full((per, bsz), -1, jnp.int32).at[:, 0].set(seeds)
        assigned = assigned.at[jnp.where(act, seeds, n)].set(True)
        st = (members, act.astype(jnp.int32), assigned)
        # phase 1: the seed's 2-hop neighbourhood; refills: unassigned 1-hop of all members
        st = grow(st, _pools(nbr, seeds[:, None], assigned, 2, p))
        st = jax.lax.fori_loop(
            0, refills, lambda _, st: grow(st, _pools(nbr, st[0], st[2], 1, p2)), st
        )
        return st[2], st[0]

    assigned, members = jax.lax.scan(wave, assigned, (active, jnp.arange(waves)))
    members = members.reshape(-1, bsz)[:nb]

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


_batches_jit = jax.jit(
    _batches,
    static_argnames=(
        "batch_size",
        "p",
        "p2",
        "rounds",
        "refills",
        "waves",
        "obj",
        "exclude",
        "ground",
    ),
)

_EXCLUDE = ("margin", "dup")
_GROUND = ("pool", "batch")


def pool_sizes(pool_factor: int, batch_size: int, k: int, n: int) -> tuple[int, int]:
    """Static pool sizes ``(P, P_refill)`` of the parallel greedy.

    ``P = pool_factor * B``, capped by what a 2-hop (first pool) or the members' 1-hop
    (refills) neighbourhood can hold, and by ``n``.
    """
    pf = V.python_int(pool_factor, name="pool_factor", minimum=1)
    return min(pf * batch_size, 1 + k + k * k, n), min(pf * batch_size, batch_size * (1 + k), n)


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
    refills: int = 2,
    waves: int = 4,
    objective: str = "log",
    exclude: str = "margin",
    ground: str = "pool",
) -> HobitBatches:
    """One epoch's HOBIT permutation from a sparse hardness graph (jitted parallel greedy).

    **[recon]** objective (see :mod:`jaxkit.data`). ``perm`` is a permutation of
    ``range(n)``; consecutive blocks of ``batch_size`` are the batches. No two examples
    the greedy placed in one batch contradict each other (``s_ij >= s_ii - margin`` in
    either direction, or equal ``dup_ids``), checked exactly from ``q``/``d``; slots
    the greedy leaves empty (no positive gain left in the pool) and the batches beyond
    the first ``round(hard_fraction * n / batch_size)`` are filled uniformly at random
    (``greedy`` marks the greedy slots; the random fill is not contradiction-checked).

    ``exclude`` says which pairs may never share a greedy batch. ``"margin"`` (default):
    both the margin pairs and the duplicates (zero contradictions, spec 3.4 item 6).
    ``"dup"``: duplicates only; a pair within the margin still weighs 0 in the objective
    (the filter of spec 3.2 is on the weights) but may share a batch. The margin is
    measured with the current encoder, so early in training most queries have some
    true negatives within it (the demo: 99% of queries, 12 on average at ``delta =
    0.1``), and barring them all leaves batches about as easy as random ones.

    Args:
      g: graph from :func:`knn_graph` on the same embeddings (``g.nbr`` ids in ``[0, n)``).
      q: query embeddings ``[n, dim]``.
      d: document embeddings ``[n, dim]``.
      key: PRNG key (seeds, random fill, batch order).
      batch_size: ``B``; must divide ``n`` (static).
      margin: false-negative margin ``delta >= 0`` (traced).
      hard_fraction: share of batches built by the greedy, in ``[0, 1]`` (traced).
      dup_ids: optional int group ids (equal ids never share a greedy batch).
      pool_factor: candidate pool size ``P = pool_factor * B`` (static).
      rounds: proposal rounds per greedy step (conflict losers re-propose; static).
      refills: pool rebuilds from the members' unassigned neighbours (static, >= 0).
      waves: batches are built in this many sequential waves, each seeded from the
        items still unassigned (static, >= 1; capped at ``n // batch_size``).
      objective: concave ``phi``: ``'log'`` (HOBIT recon) or ``'sqrt'`` (static).
      exclude: ``'margin'`` or ``'dup'``: the pairs barred from sharing a greedy batch
        (see above; static).
      ground: the queries whose gains the greedy sums (static). ``'pool'`` (default): the
        whole candidate pool, the monotone submodular **[recon]** objective of
        :func:`hobit_objective`. ``'batch'``: the batch's own queries, plus the
        candidate's own query against the batch's documents, so each step adds the item
        that most raises the batch's summed in-batch loss ``sum_{i in S} phi(sum_{j in
        S} w_ij)`` (spec 3.2's ``in_batch`` variant; not submodular, no ``1 - 1/e``
        bound). Pool gains reward documents hard for pool queries that end up in other
        batches: on the demo the pool objective's batches are less mutually hard than
        k-means' (see ``examples/hobit_synthetic.py``).

    Returns:
      ``HobitBatches(perm [n] int32, greedy [n] bool)``.
    """
    _check_emb(q, d)
    n = q.shape[0]
    g = _check_graph(g)  # its ids in [0, n) (else a ValueError naming `g.nbr`)
    if g.nbr.shape[0] != n:
        raise TypeError(f"`g` must be a graph over n={n} items, got nbr {g.nbr.shape}.")
    V.is_key(key)
    bsz = check_batch_size(n, batch_size)
    V.one_of(_OBJECTIVES, objective=objective)
    V.one_of(_EXCLUDE, exclude=exclude)
    V.one_of(_GROUND, ground=ground)
    rounds = V.python_int(rounds, name="rounds", minimum=1)
    refills = V.python_int(refills, name="refills", minimum=0)
    waves = min(V.python_int(waves, name="waves", minimum=1), n // bsz)
    dup_ids = _check_dup(dup_ids, n)
    q = V.guard_non_negative(q, margin, name="margin", allow_inf=True)
    q = V.guard_interval(q, hard_fraction, name="hard_fraction", low=0.0, high=1.0)
    p, p2 = pool_sizes(pool_factor, bsz, g.nbr.shape[1], n)
    return _batches_jit(
        g.nbr, g.w, q, d, dup_ids, key, margin, hard_fraction,
        batch_size=bsz, p=p, p2=p2, rounds=rounds, refills=refills,
        waves=waves, obj=objective, exclude=exclude, ground=ground,
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
    exclude: str = "margin",
    ground: str = "pool",
) -> HobitBatches:
    """:func:`knn_graph` then :func:`hobit_batches` (reuse the graph when sweeping keys)."""
    g = knn_graph(q, d, k=k, tau=tau, margin=margin, dup_ids=dup_ids)
    return hobit_batches(
        g, q, d, key=key, batch_size=batch_size, margin=margin, hard_fraction=hard_fraction,
        dup_ids=dup_ids, pool_factor=pool_factor, objective=objective, exclude=exclude,
        ground=ground,
    )  # fmt: skip


__all__ = ["check_batch_size", "hobit_batches", "hobit_permutation", "pool_sizes"]
