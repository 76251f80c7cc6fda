"""The f32 building blocks of the frozen-backbone adapters (``steering``, ``memory``).

Shared by both areas (an area never imports another's private module). Batched, f32, and
isolated from the backbone: they read hidden states and hold no backbone parameters.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array


def row(v, x):
    """``v [d]`` shaped to broadcast against ``x [..., d]`` (explicit rank)."""
    return v.reshape((1,) * (x.ndim - 1) + v.shape)


def xavier_normal(key, shape, gain=1.0):
    """Xavier-normal draw, ``gain * sqrt(2 / (fan_in + fan_out))`` (``gain=0``: zeros)."""
    fan_in, fan_out = shape[0], shape[-1]
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return std * jax.random.normal(key, shape, jnp.float32)


class Linear(eqx.Module):
    """``x @ w + b`` in f32 (Xavier-normal ``w`` times ``gain``; ``gain=0`` starts at zero)."""

    w: Array
    b: Array

    def __init__(self, n_in: int, n_out: int, *, key, gain: float = 1.0):
        self.w = xavier_normal(key, (n_in, n_out), gain)
        self.b = jnp.zeros((n_out,), jnp.float32)

    def __call__(self, x):
        y = x.astype(jnp.float32) @ self.w
        return y + row(self.b, y)


class LayerNorm(eqx.Module):
    """LayerNorm over the last axis, f32 scale and shift (eps 1e-5)."""

    g: Array
    b: Array

    def __init__(self, d: int):
        self.g = jnp.ones((d,), jnp.float32)
        self.b = jnp.zeros((d,), jnp.float32)

    def __call__(self, x):
        return self.affine(normed(x))

    def affine(self, x_hat):
        """The scale and shift alone, on an already normalised ``x_hat`` (:func:`normed`)."""
        return x_hat * row(self.g, x_hat) + row(self.b, x_hat)


def normed(x):
    """:class:`LayerNorm` without its scale and shift: ``(x - mean) / sqrt(var + 1e-5)``.

    Row-wise: rows normalised once can take several LayerNorms' affines
    (:meth:`LayerNorm.affine`).
    """
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5)
