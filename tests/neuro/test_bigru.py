"""FacRNN's bidirectional whole-sequence GRU encoder with the dynamics prior [R]."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from jaxkit import neuro
from tests.neuro.test_model import np_gru_states

RUNTIME = (ValueError, eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


def _np_bigru_means(enc, xs):
    hf = np_gru_states(enc.fwd, xs)
    hb = np_gru_states(enc.bwd, xs[::-1])[::-1]
    wo, bo = np.asarray(enc.out.weight, np.float64), np.asarray(enc.out.bias, np.float64)
    return np.concatenate([hf, hb], 1) @ wo.T + bo


# one compiled program per input shape (called eagerly, the encoder's two scans compiled
# afresh on every call)
_encode = eqx.filter_jit(lambda m, x: m.encode(x))


def _bigru(n=5, k=4, g=2, hidden=6, seed=0, obs="gaussian"):
    m = neuro.LowRankRNN(
        n, k, n_groups=g, obs=obs, encoder="bigru", hidden=hidden, key=jax.random.key(seed)
    )
    # a non-zero read-in bias and prior width, so both enter the dynamics prior
    kb, ks = jax.random.split(jax.random.key(seed + 1))
    b, ls = 0.3 * jax.random.normal(kb, (k,)), 0.2 * jax.random.normal(ks, (k,))
    return eqx.tree_at(lambda t: (t.b, t.log_sigma_z), m, (b, ls))


def test_bigru_encoder_matches_a_float64_numpy_bidirectional_gru():
    m = _bigru()  # the shapes of every test here: one set of compiled programs
    assert m.encoder == "bigru" and m.gru.hidden == 6
    x = np.random.default_rng(5).normal(size=(2, 9, 5))
    got = _encode(m, jnp.asarray(x, jnp.float32))
    assert got.shape == (2, 9, 4)
    want = np.stack([_np_bigru_means(m.gru, xs) for xs in x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # mu_t depends on the future (bidirectional): changing the last step moves mu_0
    x2 = x.copy()
    x2[:, -1] += 1.0
    moved = _encode(m, jnp.asarray(x2, jnp.float32))
    assert float(jnp.abs(moved[:, 0] - got[:, 0]).max()) > 1e-4


def test_bigru_loss_terms_dynamics_prior_and_pc_rows():
    m = _bigru()
    kz = jax.random.key(3)
    r, t = 2, 9
    rng = np.random.default_rng(3)  # data drawn on the host: no eager programs
    xs, ys = (rng.normal(size=(r, t, 5)).astype(np.float32) for _ in range(2))
    u = (0.1 * rng.normal(size=(r, t, 5))).astype(np.float32)
    nt = 60.0
    loss, aux = neuro.facrnn_loss(m, xs, ys, key=kz, n_total=nt, beta=3.0, alpha=2.0, u=u)
    np.testing.assert_allclose(
        loss, aux.nll + aux.kl + 3.0 * aux.pc + 2.0 * aux.offblock, rtol=1e-5
    )
    # z = mu + sigma_q eps over the whole [R, T, K] path, ln sigma_q = -ln(n_total)/(K + 4)
    ls = -np.log(nt) / 8.0
    mu = np.stack([_np_bigru_means(m.gru, np.asarray(v, np.float64)) for v in xs])
    z = mu + np.exp(ls) * np.asarray(jax.random.normal(kz, (r, t, 4)), np.float64)
    zf = jnp.asarray(z.reshape(-1, 4), jnp.float32)
    nll = -np.mean(neuro.observation_log_lik(m, zf, ys.reshape(-1, 5), u=u.reshape(-1, 5)))
    np.testing.assert_allclose(aux.nll, nll, rtol=1e-4)
    # KL = E_q[ln q] - ln p(z_{1:T}) per step: Gaussian entropy, and the prior
    # z_1 ~ N(0, I), z_t ~ N(B tanh(A z_{t-1} + u_{t-1}) + b, sigma_z^2) from scipy
    A, B, b = (np.asarray(v, np.float64) for v in (m.A, m.B, m.b))
    sz = np.exp(np.asarray(m.log_sigma_z, np.float64))
    uu = np.asarray(u, np.float64)
    lp = norm.logpdf(z[:, 0]).sum()
    for i in range(r):
        mean = np.tanh(z[i, :-1] @ A.T + uu[i, :-1]) @ B.T + b
        lp += norm.logpdf(z[i, 1:], mean, sz).sum()
    entropy = 4 * (ls + 0.5 * (1 + np.log(2 * np.pi)))
    np.testing.assert_allclose(aux.kl, -lp / (r * t) - entropy, rtol=1e-4, atol=1e-4)
    # every step is one sample of the aggregate posterior: PC is the estimator over all R T
    pc = neuro.partial_correlation(
        zf,
        jnp.asarray(mu.reshape(-1, 4), jnp.float32),
        jnp.full((r * t, 4), ls, jnp.float32),
        n_groups=2,
        n_total=nt,
    )
    np.testing.assert_allclose(aux.pc, pc, rtol=1e-4, atol=1e-5)
    # one [T, N] sequence is one trial
    one = neuro.facrnn_loss(m, xs[0], ys[0], key=kz, n_total=nt, beta=3.0)[0]
    np.testing.assert_allclose(
        one, neuro.facrnn_loss(m, xs[:1], ys[:1], key=kz, n_total=nt, beta=3.0)[0], rtol=1e-6
    )


def test_bigru_fit_learns_and_its_pc_rows_are_the_estimator_on_a_uniform_draw():
    m = _bigru(seed=2, obs="poisson")
    y = jnp.asarray(np.random.default_rng(7).poisson(2.0, (4, 16, 5)), jnp.float32)
    kw = dict(key=jax.random.key(9), batch_size=16, learning_rate=1e-2, beta=2.0, bin_width=0.5)
    res = neuro.fit(m, y, y, steps=80, **kw)
    assert res.loss.shape == (80,)
    assert float(jnp.mean(res.loss[-10:])) < float(jnp.mean(res.loss[:10]))
    assert neuro.connectivity(res.model).shape == (5, 5)  # B stays in the dynamics prior

    # step 0: the loss on all 64 steps with PC over the 16 rows fit draws uniformly
    @jax.jit  # fit's step-0 draws, as one program (eagerly: one per random op)
    def draws(key):
        kb, kz = jax.random.split(jax.random.fold_in(key, 0))
        return kz, jax.random.permutation(kb, 64)[:16], jax.random.normal(kz, (4, 16, 4))

    kz, rows, eps = draws(jax.random.key(9))
    rows = np.asarray(rows)
    loss, aux = neuro.facrnn_loss(m, y, y, key=kz, n_total=64, beta=2.0, bin_width=0.5)
    mu = np.asarray(_encode(m, y)).reshape(64, 4)
    ls = -np.log(64.0) / 8.0
    z = mu + np.exp(ls) * np.asarray(eps).reshape(64, 4)
    pc_rows = neuro.partial_correlation(
        z[rows], mu[rows], np.full((16, 4), ls, np.float32), n_groups=2, n_total=64.0
    )
    want = aux.nll + aux.kl + 2.0 * pc_rows
    np.testing.assert_allclose(res.loss[0], want, rtol=1e-5)


def test_bigru_bad_inputs():
    m = _bigru()
    with pytest.raises(TypeError, match="sequences"):
        neuro.facrnn_loss(
            m, jnp.zeros((2, 3, 4, 5)), jnp.zeros((2, 3, 4, 5)), key=jax.random.key(0), n_total=10
        )
    with pytest.raises(TypeError, match="x_next"):
        neuro.facrnn_loss(
            m, jnp.zeros((2, 6, 5)), jnp.zeros((12, 5)), key=jax.random.key(0), n_total=12
        )
    with pytest.raises(TypeError, match="sequences"):
        neuro.fit(m, jnp.zeros((1, 5)), jnp.zeros((1, 5)), key=jax.random.key(0), steps=2)
    with pytest.raises(RUNTIME, match="n_total"):
        neuro.facrnn_loss(
            m, jnp.zeros((2, 6, 5)), jnp.zeros((2, 6, 5)), key=jax.random.key(0), n_total=5
        )
