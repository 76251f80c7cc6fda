"""jnp reference of the windowed batch matrix multiplication (WBMM): the specification.

The relative-position bias table ``R (C, T)`` is gathered into one dense matrix per
channel, ``M_c[p, q] = R[c, I[p, q]]`` (``p`` the source and ``q`` the target position
inside a window, raster order), and every non-overlapping window is mixed by
``Y = X @ M_c + X``. Inputs whose height or width is not a multiple of the window are
zero-padded at the bottom/right, mixed, and cropped back (the one padding rule).

Reshapes split or merge one axis at a time so that an input sharded along its batch
axis under an explicit mesh keeps its sharding.
"""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype

Window = tuple[int, int]


def check_window(window) -> Window:
    """``window`` as a pair of Python ints >= 1 (an int means square).

    A value of the wrong type is a ``TypeError`` naming ``window``; a size < 1 a
    ``ValueError``.
    """
    if isinstance(window, int) and not isinstance(window, bool):
        window = (window, window)
    if (
        not isinstance(window, tuple | list)
        or len(window) != 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in window)
    ):
        raise TypeError(f"`window` must be an int or a pair of ints, got {window!r}.")
    if min(window) < 1:
        raise ValueError(f"`window` sizes must be >= 1, got window={tuple(window)}.")
    return int(window[0]), int(window[1])


def table_size(window: Window) -> int:
    """``T = (2 wh - 1)(2 ww - 1)``, the number of relative offsets."""
    wh, ww = window
    return (2 * wh - 1) * (2 * ww - 1)


def relative_position_index(window: Window) -> np.ndarray:
    """Static ``(d, d)`` int32 index ``I[p, q]`` into the table (``p`` source, ``q`` target).

    ``I[p, q] = (hp - hq + wh - 1)(2 ww - 1) + (wp - wq + ww - 1)`` with raster
    positions ``p = hp * ww + wp``. The table reshaped to ``(2wh-1, 2ww-1)`` is then a
    cross-correlation kernel whose centre tap ``(wh-1, ww-1)`` is offset 0.
    """
    wh, ww = window
    hh, wwi = np.meshgrid(np.arange(wh), np.arange(ww), indexing="ij")
    hp, wp = hh.reshape(-1), wwi.reshape(-1)
    dh = hp[:, None] - hp[None, :] + wh - 1
    dw = wp[:, None] - wp[None, :] + ww - 1
    return (dh * (2 * ww - 1) + dw).astype(np.int32)


def window_matrix_reference(table: Float[Array, "C T"], window: Window) -> Float[Array, "C d d"]:
    """Gather the per-channel dense window matrices ``M = table[:, I]``."""
    return table[:, relative_position_index(window)]


