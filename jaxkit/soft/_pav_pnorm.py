"""p-norm PAV block solvers (softjax modes ``"c1"`` / ``"c2"`` of ``fast_soft_sort``).

The permutahedron projection with the p-norm regulariser, p = 3/2 (``"p3"``, q = 3) or
p = 4/3 (``"p4"``, q = 4), reduces (in sorted coordinates ``s = z_sorted``) to a
decreasing isotonic problem whose block value ``gamma`` solves

    sum_B phi(s_i - gamma) = sum_B w_i,     phi(t) = t |t|^(q-2)  (the mirror map),

and the projection is ``y = phi(s - v)``. Since ``phi`` is increasing the problem is
separable convex, so PAV (any pooling order) gives the optimum and the partition logic
of :mod:`jaxkit.soft._pav` applies unchanged; only the block values differ.

Block values are computed for every block at once with segment sums on block-centred
data (``u = s - mean_B(s)``, so float32 keeps its precision for large ``|s|``):

* q = 4: depressed cubic ``d^3 + p d + r = 0`` (``p = 3 mu2/|B|``, ``r = (W - mu3)/|B|``
  with central moments ``mu_k``), solved by a fixed number of Newton steps from an upper
  bound (softjax uses the hyperbolic Cardano formula, ~20x costlier on CPU);
* q = 3: the residual ``h(g) = sum_B (g - s_i)|g - s_i| + W`` is increasing and piecewise
  quadratic with breakpoints at the ``s_i``; it is evaluated at every breakpoint with
  segmented prefix sums (``lax.associative_scan``), the sign pattern picks the piece
  (elements with ``s_i >= gamma``), and the quadratic of that piece is solved in its
  cancellation-free form. softjax solves all ``n + 1`` pieces per merge (O(n) each);
  this costs O(n log n) for all blocks together.

Derivative (used by the ``custom_jvp`` in ``_pav``): differentiating the block equation,
``d gamma = (sum_B a_i ds_i - dW_B / (q - 1)) / sum_B a_i`` with ``a_i = |s_i - gamma|^(q-2)``.

References:
  Blondel, Teboul, Berthet & Djolonga, Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
  Blondel, Martins & Niculae, Learning with Fenchel-Young losses (p-norm mirror maps),
  JMLR 2020.
  Sander et al., Fast, differentiable and sparse top-k: a convex analysis perspective
  <https://arxiv.org/abs/2302.01425>, 2023.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import jax.numpy as jnp
from jax import lax
from jax.ops import segment_sum

PREGS = ("p3", "p4")
Q = {"p3": 3, "p4": 4}


def mirror(t, reg):
    """``phi(t) = t |t|^(q-2)``."""
    return t * jnp.abs(t) if reg == "p3" else t * t * t


def weight(t, reg):
    """``|t|^(q-2)`` (``phi'(t) = (q-1) * weight``)."""
    return jnp.abs(t) if reg == "p3" else t * t


def _ss(x, bid, ns):
    return segment_sum(x, bid, num_segments=ns, indices_are_sorted=True)


def _seg_cumsum(x, start):
    """Inclusive prefix sums restarting at every ``start`` (a bool mask)."""

    def comb(a, b):
        av, af = a
        bv, bf = b
        return jnp.where(bf, bv, av + bv), af | bf

    out, _ = lax.associative_scan(comb, (x, start))
    return out


def _safe_div(a, b):
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


CUBIC_NEWTON = 6  # from a <= ~50% overestimate: float64 round-off after 5, float32 after 4


def _cbrt_guess(x):
    """Cube root of ``x >= 0`` to ~3.5% by the exponent-divided-by-3 bit trick."""
    if x.dtype == jnp.float64:
        i = lax.bitcast_convert_type(x, jnp.uint64)
        i = i // jnp.uint64(3) + jnp.uint64(0x2A9F7893782DA1CE)
        return lax.bitcast_convert_type(i, jnp.float64)
    i = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    i = i // jnp.uint32(3) + jnp.uint32(0x2A5137A0)
    return lax.bitcast_convert_type(i, jnp.float32).astype(x.dtype)


def _depressed_cubic_root(p, r):
    """The real root of ``d^3 + p d + r = 0`` for ``p >= 0`` (elementwise).

    ``D = |d|`` solves ``D^3 + p D = |r|``, an increasing convex function on
    ``D >= 0``; both ``|r|^(1/3)`` and ``|r| / p`` bound ``D`` from above and the
    smaller is within ~50% of it, so a fixed number of Newton steps from there converges
    (monotonically once right of the root) to round-off. Only multiply-adds and one
    division per step: the hyperbolic Cardano formula (``sinh``, ``arcsinh``, ``cbrt``)
    that softjax uses costs ~20x more on CPU and dominated mode ``"c2"``.
    """
    ar = jnp.abs(r)
    pos = p > 0
    D = jnp.minimum(_cbrt_guess(ar), jnp.where(pos, ar / jnp.where(pos, p, 1.0), jnp.inf))
    for _ in range(CUBIC_NEWTON):
        fp = 3.0 * D * D + p
        ok = fp > 0
        D = D - jnp.where(ok, (D * D * D + p * D - ar) / jnp.where(ok, fp, 1.0), 0.0)
    return jnp.where(ar > 0, -jnp.sign(r) * D, jnp.zeros_like(D))


def singleton_offset(w):
    """``gamma - s`` of p4 singleton blocks (``block_values`` with ``p = 0``, ``r = w``)."""
    return _depressed_cubic_root(jnp.zeros_like(w), w)


def block_values(s, w, bid, reg, num_segments=None):
    """Block values ``gamma_b`` (length ``num_segments``) for the partition ``bid``.

    ``s`` is sorted descending and ``bid`` non-decreasing (contiguous blocks).
    """
    n = s.shape[0]
    ns = n if num_segments is None else num_segments
    cnt = _ss(jnp.ones_like(s), bid, ns)
    W = _ss(w, bid, ns)
    c = _safe_div(_ss(s, bid, ns), cnt)
    u = s - c[bid]
    cnt1 = jnp.maximum(cnt, 1.0)
    if reg == "p4":
        mu2 = _ss(u * u, bid, ns)
        mu3 = _ss(u * u * u, bid, ns)
        p = 3.0 * mu2 / cnt1
        r = (W - mu3) / cnt1
        return c + _depressed_cubic_root(p, r)
    # q = 3: h(g) = sum_B (g - s)|g - s| + W, increasing in g; h(s_j) >= 0 <=> s_j >= gamma
    idx = jnp.arange(n)
    start = (idx == 0) | (bid != jnp.roll(bid, 1))
    u2 = u * u
    P0 = _seg_cumsum(jnp.ones_like(s), start)
    P1 = _seg_cumsum(u, start)
    P2 = _seg_cumsum(u2, start)
    T1 = _ss(u, bid, ns)[bid]
    T2 = _ss(u2, bid, ns)[bid]
    T0 = cnt[bid]
    # elements up to j (u_i >= u_j): -(u_j - u_i)^2; after j: +(u_j - u_i)^2
    before = P0 * u2 - 2.0 * u * P1 + P2
    after = (T0 - P0) * u2 - 2.0 * u * (T1 - P1) + (T2 - P2)
    hj = after - before + W[bid]
    hi = (hj >= 0).astype(s.dtype)
    nH = _ss(hi, bid, ns)
    U1H = _ss(hi * u, bid, ns)
    U2H = _ss(hi * u2, bid, ns)
    U1 = _ss(u, bid, ns)
    U2 = _ss(u2, bid, ns)
    a = (cnt - nH) - nH
    b = -2.0 * ((U1 - U1H) - U1H)
    c0 = (U2 - U2H) - U2H + W
    D = jnp.maximum(b * b - 4.0 * a * c0, 0.0)
    sD = jnp.where(D > 0, jnp.sqrt(jnp.where(D > 0, D, 1.0)), 0.0)
    # root on the increasing branch (2 a d + b = +sqrt(D)), cancellation-free form
    d = jnp.where(b >= 0, _safe_div(-2.0 * c0, b + sD), _safe_div(-b + sD, 2.0 * a))
    return c + d


def range_value(s, w, lo, hi, reg):
    """Block value of the single block ``s[lo:hi]`` (O(n), used by the stack PAV)."""
    idx = jnp.arange(s.shape[0], dtype=jnp.int32)
    bid = (idx >= lo).astype(jnp.int32) + (idx >= hi).astype(jnp.int32)
    return block_values(s, w, bid, reg, num_segments=3)[1]


def stack(s, w, bid0, nb, reg):
    """Stack PAV over the ``nb`` blocks of ``bid0`` (contiguous, from the parallel rounds).

    Returns, for every element, the index of its final block.
    """
    n = s.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    zi = jnp.zeros_like(s, dtype=jnp.int32)
    # element range [lo, hi) of every initial block
    lo0 = jnp.full_like(zi, n).at[bid0].min(idx.astype(jnp.int32))
    hi0 = zi.at[bid0].max(idx.astype(jnp.int32) + 1)
    val0 = block_values(s, w, bid0, reg)

    def mcond(st):
        starts, lo, hi, g, m = st
        return (m >= 2) & (g[jnp.maximum(m - 2, 0)] < g[jnp.maximum(m - 1, 0)])

    def mbody(st):
        starts, lo, hi, g, m = st
        nlo, nhi = lo[m - 2], hi[m - 1]
        g = g.at[m - 2].set(range_value(s, w, nlo, nhi, reg))
        hi = hi.at[m - 2].set(nhi)
        starts = starts.at[m - 1].set(n)
        return starts, lo, hi, g, m - 1

    def fbody(st):
        i, starts, lo, hi, g, m = st
        starts = starts.at[m].set(i)
        lo = lo.at[m].set(lo0[i])
        hi = hi.at[m].set(hi0[i])
        g = g.at[m].set(val0[i])
        starts, lo, hi, g, m = lax.while_loop(mcond, mbody, (starts, lo, hi, g, m + 1))
        return i + 1, starts, lo, hi, g, m

    init = (zi[0], zi + n, zi, zi, jnp.zeros_like(s), zi[0])
    _, starts, _, _, _, m = lax.while_loop(lambda st: st[0] < nb, fbody, init)
    ar = jnp.cumsum(jnp.ones_like(zi), dtype=jnp.int32) - 1
    starts = jnp.where(ar < m, starts, n)
    mask = zi.at[starts].add(1, mode="drop")  # 1 at every final block start (item index)
    final = jnp.cumsum(mask, dtype=jnp.int32) - 1
    return final[bid0]


def tangent(z, w, dz, dw, v, bid, reg):
    """Implicit tangent of the block values: ``dv_i = d gamma_{b(i)}``."""
    n = z.shape[0]
    a = weight(z - v, reg)
    den = _ss(a, bid, n)
    num = _ss(a * dz, bid, n)
    dW = _ss(dw, bid, n)
    cnt = jnp.maximum(_ss(jnp.ones_like(z), bid, n), 1.0)
    k = Q[reg] - 1.0
    ok = den > 0
    dsafe = jnp.where(ok, den, 1.0)
    dg = jnp.where(ok, (num - dW / k) / dsafe, _ss(dz, bid, n) / cnt)
    return dg[bid]
