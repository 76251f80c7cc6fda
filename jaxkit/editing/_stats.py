"""Streaming per-memory input covariances for closed-form engrams.

One jitted ``lax.scan`` over the data collects, for every named linear layer
("site") and every memory ``k`` at once, the uncentered mean input covariance
``C_k = X_k^T X_k / n_k`` and the row count ``n_k``. The reference set is the
union of all memories, so the total covariance is ``C = sum_k (n_k / N) C_k``.

Rows are split among memories without the K-fold cost of masking: inside each
batch the rows are sorted by memory, each memory's run is padded to whole blocks
of ``block`` rows, one small Gram matrix is formed per block and the blocks are
summed per memory (``method="grouped"``, about ``(R + (K + 1) * block) D^2`` flops
per batch of R rows, ``(R / block + K + 1) D^2`` memory). ``method="masked"`` uses
one-hot masks instead (``K R D^2`` flops, but only ``K D^2`` memory); ``"auto"``
falls back to it when the block buffer would exceed 2^26 elements.

References:
  J. Kwon et al., "AI Engram: In Search of Memory Traces in Artificial
  Intelligence", ICML 2026, arXiv:2606.14997 (statistics as in the authors'
  code jeakwon/ai-engram, ``src/engram/stats.py``: uncentered mean covariances
  with counts, bias absorbed by appending 1).
"""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PyTree

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype

_METHODS = ("auto", "grouped", "masked")
_GROUPED_MAX_ELEMENTS = 2**26  # block Gram buffer above this -> "masked" under "auto"


class CovStats(NamedTuple):
    """Per-memory input statistics of every site.

    Attributes:
      cov: site name -> mean covariances ``[*stack, K, D, D]`` (``D`` includes the
        appended constant 1 when collected with ``absorb_bias=True``), in the
        accumulation dtype (f32, f64 for f64 inputs); zero for a memory without rows.
      count: site name -> int32 row counts ``[K]`` per memory.
    """

    cov: dict[str, Array]
    count: dict[str, Array]


def _bk(v: Array, nd: int) -> Array:
    """A per-memory vector ``[K]`` shaped to broadcast against ``[*stack, K, D, D]``."""
    return v.reshape((1,) * (nd - 3) + (v.shape[0], 1, 1))


def _inv_count(n: Array, dtype: Any) -> Array:
    """``1 / n`` where ``n > 0``, else 0 (a memory without rows keeps a zero covariance)."""
    nf = n.astype(dtype)
    return jnp.where(n > 0, 1.0 / jnp.maximum(nf, 1.0), 0.0).astype(dtype)


