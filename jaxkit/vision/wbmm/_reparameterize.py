"""Exact inference re-parameterisation of WBMM blocks and networks.

Each mixer's BatchNorm (and the S4 multi-kernel branches) folds into the WBMM table
and bias; the GRN bias, the FFN BatchNorm and the layer scale fold into the second
linear (an ``eqx.nn.Linear``, weight ``(out, in)``).
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit.kernels.windowed_matmul import table_from_depthwise_kernel, table_size
from jaxkit.vision.wbmm._blocks import WBMM, MultiKernelWBMM, WBMMBlock
from jaxkit.vision.wbmm._parts import BatchNorm, State


class FoldedTable(NamedTuple):
    """A WBMM table and bias for ``windowed_matmul(..., residual=False)``."""

    table: Float[Array, "C T"]
    bias: Float[Array, " C"]


def fold_bn_into_table(
    table: Float[ArrayLike, "C T"],
    bias: Float[ArrayLike, " C"] | None,
    *,
    scale: Float[ArrayLike, " C"],
    shift: Float[ArrayLike, " C"],
    window: int | tuple[int, int],
    residual: bool,
) -> FoldedTable:
    """Fold an eval-mode BatchNorm ``s * z + t`` after a WBMM into its table and bias.

    ``s (X M_R + r X + b) + t = X M_{R'} + b'`` with ``R' = s (R + r e_centre)`` and
    ``b' = s b + t``: the folded operator has ``residual=False`` (the identity, if
    any, becomes the centre tap before scaling).

    Jitted like jax.numpy (module level; ``window`` and ``residual`` static).

    Returns:
      :class:`FoldedTable` ``(table, bias)`` for ``windowed_matmul(..., residual=False)``.

    Raises:
      TypeError: For wrong ranks, shapes or dtypes (a string included), or a non-bool
        ``residual``.
      ValueError: For window sizes below 1.
    """
    pair = (window, window) if isinstance(window, int) else tuple(window)
    if len(pair) != 2:
        raise TypeError(f"`window` must be an int or a pair of ints, got {window!r}.")
    pair = tuple(_validate.python_int(w, name="window", minimum=1) for w in pair)
    _validate.floating(table, name="table")  # a string: JAX's error named no argument
    _validate.numeric(scale=scale, shift=shift)
    table, scale, shift = jnp.asarray(table), jnp.asarray(scale), jnp.asarray(shift)
    _validate.ndim(table, 2, name="table")
    if table.shape[1] != table_size(pair):
        raise TypeError(
            f"`table` must have {table_size(pair)} columns for window={pair}, got shape "
            f"{table.shape}."
        )
    c = table.shape[0]
    for name, v in (("scale", scale), ("shift", shift), ("bias", bias)):
        if v is not None:
            _validate.shape(v, (c,), name=name)
    residual = _validate.flag(residual, name="residual")
    return _fold_table(table, bias, scale, shift, window=pair, residual=residual)


@functools.partial(jax.jit, static_argnames=("window", "residual"))
def _fold_table(table, bias, scale, shift, *, window, residual) -> FoldedTable:
    if residual:
        centre = (window[0] - 1) * (2 * window[1] - 1) + window[1] - 1
        table = table.at[:, centre].add(1.0)
    b = jnp.zeros_like(shift) if bias is None else jnp.asarray(bias)
    return FoldedTable(table * scale[:, None], scale * b + shift)


def _fold_mixer(mixer, norm: BatchNorm, state: State):
    """Mixer followed by ``norm`` -> an equivalent BN-free mixer with bias."""
    s, t = norm.affine(state)
    if isinstance(mixer, WBMM):
        table, bias = fold_bn_into_table(
            mixer.table, mixer.bias, scale=s, shift=t, window=mixer.window, residual=mixer.residual
        )
    elif isinstance(mixer, MultiKernelWBMM):
        w = mixer.wbmm.window
        s1, t1 = mixer.bn1.affine(state)
        s2, t2 = mixer.bn2.affine(state)
        s3, t3 = mixer.bn3.affine(state)
        table, bias = fold_bn_into_table(
            mixer.wbmm.table,
            mixer.wbmm.bias,
            scale=s1,
            shift=t1,
            window=w,
            residual=mixer.wbmm.residual,
        )
        table = (
            table
            + s2[:, None] * table_from_depthwise_kernel(mixer.dw5.kernel, window=w)
            + s3[:, None] * table_from_depthwise_kernel(mixer.dw3.kernel, window=w)
        )
        table, bias = table * s[:, None], s * (bias + t2 + t3) + t
    else:  # DepthwiseConv
        b = jnp.zeros_like(t) if mixer.bias is None else mixer.bias
        return eqx.tree_at(
            lambda m: (m.kernel, m.bias),
            mixer,
            (mixer.kernel * s[None, None, :], s * b + t),
            is_leaf=lambda v: v is None,
        )
    wb = mixer if isinstance(mixer, WBMM) else mixer.wbmm
    return WBMM(
        table.shape[0],
        window=wb.window,
        residual=False,
        bias=bias,
        implementation=wb.implementation,
        table=table,
    )


def _fold_block(block: WBMMBlock, state: State) -> WBMMBlock:
    mixer = block.mixer
    if block.norm is not None:
        mixer = _fold_mixer(mixer, block.norm, state)
    w2 = block.linear2.weight
    b2 = jnp.zeros_like(w2[:, 0]) if block.linear2.bias is None else block.linear2.bias
    if block.grn.beta is not None:  # GRN bias -> linear2 bias
        b2 = b2 + w2 @ block.grn.beta
    if block.bn2 is not None:
        s, t = block.bn2.affine(state)
        w2, b2 = w2 * s[:, None], s * b2 + t
    if block.gamma is not None:
        w2, b2 = w2 * block.gamma[:, None], block.gamma * b2
    none = lambda v: v is None  # noqa: E731
    block = eqx.tree_at(lambda b: b.mixer, block, mixer)
    block = eqx.tree_at(
        lambda b: (b.norm, b.bn2, b.gamma, b.grn.beta, b.linear2.weight, b.linear2.bias),
        block,
        (None, None, None, None, w2, b2),
        is_leaf=none,
    )
    return block


def reparameterize(model: eqx.Module, state: State) -> eqx.Module:
    """Fold every block of ``model`` (a block or a network) into its inference form.

    Mixer BatchNorm (and multi-kernel branches) go into the WBMM table and bias (or
    the depthwise kernel and bias); GRN bias, FFN BatchNorm and layer scale go into
    the second linear. The result, called with ``inference=True``, computes exactly
    the same function as ``model`` in inference mode (up to rounding).

    References:
      Song et al., "WBMM: Windowed Batch Matrix Multiplication", ICML 2026
      (hierarchical window re-parameterisation; code wansong-s/WBMM).
    """
    is_block = lambda m: isinstance(m, WBMMBlock)  # noqa: E731
    return jax.tree.map(
        lambda m: _fold_block(m, state) if is_block(m) else m, model, is_leaf=is_block
    )
