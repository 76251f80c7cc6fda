"""Conformance cases for jaxkit.robust (see tests/conformance.py).

Host-side `fit_conic`/`build_conic` and the numpyro `posterior_predictive` are tested
directly in test_solve.py / test_references.py, not here. The L-BFGS `fit` compiles a
large program (seconds), so all its checks but the eager cache are in the slow tier.
"""

import jax
import jax.numpy as jnp

from jaxkit import robust as R
from tests.conformance import Bad, Case

D = 3


def _dirs(key, dtype):
    k1, k2, k3 = jax.random.split(key, 3)
    a = jax.random.normal(k1, (8, D), dtype)
    c = jax.random.normal(k2, (D,), dtype)
    m = jax.random.normal(k3, (D, D), dtype)
    chol = jnp.tril(m) * 0.3 + jnp.eye(D, dtype=dtype)
    return a, c, chol


def _support_ellipsoid(a, c, chol, *, radius):
    return R.support(R.Ellipsoid(center=c, chol=chol, radius=jnp.asarray(radius, c.dtype)), a)


def _support_box(a, c, chol, *, scale):
    return R.support(R.Box(center=c, half=jnp.abs(jnp.diagonal(chol)) * scale), a)


def _support_hull(a, c, chol):
    pts = jnp.concatenate([chol, c[None]], axis=0)
    return R.support(R.Hull(points=pts, mask=jnp.arange(D + 1) != 1), a)


def _contains(a, c, chol, *, radius):
    return R.contains(R.Ellipsoid(center=c, chol=chol, radius=jnp.asarray(radius, c.dtype)), a)


def _samples(key, dtype):
    return (jax.random.normal(key, (8, D), dtype),)


def _samples1(key, dtype):
    return (jax.random.normal(key, (8,), dtype),)


def _interval(xi, *, alpha, method="equal_tail"):
    return R.calibrate_interval(xi, alpha=alpha, method=method)


def _interval_shortest(xi, *, alpha):
    return R.calibrate_interval(xi, alpha=alpha, method="shortest")


def _box(xi, *, alpha):
    return R.calibrate_box(xi, alpha=alpha)


def _ellipsoid(xi, *, alpha):
    return R.calibrate_ellipsoid(xi, alpha=alpha, key=jax.random.key(1))


def _hull(xi, *, alpha):
    return R.calibrate_hull(xi, alpha=alpha)


def _values(key, dtype):
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, (8, 5), dtype), jax.random.normal(k2, (8,), dtype) + 3


def _upper(v, s, *, eps):
    return R.upper_expectation(v, s, eps)


def _tail(a, lip, *, eps, eta):
    return R.tail_bound(jnp.abs(a), jnp.abs(lip), eps, eta, jnp.ones_like(lip))


def _tail_args(key, dtype):
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, (8,), dtype), jax.random.normal(k2, (8,), dtype)


def _reg(key, dtype):
    ks = jax.random.split(key, 3)
    z = jax.random.normal(ks[0], (8, 2), dtype)
    y = z @ jnp.asarray([1.0, -1.0], dtype) + 0.1 * jax.random.normal(ks[1], (8,), dtype)
    w = jax.random.normal(ks[2], (2,), dtype)
    return z, y, w


_BULK = R.Ellipsoid(
    center=jnp.zeros(3), chol=jnp.eye(3) + 0.1 * jnp.tril(jnp.ones((3, 3))), radius=jnp.asarray(2.0)
)


def _objective(z, y, w, *, eps):
    bulk = jax.tree.map(lambda t: t.astype(z.dtype), _BULK)
    p = R.LinearParams(w, jnp.zeros((), z.dtype))
    return R.credal_objective(R.lad(), p, (z, y), bulk, eps)


def _news_args(key, dtype):
    return (20 + 10 * jnp.abs(jax.random.normal(key, (8,), dtype)),)


def _newsvendor(xi, *, eps):
    bulk = R.Interval(lo=jnp.asarray(20.0, xi.dtype), hi=jnp.asarray(60.0, xi.dtype))
    return R.newsvendor_closed_form(xi, eps, bulk, h=1.0, b=4.0)


def _fit(z, y, w, *, eps):
    bulk = jax.tree.map(lambda t: t.astype(z.dtype), _BULK)
    p0 = R.LinearParams(w, jnp.zeros((), z.dtype))
    return R.fit(R.lad(), (z, y), bulk, eps, p0, steps=5, schedule=(1e-1, 1e-3))


def _bad_alpha(key):
    return (_samples1(key, jnp.float32)[0],), {"alpha": 1.5}


def _bad_alpha_nan(key):
    return (_samples1(key, jnp.float32)[0],), {"alpha": jnp.nan}


def _bad_eps(key):
    v, s = _values(key, jnp.float32)
    return (v, s), {"eps": -0.1}


def _bad_few(key):
    return (_samples(key, jnp.float32)[0],), {"alpha": 0.05}


def _bad_method(key):
    return (_samples1(key, jnp.float32)[0],), {"method": "widest"}


