"""MDLM core: ELBO vs exact NLL, sampler distributions vs exact chains, errors."""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxkit import diffusion, nn
from tests.diffusion import _toys

V, L = 3, 3  # letters 0..2, [MASK] = 3


def _np_log_p(apply_fn, params, mask_id):
    """The random MLP's SUBS log-probabilities in NumPy (an oracle independent of jax)."""
    assert apply_fn is _toys.mlp_apply
    return _toys.np_mlp_log_p(params, mask_id)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_bound_equals_exact_nll_for_true_conditionals(schedule):
    # The denoiser returns the exact conditionals of a known joint p: the continuous-time
    # ELBO then equals log p(x) (for any schedule with alpha(1) = 0).
    apply_fn = _toys.exact_denoiser(V, L, 0)
    p = _toys.random_joint(V, L, 0)
    seqs = _toys.all_sequences(V, L)
    idx = np.array([0, 5, 13, 26])
    x = jnp.asarray(np.repeat(seqs[idx], 64, axis=0))
    est = diffusion.log_likelihood_bound(
        apply_fn, None, x, key=jax.random.key(0), mask_id=V, num_samples=32, schedule=schedule
    )
    est = np.asarray(est).reshape(len(idx), 64)
    mean, se = est.mean(1), est.std(1, ddof=1) / 8.0
    exact = np.log(p[idx])
    assert np.all(np.abs(mean - exact) <= 5 * se + 1e-3), (mean, exact, se)
    # independent enumeration of the bound (subset formula) gives log p exactly
    lp = _toys.np_exact_log_p(V, L, 0)  # the same joint, in NumPy
    for i in idx:
        assert abs(-_toys.exact_bound(lp, seqs[i], V) - np.log(p[i])) < 1e-5


def test_bound_matches_enumeration_for_a_transformer():
    # A random network is not a consistent joint: the estimator must still be unbiased
    # for the enumerated bound, and schedule-invariant.
    apply_fn, params = _toys.random_mlp(V, 3, seed=1)
    x = np.array([2, 0, 1], np.int32)
    exact = -_toys.exact_bound(_np_log_p(apply_fn, params, V), x, V)
    xs = jnp.asarray(np.tile(x, (64, 1)))
    for schedule in ("linear", "cosine"):
        est = np.asarray(
            diffusion.log_likelihood_bound(
                apply_fn,
                params,
                xs,
                key=jax.random.key(3),
                mask_id=V,
                num_samples=16,
                schedule=schedule,
            )
        )
        se = est.std(ddof=1) / math.sqrt(len(est))
        assert abs(est.mean() - exact) <= 5 * se + 1e-3, (schedule, est.mean(), exact, se)


def test_loss_is_the_negated_bound_on_average():
    apply_fn = _toys.exact_denoiser(V, L, 2)
    p = _toys.random_joint(V, L, 2)
    seqs = _toys.all_sequences(V, L)
    x = jnp.asarray(np.repeat(seqs[[4]], 256, axis=0))
    keys = jax.random.split(jax.random.key(5), 40)
    vals = np.array(
        [diffusion.mdlm_loss(apply_fn, None, x, key=k, mask_id=V, t_min=0.0) for k in keys]
    )
    se = vals.std(ddof=1) / math.sqrt(len(vals))
    assert abs(vals.mean() + np.log(p[4])) <= 5 * se + 1e-3


@pytest.mark.parametrize(
    ("order", "steps"), [("ancestral", 2), ("confidence", 2), ("ancestral", 4)]
)
def test_sampler_distribution_matches_exact_chain(order, steps):
    # Exact distribution of the T-step chain (NumPy enumeration over all 4^3 states, using
    # the network's conditionals) vs 20k samples; chi-square at p > 1e-3 (fixed seed).
    # Ancestral, T = 4: only ~58 % of rows unmask a slot per step, so the forward runs on
    # those rows alone and tokens are drawn at the ~25 % of slots unmasked (the compacted
    # paths; T = 2 runs every row and draws at every slot).
    from jaxkit.diffusion._sample import _compact_sizes

    apply_fn, params = _toys.random_mlp(2, 3, seed=4)
    sched = diffusion.MaskingSchedule("linear")
    exact = _toys.exact_sampler_distribution(
        _np_log_p(apply_fn, params, 2), 2, 3, steps, order, lambda t: 1 - t
    )
    n = 20000
    z = jnp.full((n, 3), 2, jnp.int32)
    rows, slots = _compact_sizes(sched, order, steps, z)
    assert bool(rows) == (slots > 0) == (steps == 4)
    tr = diffusion.sample(
        apply_fn,
        params,
        z,
        key=jax.random.key(11),
        mask_id=2,
        num_steps=steps,
        schedule=sched,
        order=order,
    )
    toks = np.asarray(tr.tokens)
    assert (toks != 2).all()
    counts = np.bincount(toks @ np.array([4, 2, 1]), minlength=8)
    keep = exact > 0
    assert counts[~keep].sum() == 0
    _, pval = scipy.stats.chisquare(counts[keep], exact[keep] * n)
    assert pval > 1e-3, (counts, exact * n)


