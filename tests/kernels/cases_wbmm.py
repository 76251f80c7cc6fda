"""Conformance cases of the WBMM operator (collected through tests/kernels/cases.py)."""

import jax
import jax.numpy as jnp

from jaxkit.kernels.windowed_matmul import windowed_matmul
from tests.conformance import Bad, Case

_WINDOW = (2, 3)


def _args(key, dtype):
    kx, kt = jax.random.split(key)
    x = jax.random.normal(kx, (8, 4, 5, 2), jnp.float32).astype(dtype)  # W=5 pads to 6
    t = (0.3 * jax.random.normal(kt, (2, 15), jnp.float32)).astype(dtype)
    return x, t


def _small_args(key, dtype):
    kx, kt = jax.random.split(key)
    x = jax.random.normal(kx, (1, 2, 3, 2), jnp.float32).astype(dtype)
    t = (0.3 * jax.random.normal(kt, (2, 15), jnp.float32)).astype(dtype)
    return x, t


def _bad(make):
    return lambda key: make(*_args(key, jnp.float32))


_BAD = (
    Bad("rank-3 x", _bad(lambda x, t: ((x[0], t), {})), TypeError),
    Bad("table columns", _bad(lambda x, t: ((x, t[:, :9]), {})), TypeError),
    Bad("window 0", _bad(lambda x, t: ((x, t), {"window": 0})), ValueError, "window"),
    Bad(
        "implementation",
        _bad(lambda x, t: ((x, t), {"implementation": "cuda"})),
        ValueError,
        "implementation",
    ),
    Bad(
        "no padding",
        _bad(lambda x, t: ((x, t), {"pad_to_window": False})),
        TypeError,
        "pad_to_window",
    ),
    Bad(
        "pad_to_window not a bool",
        _bad(lambda x, t: ((x, t), {"pad_to_window": "no"})),
        TypeError,
        "pad_to_window",
    ),
)

CASES = [
    Case(
        "kernels.windowed_matmul/xla",
        lambda x, t, **kw: windowed_matmul(x, t, **kw),
        _args,
        static={"window": _WINDOW, "implementation": "xla"},
        grad_modes=("fwd", "rev"),
        grad_argnums=(0, 1),
        bad=_BAD,
    ),
    Case(
        "kernels.windowed_matmul/pallas_interpret",
        lambda x, t, **kw: windowed_matmul(x, t, **kw),
        _small_args,
        static={"window": _WINDOW, "implementation": "pallas_interpret"},
        grad_modes=("rev",),  # custom_vjp: reverse mode only
        grad_argnums=(0, 1),
        shard_argnums=(),  # a per-device kernel: shard it with shard_map
        # the family's default-run case is /xla; the kernel's values and gradients are
        # checked in the default run by tests/kernels/test_windowed_matmul.py
        slow_checks=("grads", "vmap", "dtypes", "traced_once", "eval_shape", "bad_inputs"),
    ),
]
