"""Selection with soft Booleans and soft indices (distributions over positions).

Every public function is jitted like jax.numpy (module level, static choices static,
arrays and continuous hyperparameters traced), its arguments checked on the host first
(:func:`jaxkit._jit.checked_jit`).

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

from collections.abc import Sequence

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._jit import checked_jit
from jaxkit.soft._common import as_float, broadcastable, flat_axis


@checked_jit(arrays=("condition", "x", "y"))
def where(condition: ArrayLike, x: ArrayLike, y: ArrayLike) -> Array:
    """Soft ``where``: ``c x + (1 - c) y`` for a soft Boolean ``c``.

    Elementwise: ``condition``, ``x`` and ``y`` broadcast (any shapes).
    """
    broadcastable(condition=condition, x=x, y=y)
    x = as_float(x, name="x")
    c = jnp.asarray(condition).astype(x.dtype)
    y = jnp.asarray(y).astype(x.dtype)
    return x * c + y * (1.0 - c)


@checked_jit(arrays=("x", "soft_index"), static_argnames=("axis",))
def take_along_axis(x: ArrayLike, soft_index: ArrayLike, axis: int | None = -1) -> Array:
    """Expectation of ``x`` along ``axis`` under a soft index of shape ``(..., k, ..., [n])``.

    Requires ``soft_index.ndim == x.ndim + 1``.
    """
    x = as_float(x, name="x")
    p = jnp.asarray(soft_index).astype(x.dtype)
    x, ax = flat_axis(x, axis)
    if p.ndim != x.ndim + 1:
        raise TypeError(
            f"`soft_index` must have rank x.ndim + 1 = {x.ndim + 1}, got shape {p.shape}."
        )
    if p.shape[-1] != x.shape[ax]:
        raise TypeError(f"`soft_index` last axis must have size {x.shape[ax]}, got {p.shape}.")
    xl = jnp.moveaxis(x, ax, -1)
    pl = jnp.moveaxis(p, ax, -2)
    try:  # the other axes pair up (einsum's message named neither argument)
        jnp.broadcast_shapes(xl.shape[:-1], pl.shape[:-2])
    except ValueError:
        raise TypeError(
            f"`soft_index` {p.shape} must match `x` {x.shape} on every axis but `axis` "
            "(broadcasting)."
        ) from None
    out = jnp.einsum("...n,...kn->...k", xl, pl)
    return jnp.moveaxis(out, -1, ax)


@checked_jit(arrays=("x", "soft_index"), static_argnames=("axis",))
def take(x: ArrayLike, soft_index: ArrayLike, axis: int | None = None) -> Array:
    """Soft ``jnp.take`` with a soft index of shape ``(k, [n])``."""
    x = as_float(x, name="x")
    p = jnp.asarray(soft_index).astype(x.dtype)
    V.ndim(p, 2, name="soft_index")
    x, ax = flat_axis(x, axis)
    if p.shape[-1] != x.shape[ax]:
        raise TypeError(f"`soft_index` last axis must have size {x.shape[ax]}, got {p.shape}.")
    xl = jnp.moveaxis(x, ax, -1)
    out = jnp.einsum("...n,kn->...k", xl, p)
    return jnp.moveaxis(out, -1, ax)


@checked_jit(arrays=("soft_index", "choices"))
def choose(soft_index: ArrayLike, choices: ArrayLike) -> Array:
    """Soft ``jnp.choose``: ``sum_i p[..., i] choices[i, ...]``.

    ``soft_index`` ``(..., [n])`` and ``choices`` ``(n, ...)`` have the same rank (the other
    axes broadcast).

    Raises:
      TypeError: If the ranks differ, ``soft_index``'s last axis is not ``choices``' first,
        or the other axes do not broadcast (e.g. an empty axis against a non-empty one).
    """
    c = as_float(choices, name="choices")
    p = jnp.asarray(soft_index).astype(c.dtype)
    if p.ndim != c.ndim or p.shape[-1] != c.shape[0]:
        raise TypeError(
            f"`soft_index` (..., [n]) and `choices` (n, ...) are incompatible: "
            f"{p.shape} vs {c.shape}."
        )
    try:  # JAX's message named neither argument
        tgt = jnp.broadcast_shapes(c.shape[1:], p.shape[:-1])
    except ValueError:
        raise TypeError(
            f"`soft_index` {p.shape} and `choices` {c.shape} must broadcast on their other "
            "axes (all but `soft_index`'s last and `choices`' first)."
        ) from None
    cb = jnp.moveaxis(jnp.broadcast_to(c, (c.shape[0], *tgt)), 0, -1)
    return jnp.sum(cb * p, axis=-1)


@checked_jit(arrays=("x", "soft_index"), flags=("keepdims",), static_argnames=("axis", "keepdims"))
def dynamic_index_in_dim(
    x: ArrayLike, soft_index: ArrayLike, axis: int = 0, keepdims: bool = True
) -> Array:
    """Soft ``lax.dynamic_index_in_dim`` with a soft index of shape ``([n],)``."""
    x = as_float(x, name="x")
    p = jnp.asarray(soft_index).astype(x.dtype)
    ax = V.axis(axis, x.ndim)
    V.shape(p, (x.shape[ax],), name="soft_index")
    y = jnp.tensordot(jnp.moveaxis(x, ax, -1), p, axes=1)
    return jnp.expand_dims(y, ax) if keepdims else y


@checked_jit(arrays=("x", "soft_start_index"), static_argnames=("slice_size", "axis", "boundary"))
def dynamic_slice_in_dim(
    x: ArrayLike,
    soft_start_index: ArrayLike,
    slice_size: int,
    axis: int = 0,
    *,
    boundary: str = "clamp",
) -> Array:
    """Soft ``lax.dynamic_slice_in_dim``: ``y_t = sum_i p_i x[start(i) + t]``.

    ``boundary="clamp"`` (default, ``lax`` semantics: start clamped to ``n - slice_size``)
    or ``"wrap"`` (softjax parity: indices taken modulo ``n``).
    """
    V.one_of(("clamp", "wrap"), boundary=boundary)
    x = as_float(x, name="x")
    p = jnp.asarray(soft_start_index).astype(x.dtype)
    ax = V.axis(axis, x.ndim)
    n = x.shape[ax]
    V.shape(p, (n,), name="soft_start_index")
    if not 0 < slice_size <= n:
        raise ValueError(f"`slice_size` must satisfy 0 < slice_size <= {n}, got {slice_size}.")
    i = jnp.arange(n)[:, None]
    t = jnp.arange(slice_size)[None, :]
    idx = (i + t) % n if boundary == "wrap" else jnp.minimum(i, n - slice_size) + t
    xl = jnp.moveaxis(x, ax, -1)
    g = xl[..., idx]  # (..., n, slice)
    y = jnp.einsum("...it,i->...t", g, p)
    return jnp.moveaxis(y, -1, ax)


def dynamic_slice(
    x: ArrayLike,
    soft_start_indices: Sequence[ArrayLike],
    slice_sizes: Sequence[int],
    *,
    boundary: str = "clamp",
) -> Array:
    """Soft ``lax.dynamic_slice``: separable soft slices along every axis.

    Raises:
      TypeError: If ``soft_start_indices`` and ``slice_sizes`` do not hold one entry per
        axis of ``x``, or ``soft_start_indices[a]`` is not of shape ``(x.shape[a],)``.
      ValueError: If a slice size is outside ``[1, x.shape[a]]`` (so an empty axis of
        ``x`` is an error: no slice fits) or ``boundary`` is unknown.
    """
    x = as_float(x, name="x")
    if not len(soft_start_indices) == len(slice_sizes) == x.ndim:
        raise TypeError(
            f"`soft_start_indices` and `slice_sizes` need one entry per axis "
            f"({x.ndim}), got {len(soft_start_indices)} and {len(slice_sizes)}."
        )
    for a, (p, s) in enumerate(zip(soft_start_indices, slice_sizes, strict=True)):
        n = x.shape[a]  # the per-axis call's messages would name its own arguments
        if jnp.shape(p) != (n,):
            raise TypeError(
                f"`soft_start_indices`[{a}] must have shape ({n},) (axis {a} of `x`), "
                f"got shape {jnp.shape(p)}."
            )
        if not 0 < s <= n:
            raise ValueError(
                f"`slice_sizes`[{a}] must satisfy 0 < size <= {n} (axis {a} of `x`), got {s}."
            )
    for a, (p, s) in enumerate(zip(soft_start_indices, slice_sizes, strict=True)):
        x = dynamic_slice_in_dim(x, p, s, axis=a, boundary=boundary)
    return x
