"""Oracles for the fused categorical sampler (jaxkit.kernels.sampling).

* chi-square goodness of fit of the sampled tokens against the exact filtered
  distribution, computed here independently in NumPy (and a power check: the
  test rejects the wrong distribution);
* probability and entropy exact against the NumPy reference;
* equal to ``jax.random.categorical`` with the same key in the plain case;
* Pallas (interpret mode) equal to the reference: same tokens, f32 and bf16;
* limits (greedy, top_k=1, top_p=1, shift invariance), traced hyperparameters,
  masked vocabulary, gradients and errors.
"""

import re

import hypothesis as hp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy import stats as sps

from jaxkit.kernels import sampling
from jaxkit.kernels.sampling import _fused, _hash, _pallas

IMPLS = ["xla", "pallas_interpret"] + (["pallas"] if jax.default_backend() != "cpu" else [])


# ----------------------------------------------------------------- NumPy oracle


def np_filtered(x, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0):
    """Exact filtered distribution of one row, written independently in NumPy."""
    x = np.asarray(x, np.float32)
    v = x.shape[-1]
    if temperature == 0:
        q = np.zeros(v)
        q[np.argmax(x)] = 1.0
        return q
    s = (x / np.float32(temperature)).astype(np.float64)
    e = np.exp(s - s.max())
    keep = np.ones(v, bool)
    if top_k is not None:
        keep &= s >= np.sort(s)[::-1][top_k - 1]
    if top_p < 1:
        order = np.argsort(-s, kind="stable")
        order = order[keep[order]]
        cum = np.cumsum(e[order])
        j = int(np.argmax(cum >= top_p * cum[-1]))
        keep &= s >= s[order[j]]
    keep &= e >= min_p
    q = np.where(keep, e, 0.0)
    return q / q.sum()


def np_entropy(q):
    q = q[q > 0]
    return float(-(q * np.log(q)).sum())


def chi2_pvalue(tokens, q):
    """Goodness-of-fit p-value; bins with expected count < 5 are pooled."""
    n = len(tokens)
    counts = np.bincount(tokens, minlength=len(q)).astype(np.float64)
    assert counts[q == 0].sum() == 0, "sampled a token outside the kept set"
    exp = n * q
    big = exp >= 5
    obs_b, exp_b = list(counts[big]), list(exp[big])
    if exp[~big & (q > 0)].sum() > 0:
        obs_b.append(counts[~big & (q > 0)].sum())
        exp_b.append(exp[~big & (q > 0)].sum())
    if len(obs_b) < 2:
        return 1.0
    exp_b = np.asarray(exp_b)
    exp_b *= np.sum(obs_b) / exp_b.sum()
    return float(sps.chisquare(obs_b, exp_b).pvalue)


# one compiled sampler per (implementation, stats, shape): hyperparameters are traced
_SAMPLERS = {}

# XLA's default back-end optimisation (tests/conftest.py turns it off for the whole suite,
# which is compile-bound). For the chi-square draws (1e5 rows), which run far longer than
# they compile: the same HLO, only its machine code differs (measured, CPU time of one
# "combined" draw: compile 0.6 -> 1.4 s, each run 2.1-2.5 -> 0.6-0.7 s).
RUN_BOUND = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False}


def sampler(impl="xla", stats="sampled", run_bound=False):
    if (impl, stats, run_bound) not in _SAMPLERS:
        _SAMPLERS[impl, stats, run_bound] = jax.jit(
            lambda x, key, t, k, p, mp: sampling.sample_tokens(
                x,
                key=key,
                temperature=t,
                top_k=k,
                top_p=p,
                min_p=mp,
                stats=stats,
                implementation=impl,
            ),
            compiler_options=RUN_BOUND if run_bound else None,
        )
    return _SAMPLERS[impl, stats, run_bound]


