"""Conformance cases of jaxkit.vision.irdet (registered through tests/vision/cases.py)."""

import jax
import jax.numpy as jnp

from jaxkit.vision import irdet
from tests.conformance import Bad, Case

_HW = (10, 10)
_SLOW_MOST = ("grads", "vmap", "dtypes", "traced_once", "sharding", "eval_shape")


def _img(key, dtype):
    return (0.4 + 0.2 * jax.random.uniform(key, (8, *_HW), jnp.float32)).astype(dtype)


def _fp_args(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    u0 = jax.random.uniform(k1, (8, *_HW), jnp.float32)
    u0 = u0 / u0.sum(axis=(1, 2), keepdims=True)
    d = 0.2 + 0.8 * jax.random.uniform(k2, (8, *_HW), jnp.float32)
    v = 0.3 * jax.random.normal(k3, (8, 2, *_HW), jnp.float32)
    return tuple(a.astype(dtype) for a in (u0, d, v))


def _bad_fp(make):
    return lambda key: make(*_fp_args(key, jnp.float32))


def _points(key, dtype):
    k1, k2 = jax.random.split(key)
    img = _img(k1, dtype)
    pts = jax.random.randint(k2, (8, 2, 2), 2, 8).astype(dtype)
    return img, pts


def _pseudo_score(image, points, **kw):
    valid = jnp.ones(points.shape[:-1], bool)
    return irdet.pseudo_mask(image, points, valid, **kw).score


def _pseudo_bad(make):
    return lambda key: make(*_points(key, jnp.float32))


def _particles(d, points, *, time):
    return irdet.particle_diffuse(
        d, None, points, key=jax.random.key(5), time=time, n_particles=64, steps=4
    )


def _particle_args(key, dtype):
    k1, k2 = jax.random.split(key)
    d = 0.2 + 0.5 * jax.random.uniform(k1, (8, *_HW), jnp.float32)
    return d.astype(dtype), jax.random.randint(k2, (8, 2, 2), 0, 10).astype(dtype)


def _disk(points, *, radius):
    return irdet.disk_mask(points, jnp.ones(points.shape[:-1], bool), hw=_HW, radius=radius)


CASES = [
    Case(
        "vision.irdet.fokker_planck",
        irdet.fokker_planck,
        _fp_args,
        hparams={"time": (0.5, 0.8)},
        static={"substeps": 8},
        shard_argnums=(0, 1, 2),
        grad_argnums=(0, 1, 2),
        grad_modes=("rev",),
        bad=(
            Bad(
                "unstable",
                _bad_fp(lambda u, d, v: ((u, 4 * d, v), {"time": 2.0, "substeps": 1})),
                ValueError,
                "`substeps`",
            ),
            Bad("d shape", _bad_fp(lambda u, d, v: ((u, d[:, :3], v), {})), TypeError, "`d`"),
            Bad("time < 0", _bad_fp(lambda u, d, v: ((u, d, v), {"time": -1.0})), ValueError),
            Bad("time NaN", _bad_fp(lambda u, d, v: ((u, d, v), {"time": jnp.nan})), ValueError),
            Bad(
                "velocity",
                _bad_fp(lambda u, d, v: ((u, d, v[:, :1]), {})),
                TypeError,
                "`velocity`",
            ),
        ),
    ),
    Case(
        "vision.irdet.diffusivity",
        irdet.diffusivity,
        lambda key, dt: (_img(key, dt),),
        hparams={"d0": (3.2, 2.0), "beta": (6.0, 4.0), "alpha": (0.6, 0.4)},
        grad_modes=("rev",),
        slow_checks=_SLOW_MOST,
        bad=(
            Bad("rank 1", lambda key: ((jnp.ones(5),), {}), TypeError, "`image`"),
            Bad("d0 <= 0", lambda key: ((jnp.ones((4, 4)),), {"d0": 0.0}), ValueError, "`d0`"),
            Bad("alpha", lambda key: ((jnp.ones((4, 4)),), {"alpha": 2.0}), ValueError, "`alpha`"),
        ),
    ),
    Case(
        "vision.irdet.pseudo_mask/score",
        _pseudo_score,
        _points,
        hparams={"time": (0.5, 0.3), "weight": (0.7, 0.5), "d0": (3.2, 2.0)},
        static={"box": 5, "substeps": 12},
        shard_argnums=(0, 1),
        grad_modes=("rev",),
        grad_argnums=(0,),
        slow_checks=_SLOW_MOST,
        bad=(
            Bad("box even", _pseudo_bad(lambda i, p: ((i, p), {"box": 4})), ValueError, "`box`"),
            Bad(
                "points shape",
                _pseudo_bad(lambda i, p: ((i, p[..., :1]), {})),
                TypeError,
                "`points`",
            ),
            Bad(
                "weight > 1",
                _pseudo_bad(lambda i, p: ((i, p), {"weight": 1.5})),
                ValueError,
                "`weight`",
            ),
        ),
    ),
    Case(
        "vision.irdet.particle_diffuse",
        _particles,
        _particle_args,
        hparams={"time": (0.5, 1.0)},
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(0, 1),
        slow_checks=("vmap", "traced_once", "eval_shape"),
        bad=(
            Bad(
                "d rank 1",
                lambda key: ((jnp.ones(4), jnp.zeros((1, 2))), {}),
                TypeError,
                "`d`",
            ),
            Bad(
                "points shape",
                lambda key: ((jnp.ones((4, 4)), jnp.zeros((1, 3))), {}),
                TypeError,
                "`points`",
            ),
            Bad(
                "time < 0",
                lambda key: ((jnp.ones((4, 4)), jnp.zeros((1, 2))), {"time": -1.0}),
                ValueError,
                "`time`",
            ),
        ),
    ),
    Case(
        "vision.irdet.disk_mask",
        _disk,
        lambda key, dt: (jax.random.randint(key, (8, 3, 2), 0, 10).astype(dt),),
        hparams={"radius": (2.0, 1.0)},
        grad_modes=(),
        slow_checks=_SLOW_MOST,
        bad=(
            Bad(
                "radius < 0",
                lambda key: ((jnp.zeros((2, 2)),), {"radius": -1.0}),
                ValueError,
                "`radius`",
            ),
        ),
    ),
    Case(
        "vision.irdet.point_priors",
        irdet.point_priors,
        _points,
        static={"box": 5},
        grad_modes=(),
        shard_argnums=(0, 1),
        slow_checks=_SLOW_MOST,
        bad=(Bad("box even", _pseudo_bad(lambda i, p: ((i, p), {"box": 6})), ValueError, "`box`"),),
    ),
]
