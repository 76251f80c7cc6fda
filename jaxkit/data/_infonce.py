"""In-batch InfoNCE with an optional global batch gathered over a mesh axis."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate as V
from jaxkit._typing import RealScalarLike, accumulation_dtype
from jaxkit.data._hobit import _check_dup, _check_emb


def _infonce(q, d, dup_ids, tau, *, axis_name):
    acc = accumulation_dtype(q.dtype)
    qf, df = q.astype(acc), d.astype(acc)
    b = q.shape[0]
    offset = 0
    if axis_name is not None:
        offset = jax.lax.axis_index(axis_name) * b
        df = jax.lax.all_gather(df, axis_name, tiled=True)  # [b * devices, dim]
        if dup_ids is not None:
            dup_all = jax.lax.all_gather(dup_ids, axis_name, tiled=True)
    elif dup_ids is not None:
        dup_all = dup_ids
    pos = offset + jnp.arange(b)
    logits = (qf @ df.T) / tau  # [b, global]
    if dup_ids is not None:  # same-group documents are not negatives (false negatives)
        other = jnp.arange(df.shape[0])[None, :] != pos[:, None]
        logits = jnp.where(other & (dup_ids[:, None] == dup_all[None, :]), -jnp.inf, logits)
    lse = jax.nn.logsumexp(logits, axis=1)
    loss = jnp.mean(lse - jnp.take_along_axis(logits, pos[:, None], axis=1)[:, 0])
    if axis_name is not None:
        loss = jax.lax.pmean(loss, axis_name)
    return loss.astype(q.dtype)


_infonce_jit = jax.jit(_infonce, static_argnames=("axis_name",))


def infonce(
    q: Float[ArrayLike, "b dim"],
    d: Float[ArrayLike, "b dim"],
    *,
    tau: RealScalarLike = 0.05,
    dup_ids: Int[Array, " b"] | None = None,
    axis_name: str | None = None,
) -> Float[Array, ""]:
    """Mean in-batch InfoNCE loss ``logsumexp_j(<q_i, d_j>/tau) - <q_i, d_i>/tau``.

    Every other document of the batch is a negative of query ``i`` (rows of ``q``/``d``
    are pairs; pass L2-normalised embeddings for the usual cosine form). ``dup_ids``
    removes same-group documents from the negatives (the false negatives HOBIT filters).
    Multi-device: inside ``shard_map`` with the batch split over mesh axis
    ``axis_name``, the documents (and ``dup_ids``) are all-gathered so each local query
    sees the *global* batch as negatives, and the loss is ``pmean``-ed: the value and its
    gradient equal the single-device loss on the whole batch. Jitted (``axis_name``
    static, ``tau`` traced).
    """
    V.floating(q, name="q")  # before jnp.asarray: a string's error would name no argument
    V.floating(d, name="d")
    q, d = jnp.asarray(q), jnp.asarray(d)
    _check_emb(q, d)
    V.nonempty(q, name="q")
    dup_ids = _check_dup(dup_ids, q.shape[0])
    q = V.guard_positive(q, tau, name="tau")
    return _infonce_jit(q, d, dup_ids, tau, axis_name=axis_name)


__all__ = ["infonce"]