@pytest.mark.parametrize("kind", ["linear", "cosine", "loglinear"])
def test_max_unmask_probability_matches_numpy(kind):
    # The compacted sizes' per-step masked fractions and unmasking probability, cached on
    # the host (no eager schedule evaluation per `sample` call), against NumPy formulas.
    from jaxkit.diffusion._sample import _max_unmask_probability, _still_masked

    steps = 7
    t = 1.0 - np.arange(steps + 1) / steps
    if kind == "cosine":
        a = np.cos(0.5 * np.pi * t)
    else:
        a = 1.0 - (1.0 - (1e-3 if kind == "loglinear" else 0.0)) * t
    q = np.diff(a) / (1.0 - a[0])  # a[k] = alpha(t_k), t_0 = 1
    q[-1] = (1.0 - a[-2]) / (1.0 - a[0])  # the last step takes the rest
    sched = diffusion.MaskingSchedule(kind)
    got = _max_unmask_probability(sched, steps)
    assert abs(got - np.clip(q, 0.0, 1.0).max()) < 1e-6
    m = (1.0 - a[:-1]) / (1.0 - a[0])  # still masked at the start of step k; none after
    np.testing.assert_allclose(_still_masked(sched, steps), [*m, 0.0], atol=1e-6)
    hits = _still_masked.cache_info().hits
    assert _max_unmask_probability(diffusion.MaskingSchedule(kind), steps) == got
    assert _still_masked.cache_info().hits == hits + 1


def test_trajectory_invariants():
    b, length, steps = 512, 6, 8
    apply_fn, params = _toys.random_mlp(V, length, seed=2)
    _, ref = _toys.random_mlp(V, length, seed=3)
    z = jnp.full((b, length), V, jnp.int32)
    tr = diffusion.sample(
        apply_fn,
        params,
        z,
        key=jax.random.key(0),
        mask_id=V,
        num_steps=steps,
        ref_params=params,
        schedule="linear",
    )
    assert np.all(np.asarray(tr.log_ratio) == 0.0)  # reference == policy: exactly zero
    assert np.all(np.asarray(tr.tokens) < V)
    # linear schedule: a slot is unmasked at step k with probability 1/T
    frac = np.bincount(np.asarray(tr.unmask_step).ravel(), minlength=steps) / (b * length)
    np.testing.assert_allclose(frac, 1 / steps, atol=4 * math.sqrt(1 / steps / (b * length)))
    # re-scoring the stored path reproduces the sampler's log-probabilities
    lp = diffusion.trajectory_log_prob(
        apply_fn, params, tr.tokens, tr.unmask_step, mask_id=V, num_steps=steps
    )
    np.testing.assert_allclose(lp, tr.log_prob, rtol=1e-5, atol=1e-5)
    tr2 = diffusion.sample(
        apply_fn,
        params,
        z,
        key=jax.random.key(0),
        mask_id=V,
        num_steps=steps,
        ref_params=ref,
        schedule="linear",
    )
    lq = diffusion.trajectory_log_prob(
        apply_fn, ref, tr2.tokens, tr2.unmask_step, mask_id=V, num_steps=steps
    )
    np.testing.assert_allclose(tr2.log_ratio, lq - tr2.log_prob, rtol=1e-5, atol=1e-4)


