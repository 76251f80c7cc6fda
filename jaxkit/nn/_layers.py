"""Small equinox layers for the vision and tabular methods: MLP, SmallCNN, UNet.

All three are unbatched like equinox layers (use ``jax.vmap`` for batches), take
``key=`` in ``__init__``, keep configuration in static fields (so a module is a
pytree of arrays only) and compute in the dtype of their input: weights are cast
to ``x.dtype`` and matmuls/convolutions accumulate in f32 (f64 for f64 inputs).
Construction and the forward are jitted like jax.numpy (module level, sizes static): an
eager build or call compiles one program per configuration and input shape.

References:
  Ronneberger et al., "U-Net: Convolutional Networks for Biomedical Image
  Segmentation", MICCAI 2015.
"""

import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype
from jaxkit.nn._init import init_pieces

_ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "identity": lambda x: x,
}


def _linear(x: Array, w: Array, b: Array | None) -> Array:
    y = jnp.matmul(x, w.astype(x.dtype), preferred_element_type=accumulation_dtype(x.dtype)).astype(
        x.dtype
    )
    if b is not None:
        y = y + b.reshape((1,) * (y.ndim - 1) + b.shape).astype(x.dtype)
    return y


def _conv(x: Array, w: Array, b: Array, *, stride: int = 1) -> Array:
    """'SAME' 2-D convolution of one image ``x [C,H,W]`` with ``w [O,C,k,k]``."""
    y = jax.lax.conv_general_dilated(
        x[None],
        w.astype(x.dtype),
        window_strides=(stride, stride),
        padding="SAME",
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        preferred_element_type=accumulation_dtype(x.dtype),
    )[0].astype(x.dtype)
    return y + b[:, None, None].astype(x.dtype)


def _check_act(name: str, value: str | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    _validate.one_of(tuple(_ACTIVATIONS), **{name: value})


def _check_init(key, activations: dict, sizes: dict, channels=None, unit: str = "") -> None:
    """Constructor checks shared by the layers.

    Sizes > 0, known activations, a typed key and (``channels`` given) at least one
    ``unit`` in ``channels``.
    """
    for name, value in sizes.items():  # ints: a float size is not truncated silently
        _validate.python_int(value, name=name, minimum=1)
    for name, value in activations.items():
        _check_act(name, value)
    _validate.is_key(key)
    if channels is not None and len(channels) == 0:
        raise ValueError(f"`channels` must name at least one {unit}.")
    for c in () if channels is None else channels:
        _validate.python_int(c, name="channels", minimum=1)


# The forwards are jitted like jax.numpy (module level; a module's static fields are part of
# its tree structure, so they are static): an eager call compiles one program per shape.
# Argument checks stay eager, in ``__call__``.


class MLP(eqx.Module):
    """A multilayer perceptron on one vector ``x [in_size] -> [out_size]``.

    Example:
      >>> mlp = MLP(4, 2, hidden=(8,), key=jax.random.key(0))
      >>> jax.vmap(mlp)(jnp.ones((3, 4))).shape
      (3, 2)
    """

    weights: tuple[Array, ...]
    biases: tuple[Array, ...] | None
    activation: str = eqx.field(static=True)
    final_activation: str = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        out_size: int,
        *,
        hidden: Sequence[int] = (64,),
        activation: str = "relu",
        final_activation: str = "identity",
        use_bias: bool = True,
        key: jax.Array,
        dtype=jnp.float32,
    ):
        """Build the layers.

        Args:
          in_size: Input width.
          out_size: Output width.
          hidden: Hidden widths (empty: a single linear map).
          activation: Hidden activation, one of relu, gelu, silu, tanh, sigmoid,
            identity.
          final_activation: Activation on the output (default identity).
          use_bias: Whether the linear maps have biases.
          key: A typed key from ``jax.random.key``.
          dtype: Parameter dtype.
        """
        acts = {"activation": activation, "final_activation": final_activation}
        _check_init(key, acts, {"in_size": in_size, "out_size": out_size})
        _validate.flags(use_bias=use_bias)
        for h in hidden:
            _validate.python_int(h, name="hidden", minimum=1)
        sizes = [int(in_size), *[int(h) for h in hidden], int(out_size)]
        ws, bs = init_pieces(
            key,
            specs=tuple(((a, b), a) for a, b in zip(sizes[:-1], sizes[1:], strict=True)),
            biases=tuple(sizes[1:]) if use_bias else (),
            dtype=dtype,
        )
        self.weights = tuple(ws)
        self.biases = tuple(bs) if use_bias else None
        self.activation = activation
        self.final_activation = final_activation

    def __call__(self, x: Float[ArrayLike, " in_size"]) -> Float[Array, " out_size"]:
        """Apply the MLP to one input vector (``jax.vmap`` for a batch).

        Raises:
          TypeError: If ``x`` is not a floating array of shape ``(in_size,)``.
        """
        _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
        _validate.shape(x, (self.weights[0].shape[0],), name="x")
        x = jnp.asarray(x)
        return _mlp_forward(self, x)


