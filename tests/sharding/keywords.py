"""Keyword-sweep recipes for sharding (see tests/keywords.py)."""

import functools

import jax
import jax.numpy as jnp

from jaxkit import sharding


def _rowwise(**kw):
    """``rowwise`` over a mesh of the available devices, on two rows per device."""
    mesh = sharding.make_mesh()
    rows = jnp.arange(2 * mesh.size, dtype=jnp.float32)
    rows = jax.device_put(rows, jax.NamedSharding(mesh, jax.P("data")))  # the default axis
    return jax.jit(sharding.rowwise(lambda a: 2 * a, mesh, **kw))(rows)


RECIPES = {
    # the default `model` given explicitly: a call with no argument binds none, and the array
    # sweep reads an empty binding as a recipe that never reached the function
    "jaxkit.sharding.make_mesh": lambda **kw: sharding.make_mesh(**{"model": 1, **kw}),
    "jaxkit.sharding.rowwise": _rowwise,
    "jaxkit.sharding.gather_sharded": functools.partial(
        sharding.gather_sharded, jnp.arange(4, dtype=jnp.float32)
    ),
    "jaxkit.sharding.explicit_spec": functools.partial(
        sharding.explicit_spec, jnp.arange(4, dtype=jnp.float32)
    ),
}

ANY_RANK: dict[str, str] = {
    "jaxkit.sharding.gather_sharded:x": "any array: its sharding is read, not its shape",
    "jaxkit.sharding.explicit_spec:x": "any array: its sharding is read, not its shape",
}

EXEMPT: dict[str, str] = {}
