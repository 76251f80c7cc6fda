"""PC / TC estimators against closed forms and a float64 NumPy transcription (spec 2.4)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

from jaxkit import neuro

RUNTIME = (ValueError, eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


def _np_pc_minibatch(z, mu, ls, n_groups, n_total):
    """Loop-by-loop float64 transcription of the spec's minibatch estimator."""
    m, k = z.shape
    d = k // n_groups
    log_w = np.full(m, np.log((n_total - 1) / (m - 1)))
    vals = []
    for i in range(m):
        lw = log_w.copy()
        lw[i] = 0.0
        dens = np.array(
            [[norm.logpdf(z[i, c], mu[j, c], np.exp(ls[j, c])) for c in range(k)] for j in range(m)]
        )
        log_qz = logsumexp(dens.sum(1) + lw) - np.log(n_total)
        log_qg = [
            logsumexp(dens[:, g * d : (g + 1) * d].sum(1) + lw) - np.log(n_total)
            for g in range(n_groups)
        ]
        vals.append(log_qz - sum(log_qg))
    return float(np.mean(vals))


def _sample(seed, m=12, k=4):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(k, k))
    mu = rng.normal(size=(m, k)) @ mix
    ls = -0.5 + 0.3 * rng.normal(size=(m, k))
    z = mu + np.exp(ls) * rng.normal(size=(m, k))
    return z, mu, ls


@pytest.mark.parametrize("n_groups", [2, 4])
def test_minibatch_estimator_matches_numpy_f64(n_groups):
    z, mu, ls = _sample(0)
    want = _np_pc_minibatch(z, mu, ls, n_groups, n_total=500.0)
    got = neuro.partial_correlation(
        jnp.asarray(z, jnp.float32),
        jnp.asarray(mu, jnp.float32),
        jnp.asarray(ls, jnp.float32),
        n_groups=n_groups,
        n_total=500.0,
    )
    assert abs(float(got) - want) <= 1e-5 * max(1.0, abs(want))
    with jax.enable_x64(True):
        got64 = neuro.partial_correlation(z, mu, ls, n_groups=n_groups, n_total=500.0)
    assert abs(float(got64) - want) <= 1e-10 * max(1.0, abs(want))


def test_one_group_is_exactly_zero_and_full_tc_is_group_per_dim():
    z, mu, ls = (jnp.asarray(a, jnp.float32) for a in _sample(1))
    assert float(neuro.partial_correlation(z, mu, ls, n_groups=1, n_total=40.0)) == 0.0
    assert float(neuro.partial_correlation_eval(mu, ls, n_groups=1, key=jax.random.key(0))) == 0
    # G = K: the total correlation, against the transcription with one group per dimension
    want = _np_pc_minibatch(*_sample(1), n_groups=4, n_total=40.0)
    got = neuro.partial_correlation(z, mu, ls, n_groups=4, n_total=40.0)
    np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-5)


def test_full_batch_is_the_exact_mixture():
    """M = N_tot: all weights 1, ln q(z_i) = logsumexp_j ln q(z_i | x_j) - ln M."""
    z, mu, ls = (jnp.asarray(a, jnp.float32) for a in _sample(2, m=10))
    lp = np.asarray(neuro.pairwise_log_q(z, mu, ls, n_groups=2), np.float64)
    full = logsumexp(lp.sum(-1), axis=1) - np.log(10.0)  # the mixture on the host (scipy)
    marg = logsumexp(lp, axis=1) - np.log(10.0)
    want = np.mean(full - marg.sum(-1))
    got = neuro.partial_correlation(z, mu, ls, n_groups=2, n_total=10.0)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-6, atol=1e-6)


def test_pairwise_log_q_is_the_gaussian_log_density():
    z, mu, ls = _sample(3, m=5)
    got = np.asarray(neuro.pairwise_log_q(z, mu, ls, n_groups=2), np.float64)
    dens = norm.logpdf(z[:, None, :], mu[None], np.exp(ls)[None])
    np.testing.assert_allclose(got, dens.reshape(5, 5, 2, 2).sum(-1), rtol=1e-5, atol=1e-4)


def test_invariant_to_group_and_within_group_permutations():
    z, mu, ls = (jnp.asarray(a, jnp.float32) for a in _sample(4, k=6))
    base = neuro.partial_correlation(z, mu, ls, n_groups=2, n_total=100.0)
    for perm in ([3, 4, 5, 0, 1, 2], [2, 0, 1, 5, 3, 4]):
        p = jnp.asarray(perm)
        got = neuro.partial_correlation(z[:, p], mu[:, p], ls[:, p], n_groups=2, n_total=100.0)
        np.testing.assert_allclose(float(got), float(base), rtol=1e-5, atol=1e-6)


def _gauss_mu(seed, cov, n):
    """``n`` draws of N(0, cov), on the host (eagerly, jax's sampler compiled its
    factorisation and each op of it, per shape)."""
    cov = np.asarray(cov, np.float64)
    z = np.random.default_rng(seed).normal(size=(n, cov.shape[0]))
    return jnp.asarray(z @ np.linalg.cholesky(cov).T, jnp.float32)


