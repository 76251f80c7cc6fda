"""WBMM mixers and the WBMM block (channels-last equinox modules)."""

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxkit import _validate
from jaxkit.kernels import IMPLEMENTATIONS
from jaxkit.kernels.windowed_matmul import table_size, windowed_matmul
from jaxkit.vision.wbmm._parts import (
    GRN,
    SE,
    BatchNorm,
    DepthwiseConv,
    State,
    bcast,
    check_call,
    check_momentum,
    linear,
    per_position,
    trunc_normal,
)

Token = Literal["W", "D"] | int


def check_window(window) -> tuple[int, int]:
    """``window`` (an int or a pair of ints >= 1) as a pair; TypeError / ValueError naming it."""
    pair = (window, window) if not isinstance(window, tuple | list) else tuple(window)
    if len(pair) != 2:
        raise TypeError(f"`window` must be an int or a pair of ints, got {window!r}.")
    return tuple(_validate.python_int(w, name="window", minimum=1) for w in pair)


def check_mixer(mixer) -> None:
    """``mixer`` is ``"W"``, ``"D"``, ``"M"`` or an odd int >= 1.

    Another kind (a float, a bool) raises ``TypeError``; another string or an even or
    non-positive int, ``ValueError``; both name ``mixer``.
    """
    if isinstance(mixer, str):
        _validate.one_of(("W", "D", "M"), mixer=mixer)
    elif isinstance(mixer, bool) or not isinstance(mixer, int):
        raise TypeError(
            f"`mixer` must be 'W', 'D', 'M' or an odd int, got {type(mixer).__name__} {mixer!r}."
        )
    elif mixer < 1 or mixer % 2 != 1:
        raise ValueError(f"`mixer` must be 'W', 'D', 'M' or an odd int >= 1, got {mixer!r}.")


def check_block_scalars(*, layer_scale_init, bn_momentum, **drop) -> None:
    """The continuous settings of a block (or a net): finite, drop rate in ``[0, 1)``."""
    _validate.finite_scalar(layer_scale_init=layer_scale_init)
    check_momentum(bn_momentum, name="bn_momentum")
    _validate.finite_scalar(**drop)
    _validate.in_interval(low=0, high=1, closed="left", **drop)


class WBMM(eqx.Module):
    """The WBMM token mixer: :func:`jaxkit.kernels.windowed_matmul.windowed_matmul`.

    Parameter ``table`` ``(C, T)`` (truncated normal, std 0.02, the authors'
    ``relative_position_bias_table``), optional ``bias``; the identity lives inside
    the operator when ``residual``.

    References:
      Song et al., "WBMM: Windowed Batch Matrix Multiplication", ICML 2026.
    """

    table: Array
    bias: Array | None
    window: tuple[int, int] = eqx.field(static=True)
    residual: bool = eqx.field(static=True)
    implementation: str = eqx.field(static=True)

    def __init__(
        self,
        channels: int,
        *,
        window: int | tuple[int, int] = 7,
        residual: bool = True,
        bias: bool | Array = False,
        implementation: str = "auto",
        key: PRNGKeyArray | None = None,
        table: Array | None = None,
    ):
        """Random table from ``key``, or the given ``table`` (and ``bias`` array)."""
        if key is not None:
            _validate.is_key(key)
        self.window = check_window(window)
        _validate.one_of(IMPLEMENTATIONS, implementation=implementation)
        if table is None:
            if key is None:
                raise ValueError("`key` is required when no `table` is given.")
            table = trunc_normal(key, (channels, table_size(self.window)))
        self.table = table
        residual = _validate.flag(residual, name="residual")
        if isinstance(bias, bool | np.bool_):
            self.bias = jnp.zeros((channels,)) if bias else None
        else:
            if bias is not None:  # a bias array; a string such as "no" is neither
                _validate.real(bias, name="bias")
            self.bias = bias
        self.residual, self.implementation = residual, implementation

    def __call__(self, x: Float[ArrayLike, "B H W C"]) -> Float[Array, "B H W C"]:
        return windowed_matmul(
            x,
            self.table,
            window=self.window,
            residual=self.residual,
            bias=self.bias,
            implementation=self.implementation,
        )


class MultiKernelWBMM(eqx.Module):
    """``BN1(WBMM(x)) + BN2(DW5(x)) + BN3(DW3(x))``: the S4 multi-kernel mixer (P/N variants).

    Valid only when the feature map is exactly one window (there the DW convs' zero
    padding and the window boundary coincide, which makes the fold exact); other maps
    raise ``ValueError``.
    """

    wbmm: WBMM
    bn1: BatchNorm
    dw5: DepthwiseConv
    bn2: BatchNorm
    dw3: DepthwiseConv
    bn3: BatchNorm

    def __init__(
        self,
        channels: int,
        *,
        window: int | tuple[int, int] = 7,
        bn_momentum: float = 0.1,
        implementation: str = "auto",
        key: PRNGKeyArray,
    ):
        _validate.is_key(key)
        check_window(window)
        check_momentum(bn_momentum, name="bn_momentum")
        _validate.one_of(IMPLEMENTATIONS, implementation=implementation)
        k1, k2, k3 = jax.random.split(key, 3)
        self.wbmm = WBMM(channels, window=window, implementation=implementation, key=k1)
        self.dw5, self.dw3 = DepthwiseConv(channels, 5, key=k2), DepthwiseConv(channels, 3, key=k3)
        self.bn1, self.bn2, self.bn3 = (BatchNorm(channels, momentum=bn_momentum) for _ in range(3))

    def __call__(
        self, x: Float[ArrayLike, "B H W C"], state: State, *, inference: bool
    ) -> tuple[Float[Array, "B H W C"], State]:
        """Mix a ``(B, H, W, C)`` batch whose map is exactly one window.

        Raises:
          TypeError: ``x`` not a floating array of rank 4 with this layer's channels (a
            string included), ``inference`` not a bool.
          ValueError: the ``(H, W)`` map of ``x`` is not the window.
        """
        x, inference = check_call(x, self.wbmm.table.shape[0], inference)
        if tuple(x.shape[1:3]) != self.wbmm.window:
            raise ValueError(
                f"`x` map {tuple(x.shape[1:3])} must equal the window "
                f"{self.wbmm.window} for the multi-kernel mixer."
            )
        a, state = self.bn1(self.wbmm(x), state, inference=inference)
        b, state = self.bn2(self.dw5(x), state, inference=inference)
        c, state = self.bn3(self.dw3(x), state, inference=inference)
        return a + b + c, state


