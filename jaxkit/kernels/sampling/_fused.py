"""Sort-free fused sampler on a block of whole rows (shared by the kernel and XLA).

The top-k and top-p thresholds are found exactly by bisection over the
order-preserving integer image of the float bit patterns (32 counting passes for
f32, 64 for f64; a static trip count), skipped (a ``lax.switch``) when no row of the
block uses the filter.
Only elementwise ops, row reductions and a loop: the Pallas kernel runs
:func:`sample_block` on its block and ``implementation="xla"`` runs it on the whole
``(R, V)`` array. The sort-based ``_reference.sample_rows_reference`` is the spec;
tests check both agree token for token. With every filter off (decided statically by
the caller) ``plain=True`` skips the threshold machinery: one arg-max of ``s + g``,
the same token.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit._typing import accumulation_dtype
from jaxkit.kernels.sampling import _reference as ref


def _int_dtype(cd: jnp.dtype) -> jnp.dtype:
    return jnp.dtype(jnp.int64) if cd == jnp.float64 else jnp.dtype(jnp.int32)


def orderable(s: jax.Array) -> jax.Array:
    """Map floats to signed ints with the same order (canonicalise ``-0.0`` first)."""
    it = _int_dtype(s.dtype)
    b = jax.lax.bitcast_convert_type(s, it)
    flip = np.array(np.iinfo(it).max, dtype=it)
    return jnp.where(b < 0, b ^ flip, b)


def _bisect(cond, lo, hi, n_iter: int):
    """Largest K in [lo, hi) with cond(K), given cond(lo) and not cond(hi).

    ``n_iter`` is a Python int: Triton's ``scf.for`` verifier rejects a trip count
    computed from the data ("all of {lowerBound, upperBound, step} have same type").
    """

    def body(_, carry):
        lo, hi = carry
        mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)  # floor((lo + hi) / 2), no overflow
        ok = cond(mid)
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, _ = jax.lax.fori_loop(0, n_iter, body, (lo, hi))
    return lo


def _any01(mask: jax.Array) -> jax.Array:
    """``jnp.any(mask)`` as an int32 0 / 1 (``max``, not ``any``).

    Pallas' Triton lowering has no ``reduce_or`` (an H200 run, jax 0.11.2:
    NotImplementedError); ``reduce_max`` lowers on every backend. An int, not a bool:
    it is a ``lax.switch`` index (no i1 -> i32 conversion in the Triton module).
    """
    return jnp.max(jnp.where(mask, 1, 0).astype(jnp.int32))


def _bisect_if(used, cond, lo, hi, n_iter: int):
    """:func:`_bisect` when ``used`` (int32 0 / 1) is 1, else ``lo`` (no pass at all)."""
    return jax.lax.switch(used, (lambda: lo, lambda: _bisect(cond, lo, hi, n_iter)))


def _argmax_lowest(z: jax.Array) -> jax.Array:
    """Row arg-max with ties to the lowest index (as ``jnp.argmax``)."""
    mx = jnp.max(z, axis=-1, keepdims=True)
    cols = ref.column_index(z)
    big = jnp.full_like(cols, z.shape[-1])
    return jnp.min(jnp.where(z == mx, cols, big), axis=-1)


def _stats(x, s, keep, t, tok, stats: str) -> ref.RowStats:
    """Probability and entropy of the token (see ``sample_rows_reference``)."""
    if stats == "logits":
        xc = x.astype(s.dtype)
        prob, ent = ref.row_stats(xc, xc > -jnp.inf, tok)
    else:
        prob, ent = ref.row_stats(s, keep, tok)
        prob = jnp.where(t > 0, prob, jnp.ones_like(prob))
        ent = jnp.where(t > 0, ent, jnp.zeros_like(ent))
    return ref.RowStats(tok, prob, ent)


def _sample_plain(x, g, t, *, stats: str) -> ref.RowStats:
    """No filter: the kept set is the whole row.

    The token is one lowest-index arg-max of ``s + g`` (of ``s`` where ``T == 0``),
    the one :func:`sample_block` picks with ``k = V``, ``p = 1``, ``mp = 0``.
    """
    cd = jnp.dtype(accumulation_dtype(x.dtype))
    t = t.astype(cd)
    s = ref.tempered(x, t)
    sg = jax.lax.stop_gradient(s)
    z = jnp.where((t > 0)[:, None], sg + g.astype(cd), sg)
    tok = _argmax_lowest(z).astype(jnp.int32)
    return _stats(x, s, sg > -jnp.inf, t, tok, stats)


def sample_block(x, g, t, k, p, mp, *, stats: str, vocab: int, plain: bool = False) -> ref.RowStats:
    """Sample every row of ``x`` (``vocab`` real columns; extra columns are -inf).

    ``plain``: the caller knows every filter is off (``k = vocab``, ``p = 1``,
    ``mp = 0``); ``k``, ``p`` and ``mp`` are then not read.
    """
    if plain:
        return _sample_plain(x, g, t, stats=stats)
    cd = jnp.dtype(accumulation_dtype(x.dtype))
    it = _int_dtype(cd)
    nbits = np.iinfo(it).bits
    t = t.astype(cd)
    p = p.astype(cd)
    s = ref.tempered(x, t)  # differentiable: the statistics below use it
    sg = jax.lax.stop_gradient(s)  # the selection has no derivative
    m = jnp.max(sg, axis=-1, keepdims=True)
    e = jnp.exp(sg - m)
    key = orderable(sg)
    lo0 = jnp.full_like(t, np.iinfo(it).min, dtype=it)
    hi0 = orderable(m)[:, 0] + 1

    # top-k: largest K with #{key >= K} >= k, i.e. the key of the k-th largest value.
    k = k.astype(it)
    one, zero_i = jnp.ones_like(key), jnp.zeros_like(key)

    def enough(kk):
        return jnp.sum(jnp.where(key >= kk[:, None], one, zero_i), axis=-1) >= k

    tau_k = _bisect_if(_any01(k < vocab), enough, lo0, hi0, nbits)  # no top-k: no pass
    keep_k = key >= tau_k[:, None]

    # top-p on the top-k-renormalised mass: largest K with mass{key >= K} >= p * Z_k.
    zero = jnp.zeros_like(e)
    ek = jnp.where(keep_k, e, zero)
    target = p * jnp.sum(ek, axis=-1)

    def heavy(kk):
        return jnp.sum(jnp.where(key >= kk[:, None], ek, zero), axis=-1) >= target

    tau_p = _bisect_if(_any01(p < 1), heavy, lo0, hi0, nbits)
    tau_p = jnp.where(p >= 1, lo0, tau_p)
    keep = keep_k & (key >= tau_p[:, None]) & (e >= mp.astype(cd)[:, None])

    sampled = _argmax_lowest(jnp.where(keep, sg + g.astype(cd), jnp.full_like(sg, -jnp.inf)))
    greedy = _argmax_lowest(sg)
    tok = jnp.where(t > 0, sampled, greedy).astype(jnp.int32)
    return _stats(x, s, keep, t, tok, stats)