def run(x, key, impl="xla", stats="sampled", run_bound=False, **cfg):
    """Call the shared compiled sampler with per-row hyperparameter arrays."""
    r, v = x.shape
    full = dict(temperature=1.0, top_k=None, top_p=1.0, min_p=0.0) | cfg
    k = v if full["top_k"] is None else full["top_k"]
    f32 = lambda a: jnp.full((r,), a, jnp.float32)  # noqa: E731
    return sampler(impl, stats, run_bound)(
        x,
        key,
        f32(full["temperature"]),
        jnp.full((r,), k, jnp.int32),
        f32(full["top_p"]),
        f32(full["min_p"]),
    )


_draw = sampler()

CONFIGS = {
    "plain": dict(),
    "temperature": dict(temperature=0.6),
    "top_k": dict(top_k=7),
    "top_p": dict(top_p=0.8),
    "min_p": dict(min_p=0.05, temperature=1.4),
    "combined": dict(temperature=0.9, top_k=20, top_p=0.9, min_p=0.01),
}
V, N = 50, 100_000  # spec 2.4: 1e5 draws, V = 50


def _draw_many(row, key, cfg):
    return run(jnp.broadcast_to(jnp.asarray(row), (N, V)), key, run_bound=True, **cfg)


@pytest.fixture(scope="module")
def row():
    return 1.5 * np.random.default_rng(0).standard_normal(V).astype(np.float32)


FAST = ("plain", "top_p", "combined")  # the others run with `make test-slow`


@pytest.mark.parametrize(
    "name",
    [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CONFIGS)],
)
def test_chi_square_matches_exact_filtered_distribution(name, row):
    # 6 configs at level 1e-4 each: flake probability <= 6e-4 (and keys are fixed).
    # 1e5 draws over V = 50 (spec 2.4).
    cfg = CONFIGS[name]
    out = _draw_many(row, jax.random.key(17), cfg)
    q = np_filtered(row, **cfg)
    p = chi2_pvalue(np.asarray(out.token), q)
    assert p > 1e-4, f"{name}: chi-square p = {p:.3g}"
    # the library's own exact distribution agrees with the NumPy oracle
    lib = sampling.filtered_probabilities(row, **cfg)
    np.testing.assert_allclose(np.asarray(lib), q, atol=2e-6)


def test_chi_square_has_power(row):
    # the same test rejects the unfiltered distribution for top_p draws
    out = _draw_many(row, jax.random.key(18), dict(top_p=0.7))
    with pytest.raises(AssertionError, match="outside the kept set"):
        chi2_pvalue(np.array([int(np.argmin(row))]), np_filtered(row, top_p=0.7))
    p = chi2_pvalue(np.asarray(out.token), np_filtered(row, temperature=1.1, top_p=0.7))
    assert p < 1e-6


@pytest.mark.parametrize("impl", ["xla", "pallas_interpret"])
@pytest.mark.parametrize("stats", ["sampled", "logits"])
def test_probability_and_entropy_exact(impl, stats, key):
    kx, ks = jax.random.split(key)
    x = 2.0 * jax.random.normal(kx, (8, 24), jnp.float32)
    cfgs = [
        dict(),
        dict(temperature=0.7, top_k=5),
        dict(top_p=0.6),
        dict(min_p=0.1),
        dict(temperature=0.0),
        dict(temperature=1.3, top_k=9, top_p=0.8, min_p=0.02),
    ]
    if impl != "xla":
        cfgs = cfgs[-2:]  # interpret mode is slow; the kernel == reference test covers more
    for cfg in cfgs:
        out = run(x, ks, impl, stats, **cfg)
        for r in range(x.shape[0]):
            q = np_filtered(np.asarray(x[r]), **cfg)
            if stats == "logits":
                q_stat = np_filtered(np.asarray(x[r]))
            else:
                q_stat = q
            tok = int(out.token[r])
            assert q[tok] > 0, (cfg, "token outside the kept set")
            np.testing.assert_allclose(
                float(out.probability[r]),
                q_stat[tok],
                rtol=2e-5,
                atol=1e-7,
                err_msg=str(cfg),
            )
            np.testing.assert_allclose(
                float(out.entropy[r]),
                np_entropy(q_stat),
                rtol=2e-5,
                atol=2e-6,
                err_msg=str(cfg),
            )