def test_eval_estimator_matches_the_gaussian_closed_form():
    """mu ~ N(0, S), small fixed sigma: the aggregate posterior ~ N(0, S + sigma^2 I)."""
    cov = np.array([[1.0, 0.8], [0.8, 1.0]])
    sigma = 0.25
    mu = _gauss_mu(0, cov, 4000)
    ls = jnp.asarray(np.full(mu.shape, np.log(sigma)), jnp.float32)
    got = float(neuro.partial_correlation_eval(mu, ls, n_groups=2, key=jax.random.key(1), n_mc=1))
    want = float(neuro.gaussian_group_tc(jnp.asarray(cov + sigma**2 * np.eye(2)), n_groups=2))
    assert abs(got - want) <= 0.05 * want, (got, want)
    indep = _gauss_mu(2, np.eye(2), 4000)
    pc0 = float(
        neuro.partial_correlation_eval(indep, ls, n_groups=2, key=jax.random.key(3), n_mc=1)
    )
    assert abs(pc0) < 0.02


@pytest.mark.slow
def test_training_estimator_averages_to_the_eval_estimator():
    """Minibatches of 256 out of 512 (the log of a minibatch mixture is biased low; the
    bias shrinks as M -> N_tot and vanishes at M = N_tot, see the test above)."""
    cov = jnp.array([[1.0, 0.0, 0.7], [0.0, 1.0, 0.0], [0.7, 0.0, 1.0]])
    mu = jnp.concatenate([_gauss_mu(4, cov, 512), jnp.zeros((512, 1))], 1)
    ls = jnp.full_like(mu, np.log(0.5))
    ref = float(neuro.partial_correlation_eval(mu, ls, n_groups=2, key=jax.random.key(5), n_mc=4))

    def one(key):
        ki, kz = jax.random.split(key)
        idx = jax.random.permutation(ki, 512)[:256]
        z = mu[idx] + 0.5 * jax.random.normal(kz, (256, 4))
        return neuro.partial_correlation(z, mu[idx], ls[idx], n_groups=2, n_total=512.0)

    est = float(jnp.mean(jax.vmap(one)(jax.random.split(jax.random.key(6), 64))))
    assert abs(est - ref) <= 0.1 * abs(ref), (est, ref)


def test_gaussian_group_tc_closed_forms():
    assert (
        float(neuro.gaussian_group_tc(jnp.diag(jnp.array([1.0, 2.0, 3.0, 4.0])), n_groups=2)) == 0
    )
    for rho in (0.1, 0.5, 0.9):
        c = jnp.array([[1.0, rho], [rho, 1.0]])
        np.testing.assert_allclose(
            float(neuro.gaussian_group_tc(c, n_groups=2)), -0.5 * np.log(1 - rho**2), rtol=1e-5
        )
    # block-diagonal after a block-diagonal invertible map stays 0; mixing makes it > 0
    rng = np.random.default_rng(0)
    m1, m2 = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    bd = np.block([[m1, np.zeros((2, 2))], [np.zeros((2, 2)), m2]])
    assert abs(float(neuro.gaussian_group_tc(jnp.asarray(bd @ bd.T), n_groups=2))) < 1e-5
    mix = rng.normal(size=(4, 4))
    assert float(neuro.gaussian_group_tc(jnp.asarray(mix @ mix.T), n_groups=2)) > 0.01


def test_kl_closed_form_matches_monte_carlo():
    mu = np.array([0.5, -1.0, 2.0])
    ls = np.array([-0.3, 0.2, -1.0])
    kl = float(neuro.kl_std_normal(jnp.asarray(mu, jnp.float32), jnp.asarray(ls, jnp.float32)))
    # the Monte-Carlo reference on the host (as eager jnp, one program per op)
    eps = np.random.default_rng(0).normal(size=(100_000, 3))
    z = mu[None] + np.exp(ls)[None] * eps
    logq = np.sum(-0.5 * eps**2 - ls[None], 1)
    logp = np.sum(-0.5 * z**2, 1)
    mc = float(np.mean(logq - logp))
    assert abs(mc - kl) <= 0.01 * kl


def test_pc_gradients_are_finite_in_log_space():
    """Very narrow posteriors: pairwise densities underflow exp, gradients stay finite."""
    z, mu, _ = (jnp.asarray(a, jnp.float32) for a in _sample(5))
    ls = jnp.full_like(mu, -6.0)
    g = jax.grad(lambda m: neuro.partial_correlation(z, m, ls, n_groups=2, n_total=1e4))(mu)
    assert bool(jnp.all(jnp.isfinite(g)))


def test_bad_inputs_name_the_argument():
    z, mu, ls = (jnp.asarray(a, jnp.float32) for a in _sample(6))
    with pytest.raises(ValueError, match="n_total"):
        neuro.partial_correlation(z, mu, ls, n_groups=2, n_total=5.0)
    with pytest.raises(ValueError, match="n_groups"):
        neuro.partial_correlation_eval(mu, ls, n_groups=3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="n_mc"):
        neuro.partial_correlation_eval(mu, ls, n_groups=2, key=jax.random.key(0), n_mc=0)
    with pytest.raises(TypeError, match="key"):
        neuro.partial_correlation_eval(mu, ls, n_groups=2, key=0)
    with pytest.raises(RUNTIME, match="n_total"):  # traced: a runtime error
        jax.jit(lambda n: neuro.partial_correlation(z, mu, ls, n_groups=2, n_total=n))(jnp.nan)
