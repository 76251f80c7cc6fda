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

from jaxkit._threefry import _u32, threefry2x32


def gumbel_f32(k1, k2, index: jax.Array) -> jax.Array:
    """Standard Gumbel noise (f32) at flat element indices ``index`` (uint32)."""
    b1, b2 = threefry2x32(k1, k2, jnp.zeros_like(index), index)
    bits = b1 ^ b2
    float_bits = jax.lax.shift_right_logical(bits, _u32(32 - 23)) | _u32(0x3F800000)
    floats = jax.lax.bitcast_convert_type(float_bits, jnp.float32) - jnp.float32(1.0)
    tiny = jnp.float32(np.finfo(np.float32).tiny)
    u = jnp.maximum(tiny, floats * (jnp.float32(1.0) - tiny) + tiny)
    return -jnp.log(-jnp.log(u))