def test_plain_equals_jax_random_categorical(key):
    kx, ks = jax.random.split(key)
    x = 3.0 * jax.random.normal(kx, (4, 6, 33), jnp.float32)  # extra batch axis
    f = jax.jit(lambda x, t: sampling.sample_tokens(x, key=ks, temperature=t).token)
    g = jax.jit(lambda x, t: jax.random.categorical(ks, x / t))
    for t in (1.0, 0.7, 2.5):
        np.testing.assert_array_equal(np.asarray(f(x, t)), np.asarray(g(x, t)))


@pytest.mark.parametrize(
    "impl",
    # the kernel's own path equals the reference in test_pallas_interpret_equals_reference;
    # its filter-free form (interpret mode, ~1.6 s) runs in the slow tier
    ["xla", pytest.param("pallas_interpret", marks=pytest.mark.slow)],
)
def test_filter_free_path_equals_filtered_path(impl, key):
    # top_k=None with top_p, min_p at their defaults takes the filter-free path (decided at
    # trace time: no bisection loop in the program); traced filters that are off take the
    # filtered one. Same token, probability and entropy, ties to the lowest index
    # (logits on a coarse grid), masked columns, per-row temperature with greedy rows.
    kx, ks = jax.random.split(key)
    plain = jax.jit(
        lambda x, key, t, mode: sampling.sample_tokens(
            x, key=key, temperature=t, stats=mode, implementation=impl
        ),
        static_argnums=3,
    )
    cases = {
        "xla": ((jnp.float32, "sampled"), (jnp.float32, "logits"), (jnp.float64, "sampled")),
        "pallas_interpret": ((jnp.bfloat16, "sampled"), (jnp.float32, "logits")),
    }[impl]
    # the inputs are built in NumPy (eager jax.numpy glue would compile op by op, per dtype)
    x32 = np.round(2.0 * np.asarray(jax.random.normal(kx, (3, 8, 13), jnp.float32))) / 2
    x32[..., 4] = -np.inf
    t = np.full((3, 8), 0.8, np.float32)
    t[0, :3], t[1] = 0.0, 1.0
    off = (np.full((3, 8), 13, np.int32), np.ones((3, 8), np.float32), np.zeros((3, 8), np.float32))
    for dtype, mode in cases:
        with jax.enable_x64(dtype == jnp.float64):
            x = jnp.asarray(x32.astype(jnp.dtype(dtype)))
            got = plain(x, ks, t, mode)
            want = sampler(impl, mode)(x, ks, t, *off)
            assert got.token.shape == (3, 8) and got.probability.dtype == dtype
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=mode)
            greedy = np.argmax(np.asarray(x, np.float32)[0, :3], -1)
            np.testing.assert_array_equal(np.asarray(got.token)[0, :3], greedy)
    x = jnp.zeros((2, 5))
    loop = re.compile(r"\b(while|scan)\[")  # the bisection: a static-trip fori_loop (scan)
    plain_jaxpr = str(jax.make_jaxpr(lambda x: sampling.sample_tokens(x, key=ks))(x))
    assert not loop.search(plain_jaxpr)
    top_p = np.ones(2, np.float32)  # concrete and off: still the filter-free path
    jp = str(jax.make_jaxpr(lambda x: sampling.sample_tokens(x, key=ks, top_p=top_p))(x))
    assert not loop.search(jp)
    jp = str(jax.make_jaxpr(lambda x: sampling.sample_tokens(x, key=ks, top_p=0.9))(x))
    assert loop.search(jp)  # the control: a filter on runs the bisection
    with pytest.raises(TypeError, match="top_p"):  # shapes are still checked
        sampling.sample_tokens(x, key=ks, top_p=np.ones(3))


