"""Parameter initialisation helper: one random draw for many tensors.

Eager ``jax.random.normal`` compiles once per distinct shape (about half a second
each on CPU), so drawing every tensor separately makes model construction slow.
Drawing one flat vector and slicing it costs one compilation per total size and
stays traceable (``jit``/``eval_shape`` of an init function work unchanged).
"""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def normal_pieces(
    key: jax.Array, specs: Sequence[tuple[tuple[int, ...], float | int]], dtype
) -> list[jax.Array]:
    """Independent ``N(0, 1/fan_in)`` tensors for ``specs = [(shape, fan_in), ...]``."""
    sizes = [math.prod(s) for s, _ in specs]
    total = sum(sizes)
    if total == 0:
        return [jnp.zeros(s, dtype) for s, _ in specs]
    scale = np.concatenate(
        [np.full(n, 1.0 / math.sqrt(f), np.float32) for n, (_, f) in zip(sizes, specs, strict=True)]
    )
    flat = (jax.random.normal(key, (total,), jnp.float32) * jnp.asarray(scale)).astype(dtype)
    out, off = [], 0
    for n, (s, _) in zip(sizes, specs, strict=True):
        out.append(jax.lax.slice(flat, (off,), (off + n,)).reshape(s))
        off += n
    return out
