"""The four engram criteria as metrics (necessity, specificity, sufficiency, reactivation).

For every memory ``k`` (``lax.map`` over k, one edited network at a time):

- necessity ``= acc_k`` after ``erase([k])`` (-> 0: the engram is needed);
- specificity ``=`` mean over ``j != k`` of ``acc_j`` after ``erase([k])`` (-> base);
- sufficiency ``= acc_k`` of the ``keep_only([k])`` network (-> base);
- reactivation: mean cosine similarity between the ``keep_only([k])`` network's
  hidden activations and the original network's, per example, averaged over the
  hidden sites, on memory-``k`` inputs (``reactivation_on`` -> 1) and on the other
  memories' inputs (``reactivation_off`` -> low).

The full ``[K, K]`` matrices (row: edited memory, column: evaluated memory) are
returned too; ``erase_accuracy`` is the paper's class-wise heat-map.
"""

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PyTree, Real

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype
from jaxkit.editing._engram import _compose
from jaxkit.editing._engram_checks import Engrams, Linear, _check_engrams, _check_layers


class Criteria(NamedTuple):
    """Per-memory engram criteria (see the module docstring); vectors are ``[K]``."""

    necessity: Array
    specificity: Array
    sufficiency: Array
    reactivation_on: Array
    reactivation_off: Array
    base_accuracy: Array
    erase_accuracy: Array
    keep_accuracy: Array
    reactivation: Array


def _per_memory(values, onehot, counts):
    return (values @ onehot) / counts


def _criteria(apply_fn, layers, engrams, inputs, labels, ids, alpha):
    k = next(iter(engrams.ratio.values())).shape[0]
    acc = accumulation_dtype(next(iter(layers.values())).w.dtype)
    onehot = (ids[:, None] == jnp.arange(k, dtype=jnp.int32)[None, :]).astype(acc)
    counts = jnp.sum(onehot, axis=0)

    def evaluate(lay):
        logits, hidden = apply_fn(lay, inputs)
        correct = (jnp.argmax(logits, axis=-1) == labels).astype(acc)
        return _per_memory(correct, onehot, counts), hidden

    base, h0 = evaluate(layers)

    def cosine(a, b):
        a, b = a.astype(acc).reshape(a.shape[0], -1), b.astype(acc).reshape(b.shape[0], -1)
        num = jnp.sum(a * b, axis=-1)
        den = jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1)
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)

    def one(m):
        sel = (jnp.arange(k, dtype=jnp.int32) == m).astype(acc)
        erased = _compose(layers, engrams, -alpha * sel, 1.0, None)
        kept = _compose(layers, engrams, sel, 0.0, None)
        acc_e, _ = evaluate(erased)
        acc_k, hk = evaluate(kept)
        cos = jnp.mean(jnp.stack([cosine(hk[s], h0[s]) for s in sorted(h0)]), axis=0)
        return acc_e, acc_k, _per_memory(cos, onehot, counts)

    e, kp, r = jax.lax.map(one, jnp.arange(k, dtype=jnp.int32))
    eye = jnp.eye(k, dtype=bool)
    off = jnp.where(eye, 0.0, 1.0).astype(acc)
    return Criteria(
        necessity=jnp.diagonal(e),
        specificity=jnp.sum(e * off, axis=1) / (k - 1),
        sufficiency=jnp.diagonal(kp),
        reactivation_on=jnp.diagonal(r),
        reactivation_off=jnp.sum(r * off, axis=1) / (k - 1),
        base_accuracy=base,
        erase_accuracy=e,
        keep_accuracy=kp,
        reactivation=r,
    )


_criteria_jit = jax.jit(_criteria, static_argnames=("apply_fn",))


def _num_classes(apply_fn, layers, inputs, b: int) -> int:
    """The class count ``C`` of ``apply_fn``'s logits ``[B, C]`` (abstract: nothing runs)."""
    out = jax.eval_shape(apply_fn, layers, inputs)
    shape = getattr(out[0], "shape", None) if isinstance(out, tuple | list) and out else None
    if shape is None or len(shape) != 2 or shape[0] != b:
        raise TypeError(
            f"`apply_fn` must return (logits [{b}, classes], hidden), got logits of shape {shape}."
        )
    return int(shape[1])