def test_bf16_documented_difference_from_categorical(key):
    # bf16 logits: we add f32 noise to f32 logits; jax.random.categorical adds bf16
    # noise in bf16. Ours equals categorical on the f32 upcast, token for token.
    kx, ks = jax.random.split(key)
    x = (3.0 * jax.random.normal(kx, (64, 40))).astype(jnp.bfloat16)
    got = jax.jit(lambda x: sampling.sample_tokens(x, key=ks))(x)
    want = jax.jit(lambda x: jax.random.categorical(ks, x.astype(jnp.float32)))(x)
    np.testing.assert_array_equal(np.asarray(got.token), np.asarray(want))
    assert got.probability.dtype == jnp.bfloat16 and got.token.dtype == jnp.int32


@pytest.mark.parametrize(("dtype", "block_r"), [(jnp.float32, 4), (jnp.bfloat16, 1)])
def test_pallas_interpret_equals_reference(dtype, block_r, key):
    kx, ks = jax.random.split(key)
    # vocab padded to 64 inside the kernel; 2 row blocks, or 8 of one row (the GPU layout);
    # the public API below takes the default block (all 8 rows in one)
    r, v = 8, 40
    x = (2.0 * jax.random.normal(kx, (r, v))).astype(dtype)
    rng = np.random.default_rng(1)
    t = rng.uniform(0.5, 1.5, r).astype(np.float32)
    t[0] = 0.0
    k = rng.integers(1, v + 1, r).astype(np.int32)
    p = rng.uniform(0.3, 1.0, r).astype(np.float32)
    p[1] = 1.0
    mp = rng.uniform(0.0, 0.2, r).astype(np.float32)
    t, k, p, mp = map(jnp.asarray, (t, k, p, mp))  # built in NumPy: no eager op compiles
    args = (x, jax.random.gumbel(ks, (r, v), jnp.float32), t, k, p, mp)
    want = jax.jit(sampling.sample_rows_reference)(*args)  # one program, not one per op
    # noise in-kernel from the key (threefry hash, flat index row * V + col), and,
    # for one block size, noise read from HBM (the path for f64 / non-threefry keys)
    noises = [jax.random.key_data(ks)] + ([args[1]] if dtype == jnp.float32 else [])
    for noise in noises:
        got = _pallas.sample_rows_pallas(x, noise, *args[2:], block_r=block_r, interpret=True)
        np.testing.assert_array_equal(np.asarray(got.token), np.asarray(want.token))
        np.testing.assert_allclose(got.probability, want.probability, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.entropy, want.entropy, rtol=1e-5, atol=1e-5)
    if dtype != jnp.bfloat16:
        return
    # and through the public API (per-row hyperparameters)
    api = sampling.sample_tokens(
        x,
        key=ks,
        temperature=t,
        top_k=k,
        top_p=p,
        min_p=mp,
        implementation="pallas_interpret",
    )
    np.testing.assert_array_equal(np.asarray(api.token), np.asarray(want.token))
    assert api.probability.dtype == dtype


def test_xla_path_equals_sort_reference(key):
    # implementation="xla" runs the sort-free bisection (_fused) on the whole array;
    # the sort-based reference is the spec: same tokens, same statistics.
    ks = jax.random.fold_in(key, 1)
    r, v = 64, 40
    # the inputs built in NumPy (eager jax.numpy glue would compile op by op)
    rng = np.random.default_rng(3)
    x = jnp.asarray(2.0 * rng.standard_normal((r, v)), jnp.float32)
    u = rng.uniform(size=(4, r))
    t, p, mp = (0.5 + u[0]), (0.2 + 0.8 * u[2]), (0.2 * u[3])
    k = 1 + (u[1] * v).astype(np.int32)
    t[:4], k[4:8], p[8:12], mp[12:16] = 0.0, v, 1.0, 0.0
    t, p, mp = (jnp.asarray(a, jnp.float32) for a in (t, p, mp))
    k = jnp.asarray(k, jnp.int32)
    for stats in ("sampled",):  # "logits" stats: test_probability_and_entropy_exact
        got = sampler("xla", stats)(x, ks, t, k, p, mp)
        want = jax.jit(
            lambda x, g, st=stats: sampling.sample_rows_reference(x, g, t, k, p, mp, stats=st)
        )(x, jax.random.gumbel(ks, (r, v), jnp.float32))
        np.testing.assert_array_equal(np.asarray(got.token), np.asarray(want.token))
        np.testing.assert_allclose(got.probability, want.probability, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got.entropy, want.entropy, rtol=1e-5, atol=1e-5)


