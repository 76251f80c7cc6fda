"""Engram oracles (spec training.md §4.4): exact recovery, partition, equivalences, invariance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import editing, nn
from tests.editing._helpers import block_memories


def _rows_fn(p, bt):
    return {"a": bt}


def _stats(x, ids, k, **kw):
    return editing.collect_stats(
        _rows_fn, None, jnp.asarray(x), jnp.asarray(ids), num_memories=k, **kw
    )


def test_exact_recovery_on_orthogonal_memories():
    rng = np.random.default_rng(0)
    k, width, o = 3, 3, 4
    x, ids = block_memories(rng, k, width, per_memory=8, batches=2)
    x = x.astype(np.float32)
    w = rng.normal(size=(k * width, o)).astype(np.float32)
    st = _stats(x, ids, k, absorb_bias=False)
    en = editing.extract({"a": editing.Linear(jnp.asarray(w))}, st)
    rows, rid = x.reshape(-1, k * width), ids.reshape(-1)
    for m in range(k):
        e_m = np.asarray(en.ratio["a"][m] * en.projection["a"].w[m])
        for j in range(k):
            xj = rows[rid == j]
            want = xj @ w if j == m else np.zeros((len(xj), o))
            np.testing.assert_allclose(xj @ e_m, want, atol=1e-5)
        erased = editing.erase({"a": editing.Linear(jnp.asarray(w))}, en, m)["a"].w
        for j in range(k):
            xj = rows[rid == j]
            want = np.zeros((len(xj), o)) if j == m else xj @ w
            np.testing.assert_allclose(xj @ np.asarray(erased), want, atol=1e-5)


def test_partition_identity_and_sum_vs_mean():
    rng = np.random.default_rng(1)
    d, o, k = 6, 3, 4
    # rank-deficient data (rank 4 < 6): sum of engrams = w C C^+, not w
    basis = rng.normal(size=(4, d))
    x = (rng.normal(size=(2, 20, 4)) @ basis).astype(np.float32)
    ids = rng.integers(0, k, size=(2, 20)).astype(np.int32)
    w = jnp.asarray(rng.normal(size=(d, o)), jnp.float32)
    st = _stats(x, ids, k, absorb_bias=False)
    en = editing.extract({"a": editing.Linear(w)}, st)
    total = editing.compose({"a": editing.Linear(w)}, en, jnp.ones(k, jnp.float32), base=0.0)
    rows = x.reshape(-1, d).astype(np.float64)
    c = rows.T @ rows / len(rows)
    proj = np.linalg.pinv(c, rcond=1e-5) @ c  # projector onto the data span
    np.testing.assert_allclose(total["a"].w, proj @ np.asarray(w), atol=1e-4)
    assert np.linalg.norm(np.asarray(total["a"].w) - np.asarray(w)) > 0.1  # not w itself
    np.testing.assert_allclose(rows @ np.asarray(total["a"].w), rows @ np.asarray(w), atol=1e-4)
    # mean vs sum: (n/N) C^+ C_t w == Sigma^+ Sigma_t w (pinv scale invariance)
    rid = ids.reshape(-1)
    xt = rows[rid == 2]
    sums = editing.engram_projection(
        w,
        jnp.asarray(xt.T @ xt, jnp.float32),
        jnp.asarray(rows.T @ rows, jnp.float32),
    )
    e2 = en.ratio["a"][2] * en.projection["a"].w[2]
    np.testing.assert_allclose(sums, e2, atol=1e-4)


@pytest.mark.slow
def test_full_rank_partition_equals_w_with_bias():
    rng = np.random.default_rng(2)
    d, o, k = 4, 3, 3
    x = rng.normal(size=(3, 16, d)).astype(np.float32) + 0.5
    ids = rng.integers(0, k, size=(3, 16)).astype(np.int32)
    lin = editing.Linear(
        jnp.asarray(rng.normal(size=(d, o)), jnp.float32),
        jnp.asarray(rng.normal(size=(o,)), jnp.float32),
    )
    en = editing.extract({"a": lin}, _stats(x, ids, k))
    total = editing.keep_only({"a": lin}, en, jnp.arange(k))["a"]
    np.testing.assert_allclose(total.w, lin.w, atol=1e-4)
    np.testing.assert_allclose(total.b, lin.b, atol=1e-4)


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def _full_rank_problem(rng, d=4, o=3, k=3):
    x = rng.normal(size=(2, 15, d)) + 0.3
    ids = rng.integers(0, k, size=(2, 15)).astype(np.int32)
    ids[0, :k] = np.arange(k)
    w = rng.normal(size=(d, o))
    return x, ids, w


def test_natural_gradient_and_memit_equivalences(x64):
    rng = np.random.default_rng(3)
    x, ids, w = _full_rank_problem(rng)
    k = 3
    st = _stats(x, ids, k, absorb_bias=False)
    lin = editing.Linear(jnp.asarray(w))
    en = editing.extract({"a": lin}, st, rcond=1e-12)
    rows, rid = x.reshape(-1, x.shape[-1]), ids.reshape(-1)
    for m in range(k):
        erased = editing.erase({"a": lin}, en, m)["a"].w
        ng = editing.natural_gradient_erase(w, rows[rid == m], rows)
        mm = editing.memit_erase(w, rows[rid == m], rows[rid != m])
        np.testing.assert_allclose(erased, ng, atol=1e-5)
        np.testing.assert_allclose(erased, mm, atol=1e-5)


@pytest.mark.slow
def test_bias_absorption_is_affine_memit(x64):
    rng = np.random.default_rng(4)
    x, ids, w = _full_rank_problem(rng)
    b = rng.normal(size=(w.shape[1],))
    lin = editing.Linear(jnp.asarray(w), jnp.asarray(b))
    en = editing.extract({"a": lin}, _stats(x, ids, 3), rcond=1e-12)
    out = editing.erase({"a": lin}, en, 1)["a"]
    rows = np.concatenate([x.reshape(-1, x.shape[-1]), np.ones((x.size // x.shape[-1], 1))], 1)
    rid = ids.reshape(-1)
    mm = editing.memit_erase(np.concatenate([w, b[None]]), rows[rid == 1], rows[rid != 1])
    np.testing.assert_allclose(out.w, mm[:-1], atol=1e-5)
    np.testing.assert_allclose(out.b, mm[-1], atol=1e-5)


def test_reparameterisation_invariance(x64):
    rng = np.random.default_rng(5)
    x, ids, w = _full_rank_problem(rng)
    a = rng.normal(size=(4, 4)) + 3 * np.eye(4)
    x2, w2 = x @ a, np.linalg.solve(a, w)  # same function: (x A)(A^-1 w) = x w
    rows = x.reshape(-1, 4)
    outs = []
    for xx, ww, r in ((x, w, rows), (x2, w2, rows @ a)):
        lin = editing.Linear(jnp.asarray(ww))
        en = editing.extract({"a": lin}, _stats(xx, ids, 3, absorb_bias=False), rcond=1e-12)
        outs.append(r @ np.asarray(editing.erase({"a": lin}, en, 0, alpha=0.7)["a"].w))
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-6)


@pytest.mark.slow
def test_scales_and_layer_scale():
    rng = np.random.default_rng(6)
    x, ids, w = _full_rank_problem(rng)
    x = x.astype(np.float32)
    lin = editing.Linear(jnp.asarray(w, jnp.float32))
    lin2 = editing.Linear(jnp.asarray(2 * w, jnp.float32))
    st = _stats(x, ids, 3, absorb_bias=False)
    st = editing.CovStats({**st.cov, "b": st.cov["a"]}, {**st.count, "b": st.count["a"]})
    layers = {"a": lin, "b": lin2}
    en = editing.extract(layers, st)
    r = en.ratio["a"]
    p_s = (r[0] * en.projection["a"].w[0] + r[2] * en.projection["a"].w[2]) / (r[0] + r[2])
    uni = editing.erase(layers, en, jnp.array([0, 2, 2]), scale="uniform", alpha=0.5)
    np.testing.assert_allclose(uni["a"].w, lin.w - 0.5 * p_s, atol=1e-5)
    cr = editing.erase(layers, en, jnp.array([0, 2]), layer_scale={"b": 3.0})
    np.testing.assert_allclose(cr["a"].w, lin.w - (r[0] + r[2]) * p_s, atol=1e-5)
    np.testing.assert_allclose(cr["b"].w, lin2.w - 3 * 2 * (r[0] + r[2]) * p_s, atol=1e-5)
    # weight_norm: ||P_l|| / ||W_l|| is the same for both layers here -> f_l = 1 for both
    wn = editing.erase(layers, en, jnp.array([0, 2]), scale="weight_norm")
    np.testing.assert_allclose(wn["a"].w, lin.w - p_s, atol=1e-5)
    np.testing.assert_allclose(wn["b"].w, lin2.w - 2 * p_s, atol=1e-5)


@pytest.mark.slow
def test_stacked_transformer_mlp_weights_equal_per_layer():
    cfg = nn.TransformerConfig(
        vocab_size=16, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=4, mlp_dim=12
    )
    params = nn.init_params(cfg, key=jax.random.key(0))
    w_up = params["layers"]["w_up"]  # [L, D, F], the stacked layout
    sites = {"up": lambda p: p["layers"]["w_up"]}
    layers = editing.get_layers(params, sites)
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(2, 2, 10, 8)).astype(np.float32)  # [nb, L, R, D]
    ids = rng.integers(0, 3, size=(2, 10)).astype(np.int32)
    st = editing.collect_stats(lambda p, bt: {"up": bt}, None, rows, ids, num_memories=3)
    en = editing.extract(layers, st)
    out = editing.erase(layers, en, 1)
    for layer in range(2):
        st1 = _stats(rows[:, layer], ids, 3)
        e1 = editing.extract({"a": editing.Linear(w_up[layer])}, st1)
        np.testing.assert_allclose(en.projection["up"].w[:, layer], e1.projection["a"].w, atol=1e-5)
        o1 = editing.erase({"a": editing.Linear(w_up[layer])}, e1, 1)["a"].w
        np.testing.assert_allclose(out["up"].w[layer], o1, atol=1e-5)
    new = editing.set_layers(params, sites, out)
    np.testing.assert_array_equal(new["layers"]["w_up"], out["up"].w)
    assert new["layers"]["w_gate"] is params["layers"]["w_gate"]


@pytest.mark.slow
def test_conv_via_patches():
    rng = np.random.default_rng(8)
    x = jnp.asarray(rng.normal(size=(2, 3, 6, 6)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(5, 3, 3, 3)), jnp.float32)
    for stride, pad in ((1, "SAME"), (2, "VALID")):
        ref = jax.lax.conv_general_dilated(
            x, w, (stride, stride), pad, dimension_numbers=("NCHW", "OIHW", "NCHW")
        )
        rows = editing.conv_patches(x, 3, stride=stride, padding=pad)
        got = rows @ editing.conv_weight_to_linear(w)
        want = jnp.moveaxis(ref, 1, -1).reshape(-1, 5)
        np.testing.assert_allclose(got, want, atol=1e-4)
    m = editing.conv_weight_to_linear(w)
    np.testing.assert_array_equal(editing.linear_to_conv_weight(m, w.shape), w)


def test_pinv_cutoff_on_singular_statistics():
    """Rank-deficient f32 statistics: the default cut-off gives a finite, data-exact edit;
    rcond=0 keeps the noise directions and amplifies them (the authors' pitfall)."""
    rng = np.random.default_rng(9)
    d, rank = 32, 10
    x = (rng.normal(size=(2, 40, rank)) @ rng.normal(size=(rank, d))).astype(np.float32)
    ids = (np.arange(80).reshape(2, 40) % 2).astype(np.int32)
    w = rng.normal(size=(d, 2)).astype(np.float32)
    lin = editing.Linear(jnp.asarray(w))
    st = _stats(x, ids, 2, absorb_bias=False)
    good = editing.extract({"a": lin}, st)  # default rcond = D * eps_f32
    bad = editing.extract({"a": lin}, st, rcond=0.0)
    pg, pb = np.asarray(good.projection["a"].w), np.asarray(bad.projection["a"].w)
    assert np.all(np.isfinite(pg)) and np.all(np.isfinite(pb))
    assert np.linalg.norm(pb) > 3 * np.linalg.norm(pg)
    # the regularised edit agrees with the min-norm least-squares (MEMIT) edit on the data
    rows, rid = x.reshape(-1, d).astype(np.float64), ids.reshape(-1)
    erased = np.asarray(editing.erase({"a": lin}, good, 0)["a"].w, np.float64)
    mm = np.asarray(editing.memit_erase(w.astype(np.float64), rows[rid == 0], rows[rid == 1]))
    scale = np.abs(rows @ w).max()
    np.testing.assert_allclose(rows @ erased / scale, rows @ mm / scale, atol=1e-3)


def test_engram_bad_input():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(1, 8, 3)).astype(np.float32)
    ids = np.array([[0, 1] * 4], np.int32)
    st = _stats(x, ids, 2)
    lin = editing.Linear(jnp.ones((3, 2)), jnp.zeros((2,)))
    en = editing.extract({"a": lin}, st)
    with pytest.raises(ValueError, match="`memories`"):
        editing.erase({"a": lin}, en, 2)
    with pytest.raises(ValueError, match="`memories`"):
        editing.keep_only({"a": lin}, en, jnp.array([0, -1]))
    with pytest.raises(TypeError, match="`memories`"):
        editing.erase({"a": lin}, en, 0.5)
    with pytest.raises(ValueError, match="`scale`"):
        editing.erase({"a": lin}, en, 0, scale="nope")
    f = jax.jit(lambda m: editing.erase({"a": lin}, en, m)["a"].w)
    with pytest.raises(Exception, match="`memories`"):
        jax.block_until_ready(f(jnp.array(9)))
    nan = editing.CovStats({"a": st.cov["a"].at[0, 0, 0].set(jnp.nan)}, st.count)
    with pytest.raises(ValueError, match="finite"):
        editing.extract({"a": lin}, nan)
    empty = editing.CovStats(st.cov, {"a": jnp.zeros((2,), jnp.int32)})
    with pytest.raises(ValueError, match="no rows"):
        editing.extract({"a": lin}, empty)
    for r in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="`rcond`"):
            editing.extract({"a": lin}, st, rcond=r)
    nob = editing.collect_stats(_rows_fn, None, x, ids, num_memories=2, absorb_bias=False)
    with pytest.raises(TypeError, match="absorb_bias"):
        editing.extract({"a": lin}, nob)
    with pytest.raises(TypeError, match="no site"):
        editing.extract({"zz": lin}, st)
    # statistics of the wrong rank or counts of the wrong length (before: IndexError / none)
    with pytest.raises(TypeError, match=r"`stats.cov\['a'\]` must have at least 3"):
        editing.extract({"a": lin}, editing.CovStats({"a": st.cov["a"][0]}, st.count))
    with pytest.raises(TypeError, match=r"`stats.count\['a'\]` must have shape \(2\)"):
        editing.extract({"a": lin}, editing.CovStats(st.cov, {"a": st.count["a"][:1]}))
    with pytest.raises(TypeError, match="`stats.count` has no site"):
        editing.extract({"a": lin}, editing.CovStats(st.cov, {}))


