"""Per-example gradients (vmap, micro-batched) and Poisson-sampled batches."""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, PRNGKeyArray, PyTree, Real

from jaxkit import _validate


def per_example_grads(
    loss_fn: Callable[..., Array],
    params: PyTree,
    batch: PyTree,
    *,
    microbatch_size: int | None = None,
    mask: Bool[ArrayLike, " batch"] | None = None,
) -> PyTree:
    """Gradients of ``loss_fn(params, example)`` for every example of ``batch``.

    ``jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))``; with ``microbatch_size``
    the batch is processed by ``lax.map`` over micro-batches of that size (lower
    peak memory, same result). ``mask`` zeroes padded examples (Poisson batches),
    which then contribute nothing to a clipped sum.

    Args:
      loss_fn: Scalar loss of one example (leaves of ``batch`` without the batch axis).
      params: Parameters differentiated (e.g. the LoRA factors).
      batch: Pytree whose leaves share a leading batch axis.
      microbatch_size: Examples per ``vmap``; must divide the batch size.
      mask: Boolean ``[batch]``; ``False`` rows get zero gradients.

    Returns:
      A pytree like ``params`` with a leading batch axis on every leaf.

    Raises:
      TypeError: If a ``params`` leaf is not a floating array, a ``batch`` leaf is not a
        numeric array with a leading axis (or the leading sizes differ), or ``mask`` is
        not a boolean ``[batch]`` array.
      ValueError: If ``microbatch_size`` does not divide the batch size.
    """
    _validate.leaves(params, name="params", inexact=True)  # jax.grad takes inexact leaves
    leaves = jax.tree.leaves(batch)
    if not leaves:
        raise ValueError("`batch` has no array leaves.")
    _validate.leaves(batch, name="batch", batch=True, keys=True)  # per-example keys too
    b = jnp.shape(leaves[0])[0]
    for x in leaves:
        if jnp.shape(x)[:1] != (b,):
            raise TypeError(
                f"`batch` leaves must share a leading axis, got {jnp.shape(x)} and batch size {b}."
            )
    if microbatch_size is not None:
        _validate.python_int(microbatch_size, name="microbatch_size")
    g1 = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))
    if microbatch_size is None or microbatch_size >= b:
        grads = g1(params, batch)
    else:
        _validate.positive(microbatch_size=microbatch_size)
        if b % microbatch_size:
            raise ValueError(f"`microbatch_size`={microbatch_size} must divide the batch size {b}.")
        k = b // microbatch_size
        mb = jax.tree.map(lambda x: jnp.reshape(x, (k, microbatch_size, *jnp.shape(x)[1:])), batch)
        grads = jax.lax.map(lambda x: g1(params, x), mb)
        grads = jax.tree.map(lambda x: jnp.reshape(x, (b, *x.shape[2:])), grads)
    if mask is not None:
        if isinstance(mask, str | bytes):
            raise TypeError(f"`mask` must be a boolean array, got str {mask!r:.80}.")
        mask = jnp.asarray(mask)
        _validate.shape(mask, (b,), name="mask")
        if mask.dtype != jnp.bool_:
            raise TypeError(f"`mask` must be a boolean array, got dtype {mask.dtype}.")
        grads = jax.tree.map(
            lambda g: g * mask.reshape((b,) + (1,) * (g.ndim - 1)).astype(g.dtype), grads
        )
    return grads


class PoissonBatch(NamedTuple):
    """Indices of a Poisson-sampled batch padded to a fixed size.

    Attributes:
      indices: ``int32[max_batch_size]`` example indices (0 where padded).
      mask: ``bool[max_batch_size]``, True for real examples.
      size: Realised batch size (before truncation).
      overflow: True if more than ``max_batch_size`` examples were drawn (the
        extra ones were dropped: this breaks the accounting, choose
        ``max_batch_size`` so it is negligible).
    """

    indices: Array
    mask: Array
    size: Array
    overflow: Array


def poisson_batch(
    *,
    key: PRNGKeyArray,
    num_examples: int,
    q: Real[ArrayLike, ""],
    max_batch_size: int,
) -> PoissonBatch:
    """Poisson sampling: each example joins independently with probability ``q``.

    Args:
      key: PRNG key (fold in the step).
      num_examples: Dataset size ``N``.
      q: Sampling rate in ``[0, 1]``.
      max_batch_size: Static padded size.

    Returns:
      :class:`PoissonBatch` (use ``mask`` with :func:`per_example_grads`, and
      divide by the expected size ``q N``).

    Raises:
      ValueError: If ``q`` is outside ``[0, 1]`` or sizes are not positive.
    """
    _validate.is_key(key)
    _validate.real(q, name="q")
    _validate.in_interval(low=0.0, high=1.0, q=q)
    num_examples = _validate.python_int(num_examples, name="num_examples", minimum=1)
    max_batch_size = _validate.python_int(max_batch_size, name="max_batch_size", minimum=1)
    if isinstance(q, jax.core.Tracer):  # a traced NaN or out-of-range rate samples garbage
        q = _validate.guard_interval(q, q, name="q", low=0.0, high=1.0)
    return _poisson_batch(key, q, num_examples=num_examples, max_batch_size=max_batch_size)


# jitted like jax.numpy (sizes static, ``q`` traced): an eager call compiles one program
# instead of one per op (the Bernoulli draw alone is about a dozen)
@functools.partial(jax.jit, static_argnames=("num_examples", "max_batch_size"))
def _poisson_batch(key, q, *, num_examples, max_batch_size):
    take = jax.random.bernoulli(key, jnp.asarray(q, jnp.float32), (num_examples,))
    size = jnp.sum(take.astype(jnp.int32))
    (idx,) = jnp.nonzero(take, size=max_batch_size, fill_value=0)
    mask = jnp.arange(max_batch_size, dtype=jnp.int32) < size
    return PoissonBatch(idx.astype(jnp.int32), mask, size, size > max_batch_size)