def _row_ids(bid: Array, rows: int, name: str) -> Array:
    flat = bid.reshape(-1)
    if flat.shape[0] == 0 or rows % flat.shape[0] != 0:
        raise TypeError(
            f"`ids` gives {flat.shape[0]} ids per batch but site {name!r} has {rows} rows; "
            "the rows of a site must be a whole multiple of the ids (example-major order)."
        )
    return jnp.repeat(flat.astype(jnp.int32), rows // flat.shape[0], total_repeat_length=rows)


def _grams_masked(x: Array, rid: Array, k: int) -> Array:
    """``[*stack, K, D, D]`` per-memory Gram sums by one-hot masks."""
    onehot = (rid[:, None] == jnp.arange(k, dtype=rid.dtype)[None, :]).astype(x.dtype)
    return jnp.einsum("...rd,rk,...re->...kde", x, onehot, x)


def _grams_grouped(x: Array, rid: Array, k: int, block: int) -> Array:
    """Per-memory Gram sums from sorted, block-padded rows (each block one memory)."""
    r = x.shape[-2]
    seg = jnp.where((rid >= 0) & (rid < k), rid, k)  # masked rows -> trash segment k
    counts = jnp.zeros((k + 1,), jnp.int32).at[seg].add(1)
    padded = (counts + block - 1) // block * block
    offsets = jnp.cumsum(padded) - padded  # start of each memory's padded run
    starts = jnp.cumsum(counts) - counts  # start of each memory's run after sorting
    order = jnp.argsort(seg, stable=True)
    sseg = seg[order]
    dest = offsets[sseg] + jnp.arange(r, dtype=jnp.int32) - starts[sseg]
    n_blocks = _n_blocks(r, k, block)
    buf = jnp.zeros((*x.shape[:-2], n_blocks * block, x.shape[-1]), x.dtype)
    buf = buf.at[..., dest, :].set(jnp.take(x, order, axis=-2))
    blocks = buf.reshape(*x.shape[:-2], n_blocks, block, x.shape[-1])
    grams = jnp.einsum("...nbd,...nbe->...nde", blocks, blocks)
    ends = offsets + padded
    block_seg = jnp.searchsorted(ends, jnp.arange(n_blocks, dtype=jnp.int32) * block, side="right")
    onehot = (block_seg[:, None] == jnp.arange(k, dtype=block_seg.dtype)[None, :]).astype(
        x.dtype
    )  # trash/pad -> no memory
    return jnp.einsum("...nde,nk->...kde", grams, onehot)


def _n_blocks(r: int, k: int, block: int) -> int:
    return -(-r // block) + k + 1


def _plan(method: str, r: int, d: int, k: int, block: int | None) -> tuple[str, int]:
    """Static choice of method and block size for one site.

    ``block=None``: the smallest block in 8, 16, ..., 128 (least padding work) whose
    Gram buffer ``n_blocks * D^2`` fits 2^26 elements; none fits -> ``"masked"``
    under ``"auto"`` (``"grouped"`` then takes the largest).
    """
    if block is not None:
        b = min(block, r)
        fits = _n_blocks(r, k, b) * d * d <= _GROUPED_MAX_ELEMENTS
        chosen = method if method != "auto" else ("grouped" if fits else "masked")
        return chosen, b
    for b in (8, 16, 32, 64, 128):
        b = min(b, r)
        if _n_blocks(r, k, b) * d * d <= _GROUPED_MAX_ELEMENTS:
            return ("grouped" if method == "auto" else method), b
    return ("masked" if method == "auto" else method), min(128, r)


def _site_sums(x: Array, rid: Array, k: int, absorb_bias: bool, method: str, block):
    acc = accumulation_dtype(x.dtype)
    x = x.astype(acc)
    if absorb_bias:
        x = jnp.concatenate([x, jnp.ones((*x.shape[:-1], 1), acc)], axis=-1)
    r, d = x.shape[-2], x.shape[-1]
    chosen, b = _plan(method, r, d, k, block)
    if chosen == "grouped":
        s = _grams_grouped(x, rid, k, b)
    else:
        s = _grams_masked(x, rid, k)
    n = jnp.zeros((k,), jnp.int32).at[jnp.where(rid < 0, k, rid)].add(1, mode="drop")
    return s, n


def _collect(taps_fn, params, batches, ids, *, num_memories, absorb_bias, method, block, axis_name):
    k = num_memories
    first = jax.tree.map(lambda b: jax.ShapeDtypeStruct(b.shape[1:], b.dtype), batches)

    def sums(batch, bid):
        taps = taps_fn(params, batch)
        out = {}
        for name, x in taps.items():
            rid = _row_ids(bid, x.shape[-2], name)
            out[name] = _site_sums(x, rid, k, absorb_bias, method, block)
        return out

    init = jax.eval_shape(sums, first, jax.ShapeDtypeStruct(ids.shape[1:], ids.dtype))
    carry0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), init)

    def body(carry, inp):
        batch, bid = inp
        new = sums(batch, bid)
        out = {}
        for name, (mean, n) in carry.items():
            s, kb = new[name]
            tot = n + kb
            w = _inv_count(tot, mean.dtype)
            kf = kb.astype(mean.dtype)
            upd = (s - _bk(kf, s.ndim) * mean) * _bk(w, s.ndim)
            out[name] = (mean + upd, tot)
        return out, None

    final, _ = jax.lax.scan(body, carry0, (batches, ids))
    cov = {n: m for n, (m, _) in final.items()}
    count = {n: c for n, (_, c) in final.items()}
    if axis_name is not None:
        cov, count = _psum_merge(cov, count, axis_name)
    return CovStats(cov, count)