class SmallCNN(eqx.Module):
    """A small convolutional classifier/regressor on one image ``[C, H, W] -> [out]``.

    ``len(channels)`` 3x3 convolutions, each followed by the activation; every
    one after the first has stride 2. Then global average pooling and a linear
    head.

    Example:
      >>> cnn = SmallCNN(1, 10, key=jax.random.key(0))
      >>> cnn(jnp.ones((1, 8, 8))).shape
      (10,)
    """

    convs: tuple[tuple[Array, Array], ...]
    head: tuple[Array, Array]
    activation: str = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_size: int,
        *,
        channels: Sequence[int] = (16, 32, 32),
        activation: str = "relu",
        kernel_size: int = 3,
        key: jax.Array,
        dtype=jnp.float32,
    ):
        """Build the layers.

        Args:
          in_channels: Input channels C.
          out_size: Output width (e.g. number of classes).
          channels: Output channels of each convolution.
          activation: Activation after each convolution.
          kernel_size: Square kernel size.
          key: A typed key from ``jax.random.key``.
          dtype: Parameter dtype.
        """
        sizes = {"in_channels": in_channels, "out_size": out_size, "kernel_size": kernel_size}
        _check_init(key, {"activation": activation}, sizes, channels, "convolution")
        specs, c_in = [], int(in_channels)
        for c in channels:
            k = int(kernel_size)
            specs.append(((int(c), c_in, k, k), c_in * k**2))
            c_in = int(c)
        specs.append(((c_in, int(out_size)), c_in))
        ws, bs = init_pieces(
            key,
            specs=tuple(specs),
            biases=(*(s[0][0] for s in specs[:-1]), int(out_size)),
            dtype=dtype,
        )
        self.convs = tuple(zip(ws[:-1], bs[:-1], strict=True))
        self.head = (ws[-1], bs[-1])
        self.activation = activation

    def __call__(self, x: Float[ArrayLike, "C H W"]) -> Float[Array, " out"]:
        """Apply the network to one image (``jax.vmap`` for a batch).

        Raises:
          TypeError: If ``x`` is not a floating array of shape ``(in_channels, H, W)`` with
            ``H, W >= 1`` (the global average pool of an empty image is NaN).
        """
        _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
        _validate.ndim(x, 3, name="x")
        x = jnp.asarray(x)
        if x.shape[0] != self.convs[0][0].shape[1]:
            raise TypeError(
                f"`x` must have {self.convs[0][0].shape[1]} channels, got shape {x.shape}."
            )
        if 0 in x.shape[1:]:
            raise TypeError(f"`x` must be an image with H, W >= 1, got shape {x.shape}.")
        return _cnn_forward(self, x)


def _time_embedding(t: Array, dim: int, dtype) -> Array:
    half = dim // 2
    acc = accumulation_dtype(dtype)
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=acc) / max(half, 1))
    ang = t.astype(acc) * freqs
    return jnp.concatenate([jnp.sin(ang), jnp.cos(ang)]).astype(dtype)


