"""MTS informative per-example features (spec ``training.md`` section 2.2, "Features").

Pure, jitted functions of embeddings, labels and logits: position of an example in
its class distribution (cosine to the reference class centre, top-k cosines to the
nearest reference examples, similarity-weighted kNN label agreement) and a training
dynamics feature (EL2N). Dense ``[N, M]`` similarities: for corpora beyond a few
thousand rows call them on blocks of ``emb``.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate as V
from jaxkit._typing import accumulation_dtype


def _unit(x):
    n = jnp.linalg.norm(x, axis=-1, keepdims=True)
    return x / jnp.where(n > 0, n, 1.0)


def _check_emb(emb, ref):
    V.floating(emb, name="emb")  # before jnp.asarray (a string names no argument)
    V.floating(ref, name="ref_emb")
    emb, ref = jnp.asarray(emb), jnp.asarray(ref)
    V.ndim(emb, 2, name="emb")
    V.ndim(ref, 2, name="ref_emb")
    if emb.shape[1] != ref.shape[1]:
        raise TypeError(f"`ref_emb` must have {emb.shape[1]} columns, got {ref.shape[1]}.")
    return emb, ref


def _labels(y, n, name):
    V.integer(y, name=name)
    y = jnp.asarray(y)
    V.shape(y, (n,), name=name)
    return y


def _el2n(logits, labels):
    acc = accumulation_dtype(logits.dtype)
    p = jax.nn.softmax(logits.astype(acc), axis=-1)
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=acc)
    return jnp.linalg.norm(p - onehot, axis=-1).astype(logits.dtype)


_el2n_jit = jax.jit(_el2n)


def el2n(logits: Float[ArrayLike, "n c"], labels: Int[ArrayLike, " n"]) -> Float[Array, " n"]:
    """EL2N score ``||softmax(logits_i) - onehot(y_i)||_2`` (Paul et al. 2021). Jitted."""
    V.floating(logits, name="logits")
    logits = jnp.asarray(logits)
    V.ndim(logits, 2, name="logits")
    labels = _labels(labels, logits.shape[0], "labels")
    labels = V.error_if(
        labels, jnp.any((labels < 0) | (labels >= logits.shape[1])), "`labels` out of range."
    )
    return _el2n_jit(logits, labels)


def _center_cosine(emb, labels, ref, ref_labels, *, num_classes):
    acc = accumulation_dtype(emb.dtype)
    r = _unit(ref.astype(acc))
    onehot = jax.nn.one_hot(ref_labels, num_classes, dtype=acc)
    centres = onehot.T @ r  # class sums of unit reference embeddings (mean up to scale)
    c = _unit(centres)[labels]
    return jnp.sum(_unit(emb.astype(acc)) * c, axis=-1).astype(emb.dtype)


_center_cosine_jit = jax.jit(_center_cosine, static_argnames=("num_classes",))


def center_cosine(
    emb: Float[ArrayLike, "n d"],
    labels: Int[ArrayLike, " n"],
    ref_emb: Float[ArrayLike, "m d"],
    ref_labels: Int[ArrayLike, " m"],
    *,
    num_classes: int,
) -> Float[Array, " n"]:
    """Cosine between each example and the centre of its class in the reference set.

    The centre of class ``c`` is the mean of the L2-normalised ``ref_emb`` rows with
    ``ref_labels == c`` (``SD_real_center`` / ``CLS_center_cos`` with real data as
    reference). A label whose class has no reference row raises, and so does a
    ``ref_labels`` entry outside ``[0, num_classes)`` (it was silently left out of every
    centre). Jitted (``num_classes`` static).
    """
    emb, ref = _check_emb(emb, ref_emb)
    num_classes = V.python_int(num_classes, name="num_classes", minimum=1)
    labels = _labels(labels, emb.shape[0], "labels")
    ref_labels = _labels(ref_labels, ref.shape[0], "ref_labels")
    present = jnp.zeros(num_classes, bool).at[ref_labels].set(True, mode="drop")
    bad = jnp.any((labels < 0) | (labels >= num_classes)) | ~jnp.all(
        present[jnp.clip(labels, 0, num_classes - 1)]
    )
    labels = V.error_if(labels, bad, "`labels` out of range or with no `ref_labels` row.")
    ref_bad = jnp.any((ref_labels < 0) | (ref_labels >= num_classes))  # one_hot drops them
    ref_labels = V.error_if(ref_labels, ref_bad, f"`ref_labels` must lie in [0, {num_classes}).")
    return _center_cosine_jit(emb, labels, ref, ref_labels, num_classes=num_classes)


def _cos(emb, ref, exclude_self):
    acc = accumulation_dtype(emb.dtype)
    s = _unit(emb.astype(acc)) @ _unit(ref.astype(acc)).T
    if exclude_self:
        s = jnp.where(jnp.eye(s.shape[0], dtype=bool), -jnp.inf, s)
    return s


def _nearest(emb, ref, *, k, exclude_self):
    return jax.lax.top_k(_cos(emb, ref, exclude_self), k)[0].astype(emb.dtype)


_nearest_jit = jax.jit(_nearest, static_argnames=("k", "exclude_self"))


def _knn_agree(emb, labels, ref, ref_labels, *, k, exclude_self):
    s, idx = jax.lax.top_k(_cos(emb, ref, exclude_self), k)
    wt = (1 + s) / 2  # similarity weights in [0, 1]
    same = (ref_labels[idx] == labels[:, None]).astype(wt.dtype)
    total = jnp.sum(wt, axis=1)
    out = jnp.sum(wt * same, axis=1) / jnp.where(total > 0, total, 1.0)
    return out.astype(emb.dtype)


_knn_agree_jit = jax.jit(_knn_agree, static_argnames=("k", "exclude_self"))


def _check_k(k, emb, ref, exclude_self) -> tuple[int, bool]:
    """``(k, exclude_self)`` checked against the reference rows (one fewer, same row count)."""
    exclude_self = V.flag(exclude_self, name="exclude_self")
    if exclude_self and emb.shape[0] != ref.shape[0]:
        raise TypeError("`exclude_self` needs `ref_emb` with as many rows as `emb`.")
    k = V.python_int(k, name="k", minimum=1)
    m = ref.shape[0]
    if k > m - int(exclude_self):
        raise ValueError(f"`k` must be <= the number of reference rows available, got k={k}.")
    return k, exclude_self


def nearest_cosines(
    emb: Float[ArrayLike, "n d"],
    ref_emb: Float[ArrayLike, "m d"],
    *,
    k: int = 3,
    exclude_self: bool = False,
) -> Float[Array, "n k"]:
    """Top-``k`` cosine similarities of each row of ``emb`` to the rows of ``ref_emb``.

    Descending (``CLS_nearest_real_cos`` / ``SD_real_3nearest``). ``exclude_self``
    (static; needs ``ref_emb`` to be ``emb`` itself, same row order) skips the diagonal.
    Jitted.
    """
    emb, ref = _check_emb(emb, ref_emb)
    k, exclude_self = _check_k(k, emb, ref, exclude_self)
    return _nearest_jit(emb, ref, k=k, exclude_self=exclude_self)


def knn_label_agreement(
    emb: Float[ArrayLike, "n d"],
    labels: Int[ArrayLike, " n"],
    ref_emb: Float[ArrayLike, "m d"],
    ref_labels: Int[ArrayLike, " m"],
    *,
    k: int = 5,
    exclude_self: bool = False,
) -> Float[Array, " n"]:
    """Similarity-weighted kNN label agreement (``SD_weighted_knn_acc``) in ``[0, 1]``.

    ``sum_j v_ij [y_j == y_i] / sum_j v_ij`` over the ``k`` reference rows of highest
    cosine ``s_ij``, with weights ``v_ij = (1 + s_ij) / 2`` (**[recon]**: the weighting
    keeps every weight >= 0; the authors' exact weighting is not reproduced).
    ``labels`` and ``ref_labels`` are only compared for equality, so any integer ids
    are valid. ``exclude_self`` as :func:`nearest_cosines`. Jitted (``k``,
    ``exclude_self`` static).
    """
    emb, ref = _check_emb(emb, ref_emb)
    k, exclude_self = _check_k(k, emb, ref, exclude_self)
    labels = _labels(labels, emb.shape[0], "labels")
    ref_labels = _labels(ref_labels, ref.shape[0], "ref_labels")
    return _knn_agree_jit(emb, labels, ref, ref_labels, k=k, exclude_self=exclude_self)


__all__ = ["center_cosine", "el2n", "knn_label_agreement", "nearest_cosines"]
