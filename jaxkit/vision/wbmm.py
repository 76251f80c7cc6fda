"""WBMM layers: the windowed-matmul mixer, the WBMM block and a small WBMM network.

Equinox modules over channels-last batches ``(B, H, W, C)``: BatchNorm makes the
block batch-level, so modules take the batch axis (no ``vmap`` needed) and thread an
``eqx.nn.State`` for the running statistics (build with ``eqx.nn.make_with_state``).
Cross-window communication follows the authors' design: no shifted windows;
information crosses window borders through interleaved 3x3 depthwise ("D") blocks and
the stride-2 downsamples, which re-grid the windows at every stage.

The exact inference re-parameterisation (:func:`reparameterize`) folds each
mixer's BatchNorm (and the S4 multi-kernel branches) into the WBMM table and bias,
and the GRN bias, the FFN BatchNorm and the layer scale into the second linear.
Reconstructed from the authors' code (wansong-s/WBMM): BN uses biased batch variance
for its running estimate; the multi-kernel fold is exact only when the map equals one
window (checked).
"""

from collections.abc import Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxkit.kernels.windowed_matmul import table_from_depthwise_kernel, windowed_matmul
from jaxkit.kernels.windowed_matmul._reference import table_size

State = eqx.nn.State
Token = Literal["W", "D"] | int


def _trunc(key: PRNGKeyArray, shape: tuple[int, ...], std: float = 0.02) -> Array:
    return std * jax.random.truncated_normal(key, -2.0, 2.0, shape)


def _bcast(v: Array) -> Array:
    """A per-channel vector shaped to broadcast against ``(B, H, W, C)``."""
    return v.reshape(1, 1, 1, -1)


# ----------------------------------------------------------------------------- small parts


class BatchNorm(eqx.Module):
    """Channels-last batch norm over ``(B, H, W)`` with running statistics in ``State``.

    Training (``inference=False``) normalises with the batch statistics and updates
    the running mean/variance with ``momentum`` (PyTorch's convention, 0.1); inference
    uses the running statistics, i.e. the affine map ``s * x + t`` of :meth:`affine`.
    """

    weight: Array
    bias: Array
    state_index: eqx.nn.StateIndex
    eps: float = eqx.field(static=True)
    momentum: float = eqx.field(static=True)

    def __init__(self, channels: int, *, eps: float = 1e-5, momentum: float = 0.1):
        self.weight = jnp.ones((channels,))
        self.bias = jnp.zeros((channels,))
        self.state_index = eqx.nn.StateIndex((jnp.zeros((channels,)), jnp.ones((channels,))))
        self.eps, self.momentum = eps, momentum

    def affine(self, state: State) -> tuple[Array, Array]:
        """The inference map as ``(scale, shift)`` per channel."""
        mean, var = state.get(self.state_index)
        s = self.weight / jnp.sqrt(var + self.eps)
        return s, self.bias - mean * s

    def __call__(self, x: Array, state: State, *, inference: bool) -> tuple[Array, State]:
        if inference:
            s, t = self.affine(state)
            return x * _bcast(s).astype(x.dtype) + _bcast(t).astype(x.dtype), state
        x32 = x.astype(jnp.float64 if x.dtype == jnp.float64 else jnp.float32)
        mean = jnp.mean(x32, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(x32 - _bcast(mean)), axis=(0, 1, 2))
        rm, rv = state.get(self.state_index)
        m = self.momentum
        mean_s, var_s = (lax.stop_gradient(v).astype(rm.dtype) for v in (mean, var))
        state = state.set(self.state_index, ((1 - m) * rm + m * mean_s, (1 - m) * rv + m * var_s))
        w, b = self.weight.astype(x32.dtype), self.bias.astype(x32.dtype)
        y = (x32 - _bcast(mean)) * _bcast(w / jnp.sqrt(var + self.eps))
        return (y + _bcast(b)).astype(x.dtype), state


class LayerNorm(eqx.Module):
    """Channels-last layer norm (eps 1e-6, as the authors')."""

    weight: Array
    bias: Array
    eps: float = eqx.field(static=True)

    def __init__(self, channels: int, *, eps: float = 1e-6):
        self.weight, self.bias, self.eps = jnp.ones((channels,)), jnp.zeros((channels,)), eps

    def __call__(self, x: Array) -> Array:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        y = (x - mean) * lax.rsqrt(var + self.eps)
        shape = (1,) * (x.ndim - 1) + (-1,)
        return y * self.weight.reshape(shape) + self.bias.reshape(shape)


class Linear(eqx.Module):
    """``x @ weight (+ bias)`` on the last axis."""

    weight: Array
    bias: Array | None

    def __init__(self, d_in: int, d_out: int, *, bias: bool = True, key: PRNGKeyArray):
        self.weight = _trunc(key, (d_in, d_out))
        self.bias = jnp.zeros((d_out,)) if bias else None

    def __call__(self, x: Array) -> Array:
        y = x @ self.weight.astype(x.dtype)
        if self.bias is not None:
            y = y + self.bias.astype(x.dtype).reshape((1,) * (x.ndim - 1) + (-1,))
        return y


