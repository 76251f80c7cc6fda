"""Conformance cases for jaxkit.equivariance (one per operator family)."""

import equinox as eqx
import jax
import jax.numpy as jnp

import jaxkit.equivariance as E
from tests.conformance import Bad, Case, built_once


@built_once
def _o3():
    """Built on first use, not at collection: o3_irreps imports e3nn-jax (~2 s per worker)."""
    return E.o3_irreps("2x0e+1x1o+1x2e", "1x0e+2x1o")


_C8 = E.cyclic_rot2d(8, mult_in=2, mult_out=1)


_LAYER = E.RECMLinear(_C8, key=jax.random.key(0), use_bias=False)  # concrete: never in a trace


def _layer():
    return _LAYER


def _reynolds(w):
    return E.reynolds(w, _o3())


def _layer_apply(x, *, theta):
    layer = eqx.tree_at(lambda m: m.theta, _layer(), jnp.asarray(theta, x.dtype))
    return layer(x)


def _gap(x, t, *, ridge):
    return E.linear_gap(x, t, _C8, ridge=ridge)


CASES = [
    Case(
        name="equivariance.reynolds/o3",
        fn=_reynolds,
        make_args=lambda k, dt: (jax.random.normal(k, (8, _o3().d_out, _o3().d_in), dt),),
        bad=(
            Bad(
                "wrong trailing shape",
                lambda k: ((jnp.zeros((8, 3, 3)),), {}),
                TypeError,
                "`w`",
            ),
        ),
    ),
    Case(
        name="equivariance.RECMLinear/c8",
        fn=_layer_apply,
        make_args=lambda k, dt: (jax.random.normal(k, (8, _C8.d_in), dt),),
        hparams={"theta": (0.3, 0.6)},
        nan_names={"theta": None},  # the layer's relaxation parameter, not a hyperparameter
        bad=(Bad("wrong d_in", lambda k: ((jnp.zeros((8, 3)),), {}), TypeError, "`x`"),),
    ),
    Case(
        name="equivariance.linear_gap/c8",
        fn=_gap,
        make_args=lambda k, dt: tuple(
            jax.random.normal(kk, (8, d), dt)
            for kk, d in zip(jax.random.split(k), (_C8.d_in, _C8.d_out), strict=True)
        ),
        hparams={"ridge": (1e-3, 1e-2)},
        grad_argnums=(0, 1),
        rtol=1e-4,
        bad=(
            Bad(
                "t rows differ",
                lambda k: ((jnp.zeros((8, 4)), jnp.zeros((8, 3))), {}),
                TypeError,
                "`t`",
            ),
        ),
    ),
]
