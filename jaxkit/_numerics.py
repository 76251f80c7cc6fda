"""Small numerical helpers shared by every area (one copy each).

The accumulation dtype policy itself is ``jaxkit._typing.accumulation_dtype``.
``inverse_permutation`` inverts permutations along the last axis with a scatter,
keeping the input's sharding.
"""

from typing import Any

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Int


def iota_like(x: Array, dtype: Any = jnp.int32) -> Array:
    """``0, 1, ..., n-1`` along the last axis, broadcast to ``x.shape``.

    Built as ``zeros_like(x) + arange`` so it carries ``x``'s sharding (an operand of a
    multi-operand ``lax.sort`` must be sharded like the others).
    """
    return jnp.zeros_like(x, dtype=dtype) + lax.broadcasted_iota(dtype, x.shape, x.ndim - 1)


def inverse_permutation(perm: Int[Array, "*batch n"]) -> Int[Array, "*batch n"]:
    """Return ``inv`` with ``inv[..., perm[..., i]] = i`` along the last axis.

    One int32 sort of ``perm << b | iota`` when ``n <= 32768`` (a key-value sort above).
    """
    perm = jnp.asarray(perm)
    n = perm.shape[-1]
    iota = iota_like(perm)
    b = max(1, (n - 1).bit_length())
    if b > 15:
        return lax.sort((perm, iota), dimension=perm.ndim - 1, num_keys=1)[1]
    return lax.sort((perm.astype(jnp.int32) << b) | iota, dimension=perm.ndim - 1) & ((1 << b) - 1)
