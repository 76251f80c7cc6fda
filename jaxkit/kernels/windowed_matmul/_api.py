"""Public WBMM operator: checks, dispatch (``implementation=``) and the custom VJP.

``"xla"`` runs the jnp reference (differentiable by plain autodiff, forward and
reverse mode). ``"pallas"`` / ``"pallas_interpret"`` run the Triton kernels of
``_pallas_gpu`` on the padded ``(C, N_p, d_p)`` layout behind a ``jax.custom_vjp``
(reverse mode only): ``dX = dY @ M^T (+ dY)`` by the same kernel, ``dM = X^T dY`` by
the reduction kernel; the table gradient is the autodiff transpose of the gather
``M = table[:, I]`` (a scatter-add of ``dM`` onto the ``T`` offsets).
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit.kernels import _dispatch
from jaxkit.kernels.windowed_matmul import _pallas_gpu
from jaxkit.kernels.windowed_matmul import _reference as ref

WindowLike = int | tuple[int, int]


# ----------------------------------------------------------------------------- checks


def _check_x(x: jax.Array, window: tuple[int, int], pad_to_window: bool) -> None:
    _validate.ndim(x, 4, name="x")
    _validate.floating(x, name="x")
    _validate.flags(pad_to_window=pad_to_window)
    h, w = x.shape[1], x.shape[2]
    if not pad_to_window and (h % window[0] or w % window[1]):
        raise TypeError(
            f"`x` spatial shape ({h}, {w}) is not a multiple of window={window}; pass "
            "pad_to_window=True to zero-pad at the bottom/right and crop."
        )


def _check_bias(bias: jax.Array | None, c: int) -> None:
    if bias is not None:
        _validate.shape(bias, (c,), name="bias")
        _validate.floating(bias, name="bias")


# ----------------------------------------------------------------------------- kernel path


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _layout(n: int, block_n: int | None, max_block: int = 128) -> tuple[int, int, int]:
    """Choose ``(block_n, steps, n_p)`` for ``n`` windows (powers of two for Triton)."""
    if block_n is None:
        block_n = min(max_block, max(16, _next_pow2(n)))
    nb = -(-n // block_n)
    steps = _next_pow2(-(-nb // 8) + 1) // 2 or 1  # largest power of two <= ceil(nb / 8)
    splits = -(-nb // steps)
    return block_n, steps, splits * steps * block_n


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6))
def _mix_core(xw, m, residual, interpret, block_n, steps, block_d):
    tiling = _pallas_gpu.Tiling(block_n, block_d, interpret)
    return _pallas_gpu.mix_pallas(xw, m, residual=residual, tiling=tiling)


def _mix_core_fwd(xw, m, residual, interpret, block_n, steps, block_d):
    return _mix_core(xw, m, residual, interpret, block_n, steps, block_d), (xw, m)


def _mix_core_bwd(residual, interpret, block_n, steps, block_d, res, g):
    xw, m = res
    g = g.astype(xw.dtype)
    tiling = _pallas_gpu.Tiling(block_n, block_d, interpret)
    dxw = _pallas_gpu.mix_pallas(g, jnp.swapaxes(m, 1, 2), residual=residual, tiling=tiling)
    dm = _pallas_gpu.outer_pallas(xw, g, steps=steps, tiling=tiling).sum(axis=1)
    return dxw, dm.astype(m.dtype)


_mix_core.defvjp(_mix_core_fwd, _mix_core_bwd)


def _kernel_path(x, matrix, *, window, residual, interpret, block_n=None, block_d=64):
    """Pad, re-lay out to ``(C, N_p, d_p)``, run the kernel, and undo the layout."""
    b, h, w, c = x.shape
    wh, ww = window
    d = wh * ww
    xp = ref.pad_to_window(x, window)
    hp, wp = xp.shape[1], xp.shape[2]
    nh, nw = hp // wh, wp // ww
    n = b * nh * nw
    xw = xp.reshape(b, nh, wh, nw, ww, c).transpose(5, 0, 1, 3, 2, 4).reshape(c, n, d)
    d_p = max(16, _next_pow2(d))
    # w14 (d_p = 256): 64-window blocks keep the Triton tiles small
    block_n, steps, n_p = _layout(n, block_n, max_block=128 if d_p <= 64 else 64)
    xw = jnp.pad(xw, ((0, 0), (0, n_p - n), (0, d_p - d)))
    m = jnp.pad(matrix.astype(x.dtype), ((0, 0), (0, d_p - d), (0, d_p - d)))
    block_d = min(block_d, d_p)
    y = _mix_core(xw, m, residual, interpret, block_n, steps, block_d)[:, :n, :d]
    y = y.reshape(c, b, nh, nw, wh, ww).transpose(1, 2, 4, 3, 5, 0).reshape(b, hp, wp, c)
    return y[:, :h, :w, :]


# ----------------------------------------------------------------------------- public


def window_matrix(
    table: Float[ArrayLike, "C T"], *, window: WindowLike = (7, 7)
) -> Float[Array, "C d d"]:
    """Build the dense per-channel window matrices ``M_c[p, q] = table[c, I[p, q]]``.

    This is the cached ("WBMM-C") deploy form: build ``M`` once after training and
    call :func:`windowed_matmul_cached`, which skips the gather (``C d^2`` reads) and
    its scatter-add transpose at every call.

    Args:
      table: Relative-position table, one row of ``T = (2wh-1)(2ww-1)`` offsets per
        channel.
      window: Window ``(wh, ww)`` (an int means square).

    Returns:
      ``(C, d, d)`` matrices, ``d = wh * ww``, in the table's dtype.

    References:
      Song et al., "WBMM: Windowed Batch Matrix Multiplication", ICML 2026
      (code: wansong-s/WBMM).
    """
    window = ref.check_window(window)
    _validate.floating(table, name="table")  # before jnp.asarray: a string names `table`
    table = jnp.asarray(table)
    _check_table(table, window)
    return _window_matrix(table, window=window)


def windowed_matmul(
    x: Float[ArrayLike, "B H W C"],
    table: Float[ArrayLike, "C T"],
    *,
    window: WindowLike = (7, 7),
    residual: bool = True,
    bias: Float[ArrayLike, " C"] | None = None,
    pad_to_window: bool = True,
    implementation: str = "auto",
) -> Float[Array, "B H W C"]:
    """Windowed batch matrix multiplication (WBMM) from a relative-position table.

    Every non-overlapping ``wh x ww`` window of every channel is mixed by a dense
    ``d x d`` matrix gathered from the channel's table, ``M_c = table[c, I]``:
    ``Y[c, n, q] = sum_p X[c, n, p] M_c[p, q] + X[c, n, q] (+ bias[c])``. This equals a
    zero-padded ``(2wh-1) x (2ww-1)`` depthwise cross-correlation applied inside each
    window, plus the identity. Padding rule: when ``H`` or ``W`` is not a multiple of
    the window, ``x`` is zero-padded at the bottom/right, mixed, and the output is
    cropped back to ``(H, W)`` (so border windows see zeros beyond the image).

    Args:
      x: Channels-last feature map ``(B, H, W, C)`` (vmap for more batch axes).
      table: Relative-position table ``(C, T)``, ``T = (2wh-1)(2ww-1)``; the centre
        column ``(wh-1)(2ww-1) + ww-1`` is offset 0. Cast to ``x``'s dtype.
      window: Window ``(wh, ww)``; an int means square. Static.
      residual: Add the identity inside the operator (the authors' ``x @ M + x``).
      bias: Optional per-channel bias added after the mix.
      pad_to_window: If False, a shape that is not a multiple of the window raises.
      implementation: ``"auto"`` (the Triton kernel on GPU; the reference elsewhere,
        TPU included, since the kernel is Triton-only), ``"xla"``,
        ``"pallas"`` or ``"pallas_interpret"``. The Pallas paths are differentiable in
        reverse mode only (custom VJP).

    Returns:
      Array of ``x``'s shape and dtype (accumulated in f32, f64 for f64 input).

    Raises:
      TypeError: If ranks, shapes or dtypes do not fit.
      ValueError: If ``window`` or ``implementation`` is invalid.

    Example:
      >>> x = jnp.ones((1, 7, 7, 2))
      >>> windowed_matmul(x, jnp.zeros((2, 169))).shape   # zero table: identity
      (1, 7, 7, 2)

    References:
      Song et al., "WBMM: Windowed Batch Matrix Multiplication", ICML 2026
      (code: wansong-s/WBMM).
    """
    window = ref.check_window(window)
    _validate.floating(x, name="x")  # before jnp.asarray: a string names the argument
    _validate.floating(table, name="table")
    x, table = jnp.asarray(x), jnp.asarray(table)
    _check_table(table, window)
    return _checked(x, table, window, residual, bias, pad_to_window, implementation, True)


def windowed_matmul_cached(
    x: Float[ArrayLike, "B H W C"],
    matrix: Float[ArrayLike, "C d d"],
    *,
    window: WindowLike = (7, 7),
    residual: bool = True,
    bias: Float[ArrayLike, " C"] | None = None,
    pad_to_window: bool = True,
    implementation: str = "auto",
) -> Float[Array, "B H W C"]:
    """WBMM from precomputed dense matrices (the cached inference form, "WBMM-C").

    Same operator and padding rule as :func:`windowed_matmul`, with ``matrix`` from
    :func:`window_matrix` (or any dense ``(C, d, d)`` per-channel map).

    Args:
      x: Channels-last feature map ``(B, H, W, C)``.
      matrix: Per-channel window matrices ``(C, d, d)``, ``d = wh * ww``.
      window: Window ``(wh, ww)``; an int means square. Static.
      residual: Add the identity inside the operator.
      bias: Optional per-channel bias.
      pad_to_window: If False, a shape that is not a multiple of the window raises.
      implementation: As in :func:`windowed_matmul`.

    Returns:
      Array of ``x``'s shape and dtype.

    Raises:
      TypeError: If ranks, shapes or dtypes do not fit.
      ValueError: If ``window`` or ``implementation`` is invalid.

    References:
      Song et al., "WBMM: Windowed Batch Matrix Multiplication", ICML 2026.
    """
    window = ref.check_window(window)
    _validate.floating(x, name="x")  # before jnp.asarray: a string names the argument
    _validate.floating(matrix, name="matrix")
    x, matrix = jnp.asarray(x), jnp.asarray(matrix)
    d = window[0] * window[1]
    _validate.shape(matrix, (None, d, d), name="matrix")
    return _checked(x, matrix, window, residual, bias, pad_to_window, implementation, False)


def _checked(x, m, window, residual, bias, pad_to_window, implementation, from_table):
    """Python-level checks (static shapes and options), then the jitted core."""
    _check_x(x, window, pad_to_window)
    c = x.shape[-1]
    if m.shape[0] != c:
        raise TypeError(f"`x` has {c} channels but the table/matrix has {m.shape[0]} rows.")
    _validate.flags(residual=residual)
    _validate.one_of(_dispatch.IMPLEMENTATIONS, implementation=implementation)
    if bias is not None:
        bias = jnp.asarray(bias)
    _check_bias(bias, c)
    return _core(
        x,
        m,
        bias,
        window=window,
        residual=residual,
        implementation=implementation,
        from_table=from_table,
    )


@functools.partial(jax.jit, static_argnames=("window", "residual", "implementation", "from_table"))
def _core(x, m, bias, *, window, residual, implementation, from_table):
    """The operator, jitted like jax.numpy (module level, static choices static).

    ``implementation="auto"`` resolves at trace time: the Triton kernel on GPU only
    (``GPU_PLATFORMS``), the reference elsewhere, TPU included.
    """
    matrix = ref.window_matrix_reference(m, window) if from_table else m
    y = _dispatch.dispatch(
        implementation,
        reference=lambda: ref.windowed_matmul_cached_reference(
            x, matrix, window=window, residual=residual
        ),
        kernel=lambda interpret: _kernel_path(
            x, matrix, window=window, residual=residual, interpret=interpret
        ),
        platforms=_dispatch.GPU_PLATFORMS,  # Triton kernels: not for TPU
    )
    if bias is not None:
        y = y + bias.astype(y.dtype).reshape(1, 1, 1, x.shape[-1])
    return y


@functools.partial(jax.jit, static_argnames=("window",))
def _window_matrix(table, *, window):
    return ref.window_matrix_reference(table, window)


def _check_table(table: jax.Array, window: tuple[int, int]) -> None:
    _validate.ndim(table, 2, name="table")
    _validate.floating(table, name="table")
    if table.shape[1] != ref.table_size(window):
        raise TypeError(
            f"`table` must have {ref.table_size(window)} columns for "
            f"window={window}, got shape {table.shape}."
        )


def table_from_depthwise_kernel(
    kernel: Float[ArrayLike, "K L C"], *, window: WindowLike = (7, 7)
) -> Float[Array, "C T"]:
    """The table whose WBMM equals a per-window depthwise cross-correlation with ``kernel``.

    ``kernel`` (odd ``K x L``, channels last; an HWIO ``(K, L, 1, C)`` kernel is also
    accepted) is centred in the ``(2wh-1) x (2ww-1)`` grid; taps beyond it can never
    reach inside a window and are dropped. With ``residual=True`` the operator adds
    the identity on top.

    Args:
      kernel: Depthwise kernel ``(K, L, C)`` or ``(K, L, 1, C)``, odd sizes.
      window: Window ``(wh, ww)``; an int means square.

    Returns:
      Table ``(C, T)`` in the kernel's dtype.

    Raises:
      TypeError: If ``kernel`` is not a floating array (a string included), or has the
        wrong rank or even spatial sizes.

    References:
      Song et al., "WBMM: Windowed Batch Matrix Multiplication", ICML 2026 (Thm. 3.1).
    """
    window = ref.check_window(window)
    _validate.floating(kernel, name="kernel")  # a string: JAX's error named no argument
    kernel = jnp.asarray(kernel)
    _validate.ndim(kernel, (3, 4), name="kernel")
    if kernel.ndim == 4:
        if kernel.shape[2] != 1:
            raise TypeError(f"`kernel` in HWIO form must have I=1, got shape {kernel.shape}.")
        kernel = kernel[:, :, 0, :]
    _validate.floating(kernel, name="kernel")
    if kernel.shape[0] % 2 == 0 or kernel.shape[1] % 2 == 0:
        raise TypeError(f"`kernel` must have odd spatial sizes, got shape {kernel.shape}.")
    return _table_from_kernel(kernel, window=window)


@functools.partial(jax.jit, static_argnames=("window",))
def _table_from_kernel(kernel, *, window):
    return ref.table_from_kernel_reference(kernel, window)
