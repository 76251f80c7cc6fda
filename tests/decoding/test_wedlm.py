import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn
from jaxkit.decoding import (
    _wedlm,
    _window,
    ar_generate,
    commit_count,
    select_by_entropy,
    token_entropy,
    topological_reorder,
    wedlm_generate,
    window_order,
)
from jaxkit.decoding._common import Sampling
from tests.decoding import _reference as R
from tests.decoding._models import MASK, V, prompts, tiny

_JPREFILL = jax.jit(nn.prefill, static_argnums=1, static_argnames=("max_len",))
_JAPPLY = jax.jit(
    lambda p, cfg, t, q, m=None: nn.apply(p, cfg, t, q, attn_mask=m).logits, static_argnums=1
)


def _gen(params, cfg, pr, pl, **kw):
    """wedlm_generate (jitted inside: one compile per static configuration across tests)."""
    kw.setdefault("key", jax.random.key(0))
    kw.setdefault("mask_token_id", MASK)
    kw.setdefault("max_new_tokens", 8)
    kw.setdefault("window", 4)
    return wedlm_generate(params, cfg, pr, pl, **kw)


# ------------------------------------------------------------------ reordering


def test_topological_reorder_moves_observed_first():
    tok = jnp.asarray([[5, 6, 7, 8, 9]], jnp.int32)
    pos = jnp.arange(5, dtype=jnp.int32)[None]
    m = jnp.asarray([[False, True, False, True, False]])
    t, p, perm = topological_reorder(tok, pos, m, mask_token_id=MASK)
    np.testing.assert_array_equal(t, [[5, 7, 9, MASK, MASK]])
    np.testing.assert_array_equal(p, [[0, 2, 4, 1, 3]])
    np.testing.assert_array_equal(perm, [[0, 2, 4, 1, 3]])


def test_reordering_equals_permuted_mask_and_keeps_observed_logits():
    params, cfg = tiny(1)
    rng = np.random.default_rng(0)
    L = 9
    tok = jnp.asarray(rng.integers(0, MASK, (2, L)), jnp.int32)
    m = jnp.asarray(rng.random((2, L)) < 0.4)
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (2, L))
    t_p, p_p, perm = topological_reorder(tok, pos, m, mask_token_id=MASK)
    re = _JAPPLY(params, cfg, t_p, p_p)
    # original order with attention mask P^T tril P: logical i sees j iff phys(j) <= phys(i)
    # (the glue in NumPy: no eager programs of its own)
    re, tok, m, pos = (np.asarray(a) for a in (re, tok, m, pos))
    inv = np.argsort(np.asarray(perm), axis=1)
    amask = inv[:, None, :] <= inv[:, :, None]
    shown = np.where(m, MASK, tok).astype(np.int32)
    orig = _JAPPLY(params, cfg, shown, pos, amask)
    back = np.take_along_axis(re, inv[:, :, None], axis=1)
    np.testing.assert_allclose(back, orig, atol=1e-5, rtol=1e-5)
    # observed tokens: same logits as a causal forward over the observed tokens alone
    for b in range(2):
        obs = np.flatnonzero(~m[b])
        k = len(obs)
        t_solo = np.zeros((2, L), np.int32)
        p_solo = np.zeros((2, L), np.int32)
        t_solo[0, :k], p_solo[0, :k] = tok[b][obs], obs  # right-padded, causal
        solo = np.asarray(_JAPPLY(params, cfg, t_solo, p_solo))
        np.testing.assert_allclose(re[b, :k], solo[0, :k], atol=1e-5, rtol=1e-5)
    # RoPE shift invariance
    shifted = _JAPPLY(params, cfg, t_p, np.asarray(p_p) + 7)
    np.testing.assert_allclose(shifted, re, atol=1e-4, rtol=1e-4)


