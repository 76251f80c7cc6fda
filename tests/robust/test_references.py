"""Reference distributions: empirical, parametric draws, numpyro posterior predictive."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from jaxkit import robust as R


def test_empirical_and_parametric():
    ref = R.empirical(np.arange(4.0, dtype=np.float32))
    np.testing.assert_allclose(ref.w, 0.25)
    par = R.parametric_draws(dist.Normal(3.0, 2.0), key=jax.random.key(0), n=4000)
    assert par.xi.shape == (4000,)
    assert float(jnp.mean(par.xi)) == pytest.approx(3.0, abs=0.15)
    # the bulk of the draws estimates the law's central interval
    iv = R.calibrate_interval(par.xi, alpha=0.1, weights=par.w)
    assert float(iv.lo) == pytest.approx(3.0 - 1.645 * 2, abs=0.25)
    assert float(iv.hi) == pytest.approx(3.0 + 1.645 * 2, abs=0.25)
    with pytest.raises(TypeError, match="`dist`"):
        R.parametric_draws(object(), key=jax.random.key(0), n=3)
    with pytest.raises(ValueError, match="`n`"):
        R.parametric_draws(dist.Normal(), key=jax.random.key(0), n=0)


def _model(obs=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("n", 50 if obs is None else obs.shape[0]):
        numpyro.sample("obs", dist.Normal(mu, 1.0), obs=obs)


@pytest.mark.slow
def test_posterior_predictive_normal_mean():
    """Conjugate check: predictive of N(mu, 1) with a flat-ish prior is ~N(ybar, 1 + 1/n)."""
    y = 2.0 + np.random.default_rng(0).normal(size=50).astype(np.float32)
    ref = R.posterior_predictive(_model, key=jax.random.key(1), n=800, num_warmup=200, obs=y)
    assert ref.xi.shape == (800,)
    assert float(jnp.mean(ref.xi)) == pytest.approx(float(y.mean()), abs=0.15)
    assert float(jnp.std(ref.xi)) == pytest.approx(np.sqrt(1 + 1 / 50), abs=0.1)
