"""Conformance cases for jaxkit.privacy (see tests/conformance.py)."""

import jax
import jax.numpy as jnp

from jaxkit import privacy
from jaxkit.privacy import lowrank as L
from tests.conformance import Bad, Case

M, N, R, B = 6, 5, 2, 8


def _args(key, dtype):
    ks = jax.random.split(key, 4)
    ga = jax.random.normal(ks[0], (B, M, R), dtype)
    gb = jax.random.normal(ks[1], (B, N, R), dtype)
    a = jax.random.normal(ks[2], (M, R), dtype)
    b = jax.random.normal(ks[3], (N, R), dtype)
    return ga, gb, a, b


def _lift(ga, gb, a, b):
    f = L.LoraFactors(a, b)
    c = L.gram_cache(f)
    return jax.vmap(L.tangent_lift, in_axes=(None, 0, None))(f, L.LoraFactors(ga, gb), c)


def _privatize(ga, gb, a, b, *, clip_norm, noise_multiplier):
    f = L.LoraFactors(a, b)
    tx = privacy.prism_privatize(
        clip_norm=clip_norm, noise_multiplier=noise_multiplier, denom=8.0, key=jax.random.key(0)
    )
    return tx.update(L.LoraFactors(ga, gb), tx.init(f), f)[0]


def _retract(da, db, a, b, *, eta):
    return L.retract(L.LoraFactors(a, b), L.LoraFactors(da, db), eta=eta)


def _retract_args(key, dtype):
    ga, gb, a, b = _args(key, dtype)
    return ga[0], gb[0], a, b


def _bad_shape(key):
    ga, gb, a, b = _args(key, jnp.float32)
    return (ga, gb[..., :1], a, b[:, :1]), {}


def _bad_nan(key):
    ga, gb, a, b = _args(key, jnp.float32)
    return (ga.at[0, 0, 0].set(jnp.nan), gb, a, b), {}


CASES = [
    Case(
        "privacy.tangent_lift",
        _lift,
        _args,
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),
        rtol=1e-4,
        grad_rtol=1e-4,
        grad_atol=1e-4,
    ),
    Case(
        "privacy.prism_privatize",
        _privatize,
        _args,
        hparams={"clip_norm": (1.0, 2.0), "noise_multiplier": (0.5, 1.0)},
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),
        rtol=1e-4,
        grad_rtol=1e-3,
        grad_atol=1e-3,
        grad_modes=("rev",),
        slow_checks=("grads",),  # make test: tangent_lift's check_grads
        bad=(
            Bad("mismatched factor shapes", _bad_shape, TypeError),
            Bad("non-finite gradients", _bad_nan, Exception, "finite"),
        ),
    ),
    Case(
        "privacy.retract",
        _retract,
        _retract_args,
        hparams={"eta": (0.1, 0.3)},
        grad_modes=(),
        shard_argnums=(),
        rtol=1e-4,
    ),
]
