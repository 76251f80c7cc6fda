"""Small parts of the WBMM network: norms, linear and conv layers, SE, GRN (channels last).

Linear, LayerNorm and the dense Conv2d are ``equinox.nn`` layers (unbatched) applied
at every position of a ``(B, H, W, C)`` batch by nested ``vmap`` (no reshape, so a
batch axis sharded under an explicit mesh keeps its sharding), with the parameters
cast to the input's dtype (bf16 activations). Their weights are re-drawn with the
authors' truncated normal (std 0.02) and zero biases.

BatchNorm stays ours: the authors' (PyTorch) convention keeps running statistics
``(1 - m) r + m v`` with ``m = 0.1`` from ``(0, 1)``, which ``eqx.nn.BatchNorm`` does
not offer. Its ``mode="batch"`` de-biases a running variance started at 1: after one
training step on a batch of variance ``v`` it reports ``(0.9 + 0.1 v) / 0.1 = 9 + v``
(10.0 for ``v = 1``, against PyTorch's 1.0), and ``mode="ema"`` normalises training
batches with the running mixture instead of the batch statistics. It also needs a
named ``vmap`` axis, while these modules take the batch axis (BatchNorm makes the
block batch-level).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype

State = eqx.nn.State


def trunc_normal(key: PRNGKeyArray, shape: tuple[int, ...], std: float = 0.02) -> Array:
    """The authors' ``trunc_normal_(std=0.02)`` (truncated at two standard deviations)."""
    return std * jax.random.truncated_normal(key, -2.0, 2.0, shape)


def bcast(v: Array) -> Array:
    """A per-channel vector shaped to broadcast against ``(B, H, W, C)``."""
    return v.reshape(1, 1, 1, -1)


def _cast(layer: eqx.Module, dtype) -> eqx.Module:
    """``layer`` with its floating parameters cast to ``dtype``."""
    return jax.tree.map(lambda p: p.astype(dtype) if eqx.is_inexact_array(p) else p, layer)


def per_position(layer: eqx.Module, x: Array) -> Array:
    """Apply an unbatched ``eqx.nn`` layer acting on the last axis at every position of ``x``."""
    fn = _cast(layer, x.dtype)
    for _ in range(x.ndim - 1):
        fn = jax.vmap(fn)
    return fn(x)


def linear(d_in: int, d_out: int, *, bias: bool = True, key: PRNGKeyArray) -> eqx.nn.Linear:
    """``eqx.nn.Linear`` with the authors' init (weight ``(d_out, d_in)``, zero bias)."""
    layer = eqx.nn.Linear(d_in, d_out, use_bias=bias, key=key)
    new = (trunc_normal(key, (d_out, d_in)), jnp.zeros((d_out,)) if bias else None)
    return eqx.tree_at(lambda m: (m.weight, m.bias), layer, new, is_leaf=lambda v: v is None)


def layer_norm(channels: int) -> eqx.nn.LayerNorm:
    """Channels-last layer norm (eps 1e-6, as the authors')."""
    return eqx.nn.LayerNorm(channels, eps=1e-6)


def conv2d(c_in: int, c_out: int, *, kernel: int = 3, stride: int = 2, key) -> eqx.nn.Conv2d:
    """Dense ``eqx.nn.Conv2d`` with padding ``kernel // 2`` (stem/downsample), authors' init."""
    layer = eqx.nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, key=key)
    new = (trunc_normal(key, (c_out, c_in, kernel, kernel)), jnp.zeros((c_out, 1, 1)))
    return eqx.tree_at(lambda m: (m.weight, m.bias), layer, new)


def conv_nhwc(conv: eqx.nn.Conv2d, x: Array) -> Array:
    """Apply an (unbatched, channels-first) ``eqx.nn.Conv2d`` to an NHWC batch."""
    y = jax.vmap(_cast(conv, x.dtype))(jnp.moveaxis(x, -1, 1))
    return jnp.moveaxis(y, 1, -1)


def check_call(x, channels: int, inference) -> tuple[Array, bool]:
    """A stateful layer's call: ``(jnp.asarray(x), inference)`` after their checks.

    ``x`` a floating ``(B, H, W, C)`` batch of ``channels`` channels and ``inference`` a
    bool (Python's, returned), else a ``TypeError`` naming it. The checks run before
    ``jnp.asarray`` (a string names the argument) and read only the dtype and shape, so
    tracers pass.
    """
    _validate.floating(x, name="x")
    shape = tuple(jnp.shape(x))
    if len(shape) != 4:
        raise TypeError(f"`x` must have rank 4 (B, H, W, C), got shape {shape}.")
    if shape[-1] != channels:
        raise TypeError(f"`x` must have {channels} channels (last axis), got shape {shape}.")
    return jnp.asarray(x), _validate.flag(inference, name="inference")


