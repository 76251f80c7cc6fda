"""Pallas GPU (Triton) kernels for WBMM, on the ``(C, N, d)`` window layout.

* :func:`mix_pallas`: ``Y_c = X_c @ M_c (+ X_c)``. Grid ``(C, N_p / block_n)`` with the
  window axis innermost, so each channel's ``(d_p, d_p)`` matrix stays resident while
  ``block_n`` windows stream through. The backward ``dX = dY @ M^T (+ dY)`` is the
  same kernel on the transposed matrices.
* :func:`outer_pallas`: ``dM_c = X_c^T dY_c``, the reduction over windows, split into
  ``S`` partial sums per channel (grid ``(C, S)``; each program loops over ``steps``
  blocks of ``block_n`` windows), summed afterwards by the caller.

Both accumulate in f32 (f64 for f64 inputs). Triton needs power-of-two block
dimensions: the caller (``_api``) pads ``d`` to ``d_p`` (a power of two >= 16) and the
window count to ``N_p = S * steps * block_n`` with zeros, which is exact.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from jaxkit._typing import accumulation_dtype


class Tiling(NamedTuple):
    """Static launch options shared by both kernels (hashable: a jit static argument).

    ``block_n`` windows per block, ``block_d`` columns per tile (capped at ``d_p``),
    ``interpret`` runs the Pallas interpreter (operands upcast to f32), and Triton's
    ``num_warps`` / ``num_stages``.
    """

    block_n: int = 128
    block_d: int = 64
    interpret: bool = False
    num_warps: int = 4
    num_stages: int = 2


_DEFAULT_TILING = Tiling()


def _launch(kernel, tiling: Tiling, *, name: str, **specs):
    """``pl.pallas_call`` with ``tiling``'s Triton parameters and interpret flag."""
    return pl.pallas_call(
        functools.partial(kernel, upcast=bool(tiling.interpret)),
        compiler_params=plgpu.CompilerParams(
            num_warps=tiling.num_warps, num_stages=tiling.num_stages
        ),
        interpret=tiling.interpret,
        name=name,
        **specs,
    )


def _precision(dtype: jnp.dtype) -> lax.Precision:
    # f32/f64: IEEE products (Triton would otherwise use TF32); bf16: native.
    if jnp.dtype(dtype) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        return lax.Precision.HIGHEST
    return lax.Precision.DEFAULT


def _match_vma(*operands: jax.Array) -> tuple[tuple[jax.Array, ...], object]:
    """Make every operand vary over the union of the operands' manual axes.

    Inside ``jax.shard_map`` (``check_vma=True``); returns them and that manual-axis
    type (``None`` outside ``shard_map``), which the output shape must carry.
    """
    axes = frozenset()
    for o in operands:
        axes |= getattr(getattr(jax.typeof(o), "mat", None), "varying", frozenset())
    if not axes:
        return operands, None
    out = []
    for o in operands:
        missing = tuple(sorted(axes - jax.typeof(o).mat.varying))
        out.append(lax.pcast(o, missing, to="varying") if missing else o)
    return tuple(out), jax.typeof(out[0]).mat


def _out_shape(shape, dtype, mat) -> jax.ShapeDtypeStruct:
    if mat is None:
        return jax.ShapeDtypeStruct(shape, dtype)
    return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=mat)


def _operands(a: jax.Array, b: jax.Array, upcast: bool) -> tuple[jax.Array, jax.Array]:
    # XLA:CPU (interpret mode) has no bf16 x bf16 -> f32 dot; upcasting there is exact
    # because products of bf16 numbers are exact in f32.
    if upcast and a.dtype not in (jnp.float32, jnp.float64):
        return a.astype(jnp.float32), b.astype(jnp.float32)
    return a, b


def _mix_kernel(x_ref, m_ref, xr_ref, o_ref, *, residual: bool, upcast: bool, block_d: int):
    # x_ref: (block_n, d_p) all source positions; m_ref: (d_p, block_q) one column block;
    # xr_ref: (block_n, block_q) the same windows' target block (for the residual).
    d_p = x_ref.shape[-1]
    acc_dt = accumulation_dtype(x_ref.dtype)
    acc = None  # (started from the first product, not zeros: keeps shard_map's vma)
    for k0 in range(0, d_p, block_d):  # static loop over K chunks
        a, b = _operands(x_ref[:, k0 : k0 + block_d], m_ref[k0 : k0 + block_d, :], upcast)
        part = jnp.dot(a, b, preferred_element_type=acc_dt, precision=_precision(x_ref.dtype))
        acc = part if acc is None else acc + part
    if residual:
        acc = acc + xr_ref[...].astype(acc_dt)
    o_ref[...] = acc.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("residual", "tiling"))