def test_audit_bad_inputs():
    # wave-24 audit: were an opaque unpack error, a silent cut-off and a bare KeyError
    with pytest.raises(TypeError, match="shape"):
        editing.linear_to_conv_weight(np.ones((27, 5), np.float32), (5, 27))
    with pytest.raises(ValueError, match="`d`"):
        editing.default_rcond(0)
    with pytest.raises(KeyError, match="layers"):
        editing.set_layers({"w": np.ones(2)}, {"a": lambda p: p["w"]}, {})


def test_record_fields_checked():
    # records inside dicts: counts, ratios and written-back weights were unchecked
    rng = np.random.default_rng(11)
    x = rng.normal(size=(1, 8, 3)).astype(np.float32)
    st = _stats(x, np.array([[0, 1] * 4], np.int32), 2)
    lin = editing.Linear(jnp.ones((3, 2)), jnp.zeros((2,)))
    floats = editing.CovStats(st.cov, {"a": st.count["a"].astype(jnp.float32)})
    with pytest.raises(TypeError, match=r"`stats.count\['a'\]` must be an integer"):
        editing.extract({"a": lin}, floats)
    negative = editing.CovStats(st.cov, {"a": jnp.array([-1, 9], jnp.int32)})
    with pytest.raises(ValueError, match=r"`stats.count\['a'\]` must be row counts >= 0"):
        editing.extract({"a": lin}, negative)
    with pytest.raises(ValueError, match=r"`b.count\['a'\]`"):
        editing.merge_stats(st, negative)
    en = editing.extract({"a": lin}, st)
    bad = en._replace(ratio={"a": en.ratio["a"][:, None]})
    with pytest.raises(TypeError, match=r"`engrams.ratio\['a'\]` must have shape \(2\)"):
        editing.compose({"a": lin}, bad, jnp.ones(2))
    params = {"w": jnp.ones((3, 2))}
    with pytest.raises(TypeError, match=r"`layers\['a'\].w` must have shape \(3, 2\)"):
        editing.set_layers(
            params, {"a": lambda p: p["w"]}, {"a": editing.Linear(jnp.ones((1, 3, 2)))}
        )