class Conv2d(eqx.Module):
    """Dense NHWC convolution with ``SAME``-style padding ``k // 2`` (stem/downsample)."""

    weight: Array
    bias: Array
    stride: int = eqx.field(static=True)

    def __init__(
        self, c_in: int, c_out: int, *, kernel: int = 3, stride: int = 2, key: PRNGKeyArray
    ):
        self.weight = _trunc(key, (kernel, kernel, c_in, c_out))
        self.bias = jnp.zeros((c_out,))
        self.stride = stride

    def __call__(self, x: Array) -> Array:
        p = self.weight.shape[0] // 2
        y = lax.conv_general_dilated(
            x,
            self.weight.astype(x.dtype),
            (self.stride,) * 2,
            [(p, p), (p, p)],
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y + _bcast(self.bias).astype(x.dtype)


class DepthwiseConv(eqx.Module):
    """Depthwise ``k x k`` cross-correlation, zero ``SAME`` padding; kernel ``(k, k, C)``."""

    kernel: Array
    bias: Array | None

    def __init__(self, channels: int, size: int, *, bias: bool = False, key: PRNGKeyArray):
        self.kernel = _trunc(key, (size, size, channels))
        self.bias = jnp.zeros((channels,)) if bias else None

    def __call__(self, x: Array) -> Array:
        k = self.kernel.shape[0]
        y = lax.conv_general_dilated(
            x,
            self.kernel[:, :, None, :].astype(x.dtype),
            (1, 1),
            [(k // 2, k // 2)] * 2,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=x.shape[-1],
        )
        return y if self.bias is None else y + _bcast(self.bias).astype(x.dtype)


class SE(eqx.Module):
    """Squeeze-and-excitation: mean over ``(H, W)``, ReLU bottleneck, sigmoid gate."""

    down: Linear
    up: Linear

    def __init__(self, channels: int, *, reduction: int = 4, key: PRNGKeyArray):
        k1, k2 = jax.random.split(key)
        hidden = max(1, channels // reduction)
        self.down = Linear(channels, hidden, key=k1)
        self.up = Linear(hidden, channels, key=k2)

    def __call__(self, x: Array) -> Array:
        g = jnp.mean(x, axis=(1, 2), keepdims=True)
        return x * jax.nn.sigmoid(self.up(jax.nn.relu(self.down(g))))


class GRN(eqx.Module):
    """Global response norm (ConvNeXt-V2): ``(gamma * N + 1) * x (+ beta)``."""

    gamma: Array
    beta: Array | None

    def __init__(self, channels: int):
        self.gamma, self.beta = jnp.zeros((channels,)), jnp.zeros((channels,))

    def __call__(self, x: Array) -> Array:
        g = jnp.sqrt(jnp.sum(jnp.square(x), axis=(1, 2), keepdims=True))
        n = g / (jnp.mean(g, axis=-1, keepdims=True) + 1e-6)
        y = (_bcast(self.gamma).astype(x.dtype) * n + 1) * x
        return y if self.beta is None else y + _bcast(self.beta).astype(x.dtype)


# ----------------------------------------------------------------------------- mixers


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
        self.window = (window, window) if isinstance(window, int) else tuple(window)
        if table is None:
            if key is None:
                raise ValueError("`key` is required when no `table` is given.")
            table = _trunc(key, (channels, table_size(self.window)))
        self.table = table
        if isinstance(bias, bool):
            self.bias = jnp.zeros((channels,)) if bias else None
        else:
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
        k1, k2, k3 = jax.random.split(key, 3)
        self.wbmm = WBMM(channels, window=window, implementation=implementation, key=k1)
        self.dw5, self.dw3 = DepthwiseConv(channels, 5, key=k2), DepthwiseConv(channels, 3, key=k3)
        self.bn1, self.bn2, self.bn3 = (BatchNorm(channels, momentum=bn_momentum) for _ in range(3))

    def __call__(self, x: Array, state: State, *, inference: bool) -> tuple[Array, State]:
        if tuple(x.shape[1:3]) != self.wbmm.window:
            raise ValueError(
                f"`x` map {tuple(x.shape[1:3])} must equal the window "
                f"{self.wbmm.window} for the multi-kernel mixer."
            )
        a, state = self.bn1(self.wbmm(x), state, inference=inference)
        b, state = self.bn2(self.dw5(x), state, inference=inference)
        c, state = self.bn3(self.dw3(x), state, inference=inference)
        return a + b + c, state


# ----------------------------------------------------------------------------- folds


def fold_bn_into_table(
    table: Float[ArrayLike, "C T"],
    bias: Float[ArrayLike, " C"] | None,
    *,
    scale: Float[ArrayLike, " C"],
    shift: Float[ArrayLike, " C"],
    window: int | tuple[int, int],
    residual: bool,
) -> tuple[Float[Array, "C T"], Float[Array, " C"]]:
    """Fold an eval-mode BatchNorm ``s * z + t`` after a WBMM into its table and bias.

    ``s (X M_R + r X + b) + t = X M_{R'} + b'`` with ``R' = s (R + r e_centre)`` and
    ``b' = s b + t``: the folded operator has ``residual=False`` (the identity, if
    any, becomes the centre tap before scaling).

    Returns:
      ``(table', bias')`` for ``windowed_matmul(..., residual=False)``.
    """
    window = (window, window) if isinstance(window, int) else tuple(window)
    table, scale, shift = jnp.asarray(table), jnp.asarray(scale), jnp.asarray(shift)
    if residual:
        centre = (window[0] - 1) * (2 * window[1] - 1) + window[1] - 1
        table = table.at[:, centre].add(1.0)
    b = jnp.zeros_like(shift) if bias is None else jnp.asarray(bias)
    return table * scale[:, None], scale * b + shift


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


# ----------------------------------------------------------------------------- block


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
    linear1: Linear
    grn: GRN
    linear2: Linear
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
        elif isinstance(mixer, int) and not isinstance(mixer, bool) and mixer % 2 == 1:
            self.mixer = DepthwiseConv(channels, mixer, key=km)
        else:
            raise ValueError(f"`mixer` must be 'W', 'D', 'M' or an odd int, got {mixer!r}.")
        hidden = ffn_ratio * channels
        self.norm = BatchNorm(channels, momentum=bn_momentum)
        self.se = SE(channels, key=ks)
        self.linear1 = Linear(channels, hidden, key=k1)
        self.grn = GRN(hidden)
        self.linear2 = Linear(hidden, channels, bias=False, key=k2)
        self.bn2 = BatchNorm(channels, momentum=bn_momentum)
        self.gamma = layer_scale_init * jnp.ones((channels,)) if layer_scale_init > 0 else None
        self.drop_path = float(drop_path)

    def __call__(
        self, x: Array, state: State, *, inference: bool = False, key: PRNGKeyArray | None = None
    ) -> tuple[Array, State]:
        if isinstance(self.mixer, MultiKernelWBMM):
            y, state = self.mixer(x, state, inference=inference)
        else:
            y = self.mixer(x)
        if self.norm is not None:
            y, state = self.norm(y, state, inference=inference)
        y = self.linear2(self.grn(jax.nn.gelu(self.linear1(self.se(y)), approximate=False)))
        if self.bn2 is not None:
            y, state = self.bn2(y, state, inference=inference)
        if self.gamma is not None:
            y = y * _bcast(self.gamma).astype(y.dtype)
        if self.drop_path > 0 and not inference and key is not None:
            keep = jax.random.bernoulli(key, 1 - self.drop_path, (x.shape[0], 1, 1, 1))
            y = jnp.where(keep, y / (1 - self.drop_path), jnp.zeros_like(y))
        return x + y, state


def _fold_block(block: WBMMBlock, state: State) -> WBMMBlock:
    mixer = block.mixer
    if block.norm is not None:
        mixer = _fold_mixer(mixer, block.norm, state)
    w2 = block.linear2.weight
    b2 = jnp.zeros_like(w2[0]) if block.linear2.bias is None else block.linear2.bias
    if block.grn.beta is not None:  # GRN bias -> linear2 bias
        b2 = b2 + block.grn.beta @ w2
    if block.bn2 is not None:
        s, t = block.bn2.affine(state)
        w2, b2 = w2 * s[None, :], s * b2 + t
    if block.gamma is not None:
        w2, b2 = w2 * block.gamma[None, :], block.gamma * b2
    none = lambda v: v is None  # noqa: E731
    block = eqx.tree_at(lambda b: b.mixer, block, mixer)
    block = eqx.tree_at(
        lambda b: (b.norm, b.bn2, b.gamma, b.grn.beta, b.linear2.weight, b.linear2.bias),
        block,
        (None, None, None, None, w2, b2),
        is_leaf=none,
    )
    return block


# ----------------------------------------------------------------------------- network

VARIANTS: dict[str, dict] = {
    "p": dict(depths=(2, 2, 6, 2), dims=(64, 128, 256, 512), patterns=("DD", "WD", "WD" * 3, "MM")),
    "n": dict(depths=(2, 2, 8, 2), dims=(80, 160, 320, 640), patterns=("DD", "WD", "WD" * 4, "MM")),
    "t": dict(
        depths=(3, 3, 18, 3), dims=(80, 160, 320, 640), patterns=("DDD", "WDW", "WD" * 9, "WWW")
    ),
    "s": dict(
        depths=(3, 3, 27, 3), dims=(96, 192, 384, 768), patterns=("DDD", "WDW", "WDD" * 9, "WWW")
    ),
}
"""The paper's classification variants (mixer pattern per stage; "M" = multi-kernel S4).
The authors' S4 multi-kernel mixer for P/N is our "M"; the dense-prediction backbones
change stage 1 to "WDW"."""


class WBMMNet(eqx.Module):
    """A WBMM network: stem, stages of :class:`WBMMBlock` with downsamples, and a head.

    Stem: ``len(stem_strides)`` 3x3 convs (LayerNorm, GELU between); each later stage
    starts with a stride-2 3x3 conv + LayerNorm; head: global mean, LayerNorm, linear.
    ``patterns[i]`` lists the mixer of every block of stage ``i`` (see
    :class:`WBMMBlock`), so the paper's variants are ``WBMMNet(**VARIANTS["t"], ...)``.
    """

    stem: tuple[tuple[Conv2d, LayerNorm], ...]
    downsamples: tuple[tuple[Conv2d, LayerNorm], ...]
    stages: tuple[tuple[WBMMBlock, ...], ...]
    norm: LayerNorm
    head: Linear

    def __init__(
        self,
        *,
        depths: Sequence[int],
        dims: Sequence[int],
        patterns: Sequence[Sequence[Token | str]],
        in_channels: int = 3,
        num_classes: int = 1000,
        window: int | tuple[int, int] = 7,
        stem_strides: Sequence[int] = (2, 2),
        layer_scale_init: float = 1e-6,
        drop_path_rate: float = 0.0,
        bn_momentum: float = 0.1,
        implementation: str = "auto",
        key: PRNGKeyArray,
    ):
        if not (len(depths) == len(dims) == len(patterns)):
            raise ValueError(
                "`depths`, `dims` and `patterns` must have equal lengths, got "
                f"{len(depths)}, {len(dims)}, {len(patterns)}."
            )
        for i, (d, p) in enumerate(zip(depths, patterns, strict=True)):
            if len(p) != d:
                raise ValueError(f"`patterns[{i}]` has {len(p)} mixers for depth {d}.")
        keys = iter(jax.random.split(key, 4 + len(stem_strides) + len(dims) + sum(depths)))
        stem, c = [], in_channels
        for j, s in enumerate(stem_strides):
            out = dims[0] if j == len(stem_strides) - 1 else max(1, dims[0] // 2)
            stem.append((Conv2d(c, out, stride=s, key=next(keys)), LayerNorm(out)))
            c = out
        self.stem = tuple(stem)
        self.downsamples = tuple(
            (Conv2d(dims[i], dims[i + 1], key=next(keys)), LayerNorm(dims[i + 1]))
            for i in range(len(dims) - 1)
        )
        rates = [drop_path_rate * i / max(1, sum(depths) - 1) for i in range(sum(depths))]
        stages, r = [], iter(rates)
        for i, (d, p) in enumerate(zip(depths, patterns, strict=True)):
            stages.append(
                tuple(
                    WBMMBlock(
                        dims[i],
                        tok,
                        window=window,
                        layer_scale_init=layer_scale_init,
                        drop_path=next(r),
                        bn_momentum=bn_momentum,
                        implementation=implementation,
                        key=next(keys),
                    )
                    for tok in p
                )
            )
        self.stages = tuple(stages)
        self.norm = LayerNorm(dims[-1])
        self.head = Linear(dims[-1], num_classes, key=next(keys))

    def features(
        self, x: Array, state: State, *, inference: bool = False, key: PRNGKeyArray | None = None
    ) -> tuple[list[Array], State]:
        """Per-stage feature maps (for dense prediction)."""
        for j, (conv, ln) in enumerate(self.stem):
            x = ln(conv(x))
            if j < len(self.stem) - 1:
                x = jax.nn.gelu(x, approximate=False)
        outs = []
        nblocks = sum(len(s) for s in self.stages)
        keys = [None] * nblocks if key is None else list(jax.random.split(key, nblocks))
        k = iter(keys)
        for i, stage in enumerate(self.stages):
            if i > 0:
                conv, ln = self.downsamples[i - 1]
                x = ln(conv(x))
            for block in stage:
                x, state = block(x, state, inference=inference, key=next(k))
            outs.append(x)
        return outs, state

    def __call__(
        self,
        x: Float[ArrayLike, "B H W Cin"],
        state: State,
        *,
        inference: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> tuple[Float[Array, "B K"], State]:
        """Logits for a batch of NHWC images."""
        feats, state = self.features(jnp.asarray(x), state, inference=inference, key=key)
        return self.head(self.norm(jnp.mean(feats[-1], axis=(1, 2)))), state


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