def mix_pallas(
    xw: jax.Array, matrix: jax.Array, *, residual: bool, tiling: Tiling = _DEFAULT_TILING
) -> jax.Array:
    """``(C, N_p, d_p) @ (C, d_p, d_p)`` per channel, plus ``xw`` if ``residual``.

    Grid ``(C, N_p / block_n, d_p / block_d)``: output column blocks of ``block_d``,
    the contraction in chunks of ``block_d`` (so w14's ``d_p = 256`` never holds a full
    ``256 x 256`` matrix in registers).
    """
    c, n_p, d_p = xw.shape
    block_n, block_d = tiling.block_n, min(tiling.block_d, d_p)
    if n_p % block_n or d_p % block_d:
        raise NotImplementedError(
            f"mix_pallas needs N_p % block_n == 0 and d_p % block_d == 0; got {n_p=}, "
            f"{d_p=}, {block_n=}, {block_d=}."
        )
    (xw, matrix), mat = _match_vma(xw, matrix.astype(xw.dtype))
    return _launch(
        functools.partial(_mix_kernel, residual=residual, block_d=block_d),
        tiling,
        name="wbmm_mix",
        out_shape=_out_shape((c, n_p, d_p), xw.dtype, mat),
        grid=(c, n_p // block_n, d_p // block_d),
        in_specs=[
            pl.BlockSpec((None, block_n, d_p), lambda ci, ni, qi: (ci, ni, 0)),
            pl.BlockSpec((None, d_p, block_d), lambda ci, ni, qi: (ci, 0, qi)),
            pl.BlockSpec((None, block_n, block_d), lambda ci, ni, qi: (ci, ni, qi)),
        ],
        out_specs=pl.BlockSpec((None, block_n, block_d), lambda ci, ni, qi: (ci, ni, qi)),
    )(xw, matrix, xw)


def _outer_kernel(x_ref, g_ref, o_ref, *, block_n: int, steps: int, upcast: bool):
    # x_ref: (steps * block_n, block_d) source block; g_ref: same rows, target block.
    acc_dt = o_ref.dtype

    def product(i):
        rows = pl.ds(i * block_n, block_n)
        x, g = _operands(x_ref[rows, :], g_ref[rows, :], upcast)
        return lax.dot_general(
            x,
            g,
            (((0,), (0,)), ((), ())),
            preferred_element_type=acc_dt,
            precision=_precision(x_ref.dtype),
        )

    # started from the first product, not zeros (keeps shard_map's vma)
    o_ref[...] = lax.fori_loop(1, steps, lambda i, acc: acc + product(i), product(0))


@functools.partial(jax.jit, static_argnames=("steps", "tiling"))
def outer_pallas(
    xw: jax.Array, g: jax.Array, *, steps: int, tiling: Tiling = _DEFAULT_TILING
) -> jax.Array:
    """Partial sums ``(C, S, d_p, d_p)`` of ``X_c^T G_c`` over ``S`` chunks of windows.

    Grid ``(C, S, d_p / block_d, d_p / block_d)``: each program accumulates one
    ``(block_d, block_d)`` tile over ``steps`` blocks of ``block_n`` windows.
    """
    c, n_p, d_p = xw.shape
    block_n = tiling.block_n
    chunk = steps * block_n
    block_d = min(tiling.block_d, d_p)
    if n_p % chunk or d_p % block_d:
        raise NotImplementedError(
            f"outer_pallas needs N_p % (steps * block_n) == 0 and d_p % block_d == 0; got "
            f"{n_p=}, {d_p=}, {chunk=}, {block_d=}."
        )
    acc_dt = accumulation_dtype(xw.dtype)
    nd = d_p // block_d
    (xw, g), mat = _match_vma(xw, g.astype(xw.dtype))
    return _launch(
        functools.partial(_outer_kernel, block_n=block_n, steps=steps),
        tiling,
        name="wbmm_outer",
        out_shape=_out_shape((c, n_p // chunk, d_p, d_p), acc_dt, mat),
        grid=(c, n_p // chunk, nd, nd),
        in_specs=[
            pl.BlockSpec((None, chunk, block_d), lambda ci, si, pi, qi: (ci, si, pi)),
            pl.BlockSpec((None, chunk, block_d), lambda ci, si, pi, qi: (ci, si, qi)),
        ],
        out_specs=pl.BlockSpec(
            (None, None, block_d, block_d), lambda ci, si, pi, qi: (ci, si, pi, qi)
        ),
    )(xw, g)
