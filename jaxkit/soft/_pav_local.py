"""Local cascades of the hybrid PAV (l2 / kl): a few growing blocks instead of full rounds.

The round-parallel PAV of :mod:`jaxkit.soft._pav` pools every ascending run of adjacent
block values at once, at O(n) vectorised work per round. When many blocks pool
(n=10000 at matched softness: ~1500 of 10000 elements), the first few rounds do nearly
all the merges, and the rest is a handful of cascades per row, each a block that grows
by one neighbour per round for tens of rounds: ~80 full O(n) rounds for ~2 merges each.

Here, once a row has at most ``SLOTS`` ascending runs left, each run head becomes a
*slot*: a block range ``[ka, kb)`` (in block ids of the current partition) with its
mergeable statistics ``(A, B)`` (l2: sum of ``z - w`` and count; kl: ``lse z`` and
``lse w``). A loop over the slots only (``O(SLOTS)`` work per step, no O(n) pass) lets
every slot absorb its left neighbour when that violates, else its right neighbour
(a plain block, or an adjacent slot, which is then absorbed whole). Every absorption
merges two adjacent violators, so by PAV's order independence (Best, Chakravarti &
Ubhaya 2000) the result is still the unique solution; claims on one block by two slots
are settled left-first, and the next full round catches whatever a slot left.

The partition is all this returns: block values and derivatives are recomputed from it
by segment sums in :mod:`jaxkit.soft._pav` as before.
"""

import jax.numpy as jnp
from jax import lax

from jaxkit import _numerics as NU
from jaxkit.soft._sorting import cumsum

SLOTS = 16  # growing blocks per row in the local phase


def value(a, b, reg):
    """Block value from the mergeable statistics (l2: mean of ``z - w``; kl: lse - lse).

    An empty (padding) block counts 1 (l2: value 0, not 0 / 0).
    """
    return a / jnp.maximum(b, 1.0) if reg == "l2" else a - b


def merge(x, y, reg):
    return x + y if reg == "l2" else jnp.logaddexp(x, y)


def _grow(ka, kb, A, B, alive, Ak, Bk, nb, reg):
    """Grow the slots until none can absorb a violating neighbour; see the module doc."""
    n = Ak.shape[0]
    last = jnp.asarray(n - 1, ka.dtype)

    def body(st):
        ka, kb, A, B, alive, _, it = st
        vG = value(A, B, reg)
        # slot j directly left of / right of slot i (ranges are disjoint and contiguous)
        lslot = alive[None, :] & (kb[None, :] == ka[:, None])
        rslot = alive[None, :] & (ka[None, :] == kb[:, None])
        tl = jnp.maximum(ka - 1, 0)
        AL, BL = Ak[tl], Bk[tl]
        left = alive & (ka > 0) & ~jnp.any(lslot, 1) & (value(AL, BL, reg) < vG)
        has_rs = jnp.any(rslot, 1)
        rs = jnp.argmax(rslot, 1)
        tr = jnp.minimum(kb, last)
        AR = jnp.where(has_rs, A[rs], Ak[tr])
        BR = jnp.where(has_rs, B[rs], Bk[tr])
        kbR = jnp.where(has_rs, kb[rs], kb + 1)
        right = alive & ~left & (kb < nb) & (vG < value(AR, BR, reg))
        # a slot claimed by its left neighbour waits; a left claim of a plain block that
        # the slot on that block's left claims rightwards waits (left-first)
        claimed = jnp.any(
            (right & has_rs)[:, None] & (rs[:, None] == jnp.arange(rs.shape[0])[None, :]), 0
        )
        lost = jnp.any((right & ~has_rs)[None, :] & (kb[None, :] == (ka - 1)[:, None]), 1)
        left = left & ~lost & ~claimed
        right = right & ~claimed
        absorbed = jnp.any(
            (right & has_rs)[:, None] & (rs[:, None] == jnp.arange(rs.shape[0])[None, :]), 0
        )
        A = jnp.where(left, merge(A, AL, reg), jnp.where(right, merge(A, AR, reg), A))
        B = jnp.where(left, merge(B, BL, reg), jnp.where(right, merge(B, BR, reg), B))
        ka = jnp.where(left, ka - 1, ka)
        kb = jnp.where(right, kbR, kb)
        return ka, kb, A, B, alive & ~absorbed, jnp.any(left | right), it + 1

    moved0 = jnp.any(alive)
    st = lax.while_loop(
        lambda st: st[5] & (st[6] < n), body, (ka, kb, A, B, alive, moved0, nb - nb)
    )
    return st[0], st[1], st[4]


def _heads(vb, nb):
    """Block ``k`` heads an ascending run (its right neighbour violates, it does not)."""
    k = jnp.arange(vb.shape[0], dtype=nb.dtype)
    return (k + 1 < nb) & jnp.concatenate([vb[1:], vb[:1] & False]) & ~vb


def runs(vb, nb):
    """Number of ascending runs of block values (``vb[k]``: block k violates with k - 1)."""
    return jnp.sum(_heads(vb, nb).astype(nb.dtype))


def local_round(start, bid, Ak, Bk, vb, nb, reg):
    """One local phase on a row with at most ``SLOTS`` ascending runs of block values.

    ``start``/``bid``: the element-level partition; ``Ak``/``Bk``: block statistics by
    block id; ``vb``: block ``k`` violates with block ``k - 1``; ``nb``: block count.
    Returns the partition (block-start mask) after every run head's slot grew.
    """
    n = start.shape[0]
    head = _heads(vb, nb)
    # the first SLOTS run heads (jnp.nonzero's XLA:CPU cumsum costs twice this scan)
    pos = jnp.where(head, cumsum(head.astype(bid.dtype)) - 1, SLOTS)
    ka = jnp.full_like(bid, n, shape=(SLOTS,)).at[pos].set(NU.iota_like(bid), mode="drop")
    alive = ka < n
    ka = jnp.where(alive, ka, 0)
    ka, kb, alive = _grow(ka, ka + 1, Ak[ka], Bk[ka], alive, Ak, Bk, nb, reg)
    inside = alive[None, :] & (bid[:, None] > ka[None, :]) & (bid[:, None] < kb[None, :])
    return start & ~jnp.any(inside, 1)
