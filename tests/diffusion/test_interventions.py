"""``diffusion.sample(interventions=...)``: steering vectors in the MDLM sampler.

The oracle is the backbone's own forward: a plain closure over ``nn.apply(interventions=)``
(no slot form, so the sampler reads full logits) sampled greedily must give the tokens of
:func:`diffusion.transformer_denoiser` (slot form, compacted forwards). Per-row ``[B, D]``
edits: each row equals the same-shape run where every row gets that row's ``[D]`` vector.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import diffusion, nn
from jaxkit.diffusion import _steer
from tests import conformance
from tests.diffusion import _toys

V, MASK = 5, 5  # letters 0..4, [MASK] = 5
CFG, P = _toys.tiny_transformer(V, seed=0, sharpen=1.0, n_layers=2)
F = diffusion.transformer_denoiser(CFG)
B, L, T = 8, 6, 16
_rng = np.random.default_rng(3)
VEC = {0: jnp.asarray(6.0 * _rng.normal(size=16), jnp.float32)}  # large: it moves the argmax
# rows with 1..6 masked slots (row 0 one, so it often needs no forward: gathers skip it)
_N_MASKED = [1, 6, 2, 4, 1, 3, 5, 2]
TEMPLATE = np.where(
    np.arange(L)[None] < np.array(_N_MASKED)[:, None], MASK, _rng.integers(0, V, (B, L))
).astype(np.int32)


def _plain(params, tokens, positions, attn_mask, interventions=None):
    """The oracle denoiser: ``nn.apply`` itself, no slot form ``logits_at``."""
    return nn.apply(
        params, CFG, tokens, positions, attn_mask=attn_mask, interventions=interventions
    ).logits


_plain.cfg = CFG


def _sample(iv, *, order="ancestral", f=F, tokens=TEMPLATE, **kw):
    return diffusion.sample(
        f, P, tokens, key=jax.random.key(1), mask_id=MASK, num_steps=T, schedule="linear",
        order=order, temperature=0.0, interventions=iv, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("order", ["ancestral", "confidence"])
def test_shared_edit_equals_the_backbones_edited_forward(order):
    iv = nn.Interventions(VEC)
    got = _sample(iv, order=order)
    want = _sample(iv, order=order, f=_plain)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.unmask_step, want.unmask_step)
    np.testing.assert_allclose(got.log_prob, want.log_prob, rtol=1e-5, atol=1e-5)
    plain = _sample(None, order=order)
    assert (np.asarray(plain.tokens) != np.asarray(got.tokens)).sum() >= 4  # the edit acts
    assert np.all(np.asarray(got.tokens) < MASK)


@pytest.mark.parametrize("blank", [False, True], ids=["infill", "blank"])
def test_per_row_edits_follow_their_rows_through_compacted_forwards(blank):
    # Compaction is on here: _compact_sizes(linear, "ancestral", 16, [8, 6]) = ((6,), 9),
    # one block of 6 rows and draws at 9 slots (asserted below), so steps needing <= 6 rows
    # gather them (`a[idx]`) and the [B, D] edits must be gathered with them. B=1 runs
    # are no oracle (the unmasking uniforms are drawn over [B, L]); the same-shape run
    # with row i's vector shared by every row unmasks the same slots at the same steps.
    # Blank (the same program): every row starts alike, and the first row's output may serve the
    # others only when their edits are alike too (a [D] edit: yes; these: no).
    from jaxkit.diffusion._sample_plan import _compact_sizes

    x = np.full_like(TEMPLATE, MASK) if blank else TEMPLATE
    sched = diffusion.MaskingSchedule("linear")
    assert _compact_sizes(sched, "ancestral", T, jnp.asarray(x)) == ((6,), 9)
    vecs = np.asarray(6.0 * np.random.default_rng(5).normal(size=(B, 16)), np.float32)
    vecs[2] = 0.0  # the zero row: as if unsteered
    got = _sample(nn.Interventions({0: vecs}), tokens=x)
    toks = np.asarray(got.tokens)
    for i in range(B):
        want = _sample(nn.Interventions({0: vecs[i]}), tokens=x)
        np.testing.assert_array_equal(toks[i], np.asarray(want.tokens)[i], err_msg=f"row {i}")
    plain = _sample(None, tokens=x)
    np.testing.assert_array_equal(toks[2], np.asarray(plain.tokens)[2])
    assert (toks != np.asarray(plain.tokens)).any(-1).sum() >= 3  # the edits act
    # some steps ran a gathered block without row 0 (a non-prefix gather)
    us = np.asarray(got.unmask_step)
    need = np.stack([(us == k).any(-1) for k in range(T)])
    assert blank or any(0 < n.sum() <= 6 and not n[0] for n in need), need.sum(-1)


@pytest.mark.slow  # a reference forward and trajectory_log_prob: two more compiles
def test_reference_is_not_edited():
    # log_ratio = sum log p_ref - log p_theta over the path: the reference (the same
    # parameters, unedited) scores the path like trajectory_log_prob of the plain model
    got = _sample(nn.Interventions(VEC), order="confidence", ref_params=P)
    lp_ref = diffusion.trajectory_log_prob(
        F, P, got.tokens, got.unmask_step, mask_id=MASK, num_steps=T
    )
    np.testing.assert_allclose(got.log_ratio, lp_ref - got.log_prob, rtol=1e-4, atol=1e-4)
    assert np.abs(np.asarray(got.log_ratio)).max() > 0.1


def _bare(params, tokens, positions, attn_mask):
    return F(params, tokens, positions, attn_mask)


def test_bad_interventions():
    x = jnp.asarray(TEMPLATE)
    vec = VEC[0]
    ins = nn.Interventions(insert_layer=0, insert_at=jnp.zeros(B, jnp.int32), n_insert=1)
    with pytest.raises(ValueError, match="insert"):
        _sample(ins, tokens=x)
    with pytest.raises(ValueError, match="read_mlp"):
        _sample(nn.Interventions(read_mlp=(0,)), tokens=x)
    with pytest.raises(TypeError, match=r"interventions\.add\[1\]"):
        _sample(nn.Interventions({1: jnp.ones(17)}), tokens=x)
    with pytest.raises(TypeError, match=r"interventions\.add\[0\]"):
        _sample(nn.Interventions({0: jnp.ones((B + 1, 16))}), tokens=x)
    with pytest.raises(ValueError, match=r"interventions\.add\[0\]"):
        _sample(nn.Interventions({0: vec.at[3].set(jnp.nan)}), tokens=x)
    with pytest.raises(TypeError, match="interventions"):  # no cfg: no widths to check
        _sample(nn.Interventions(VEC), tokens=x, f=_bare)
    with pytest.raises(TypeError, match="interventions"):
        _sample({0: vec}, tokens=x)
    # nothing to do: the plain sampler (no edits passed), even for a denoiser without cfg
    assert _steer.check(nn.Interventions(), _bare, B) == {} == _steer.check(None, _bare, B)


def test_new_vectors_do_not_recompile():
    x = jnp.asarray(TEMPLATE)
    other = jnp.asarray(np.asarray(VEC[0])[::-1].copy())  # made before counting (no eager op)
    a = _sample(nn.Interventions(VEC), tokens=x)
    jax.block_until_ready(a)
    before = conformance.compile_count()
    b = _sample(nn.Interventions({0: other}), tokens=x)
    jax.block_until_ready(b)
    assert conformance.compile_count() == before
    assert (np.asarray(a.tokens) != np.asarray(b.tokens)).any()


@pytest.mark.slow  # one more compile (the unsteered program)
def test_empty_interventions_run_the_plain_program():
    x = jnp.asarray(TEMPLATE)
    c = _sample(None, tokens=x)
    jax.block_until_ready(c)
    before = conformance.compile_count()
    d = _sample(nn.Interventions(), tokens=x)
    jax.block_until_ready(d)
    assert conformance.compile_count() == before
    np.testing.assert_array_equal(c.tokens, d.tokens)