def test_infilling_keeps_given_tokens_and_padding():
    apply_fn, params = _toys.random_mlp(V, 4, seed=2)
    z = jnp.array([[0, V, 2, V], [V, 1, V, V]], jnp.int32)
    valid = jnp.array([[True, True, True, False], [True, True, True, True]])
    tr = diffusion.sample(
        apply_fn,
        params,
        z,
        key=jax.random.key(1),
        mask_id=V,
        num_steps=3,
        valid=valid,
        order="confidence",
    )
    t = np.asarray(tr.tokens)
    assert t[0, 0] == 0 and t[0, 2] == 2 and t[1, 1] == 1 and t[0, 3] == V  # padding untouched
    assert (t[0, :3] < V).all() and (t[1] < V).all()
    assert np.asarray(tr.unmask_step)[0].tolist()[0] == -1


def test_bad_inputs():
    cfg, params = _toys.tiny_transformer(V, seed=0)
    f = diffusion.transformer_denoiser(cfg)
    x = jnp.zeros((2, 4), jnp.int32)
    with pytest.raises(ValueError, match="x0"):
        diffusion.mdlm_loss(f, params, x.at[0, 0].set(V + 1), key=jax.random.key(0), mask_id=V)
    with pytest.raises(ValueError, match="x0"):  # [MASK] inside clean data
        diffusion.mdlm_loss(f, params, x.at[0, 0].set(V), key=jax.random.key(0), mask_id=V)
    with pytest.raises(ValueError, match="tokens"):
        diffusion.sample(
            f, params, x.at[1, 1].set(-1), key=jax.random.key(0), mask_id=V, num_steps=2
        )
    with pytest.raises(TypeError, match="valid"):
        diffusion.mdlm_loss(
            f, params, x, key=jax.random.key(0), mask_id=V, valid=jnp.ones((2, 5), bool)
        )
    with pytest.raises(TypeError, match="unmask_step"):
        diffusion.trajectory_log_prob(
            f, params, x, jnp.zeros((2, 3), jnp.int32), mask_id=V, num_steps=2
        )
    with pytest.raises(ValueError, match="order"):
        diffusion.sample(
            f, params, x, key=jax.random.key(0), mask_id=V, num_steps=2, order="random"
        )
    with pytest.raises(ValueError, match="kind"):
        diffusion.MaskingSchedule("quadratic")
    with pytest.raises(ValueError, match="t_min"):
        diffusion.mdlm_loss(f, params, x, key=jax.random.key(0), mask_id=V, t_min=float("nan"))
    with pytest.raises(ValueError, match="causal"):
        diffusion.transformer_denoiser(cfg.__class__(**{**cfg.__dict__, "causal": True}))