def _psum_merge(cov, count, axis_name):
    tot = {n: jax.lax.psum(c, axis_name) for n, c in count.items()}
    out = {}
    for n, m in cov.items():
        s = jax.lax.psum(m * _bk(count[n].astype(m.dtype), m.ndim), axis_name)
        inv = _inv_count(tot[n], m.dtype)
        out[n] = s * _bk(inv, s.ndim)
    return out, tot


_collect_jit = jax.jit(
    _collect,
    static_argnames=("taps_fn", "num_memories", "absorb_bias", "method", "block", "axis_name"),
)


def collect_stats(
    taps_fn: Callable[[PyTree, PyTree], dict[str, Array]],
    params: PyTree,
    batches: PyTree,
    ids: ArrayLike,
    *,
    num_memories: int,
    absorb_bias: bool = True,
    method: str = "auto",
    block: int | None = None,
    axis_name: Any = None,
) -> CovStats:
    """Per-memory uncentered mean input covariances of every site, in one jitted scan.

    Args:
      taps_fn: ``taps_fn(params, batch) -> {site: rows}``, the *inputs* of each
        linear layer to edit, each of shape ``[*stack, R, D]``: axis -2 the rows
        (example-major: examples, or examples x positions/tokens/patches, see
        :func:`conv_patches`), axis -1 the features, leading axes the stacked layers
        of a site (e.g. ``[L, B*T, D]`` for a transformer's stacked MLP weights).
        Static: define it once (a new function object recompiles).
      params: Passed to ``taps_fn`` (the original network; "tabula rasa").
      batches: A pytree whose leaves have a leading axis ``nb`` (number of batches);
        the scan runs over it.
      ids: Memory ids ``[nb, B]`` (one per example; each example's rows get its id)
        or ``[nb, B, P]`` (one per row, e.g. per token), integers in ``[0, K)``;
        ``-1`` marks rows that belong to no memory (padding, non-answer tokens) and
        are left out of every statistic.
      num_memories: K (static).
      absorb_bias: Append a constant 1 to every row (covariance ``D + 1``), so that
        layers with a bias are edited affinely; layers without one use the leading
        ``D x D`` block, which equals the plain covariance.
      method: ``"grouped"``, ``"masked"`` or ``"auto"`` (grouped unless its block
        buffer exceeds 2^26 elements); all give the same statistics.
      block: Rows per block for ``"grouped"`` (static); ``None`` picks the smallest
        of 8, 16, ..., 128 whose block Gram buffer fits 2^26 elements.
      axis_name: Inside ``shard_map`` with the data split over this axis, merge the
        per-device statistics (count-weighted ``psum``); the id check uses
        ``eqx.error_if``, so build the ``shard_map`` with ``check_vma=False``.

    Returns:
      :class:`CovStats` (covariances in f32, or f64 for f64 rows).

    Raises:
      TypeError: ``ids`` not an integer array, or its size per batch does not divide
        a site's rows.
      ValueError: ``num_memories < 1``, an unknown ``method``, or an id outside
        ``[-1, K)`` (a runtime error under ``jit``).
    """
    k = _validate.python_int(num_memories, name="num_memories", minimum=1)
    blk = None if block is None else _validate.python_int(block, name="block", minimum=1)
    _validate.one_of(_METHODS, method=method)
    _validate.flags(absorb_bias=absorb_bias)
    _validate.integer(ids, name="ids")  # before jnp.asarray: a str names `ids`
    ids = jnp.asarray(ids)
    _validate.ndim(ids, (2, 3), name="ids")
    leaves = jax.tree.leaves(batches)
    if not leaves or any(jnp.shape(leaf)[:1] != ids.shape[:1] for leaf in leaves):
        raise TypeError(
            "`batches` leaves must share the leading batch-count axis of `ids` "
            f"({ids.shape[0]}), got shapes {[jnp.shape(leaf) for leaf in leaves]}."
        )
    ids = _validate.error_if(
        ids,
        jnp.any((ids < -1) | (ids >= k)),
        f"`ids` must lie in [0, {k}) (or -1 for rows outside every memory); "
        f"some id is out of range for num_memories={k}.",
    )
    return _collect_jit(
        taps_fn,
        params,
        batches,
        ids,
        num_memories=k,
        absorb_bias=absorb_bias,
        method=method,
        block=blk,
        axis_name=axis_name,
    )


