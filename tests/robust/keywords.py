"""Keyword-sweep recipes for robust (see tests/keywords.py)."""

import functools

import jax
import numpy as np

from jaxkit import robust as R

_rng = np.random.default_rng(0)
XI = _rng.normal(size=(40, 2)).astype(np.float32)  # samples (n, d)
XI1 = _rng.normal(size=(40,)).astype(np.float32)  # scalar samples
CELLS = np.arange(40, dtype=np.int32) % 2
DEMAND = (20 + 10 * np.abs(_rng.normal(size=(8,)))).astype(np.float32)
Z = _rng.normal(size=(8, 2)).astype(np.float32)
Y = (Z @ np.asarray([1.0, -1.0], np.float32)).astype(np.float32)
VALUES = _rng.normal(size=(8,)).astype(np.float32)
W8 = np.full((8,), 0.125, np.float32)  # sample weights
GROWTH = np.asarray([1.0, 2.0, 0.5], np.float32)


def _bulk():
    return R.Interval(lo=np.float32(20.0), hi=np.float32(60.0))


def _box():
    return R.Box(center=np.zeros(3, np.float32), half=np.ones(3, np.float32))


def _p0():
    return R.LinearParams(np.zeros(2, np.float32), np.zeros((), np.float32))


class _Normal:
    """A standard normal law with ``sample(key, shape)`` (what `parametric_draws` takes)."""

    def sample(self, key, shape):
        return jax.random.normal(key, shape)


def _model(obs=None):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("n", 4 if obs is None else obs.shape[0]):
        numpyro.sample("obs", dist.Normal(mu, 1.0), obs=obs)


RECIPES = {
    "jaxkit.robust.contains": lambda **kw: R.contains(R.ball(np.zeros(2), 1.0), XI, **kw),
    "jaxkit.robust.calibrate_ball": lambda **kw: R.calibrate_ball(
        XI, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.robust.calibrate_box": functools.partial(R.calibrate_box, XI),
    "jaxkit.robust.calibrate_cells": functools.partial(R.calibrate_cells, XI, CELLS, n_cells=2),
    "jaxkit.robust.calibrate_ellipsoid": lambda **kw: R.calibrate_ellipsoid(
        XI, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.robust.calibrate_hull": functools.partial(R.calibrate_hull, XI),
    "jaxkit.robust.calibrate_interval": functools.partial(R.calibrate_interval, XI1),
    "jaxkit.robust.build_conic": lambda **kw: R.build_conic(
        R.newsvendor(1.0, 4.0), DEMAND, _bulk(), **kw
    ),
    "jaxkit.robust.fit_conic": lambda **kw: R.fit_conic(
        R.newsvendor(1.0, 4.0), DEMAND, _bulk(), 0.2, **kw
    ),
    # a default passed explicitly: the array sweep reaches a function through a call that binds
    # an argument
    "jaxkit.robust.huber": lambda **kw: R.huber(**{"delta": 1.0, **kw}),
    "jaxkit.robust.newsvendor": lambda **kw: R.newsvendor(**{"h": 1.0, "b": 1.0, **kw}),
    "jaxkit.robust.credal_risk": lambda **kw: R.credal_risk(VALUES, np.float32(3.0), 0.1, **kw),
    "jaxkit.robust.ball": functools.partial(R.ball, np.zeros(2, np.float32), 1.0),
    "jaxkit.robust.support": lambda **kw: R.support(
        R.ball(np.zeros(2, np.float32), 1.0), XI[:3], **kw
    ),
    "jaxkit.robust.upper_expectation": functools.partial(
        R.upper_expectation, VALUES, np.float32(3.0), 0.1, weights=W8
    ),
    "jaxkit.robust.lower_expectation": functools.partial(
        R.lower_expectation, VALUES, np.float32(-3.0), 0.1, weights=W8
    ),
    "jaxkit.robust.huber_upper_expectation": functools.partial(
        R.huber_upper_expectation, VALUES, np.float32(3.0), 0.1, weights=W8
    ),
    "jaxkit.robust.tail_bound": functools.partial(R.tail_bound, GROWTH, GROWTH, 0.1, 0.5, GROWTH),
    "jaxkit.robust.empirical": functools.partial(R.empirical, XI),
    "jaxkit.robust.posterior_predictive": lambda **kw: R.posterior_predictive(
        _model,
        n=4,
        obs=XI1[:4],
        **{"key": jax.random.key(0), "num_warmup": 5, **kw},
    ),
    "jaxkit.robust.parametric_draws": lambda **kw: R.parametric_draws(
        _Normal(), **{"key": jax.random.key(0), "n": 4, **kw}
    ),
    "jaxkit.robust.credal_objective": lambda **kw: R.credal_objective(
        R.lad(), _p0(), (Z, Y), _box(), 0.1, **kw
    ),
    "jaxkit.robust.fit": lambda **kw: R.fit(
        R.lad(), (Z, Y), _box(), 0.1, _p0(), **{"steps": 2, "schedule": (0.1,), **kw}
    ),
    "jaxkit.robust.newsvendor_closed_form": lambda **kw: R.newsvendor_closed_form(
        DEMAND, 0.1, _bulk(), **kw
    ),
}

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.robust.contains:x": "points `[*batch, d]` (`[*batch]` for an Interval): any leading "
    "batch axes, a single point included",
    "jaxkit.robust.support:a": "directions `[*batch, d]` (`[*batch]` for an Interval): any "
    "leading batch axes",
    "jaxkit.robust.tail_bound:growth_a": "`[*batch]`: elementwise, broadcast over the inputs",
    "jaxkit.robust.tail_bound:growth_L": "`[*batch]`: elementwise, broadcast over the inputs",
    "jaxkit.robust.tail_bound:moment": "`[*batch]`: elementwise, broadcast over the inputs",
    "jaxkit.robust.empirical:xi": "`[n, ...]`: samples on axis 0, any sample shape",
    "jaxkit.robust.credal_risk:per_sample_loss": "`[*batch, n]`: leading batch axes, samples "
    "on the last",
}