def test_counter_hash_is_jax_random_gumbel_bit_for_bit(key):
    shape = (6, 50)
    idx = jnp.arange(300, dtype=jnp.uint32).reshape(shape)
    kd = jax.random.key_data(key)
    got = jax.jit(_hash.gumbel_f32)(kd[0], kd[1], idx)
    np.testing.assert_array_equal(
        np.asarray(got), np.asarray(jax.random.gumbel(key, shape, jnp.float32))
    )
    # the flat layout: noise over (*batch, V) equals noise over (R, V)
    np.testing.assert_array_equal(
        np.asarray(jax.random.gumbel(key, (2, 3, 50))).reshape(shape),
        np.asarray(jax.random.gumbel(key, shape)),
    )


def test_threefry_fold_in_is_jax_random_fold_in_bit_for_bit(key):
    # the decoders' step keys (jaxkit._threefry.fold_in), eager and traced
    from jaxkit._threefry import fold_in

    data = np.array([0, 1, 69, 2**31 - 1], np.int32)
    want = np.stack(
        [np.asarray(jax.random.key_data(jax.random.fold_in(key, int(d)))) for d in data]
    )
    got = jax.jit(jax.vmap(lambda d: jax.random.key_data(fold_in(key, d))))(data)
    np.testing.assert_array_equal(np.asarray(got), want)
    rbg = jax.random.key(3, impl="rbg")  # other PRNGs: jax.random itself
    np.testing.assert_array_equal(
        np.asarray(jax.random.key_data(fold_in(rbg, 5))),
        np.asarray(jax.random.key_data(jax.random.fold_in(rbg, 5))),
    )


def test_xla_path_noise_is_jax_random_gumbel(key):
    # the XLA path hashes its noise (threefry keys): the same tokens as explicit
    # jax.random.gumbel noise through the fused block, batch axes flattened row-major
    x = jax.random.normal(jax.random.key(5), (2, 3, 40), jnp.float32)
    got = jax.jit(lambda x, k: sampling.sample_tokens(x, key=k, temperature=0.7, top_p=0.9).token)(
        x, key
    )
    g = jax.random.gumbel(key, x.shape, jnp.float32).reshape(6, 40)
    t, p = np.full(6, 0.7, np.float32), np.full(6, 0.9, np.float32)
    k, mp = np.full(6, 40, np.int32), np.zeros(6, np.float32)
    want = jax.jit(
        lambda x, g, t, k, p, mp: (
            _fused.sample_block(x, g, t, k, p, mp, stats="sampled", vocab=40).token
        )
    )(x.reshape(6, 40), g, t, k, p, mp)
    np.testing.assert_array_equal(np.asarray(got).reshape(-1), np.asarray(want))