def padded_hw(h: int, w: int, window: Window) -> tuple[int, int]:
    """Height and width rounded up to multiples of the window."""
    wh, ww = window
    return -(-h // wh) * wh, -(-w // ww) * ww


def pad_to_window(x: Float[Array, "B H W C"], window: Window) -> Float[Array, "B Hp Wp C"]:
    """Zero-pad height and width at the bottom/right up to multiples of the window."""
    h, w = x.shape[1], x.shape[2]
    hp, wp = padded_hw(h, w, window)
    if (hp, wp) == (h, w):
        return x
    return jnp.pad(x, ((0, 0), (0, hp - h), (0, wp - w), (0, 0)))


def window_partition(x: Float[Array, "B H W C"], window: Window) -> Float[Array, "B nh nw C d"]:
    """Split ``(B, H, W, C)`` (multiples of the window) into ``(B, nh, nw, C, d)`` windows."""
    b, h, w, c = x.shape
    wh, ww = window
    x = x.reshape(b, h // wh, wh, w, c).reshape(b, h // wh, wh, w // ww, ww, c)
    x = x.transpose(0, 1, 3, 5, 2, 4)  # b nh nw c wh ww
    return x.reshape(b, h // wh, w // ww, c, wh * ww)


def window_unpartition(y: Float[Array, "B nh nw C d"], window: Window) -> Float[Array, "B H W C"]:
    """Inverse of :func:`window_partition`."""
    b, nh, nw, c, _ = y.shape
    wh, ww = window
    y = y.reshape(b, nh, nw, c, wh, ww).transpose(0, 1, 4, 2, 5, 3)  # b nh wh nw ww c
    return y.reshape(b, nh, wh, nw * ww, c).reshape(b, nh * wh, nw * ww, c)


def windowed_matmul_cached_reference(
    x: Float[Array, "B H W C"],
    matrix: Float[Array, "C d d"],
    *,
    window: Window,
    residual: bool = True,
) -> Float[Array, "B H W C"]:
    """WBMM from the dense per-channel matrices (pads, mixes, crops; no checks)."""
    h, w = x.shape[1], x.shape[2]
    acc = accumulation_dtype(x.dtype)
    xw = window_partition(pad_to_window(x, window), window)
    # batch over channels: (c, b, i, j, q). (An einsum spelling of the same product hits
    # an unsupported bf16 x bf16 -> f32 dot layout on XLA:CPU in jax 0.10.2.)
    y = lax.dot_general(
        xw, matrix.astype(x.dtype), (((4,), (1,)), ((3,), (0,))), preferred_element_type=acc
    )
    y = jnp.moveaxis(y, 0, 3)
    if residual:
        y = y + xw.astype(acc)
    y = window_unpartition(y.astype(x.dtype), window)
    return y[:, :h, :w, :]


def windowed_matmul_reference(
    x: Float[Array, "B H W C"],
    table: Float[Array, "C T"],
    *,
    window: Window,
    residual: bool = True,
) -> Float[Array, "B H W C"]:
    """WBMM from the compact table: ``M = table[:, I]`` then the cached form.

    Args:
      x: Channels-last feature map ``(B, H, W, C)``, floating (padded to the window
        and cropped back, as :func:`~jaxkit.kernels.windowed_matmul.windowed_matmul`).
      table: Relative-position table ``(C, T)``, ``T = (2wh-1)(2ww-1)``, floating.
      window: Window ``(wh, ww)``; an int means square.
      residual: Add the identity inside the operator.

    Raises:
      TypeError: ``x`` not a floating rank-4 array, ``table`` not a floating
        ``(C, T)`` array (a string included), ``window`` not an int or a pair of ints,
        ``residual`` not a bool.
      ValueError: A ``window`` size < 1.
    """
    window = check_window(window)
    _validate.floating(x, name="x")
    _validate.ndim(x, 4, name="x")
    _validate.floating(table, name="table")
    _validate.shape(table, (jnp.shape(x)[-1], table_size(window)), name="table")
    _validate.flags(residual=residual)
    return windowed_matmul_cached_reference(
        x, window_matrix_reference(table, window), window=window, residual=residual
    )


def table_from_kernel_reference(
    kernel: Float[Array, "K L C"], window: Window
) -> Float[Array, "C T"]:
    """Embed a ``(K, L, C)`` depthwise cross-correlation kernel centred in the table grid.

    Taps farther than ``w - 1`` from the centre can never reach inside a window and
    are dropped; odd sizes only (the centre tap is offset 0).
    """
    k, l, c = kernel.shape
    wh, ww = window
    gh, gw = 2 * wh - 1, 2 * ww - 1
    # crop taps beyond the grid (inert), then zero-pad up to the grid
    ch, cw = max(0, (k - gh) // 2), max(0, (l - gw) // 2)
    kernel = kernel[ch : k - ch, cw : l - cw, :]
    k, l = kernel.shape[0], kernel.shape[1]
    ph, pw = (gh - k) // 2, (gw - l) // 2
    grid = jnp.pad(kernel, ((ph, ph), (pw, pw), (0, 0)))
    return jnp.moveaxis(grid, -1, 0).reshape(c, gh * gw)
