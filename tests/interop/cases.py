"""Conformance cases for jaxkit.interop (see tests/conformance.py).

The adapters are containers, so each case is the adapter's forward pass as a
pure function of the input batch (the wrapped params closed over, cast to
the input's dtype).
"""

import equinox as eqx
import haiku as hk
import jax
import jax.numpy as jnp
from flax import nnx

from jaxkit.interop.flax import to_nnx
from jaxkit.interop.haiku import to_haiku
from tests.conformance import Case

_MLP = eqx.nn.MLP(4, 3, 8, 1, activation=jnp.tanh, key=jax.random.key(3))
_GRAPHDEF, _STATE = nnx.split(to_nnx(_MLP, batch_axis=0))
_HK = hk.without_apply_rng(hk.transform(lambda x: to_haiku(_MLP, batch_axis=0)(x)))
_HK_PARAMS = _HK.init(None, jnp.zeros((8, 4)))


def _cast(tree, dtype):
    return jax.tree.map(lambda p: p.astype(dtype), tree)


def _nnx_forward(x):
    return nnx.merge(_GRAPHDEF, _cast(_STATE, x.dtype))(x)


def _haiku_forward(x):
    return _HK.apply(_cast(_HK_PARAMS, x.dtype), x)


def _x(key, dtype):
    return (jax.random.normal(key, (8, 4), dtype),)


CASES = [
    Case(
        name="interop.to_nnx/mlp",
        fn=_nnx_forward,
        make_args=_x,
    ),
    Case(
        name="interop.to_haiku/mlp",
        fn=_haiku_forward,
        make_args=_x,
        slow_checks=("grads", "dtypes", "vmap", "traced_once"),  # to_nnx keeps the full set
    ),
]