def test_commit_count_and_window_order():
    f = jnp.asarray(
        [[True, True, False, True], [False, True, True, True], [True, True, True, True]]
    )
    np.testing.assert_array_equal(commit_count(f), [2, 0, 4])
    valid = jnp.asarray([[True, True, True, False]] * 3)
    perm, inv = window_order(f, valid)
    np.testing.assert_array_equal(perm[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(perm[1], [1, 2, 0, 3])
    np.testing.assert_array_equal(
        jnp.take_along_axis(perm, inv, 1), jnp.broadcast_to(jnp.arange(4), (3, 4))
    )


# ------------------------------------------------------------------ selection


def test_entropy_and_selection_by_hand():
    big = 50.0  # the inputs in NumPy: no eager programs of their own
    onehot = np.full((V,), -big, np.float32)
    onehot[3] = big
    uniform = np.zeros((V,), np.float32)
    np.testing.assert_allclose(token_entropy(onehot), 0.0, atol=1e-6)
    np.testing.assert_allclose(token_entropy(uniform), np.log(V), rtol=1e-6)
    logits = np.stack([uniform, onehot, onehot, uniform])[None]
    sel = np.asarray([[True, True, True, True]])
    fill = select_by_entropy(logits, sel, threshold=0.5, pos_penalty=0.0)
    np.testing.assert_array_equal(fill, [[False, True, True, False]])
    # distance penalty counts from the leftmost selectable slot: slot 2 has d=2
    fill = select_by_entropy(logits, sel, threshold=0.5, pos_penalty=0.3)
    np.testing.assert_array_equal(fill, [[False, True, False, False]])
    # nothing below threshold -> the single argmin
    fill = select_by_entropy(
        np.stack([uniform] * 4)[None] + np.arange(4.0, dtype=np.float32)[None, :, None] * 0.0,
        sel,
        threshold=0.1,
        pos_penalty=0.01,
    )
    np.testing.assert_array_equal(fill, [[True, False, False, False]])
    # tau=None: exactly one slot
    fill = select_by_entropy(logits, sel, threshold=None, pos_penalty=0.0)
    fill = np.asarray(fill)
    assert int(fill.sum()) == 1 and bool(fill[0, 1])
    # not selectable -> never filled; no selectable slot -> nothing
    fill = select_by_entropy(
        logits, np.asarray([[True, False, True, False]]), threshold=0.5, pos_penalty=0.0
    )
    np.testing.assert_array_equal(fill, [[False, False, True, False]])
    fill = select_by_entropy(logits, jnp.zeros((1, 4), bool), threshold=0.5, pos_penalty=0.0)
    assert not bool(fill.any())


# ------------------------------------------------------------------ decoder oracles


def test_w1_no_threshold_equals_mask_predict_greedy():
    params, cfg = tiny(2)
    pr, pl = prompts(0, 2, 5, [5, 3])
    n = 8
    toks, lens, st = _gen(params, cfg, pr, pl, max_new_tokens=n, window=1, entropy_threshold=None)
    for b in range(2):
        want = R.mask_predict_greedy_row(params, cfg, R.prompt_row(pr, pl, b), mask=MASK, n_new=n)
        np.testing.assert_array_equal(toks[b], want)
    np.testing.assert_array_equal(lens, [n, n])
    # the prefill forward predicts the first slot, then one forward per token (the last
    # commit needs none): N - 1 forwards after the prefill, exactly like ar_generate
    assert int(st.n_forward) == n - 1


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_cached_equals_uncached_reference(seed):
    rng = np.random.default_rng(seed)
    params, cfg = tiny(10 + seed)
    w = 4 if seed == 0 else int(rng.integers(2, 6))
    tau = float(rng.uniform(0.3, 1.5))
    lam = float(rng.uniform(0.0, 0.1))
    n = 8
    pr, pl = prompts(seed, 2, 5, [5, 3])
    toks, lens, st = _gen(
        params, cfg, pr, pl, max_new_tokens=n, window=w, entropy_threshold=tau, pos_penalty=lam
    )
    for b in range(2):
        want, nf = R.wedlm_reference_row(
            params,
            cfg,
            R.prompt_row(pr, pl, b),
            mask=MASK,
            n_new=n,
            window=w,
            tau=tau,
            lam=lam,
        )
        np.testing.assert_array_equal(np.asarray(toks[b, : lens[b]]), want)
        assert int(st.row_forwards[b]) == nf - 1  # the first window rides on the prefill
    assert int(st.n_forward) == int(st.row_forwards.max())


def test_some_step_fills_several_slots():
    # guard that the reference test above exercises parallel fills
    params, cfg = tiny(10)
    pr, pl = prompts(0, 2, 5, [5, 3])
    toks, lens, st = _gen(params, cfg, pr, pl, entropy_threshold=2.0, pos_penalty=0.0)
    assert int(st.n_forward) < 8


@pytest.mark.parametrize(
    "edits", [pytest.param("plain", marks=pytest.mark.slow), "interventions"]
)  # every other WeDLM test runs the plain slot form on CPU
def test_window_forward_forms_equal_the_full_forward(edits):
    # A window step's / prefill's forward (`_window.forward_at`): on CPU the last block runs
    # at the read slots alone (slot_form), elsewhere on every row (whole_form). Oracle: the
    # full `nn.apply` forward's logits read at the slots and the cache it writes, without
    # and with interventions (additive edits at the first and last block, an inserted span
    # hidden from the blocks up to its layer), with the default and with a given mask.
    params, cfg = tiny(10)
    b, t, w, cap = 2, 8, 4, 20
    rng = np.random.default_rng(0)
    cache = nn.init_cache(cfg, max_len=cap, batch=b)
    length = jnp.array([3, 9], jnp.int32)
    cache = cache._replace(
        k=jnp.asarray(rng.normal(size=cache.k.shape), jnp.float32),
        v=jnp.asarray(rng.normal(size=cache.v.shape), jnp.float32),
        length=length,
    )
    toks = jnp.asarray(rng.integers(0, V, (b, t)), jnp.int32)
    pos = length[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
    slots = jnp.asarray(np.stack([rng.permutation(t)[:w] for _ in range(b)]), jnp.int32)
    iv = None
    if edits == "interventions":
        d, last = cfg.d_model, cfg.n_layers - 1
        add = {0: jnp.asarray(rng.normal(size=(d,)), jnp.float32)}
        add[last] = jnp.asarray(rng.normal(size=(b, d)), jnp.float32)
        iv = nn.Interventions(add, insert_layer=0, insert_at=jnp.array([1, 4]), n_insert=2)
    sees = jnp.asarray(rng.random((b, t, cap)) < 0.6) | (
        jnp.arange(cap)[None, None, :] == pos[:, :, None]
    )
    for mask in (None, sees):
        full = nn.apply(
            params, cfg, toks, pos, cache=cache, attn_mask=mask, interventions=iv, overflow="drop"
        )
        want = jnp.take_along_axis(full.logits, slots[:, :, None], axis=1)
        args = (params, cfg, toks, pos, slots, iv, mask, cache)
        for got_cache, got in (
            _window.slot_form(*args),
            _window.whole_form(*args),
            _window.forward_at(params, cfg, toks, pos, cache, slots, iv, attn_mask=mask),
        ):
            assert got.shape == (b, w, V)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
            np.testing.assert_array_equal(got_cache.k, full.cache.k)
            np.testing.assert_array_equal(got_cache.v, full.cache.v)


def test_cache_holds_exact_ar_kv():
    params, cfg = tiny(3)
    pr, pl = prompts(3, 2, 5, [5, 2])
    n, w = 10, 4
    o = _wedlm._Options(
        mask_token_id=MASK,
        max_new_tokens=n,
        window=w,
        stop_token_ids=(),
        entropy_threshold=1.5,
        pos_penalty=0.02,
        sampling=Sampling(0.0, V, 1.0, 0.0),
        greedy=True,
    )
    s = jax.jit(
        lambda k: _wedlm._init_state(params, cfg, pr, pl, k, o, max_len=5 + n, pad_token_id=0)
    )(jax.random.key(9))
    # the fused prefill wrote exactly the prefill K/V of the prompts
    _, pre = _JPREFILL(params, cfg, pr, pl, max_len=5 + n)
    np.testing.assert_array_equal(s.cache.length, pl)
    pl_np, pr_np = np.asarray(pl), np.asarray(pr)  # the glue in NumPy
    sk, sv, pk, pv = (np.asarray(a) for a in (s.cache.k, s.cache.v, pre.k, pre.v))
    for b in range(2):
        p = int(pl_np[b])
        np.testing.assert_allclose(sk[:, b, :p], pk[:, b, :p], atol=1e-5)
        np.testing.assert_allclose(sv[:, b, :p], pv[:, b, :p], atol=1e-5)
    step = jax.jit(lambda s, k: _wedlm._step(params, cfg, s, pl, k, o))
    for i in range(4):
        s = step(s, jax.random.key(i))
    lens, out = np.asarray(s.cache.length), np.asarray(s.out)
    sk, sv = np.asarray(s.cache.k), np.asarray(s.cache.v)
    for b in range(2):
        ln = int(lens[b])
        p = int(pl_np[b])
        assert ln > p
        seq = np.zeros((1, 15), np.int32)  # right-padded
        seq[0, :ln] = np.concatenate([pr_np[b, :p], out[b, : ln - p]])
        _, fresh = _JPREFILL(params, cfg, seq, np.asarray([ln], np.int32), max_len=15)
        np.testing.assert_allclose(sk[:, b, :ln], np.asarray(fresh.k)[:, 0, :ln], atol=1e-5)
        np.testing.assert_allclose(sv[:, b, :ln], np.asarray(fresh.v)[:, 0, :ln], atol=1e-5)


def test_minimal_cache_drops_out_of_range_writes():
    params, cfg = tiny(4)
    pr, pl = prompts(4, 2, 5, [5, 5])
    kw = dict(entropy_threshold=0.8, pos_penalty=0.02)
    a = _gen(params, cfg, pr, pl, max_len=13, **kw)  # window writes run past the end
    b = _gen(params, cfg, pr, pl, max_len=40, **kw)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_all_filled_window_commits_whole_window():
    params, cfg = tiny(5)
    pr, pl = prompts(5, 2, 5, [5, 4])
    toks, lens, st = _gen(params, cfg, pr, pl, entropy_threshold=100.0, pos_penalty=0.0)
    # prefill predicts all 4 slots, one forward commits them and predicts the next 4
    assert int(st.n_forward) == 1


def test_stop_token_truncates_and_rows_finish_independently():
    params, cfg = tiny(6)
    pr, pl = prompts(6, 2, 5, [5, 4])
    n = 8
    full, _, _ = _gen(params, cfg, pr, pl, entropy_threshold=0.5)
    stop = int(full[0, 2])
    toks, lens, st = _gen(
        params, cfg, pr, pl, entropy_threshold=0.5, stop_token_ids=(stop,), pad_token_id=0
    )
    for b in range(2):
        row = list(np.asarray(full[b]))
        k = row.index(stop) + 1 if stop in row else n
        assert int(lens[b]) == k
        np.testing.assert_array_equal(toks[b, :k], full[b, :k])
        assert np.all(np.asarray(toks[b, k:]) == 0)
    assert int(lens[0]) <= 3


def test_sampled_decoding_is_keyed_and_valid():
    # both decoders draw through the fused sampler: same key -> same tokens, filters on
    params, cfg = tiny(7)
    pr, pl = prompts(7, 2, 5, [5, 3])
    kw = dict(entropy_threshold=0.5, temperature=1.0, top_k=6, top_p=0.95, min_p=0.02)
    a = _gen(params, cfg, pr, pl, key=jax.random.key(1), **kw)[0]
    b = _gen(params, cfg, pr, pl, key=jax.random.key(1), **kw)[0]
    c = _gen(params, cfg, pr, pl, key=jax.random.key(2), **kw)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert int(a.min()) >= 0 and int(a.max()) < V
    g = _gen(params, cfg, pr, pl, entropy_threshold=0.5)[0]
    t = _gen(params, cfg, pr, pl, key=jax.random.key(3), entropy_threshold=0.5, temperature=1e-4)[0]
    np.testing.assert_array_equal(g, t)
    akw = dict(max_new_tokens=8, temperature=1.0, top_k=6, top_p=0.95, min_p=0.02)
    a = ar_generate(params, cfg, pr, pl, key=jax.random.key(1), **akw).tokens
    b = ar_generate(params, cfg, pr, pl, key=jax.random.key(1), **akw).tokens
    c = ar_generate(params, cfg, pr, pl, key=jax.random.key(2), **akw).tokens
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


# (jit == eager and one trace across entropy_threshold / pos_penalty values: the
# conformance checks decoding.wedlm_generate-jit and -traced_once)


def test_ar_generate_equals_recompute_greedy():
    params, cfg = tiny(9)
    pr, pl = prompts(9, 2, 5, [5, 3])
    n = 8
    toks, lens, st = ar_generate(params, cfg, pr, pl, key=jax.random.key(0), max_new_tokens=n)
    for b in range(2):
        want = R.ar_greedy_row(params, cfg, R.prompt_row(pr, pl, b), n_new=n)
        np.testing.assert_array_equal(toks[b], want)
    assert int(st.n_forward) == n - 1


def _eager(params, cfg, pr, pl, **kw):
    kw.setdefault("key", jax.random.key(0))
    kw.setdefault("mask_token_id", MASK)
    return wedlm_generate(params, cfg, pr, pl, **kw)


def test_bad_inputs_raise_clear_errors():
    params, cfg = tiny(0)
    pr, pl = prompts(0, 2, 5, [5, 5])
    with pytest.raises(ValueError, match="`prompt`"):
        _eager(params, cfg, pr, pl, max_new_tokens=4, max_len=4)
    with pytest.raises(ValueError, match="`window`"):
        _eager(params, cfg, pr, pl, max_new_tokens=4, window=16, max_len=9)
    with pytest.raises(ValueError, match="`max_len`"):
        _eager(params, cfg, pr, pl, max_new_tokens=8, window=2, max_len=9)
    with pytest.raises(ValueError, match="`prompt`"):
        _eager(params, cfg, pr.at[0, 1].set(V), pl, max_new_tokens=4, window=2)
    with pytest.raises(ValueError, match="`prompt`"):
        _eager(params, cfg, pr.at[0, 1].set(-1), pl, max_new_tokens=4, window=2)
    with pytest.raises(ValueError, match="`mask_token_id`"):
        _eager(params, cfg, pr, pl, max_new_tokens=4, window=2, mask_token_id=V)
    with pytest.raises(TypeError, match="prompt"):
        _eager(params, cfg, pr.astype(jnp.float32), pl, max_new_tokens=4)
    with pytest.raises(ValueError, match="`prompt`"):
        ar_generate(params, cfg, pr, pl, key=jax.random.key(0), max_new_tokens=4, max_len=3)
    with pytest.raises(ValueError, match="`prompt_len`"):
        _eager(params, cfg, pr, pl.at[0].set(9), max_new_tokens=4, window=2)
    # under jit the token-id check is a runtime error naming the argument
    with pytest.raises(Exception, match="`prompt`"):
        jax.block_until_ready(_gen(params, cfg, pr.at[1, 0].set(V + 3), pl, entropy_threshold=0.4))
    with pytest.raises(TypeError, match="`prompt`"):  # no column: not a window error
        _eager(params, cfg, pr[:, :0], pl, max_new_tokens=4, window=2)


def test_select_window_entropy_bad_inputs():
    logits = np.zeros((2, 3, V), np.float32)
    sel = np.ones((2, 3), bool)
    with pytest.raises(TypeError, match="selectable"):
        select_by_entropy(logits, sel.astype(np.int32), threshold=0.5, pos_penalty=0.1)
    with pytest.raises(TypeError, match="logits"):
        select_by_entropy(logits[..., :0], sel, threshold=0.5, pos_penalty=0.1)
    with pytest.raises(TypeError, match="logits"):
        token_entropy(np.float32(1.0))
    with pytest.raises(TypeError, match="logits"):
        token_entropy(np.ones((2, V), np.int32))
    with pytest.raises(TypeError, match="filled"):
        window_order(sel.astype(np.int32), sel)
    with pytest.raises(TypeError, match="filled"):
        window_order(np.bool_(True), np.bool_(True))
    # a traced NaN / inf hyperparameter raises under jit (it would silently pick slots)
    f = jax.jit(lambda t, p: select_by_entropy(logits, sel, threshold=t, pos_penalty=p))
    assert f(0.5, 0.1).shape == (2, 3)
    with pytest.raises(Exception, match="`threshold`"):
        jax.block_until_ready(f(np.nan, 0.1))
    with pytest.raises(Exception, match="`pos_penalty`"):
        jax.block_until_ready(f(0.5, np.inf))


@pytest.mark.slow  # the default conformance run already checks wedlm_generate's sharding
def test_batch_sharded_prompts_match_unsharded(mesh8):
    # nn.prefill, the fused WeDLM prefill and both decode loops keep the batch
    # sharding of the prompts under an explicit mesh and give the same tokens.
    params, cfg = tiny(11)
    pr, pl = prompts(11, 8, 5, [5, 3, 4, 5, 2, 5, 1, 4])
    kw = dict(key=jax.random.key(0), max_new_tokens=6)
    want_w = _gen(params, cfg, pr, pl, max_new_tokens=6, entropy_threshold=0.8)
    want_a = ar_generate(params, cfg, pr, pl, **kw)
    sh = jax.NamedSharding(mesh8, jax.P("data"))
    spr = jax.device_put(pr, jax.NamedSharding(mesh8, jax.P("data", None)))
    spl = jax.device_put(pl, sh)
    with jax.set_mesh(mesh8):
        got_w = _gen(params, cfg, spr, spl, max_new_tokens=6, entropy_threshold=0.8)
        got_a = ar_generate(params, cfg, spr, spl, **kw)
        _, cache = jax.jit(lambda a, b: nn.prefill(params, cfg, a, b, max_len=12))(spr, spl)
    for got, want in ((got_w, want_w), (got_a, want_a)):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[0].sharding.spec[0] == "data"
    assert cache.k.sharding.spec[1] == "data"
