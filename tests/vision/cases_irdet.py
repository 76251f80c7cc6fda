"""Conformance cases of jaxkit.vision.irdet (registered through tests/vision/cases.py)."""

import jax
import jax.numpy as jnp

from jaxkit.vision import irdet
from tests.conformance import Bad, Case, built_once

_HW = (10, 10)
# fokker_planck and surrogate_refine run every check by default; the others keep their
# bad inputs in the default run and the rest in the slow tier (test budget)
_SLOW_MOST = (
    "grads",
    "vmap",
    "dtypes",
    "traced_once",
    "sharding",
    "eval_shape",
    "jit",
    "eager_cache",
)


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
    valid = points[..., 0] >= 0  # all True, sharded like the points
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


def _prob(key, dtype):
    return jax.nn.sigmoid(2 * jax.random.normal(key, (8, *_HW), jnp.float32)).astype(dtype)


def _pair(key, dtype):
    k1, k2 = jax.random.split(key)
    y = (jax.random.uniform(k2, (8, *_HW)) > 0.7).astype(dtype)
    return (2 * jax.random.normal(k1, (8, *_HW), jnp.float32)).astype(dtype), y


def _features(logits, pseudo):
    sur = jax.nn.sigmoid(logits)
    return irdet.weight_features(logits, pseudo, sur, jnp.mean(pseudo, axis=(1, 2)))


@built_once
def _weighter():
    return irdet.make_weighter(key=jax.random.key(7))


def _weights(features, *, temperature):
    return irdet.sample_weights(_weighter(), features, temperature=temperature)


def _residual(pt, yt):
    return irdet.residual_scores(pt, yt, pt[:3], yt[:3])


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
            Bad(
                "time NaN",
                _bad_fp(lambda u, d, v: ((u, d, v), {"time": jnp.nan})),
                ValueError,
                "`time`",  # named (was the CFL check's `substeps` message)
            ),
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
        grad_eps=1e-6,
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
        # the score is piecewise smooth only (max over targets, in-box min-max, Otsu):
        # not meant for gradients (surrogate_refine is the
        # differentiable module), so no finite-difference check
        grad_modes=(),
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
            Bad(
                "value_range lo >= hi",
                _pseudo_bad(lambda i, p: ((i, p), {"value_range": (1.0, 1.0)})),
                ValueError,
                "`value_range`",
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
        slow_checks=_SLOW_MOST,
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
            Bad(
                "NaN point",
                lambda key: ((jnp.full((2, 2), jnp.nan),), {"radius": 1.0}),
                ValueError,
                "`points`",
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
    Case(
        "vision.irdet.surrogate_refine",
        irdet.surrogate_refine,
        lambda key, dt: (_prob(key, dt),),
        hparams={"d0": (3.2, 2.0), "beta": (6.0, 5.0), "rho": (0.84, 0.8), "alpha": (0.6, 0.5)},
        grad_modes=("rev",),
        grad_eps=1e-6,  # clip and top-k kinks: small steps so differences do not cross them
        slow_checks=("grads", "vmap", "traced_once", "dtypes", "sharding"),
        bad=(
            Bad(
                "rho > 1", lambda key: ((jnp.ones((4, 4)) / 2,), {"rho": 2.0}), ValueError, "`rho`"
            ),
            Bad("rank 1", lambda key: ((jnp.ones(4),), {}), TypeError, "`prob`"),
        ),
    ),
    Case(
        "vision.irdet.soft_iou_loss",
        irdet.soft_iou_loss,
        _pair,
        grad_modes=("fwd", "rev"),
        slow_checks=_SLOW_MOST,
        bad=(
            Bad(
                "target shape",
                lambda key: ((jnp.ones((2, 4, 4)), jnp.ones((2, 4))), {}),
                TypeError,
                "`target`",
            ),
            Bad(
                "target above 1",
                lambda key: ((jnp.ones((2, 4, 4)), jnp.full((2, 4, 4), 2.0)), {}),
                ValueError,
                "`target`",
            ),
        ),
    ),
    Case(
        "vision.irdet.weight_features",
        _features,
        _pair,
        grad_modes=("rev",),
        grad_eps=1e-6,  # top-k, sign and band kinks: small steps
        grad_argnums=(0,),
        shard_argnums=(0, 1),
        slow_checks=_SLOW_MOST,
    ),
    Case(
        "vision.irdet.sample_weights",
        _weights,
        lambda key, dt: (jax.random.normal(key, (8, 15), jnp.float32).astype(dt),),
        hparams={"temperature": (0.25, 0.5)},
        grad_modes=("rev",),
        slow_checks=_SLOW_MOST,
        bad=(
            Bad(
                "temperature 0",
                lambda key: ((jnp.ones((4, 15)),), {"temperature": 0.0}),
                ValueError,
                "`temperature`",
            ),
            Bad("rank 1", lambda key: ((jnp.ones(15),), {}), TypeError, "`features`"),
        ),
    ),
    Case(
        "vision.irdet.residual_scores",
        _residual,
        _pair,
        grad_modes=("rev",),
        shard_argnums=(),
        slow_checks=_SLOW_MOST,
    ),
]
