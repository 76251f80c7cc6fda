"""Metric identities, a Python-set brute force, and Monte Carlo vs the closed forms
(spec eval_robust.md §1.4 items 4-6)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import hypospace as H


def _py_metrics(ids, adm):
    """Upstream definitions with Python sets."""
    adm = {int(a) for a in adm if a >= 0}
    parsed = [int(i) for i in ids if i >= 0]
    valid = [i for i in parsed if i in adm]
    n = len(ids)
    return (
        len(valid) / n,
        len(set(parsed)) / n,
        len(set(valid)) / max(len(adm), 1),
        len(parsed) / n,
    )


def test_metrics_equal_python_sets():
    rng = np.random.default_rng(0)
    runs, n, k_max = 60, 10, 10
    ids = rng.integers(-1, 30, size=(runs, n)).astype(np.int32)
    adm = -np.ones((runs, k_max), np.int32)
    for r in range(runs):
        k = rng.integers(1, k_max + 1)
        adm[r, rng.choice(k_max, k, replace=False)] = rng.choice(30, size=k, replace=False)
        ids[r, : rng.integers(0, 4)] = adm[r, adm[r] >= 0][0]  # some repeated valid ids
    got = np.array(jax.vmap(H.metrics)(jnp.asarray(ids), jnp.asarray(adm))).T
    want = np.array([_py_metrics(i, a) for i, a in zip(ids, adm, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert want[:, 2].max() > 0 and want[:, 0].min() < 1


def test_metric_identities():
    adm = np.array([3, 7, 11, 19, -1, -1], np.int32)
    k = 4
    # enumerative with N = K: V = U = R = 1
    m = H.metrics(np.array([19, 3, 11, 7], np.int32), adm)
    np.testing.assert_allclose(np.array(m), [1, 1, 1, 1])
    # always the same valid id: V = 1, U = 1/N, R = 1/K
    n = 6
    m = H.metrics(np.full(n, 7, np.int32), adm)
    np.testing.assert_allclose(np.array(m[:3]), [1, 1 / n, 1 / k])
    # all invalid: V = R = 0
    m = H.metrics(np.array([0, 1, 2, -1], np.int32), adm)
    assert float(m.validity) == 0 and float(m.recovery) == 0 and float(m.parse_rate) == 0.75
    # U >= R K / N and R <= min(1, N V / K) on random runs
    rng = np.random.default_rng(1)
    ids = rng.choice(np.array([3, 7, 11, 19, 0, 1, -1], np.int32), size=(200, 5))
    mm = jax.vmap(H.metrics, in_axes=(0, None))(jnp.asarray(ids), jnp.asarray(adm))
    assert np.all(mm.uniqueness >= mm.recovery * k / 5 - 1e-6)
    assert np.all(mm.recovery <= np.minimum(1, 5 * mm.validity / k) + 1e-6)


def test_enumerative_identities_on_collection():
    tasks = H.generate_collection(3)
    k_max = max(len(t.admissible) for t in tasks)
    for i, t in enumerate([tasks[0], tasks[-1]]):  # K = 12 and K = 1
        k = len(t.admissible)
        adm = np.full(k_max, -1, np.int32)
        adm[:k] = t.admissible
        key = jax.random.key(i)
        m1 = H.metrics(H.enumerative(adm, k, key=key), adm)
        np.testing.assert_allclose(np.array(m1), [1, 1, 1, 1])
        m2 = H.metrics(H.enumerative(adm, 2 * k, key=key), adm)
        np.testing.assert_allclose(np.array(m2[:3]), [1, 0.5, 1])


def test_uniform_admissible_monte_carlo_vs_closed_form():
    t = H.generate_collection(3, ks=(1,))[0]  # K = 12
    dags = H.enumerate_dags(3)
    table = H.canonical_id(dags)
    adm = np.isin(np.asarray(table), t.admissible)
    k = int(adm.sum())
    runs = 2000
    keys = jax.random.split(jax.random.key(0), runs)
    for n_q in (k,):
        draws = jax.vmap(lambda kk, n_q=n_q: H.uniform_admissible(t.admissible, n_q, key=kk))(keys)
        mm = jax.vmap(H.metrics, in_axes=(0, None))(draws, jnp.asarray(t.admissible))
        p = jnp.asarray(adm / k, jnp.float32)
        ex = H.expected_metrics(p, adm, n_q)
        # closed form from spec §1.2.7: E[R] = 1 - (1 - 1/K)^N, E[U] = E[R] K / N
        er = 1 - (1 - 1 / k) ** n_q
        np.testing.assert_allclose(float(ex.recovery), er, rtol=1e-5)
        np.testing.assert_allclose(float(ex.uniqueness), er * k / n_q, rtol=1e-5)
        assert float(ex.validity) == pytest.approx(1.0)
        for got, want in ((mm.recovery, ex.recovery), (mm.uniqueness, ex.uniqueness)):
            se = float(np.std(got)) / np.sqrt(runs)
            assert abs(float(np.mean(got)) - float(want)) < 4 * se + 1e-6
        assert np.all(mm.validity == 1)
    # uniform over the whole space: E[V] = K / |H|
    draws = jax.vmap(lambda kk: H.uniform_space(table, k, key=kk))(keys)
    mm = jax.vmap(H.metrics, in_axes=(0, None))(draws, jnp.asarray(t.admissible))
    ex = H.expected_metrics(jnp.full(25, 1 / 25, jnp.float32), adm, k)
    assert float(ex.validity) == pytest.approx(k / 25)
    for got, want in ((mm.validity, ex.validity), (mm.recovery, ex.recovery)):
        se = float(np.std(got)) / np.sqrt(runs)
        assert abs(float(np.mean(got)) - float(want)) < 4 * se + 1e-6


def test_exact_baseline_table_causal_n3():
    """Spec §1.4.6: oracle-uniform R at x1.0 = 0.810, x2.0 = 0.943 (U 0.472); uniform(H)
    V / R at x1.0 = 0.115 / 0.106 (means over the 61 sets of causal n=3)."""
    tasks = H.generate_collection(3)
    table = np.asarray(H.canonical_id(H.enumerate_dags(3)))
    rows = {"r1": [], "r2": [], "u2": [], "v_h": [], "r_h": []}
    for t in tasks:
        adm = np.isin(table, t.admissible)
        k = int(adm.sum())
        p = jnp.asarray(adm / k, jnp.float32)
        e1, e2 = H.expected_metrics(p, adm, k), H.expected_metrics(p, adm, 2 * k)
        eh = H.expected_metrics(jnp.full(25, 1 / 25, jnp.float32), adm, k)
        rows["r1"].append(e1.recovery)
        rows["r2"].append(e2.recovery)
        rows["u2"].append(e2.uniqueness)
        rows["v_h"].append(eh.validity)
        rows["r_h"].append(eh.recovery)
    got = {k: float(np.mean(v)) for k, v in rows.items()}
    want = {"r1": 0.810, "r2": 0.943, "u2": 0.472, "v_h": 0.115, "r_h": 0.106}
    for name, w in want.items():
        assert got[name] == pytest.approx(w, abs=6e-4), (name, got[name])


def test_exact_baseline_table_causal_n4():
    """Spec §1.4.6, causal n=4 (847 sets): oracle-uniform R 0.748 (x1.0), 0.918 (x2.0),
    U 0.459 (x2.0); uniform(H) V / R at x1.0 = 0.018 / 0.017; k=1 only (32 sets):
    mean K 67.9, oracle R 0.636 / 0.867."""
    tasks = H.generate_collection(4)
    table = np.asarray(H.canonical_id(H.enumerate_dags(4)))
    adm = np.stack([np.isin(table, t.admissible) for t in tasks])
    k = adm.sum(axis=1)
    p = jnp.asarray(adm / k[:, None], jnp.float32)
    ex = jax.vmap(H.expected_metrics)
    e1, e2 = ex(p, adm, jnp.asarray(k)), ex(p, adm, jnp.asarray(2 * k))
    uni = jnp.full((len(tasks), len(table)), 1 / len(table), jnp.float32)
    eh = ex(uni, adm, jnp.asarray(k))
    got = [np.mean(e1.recovery), np.mean(e2.recovery), np.mean(e2.uniqueness)]
    got += [np.mean(eh.validity), np.mean(eh.recovery)]
    np.testing.assert_allclose(got, [0.748, 0.918, 0.459, 0.018, 0.017], atol=6e-4)
    k1 = np.array([t.name.startswith("n1_") for t in tasks])
    assert np.mean(k[k1]) == pytest.approx(67.9, abs=0.05)
    np.testing.assert_allclose(
        [np.mean(e1.recovery[k1]), np.mean(e2.recovery[k1])], [0.636, 0.867], atol=6e-4
    )


def test_bad_inputs():
    adm = np.array([1, 2], np.int32)
    with pytest.raises(TypeError, match="ids"):
        H.metrics(np.zeros((2, 2), np.int32), adm)
    with pytest.raises(TypeError, match="ids"):
        H.metrics(np.zeros(2, np.float32), adm)
    with pytest.raises(TypeError, match="`ids`"):
        H.metrics(np.zeros(0, np.int32), adm)
    with pytest.raises(ValueError, match="`admissible`"):
        H.uniform_admissible(np.array([-1, -1], np.int32), 3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="`n_queries`"):
        H.uniform_space(adm, 0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="`admissible`"):
        H.enumerative(np.array([-1], np.int32), 3, key=jax.random.key(0))
    with pytest.raises(TypeError, match="key"):
        H.enumerative(adm, 3, key=0)
    with pytest.raises(ValueError, match="`p`"):
        H.expected_metrics(jnp.array([0.5, 0.6]), np.array([True, False]), 2)
    with pytest.raises(ValueError, match="`n_queries`"):
        H.expected_metrics(jnp.array([0.5, 0.5]), np.array([True, False]), 0)
    with pytest.raises(TypeError, match="admissible"):
        H.expected_metrics(jnp.array([0.5, 0.5]), np.array([True, False, True]), 2)


def test_audit_bad_inputs():
    # wave-24 audit: each was a silent NaN / wrong result or an opaque NumPy error
    adm, p = np.array([True, False, True, True]), np.full(4, np.nan, np.float32)
    for bad, name in (
        (lambda: H.expected_metrics(p, adm, 3), "`p`"),
        (lambda: H.uniform_space(np.zeros(0, np.int32), 3, key=jax.random.key(0)), "table"),
        (lambda: H.voxel_id(np.full((3, 3), 9), max_height=3), "heights"),
        (lambda: H.task_masks([], np.arange(3)), "admissible_ids"),
        (lambda: H.format_observation(5, [0, 1]), "perturbed"),
    ):
        with pytest.raises(ValueError, match=name):
            bad()
