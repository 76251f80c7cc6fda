"""Conformance cases for jaxkit.splat (see tests/conformance.py)."""

import jax
import jax.numpy as jnp

from jaxkit import splat
from jaxkit.splat import adlift
from tests.conformance import Bad, Case
from tests.splat._scenes import HW, camera, grey_loss, scene


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


def _zero_focal(key):
    g, cam = _args(key, jnp.float32)
    return (g, cam._replace(focal=cam.focal * 0)), {}


_BAD = (
    Bad("non-PSD covariance", _not_psd, ValueError, "covariances"),
    Bad("means of rank 3", _bad_rank, TypeError, "gaussians.means"),
    Bad("near <= 0", _bad_near, ValueError, "near"),
    Bad("rotation of rank 1", _bad_camera, TypeError, "camera.rotation"),
    Bad("focal 0", _zero_focal, ValueError, "focal"),
)

CASES = [
    Case(
        "splat.render/dense",
        _dense,
        _args,
        hparams={"near": (0.2, 0.5)},
        grad_argnums=(0, 1),
        grad_modes=("rev",),
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


def _pgd_args(key, dtype):
    ks = jax.random.split(key, 3)
    x_raw = jax.random.uniform(ks[0], (8, 4, 4, 3), dtype)
    x = jnp.clip(x_raw + 0.05 * jax.random.normal(ks[1], x_raw.shape, dtype), 0, 1)
    return x, x_raw, jax.random.normal(ks[2], x_raw.shape, dtype)


def _pgd(x, x_raw, g, *, eta, step):
    return adlift.pgd_image_step(x, x_raw, g, eta=eta, step=step)


def _bad_pgd_shape(key):
    x, x_raw, g = _pgd_args(key, jnp.float32)
    return (x, x_raw, g[..., :2]), {}


AD_HW = (6, 6)


def _lift_args(key, dtype):
    raw = scene(key, 5, dtype)
    cams = splat.orbit_cameras(2, radius=3.0, height=0.5, focal=7.0, hw=AD_HW)
    cams = jax.tree.map(lambda a: a.astype(dtype), cams)
    theta = adlift.init_safeguards(raw, 3, key=jax.random.key(7), opacity_logit=-1.0)
    params = (jax.random.normal(jax.random.key(8), (3, 3), dtype), jnp.asarray(1.0, dtype))
    return raw, theta, cams, params


def _lift(raw, theta, cams, params, *, eta):
    res = adlift.lifted_pgd(raw, theta, cams, grey_loss, params, eta=eta, hw=AD_HW, n_outer=1,
                            n_fit=2)  # fmt: skip
    return res.safeguards


def _bad_lift_eta(key):
    return _lift_args(key, jnp.float32), {"eta": 0.0}


def _bad_lift_cams(key):
    raw, theta, cams, p = _lift_args(key, jnp.float32)
    return (raw, theta, jax.tree.map(lambda a: a[0], cams), p), {}


CASES += [
    Case(
        "splat.pgd_image_step",
        _pgd,
        _pgd_args,
        hparams={"eta": (0.03, 0.06), "step": (0.01, 0.02)},
        grad_modes=(),  # a projection: piecewise linear, kinks at the bounds
        shard_argnums=(0, 1, 2),
        bad=(Bad("mismatched grad shape", _bad_pgd_shape, TypeError, "grad"),),
    ),
    Case(
        "splat.lifted_pgd",
        _lift,
        _lift_args,
        hparams={"eta": (0.03, 0.06)},
        grad_modes=(),  # a training loop, not differentiated
        dtypes=(jnp.float32,),
        vmap=False,
        shard_argnums=(),
        rtol=1e-4,
        bad=(
            Bad("eta = 0", _bad_lift_eta, ValueError, "eta"),
            Bad("unbatched cameras", _bad_lift_cams, TypeError, "cameras.rotation"),
        ),
        slow_checks=("jit", "eval_shape", "traced_once", "dtypes"),
    ),
]