def test_greedy_under_jit_without_retrace(key):
    x = jax.random.normal(key, (16, 30), jnp.float32)
    traces = []

    @jax.jit
    def f(x, t):
        traces.append(None)
        return sampling.sample_tokens(x, key=jax.random.key(3), temperature=t)

    g = f(x, jnp.full((16,), 0.0, jnp.float32))
    np.testing.assert_array_equal(np.asarray(g.token), np.asarray(jnp.argmax(x, -1)))
    np.testing.assert_array_equal(np.asarray(g.probability), 1.0)
    np.testing.assert_array_equal(np.asarray(g.entropy), 0.0)
    s = f(x, jnp.full((16,), 1.0, jnp.float32))
    assert not np.array_equal(np.asarray(s.token), np.asarray(g.token))
    # per-row temperatures: greedy rows and sampled rows in one call
    t = jnp.where(jnp.arange(16) % 2 == 0, 0.0, 1.0).astype(jnp.float32)
    m = f(x, t)
    np.testing.assert_array_equal(np.asarray(m.token[::2]), np.asarray(g.token[::2]))
    np.testing.assert_array_equal(np.asarray(m.token[1::2]), np.asarray(s.token[1::2]))
    assert len(traces) == 1  # temperature 0 and 1 (and per-row mixes) share one trace


@pytest.mark.parametrize("impl", ["xla", "pallas_interpret"])
def test_limits(impl, key):
    kx, ks = jax.random.split(key)
    x = 2.0 * jax.random.normal(kx, (8, 24), jnp.float32)
    am = np.asarray(jnp.argmax(x, -1))
    top1 = run(x, ks, impl, top_k=1)
    np.testing.assert_array_equal(np.asarray(top1.token), am)
    np.testing.assert_allclose(np.asarray(top1.probability), 1.0)
    plain = run(x, ks, impl)
    full = run(x, ks, impl, top_p=1.0, top_k=24, min_p=0.0)
    for a, b in zip(plain, full, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if impl == "xla":  # equal to categorical (the kernel equals the reference)
        np.testing.assert_array_equal(
            np.asarray(plain.token), np.asarray(jax.random.categorical(ks, x))
        )
    shifted = run(x + 3.0, ks, impl, top_p=0.8)
    base = run(x, ks, impl, top_p=0.8)
    np.testing.assert_array_equal(np.asarray(shifted.token), np.asarray(base.token))
    np.testing.assert_allclose(shifted.entropy, base.entropy, rtol=1e-5)


def test_traced_top_k_no_recompile(key):
    kx, ks = jax.random.split(key)
    x = jax.random.normal(kx, (2000, 12), jnp.float32)
    traces = []

    @jax.jit
    def f(k):
        traces.append(None)
        return sampling.sample_tokens(x, key=ks, top_k=k).token

    for k in (1, 3):
        tok = np.asarray(f(jnp.int32(k)))
        ranks = np.argsort(np.argsort(-np.asarray(x), axis=-1), axis=-1)
        assert np.all(np.take_along_axis(ranks, tok[:, None], -1) < k)
        assert len(np.unique(tok)) > 3  # rows differ, so many distinct tokens
    assert len(traces) == 1


@pytest.mark.parametrize("impl", ["xla", "pallas_interpret"])
def test_masked_vocabulary_never_sampled(impl, key):
    kx, ks = jax.random.split(key)
    x = jax.random.normal(kx, (8, 24), jnp.float32)
    x = x.at[:, ::3].set(-jnp.inf)
    out = run(x, ks, impl, top_k=24, top_p=0.95)
    assert np.all(np.asarray(out.token) % 3 != 0)
    assert np.all(np.isfinite(np.asarray(out.entropy)))


_filtered = jax.jit(
    lambda x, t, k, p, mp: sampling.filtered_probabilities(
        x, temperature=t, top_k=k, top_p=p, min_p=mp
    )
)


@hp.settings(max_examples=25)
@hp.given(
    seed=st.integers(0, 2**16),
    t=st.floats(0.05, 3.0),
    k=st.integers(1, 12),
    p=st.floats(0.05, 1.0),
    mp=st.floats(0.0, 0.5),
)
def test_token_in_support_and_stats_consistent(seed, t, k, p, mp):
    x = np.random.default_rng(seed).standard_normal((4, 12)).astype(np.float32) * 2
    out = _draw(
        jnp.asarray(x),
        jax.random.key(seed),
        jnp.float32(t),
        jnp.int32(k),
        jnp.float32(p),
        jnp.float32(mp),
    )
    q = np.asarray(_filtered(x, jnp.float32(t), jnp.int32(k), jnp.float32(p), jnp.float32(mp)))
    tok = np.asarray(out.token)
    qt = q[np.arange(4), tok]
    assert np.all(qt > 0)
    np.testing.assert_allclose(np.asarray(out.probability), qt, rtol=1e-5)
    n_kept = (q > 0).sum(-1)
    assert np.all(np.asarray(out.entropy) <= np.log(n_kept) + 1e-5)
    assert np.all(np.asarray(out.entropy) >= -1e-6)


def test_grads_pallas_equal_reference(key):
    kx, ks = jax.random.split(key)
    x = jax.random.normal(kx, (8, 16), jnp.float32)

    def loss(impl):
        def f(x, t):
            o = sampling.sample_tokens(x, key=ks, temperature=t, top_p=0.9, implementation=impl)
            return jnp.sum(o.probability) + jnp.sum(o.entropy)

        return jax.jit(jax.grad(f, argnums=(0, 1)))(x, jnp.float32(0.8))

    gx_ref, gt_ref = loss("xla")
    gx, gt = loss("pallas_interpret")
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gt, gt_ref, rtol=1e-5, atol=1e-6)
    assert np.max(np.abs(np.asarray(gx_ref))) > 0  # in NumPy: no eager op compiles


