"""Statistical and analytic oracles for jaxkit.soft.random (no released anchor exists)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy import stats

import jaxkit.soft as S
from tests.conformance import without_jaxtyping

R = S.random
KEY = jax.random.key(1234)
P4 = jnp.array([0.1, 0.2, 0.3, 0.4])
SOFT_MODES = ["smooth", "c0", "c1", "c2"]
N = 20000


def _chi2_ok(counts, p, alpha=1e-3):
    counts = np.asarray(counts, np.float64)
    p = np.asarray(p, np.float64)
    exp = p / p.sum() * counts.sum()
    return stats.chisquare(counts, exp).pvalue > alpha


# ----------------------------------------------------------------------------- categorical


def test_categorical_hard_frequencies_and_hard_equals_pipeline():
    lg = jnp.log(P4)
    samples = {}
    for mode in ("hard", "_hard"):
        s = samples[mode] = np.asarray(R.categorical(KEY, lg, shape=(N,), mode=mode))
        assert s.shape == (N, 4)
        np.testing.assert_array_equal(s.sum(-1), 1.0)
        assert _chi2_ok(s.sum(0), P4), (mode, s.sum(0))
    # "_hard" runs the same Gumbel draw as jax.random.categorical
    np.testing.assert_array_equal(samples["_hard"], samples["hard"])


@pytest.mark.slow
def test_categorical_hard_equals_pipeline_with_axis_and_batch():
    lg2 = jnp.log(jnp.stack([P4, P4[::-1]], 1))  # (4, 2), categories on axis 0
    h = R.categorical(KEY, lg2, axis=0, shape=(7, 2), mode="hard")
    hh = R.categorical(KEY, lg2, axis=0, shape=(7, 2), mode="_hard")
    np.testing.assert_array_equal(h, hh)


@pytest.mark.parametrize(
    "mode",
    [m if m == "smooth" else pytest.param(m, marks=pytest.mark.slow) for m in SOFT_MODES],
)
def test_categorical_soft_in_simplex_and_limit(mode):
    lg = jnp.log(P4)  # shape (N,): shares the compiled samplers of the tests around
    s = np.asarray(R.categorical(KEY, lg, shape=(N,), mode=mode, softness=0.5))
    assert np.all(s >= 0)
    np.testing.assert_allclose(s.sum(-1), 1.0, atol=1e-5)
    hard = np.asarray(R.categorical(KEY, lg, shape=(N,), mode="_hard"))
    near = np.asarray(R.categorical(KEY, lg, shape=(N,), mode=mode, softness=1e-4))
    # every draw converges except those with a Gumbel gap below ~softness (checks in NumPy:
    # eager jax.numpy glue compiles a program per op)
    close = np.max(np.abs(near - hard), -1) < 1e-3
    assert np.mean(close) > 0.99
    assert np.mean(np.abs(near - hard)) < 1e-3


@pytest.mark.slow
def test_gumbel_softmax_mean_matches_probabilities_at_high_temperature_limit():
    # smooth softsort with standardize=False is the Gumbel-softmax: E[sample] -> p as tau -> 0
    s = R.categorical(KEY, jnp.log(P4), shape=(N,), softness=0.02)
    m = jnp.mean(s, 0)
    se = np.sqrt(np.asarray(P4) * (1 - np.asarray(P4)) / N)
    assert np.all(np.abs(np.asarray(m) - np.asarray(P4)) < 4 * se + 2e-3), m


@pytest.mark.slow
def test_categorical_without_replacement():
    lg = jnp.log(P4)
    h = R.categorical(KEY, lg, shape=(3,), replace=False, mode="hard")
    hh = R.categorical(KEY, lg, shape=(3,), replace=False, mode="_hard")
    np.testing.assert_array_equal(h, hh)
    assert len(set(np.asarray(jnp.argmax(h, -1)).tolist())) == 3
    s = R.categorical(KEY, lg, shape=(3,), replace=False, softness=1e-4)
    np.testing.assert_allclose(s, hh, atol=1e-3)
    # first draw of Gumbel-top-k is a categorical draw
    keys = jax.random.split(KEY, 4000)
    first = jax.vmap(lambda k: R.categorical(k, lg, shape=(2,), replace=False, mode="_hard")[0])(
        keys
    )
    assert _chi2_ok(jnp.sum(first, 0), P4)
    with pytest.raises(ValueError, match="shape"):
        R.categorical(KEY, lg, shape=(5,), replace=False)


@pytest.mark.slow
def test_nonfinite_logits_floored():
    lg = jnp.array([0.0, -jnp.inf, 1.0, -jnp.inf])
    for mode in ["_hard", "smooth", "c0"]:
        s = R.categorical(KEY, lg, shape=(200,), mode=mode)
        assert bool(jnp.all(jnp.isfinite(s)))
        assert float(jnp.max(s[:, 1])) < 1e-6 and float(jnp.max(s[:, 3])) < 1e-6
    g = jax.grad(lambda l: jnp.sum(R.categorical(KEY, l, shape=(5,))[:, 0]))(lg)
    assert bool(jnp.all(jnp.isfinite(g)))
    with pytest.raises(ValueError, match="logits"):
        R.categorical(KEY, jnp.array([0.0, jnp.nan]))


# ----------------------------------------------------------- choice, permutation, multinomial


@pytest.mark.slow
def test_choice():
    a = jnp.arange(10.0, 14.0)
    h = R.choice(KEY, a, shape=(N,), p=P4, mode="_hard")
    counts = [int(jnp.sum(h == v)) for v in a]
    assert _chi2_ok(counts, P4)
    s = R.choice(KEY, a, shape=(N,), p=P4, softness=0.3)
    assert bool(jnp.all((s >= 10 - 1e-4) & (s <= 13 + 1e-4)))
    # no replacement: distinct
    h = R.choice(KEY, 6, shape=(6,), replace=False, mode="_hard")
    np.testing.assert_array_equal(jnp.sort(h), jnp.arange(6.0))
    # axis and shape placement like jax.random.choice
    a2 = jnp.arange(24.0).reshape(2, 3, 4)
    for mode in ("hard", "smooth"):
        assert R.choice(KEY, a2, shape=(5,), axis=1, mode=mode).shape == (2, 5, 4)


@pytest.mark.parametrize(
    "method",
    [
        "neuralsort",
        "softsort",
        "ot",
    ],
)
@pytest.mark.slow
def test_permutation_matrix(method):
    n = 5
    P = R.permutation(KEY, jnp.eye(n), method=method, softness=0.3)
    assert bool(jnp.all(P >= -1e-7))
    np.testing.assert_allclose(jnp.sum(P, 1), 1.0, atol=1e-5)  # rows
    # columns: exact for OT (doubly stochastic); SoftSort/NeuralSort are row-stochastic only
    atol = 1e-4 if method == "ot" else 0.2
    np.testing.assert_allclose(jnp.sum(P, 0), 1.0, atol=atol)
    hard = R.permutation(KEY, jnp.eye(n), method=method, mode="_hard")
    np.testing.assert_array_equal(jnp.sort(jnp.argmax(hard, 1)), jnp.arange(n))
    tol = 5e-2 if method == "ot" else 1e-3
    np.testing.assert_allclose(
        R.permutation(KEY, jnp.eye(n), method=method, softness=1e-3), hard, atol=tol
    )


@pytest.mark.slow
def test_permutation_uniform_and_independent():
    keys = jax.random.split(KEY, 6000)
    first = jax.vmap(lambda k: R.permutation(k, 4, mode="_hard")[0])(keys)
    counts = [int(jnp.sum(first == v)) for v in range(4)]
    assert _chi2_ok(counts, np.full(4, 0.25))
    x = jnp.arange(12.0).reshape(3, 4)
    shared = R.permutation(KEY, x, axis=1, mode="_hard")
    d = shared - shared[:1]  # same permutation for every row
    np.testing.assert_array_equal(d, jnp.broadcast_to((x - x[:1]), x.shape))
    ind = R.permutation(
        KEY, jnp.broadcast_to(jnp.arange(6.0), (40, 6)), axis=1, independent=True, mode="_hard"
    )
    assert len({tuple(r) for r in np.asarray(ind).tolist()}) > 20
    np.testing.assert_array_equal(jnp.sort(ind, 1), jnp.broadcast_to(jnp.arange(6.0), (40, 6)))
    s = R.permutation(KEY, x, axis=1, independent=True, softness=0.5)
    np.testing.assert_allclose(jnp.sum(s, 1), jnp.sum(x, 1), rtol=0.2)


@pytest.mark.slow
def test_multinomial():
    n = 7
    for mode in ("hard", "_hard", "smooth"):
        c = R.multinomial(KEY, n, P4, shape=(4000,), mode=mode)
        assert c.shape == (4000, 4)
        np.testing.assert_allclose(jnp.sum(c, -1), n, rtol=1e-5)
        se = np.sqrt(n * np.asarray(P4) * (1 - np.asarray(P4)) / 4000)
        tol = 5 * se + (0.02 if mode == "smooth" else 0.0)
        assert np.all(np.abs(np.asarray(jnp.mean(c, 0)) - n * np.asarray(P4)) < tol), mode


# ----------------------------------------------------------------------------- threshold family


@pytest.mark.slow
def test_bernoulli_hard_and_pipeline_agree():
    p = jnp.array([0.0, 0.2, 0.5, 0.9, 1.0])
    h = R.bernoulli(KEY, p, (N, 5), mode="hard")
    hh = R.bernoulli(KEY, p, (N, 5), mode="_hard")
    np.testing.assert_array_equal(h, hh)
    m = jnp.mean(hh, 0)
    se = np.sqrt(np.asarray(p) * (1 - np.asarray(p)) / N)
    assert np.all(np.abs(np.asarray(m) - np.asarray(p)) <= 4 * se + 1e-12)


def test_soft_bernoulli_mean_closed_form():
    # E_u[sigmoid((p - u)/tau)] = tau (softplus(p/tau) - softplus((p - 1)/tau))
    tau = 0.1
    pn = np.array([0.05, 0.3, 0.5, 0.8], np.float32)
    p = jnp.asarray(pn)
    s = np.asarray(R.bernoulli(KEY, p, (N, 4), softness=tau), np.float64)
    # closed form and checks in NumPy (eager jax.numpy glue compiles a program per op)
    want = tau * (np.logaddexp(0, pn / tau) - np.logaddexp(0, (pn - 1) / tau))
    sd = np.std(s, 0)
    assert np.all(np.abs(np.mean(s, 0) - want) < 4 * sd / np.sqrt(N))
    s = np.asarray(R.bernoulli(KEY, p, (N, 4), softness=0.01))  # E -> p as softness -> 0
    np.testing.assert_allclose(np.mean(s, 0), pn, atol=0.015)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["c0", "c1", "c2"])
def test_soft_bernoulli_every_mode_limit(mode):
    # every relaxation: E -> p as softness -> 0, values in [0, 1]
    p = jnp.array([0.05, 0.3, 0.5, 0.8])
    s = R.bernoulli(KEY, p, (N, 4), softness=0.01, mode=mode)
    assert bool(jnp.all((s >= 0) & (s <= 1)))
    np.testing.assert_allclose(jnp.mean(s, 0), p, atol=0.015)


@pytest.mark.slow
def test_binary_concrete():
    p = jnp.array([0.1, 0.4, 0.75])
    s = R.bernoulli(KEY, p, (N, 3), noise="logistic", softness=0.5)
    frac = jnp.mean(s > 0.5, 0)
    se = np.sqrt(np.asarray(p) * (1 - np.asarray(p)) / N)
    assert np.all(np.abs(np.asarray(frac) - np.asarray(p)) < 4 * se)
    np.testing.assert_array_equal(s > 0.5, R.bernoulli(KEY, p, (N, 3), mode="_hard") > 0.5)
    with pytest.raises(ValueError, match="mode"):
        R.bernoulli(KEY, p, noise="logistic", mode="c0")


@pytest.mark.slow
def test_rademacher_and_binomial():
    r = R.rademacher(KEY, (N,), mode="_hard")
    np.testing.assert_array_equal(r, R.rademacher(KEY, (N,), mode="hard"))
    assert abs(float(jnp.mean(r))) < 4 / np.sqrt(N)
    rs = R.rademacher(KEY, (N,), softness=0.2)
    assert bool(jnp.all(jnp.abs(rs) <= 1))
    n, p = 12, jnp.array([0.15, 0.6])
    for mode in ("hard", "_hard", "c0"):
        b = R.binomial(KEY, n, p, (N, 2), mode=mode, softness=0.01)
        se = np.sqrt(n * np.asarray(p) * (1 - np.asarray(p)) / N)
        assert np.all(np.abs(np.asarray(jnp.mean(b, 0)) - n * np.asarray(p)) < 4 * se + 0.02)
        if mode != "c0":
            np.testing.assert_array_equal(b, jnp.round(b))


# ----------------------------------------------------------- gradients, ST, errors


_GRAD_FNS = {
    "categorical": lambda k: (lambda l: R.categorical(k, l, shape=(2,), softness=0.7), "lg"),
    "categorical_c2": lambda k: (
        lambda l: R.categorical(k, l, shape=(2,), softness=0.7, mode="c2"),
        "lg",
    ),
    "categorical_noreplace": lambda k: (
        lambda l: R.categorical(k, l, shape=(2,), replace=False, softness=0.7),
        "lg",
    ),
    "choice": lambda k: (lambda q: R.choice(k, jnp.arange(3.0), (2,), p=q, softness=0.7), "p3"),
    "permutation": lambda k: (lambda x: R.permutation(k, x, softness=0.7), "x"),
    "multinomial": lambda k: (lambda q: R.multinomial(k, 3, q, softness=0.7), "p3"),
    "bernoulli": lambda k: (lambda q: R.bernoulli(k, q, (3, 2), softness=0.3), "p2"),
    "bernoulli_logistic": lambda k: (
        lambda q: R.bernoulli(k, q, (3, 2), softness=0.3, noise="logistic"),
        "p2",
    ),
    "binomial_c1": lambda k: (lambda q: R.binomial(k, 4, q, softness=0.3, mode="c1"), "p2"),
}
_FAST_GRADS = {"categorical"}


@pytest.mark.parametrize(
    "name", [n if n in _FAST_GRADS else pytest.param(n, marks=pytest.mark.slow) for n in _GRAD_FNS]
)
def test_check_grads_x64(name):
    with jax.enable_x64(True):
        inputs = {  # NumPy float64 (eager jax.numpy glue compiles a program per op)
            "lg": np.log(np.array([0.2, 0.3, 0.5])),
            "p3": np.array([0.2, 0.3, 0.5]),
            "x": np.array([0.5, -1.0, 2.0]),
            "p2": np.array([0.3, 0.6]),
        }
        f, which = _GRAD_FNS[name](jax.random.key(3))
        x = inputs[which]
        # the output dtype is fixed at trace time: no eager program of its own for it
        assert jax.eval_shape(f, x).dtype == jnp.float64
        check_grads(jax.jit(f), (x,), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_straight_through():
    lg = jnp.log(P4)  # shape (N,): the compiled "_hard" and smooth samplers are shared
    v = R.categorical_st(KEY, lg, shape=(N,), softness=0.5)
    np.testing.assert_array_equal(v, R.categorical(KEY, lg, shape=(N,), mode="_hard"))
    w = jnp.asarray(np.arange(4.0, dtype=np.float32)[None])

    @jax.jit  # both gradients in one program (eagerly: one program per op of each pass)
    def grads(lg):
        st = jax.grad(lambda l: jnp.sum(R.categorical_st(KEY, l, shape=(N,), softness=0.5) * w))
        soft = jax.grad(lambda l: jnp.sum(R.categorical(KEY, l, shape=(N,), softness=0.5) * w))
        return st(lg), soft(lg)

    g_st, g_soft = grads(lg)
    np.testing.assert_allclose(g_st, g_soft, rtol=1e-6)
    p = jnp.array([0.3, 0.7])
    np.testing.assert_array_equal(R.bernoulli_st(KEY, p), R.bernoulli(KEY, p, mode="_hard"))


@pytest.mark.slow
def test_straight_through_all():
    p = jnp.array([0.3, 0.7])
    for f in (R.choice_st, R.permutation_st):
        out = f(KEY, jnp.arange(4.0))
        np.testing.assert_array_equal(out, f(KEY, jnp.arange(4.0), mode="_hard"))
    assert R.multinomial_st(KEY, 3, P4).shape == (4,)
    np.testing.assert_array_equal(R.binomial_st(KEY, 5, p), R.binomial(KEY, 5, p, mode="_hard"))
    np.testing.assert_array_equal(R.rademacher_st(KEY, (3,)), R.rademacher(KEY, (3,), mode="_hard"))


def test_errors_and_tracing():
    with pytest.raises(TypeError, match="key"):
        R.categorical(jnp.ones(3), P4)
    with pytest.raises(ValueError, match="mode"):
        R.bernoulli(KEY, 0.5, mode="soft")
    with pytest.raises(ValueError, match="noise"):
        R.categorical(KEY, P4, noise="uniform")
    with pytest.raises(ValueError, match="softness"):
        R.bernoulli(KEY, 0.5, softness=0.0)
    with pytest.raises(ValueError, match="n"):
        R.binomial(KEY, -1, 0.5)
    with pytest.raises(ValueError, match="p"):
        R.bernoulli(KEY, jnp.array([1.5]))
    with pytest.raises(ValueError, match="shape"):
        R.bernoulli(KEY, jnp.ones(3) / 2, (4,))
    traces = []

    @jax.jit
    def f(k, s):
        traces.append(None)
        return R.categorical(k, jnp.log(P4), softness=s)

    a, b = f(KEY, 0.3), f(jax.random.key(5), 0.7)
    assert len(traces) == 1 and a.shape == b.shape == (4,)
    legacy = R.bernoulli(jax.random.PRNGKey(0), 0.5, (3,))
    assert legacy.shape == (3,)


def test_argument_types_and_traced_guards():
    # wrong Python types: TypeError naming the argument (static sizes are Python ints)
    with pytest.raises(TypeError, match="'n'|`n`"):
        R.binomial(KEY, 2.0, 0.5)
    with pytest.raises(TypeError, match="'n'|`n`"):
        R.multinomial(KEY, True, P4)
    with pytest.raises(TypeError, match="n_iters"):
        R.gumbel_sinkhorn(KEY, LA, softness=1.0, n_iters=2.0)
    with pytest.raises(TypeError, match="n_iters"):
        R.permutation(KEY, 4, method="gumbel_sinkhorn", n_iters="20")
    with pytest.raises(TypeError, match="steps"):
        R.linear_schedule(1.0, 0.1, 10.0)
    with pytest.raises(TypeError, match="softness"):
        R.categorical(KEY, P4, softness="0.1")
    with pytest.raises(TypeError, match="start"):
        R.exponential_schedule("1", 0.1, 10)
    # a shape of ints only: a float was truncated (2.5 -> 2), "12" read as (1, 2)
    for bad in ((2.5,), "12", (2, "a")):
        with pytest.raises(TypeError, match="`shape` must be a tuple of ints"), without_jaxtyping():
            R.bernoulli(KEY, 0.3, shape=bad)
    with without_jaxtyping():  # the hook reads tuple[int, ...] as Python ints only
        assert R.bernoulli(KEY, 0.3, shape=(2, np.int64(3))).shape == (2, 3)
    # bad concrete values: ValueError at the call (NaN included)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="softness"):
            R.categorical(KEY, P4, softness=bad)
        with pytest.raises(ValueError, match="softness"):
            R.gumbel_sinkhorn(KEY, LA, softness=bad)
    with pytest.raises(ValueError, match="p"):
        R.bernoulli(KEY, jnp.array([0.5, jnp.nan]))
    with pytest.raises(ValueError, match="p"):
        R.choice(KEY, 4, (2,), p=jnp.array([0.5, -0.1, 0.3, 0.3]))
    with pytest.raises(ValueError, match="log_prob_eps"):
        R.categorical(KEY, P4, return_log_probs=True, log_prob_eps=1.5)
    # traced hyperparameters: a run-time error under jit, never a silent NaN
    cat = jax.jit(
        lambda s, e: R.categorical(KEY, P4, softness=s, return_log_probs=True, log_prob_eps=e)
    )
    ber = jax.jit(lambda p, s: R.bernoulli(KEY, p, (3,), softness=s))
    gs = jax.jit(lambda s: R.gumbel_sinkhorn(KEY, LA[0], softness=s, n_iters=3))
    cho = jax.jit(lambda p: R.choice(KEY, 4, (2,), p=p))
    sched = jax.jit(lambda a: R.exponential_schedule(a, 0.1, 10)(3))
    assert bool(jnp.all(jnp.isfinite(cat(0.5, 1e-3))))
    assert bool(jnp.all(jnp.isfinite(ber(0.3, 0.5))))
    for bad, call in [
        ("softness", lambda: cat(0.0, 1e-3)),
        ("softness", lambda: cat(jnp.nan, 1e-3)),
        ("log_prob_eps", lambda: cat(0.5, 1.5)),
        ("log_prob_eps", lambda: cat(0.5, jnp.nan)),
        ("softness", lambda: ber(0.3, -1.0)),
        ("`p`", lambda: ber(1.5, 0.5)),
        ("`p`", lambda: ber(jnp.nan, 0.5)),
        ("softness", lambda: gs(0.0)),
        ("softness", lambda: gs(jnp.nan)),
        ("`p`", lambda: cho(jnp.array([0.5, -0.1, 0.3, 0.3]))),
        ("start", lambda: sched(-1.0)),
    ]:
        with pytest.raises(Exception, match=bad):  # noqa: B017 (JaxRuntimeError)
            jax.block_until_ready(call())


# ----------------------------------------------------------------------------- rng_mode


@pytest.mark.slow
@pytest.mark.parametrize("rng_mode", ["low", "high"])
def test_rng_mode_frequencies(rng_mode):
    lg = jnp.log(P4)
    h = R.categorical(KEY, lg, shape=(N,), mode="hard", rng_mode=rng_mode)
    hh = R.categorical(KEY, lg, shape=(N,), mode="_hard", rng_mode=rng_mode)
    np.testing.assert_array_equal(h, hh)  # the soft pipeline draws the same Gumbel noise
    assert _chi2_ok(jnp.sum(hh, 0), P4), jnp.sum(hh, 0)
    p = jnp.array([0.05, 0.5, 0.9])
    b = R.bernoulli(KEY, p, (N, 3), rng_mode=rng_mode, mode="_hard")
    np.testing.assert_array_equal(b, R.bernoulli(KEY, p, (N, 3), rng_mode=rng_mode, mode="hard"))
    se = np.sqrt(np.asarray(p) * (1 - np.asarray(p)) / N)
    assert bool(np.all(np.abs(np.asarray(jnp.mean(b, 0)) - np.asarray(p)) < 5 * se))
    # soft samples threshold the same draw: at tiny softness they agree with the hard ones
    s = R.bernoulli(KEY, p, (200, 3), rng_mode=rng_mode, softness=1e-6)
    np.testing.assert_allclose(s, b[:200], atol=1e-3)


@pytest.mark.slow
def test_rng_mode_is_passed_through():
    lg = jnp.log(P4)
    lo = R.categorical(KEY, lg, shape=(64,), mode="_hard", rng_mode="low")
    hi = R.categorical(KEY, lg, shape=(64,), mode="_hard", rng_mode="high")
    assert not bool(jnp.all(lo == hi))  # different draws
    g = jax.random.gumbel(KEY, (64, 4), mode="high")
    np.testing.assert_array_equal(hi, jax.nn.one_hot(jnp.argmax(g + lg[None], -1), 4))
    with pytest.raises(ValueError, match="rng_mode"):
        R.bernoulli(KEY, 0.5, rng_mode="highest")
    with pytest.raises(ValueError, match="rng_mode"):
        R.categorical(KEY, lg, rng_mode="medium")


@pytest.mark.slow
def test_categorical_log_probs():
    lg = jnp.log(P4)
    p = R.categorical(KEY, lg, shape=(6,), softness=0.5, mode="c0")
    lp = R.categorical(KEY, lg, shape=(6,), softness=0.5, mode="c0", return_log_probs=True)
    pos = np.asarray(p) > 0
    assert (~pos).any()
    np.testing.assert_allclose(np.asarray(lp)[pos], np.log(np.asarray(p)[pos]), rtol=1e-5)
    assert bool(jnp.all(jnp.isneginf(lp) == ~pos))
    le = R.categorical(
        KEY, lg, shape=(6,), softness=0.5, mode="c0", return_log_probs=True, log_prob_eps=1e-4
    )
    assert bool(jnp.all(jnp.isfinite(le)))
    np.testing.assert_allclose(jnp.sum(jnp.exp(le), -1), 1.0, atol=1e-5)
    # smooth softsort: the Gumbel-softmax log-weights, finite at tiny softness
    ls = R.categorical(KEY, lg, shape=(6,), softness=1e-3, return_log_probs=True)
    assert bool(jnp.all(jnp.isfinite(ls)))
    np.testing.assert_allclose(jax.nn.logsumexp(ls, -1), 0.0, atol=1e-5)


@pytest.mark.slow
def test_rng_mode_and_log_probs_other_samplers():
    lg = jnp.log(P4)
    s = R.choice(KEY, 4, (8,), p=P4, rng_mode="high", mode="_hard")
    np.testing.assert_array_equal(
        s, jnp.argmax(R.categorical(KEY, lg, shape=(8,), rng_mode="high", mode="_hard"), -1)
    )
    hard = R.categorical(KEY, lg, shape=(6,), mode="hard", return_log_probs=True)
    np.testing.assert_array_equal(jnp.exp(hard), R.categorical(KEY, lg, shape=(6,), mode="hard"))
    k = R.categorical(KEY, lg, shape=(2,), replace=False, return_log_probs=True, mode="c1")
    assert k.shape == (2, 4) and bool(jnp.all(jnp.isneginf(k) | (k <= 0)))


# ----------------------------------------------------------------------------- Gumbel-Sinkhorn

LA = jax.random.normal(jax.random.key(11), (3, 5, 5))


def _brute_force_assignment(z):
    """Max-score permutation matrices of a batch of (n, n) scores, by enumerating all n!
    permutations (independent of the scipy solver that the hard mode calls; n <= 6)."""
    z = np.asarray(z, np.float64)
    n = z.shape[-1]
    assert n <= 6
    perms = np.array(list(itertools.permutations(range(n))))  # (n!, n): row i -> perms[:, i]
    scores = z[..., np.arange(n), perms].sum(-1)  # (..., n!)
    best = np.argmax(scores, -1)
    out = np.zeros(z.shape)
    for b in np.ndindex(z.shape[:-2]):
        out[b][np.arange(n), perms[best[b]]] = 1.0
    return out, np.max(scores, -1)


def _score(P, z):
    return np.sum(np.asarray(P, np.float64) * np.asarray(z, np.float64), axis=(-2, -1))


@pytest.mark.slow
def test_gumbel_sinkhorn_doubly_stochastic():
    P = R.gumbel_sinkhorn(KEY, LA, softness=1.0, n_iters=30)
    assert P.shape == LA.shape and P.dtype == LA.dtype
    assert bool(jnp.all(P >= 0))
    np.testing.assert_allclose(jnp.sum(P, -2), 1.0, atol=1e-5)  # columns: last step
    np.testing.assert_allclose(jnp.sum(P, -1), 1.0, atol=1e-4)  # rows: Sinkhorn tolerance
    # log P straight from the log-domain iterates: finite where exp underflows
    L = R.gumbel_sinkhorn(KEY, 30 * LA, softness=0.01, n_iters=5, return_log_probs=True)
    assert bool(jnp.all(jnp.isfinite(L))) and bool(jnp.any(jnp.exp(L) == 0))
    np.testing.assert_allclose(
        jnp.exp(L), R.gumbel_sinkhorn(KEY, 30 * LA, softness=0.01, n_iters=5), atol=1e-6
    )
    # noise="none" is plain Sinkhorn of log_alpha / softness
    Q = R.gumbel_sinkhorn(KEY, jnp.zeros((4, 4)), softness=0.3, noise="none")
    np.testing.assert_allclose(Q, 0.25, atol=1e-6)


def test_gumbel_sinkhorn_hard_is_exact_assignment():
    z = LA + jax.random.gumbel(KEY, LA.shape)  # the noise gumbel_sinkhorn draws
    ref, best = _brute_force_assignment(z)
    for mode in ("hard", "_hard"):
        P = np.asarray(R.gumbel_sinkhorn(KEY, LA, softness=1.0, mode=mode))
        np.testing.assert_array_equal(np.sort(np.argmax(P, -1), -1), np.tile(np.arange(5), (3, 1)))
        np.testing.assert_allclose(_score(P, z), best, rtol=1e-6)  # optimal total score
        np.testing.assert_array_equal(P, ref)  # and the (almost surely unique) optimum
    # under jit and vmap (one host call per batch); 6 x 6 with ties broken by the scores
    la6 = np.random.default_rng(5).standard_normal((2, 6, 6)).astype(np.float32)
    f = jax.jit(
        jax.vmap(lambda la: R.gumbel_sinkhorn(KEY, la, softness=1.0, mode="hard", noise="none"))
    )
    P6 = f(la6)
    np.testing.assert_allclose(_score(P6, la6), _brute_force_assignment(la6)[1], rtol=1e-6)


@pytest.mark.slow
def test_gumbel_sinkhorn_converges_to_assignment():
    hard = _brute_force_assignment(LA + jax.random.gumbel(KEY, LA.shape))[0]
    errs = [
        float(jnp.max(jnp.abs(R.gumbel_sinkhorn(KEY, LA, softness=t, n_iters=it) - hard)))
        for t, it in ((1.0, 30), (0.1, 100), (0.01, 400))
    ]
    assert errs[0] > errs[1] > errs[2], errs
    assert errs[2] < 0.02, errs
    # the matching read off the small-softness matrix is the exact assignment
    Ps = R.gumbel_sinkhorn(KEY, LA, softness=0.05, n_iters=200)
    np.testing.assert_array_equal(jnp.argmax(Ps, -1), np.argmax(hard, -1))


@pytest.mark.slow
def test_permutation_gumbel_sinkhorn():
    n = 4
    P = R.permutation(KEY, jnp.eye(n), method="gumbel_sinkhorn", softness=0.3, n_iters=50)
    np.testing.assert_allclose(jnp.sum(P, 0), 1.0, atol=1e-4)
    np.testing.assert_allclose(jnp.sum(P, 1), 1.0, atol=1e-4)
    hard = R.permutation(KEY, jnp.eye(n), method="gumbel_sinkhorn", mode="_hard")
    np.testing.assert_array_equal(jnp.sort(jnp.argmax(hard, 1)), jnp.arange(n))
    np.testing.assert_allclose(
        R.permutation(KEY, jnp.eye(n), method="gumbel_sinkhorn", softness=0.01, n_iters=300),
        hard,
        atol=0.02,
    )
    with pytest.raises(ValueError, match="mode"):
        R.permutation(KEY, 4, method="gumbel_sinkhorn", mode="c0")


@pytest.mark.slow
def test_permutation_gumbel_sinkhorn_uniform_and_independent():
    x = jnp.arange(8.0).reshape(2, 4)
    ind = R.permutation(KEY, x, axis=1, independent=True, method="gumbel_sinkhorn", mode="_hard")
    np.testing.assert_array_equal(jnp.sort(ind, 1), x)
    # hard samples of an all-zero log_alpha are uniform permutations
    keys = jax.random.split(KEY, 2000)
    first = jax.vmap(lambda k: R.permutation(k, 4, method="gumbel_sinkhorn", mode="_hard")[0])(keys)
    assert _chi2_ok([int(jnp.sum(first == v)) for v in range(4)], np.full(4, 0.25))


@pytest.mark.slow
def test_gumbel_sinkhorn_st():
    v = R.gumbel_sinkhorn_st(KEY, LA[0], softness=0.5)
    np.testing.assert_array_equal(v, R.gumbel_sinkhorn(KEY, LA[0], softness=0.5, mode="_hard"))
    np.testing.assert_array_equal(v, R.gumbel_sinkhorn(KEY, LA[0], softness=0.5, mode="hard"))
    w = jnp.arange(25.0).reshape(5, 5)
    g_st = jax.grad(lambda la: jnp.sum(R.gumbel_sinkhorn_st(KEY, la, softness=0.5) * w))(LA[0])
    g_soft = jax.grad(lambda la: jnp.sum(R.gumbel_sinkhorn(KEY, la, softness=0.5) * w))(LA[0])
    np.testing.assert_allclose(g_st, g_soft, rtol=1e-5, atol=1e-6)
    # no gradient through the hard assignment
    gr = jax.grad(
        lambda la: jnp.sum(R.gumbel_sinkhorn(KEY, la, softness=1.0, mode="hard") * LA[0])
    )(LA[0])
    np.testing.assert_array_equal(gr, 0.0)


def test_gumbel_sinkhorn_errors():
    with pytest.raises(TypeError, match="log_alpha"):
        R.gumbel_sinkhorn(KEY, np.zeros((3, 4), np.float32), softness=1.0)
    with pytest.raises(ValueError, match="mode"):
        R.gumbel_sinkhorn(KEY, LA, softness=1.0, mode="c0")
    with pytest.raises(ValueError, match="n_iters"):
        R.gumbel_sinkhorn(KEY, LA, softness=1.0, n_iters=0)
    with pytest.raises(ValueError, match="softness"):
        R.gumbel_sinkhorn(KEY, LA, softness=0.0)
    with pytest.raises(ValueError, match="log_alpha"):
        R.gumbel_sinkhorn(KEY, np.full((3, 3), np.nan, np.float32), softness=1.0)
    # -inf (forbidden) entries are floored: never chosen, soft weight ~0 (built in NumPy)
    la = np.zeros((3, 3), np.float32)
    la[0, 0] = -np.inf
    assert float(R.gumbel_sinkhorn(KEY, la, softness=1.0, mode="hard")[0, 0]) == 0.0
    assert float(R.gumbel_sinkhorn(KEY, la, softness=1.0)[0, 0]) < 1e-6


@pytest.mark.slow
def test_schedule_as_traced_softness():
    f = R.exponential_schedule(1.0, 0.01, 100)
    s = jax.jit(lambda t: R.gumbel_sinkhorn(KEY, LA[0], softness=f(t)))(jnp.asarray(3))
    assert s.shape == (5, 5)
    np.testing.assert_allclose(s, R.gumbel_sinkhorn(KEY, LA[0], softness=f(3)), rtol=1e-5)


@pytest.mark.slow
def test_gumbel_sinkhorn_check_grads_x64():
    with jax.enable_x64(True):
        la = jnp.array([[0.2, -0.5, 1.0], [0.3, 0.1, -0.2], [-1.0, 0.4, 0.0]])
        f = jax.jit(lambda v: R.gumbel_sinkhorn(jax.random.key(3), v, softness=0.7, n_iters=10))
        assert f(la).dtype == jnp.float64
        check_grads(f, (la,), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- schedules


def test_temperature_schedules():
    f = R.exponential_schedule(1.0, 0.01, 100)
    np.testing.assert_allclose(
        [f(0), f(50), f(100), f(500), f(-3)], [1.0, 0.1, 0.01, 0.01, 1.0], rtol=1e-5
    )
    np.testing.assert_allclose(jax.jit(f)(jnp.asarray(25)), 10**-0.5, rtol=1e-5)
    lin = R.temperature_schedule(1.0, 0.5, 10, kind="linear")
    np.testing.assert_allclose([lin(0), lin(5), lin(10), lin(20)], [1.0, 0.75, 0.5, 0.5], rtol=1e-6)
    steps = np.arange(0, 101, 10, dtype=np.int32)
    vals = np.asarray(jax.vmap(R.temperature_schedule(2.0, 0.1, 100))(steps))
    assert np.all(np.diff(vals) < 0)  # NumPy: no eager glue programs
    with pytest.raises(ValueError, match="`step`"):  # a NaN softness before (wave 25)
        f(np.float32(np.nan))
    with pytest.raises(Exception, match="`step`"):
        jax.block_until_ready(jax.jit(lin)(np.float32(np.nan)))
    with pytest.raises(ValueError, match="end"):
        R.exponential_schedule(1.0, 0.0, 10)
    with pytest.raises(ValueError, match="steps"):
        R.linear_schedule(1.0, 0.1, 0)
    with pytest.raises(ValueError, match="kind"):
        R.temperature_schedule(1.0, 0.1, 10, kind="cosine")