class UNet(eqx.Module):
    """A small U-Net on one image ``[C_in, H, W] -> [C_out, H, W]``.

    ``len(channels)`` resolution levels; each level has two 3x3 convolutions with
    the activation, 2x2 average pooling going down and nearest-neighbour
    upsampling plus a skip concatenation going up; a final 1x1 convolution. H and
    W must be divisible by ``2 ** (len(channels) - 1)``. An optional scalar ``t``
    (a diffusion time or noise level) enters through a sinusoidal embedding added
    as a per-channel bias at every level.

    Example:
      >>> unet = UNet(1, 1, channels=(8, 16), key=jax.random.key(0))
      >>> unet(jnp.ones((1, 8, 8)), t=0.5).shape
      (1, 8, 8)
    """

    down: tuple[tuple[Array, Array, Array, Array], ...]
    up: tuple[tuple[Array, Array, Array, Array], ...]
    out: tuple[Array, Array]
    time_proj: tuple[tuple[Array, Array], ...]
    activation: str = eqx.field(static=True)
    time_dim: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        channels: Sequence[int] = (16, 32, 64),
        activation: str = "silu",
        time_dim: int = 16,
        key: jax.Array,
        dtype=jnp.float32,
    ):
        """Build the layers.

        Args:
          in_channels: Input channels.
          out_channels: Output channels.
          channels: Channels per resolution level (top to bottom).
          activation: Activation after each convolution.
          time_dim: Width of the sinusoidal embedding of ``t`` (even).
          key: A typed key from ``jax.random.key``.
          dtype: Parameter dtype.
        """
        sizes = {"in_channels": in_channels, "out_channels": out_channels, "time_dim": time_dim}
        _check_init(key, {"activation": activation}, sizes, channels, "level")
        if time_dim % 2:
            raise ValueError(f"`time_dim` must be even, got time_dim={time_dim}.")
        chans = [int(c) for c in channels]
        specs, c_in = [], int(in_channels)
        for c in chans:  # down: two convs per level
            specs += [((c, c_in, 3, 3), 9 * c_in), ((c, c, 3, 3), 9 * c)]
            c_in = c
        for lvl in range(len(chans) - 2, -1, -1):  # up: two convs per level
            c = chans[lvl]
            specs += [
                ((c, chans[lvl + 1] + c, 3, 3), 9 * (chans[lvl + 1] + c)),
                ((c, c, 3, 3), 9 * c),
            ]
        specs.append(((int(out_channels), chans[0], 1, 1), chans[0]))
        specs += [((time_dim, c), time_dim) for c in chans]
        n_conv = len(specs) - len(chans)  # the time projections' biases have length c
        ws, bs = init_pieces(
            key,
            specs=tuple(specs),
            biases=(*(s[0][0] for s in specs[:n_conv]), *chans),
            dtype=dtype,
        )
        ws, bs = iter(ws), iter(bs)

        def conv():
            return next(ws), next(bs)

        down = []
        for _ in chans:
            w1, b1 = conv()
            w2, b2 = conv()
            down.append((w1, b1, w2, b2))
        up = []
        for _ in range(len(chans) - 1):
            w1, b1 = conv()
            w2, b2 = conv()
            up.append((w1, b1, w2, b2))
        self.down, self.up = tuple(down), tuple(up)
        self.out = conv()
        self.time_proj = tuple((next(ws), next(bs)) for _ in chans)
        self.activation = activation
        self.time_dim = int(time_dim)

    def __call__(
        self, x: Float[ArrayLike, "C H W"], t: Real[ArrayLike, ""] | None = None
    ) -> Float[Array, "C2 H W"]:
        """Apply the U-Net to one image (and optionally a scalar time ``t``).

        Raises:
          TypeError: If ``x`` is not a floating array of shape ``(in_channels, H, W)`` with
            ``H`` and ``W`` divisible by ``2 ** (len(channels) - 1)``, or ``t`` is not a
            real scalar.
          ValueError: If a concrete ``t`` is not finite.
        """
        _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
        _validate.ndim(x, 3, name="x")
        x = jnp.asarray(x)
        c_in = self.down[0][0].shape[1]
        if x.shape[0] != c_in:
            raise TypeError(f"`x` must have {c_in} channels, got shape {x.shape}.")
        f = 2 ** (len(self.down) - 1)
        if x.shape[1] % f or x.shape[2] % f:
            raise TypeError(f"`x` spatial size must be divisible by {f}, got shape {x.shape}.")
        if t is not None:  # a NaN time gave a NaN image (checked when concrete)
            _validate.finite_scalar(t=t)
        return _unet_forward(self, x, None if t is None else jnp.asarray(t))


@jax.jit
def _mlp_forward(m: MLP, x: Array) -> Array:
    act = _ACTIVATIONS[m.activation]
    n = len(m.weights)
    for i, w in enumerate(m.weights):
        x = _linear(x, w, None if m.biases is None else m.biases[i])
        x = act(x) if i < n - 1 else _ACTIVATIONS[m.final_activation](x)
    return x


@jax.jit
def _cnn_forward(m: SmallCNN, x: Array) -> Array:
    act = _ACTIVATIONS[m.activation]
    for i, (w, b) in enumerate(m.convs):
        x = act(_conv(x, w, b, stride=1 if i == 0 else 2))
    pooled = jnp.mean(x.astype(accumulation_dtype(x.dtype)), axis=(1, 2)).astype(x.dtype)
    return _linear(pooled, *m.head)


@jax.jit
def _unet_forward(m: UNet, x: Array, t: Array | None) -> Array:
    act = _ACTIVATIONS[m.activation]
    temb = None if t is None else _time_embedding(t, m.time_dim, x.dtype)

    def tbias(lvl, h):
        if temb is None:
            return h
        w, b = m.time_proj[lvl]
        return h + _linear(temb, w, b)[:, None, None]

    skips = []
    h = x
    for lvl, (w1, b1, w2, b2) in enumerate(m.down):
        if lvl > 0:
            c, hh, ww = h.shape
            h = h.reshape(c, hh // 2, 2, ww // 2, 2).mean(axis=(2, 4))
        h = act(tbias(lvl, _conv(h, w1, b1)))
        h = act(_conv(h, w2, b2))
        skips.append(h)
    for i, (w1, b1, w2, b2) in enumerate(m.up):
        lvl = len(m.down) - 2 - i
        h = jnp.repeat(jnp.repeat(h, 2, axis=1), 2, axis=2)
        h = jnp.concatenate([h, skips[lvl]], axis=0)
        h = act(tbias(lvl, _conv(h, w1, b1)))
        h = act(_conv(h, w2, b2))
    return _conv(h, *m.out)