@pytest.mark.slow
def test_check_grads_reference_x64_logits_stats(key):
    # ("sampled" stats are checked by the conformance case, in both modes)
    with jax.enable_x64(True):
        x = jax.random.normal(key, (3, 8), jnp.float64)

        def f(x):
            o = sampling.sample_tokens(
                x,
                key=jax.random.key(5),
                temperature=0.9,
                top_k=6,
                stats="logits",
                implementation="xla",
            )
            return o.probability, o.entropy

        check_grads(jax.jit(f), (x,), order=1, modes=("fwd", "rev"))


# ----------------------------------------------------------------- errors


def test_errors_name_the_argument(key):
    x = jax.random.normal(key, (4, 10), jnp.float32)
    k = jax.random.key(1)
    with pytest.raises(TypeError, match="logits"):
        sampling.sample_tokens(jnp.ones((4, 10), jnp.int32), key=k)
    for kw, name in [
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.2), "top_p"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=11), "top_k"),
        (dict(top_k=0), "top_k"),
        (dict(min_p=-0.1), "min_p"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=float("nan")), "top_p"),
        (dict(min_p=float("nan")), "min_p"),
        (dict(temperature=float("inf")), "temperature"),  # was a silent uniform draw
    ]:
        with pytest.raises(ValueError, match=name):
            sampling.sample_tokens(x, key=k, **kw)
    with pytest.raises(ValueError, match="logits"):
        sampling.sample_tokens(x.at[1, 2].set(jnp.nan), key=k)
    with pytest.raises(TypeError, match="temperature"):
        sampling.sample_tokens(x, key=k, temperature=jnp.ones(3))
    with pytest.raises(TypeError):
        sampling.sample_tokens(x, key=k, top_k=2.5)
    with pytest.raises(TypeError, match="`logits` must hold at least one row"):
        sampling.sample_tokens(x[:0], key=k)  # was NumPy's "zero-size array" error


