"""``return_log_probs`` / ``log_prob_eps`` of the soft-index operators (spec 2.5, pitfall 13)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxkit.soft as S

X = jax.random.normal(jax.random.key(7), (2, 5))

# name -> (fn(x, **kw) -> soft index); every public operator returning a soft index
OPS = {
    "argmax": lambda x, **kw: S.argmax(x, -1, **kw),
    "argmin": lambda x, **kw: S.argmin(x, -1, **kw),
    "argsort": lambda x, **kw: S.argsort(x, -1, **kw),
    "argquantile": lambda x, **kw: S.argquantile(x, 0.3, -1, **kw),
    "argquantile_vec": lambda x, **kw: S.argquantile(x, jnp.array([0.3, 0.5]), -1, **kw),
    "argmedian": lambda x, **kw: S.argmedian(x, -1, **kw),
    "argpercentile": lambda x, **kw: S.argpercentile(x, 70.0, -1, **kw),
    "argtop_k": lambda x, **kw: S.argtop_k(x, 2, **kw),
}
# default run: one cheap configuration per operator (smooth log_softmax rows or sparse c0)
FAST = {
    "argmax": ("softsort", "smooth"),
    "argsort": ("softsort", "c0"),
    "argquantile": ("softsort", "smooth"),
    "argtop_k": ("softsort", "c0"),
}
# slow tier: argsort and argmax (the full soft permutation and the one-row core) for every
# method x soft mode; argquantile (scalar and vector q) and argtop_k for every method in one
# dense (smooth) and one sparse (c0) mode, since their c1 / c2 rows come from the same
# per-method cores; the hard mode (a one-hot, the same for every method) once per operator;
# argmin / argmedian / argpercentile share argmax's / argquantile's jitted core, so one
# method in a dense and a sparse p-norm mode each
MIRRORS = ("argmin", "argmedian", "argpercentile")
BASE = ("argsort", "argmax")


def _slow_modes(op, method):
    if op in MIRRORS:
        return ("smooth", "c1") if method == "neuralsort" else ()
    soft = ("smooth", "c0", "c1", "c2") if op in BASE else ("smooth", "c0")
    return (("hard",) if method == "softsort" else ()) + soft


SLOW = [
    pytest.param(
        op,
        m,
        md,
        # p-norm OT: with the back end's optimisation off, the probs and log-probs programs
        # round differently, and plan entries ~1e-8 (below the float32 solve's absolute
        # resolution ~1e-7 at tol 1e-6) then differ by more than rtol 1e-5 in log; the
        # solve itself converges (tests/soft/test_ot_pnorm_f32.py, tests/README.md)
        marks=[pytest.mark.xla_defaults] if m == "ot" and md != "smooth" else [],
    )
    for op in OPS
    for m in ("softsort", "neuralsort", "ot", "network")
    for md in _slow_modes(op, m)
    if FAST.get(op) != (m, md)
]


def _check_consistent(op, method, mode):
    f = OPS[op]
    p = np.asarray(f(X, method=method, mode=mode), np.float64)
    lp = np.asarray(f(X, method=method, mode=mode, return_log_probs=True), np.float64)
    assert lp.shape == p.shape
    pos = p > 0
    np.testing.assert_allclose(lp[pos], np.log(p[pos]), rtol=1e-5, atol=1e-5)
    # zeros of sparse modes are exactly -inf (nothing else is)
    np.testing.assert_array_equal(np.isneginf(lp), ~pos)
    if mode in ("hard", "c0") and method in ("softsort", "neuralsort", "ot"):
        assert (~pos).any(), "the sparse mode should produce exact zeros here"
    # with eps: finite, exp sums to 1, equals log(max(p, eps) / sum)
    eps = 1e-4
    le = np.asarray(
        f(X, method=method, mode=mode, return_log_probs=True, log_prob_eps=eps), np.float64
    )
    assert np.isfinite(le).all()
    np.testing.assert_allclose(np.exp(le).sum(-1), 1.0, atol=1e-5)
    pf = np.maximum(p, eps)
    np.testing.assert_allclose(le, np.log(pf / pf.sum(-1, keepdims=True)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", list(FAST))
def test_log_probs_match_probs(op):
    _check_consistent(op, *FAST[op])


@pytest.mark.slow
@pytest.mark.parametrize("op,method,mode", SLOW)
def test_log_probs_match_probs_all_methods(op, method, mode):
    _check_consistent(op, method, mode)


def test_smooth_log_softmax_finite_for_huge_gaps():
    x = jnp.array([0.0, 50.0, 100.0])
    kw = dict(softness=0.01, standardize=False)
    # log(softmax) underflows: the reason for computing log_softmax directly
    with np.errstate(divide="ignore"):
        assert np.isneginf(np.log(np.asarray(S.argmax(x, **kw)))).any()
    lp = np.asarray(S.argmax(x, **kw, return_log_probs=True))
    assert np.isfinite(lp).all()
    z = np.array([0.0, 50.0, 100.0]) / 0.01  # the reference in NumPy (float64)
    np.testing.assert_allclose(lp, z - z.max() - np.log(np.exp(z - z.max()).sum()), rtol=1e-6)
    P = S.argsort(x, softness=0.01, standardize=False, method="softsort", return_log_probs=True)
    assert np.isfinite(np.asarray(P)).all()
    np.testing.assert_array_equal(np.argmax(np.asarray(P), -1), np.arange(3))
    # a floor in log space keeps the huge-gap entries at log(eps) after renormalisation
    le = S.argmax(x, **kw, return_log_probs=True, log_prob_eps=1e-3)
    np.testing.assert_allclose(le[:2], np.log(1e-3 / (1 + 2e-3)), rtol=1e-5)


@pytest.mark.slow
def test_smooth_log_softmax_finite_for_huge_gaps_rows():
    x = jnp.array([0.0, 50.0, 100.0])
    P = S.argsort(x, softness=0.01, standardize=False, method="neuralsort", return_log_probs=True)
    assert bool(jnp.all(jnp.isfinite(P)))
    np.testing.assert_array_equal(jnp.argmax(P, -1), jnp.arange(3))
    lq = S.argquantile(x, 0.25, softness=0.01, standardize=False, return_log_probs=True)
    assert bool(jnp.all(jnp.isfinite(lq)))
    np.testing.assert_allclose(jax.nn.logsumexp(lq), 0.0, atol=1e-6)
    lt = S.argtop_k(
        x, 2, softness=0.01, standardize=False, method="softsort", return_log_probs=True
    )
    assert bool(jnp.all(jnp.isfinite(lt)))


@pytest.mark.slow
@pytest.mark.parametrize(
    "fn,mode",
    [
        (lambda x, **kw: S.argmax(x, **kw), "c0"),
        (lambda x, **kw: S.argsort(x, method="softsort", **kw), "c0"),
        (lambda x, **kw: S.argquantile(x, 0.4, method="neuralsort", **kw), "smooth"),
    ],
)
def test_eps_log_probs_check_grads_x64(fn, mode):
    with jax.enable_x64(True):
        x = jnp.array([0.3, -1.2, 0.9, 0.1])
        f = lambda v: fn(v, softness=0.5, mode=mode, return_log_probs=True, log_prob_eps=1e-3)
        out = f(x)
        assert out.dtype == jnp.float64 and bool(jnp.all(jnp.isfinite(out)))
        if mode == "c0":  # the floor is active (sparse zeros) and the gradient stays finite
            assert bool(jnp.any(jnp.isclose(out, jnp.min(out))))
            g = jax.jacrev(f)(x)
            assert bool(jnp.all(jnp.isfinite(g)))
        check_grads(jax.jit(f), (x,), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_eps_log_probs_gradient_finite_in_sparse_mode():
    # floor before the log (pitfall 13): finite although p has exact zeros
    x = np.array([0.3, -1.2, 0.9, 0.1], np.float32)  # checks in NumPy: no eager glue programs
    lp = lambda v, e: S.argmax(v, softness=0.5, mode="c0", return_log_probs=True, log_prob_eps=e)
    assert np.isneginf(lp(x, None)).any()
    g = np.asarray(jax.jit(jax.grad(lambda v: jnp.sum(lp(v, 1e-3) * jnp.arange(4.0))))(x))
    assert np.isfinite(g).all() and (g != 0).any()


def test_smooth_exact_log_probs_gradient_equals_grad_of_log():
    x = jnp.array([0.3, -1.2, 0.9, 0.1])
    # both gradients in one program (eagerly: one program per op of each backward pass)
    g1, g2 = jax.jit(
        lambda x: (
            jax.grad(lambda v: S.argmax(v, return_log_probs=True)[2])(x),
            jax.grad(lambda v: jnp.log(S.argmax(v)[2]))(x),
        )
    )(x)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-6)


def test_top_k_returns_hard_indices_for_every_method():
    # one output structure for every static option, as lax.top_k: (values, int indices)
    want = np.argsort(-np.asarray(X), axis=-1, kind="stable")[:, :2]  # lax.top_k's order
    for method in ("pav", "softsort", "network"):
        v, idx = S.top_k(X, 2, method=method, softness=0.5)
        assert v.shape == idx.shape == (2, 2) and idx.dtype == jnp.int32
        np.testing.assert_array_equal(idx, want)
    with pytest.raises(TypeError, match="return_log_probs"):
        S.top_k(X, 2, return_log_probs=True)


@pytest.mark.slow
def test_log_probs_under_jit():
    f = jax.jit(
        lambda x, s: S.argsort(x, softness=s, mode="c0", return_log_probs=True, log_prob_eps=1e-6)
    )
    out = f(X, 0.3)
    assert bool(jnp.all(jnp.isfinite(out))) and out.shape == (2, 5, 5)
    # the traced softness and a traced eps both work under jit
    g = jax.jit(lambda x, e: S.argmax(x, return_log_probs=True, log_prob_eps=e, mode="c1"))
    np.testing.assert_allclose(jnp.exp(g(X, 1e-5)).sum(-1), 1.0, atol=1e-5)


def test_log_prob_errors():
    with pytest.raises(TypeError, match="return_log_probs"):
        S.argmax(X, return_log_probs=1)
    with pytest.raises(ValueError, match="log_prob_eps"):
        S.argsort(X, return_log_probs=True, log_prob_eps=0.0)
    with pytest.raises(ValueError, match="log_prob_eps"):
        S.argtop_k(X, 2, return_log_probs=True, log_prob_eps=1.5)