def check_stats(stats: Any, *, name: str = "stats") -> CovStats:
    """One :class:`CovStats` record: ``cov[s]`` ``[*stack, K, D, D]``, ``count[s]`` integer ``[K]``.

    Shapes and dtypes are static checks; the counts are guarded ``>= 0`` (a runtime error
    under ``jit``): use the returned record. Shared by every public function taking one.
    """
    if not (
        isinstance(stats, CovStats)
        and isinstance(stats.cov, Mapping)
        and isinstance(stats.count, Mapping)
    ):
        raise TypeError(
            f"`{name}` must be a CovStats of dicts (from collect_stats), got {stats!r:.80}."
        )
    count = {}
    for s, cov in stats.cov.items():
        where = f"{name}.cov[{s!r}]"
        _validate.min_ndim(cov, 3, name=where)  # [*stack, K, D, D]
        k, d = jnp.shape(cov)[-3], jnp.shape(cov)[-1]
        _validate.shape(cov, (*jnp.shape(cov)[:-3], k, d, d), name=where)
        if s not in stats.count:
            raise TypeError(f"`{name}.count` has no site {s!r} (it has {sorted(stats.count)}).")
        n = stats.count[s]
        _validate.integer(n, name=f"{name}.count[{s!r}]")
        _validate.shape(n, (k,), name=f"{name}.count[{s!r}]")
        n = jnp.asarray(n)
        count[s] = _validate.error_if(
            n, jnp.any(n < 0), f"`{name}.count[{s!r}]` must be row counts >= 0."
        )
    return CovStats(dict(stats.cov), count)


def _merge(a: CovStats, b: CovStats) -> CovStats:
    cov, count = {}, {}
    for n in a.cov:
        na, nb = a.count[n], b.count[n]
        tot = na + nb
        inv = _inv_count(tot, a.cov[n].dtype)
        wa = _bk(na.astype(inv.dtype) * inv, a.cov[n].ndim)
        wb = _bk(nb.astype(inv.dtype) * inv, a.cov[n].ndim)
        cov[n] = a.cov[n] * wa + b.cov[n] * wb
        count[n] = tot
    return CovStats(cov, count)


_merge_jit = jax.jit(_merge)


def merge_stats(a: CovStats, b: CovStats) -> CovStats:
    """Count-weighted merge of two :class:`CovStats` over the same sites and memories.

    Equals collecting over the concatenation of both data sets.

    Raises:
      TypeError: the two have different sites or shapes, or a count is not an integer
        array ``[K]`` (``K`` of the site's covariances).
      ValueError: a negative count (a runtime error under ``jit``).
    """
    a, b = check_stats(a, name="a"), check_stats(b, name="b")
    if set(a.cov) != set(b.cov):
        raise TypeError(f"`b` has sites {sorted(b.cov)}, `a` has {sorted(a.cov)}.")
    for n in a.cov:
        if a.cov[n].shape != b.cov[n].shape or a.count[n].shape != b.count[n].shape:
            raise TypeError(f"`b` site {n!r} has shape {b.cov[n].shape}, `a` has {a.cov[n].shape}.")
    return _merge_jit(a, b)


def total_covariance(cov: Array, count: Array) -> tuple[Array, Array]:
    """``C = sum_k (n_k / N) C_k`` of one site (``cov [*stack, K, D, D]``) and ``N``."""
    n = jnp.sum(count)
    w = count.astype(cov.dtype) / jnp.maximum(n, 1).astype(cov.dtype)
    return jnp.einsum("...kde,k->...de", cov, w), n
