"""threefry2x32 in plain uint32 ops, and ``jax.random.fold_in`` bit for bit through it.

Shared by the sampler's counter-hash noise (``kernels.sampling._hash``, also inside the
Pallas kernel) and the decoders' per-step keys. On CPU ``jax.random`` lowers threefry to
a rolled loop of small kernels (5 trips of about 16 each); these ops fuse into one
elementwise program, so a key or a noise block costs one kernel launch.
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


def fold_in(key: jax.Array, data) -> jax.Array:
    """``jax.random.fold_in(key, data)`` for a scalar typed key, bit for bit.

    For a threefry2x32 key the new key is ``threefry2x32(key, (0, uint32(data)))`` in
    plain uint32 ops (one fused elementwise program on CPU, where ``jax.random``'s
    threefry is a rolled loop of small kernels); any other key goes to ``jax.random``.
    """
    if not (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        and key.ndim == 0
        and str(jax.random.key_impl(key)) == "threefry2x32"
    ):
        return jax.random.fold_in(key, data)
    kd = jax.random.key_data(key)
    d = jnp.asarray(data, dtype=jnp.uint32)
    b1, b2 = threefry2x32(kd[0], kd[1], jnp.zeros_like(d), d)
    return jax.random.wrap_key_data(jnp.stack([b1, b2]), impl="threefry2x32")
