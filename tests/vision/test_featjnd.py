"""FeatJND oracles (spec vision.md section 3.4): closed form for a linear-softmax head,
known-support head, sanity limits, the frozen head, matched strength and budgets."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit.vision import featjnd as J

_SHAPE = (4, 4, 4)  # one feature map [C, H, W], n = 64
_N = 64
_OPT = optax.adam(optax.cosine_decay_schedule(5e-2, 300, 0.02))  # one object: one compile


class _Free(eqx.Module):
    """A free tolerance map (one parameter per element): direct optimisation of s."""

    raw: jax.Array

    def __call__(self, f):
        return jax.nn.softplus(self.raw).astype(f.dtype)


class _Linear(eqx.Module):
    w: jax.Array
    b: jax.Array

    def __call__(self, f):
        return self.w @ f.reshape(-1) + self.b


def _linear_problem(seed):
    k = jax.random.key(seed)
    scale = jnp.exp(jax.random.uniform(jax.random.fold_in(k, 5), (1, _N), minval=-0.5, maxval=0.5))
    w = jax.random.normal(jax.random.fold_in(k, 1), (10, _N)) * scale / np.sqrt(_N)
    head = _Linear(w, jnp.zeros(10))
    f = jax.random.normal(jax.random.fold_in(k, 2), (1, *_SHAPE))
    return head, f


def _fit_free(head, f, eps, seed=3):
    est = _Free(jnp.full(_SHAPE, -0.5))
    out = J.fit_featjnd(
        est, head, f, key=jax.random.key(seed), optimizer=_OPT, steps=300, batch_size=16,
        eps=eps, lam_t=1.0, n_noise=4,
    )  # fmt: skip
    return np.asarray(jax.vmap(out.estimator)(f)[0]).reshape(-1)


def _closed_form(head, f, eps):
    """s_i^2 = 2 eps / (n F_ii), F = W^T (diag p - p p^T) W (NumPy, not the code under test)."""
    w = np.asarray(head.w, np.float64)
    logits = w @ np.asarray(f[0], np.float64).reshape(-1)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    fisher = w.T @ (np.diag(p) - np.outer(p, p)) @ w
    return np.sqrt(2 * eps / (_N * np.diag(fisher)))


def test_closed_form_linear_softmax_head():
    head, f = _linear_problem(0)
    s = _fit_free(head, f, 0.02)
    ref = _closed_form(head, f, 0.02)
    corr = np.corrcoef(np.log(s), np.log(ref))[0, 1]
    ratio = np.median(s / ref)
    print(f"closed form: log-correlation {corr:.4f}, median learned/closed-form {ratio:.3f}")
    assert corr > 0.99, corr
    assert 0.8 <= ratio <= 1.1, ratio


def test_eps_to_zero_drives_s_to_zero():
    head, f = _linear_problem(1)
    big, small = _fit_free(head, f, 0.02), _fit_free(head, f, 0.002)
    assert np.all(small >= 0) and np.all(big >= 0)
    # closed form: s scales like sqrt(eps), so a 10x smaller eps gives ~0.32x the map
    r = np.median(small / big)
    assert 0.2 < r < 0.45, r


class _ReadsChannels(eqx.Module):
    """A head that reads only channels 0 and 1 of a [C, H, W] feature (known support)."""

    w: jax.Array

    def __call__(self, f):
        return jnp.einsum("kchw,chw->k", self.w, f[:2])


@pytest.mark.slow  # own compilation of the conv estimator fit (~7 s); oracle kept in slow
def test_known_support_head():
    k = jax.random.key(4)
    head = _ReadsChannels(jax.random.normal(k, (5, 2, 4, 4)) / 4.0)
    feats = jax.random.normal(jax.random.fold_in(k, 1), (16, *_SHAPE))
    est = J.FeatJNDEstimator(4, hidden=4, key=jax.random.fold_in(k, 2))
    out = J.fit_featjnd(
        est, head, feats, key=jax.random.fold_in(k, 3), optimizer=_OPT, steps=100, batch_size=8,
        n_noise=4,
    )  # fmt: skip
    s = np.asarray(J.tolerance_map(out.estimator, feats))
    read, ignored = np.median(s[:, :2]), np.median(s[:, 2:])
    assert np.all(s >= 0)
    print(f"known support: median s ignored {ignored:.3g} / read {read:.3g}")
    assert ignored > 10 * read, (ignored, read)


def test_head_is_frozen_and_estimator_trains():
    head, f = _linear_problem(2)
    feats = jnp.concatenate([f, f + 0.1])
    est = _Free(jnp.zeros(_SHAPE))
    before = [np.array(x, copy=True) for x in jax.tree.leaves(head)]
    g_head = jax.grad(lambda h: J.featjnd_loss(est, h, feats, key=jax.random.key(0))[0])(head)
    for leaf in jax.tree.leaves(g_head):
        assert np.all(np.asarray(leaf) == 0.0)  # stop_gradient: exactly zero, not small
    opt = optax.adam(1e-2)
    step = J.featjnd_step(est, head, opt.init(est), feats, key=jax.random.key(1), optimizer=opt)
    assert not np.array_equal(np.asarray(step.estimator.raw), np.asarray(est.raw))
    assert np.isfinite(float(step.loss))
    for a, b in zip(before, jax.tree.leaves(head), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))  # bit-identical


def test_kl_discrepancy_zero_at_zero_and_matches_numpy(key):
    a = jax.random.normal(key, (6, 5))
    b = a + 0.3 * jax.random.normal(jax.random.fold_in(key, 1), (6, 5))
    assert np.all(np.asarray(J.kl_discrepancy(a, a)) == 0.0)
    pa = np.exp(np.asarray(a, np.float64))
    pa /= pa.sum(-1, keepdims=True)
    pb = np.exp(np.asarray(b, np.float64))
    pb /= pb.sum(-1, keepdims=True)
    ref = np.sum(pa * np.log(pa / pb), -1)
    np.testing.assert_allclose(np.asarray(J.kl_discrepancy(a, b)), ref, rtol=1e-5, atol=1e-7)


def test_matched_strength_is_per_sample(key):
    # samples of very different scale: a per-batch match would get them wrong
    s = (
        jnp.abs(jax.random.normal(key, (4, *_SHAPE)))
        * jnp.array([0.01, 1.0, 5.0, 50.0])[:, None, None, None]
    )
    d = J.jnd_perturbation(s, key=jax.random.fold_in(key, 1), alpha=2.0)
    g = J.matched_gaussian(d, key=jax.random.fold_in(key, 2))
    nd = np.linalg.norm(np.asarray(d).reshape(4, -1), axis=1)
    ng = np.linalg.norm(np.asarray(g).reshape(4, -1), axis=1)
    np.testing.assert_allclose(ng, nd, rtol=1e-5)
    f = jnp.ones_like(s)
    np.testing.assert_allclose(
        np.asarray(J.feature_snr_db(f, d)), np.asarray(J.feature_snr_db(f, g)), atol=1e-3
    )
    # delta_J = alpha s z: zero where s is zero, and scales linearly in alpha
    d1 = J.jnd_perturbation(s, key=jax.random.fold_in(key, 1), alpha=1.0)
    np.testing.assert_allclose(np.asarray(d), 2 * np.asarray(d1), rtol=1e-6)
    assert np.all(np.asarray(J.jnd_perturbation(0 * s, key=key)) == 0.0)


def test_token_budgets_match_exactly(key):
    s = (
        jnp.abs(jax.random.normal(key, (3, *_SHAPE)))
        + jnp.array([0.0, 1.0, 3.0])[:, None, None, None]
    )
    out = {
        m: np.asarray(J.token_steps(s, budget_rms=0.7, mode=m, key=jax.random.fold_in(key, 1)))
        for m in ("featjnd", "uniform", "permute")
    }
    for m, st in out.items():
        assert st.shape == (3, 1, 4, 4), (m, st.shape)
        budget = np.mean(st.reshape(3, -1).astype(np.float64) ** 2, axis=1)
        np.testing.assert_allclose(budget, 0.49, rtol=1e-6, err_msg=m)
    fj, pm = out["featjnd"].reshape(3, -1), out["permute"].reshape(3, -1)
    np.testing.assert_array_equal(np.sort(fj, 1), np.sort(pm, 1))  # a permutation, exactly
    assert not np.array_equal(fj, pm)
    mean_s = np.asarray(s).mean(axis=1).reshape(3, -1)  # featjnd: proportional to mean_c s
    np.testing.assert_allclose(fj / mean_s, (fj / mean_s)[:, :1] * np.ones_like(fj), rtol=1e-5)


def test_quantize_error_bound_and_ste(key):
    f = jax.random.normal(key, (2, *_SHAPE))
    steps = J.token_steps(jnp.abs(f) + 0.1, budget_rms=0.5)
    q = J.quantize(f, steps)
    err = np.abs(np.asarray(q - f))
    assert np.all(err <= np.asarray(steps) / 2 + 1e-6)
    np.testing.assert_allclose(np.asarray(q / steps), np.round(np.asarray(q / steps)), atol=1e-4)
    qd = J.quantize(
        f, steps, key=jax.random.fold_in(key, 1)
    )  # subtractive dither: still |e| <= D/2
    assert np.all(np.abs(np.asarray(qd - f)) <= np.asarray(steps) / 2 + 1e-6)
    g = jax.grad(lambda x: jnp.sum(J.quantize(x, steps, ste=True)))(f)
    np.testing.assert_array_equal(np.asarray(g), np.ones(f.shape, np.float32))
    g0 = jax.grad(lambda x: jnp.sum(J.quantize(x, steps)))(f)
    assert np.all(np.asarray(g0) == 0.0)


def test_bad_inputs(key):
    s = jnp.ones((2, *_SHAPE))
    with pytest.raises(ValueError, match="`key`"):
        J.token_steps(s, budget_rms=1.0, mode="permute")
    with pytest.raises(ValueError, match="`token_axes`"):
        J.token_steps(s, budget_rms=1.0, token_axes=(0,))
    with pytest.raises(ValueError, match="`s`"):
        J.jnd_perturbation(s.at[0, 0, 0, 0].set(jnp.nan), key=key)
    with pytest.raises(TypeError, match="`optimizer`"):
        J.featjnd_step(_Free(jnp.zeros(_SHAPE)), _Free(jnp.zeros(_SHAPE)), None, s, key=key,
                       optimizer="adam")  # fmt: skip
    with pytest.raises(ValueError, match="`discrepancy`"):
        J.featjnd_loss(_Free(jnp.zeros(_SHAPE)), _Free(jnp.zeros(_SHAPE)), s, key=key,
                       discrepancy="l1")  # fmt: skip
    with pytest.raises(TypeError, match="`f` must hold at least one sample"):  # was NaN
        J.featjnd_loss(_Free(jnp.zeros(_SHAPE)), _Free(jnp.zeros(_SHAPE)), s[:0], key=key)
    with pytest.raises(TypeError, match="`noisy_logits`"):
        J.kl_discrepancy(jnp.ones((2, 3)), jnp.ones((2, 3), jnp.bfloat16))
    with pytest.raises(TypeError, match="'f'|`f`"):  # jaxtyping's check, or ours without it
        J.FeatJNDEstimator(4, key=key)(jnp.ones((4, 4)))


def _sq_norm_metric(logits, y):  # E ||logits||^2: with head = flatten, the noise energy
    del y
    return jnp.mean(jnp.sum(logits**2, axis=-1))


def _flatten(x):
    return x.reshape(-1)


def test_matched_strength_curve_oracles():
    """Equal per-sample energy at every alpha (exactly alpha^2 scaling), the exact SNR
    shift, and a head that reads only zero-tolerance positions: FeatJND noise leaves its
    accuracy at the clean value (NumPy) for every alpha, Gaussian noise does not."""
    rng = np.random.default_rng(0)
    b, shape = 64, (2, 4, 4)
    s = rng.uniform(0.1, 1.0, (b, *shape)).astype(np.float32)
    alphas = jnp.asarray([0.5, 1.0, 3.0], jnp.float32)
    zero_f = jnp.zeros((b, *shape), jnp.float32)
    y = jnp.zeros(b, jnp.int32)
    c = J.matched_strength_curve(
        _flatten, zero_f, y, s, alphas, key=jax.random.key(0), metric=_sq_norm_metric
    )
    np.testing.assert_allclose(c.acc_featjnd, c.acc_gaussian, rtol=1e-5)
    np.testing.assert_allclose(c.acc_featjnd / c.acc_featjnd[1], np.asarray(alphas) ** 2, rtol=1e-5)
    f = jnp.asarray(rng.normal(size=(b, *shape)), jnp.float32)
    c2 = J.matched_strength_curve(  # same program as c (one compile)
        _flatten, f, y, s, alphas, key=jax.random.key(0), metric=_sq_norm_metric
    )
    np.testing.assert_allclose(
        c2.snr_db - c2.snr_db[1], -20 * np.log10(np.asarray(alphas)), atol=1e-4
    )
    # known support: the head reads channel 0 only, where s = 0
    s_k = s.copy()
    s_k[:, 0] = 0.0
    w = rng.normal(size=(16, 3)).astype(np.float32)

    def head(x):
        return x[0].reshape(-1) @ w

    y3 = jnp.asarray(np.argmax(np.asarray(f[:, 0]).reshape(b, -1) @ w, -1))  # clean: 1.0
    c3 = J.matched_strength_curve(head, f, y3, s_k, alphas * 10, key=jax.random.key(1))
    np.testing.assert_allclose(c3.acc_featjnd, 1.0, atol=1e-6)
    assert float(c3.acc_gaussian[-1]) < 0.9
    with pytest.raises(ValueError, match="alphas"):
        J.matched_strength_curve(_flatten, f, y, s, jnp.asarray([0.0, 1.0]), key=jax.random.key(0))
    with pytest.raises(TypeError, match="`y`"):
        J.matched_strength_curve(_flatten, f, y[:3], s, alphas, key=jax.random.key(0))
    with pytest.raises(TypeError, match="`y` must be an integer"):  # labels off the integers
        J.matched_strength_curve(
            _flatten, f, y.astype(f.dtype) + 0.5, s, alphas, key=jax.random.key(0)
        )
    with pytest.raises(TypeError, match="`y` must have shape"):  # [B, 1] would broadcast
        J.matched_strength_curve(_flatten, f, y[:, None], s, alphas, key=jax.random.key(0))