def _check_inputs(inputs, b: int) -> None:
    """Every leaf of ``inputs`` is a numeric array ``[B, ...]`` (one row per label).

    Reads only dtypes and shapes (tracers pass); a wrong rank would otherwise fail deep
    inside ``apply_fn`` with a message naming no argument.
    """
    for leaf in jax.tree.leaves(inputs):
        try:
            dt = None if isinstance(leaf, str | bytes) else jnp.result_type(leaf)
        except TypeError:
            dt = None
        if dt is None or not (jnp.issubdtype(dt, jnp.number) or jnp.issubdtype(dt, jnp.bool_)):
            raise TypeError(
                f"`inputs` must be a pytree of numeric arrays, got a leaf "
                f"{type(leaf).__name__} {leaf!r:.80}."
            )
        if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != b:
            raise TypeError(
                f"`inputs` must be a batch: every leaf needs a leading axis of size {b} (the "
                f"length of `labels`), got a leaf of shape {jnp.shape(leaf)}."
            )


def criteria(
    apply_fn: Callable[[dict[str, Linear], PyTree], tuple[Array, dict[str, Array]]],
    layers: Mapping[str, Linear],
    engrams: Engrams,
    inputs: PyTree,
    labels: ArrayLike,
    ids: ArrayLike,
    *,
    alpha: Real[ArrayLike, ""] = 1.0,
) -> Criteria:
    """Necessity, specificity, sufficiency and reactivation of every memory's engram.

    Args:
      apply_fn: ``apply_fn(layers, inputs) -> (logits [B, classes], {name: hidden
        [B, ...]})``, the network run with the given sites (static: define it once).
        The hidden activations are what reactivation compares.
      layers: The original sites (site -> :class:`Linear`).
      engrams: From :func:`extract`.
      inputs: Evaluation inputs (any pytree ``apply_fn`` accepts), each leaf with the
        leading batch axis ``[B, ...]`` of ``labels``.
      labels: Correct classes ``[B]``, in ``[0, C)`` for the ``C`` classes of the logits.
      ids: Memory of each example ``[B]`` in ``[0, K)``; every memory needs at least
        one example.
      alpha: Erase strength (traced; ``count_ratio`` scaling).

    Returns:
      :class:`Criteria`.

    Raises:
      TypeError: ``labels``/``ids`` not 1-D integer arrays of the same length, a leaf
        of ``inputs`` not a numeric array with the leading batch axis ``[B, ...]``, or
        ``apply_fn`` not returning logits ``[B, C]`` first.
      ValueError: K < 2, an id outside ``[0, K)``, a label outside ``[0, C)``, a memory
        without examples or a non-finite ``alpha``.
    """
    layers = _check_layers(layers)
    k = _check_engrams(layers, engrams)
    if k < 2:
        raise ValueError(f"`engrams` must hold at least 2 memories for specificity, got {k}.")
    for name, a in (("labels", labels), ("ids", ids)):
        _validate.integer(a, name=name)  # before jnp.asarray: a str names the argument
        _validate.ndim(a, 1, name=name)
    labels, ids = jnp.asarray(labels), jnp.asarray(ids)
    _validate.same_shape(ids=ids, labels=labels)
    _check_inputs(inputs, labels.shape[0])
    c = _num_classes(apply_fn, layers, inputs, labels.shape[0])
    labels = _validate.ids_in(labels, c, name="labels")  # the classes of the logits
    labels, ids = labels.astype(jnp.int32), ids.astype(jnp.int32)
    ids = _validate.guard_finite(ids, alpha, name="alpha")  # erase's own guard
    present = jnp.zeros((k,), jnp.int32).at[jnp.clip(ids, 0, k - 1)].add(1)
    ids = _validate.error_if(
        ids,
        jnp.any((ids < 0) | (ids >= k)),
        f"`ids` must lie in [0, {k}) (K = {k} memories were extracted).",
    )
    ids = _validate.error_if(
        ids, jnp.any(present == 0), "`ids` must give every memory at least one example."
    )
    return _criteria_jit(apply_fn, layers, engrams, inputs, labels, ids, alpha)
