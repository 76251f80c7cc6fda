"""Conformance cases of the WBMM layers (block and network forward) and the BN fold."""

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxkit.vision import WBMMBlock, WBMMNet, fold_bn_into_table
from tests.conformance import Bad, Case, built_once

_WINDOW = (2, 2)


# the layers are built on first use, not at import: every xdist worker imports this module
# while collecting, and an eager equinox init compiles dozens of small programs (measured:
# about a quarter of the whole suite's collection time). Each is built by one jitted
# program (eager, the initialisers ran op by op: 79 compiles, 3.1 s of CPU for the block).
@built_once  # concrete and float32 even if first reached under a trace or in x64
def _block_layer():
    return eqx.filter_jit(
        lambda k: eqx.nn.make_with_state(WBMMBlock)(
            2, "W", window=_WINDOW, layer_scale_init=0.5, ffn_ratio=2, key=k
        )
    )(jax.random.key(3))


@built_once
def _net_layer():
    return eqx.filter_jit(
        lambda k: eqx.nn.make_with_state(WBMMNet)(
            depths=(1, 1),
            dims=(2, 4),
            patterns=("W", "D"),
            in_channels=1,
            num_classes=3,
            window=_WINDOW,
            stem_strides=(1,),
            layer_scale_init=0.5,
            key=k,
        )
    )(jax.random.key(4))


def _block(x):
    block, state = _block_layer()
    return block(x, state, inference=True)[0]


def _net(x):
    net, state = _net_layer()
    return net(x, state, inference=True)[0]


def _x(c, layer):
    def make(key, dtype):
        layer()  # built here, outside every check's trace
        return (jax.random.normal(key, (8, 4, 3, c), jnp.float32).astype(dtype),)  # W=3 pads

    return make


def _fold_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    table = 0.3 * jax.random.normal(k1, (8, 9), jnp.float32)
    scale = 1.0 + 0.1 * jax.random.normal(k2, (8,), jnp.float32)
    shift = jax.random.normal(k3, (8,), jnp.float32)
    return tuple(a.astype(dtype) for a in (table, scale, shift))


def _fold(table, scale, shift, **kw):
    return fold_bn_into_table(table, None, scale=scale, shift=shift, **kw)


def _bad_fold(make):
    return lambda key: make(*_fold_args(key, jnp.float32))


CASES = [
    Case(
        "vision.WBMMBlock/inference",
        _block,
        _x(2, _block_layer),
        grad_modes=("rev",),
        # default-run derivative check: the fold case; 30 eager calls of an equinox block
        # dispatch op by op (~6 s): slow tier
        slow_checks=("grads", "dtypes", "eager_cache"),
    ),
    Case(
        "vision.WBMMNet/inference",
        _net,
        _x(1, _net_layer),
        grad_modes=("rev",),
        # the block case runs every check by default; the net keeps its bad inputs
        slow_checks=(
            "grads",
            "vmap",
            "dtypes",
            "traced_once",
            "sharding",
            "eager_cache",
            "jit",
            "eval_shape",
        ),
    ),
    Case(
        "vision.fold_bn_into_table",
        _fold,
        _fold_args,
        static={"window": _WINDOW, "residual": True},
        grad_argnums=(0, 1, 2),
        shard_argnums=(),
        bad=(
            Bad("table columns", _bad_fold(lambda t, s, h: ((t[:, :4], s, h), {})), TypeError),
            Bad("window 0", _bad_fold(lambda t, s, h: ((t, s, h), {"window": 0})), ValueError),
            Bad("scale shape", _bad_fold(lambda t, s, h: ((t, s[:3], h), {})), TypeError),
        ),
    ),
]

from tests.vision.cases_featjnd import CASES as _FEATJND  # noqa: E402

CASES += _FEATJND
from tests.vision.cases_irdet import CASES as _IRDET  # noqa: E402

CASES += _IRDET
