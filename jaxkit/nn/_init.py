"""Parameter initialisation helper: one random draw for many tensors.

Eager ``jax.random.normal`` compiles once per distinct shape (about half a second
each on CPU), so drawing every tensor separately makes model construction slow.
Drawing one flat vector and slicing it costs one compilation per total size and
stays traceable (``jit``/``eval_shape`` of an init function work unchanged).
:func:`init_pieces` is the same draw plus the zero biases, jitted at module level with
the shapes and dtype static: an eager module constructor then compiles one program per
configuration instead of one per slice, reshape and ``zeros`` (about 10-20 for a small
U-Net), and a second construction with the same sizes compiles nothing.
"""

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def _scales(specs: Sequence[tuple[tuple[int, ...], float | int]]) -> np.ndarray:
    """The flat ``1/sqrt(fan_in)`` vector that multiplies the draw (float32)."""
    return np.concatenate([np.full(math.prod(s), 1.0 / math.sqrt(f), np.float32) for s, f in specs])


def _draw(key: jax.Array, scale: jax.Array, specs, dtype) -> list[jax.Array]:
    flat = (jax.random.normal(key, scale.shape, jnp.float32) * scale).astype(dtype)
    out, off = [], 0
    for s, _ in specs:
        n = math.prod(s)
        out.append(jax.lax.slice(flat, (off,), (off + n,)).reshape(s))
        off += n
    return out


def normal_pieces(
    key: jax.Array, specs: Sequence[tuple[tuple[int, ...], float | int]], dtype
) -> list[jax.Array]:
    """Independent ``N(0, 1/fan_in)`` tensors for ``specs = [(shape, fan_in), ...]``."""
    if sum(math.prod(s) for s, _ in specs) == 0:
        return [jnp.zeros(s, dtype) for s, _ in specs]
    return _draw(key, jnp.asarray(_scales(specs)), specs, dtype)


@functools.partial(jax.jit, static_argnames=("specs", "biases", "dtype"))
def _init_pieces_jit(key, scale, *, specs, biases, dtype):
    return _draw(key, scale, specs, dtype), [jnp.zeros((n,), dtype) for n in biases]


def init_pieces(
    key: jax.Array,
    *,
    specs: tuple[tuple[tuple[int, ...], float | int], ...],
    biases: tuple[int, ...],
    dtype,
) -> tuple[list[jax.Array], list[jax.Array]]:
    """``normal_pieces(key, specs, dtype)`` and zero vectors of lengths ``biases``.

    One program, jitted like jax.numpy (module level; ``specs``, ``biases`` and ``dtype``
    static, so hashable: tuples of ints and floats). Every size in ``specs`` is positive.
    The scales enter as an argument, not a constant, so that XLA cannot fold them into
    the draw's own multiply: the values are bit-identical to :func:`normal_pieces`.
    """
    scale = _scales(specs)
    return _init_pieces_jit(key, scale, specs=specs, biases=biases, dtype=dtype)
