"""Keyword-sweep recipes for interop (see tests/keywords.py)."""

import equinox as eqx
import haiku as hk
import jax
import jax.numpy as jnp

from jaxkit.interop import flax as jflax
from jaxkit.interop import haiku as jhaiku
from jaxkit.interop.haiku import HaikuAdapter


def _mlp():
    return eqx.nn.MLP(4, 3, 8, 1, activation=jnp.tanh, key=jax.random.key(3))


def _haiku(**kw):
    mlp = _mlp()
    f = hk.without_apply_rng(hk.transform(lambda x: jhaiku.to_haiku(mlp, **kw)(x)))
    return f.init(None, jnp.zeros((4,)))  # unbatched without `batch_axis`


def _adapter(**kw):
    mlp = _mlp()
    f = hk.without_apply_rng(hk.transform(lambda x: HaikuAdapter(mlp, **kw)(x)))
    return f.init(None, jnp.zeros((4,)))


RECIPES = {
    "jaxkit.interop.flax.to_nnx": lambda **kw: jflax.to_nnx(_mlp(), **kw),
    "jaxkit.interop.haiku.to_haiku": _haiku,
    "jaxkit.interop.haiku.HaikuAdapter": _adapter,
}

EXEMPT: dict[str, str] = {}
