"""Parallel pooling phase of PAV: merge solved halves pairwise up a binary tree.

The items (compressed blocks after the parallel rounds of :mod:`jaxkit.soft._pav`,
with additive statistics ``(a, b)``: ``(sum, count)`` for L2, ``(lse z, lse w)`` for
KL) are split into aligned segments of ``2^l`` items. Level ``l`` takes pairs of
adjacent segments whose partitions are already optimal and merges them: in the
cumulative-sum diagram each solved segment is a concave chain (decreasing block
values) and the solution of the pair is the concave majorant of both, i.e. the two
chains joined by their common tangent (the *bridge*). In PAV terms a suffix of the
left blocks and a prefix of the right blocks pool into one block; every other block
is kept. The bridge is found by a nested binary search (Overmars & van Leeuwen):

* for a left block ``a``, pooling ``L[a:]`` with ``R[:c]`` gains while the next right
  block's value exceeds the pool's (a predicate monotone in ``c``), giving
  ``c*(a)`` and the tangent value ``h(a)``;
* ``a*`` is the largest ``a`` whose left neighbour does not violate ``h(a)`` (monotone
  in ``a`` for concave chains).

The pooled statistics come from prefix / suffix accumulations that start at the
junction (no differences of long prefix sums, so no cancellation; KL in log space).
``ceil(log2 n)`` levels of O(n) vectorised work plus ``O(l^2)`` scalar search steps
per pair: depth O(log^3 n), work O(n log n), versus the stack PAV's ``n`` sequential
steps. A level that no row needs is skipped at run time.

References:
  Overmars & van Leeuwen, Maintenance of configurations in the plane, JCSS 1981
  (bridge of two separated hulls by nested binary search).
  Best, Chakravarti & Ubhaya, SIAM J. Optim., 2000 (PAV order independence).
"""

import jax.numpy as jnp
from jax import lax

from jaxkit._numerics import iota_like
from jaxkit.soft._sorting import cumsum


def _ops(reg):
    if reg == "l2":
        return jnp.add, lambda a, b: a / b
    return jnp.logaddexp, lambda a, b: a - b


def _level(state, it_a, it_b, nb, l, reg):
    """One tree level: merge every pair of solved ``2^l``-item segments (1-D rows)."""
    merge, value = _ops(reg)
    start, bs_a, bs_b = state
    N = start.shape[0]
    S = 1 << l
    P = N // (2 * S)
    idx = iota_like(start)
    si = start.astype(jnp.int32)
    cnt = cumsum(si)
    excl = cnt - si
    total = cnt[-1:]
    # block id -> its first item (block ids past the last map to N)
    bstart = jnp.full_like(idx, N, shape=(N + 1,))
    bstart = bstart.at[jnp.where(start, excl, N + 1)].set(idx, mode="drop")
    val = value(bs_a[jnp.minimum(bstart, N - 1)], bs_b[jnp.minimum(bstart, N - 1)])
    excl_ext = jnp.concatenate([excl, total])

    # junction-outward accumulations: left halves reversed, right halves forward
    def acc(x):
        y = x.reshape(P, 2, S)
        y = jnp.stack([jnp.flip(y[:, 0], -1), y[:, 1]], 1)
        return lax.associative_scan(merge, y, axis=2).reshape(N) if S > 1 else y.reshape(N)

    A, B = acc(it_a), acc(it_b)
    lo = iota_like(start[:P]) * (2 * S)
    mid = lo + S
    midc, hic = jnp.minimum(mid, nb), jnp.minimum(lo + 2 * S, nb)
    fL, fR = excl[lo], excl_ext[midc]
    p, q = fR - fL, excl_ext[hic] - fR
    # a traced trip count (l + 1): XLA would otherwise unroll the nested search loops
    steps = jnp.minimum(nb, 0) + (l + 1)

    def pool(a, c):
        """Statistics of ``L[a:] + R[:c]`` (``c >= 1``) and its value."""
        i = bstart[fL + a]  # first item of left block a
        j = bstart[fR + c] - 1  # last item of right block c - 1
        li = lo + (S - 1) - (i - lo)
        ri = mid + (j - mid)
        pa, pb = merge(A[li], A[ri]), merge(B[li], B[ri])
        return pa, pb, value(pa, pb)

    def tangent(a):
        """``c*(a)``: first ``c`` in ``[1, q]`` where the next right block stops gaining."""

        def step(_, st):
            c0, c1 = st
            m = (c0 + c1) // 2
            gain = (m < q) & (val[jnp.minimum(fR + m, N)] > pool(a, m)[2])
            act = c0 < c1
            return jnp.where(act & gain, m + 1, c0), jnp.where(act & ~gain, m, c1)

        c, _ = lax.fori_loop(0, steps, step, (jnp.ones_like(q), jnp.maximum(q, 1)))
        return c

    def outer(_, st):
        a0, a1 = st
        m = (a0 + a1 + 1) // 2
        h = pool(m, tangent(m))[2]
        go_left = (m > 0) & (val[jnp.maximum(fL + m - 1, 0)] < h)
        act = a0 < a1
        return jnp.where(act & ~go_left, m, a0), jnp.where(act & go_left, m - 1, a1)

    a, _ = lax.fori_loop(0, steps, outer, (jnp.zeros_like(p), jnp.maximum(p - 1, 0)))
    c = tangent(a)
    pa, pb, _ = pool(a, c)
    need = (mid < nb) & (q > 0) & (val[jnp.maximum(fR - 1, 0)] < val[jnp.minimum(fR, N)])
    plo, phi = bstart[fL + a], bstart[fR + c]
    inside = (idx.reshape(P, 2 * S) > plo[:, None]) & (idx.reshape(P, 2 * S) < phi[:, None])
    start = start & ~(need[:, None] & inside).reshape(N)
    at = jnp.where(need, plo, N)
    bs_a = bs_a.at[at].set(pa, mode="drop")
    bs_b = bs_b.at[at].set(pb, mode="drop")
    return start, bs_a, bs_b


def merge_tree(a, b, nb, reg):
    """Final block index of each of the first ``nb`` items (``a``, ``b``: item stats).

    Same contract as the stack PAV over items: block ids are non-decreasing from 0;
    items at or past ``nb`` are ignored (their ids are arbitrary).
    """
    n = a.shape[0]
    N = 1 << max(0, (n - 1).bit_length())
    pad = N - n
    if pad:
        a = jnp.concatenate([a, jnp.zeros_like(a[:1]).repeat(pad)])
        b = jnp.concatenate([b, jnp.ones_like(b[:1]).repeat(pad)])
    start = jnp.ones_like(a, dtype=bool)
    state = (start, a, b)
    for l in range(max(0, (N - 1).bit_length())):

        def body(st, l=l):
            return jnp.zeros_like(st[0]), _level(st[1], a, b, nb, l, reg)

        need = nb > (1 << l)
        # runs once if any row needs this level (a batched while under vmap), else skipped
        _, state = lax.while_loop(lambda st: st[0], body, (need, state))
    return (cumsum(state[0].astype(jnp.int32)) - 1)[:n]
