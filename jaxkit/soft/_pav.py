"""Isotonic regression by pool-adjacent-violators and permutahedron projection.

Three partition algorithms give the same blocks: ``"sequential"`` (stack PAV in
``fori_loop`` + ``while_loop``, as in softjax / fast-soft-sort), ``"rounds"``
(round-parallel: every ascending run of adjacent block values is pooled at once,
repeated until no violator is left) and ``"hybrid"`` (the default: at most
``max(ceil(2 log2 n), n / 16)`` parallel rounds, then the stack PAV over the compressed blocks;
rows of length <= 128 use the rounds alone). For l2 / kl the hybrid's rounds hand a row with
at most 16 ascending runs left to a local phase (:mod:`jaxkit.soft._pav_local`: a few blocks
grow by absorbing violating neighbours, O(16) work per step instead of an O(n) round per
merge of a cascade; soft sort at n=10000, matched softness, batch 64: the partition went
from 1.26 to 0.16 s of CPU).
Block values are recomputed from the partition with segment sums; derivatives come
from a ``custom_jvp`` whose tangent map is linear (block means for L2, block
softmax-weighted sums for KL), so ``jvp``, ``vjp`` and higher-order products work.

References:
  Blondel, Teboul, Berthet & Djolonga, Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
  Best, Chakravarti & Ubhaya, Minimizing separable convex functions subject to simple
  chain constraints, SIAM J. Optim., 2000 (PAV order independence).
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.ops import segment_max, segment_sum
from jaxtyping import Array, ArrayLike

from jaxkit import _numerics as NU
from jaxkit import _validate as V
from jaxkit.soft import _pav_local as LO
from jaxkit.soft import _pav_pnorm as PN
from jaxkit.soft._common import as_float
from jaxkit.soft._sorting import cumsum, stable_argsort

REGS = ("l2", "kl", *PN.PREGS)
SOLVERS = ("hybrid", "rounds", "sequential")
SMALL_N = 128  # hybrid = pure rounds up to this row length
ROUNDS_PER_ITEM = 16  # hybrid: rounds before the stack, per row element (see hybrid_rounds)


def _seg_lse(x, bid, n):
    m = segment_max(x, bid, num_segments=n, indices_are_sorted=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    s = segment_sum(jnp.exp(x - m[bid]), bid, num_segments=n, indices_are_sorted=True)
    return jnp.where(s > 0, m + jnp.log(jnp.where(s > 0, s, 1.0)), -jnp.inf)


def _block_values(z, w, bid, reg):
    """Per-block optimal values (length n, padded) for a partition ``bid``."""
    if reg in PN.PREGS:
        return PN.block_values(z, w, bid, reg)
    return LO.value(*_block_stats(z, w, bid, reg), reg)


def _block_stats(z, w, bid, reg):
    """Mergeable per-block statistics (l2: sum of ``z - w``, count; kl: lse z, lse w)."""
    n = z.shape[0]
    if reg == "l2":
        a = segment_sum(z - w, bid, num_segments=n, indices_are_sorted=True)
        return a, segment_sum(jnp.ones_like(z), bid, num_segments=n, indices_are_sorted=True)
    return _seg_lse(z, bid, n), _seg_lse(w, bid, n)


def _rounds(z, w, reg, max_rounds, local=False):
    """Round-parallel PAV: returns block-start mask after at most ``max_rounds`` rounds.

    ``local`` (l2 / kl only): a row with at most ``_pav_local.SLOTS`` ascending runs left
    finishes them in a local phase (slots that grow, O(slots) per step) instead of one
    O(n) round per merge of a cascade; see :mod:`jaxkit.soft._pav_local`.
    """
    n = z.shape[0]
    idx = jnp.arange(n)

    def body(state):
        _, r, start = state
        bid = cumsum(start.astype(jnp.int32)) - 1
        if not local:
            val = _block_values(z, w, bid, reg)
            viol = start & (idx > 0) & (val[jnp.maximum(bid - 1, 0)] < val[bid])
            return jnp.any(viol), r + 1, start & ~viol
        Ak, Bk = _block_stats(z, w, bid, reg)
        val = LO.value(Ak, Bk, reg)
        nb = bid[-1] + 1
        k = NU.iota_like(bid)
        vb = (k > 0) & (k < nb) & (jnp.concatenate([val[:1], val[:-1]]) < val)
        viol = start & vb[bid]
        use = LO.runs(vb, nb) <= LO.SLOTS
        # loop-once instead of a cond: under vmap the local phase only runs when some
        # row qualifies; the other rows pool every ascending run (a full round)
        _, out = lax.while_loop(
            lambda st: st[0],
            lambda st: (~st[0], LO.local_round(start, bid, Ak, Bk, vb, nb, reg)),
            (use, start & ~viol),
        )
        return jnp.any(viol), r + 1, out

    def cond(state):
        changed, r, _ = state
        return changed & (r < max_rounds)

    # carries derived from the input so that, under vmap, they share its batch sharding
    start0 = jnp.ones_like(z, dtype=bool)
    r0 = jnp.zeros_like(z[0], dtype=jnp.int32)
    if reg in ("l2", "kl", "p4") and max_rounds >= 1:
        # round 1 in closed form: singleton blocks have value z - w for both l2 and kl
        # (p4: z - cbrt(w), the same arithmetic as PN.block_values on a singleton), so
        # the loop only runs when some row really pools (often none does)
        v0 = z - w if reg != "p4" else z + PN.singleton_offset(w)
        viol = (idx > 0) & (jnp.concatenate([v0[:1], v0[:-1]]) < v0)
        start0 = start0 & ~viol
        changed, _, start = lax.while_loop(cond, body, (jnp.any(viol), r0 + 1, start0))
    else:
        changed, _, start = lax.while_loop(cond, body, (start0[0], r0, start0))
    return start, ~changed


def _stack(a, b, cnt, nb, reg):
    """Stack PAV over ``nb`` items with stats (a, b) (l2: sum, count; kl: lse z, lse w).

    Returns, for every item, the index of its final block.
    """
    n = a.shape[0]

    def value(sa, sb):
        return sa / sb if reg == "l2" else sa - sb

    def merge(x, y):
        return x + y if reg == "l2" else jnp.logaddexp(x, y)

    def mcond(st):
        starts, A, B, m = st
        return (m >= 2) & (value(A[m - 2], B[m - 2]) < value(A[m - 1], B[m - 1]))

    def mbody(st):
        starts, A, B, m = st
        A = A.at[m - 2].set(merge(A[m - 2], A[m - 1]))
        B = B.at[m - 2].set(merge(B[m - 2], B[m - 1]))
        starts = starts.at[m - 1].set(n)
        return starts, A, B, m - 1

    def fbody(st):
        i, starts, A, B, m = st
        starts = starts.at[m].set(i)
        A = A.at[m].set(a[i])
        B = B.at[m].set(b[i])
        starts, A, B, m = lax.while_loop(mcond, mbody, (starts, A, B, m + 1))
        return i + 1, starts, A, B, m

    zi = jnp.zeros_like(a, dtype=jnp.int32)
    init = (zi[0], zi + n, jnp.zeros_like(a), jnp.zeros_like(b), zi[0])
    _, starts, _, _, m = lax.while_loop(lambda st: st[0] < nb, fbody, init)
    ar = NU.iota_like(zi)
    starts = jnp.where(ar < m, starts, n)
    mask = zi.at[starts].add(1, mode="drop")  # 1 at every final block start
    return cumsum(mask) - 1


def hybrid_rounds(n: int) -> int:
    """Round cap of the hybrid: ``max(ceil(2 log2 n), n // ROUNDS_PER_ITEM)``.

    A round costs O(n) vectorised work; a stack step over a vmapped batch was measured
    at about a tenth of a round on XLA:CPU (batch 64, n=10000, KL), and the stack walks
    every block the rounds left. So rounds up to ``n / 16`` cost about one full stack
    pass at most, while heavy pooling (many cascading merges, e.g. n=10000 at matched
    softness: ~100 rounds, ~8500 blocks left after ``2 log2 n`` rounds) converges in
    the rounds and never reaches the sequential stack.
    """
    return max(1, math.ceil(2 * math.log2(max(n, 2))), n // ROUNDS_PER_ITEM)


def partition(z, w, reg: str = "l2", solver: str = "hybrid", max_rounds: int | None = None):
    """Block ids (non-decreasing, starting at 0) of decreasing isotonic regression (1-D)."""
    n = z.shape[0]
    if solver == "hybrid" and n <= SMALL_N and max_rounds is None:
        solver = "rounds"  # short rows: <= n cheap rounds beat the stack's loop machinery
    if solver == "rounds":
        start, _ = _rounds(z, w, reg, n if max_rounds is None else max_rounds)
        return cumsum(start.astype(jnp.int32)) - 1
    if solver == "hybrid":
        r = hybrid_rounds(n) if max_rounds is None else max_rounds
        start, done = _rounds(z, w, reg, r, local=reg in ("l2", "kl"))
    else:
        start = jnp.ones_like(z, dtype=bool)
        done = jnp.zeros_like(start[0])
    bid = cumsum(start.astype(jnp.int32)) - 1
    # the stack only runs when the parallel rounds did not already converge
    nb = jnp.where(done, 0, bid[-1] + 1).astype(jnp.int32)

    def stack_phase(bid):
        if reg in PN.PREGS:
            return PN.stack(z, w, bid, nb, reg)
        if reg == "l2":
            a = segment_sum(z - w, bid, num_segments=n, indices_are_sorted=True)
            b = segment_sum(jnp.ones_like(z), bid, num_segments=n, indices_are_sorted=True)
        else:
            a, b = _seg_lse(z, bid, n), _seg_lse(w, bid, n)
        return _stack(a, b, None, nb, reg)[bid]

    # a loop run at most once instead of a cond: under vmap its predicate is "some row
    # still needs the stack", so the whole phase (segment sums, stack setup) is skipped
    # when every row converged in the rounds (the common case at nominal softness)
    _, out = lax.while_loop(lambda st: ~st[0], lambda st: (~st[0], stack_phase(st[1])), (done, bid))
    return out


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def isotonic_pair(z, w, reg: str, solver: str):
    """Decreasing isotonic regression in permutahedron form (1-D, ``z``, ``w`` sorted desc).

    l2: ``v = argmin_{v1>=...>=vn} 1/2 ||v - (z - w)||^2``;
    kl: ``v = argmin_{v1>=...>=vn} <exp(z - v), 1> + <exp(w), v>`` (block value
    ``lse(z_B) - lse(w_B)``); p3/p4: p-norm block values (see ``_pav_pnorm``).
    """
    bid = partition(lax.stop_gradient(z), lax.stop_gradient(w), reg, solver)
    return _block_values(z, w, bid, reg)[bid]


@isotonic_pair.defjvp
def _isotonic_pair_jvp(reg, solver, primals, tangents):
    z, w = primals
    dz, dw = tangents
    n = z.shape[0]
    bid = partition(z, w, reg, solver)
    vals = _block_values(z, w, bid, reg)
    v = vals[bid]
    if reg == "l2":
        c = segment_sum(jnp.ones_like(z), bid, num_segments=n, indices_are_sorted=True)
        s = segment_sum(dz - dw, bid, num_segments=n, indices_are_sorted=True)
        dv = (s / jnp.maximum(c, 1.0))[bid]
    elif reg in PN.PREGS:
        dv = PN.tangent(z, w, dz, dw, v, bid, reg)
    else:
        pz = jnp.exp(z - _seg_lse(z, bid, n)[bid])
        pw = jnp.exp(w - _seg_lse(w, bid, n)[bid])
        dv = (
            segment_sum(pz * dz, bid, num_segments=n, indices_are_sorted=True)
            - segment_sum(pw * dw, bid, num_segments=n, indices_are_sorted=True)
        )[bid]
    return v, dv


def _desc_perm(x):
    return stable_argsort(x, descending=True)


def project(z, w, *, reg: str, solver: str, z_order: str = "any", w_order: str = "any"):
    """:func:`project_permutahedron` without validation (callers inside a jitted core)."""
    n = z.shape[-1]
    shape = jnp.broadcast_shapes(z.shape, w.shape)
    if z_order == "asc":
        zs, inv = jnp.flip(z, -1), None
    else:
        pz = _desc_perm(z)
        zs, inv = jnp.take_along_axis(z, pz, axis=-1), NU.inverse_permutation(pz)
    ws = jnp.flip(w, -1) if w_order == "asc" else jnp.take_along_axis(w, _desc_perm(w), -1)

    def iso(a, b):
        return isotonic_pair(a, b, reg, solver)

    if len(shape) == 1:
        v = iso(zs, ws)
    else:
        za = None if zs.ndim == 1 else 0
        wa = None if ws.ndim == 1 else 0
        v = jax.vmap(iso, in_axes=(za, wa))(
            zs if za is None else zs.reshape(-1, n), ws if wa is None else ws.reshape(-1, n)
        )
        v = v.reshape(shape)
    y = jnp.broadcast_to(zs, shape) - v
    if reg in PN.PREGS:
        y = PN.mirror(y, reg)
    if inv is None:
        return jnp.flip(y, -1)
    if inv.shape != shape:  # a shared ``z`` (n,) under rows of ``w``
        inv = jnp.broadcast_to(inv, shape)
    return jnp.take_along_axis(y, inv, axis=-1)


_project_jit = jax.jit(project, static_argnames=("reg", "solver", "z_order", "w_order"))


def _check_rows(zs: tuple, ws: tuple) -> None:
    """The row pairing :func:`project` supports: one side ``(n,)``, or one row per row.

    Shapes equal up to leading axes of size 1 (the rows pair one to one); anything else
    gave JAX's vmap or reshape error, which names neither argument.
    """
    if len(zs) == 1 or len(ws) == 1:
        return
    try:
        both = jnp.broadcast_shapes(zs, ws)
    except ValueError:
        both = None
    if both is None or not math.prod(zs) == math.prod(ws) == math.prod(both):
        raise TypeError(
            f"`z` {zs} and `w` {ws} must have the same shape (up to leading axes of size 1), "
            "or one of them the shape (n,)."
        )


def project_permutahedron(
    z: ArrayLike,
    w: ArrayLike,
    *,
    reg: str = "l2",
    solver: str = "hybrid",
    z_order: str = "any",
    w_order: str = "any",
) -> Array:
    """``argmax_{y in P(w)} <z, y> - R(y)`` along the last axis, batched over leading axes.

    Jitted like jax.numpy (module level, static choices static, arrays traced).

    Args:
      z: scores ``(..., n)`` (or ``(n,)`` shared by every row of ``w``); any leading
        batch axes.
      w: the permutahedron's generating vector ``(..., n)`` of ``z``'s shape (leading
        axes of size 1 aside), or ``(n,)`` (e.g. constant anchors; it is then broadcast
        inside ``vmap``, keeping the other's sharding).
      reg: regulariser ``R``: ``"l2"`` (1/2||.||^2), ``"kl"`` (entropic), ``"p3"`` /
        ``"p4"`` (p-norms with p = 3/2, 4/3).
      solver: PAV algorithm: ``"hybrid"``, ``"rounds"`` or ``"sequential"`` (same result).
      z_order: ``"asc"`` declares the rows of ``z`` already sorted ascending (saves a
        sort); ``"any"`` otherwise.
      w_order: the same for ``w``.

    Returns:
      The projection, shape ``broadcast(z, w)``.

    Raises:
      TypeError: If ``z`` or ``w`` is not a real array, or their shapes do not pair up
        (a different last axis, or different leading axes where neither is ``(n,)``).
      ValueError: If ``w`` holds a NaN or inf (eagerly; traced, at run time under ``jit``).
    """
    V.one_of(REGS, reg=reg)
    V.one_of(SOLVERS, solver=solver)
    V.one_of(("any", "asc"), z_order=z_order)
    V.one_of(("any", "asc"), w_order=w_order)
    z, w = as_float(z, name="z"), as_float(w, name="w")
    if z.ndim < 1 or w.ndim < 1 or z.shape[-1] != w.shape[-1]:
        raise TypeError(f"`z` and `w` must share a last axis, got {z.shape} and {w.shape}.")
    _check_rows(z.shape, w.shape)
    w = V.all_finite(w, name="w")  # a NaN entry gave NaN, -inf or (p3) a silent 0
    return _project_jit(z, w, reg=reg, solver=solver, z_order=z_order, w_order=w_order)


def _isotonic(y, increasing, solver):
    sign = -1 if increasing else 1
    rows = (sign * y).reshape(-1, y.shape[-1])
    out = jax.vmap(lambda r: isotonic_pair(r, jnp.zeros_like(r), "l2", solver))(rows)
    return sign * out.reshape(y.shape)


_isotonic_jit = jax.jit(_isotonic, static_argnames=("increasing", "solver"))


def isotonic(y: ArrayLike, *, increasing: bool = False, solver: str = "hybrid") -> Array:
    """L2 isotonic regression of ``y`` along its last axis (decreasing by default).

    Jitted like jax.numpy (module level, static choices static, arrays traced).

    Args:
      y: array ``(..., n)``.
      increasing: fit a non-decreasing sequence instead.
      solver: PAV algorithm: ``"hybrid"``, ``"rounds"`` or ``"sequential"`` (same result).

    Returns:
      The fitted values, same shape and dtype as ``y`` (an empty ``y`` gives an empty
      result).

    Raises:
      TypeError: If ``y`` is not a real array of rank >= 1 or ``increasing`` not a bool.
      ValueError: If ``solver`` is unknown.

    References:
      Best, Chakravarti & Ubhaya, SIAM J. Optim., 2000.
    """
    increasing = V.flag(increasing, name="increasing")
    V.one_of(SOLVERS, solver=solver)
    y = as_float(y, name="y")
    V.min_ndim(y, 1, name="y")
    if y.size == 0:  # nothing to fit (the row reshape of an empty last axis is ambiguous)
        return y
    return _isotonic_jit(y, increasing=increasing, solver=solver)
