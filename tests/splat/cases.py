"""Conformance cases for jaxkit.splat (see tests/conformance.py)."""

import jax.numpy as jnp

from jaxkit import splat
from tests.conformance import Bad, Case
from tests.splat._scenes import HW, camera, scene


def _args(key, dtype):
    return scene(key, 4, dtype), camera(dtype)


def _dense(g, cam, *, near):
    return splat.render(g, cam, hw=HW, near=near, background=0.25)


def _tiled(g, cam, *, near):
    return splat.render(g, cam, hw=HW, near=near, method="tiled", tile=4, capacity=4)


def _not_psd(key):
    g, cam = _args(key, jnp.float32)
    return (g._replace(covariances=g.covariances.at[0, 0, 0].set(-1.0)), cam), {}


def _bad_rank(key):
    g, cam = _args(key, jnp.float32)
    return (g._replace(means=g.means[None]), cam), {}


def _bad_near(key):
    return _args(key, jnp.float32), {"near": -1.0}


def _bad_camera(key):
    g, cam = _args(key, jnp.float32)
    return (g, cam._replace(rotation=cam.rotation[0])), {}


_BAD = (
    Bad("non-PSD covariance", _not_psd, ValueError, "covariances"),
    Bad("means of rank 3", _bad_rank, TypeError, "gaussians.means"),
    Bad("near <= 0", _bad_near, ValueError, "near"),
    Bad("rotation of rank 1", _bad_camera, TypeError, "camera.rotation"),
)

CASES = [
    Case(
        "splat.render/dense",
        _dense,
        _args,
        hparams={"near": (0.2, 0.5)},
        grad_argnums=(0, 1),
        dtypes=(jnp.float32,),
        shard_argnums=(),
        bad=_BAD,
        rtol=1e-4,
        grad_rtol=1e-4,
        grad_atol=1e-5,
    ),
    Case(
        "splat.render/tiled",
        _tiled,
        _args,
        hparams={"near": (0.2, 0.5)},
        grad_argnums=(0,),
        dtypes=(jnp.float32,),
        shard_argnums=(),
        bad=_BAD[:2],
        rtol=1e-4,
        grad_rtol=1e-4,
        grad_atol=1e-5,
        slow_checks=("grads", "vmap", "eval_shape", "traced_once", "bad_inputs", "jit"),
    ),
]