_SLOW = ("vmap", "dtypes", "traced_once", "grads", "jit", "eval_shape", "sharding")
_GRADS = ("grads",)

CASES = [
    Case(
        "robust.support/ellipsoid",
        _support_ellipsoid,
        _dirs,
        hparams={"radius": (1.0, 2.0)},
        converted=("radius",),  # jnp.asarray(radius, c.dtype) in the wrapper
        grad_argnums=(0, 1, 2),
        rtol=1e-5,
        slow_checks=(),
        bad=(
            Bad(
                "negative radius (a traced bulk field)",
                lambda key: (_dirs(key, jnp.float32), {"radius": -1.0}),
                ValueError,
                "radius",
            ),
        ),
    ),
    Case(
        "robust.support/box",
        _support_box,
        _dirs,
        hparams={"scale": (1.0, 2.0)},
        nan_names={"scale": "half"},  # scales the box's half-widths
        converted=("scale",),
        grad_argnums=(1, 2),
        slow_checks=_SLOW,
    ),
    Case("robust.support/hull", _support_hull, _dirs, grad_argnums=(1, 2), slow_checks=_SLOW),
    Case(
        "robust.contains",
        _contains,
        _dirs,
        hparams={"radius": (1.0, 2.0)},
        converted=("radius",),  # jnp.asarray(radius, c.dtype) in the wrapper
        grad_modes=(),
        dtypes=(jnp.float32,),
        slow_checks=_SLOW,
    ),
    Case(
        "robust.calibrate_interval",
        _interval,
        _samples1,
        hparams={"alpha": (0.2, 0.4)},
        grad_modes=("rev",),
        shard_argnums=(),
        bad=(
            Bad("alpha above 1", _bad_alpha, ValueError, "`alpha`"),
            Bad("alpha NaN", _bad_alpha_nan, ValueError, "`alpha`"),
            Bad("unknown method", _bad_method, ValueError, "`method`"),
        ),
        slow_checks=_GRADS,
    ),
    Case(
        "robust.calibrate_interval/shortest",
        _interval_shortest,
        _samples1,
        hparams={"alpha": (0.2, 0.4)},
        grad_modes=(),
        shard_argnums=(),
        slow_checks=_SLOW,
    ),
    Case(
        "robust.calibrate_box",
        _box,
        _samples,
        hparams={"alpha": (0.2, 0.4)},
        grad_modes=(),
        shard_argnums=(),
        slow_checks=_SLOW,
    ),
    Case(
        "robust.calibrate_ellipsoid",
        _ellipsoid,
        _samples,
        hparams={"alpha": (0.3, 0.4)},
        grad_modes=(),
        shard_argnums=(),
        bad=(Bad("too few calibration samples", _bad_few, ValueError, "`alpha`"),),
        slow_checks=_SLOW,
    ),
    Case(
        "robust.calibrate_hull",
        _hull,
        _samples,
        hparams={"alpha": (0.2, 0.4)},
        grad_modes=(),
        slow_checks=_SLOW,
        shard_argnums=(),  # weighted quantiles sort over the sample axis
    ),
    Case(
        "robust.upper_expectation",
        _upper,
        _values,
        hparams={"eps": (0.1, 0.3)},
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),  # one row of values and one sup_value per batch row
        bad=(
            Bad("eps below 0", _bad_eps, ValueError, "`eps`"),
            Bad(
                "NaN sup_value",
                lambda key: ((_values(key, jnp.float32)[0], jnp.full(8, jnp.nan)), {"eps": 0.1}),
                ValueError,
                "sup_value",
            ),
        ),
        slow_checks=_GRADS,
    ),
    Case(
        "robust.tail_bound",
        _tail,
        _tail_args,
        hparams={"eps": (0.1, 0.3), "eta": (0.2, 0.5)},
        grad_argnums=(0, 1),
        shard_argnums=(0, 1),  # a and lip: one entry per batch row
        slow_checks=_SLOW,
    ),
    Case(
        "robust.credal_objective/lad",
        _objective,
        _reg,
        hparams={"eps": (0.1, 0.3)},
        grad_argnums=(2,),
        shard_argnums=(0, 1),
        grad_rtol=1e-4,
        grad_atol=1e-4,
        slow_checks=("vmap", "dtypes", "traced_once", "grads", "eval_shape"),
    ),
    Case(
        "robust.newsvendor_closed_form",
        _newsvendor,
        _news_args,
        hparams={"eps": (0.1, 0.3)},
        grad_modes=("rev",),
        shard_argnums=(),
        slow_checks=_GRADS,
    ),
    Case(
        "robust.fit/lad",
        _fit,
        _reg,
        hparams={"eps": (0.1, 0.3)},
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(),
        slow_checks=("vmap", "traced_once", "jit", "eval_shape", "dtypes", "sharding"),
        vmap=False,  # vmap of the scanned L-BFGS costs ~40 s of compile; solves are sequential
    ),
]
