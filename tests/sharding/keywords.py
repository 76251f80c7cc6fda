"""Keyword-sweep recipes for sharding (see tests/keywords.py)."""

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
}

EXEMPT: dict[str, str] = {}
