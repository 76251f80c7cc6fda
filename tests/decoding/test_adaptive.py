"""The adaptive window of wedlm_generate (``min_accept``): AR fallback and probe schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import io
from jaxkit.decoding import _adaptive, ar_generate, wedlm_generate
from jaxkit.decoding import _counting as C
from jaxkit.decoding import _wedlm as W
from jaxkit.decoding._common import Sampling, finalize, step_key
from tests.decoding import _reference as R
from tests.decoding._models import MASK, prompts, tiny

N = 8


def _gen(params, cfg, pr, pl, **kw):
    kw.setdefault("key", jax.random.key(0))
    kw.setdefault("mask_token_id", MASK)
    kw.setdefault("max_new_tokens", N)
    kw.setdefault("window", 4)
    if "min_accept" in kw:
        kw.setdefault("probe_every", N)  # one compiled program across the tests
    return wedlm_generate(params, cfg, pr, pl, **kw)


def test_forced_fallback_gives_ar_greedy_tokens():
    # min_accept above the window: every row starts like AR and never probes within N
    # steps (probe_every=N), so the tokens are the next-token greedy chain (no-cache reference) and
    # the forward count is AR's, N - 1; plain WeDLM on this model decodes differently.
    params, cfg = tiny(3)
    pr, pl = prompts(3, 2, 5, [5, 2])
    got = _gen(params, cfg, pr, pl, entropy_threshold=0.4, min_accept=5.0)
    ar = ar_generate(params, cfg, pr, pl, key=jax.random.key(0), max_new_tokens=N)
    for b in range(2):
        want = R.ar_greedy_row(params, cfg, R.prompt_row(pr, pl, b), n_new=N)
        np.testing.assert_array_equal(got.tokens[b], want)
    np.testing.assert_array_equal(got.tokens, ar.tokens)
    assert int(got.stats.n_forward) == N - 1
    np.testing.assert_array_equal(got.stats.row_forwards, ar.stats.row_forwards)
    plain = _gen(params, cfg, pr, pl, entropy_threshold=0.4)
    assert not np.array_equal(plain.tokens, ar.tokens)


def test_zero_min_accept_is_plain_wedlm():
    # acceptance is never below 0: the adaptive loop runs exactly the window steps
    params, cfg = tiny(4)
    pr, pl = prompts(4, 2, 5, [5, 3])
    for tau in (0.4, 1.5):
        want = _gen(params, cfg, pr, pl, entropy_threshold=tau)
        got = _gen(params, cfg, pr, pl, entropy_threshold=tau, min_accept=0.0)
        assert int(got.stats.n_forward) == int(want.stats.n_forward)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.stats.row_forwards, want.stats.row_forwards)


def test_first_fallback_run_outside_the_loop():
    # wedlm_generate runs the first stretch of one-token steps before its main loop, as
    # ar_run(go=use_single): go=False must leave the state exactly as it was, go=True must
    # be the main loop's ar_run (the same steps, tokens and counters).
    params, cfg = tiny(3)
    pr, pl = prompts(3, 2, 5, [5, 2])
    key = jax.random.key(0)
    z = jnp.float32(0.0)
    samp = Sampling(z, jnp.int32(cfg.vocab_size), z + 1, z)

    @jax.jit
    def run(min_accept):
        o = W._Options(MASK, N, 4, (), z + 1.5, z + 0.02, samp, True, min_accept, 3)
        s = W._init_state(params, cfg, pr, pl, key, o, max_len=5 + N, pad_token_id=0)
        args = (params, cfg, s, pl, key, o)
        runs = [_adaptive.ar_run(*args, go=jnp.asarray(g)) for g in (False, True)]
        return s, runs, _adaptive.ar_run(*args)

    s, (off, _), _ = run(jnp.float32(0.0))  # no row starts like AR: a window is decided
    assert int(np.sum(s.filled)) > 2
    for a, b in zip(jax.tree.leaves(off), jax.tree.leaves(s), strict=True):
        np.testing.assert_array_equal(a, b)
    s, (off, on), plain = run(jnp.float32(5.0))  # every row starts like AR
    assert int(plain.n_forward) == 3  # probe_every one-token steps ran
    for a, b in zip(jax.tree.leaves(off), jax.tree.leaves(s), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(on), jax.tree.leaves(plain), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # ~5 s; make test keeps the forced-fallback and min_accept=0 equalities
def test_loops_follow_the_step_rule():
    # The decoder runs its window steps and one-token runs as separate loops; the rule is
    # one choice per step: ar_run while use_single, else one tracked window step. A batch
    # whose rows switch modes several times (probe_every=2) decodes as that rule does.
    params, cfg = tiny(5)
    pr, pl = prompts(5, 3, 5, [5, 3, 4])
    key = jax.random.key(1)
    kw = dict(entropy_threshold=0.4, min_accept=2.0, probe_every=2, temperature=0.7, key=key)
    got = _gen(params, cfg, pr, pl, **kw)
    z = jnp.float32(0.0)
    samp = Sampling(z + 0.7, jnp.int32(cfg.vocab_size), z + 1, z)
    cap = 2 * (N + 4 + 1)

    @jax.jit
    def rule():
        o = W._Options(MASK, N, 4, (), z + 0.4, z + 0.02, samp, False, z + 2.0, 2)
        s = W._init_state(params, cfg, pr, pl, step_key(key, cap), o, max_len=5 + N, pad_token_id=0)

        def body(c):
            s, n_ar, n_win = c
            single = _adaptive.use_single(s, o)
            s = jax.lax.cond(
                single,
                lambda s: _adaptive.ar_run(params, cfg, s, pl, key, o),
                lambda s: W._tracked_step(params, cfg, s, pl, step_key(key, s.n_forward), o),
                s,
            )
            return s, n_ar + single.astype(jnp.int32), n_win + (~single).astype(jnp.int32)

        more = lambda c: jnp.any(~c[0].done) & (c[0].n_forward < cap)  # noqa: E731
        s, n_ar, n_win = jax.lax.while_loop(more, body, (s, jnp.int32(0), jnp.int32(0)))
        return finalize(s.out, s.n_gen, (), 0), s.n_forward, s.row_forwards, n_ar, n_win

    (tokens, lengths), n_forward, rows, n_ar, n_win = rule()
    assert int(n_ar) >= 2 and int(n_win) >= 2  # the rows did switch modes
    np.testing.assert_array_equal(got.tokens, tokens)
    np.testing.assert_array_equal(got.lengths, lengths)
    assert int(got.stats.n_forward) == int(n_forward)
    np.testing.assert_array_equal(got.stats.row_forwards, rows)


def test_schedule_by_hand():
    # acceptance average (a + d) / 2; a failed probe doubles the gap, success resets it
    z = jnp.zeros(2, bool)

    def step(a, d, since, gap):
        acc, g = _adaptive.schedule(
            jnp.asarray(a, jnp.float32), jnp.asarray(d), z, z, since, gap, 2.0, 4, 16
        )
        return np.asarray(acc).tolist(), int(g)

    assert step([4.0, 4.0], [4, 3], 0, 4) == ([4.0, 3.5], 4)  # high: window mode, gap reset
    assert step([3.0, 1.0], [1, 1], 0, 4) == ([2.0, 1.0], 4)  # one row still >= 2: no switch
    assert step([2.0, 1.0], [1, 1], 0, 4) == ([1.5, 1.0], 4)  # all low: switch, gap kept
    assert step([1.5, 1.0], [1, 2], 4, 4) == ([1.25, 1.5], 8)  # failed probe: doubled
    assert step([1.5, 1.0], [1, 2], 16, 16) == ([1.25, 1.5], 16)  # capped at n
    assert step([1.5, 1.0], [4, 4], 8, 8) == ([2.75, 2.5], 4)  # probe succeeds: reset
    # a finished row keeps its average and does not hold the others in window mode
    acc, g = _adaptive.schedule(
        jnp.asarray([3.0, 1.0]), jnp.asarray([0, 1]), jnp.asarray([True, False]),
        jnp.asarray([True, False]), 0, 4, 2.0, 4, 16,
    )  # fmt: skip
    assert np.asarray(acc).tolist() == [3.0, 1.0] and int(g) == 4


@pytest.mark.slow  # three programs of the trained fixture; the schedule is checked by hand above
def test_falls_back_on_noisy_text_only():
    # The counting fixture: on rho=0 text every window forward decides several tokens,
    # so min_accept=2 changes nothing; on rho=0.2 text acceptance drops to ~1 and the
    # decoder falls back to AR steps, with about AR's forward count (greedy tokens of
    # this model follow the counting rule, so they stay AR's).
    params, cfg, _ = io.load_fixture(C.FIXTURE)
    n = 20
    kw = dict(key=jax.random.key(0), max_new_tokens=n)
    wk = dict(kw, mask_token_id=C.MASK_ID, window=4, entropy_threshold=1.2)
    for level in (0, 2):
        seq, _, _ = C.counting_batch(np.random.default_rng(7 + level), 4, n, level)
        pr = jnp.asarray(seq[:, : C.PROMPT_LEN])
        pl = jnp.full((4,), C.PROMPT_LEN, jnp.int32)
        plain = wedlm_generate(params, cfg, pr, pl, **wk)
        adapt = wedlm_generate(params, cfg, pr, pl, **wk, min_accept=2.0, probe_every=4)
        ar = ar_generate(params, cfg, pr, pl, **kw)
        if level == 0:
            np.testing.assert_array_equal(adapt.tokens, plain.tokens)
            assert int(adapt.stats.n_forward) == int(plain.stats.n_forward) < n // 3
        else:
            assert int(plain.stats.n_forward) < int(adapt.stats.n_forward) <= n
            np.testing.assert_array_equal(adapt.tokens, ar.tokens)


def test_bad_adaptive_arguments_raise():
    params, cfg = tiny(0)
    pr, pl = prompts(0, 2, 5, [5, 5])
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`min_accept`"):
            _gen(params, cfg, pr, pl, min_accept=bad)
    with pytest.raises(TypeError, match="min_accept"):
        _gen(params, cfg, pr, pl, min_accept="2")
    with pytest.raises(ValueError, match="`probe_every`"):
        _gen(params, cfg, pr, pl, min_accept=2.0, probe_every=0)
    with pytest.raises(TypeError, match="probe_every"):
        _gen(params, cfg, pr, pl, min_accept=2.0, probe_every=2.5)
    # traced under jit: a runtime error naming the argument (NaN included)
    f = jax.jit(lambda m: _gen(params, cfg, pr, pl, min_accept=m).tokens)
    for bad in (-1.0, float("nan")):
        with pytest.raises(Exception, match="`min_accept`"):
            jax.block_until_ready(f(jnp.float32(bad)))
