"""Conformance cases of FeatJND (jaxkit.vision.featjnd); registered by tests/vision/cases.py."""

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxkit.nn import SmallCNN
from jaxkit.vision import featjnd as J
from tests.conformance import Bad, Case, built_once

_SHAPE = (2, 4, 4)  # one feature map [C, H, W]
_KEY = jax.random.key(11)


# built on first use, outside every check's trace (see tests/vision/cases.py)
@built_once
def _modules():
    base = J.FeatJNDEstimator(2, hidden=4, key=jax.random.key(1))
    # the last layer is zero at init (a constant map): give it weights
    w3 = 0.3 * jax.random.normal(jax.random.key(2), base.w3.shape)
    est = eqx.tree_at(lambda e: e.w3, base, w3)
    head = SmallCNN(2, 3, channels=(4,), activation="tanh", key=jax.random.key(3))
    return est, head


def _features(key, dtype):
    _modules()
    return (jax.random.normal(key, (8, *_SHAPE), jnp.float32).astype(dtype),)


def _map(key, dtype):
    (f,) = _features(key, dtype)
    return (jnp.abs(f) + jnp.asarray(0.1, dtype),)


def _loss(f, **kw):
    est, head = _modules()
    return J.featjnd_loss(est, head, f, key=_KEY, **kw)


def _tolerance(f):
    est, _ = _modules()
    return J.tolerance_map(est, f)


def _perturb(s, **kw):
    return J.jnd_perturbation(s, key=_KEY, **kw)


def _matched(d):
    return J.matched_gaussian(d, key=_KEY)


def _steps(s, **kw):
    return J.token_steps(s, key=_KEY, **kw)


def _quant_args(key, dtype):
    (f,) = _features(key, dtype)
    steps = J.token_steps(jnp.abs(f) + jnp.asarray(0.1, dtype), budget_rms=0.5)
    return f, steps


def _curve_args(key, dtype):
    (f,) = _features(key, dtype)
    return f, jnp.abs(f) + jnp.asarray(0.1, dtype)


def _curve(f, s):
    _, head = _modules()
    y = jnp.arange(f.shape[0]) % 3
    alphas = jnp.asarray([0.5, 1.0, 4.0], f.dtype)
    return J.matched_strength_curve(head, f, y, s, alphas, key=_KEY)


def _bad(make_args, edit):
    return lambda key: edit(*make_args(key, jnp.float32))


_NOT_DEFAULT = ("grads", "vmap", "dtypes", "traced_once", "sharding", "eager_cache", "jit")

CASES = [
    Case(
        "vision.featjnd_loss",
        _loss,
        _features,
        hparams={"eps": (0.02, 0.05), "lam_t": (1.0, 2.0)},
        static={"n_noise": 2},
        grad_modes=("rev",),
        grad_eps=1e-6,  # the estimator's ReLUs: keep the differences away from their kinks
        bad=(
            Bad("f rank", _bad(_features, lambda f: ((f[0, 0, 0],), {})), TypeError, "`f`"),
            Bad("eps <= 0", _bad(_features, lambda f: ((f,), {"eps": 0.0})), ValueError, "`eps`"),
            Bad("eps NaN", _bad(_features, lambda f: ((f,), {"eps": jnp.nan})), ValueError),
            Bad("n_noise 0", _bad(_features, lambda f: ((f,), {"n_noise": 0})), ValueError),
            Bad("magnitude", _bad(_features, lambda f: ((f,), {"magnitude": "max"})), ValueError),
            Bad("f NaN", _bad(_features, lambda f: ((f.at[0].set(jnp.nan),), {})), ValueError),
        ),
    ),
    Case(
        "vision.featjnd.tolerance_map",
        _tolerance,
        _features,
        grad_modes=("rev",),
        dtypes=(jnp.float32,),  # bf16 through the estimator: the featjnd_loss case
        slow_checks=_NOT_DEFAULT,
        bad=(Bad("f channels", _bad(_features, lambda f: ((f[:, :1],), {})), TypeError, "`f`"),),
    ),
    Case(
        "vision.featjnd.jnd_perturbation",
        _perturb,
        _map,
        hparams={"alpha": (1.0, 2.0)},
        grad_modes=("rev",),
        slow_checks=_NOT_DEFAULT,
        bad=(
            Bad("s < 0", _bad(_map, lambda s: ((-s,), {})), ValueError, "`s`"),
            Bad("alpha < 0", _bad(_map, lambda s: ((s,), {"alpha": -1.0})), ValueError, "`alpha`"),
            Bad("s rank", _bad(_map, lambda s: ((s[0, 0, 0],), {})), TypeError, "`s`"),
        ),
    ),
    Case(
        "vision.featjnd.matched_gaussian",
        _matched,
        _map,
        grad_modes=("rev",),
        slow_checks=_NOT_DEFAULT,
        bad=(Bad("delta int", lambda k: ((jnp.ones((8, 3), jnp.int32),), {}), TypeError),),
    ),
    Case(
        "vision.featjnd.token_steps/featjnd",
        _steps,
        _map,
        hparams={"budget_rms": (0.5, 2.0)},
        static={"mode": "permute"},
        slow_checks=_NOT_DEFAULT,
        bad=(
            Bad("budget 0", _bad(_map, lambda s: ((s,), {"budget_rms": 0.0})), ValueError),
            Bad("mode", _bad(_map, lambda s: ((s,), {"mode": "random"})), ValueError, "`mode`"),
            Bad("axes", _bad(_map, lambda s: ((s,), {"token_axes": (0, 2)})), ValueError),
            Bad("s zero", _bad(_map, lambda s: ((0 * s,), {})), ValueError, "`s`"),
        ),
    ),
    Case(
        "vision.featjnd.quantize",
        J.quantize,
        _quant_args,
        static={"ste": True},
        grad_modes=(),  # piecewise constant (STE's identity gradient is tested directly)
        slow_checks=_NOT_DEFAULT,
        bad=(
            Bad("steps <= 0", _bad(_quant_args, lambda f, d: ((f, 0 * d), {})), ValueError),
            Bad("steps shape", _bad(_quant_args, lambda f, d: ((f, d[:, :, :2]), {})), TypeError),
        ),
    ),
    Case(
        "vision.featjnd.matched_strength_curve",
        _curve,
        _curve_args,
        grad_modes=(),  # accuracies: piecewise constant
        vmap=False,  # a batch metric
        slow_checks=_NOT_DEFAULT,
        bad=(
            Bad("s < 0", _bad(_curve_args, lambda f, s: ((f, -s), {})), ValueError, "`s`"),
            Bad("s shape", _bad(_curve_args, lambda f, s: ((f, s[:, :1]), {})), TypeError, "`s`"),
        ),
    ),
]
