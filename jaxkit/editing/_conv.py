"""Convolutions as linear sites: im2col rows and the matching weight layout.

A 2-D convolution with kernel ``w [O, C, kh, kw]`` (OIHW) is the linear map
``rows @ conv_weight_to_linear(w)`` on the patch rows of :func:`conv_patches`
(features ordered channel-major, then kernel rows, then kernel columns), one row
per output position. Collect statistics on these rows (rows are patches, so the
``count_ratio`` of a conv layer counts patches, not images) and write an edited
matrix back with :func:`linear_to_conv_weight`.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate


def _patches(x, *, kernel_size, stride, padding):
    p = jax.lax.conv_general_dilated_patches(
        x,
        filter_shape=kernel_size,
        window_strides=(stride, stride),
        padding=padding,
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )
    n, f = p.shape[:2]
    return jnp.moveaxis(p, 1, -1).reshape(n * p.shape[2] * p.shape[3], f)


_patches_jit = jax.jit(_patches, static_argnames=("kernel_size", "stride", "padding"))


def conv_patches(
    x: Float[ArrayLike, "N C H W"],
    kernel_size: int | tuple[int, int],
    *,
    stride: int = 1,
    padding: str = "SAME",
) -> Float[Array, "rows features"]:
    """im2col rows ``[N * H' * W', C * kh * kw]`` (example-major) of an NCHW batch.

    Args:
      x: Images ``[N, C, H, W]``.
      kernel_size: ``k`` or ``(kh, kw)`` (static).
      stride: Spatial stride (static).
      padding: ``"SAME"`` or ``"VALID"`` (static), as in ``lax.conv_general_dilated``.
    """
    _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
    x = jnp.asarray(x)
    _validate.ndim(x, 4, name="x")
    ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    if len(ks) != 2:
        raise TypeError(f"`kernel_size` must be an int or a pair, got {kernel_size!r}.")
    ks = tuple(_validate.python_int(k, name="kernel_size", minimum=1) for k in ks)
    st = _validate.python_int(stride, name="stride", minimum=1)
    _validate.one_of(("SAME", "VALID"), padding=padding)
    return _patches_jit(x, kernel_size=ks, stride=st, padding=padding)


def conv_weight_to_linear(w: Float[ArrayLike, "O C kh kw"]) -> Float[Array, "ckk O"]:
    """An OIHW kernel as the ``[C * kh * kw, O]`` matrix acting on :func:`conv_patches` rows.

    An empty kernel gives the empty matrix of that shape (``O = 0``: ``[C * kh * kw, 0]``).

    Raises:
      TypeError: ``w`` not a numeric array of rank 4.
    """
    _validate.numeric(w=w)  # before jnp.asarray: a str names the argument
    w = jnp.asarray(w)
    _validate.ndim(w, 4, name="w")
    o, c, kh, kw = w.shape  # explicit: reshape(0, -1) is ambiguous for O = 0
    return w.reshape(o, c * kh * kw).T


def linear_to_conv_weight(m: Float[ArrayLike, "ckk O"], shape: tuple[int, ...]) -> Array:
    """Inverse of :func:`conv_weight_to_linear` for an OIHW ``shape``."""
    _validate.numeric(m=m)  # before jnp.asarray: a str names the argument
    m = jnp.asarray(m)
    _validate.ndim(m, 2, name="m")
    if not isinstance(shape, tuple | list) or len(shape) != 4:
        raise TypeError(f"`shape` must be an OIHW 4-tuple, got {shape!r}.")
    o, c, kh, kw = shape
    _validate.shape(m, (c * kh * kw, o), name="m")
    return m.T.reshape(o, c, kh, kw)