def test_traced_bad_values_raise_at_runtime(key):
    x = jax.random.normal(key, (4, 10), jnp.float32)
    k = jax.random.key(1)
    f = jax.jit(
        lambda x, t, p, mp: sampling.sample_tokens(x, key=k, temperature=t, top_p=p, min_p=mp)
    )
    jax.block_until_ready(f(x, 1.0, 0.9, 0.1))
    nan = float("nan")
    # NaN compares False: the guards are written as ~(ok), so NaN fails them too
    for args, name in [
        ((-1.0, 0.9, 0.1), "temperature"),
        ((nan, 0.9, 0.1), "temperature"),
        ((float("inf"), 0.9, 0.1), "temperature"),
        ((1.0, 0.0, 0.1), "top_p"),
        ((1.0, nan, 0.1), "top_p"),
        ((1.0, 0.9, 1.5), "min_p"),
        ((1.0, 0.9, nan), "min_p"),
    ]:
        with pytest.raises(Exception, match=name):
            jax.block_until_ready(f(x, *args))
    with pytest.raises(Exception, match="logits"):
        jax.block_until_ready(f(x.at[0, 0].set(jnp.nan), 1.0, 0.9, 0.1))
    g = jax.jit(lambda x, t: sampling.filtered_probabilities(x, temperature=t))
    with pytest.raises(Exception, match="temperature"):
        jax.block_until_ready(g(x, nan))


def test_pallas_inside_shard_map(key, mesh8):
    x = jax.random.normal(key, (8, 16), jnp.float32)

    def local(x, k):
        k = jax.random.fold_in(k, jax.lax.axis_index("data"))  # distinct noise per shard
        return tuple(sampling.sample_tokens(x, key=k, top_p=0.9, implementation="pallas_interpret"))

    # check_vma=False: pallas_call's interpret mode mixes varying and invariant
    # values (jax's own advice for kernels inside shard_map)
    f = jax.shard_map(
        local,
        mesh=mesh8,
        in_specs=(jax.P("data", None), jax.P()),
        out_specs=jax.P("data"),
        check_vma=False,
    )
    with jax.set_mesh(mesh8):
        xs = jax.device_put(x, jax.NamedSharding(mesh8, jax.P("data", None)))
        tok, prob, _ = jax.jit(f)(xs, jax.random.key(2))
        assert tok.sharding.spec[0] == "data"
        with pytest.raises(NotImplementedError, match="shard_map"):
            jax.jit(
                lambda a: sampling.sample_tokens(
                    a, key=jax.random.key(2), implementation="pallas_interpret"
                )
            )(xs)
    q = np.asarray(sampling.filtered_probabilities(x, top_p=0.9))  # gathered in NumPy
    np.testing.assert_allclose(prob, q[np.arange(8), np.asarray(tok)], rtol=1e-5)

    def local_xla(x, k):  # the reference works with the default check_vma=True
        k = jax.random.fold_in(k, jax.lax.axis_index("data"))
        return tuple(sampling.sample_tokens(x, key=k, top_p=0.9, implementation="xla"))

    g = jax.shard_map(
        local_xla,
        mesh=mesh8,
        in_specs=(jax.P("data", None), jax.P()),
        out_specs=jax.P("data"),
    )
    with jax.set_mesh(mesh8):
        tok2, _, _ = jax.jit(g)(xs, jax.random.key(2))
    np.testing.assert_array_equal(np.asarray(tok2), np.asarray(tok))


def test_auto_runs_the_kernel_on_gpu_and_tpu_only(monkeypatch, key):
    # "auto" takes the Pallas kernel on TPU and GPU (the H200 run: it compiles with Triton,
    # agrees with the jnp path and is faster; kernels/README.md) and the jnp path on CPU.
    from jaxkit.kernels.sampling import _api

    def kernel_called(*args, **kwargs):
        raise AssertionError("kernel called")

    monkeypatch.setattr(_api, "_kernel_with_vjp", kernel_called)
    x = jax.random.normal(key, (3, 37))
    got = sampling.sample_tokens(x, key=key, top_k=5)  # cpu: the jnp path, no kernel call
    want = sampling.sample_tokens(x, key=key, top_k=5, implementation="xla")
    np.testing.assert_array_equal(np.asarray(got.token), np.asarray(want.token))
    for backend, cols in (("gpu", 36), ("tpu", 35)):  # shapes no other test traces
        monkeypatch.setattr(jax, "default_backend", lambda b=backend: b)
        with pytest.raises(AssertionError, match="kernel called"):
            sampling.sample_tokens(x[:, :cols], key=key, top_k=5)
