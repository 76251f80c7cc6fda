"""Counter-based Gumbel noise: threefry2x32 in plain uint32 ops (usable inside Pallas).

Reproduces ``jax.random.gumbel(key, shape, jnp.float32)`` (mode "low") bit for bit
for a threefry2x32 key under ``jax_threefry_partitionable=True`` (the default):
element ``n`` of the flattened shape gets ``bits = b1 ^ b2`` with
``(b1, b2) = threefry2x32(key, (n >> 32, n & 0xffffffff))``, mapped to a float in
``[tiny, 1)`` and then to ``-log(-log(u))``. The kernel calls :func:`gumbel_f32` on
its block, so noise costs no HBM traffic.
"""

import jax
import jax.numpy as jnp
import numpy as np

_ROT = ((13, 15, 26, 6), (17, 29, 16, 24))


def _u32(v: int) -> np.uint32:
    return np.uint32(v)


def _rotl(x: jax.Array, d: int) -> jax.Array:
    return jax.lax.shift_left(x, _u32(d)) | jax.lax.shift_right_logical(x, _u32(32 - d))


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32, 20 rounds (as ``jax._src.random.threefry2x32``)."""
    ks = (k1, k2, k1 ^ k2 ^ _u32(0x1BD11BDA))
    x1 = x1 + ks[0]
    x2 = x2 + ks[1]
    for i in range(5):
        for r in _ROT[i % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r)
            x2 = x1 ^ x2
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + _u32(i + 1)
    return x1, x2


def gumbel_f32(k1, k2, index: jax.Array) -> jax.Array:
    """Standard Gumbel noise (f32) at flat element indices ``index`` (uint32)."""
    b1, b2 = threefry2x32(k1, k2, jnp.zeros_like(index), index)
    bits = b1 ^ b2
    float_bits = jax.lax.shift_right_logical(bits, _u32(32 - 23)) | _u32(0x3F800000)
    floats = jax.lax.bitcast_convert_type(float_bits, jnp.float32) - jnp.float32(1.0)
    tiny = jnp.float32(np.finfo(np.float32).tiny)
    u = jnp.maximum(tiny, floats * (jnp.float32(1.0) - tiny) + tiny)
    return -jnp.log(-jnp.log(u))
