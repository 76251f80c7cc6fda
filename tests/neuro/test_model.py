"""The low-rank RNN VAE: likelihoods, loss terms, connectivity, gradients, scanned training."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy.stats import norm, poisson

from jaxkit import neuro
from tests import conformance

RUNTIME = (ValueError, eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


def _model(obs="gaussian", n=5, k=4, g=2, seed=0, dtype=jnp.float32):
    m = neuro.LowRankRNN(n, k, n_groups=g, obs=obs, key=jax.random.key(seed), dtype=dtype)
    ka, kb = jax.random.split(jax.random.key(seed + 1))
    a = jax.random.normal(ka, (n,), dtype)
    return eqx.tree_at(lambda t: (t.a, t.log_sigma_x), m, (a, 0.3 * a))


def test_gaussian_and_poisson_likelihoods_match_scipy():
    rng = np.random.default_rng(0)  # host data
    z = jnp.asarray(rng.normal(size=(6, 4)), jnp.float32)
    m = _model()
    x = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    zn, A, a = (np.asarray(v, np.float64) for v in (z, m.A, m.a))  # oracles on the host
    mean = zn @ A.T + a[None]
    want = norm.logpdf(np.asarray(x), mean, np.exp(np.asarray(m.log_sigma_x))[None]).sum(1)
    np.testing.assert_allclose(neuro.observation_log_lik(m, z, x), want, rtol=1e-5, atol=1e-4)
    mp = _model("poisson")
    y = jnp.asarray(np.random.default_rng(2).poisson(3.0, (6, 5)), jnp.float32)
    rate = 0.05 * np.log1p(np.exp(zn @ np.asarray(mp.A, np.float64).T + np.asarray(mp.a)[None]))
    want = poisson.logpmf(np.asarray(y), rate).sum(1)
    got = neuro.observation_log_lik(mp, z, y, bin_width=0.05)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    # and jax.scipy's logpmf agrees on the same rates (one compiled program)
    jsp = jax.jit(lambda k, r: jax.scipy.stats.poisson.logpmf(k, r).sum(1))
    np.testing.assert_allclose(got, jsp(y, jnp.asarray(rate, jnp.float32)), rtol=1e-4)


def test_relu_gaussian_mean_is_non_negative():
    m = _model("relu_gaussian")
    z = jnp.asarray(np.random.default_rng(0).normal(size=(9, 4)), jnp.float32)
    assert bool(jnp.all(m.decode(z) >= 0))


def test_loss_is_the_sum_of_its_terms_and_uses_the_fixed_posterior_width():
    m = _model()
    kz = jax.random.key(3)
    rng = np.random.default_rng(3)  # host data
    xp, xn = (jnp.asarray(rng.normal(size=(16, 5)), jnp.float32) for _ in range(2))
    loss, aux = neuro.facrnn_loss(m, xp, xn, key=kz, n_total=400, beta=3.0, alpha=2.0)
    np.testing.assert_allclose(
        loss, aux.nll + aux.kl + 3.0 * aux.pc + 2.0 * aux.offblock, rtol=1e-6
    )
    # reparameterised draw z = mu + sigma_q eps, eps = normal(key, [M, K]),
    # ln sigma_q = -ln(n_total)/(K + 4)
    ls = -np.log(400.0) / 8.0
    mu = np.tanh(np.asarray(xp)) @ np.asarray(m.B).T + np.asarray(m.b)[None]
    z = mu + np.exp(ls) * np.asarray(jax.random.normal(kz, (16, 4)))
    nll = -np.mean(np.asarray(neuro.observation_log_lik(m, jnp.asarray(z, jnp.float32), xn)))
    np.testing.assert_allclose(aux.nll, nll, rtol=1e-5)
    kl = np.mean(0.5 * np.sum(mu**2 + np.exp(2 * ls) - 1 - 2 * ls, 1))
    np.testing.assert_allclose(aux.kl, kl, rtol=1e-5)
    pc = neuro.partial_correlation(
        jnp.asarray(z, jnp.float32),
        jnp.asarray(mu, jnp.float32),
        jnp.full((16, 4), ls, jnp.float32),
        n_groups=2,
        n_total=400.0,
    )
    np.testing.assert_allclose(aux.pc, pc, rtol=1e-4, atol=1e-5)


def test_offblock_penalty_and_connectivity():
    m = _model(n=6, k=4, g=2)
    ba = np.asarray(m.B @ m.A)
    mask = np.kron(1 - np.eye(2), np.ones((2, 2)))
    np.testing.assert_allclose(neuro.offblock_penalty(m), np.mean((mask * ba) ** 2), rtol=1e-5)
    # block-diagonal B A -> zero penalty
    bd = eqx.tree_at(
        lambda t: t.A, m, jnp.linalg.pinv(m.B) @ jnp.asarray(np.kron(np.eye(2), np.ones((2, 2))))
    )
    assert float(neuro.offblock_penalty(bd)) < 1e-8 * float(jnp.sum(bd.A**2))
    j = neuro.connectivity(m)
    s = np.linalg.svd(np.asarray(j), compute_uv=False)
    assert np.all(s[4:] < 1e-5 * s[0])  # rank <= K
    sub = neuro.sub_connectivity(m.A, m.B, n_groups=2)
    np.testing.assert_allclose(sub.sum(0), j, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sub[1], m.A[:, 2:] @ m.B[2:], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_loss_gradients_match_finite_differences_x64():
    with jax.enable_x64(True):
        m = _model(dtype=jnp.float64)
        xp = jax.random.normal(jax.random.key(4), (8, 5), jnp.float64)
        xn = jax.random.normal(jax.random.key(5), (8, 5), jnp.float64)

        def f(A, B):
            mm = eqx.tree_at(lambda t: (t.A, t.B), m, (A, B))
            return neuro.facrnn_loss(
                mm, xp, xn, key=jax.random.key(6), n_total=50.0, beta=20.0, alpha=1.0
            )[0]

        check_grads(f, (m.A, m.B), order=1, modes=("rev",))
        mp = _model("poisson", dtype=jnp.float64)
        y = jnp.asarray(np.random.default_rng(7).poisson(2.0, (8, 5)), jnp.float64)

        def fp(A):
            mm = eqx.tree_at(lambda t: t.A, mp, A)
            return neuro.facrnn_loss(
                mm, xp, y, key=jax.random.key(6), n_total=50.0, beta=5.0, bin_width=0.1
            )[0]

        check_grads(fp, (mp.A,), order=1, modes=("rev",))


def test_fit_lowers_the_loss_and_never_recompiles_for_new_hyperparameters():
    m = _model(n=6, k=4, g=2)
    x = np.random.default_rng(8).normal(size=(65, 6)).astype(np.float32)  # host data
    fit = functools.partial(neuro.fit, m, x[:-1], x[1:], steps=60, batch_size=16)
    r = fit(key=jax.random.key(9), learning_rate=3e-2, **neuro.preset("facrnn"))
    assert r.loss.shape == (60,) and r.pc.shape == (60,)
    assert float(jnp.mean(r.loss[-10:])) < float(jnp.mean(r.loss[:10]))
    assert isinstance(r.model, neuro.LowRankRNN) and r.model.n_groups == 2
    before = conformance.compile_count()
    for name in ("lrrnn", "bdrnn"):
        jax.block_until_ready(fit(key=jax.random.key(10), learning_rate=1e-2, **neuro.preset(name)))
    assert conformance.compile_count() == before


def test_causal_smooth_is_the_exponential_recursion():
    y = jnp.asarray(np.random.default_rng(0).poisson(2.0, (20, 3)), jnp.float32)
    d = np.exp(-1 / 3.0)
    h = np.zeros(3)
    want = []
    for t in range(20):
        h = d * h + (1 - d) * np.asarray(y[t])
        want.append(h)
    np.testing.assert_allclose(neuro.causal_smooth(y, tau=3.0), np.stack(want), rtol=1e-5)


def test_bad_inputs():
    m = _model()
    x = jnp.zeros((8, 5))
    with pytest.raises(ValueError, match="n_groups"):
        neuro.LowRankRNN(5, 4, n_groups=3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="obs"):
        neuro.LowRankRNN(5, 4, obs="binomial", key=jax.random.key(0))
    with pytest.raises(TypeError, match="model"):
        neuro.facrnn_loss(m.A, x, x, key=jax.random.key(0), n_total=10)
    with pytest.raises(ValueError, match="n_total"):
        neuro.facrnn_loss(m, x, x, key=jax.random.key(0), n_total=4)
    with pytest.raises(ValueError, match="steps"):
        neuro.fit(m, x, x, key=jax.random.key(0), steps=0)
    with pytest.raises(ValueError, match="batch_size"):
        neuro.fit(m, x, x, key=jax.random.key(0), steps=2, batch_size=1)
    with pytest.raises(ValueError, match="learning_rate"):
        neuro.fit(m, x, x, key=jax.random.key(0), steps=2, learning_rate=float("nan"))
    with pytest.raises(RUNTIME, match="beta"):
        jax.jit(lambda b: neuro.facrnn_loss(m, x, x, key=jax.random.key(0), n_total=10, beta=b))(
            jnp.float32(-1.0)
        )
    with pytest.raises(ValueError, match="name"):
        neuro.preset("lint")
    with pytest.raises(ValueError, match="K = 4"):
        neuro.principal_init(m, x[:4], x[:4], key=jax.random.key(0))
    with pytest.raises(ValueError, match="bin_width"):
        neuro.principal_init(m, x, x, key=jax.random.key(0), bin_width=0.0)
    with pytest.raises(TypeError, match="x_next"):
        neuro.principal_init(m, x, x[:, :4], key=jax.random.key(0))


def np_gru_states(cell, xs):
    """Every hidden state of a float64 GRU (Cho et al. 2014 with PyTorch's gate order r, z,
    n and the reset gate applied after the recurrent product), from the standard equations."""
    wi, wh = np.asarray(cell.weight_ih, np.float64), np.asarray(cell.weight_hh, np.float64)
    bi, bn = np.asarray(cell.bias, np.float64), np.asarray(cell.bias_n, np.float64)
    hsz = wh.shape[1]
    h, out = np.zeros(hsz), []

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    for x in xs:
        gi, gh = wi @ x + bi, wh @ h
        r = sig(gi[:hsz] + gh[:hsz])
        z = sig(gi[hsz : 2 * hsz] + gh[hsz : 2 * hsz])
        n = np.tanh(gi[2 * hsz :] + r * (gh[2 * hsz :] + bn))
        h = (1.0 - z) * n + z * h
        out.append(h)
    return np.stack(out)


def test_gru_encoder_matches_a_numpy_gru_and_windows_are_causal():
    m = neuro.LowRankRNN(5, 4, n_groups=2, encoder="gru", hidden=7, key=jax.random.key(4))
    assert m.encoder == "gru" and m.gru.hidden == 7
    x = np.random.default_rng(5).normal(size=(9, 5))  # host data
    win = neuro.lagged_windows(jnp.asarray(x, jnp.float32), window=3)
    # out[t] = x[t-2 : t+1], zero-padded before the start
    pad = np.concatenate([np.zeros((2, 5)), x])
    np.testing.assert_allclose(win, np.stack([pad[t : t + 3] for t in range(9)]), rtol=1e-6)
    wo, bo = np.asarray(m.gru.out.weight, np.float64), np.asarray(m.gru.out.bias, np.float64)
    want = np.stack(
        [wo @ np_gru_states(m.gru.cell, np.asarray(w, np.float64))[-1] + bo for w in win]
    )
    # jitted (called eagerly, the vmapped GRU scan compiled afresh on every call); jit
    # equals eager for this encoder is the conformance case neuro.facrnn_loss/gru's check
    encode = eqx.filter_jit(lambda mm, w: mm.encode(w))
    got = encode(m, win)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # batched leading axes give the same means
    np.testing.assert_allclose(
        encode(m, win.reshape(3, 3, 3, 5)).reshape(9, 4), got, rtol=1e-5, atol=1e-6
    )
    # the loss's mean is the GRU's: the read-in B gets no gradient, the GRU does
    # (one compiled gradient program instead of one per operation)
    g = eqx.filter_jit(eqx.filter_grad)(
        lambda mm: neuro.facrnn_loss(
            mm,
            win[:-1],
            jnp.asarray(x[1:], jnp.float32),
            key=jax.random.key(6),
            n_total=50,
            beta=2.0,
        )[0]
    )(m)
    assert np.abs(np.asarray(g.B)).max() == 0.0
    assert np.abs(np.asarray(g.gru.cell.weight_ih)).max() > 0.0


def test_gru_encoder_bad_inputs():
    with pytest.raises(ValueError, match="encoder"):
        neuro.LowRankRNN(5, 4, encoder="lstm", key=jax.random.key(0))
    with pytest.raises(ValueError, match="hidden"):
        neuro.LowRankRNN(5, 4, encoder="gru", hidden=0, key=jax.random.key(0))
    m = neuro.LowRankRNN(5, 4, encoder="gru", key=jax.random.key(0))
    with pytest.raises(ValueError, match="GRU"):
        neuro.connectivity(m)
    with pytest.raises(ValueError, match="encoder"):
        neuro.principal_init(m, jnp.zeros((8, 5)), jnp.zeros((8, 5)), key=jax.random.key(1))
    with pytest.raises(TypeError, match="x_prev"):
        neuro.fit(m, jnp.zeros((8, 5)), jnp.zeros((8, 5)), key=jax.random.key(1), steps=2)
    with pytest.raises(ValueError, match="window"):
        neuro.lagged_windows(jnp.zeros((4, 5)), window=0)
    with pytest.raises(TypeError, match="x"):
        neuro.lagged_windows(jnp.zeros((4,)), window=2)


@jax.jit
def _step_draws(key, i):
    """``fit``'s minibatch rows (8 of 32) and draw key at step ``i``, as one program (the
    eager random ops compiled one program each)."""
    kb, kz = jax.random.split(jax.random.fold_in(key, i))
    return kz, jax.random.permutation(kb, 32)[:8]


def test_beta_warmup_ramps_the_pc_weight_linearly():
    m = _model(n=6, k=4, g=2)
    x = np.random.default_rng(8).normal(size=(33, 6)).astype(np.float32)  # host data
    # a learning rate far below float32 resolution: every step sees the initial model (to
    # float32 precision), so each step's loss is facrnn_loss(m) on its batch (one compile)
    kw = dict(key=jax.random.key(9), steps=4, batch_size=8, learning_rate=1e-9)
    ramp = neuro.fit(m, x[:-1], x[1:], beta=6.0, beta_warmup=3.0, **kw)
    # step i uses beta min(1, (i + 1) / 3): linear, then held at beta from step 2 on
    for i, b in enumerate((2.0, 4.0, 6.0, 6.0)):
        kz, idx = _step_draws(jax.random.key(9), i)  # fit's draws for step i
        idx = np.asarray(idx)
        loss, aux = neuro.facrnn_loss(m, x[:-1][idx], x[1:][idx], key=kz, n_total=32, beta=b)
        np.testing.assert_allclose(ramp.loss[i], loss, rtol=1e-5)
    # warm-up 0 and 1 are the constant schedule
    const = neuro.fit(m, x[:-1], x[1:], beta=6.0, **kw)
    one = neuro.fit(m, x[:-1], x[1:], beta=6.0, beta_warmup=1.0, **kw)
    np.testing.assert_array_equal(const.loss, one.loss)
    with pytest.raises(ValueError, match="beta_warmup"):
        neuro.fit(m, x[:-1], x[1:], beta=6.0, beta_warmup=-1.0, **kw)