def test_absolute_positions_break_the_all_mask_symmetry():
    # RoPE alone: on a fully masked row every key and value is the same, so every
    # position gets the same prediction; the [R] absolute codes give each its own.
    cfg, params = _toys.tiny_transformer(V, seed=3)
    z = jnp.full((1, 5), V, jnp.int32)
    pos = jnp.arange(5, dtype=jnp.int32)[None]
    attn = jnp.ones((1, 5, 5), bool)
    rope = np.asarray(diffusion.transformer_denoiser(cfg)(params, z, pos, attn))[0]
    np.testing.assert_allclose(rope, np.broadcast_to(rope[0], rope.shape), atol=1e-5)
    f = diffusion.transformer_denoiser(cfg, absolute_positions=True)
    got = np.asarray(f(params, z, pos, attn))[0]
    assert np.abs(got - got[0]).max() > 1e-2
    # the codes, written here from the formula (sin on even, cos on odd features)
    d = cfg.d_model
    ang = np.arange(5)[:, None] / 10000.0 ** (2 * (np.arange(d) // 2) / d)[None]
    code = np.where(np.arange(d) % 2 == 0, np.sin(ang), np.cos(ang))
    h = np.asarray(params["embed"])[np.asarray(z)] + code[None]
    want = nn.apply(params, cfg, inputs_embeds=jnp.asarray(h, jnp.float32), attn_mask=attn)
    np.testing.assert_allclose(got, np.asarray(want.logits)[0], atol=1e-5)
    emb = diffusion.transformer_embedder(cfg, absolute_positions=True)(params, z, pos, attn)
    assert emb.shape == (1, 5, d)
    with pytest.raises(TypeError, match="absolute_positions"):
        diffusion.transformer_denoiser(cfg, absolute_positions=1)


def _nan_denoiser(params, tokens, positions, attn_mask):
    logits = jnp.zeros((*tokens.shape, V + 1), jnp.float32)
    return logits.at[:, 1, 0].set(jnp.where(params > 0, jnp.nan, 0.0))


def test_sampler_raises_on_nan_logits():
    # The token is drawn by sample_tokens, whose guard names NaN logits under the scan's jit;
    # params = 0 gives finite logits (the control: the guard is the NaN, not the call).
    z = jnp.full((4, L), V, jnp.int32)
    ok = diffusion.sample(
        _nan_denoiser, jnp.float32(0.0), z, key=jax.random.key(0), mask_id=V, num_steps=2
    )
    assert np.all(np.asarray(ok.tokens) < V)
    with pytest.raises((ValueError, eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)) as err:
        out = diffusion.sample(
            _nan_denoiser, jnp.float32(1.0), z, key=jax.random.key(0), mask_id=V, num_steps=2
        )
        jax.block_until_ready(out)
    assert "NaN" in str(err.value), str(err.value)[-2000:]


_BLOCKS = (6, 40)  # compacted forward sizes of the two tests below (one compiled program)


@functools.cache
def _full_logits_only(f):
    """``f`` without its slot form (``logits_at``): the sampler then reads full logits."""

    def apply_fn(params, tokens, positions, attn_mask):
        return f(params, tokens, positions, attn_mask)

    return apply_fn


@pytest.mark.parametrize("first", [0, 5])
def test_compacted_forward_equals_every_row(first):
    # The ancestral sampler runs the denoiser only on rows that unmask a slot at the step
    # (gathered into the smallest block of `rows` that holds them; more: every row). Same
    # trajectory as running every row each step: tokens, steps, log-probabilities and
    # log-ratios (a reference model). Rows first..first+9 generate, the others are given
    # (row 0 generating or not: the gather's fill index); blocks of 6 and 40 rows (4-8 rows
    # needed: steps take either block; every row: the shared test below, whose program this
    # is: rows that differ never read row 0's output). Tokens are
    # drawn at the unmasked slots only (at most 12 of them, ~10 expected; more: at every
    # slot), the same draws whichever rows the forward ran on. The compacted run reads the
    # denoiser's slot form (its last block only at the drawn slots, `nn.apply(outputs_at=)`),
    # the every-row run the full logits: the same tokens (logits equal to rounding).
    from jaxkit.diffusion import _common
    from jaxkit.diffusion import _sample as S

    cfg, params = _toys.tiny_transformer(V, seed=5)
    _, ref = _toys.tiny_transformer(V, seed=6)
    # the denoiser and shapes of the shared-first-step test below: one compiled program
    f = diffusion.transformer_denoiser(cfg, absolute_positions=True)
    b, length, steps = 64, 6, 6
    x = jax.random.randint(jax.random.key(1), (b, length), 0, V).astype(jnp.int32)
    z = x.at[first : first + 10].set(V)
    valid = jnp.ones_like(z, dtype=bool)
    temp = jnp.asarray(1.0)
    sched = diffusion.MaskingSchedule("linear")
    assert _common.slot_form(f) is not None and _common.slot_form(_full_logits_only(f)) is None
    every, comp = (
        S._sample(
            _full_logits_only(f) if not rows else f,
            params,
            ref,
            z,
            valid,
            jax.random.key(2),
            temp,
            S._Opts(V, steps, sched, "ancestral", V + 1, rows, bool(rows), 12),
        )
        for rows in ((), _BLOCKS)
    )
    assert np.all(np.asarray(every.tokens)[first : first + 10] < V)
    np.testing.assert_array_equal(comp.tokens, every.tokens)
    np.testing.assert_array_equal(comp.unmask_step, every.unmask_step)
    np.testing.assert_allclose(comp.log_prob, every.log_prob, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(comp.log_ratio, every.log_ratio, rtol=1e-5, atol=1e-5)
    assert np.abs(np.asarray(every.log_ratio)).max() > 1e-3  # the reference is another model
    # the path's log-probabilities are those of the drawn tokens at the unmasked slots
    lp = diffusion.trajectory_log_prob(
        f, params, every.tokens, every.unmask_step, mask_id=V, num_steps=steps
    )
    np.testing.assert_allclose(lp, every.log_prob, rtol=1e-5, atol=1e-5)
    # 4-8 rows needed per step: both blocks ran
    need = np.stack([(np.asarray(every.unmask_step) == k).any(-1) for k in range(steps)])
    assert {0, 1} <= set(np.searchsorted(_BLOCKS, need.sum(-1)))
    counts = np.bincount(np.asarray(every.unmask_step).ravel() + 1, minlength=steps + 1)
    assert counts[1:].max() > 12  # a step unmasking more than 12 slots drew at every slot


@pytest.mark.parametrize("order", ["ancestral", "confidence"])
def test_shared_first_step_matches_every_row(order):
    # When every row starts from the same input (unconditional sampling), the denoiser runs
    # on row 0 alone and its output serves every row with nothing unmasked yet (all rows at
    # step 0; ancestral: blocks of 6 and 40 rows, of which the 40 holds steps 1-3's other
    # rows, 33-39 here, later steps fall back to every row). The one-row forward is
    # the batched one up to rounding (tight tolerance, not bit equality); on this seed the
    # trajectories are those of running every row: tokens, steps, log-probabilities and
    # log-ratios. Absolute positions: a RoPE-only denoiser gives every slot of a blank row
    # the same prediction, and the confidence order would rank exact ties, which a
    # last-bit difference reorders. A template whose row 3 differs must not take that
    # path (its row 3 would get row 0's output).
    from jaxkit.diffusion import _common
    from jaxkit.diffusion import _sample as S

    cfg, params = _toys.tiny_transformer(V, seed=5)
    _, ref = _toys.tiny_transformer(V, seed=6)
    f = diffusion.transformer_denoiser(cfg, absolute_positions=True)
    b, length, steps = 64, 6, 6
    blank = jnp.full((b, length), V, jnp.int32)
    valid = jnp.ones_like(blank, dtype=bool)

    @jax.jit  # one program per row count (eager, every op of the forwards compiled alone)
    def forwards(z):
        pos_attn = _common.positions_and_mask(z, jnp.ones_like(z, bool))
        return S._forwards(f, params, ref, z, pos_attn, mask_id=V)

    one, every = forwards(blank[:1]), forwards(blank)
    for o, e in zip(one, every, strict=True):  # raw logits of the model and the reference
        np.testing.assert_allclose(np.broadcast_to(o, e.shape), e, rtol=1e-6, atol=1e-5)
    sched = diffusion.MaskingSchedule("linear")
    assert S._shared(blank) and not S._shared(blank[:1])
    for z in (blank, blank.at[3, 0].set(1)):
        outs = [
            S._sample(
                _full_logits_only(f) if not shared else f,  # every row: the full logits
                params,
                ref,
                z,
                valid,
                jax.random.key(4),
                jnp.asarray(1.0),
                # ancestral, not shared: the every-row program of the compacted test above
                S._Opts(V, steps, sched, order, V + 1, rows, shared, 12 * (order == "ancestral")),
            )
            for shared, rows in ((False, ()), (True, _BLOCKS * (order == "ancestral")))
        ]
        np.testing.assert_array_equal(outs[1].tokens, outs[0].tokens)
        np.testing.assert_array_equal(outs[1].unmask_step, outs[0].unmask_step)
        np.testing.assert_allclose(outs[1].log_prob, outs[0].log_prob, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(outs[1].log_ratio, outs[0].log_ratio, rtol=1e-5, atol=1e-5)
        us = np.asarray(outs[0].unmask_step)
        if order == "ancestral" and z is blank:  # rows needing a forward of their own
            fresh = [((us == k).any(-1) & (us < k).any(-1)).sum() for k in range(steps)]
            assert fresh[0] == 0 and {1, 2} <= set(np.searchsorted(_BLOCKS, fresh)), fresh
    assert np.unique(np.asarray(outs[0].tokens), axis=0).shape[0] > 4  # rows still differ


def test_confidence_rank_is_the_stable_descending_order():
    # The confidence order unmasks the slots of highest rank; its rank (one pairwise
    # comparison) must be the stable double argsort's: descending, ties to the lower index.
    from jaxkit.diffusion._sample import _rank

    for n in (9, 100):  # short rows: the pairwise comparison; long rows: two sorts
        s = np.random.default_rng(0).integers(0, 4, size=(64, n)).astype(np.float32) / 4
        s[:, 0] = -1.0  # a still-given slot's score
        want = np.argsort(np.argsort(-s, axis=-1, kind="stable"), axis=-1, kind="stable")
        np.testing.assert_array_equal(_rank(jnp.asarray(s)), want)