class WBMMBlock(eqx.Module):
    """``x + gamma * DropPath(BN2(Linear2(GRN(GELU(Linear1(SE(BN1(Mixer(x)))))))))``.

    ``mixer`` is ``"W"`` (WBMM), ``"D"`` (3x3 depthwise conv), ``"M"`` (multi-kernel
    WBMM, S4 of P/N) or an odd int ``k`` (a ``k x k`` depthwise conv, for ablations).
    After :func:`reparameterize` the BatchNorms, GRN bias and layer scale are folded
    (``norm``, ``bn2``, ``gamma`` are ``None``) and the block computes the same map.
    """

    mixer: eqx.Module
    norm: BatchNorm | None
    se: SE
    linear1: eqx.nn.Linear
    grn: GRN
    linear2: eqx.nn.Linear
    bn2: BatchNorm | None
    gamma: Array | None
    drop_path: float = eqx.field(static=True)

    def __init__(
        self,
        channels: int,
        mixer: Token | str = "W",
        *,
        window: int | tuple[int, int] = 7,
        ffn_ratio: int = 4,
        layer_scale_init: float = 1e-6,
        drop_path: float = 0.0,
        bn_momentum: float = 0.1,
        implementation: str = "auto",
        key: PRNGKeyArray,
    ):
        _validate.is_key(key)
        check_window(window)
        check_mixer(mixer)
        _validate.one_of(IMPLEMENTATIONS, implementation=implementation)
        ffn_ratio = _validate.python_int(ffn_ratio, name="ffn_ratio", minimum=1)
        check_block_scalars(
            layer_scale_init=layer_scale_init, bn_momentum=bn_momentum, drop_path=drop_path
        )
        km, ks, k1, k2 = jax.random.split(key, 4)
        if mixer == "W":
            self.mixer = WBMM(channels, window=window, implementation=implementation, key=km)
        elif mixer == "M":
            self.mixer = MultiKernelWBMM(
                channels,
                window=window,
                bn_momentum=bn_momentum,
                implementation=implementation,
                key=km,
            )
        elif mixer == "D":
            self.mixer = DepthwiseConv(channels, 3, key=km)
        else:  # an odd int (check_mixer)
            self.mixer = DepthwiseConv(channels, mixer, key=km)
        hidden = ffn_ratio * channels
        self.norm = BatchNorm(channels, momentum=bn_momentum)
        self.se = SE(channels, key=ks)
        self.linear1 = linear(channels, hidden, key=k1)
        self.grn = GRN(hidden)
        self.linear2 = linear(hidden, channels, bias=False, key=k2)
        self.bn2 = BatchNorm(channels, momentum=bn_momentum)
        self.gamma = layer_scale_init * jnp.ones((channels,)) if layer_scale_init > 0 else None
        self.drop_path = float(drop_path)

    def __call__(
        self,
        x: Float[ArrayLike, "B H W C"],
        state: State,
        *,
        inference: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> tuple[Float[Array, "B H W C"], State]:
        """Apply the block to a ``(B, H, W, C)`` batch.

        ``key`` (keyword only) draws the drop-path mask: required in training
        (``inference=False``) when ``drop_path > 0``, ignored otherwise.

        Raises:
          TypeError: ``x`` not a floating array of rank 4 with the block's channels (a
            string included), ``inference`` not a bool, ``key`` not a PRNG key.
          ValueError: no ``key`` in training with ``drop_path > 0``; a multi-kernel
            mixer on a map other than its window.
        """
        x, inference = check_call(x, self.linear1.weight.shape[1], inference)
        if key is not None:
            _validate.is_key(key)
        if self.drop_path > 0 and not inference and key is None:
            raise ValueError(
                f"`key` is required in training (inference=False) with drop_path="
                f"{self.drop_path} > 0: pass key=jax.random.key(...) or inference=True."
            )
        if isinstance(self.mixer, MultiKernelWBMM):
            y, state = self.mixer(x, state, inference=inference)
        else:
            y = self.mixer(x)
        if self.norm is not None:
            y, state = self.norm(y, state, inference=inference)
        h = jax.nn.gelu(per_position(self.linear1, self.se(y)), approximate=False)
        y = per_position(self.linear2, self.grn(h))
        if self.bn2 is not None:
            y, state = self.bn2(y, state, inference=inference)
        if self.gamma is not None:
            y = y * bcast(self.gamma).astype(y.dtype)
        if self.drop_path > 0 and not inference:
            keep = jax.random.bernoulli(key, 1 - self.drop_path, (x.shape[0], 1, 1, 1))
            y = jnp.where(keep, y / (1 - self.drop_path), jnp.zeros_like(y))
        return x + y, state