def check_momentum(value, *, name: str) -> None:
    """A BatchNorm momentum: a finite real scalar in ``[0, 1]`` (TypeError / ValueError)."""
    _validate.finite_scalar(**{name: value})
    _validate.in_interval(low=0, high=1, **{name: value})


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
        channels = _validate.python_int(channels, name="channels", minimum=1)
        check_momentum(momentum, name="momentum")
        _validate.finite_scalar(eps=eps)
        _validate.positive(eps=eps)
        self.weight = jnp.ones((channels,))
        self.bias = jnp.zeros((channels,))
        self.state_index = eqx.nn.StateIndex((jnp.zeros((channels,)), jnp.ones((channels,))))
        self.eps, self.momentum = eps, momentum

    def affine(self, state: State) -> tuple[Array, Array]:
        """The inference map as ``(scale, shift)`` per channel."""
        mean, var = state.get(self.state_index)
        s = self.weight / jnp.sqrt(var + self.eps)
        return s, self.bias - mean * s

    def __call__(
        self, x: Float[ArrayLike, "B H W C"], state: State, *, inference: bool
    ) -> tuple[Float[Array, "B H W C"], State]:
        """Normalise a ``(B, H, W, C)`` batch; training also updates the running statistics.

        Raises:
          TypeError: ``x`` not a floating array of rank 4 with this layer's channels (a
            string included), ``inference`` not a bool.
        """
        x, inference = check_call(x, self.weight.shape[0], inference)
        if inference:
            s, t = self.affine(state)
            return x * bcast(s).astype(x.dtype) + bcast(t).astype(x.dtype), state
        x32 = x.astype(accumulation_dtype(x.dtype))
        mean = jnp.mean(x32, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(x32 - bcast(mean)), axis=(0, 1, 2))
        rm, rv = state.get(self.state_index)
        m = self.momentum
        mean_s, var_s = (lax.stop_gradient(v).astype(rm.dtype) for v in (mean, var))
        state = state.set(self.state_index, ((1 - m) * rm + m * mean_s, (1 - m) * rv + m * var_s))
        w, b = self.weight.astype(x32.dtype), self.bias.astype(x32.dtype)
        y = (x32 - bcast(mean)) * bcast(w / jnp.sqrt(var + self.eps))
        return (y + bcast(b)).astype(x.dtype), state


class DepthwiseConv(eqx.Module):
    """Depthwise ``k x k`` cross-correlation, zero ``SAME`` padding; kernel ``(k, k, C)``.

    Kept in the ``(k, k, C)`` layout that
    :func:`jaxkit.kernels.windowed_matmul.table_from_depthwise_kernel` embeds (the
    re-parameterisation folds it into a WBMM table).
    """

    kernel: Array
    bias: Array | None

    def __init__(self, channels: int, size: int, *, bias: bool = False, key: PRNGKeyArray):
        self.kernel = trunc_normal(key, (size, size, channels))
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
        return y if self.bias is None else y + bcast(self.bias).astype(x.dtype)


class SE(eqx.Module):
    """Squeeze-and-excitation: mean over ``(H, W)``, ReLU bottleneck, sigmoid gate."""

    down: eqx.nn.Linear
    up: eqx.nn.Linear

    def __init__(self, channels: int, *, reduction: int = 4, key: PRNGKeyArray):
        k1, k2 = jax.random.split(key)
        hidden = max(1, channels // reduction)
        self.down = linear(channels, hidden, key=k1)
        self.up = linear(hidden, channels, key=k2)

    def __call__(self, x: Array) -> Array:
        g = jnp.mean(x, axis=(1, 2), keepdims=True)
        return x * jax.nn.sigmoid(per_position(self.up, jax.nn.relu(per_position(self.down, g))))


class GRN(eqx.Module):
    """Global response norm (ConvNeXt-V2): ``(gamma * N + 1) * x (+ beta)``."""

    gamma: Array
    beta: Array | None

    def __init__(self, channels: int):
        self.gamma, self.beta = jnp.zeros((channels,)), jnp.zeros((channels,))

    def __call__(self, x: Array) -> Array:
        g = jnp.sqrt(jnp.sum(jnp.square(x), axis=(1, 2), keepdims=True))
        n = g / (jnp.mean(g, axis=-1, keepdims=True) + 1e-6)
        y = (bcast(self.gamma).astype(x.dtype) * n + 1) * x
        return y if self.beta is None else y + bcast(self.beta).astype(x.dtype)
