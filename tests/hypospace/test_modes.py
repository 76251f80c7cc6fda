"""`compat` vs `strict` scoring (spec §1.3, §1.2.4 quirks, §1.7): the modes differ exactly
where upstream's scorer departs from membership in H_O, and nowhere else."""

import jax
import numpy as np
import pytest

from jaxkit import hypospace as H


def _py_metrics(ids, adm, valid, counted):
    """Upstream's definitions with Python sets (the oracle)."""
    n = len(ids)
    parsed = [i >= 0 for i in ids]
    v = [p and ok for p, ok in zip(parsed, valid, strict=True)]
    uniq = {i for i, p, c in zip(ids, parsed, counted, strict=True) if p and c}
    found = {i for i, ok in zip(ids, v, strict=True) if ok and i in adm}
    return sum(v) / n, len(uniq) / n, len(found) / max(len(adm), 1), sum(parsed) / n


def test_metrics_valid_counted_against_python_sets():
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(-1, 12, size=10).astype(np.int32)
        adm_ids = rng.permutation(12)[:5]
        adm = np.concatenate([adm_ids, -np.ones(3, int)]).astype(np.int32)
        valid = rng.random(10) < 0.6
        counted = rng.random(10) < 0.7
        got = H.metrics(ids, adm, valid=valid, counted=counted)
        want = _py_metrics(ids.tolist(), set(adm_ids.tolist()), valid, counted)
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)
        # defaults: valid = admissible, counted = every parsed proposal (strict)
        member = np.isin(ids, adm_ids)
        got = H.metrics(ids, adm)
        want = _py_metrics(ids.tolist(), set(adm_ids.tolist()), member, np.ones(10, bool))
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)
    with pytest.raises(TypeError, match="valid"):
        H.metrics(ids, adm, valid=np.ones(10, np.int32))
    with pytest.raises(TypeError, match="counted"):
        H.metrics(ids, adm, counted=np.ones(9, bool))


def test_boolean_modes_differ_exactly_on_rejected_ground_truths():
    """Perfect memory (enumerative, N = K): strict scores V = U = R = 1 on every set; compat
    scores the share of H_O passing upstream's in-space test, so the modes differ exactly
    on the sets whose H_O holds one of the 31 rejected ground truths (full, depth 2)."""
    c = H.boolean_candidates("full", 2)
    tasks = H.boolean_collection("full", 2)
    adm = H.task_masks([t.admissible for t in tasks], c.ids)
    spec = H.SamplerSpec("enumerative")
    strict = H.evaluate(c, adm, spec, key=jax.random.key(0), mode="strict")
    compat = H.evaluate(c, adm, spec, key=jax.random.key(0), mode="compat")
    for f in ("validity", "uniqueness", "recovery"):
        np.testing.assert_allclose(np.asarray(getattr(strict.metrics, f)), 1.0, atol=1e-6)
    table = H.enumerate_expressions("full", 2)
    # upstream's rule from the spec: sympy depth, NOR = Not(Or) costs two levels
    rejected = {i for i, d in enumerate(table.ref_depth) if d > 2}
    assert len(rejected) == 31
    share = np.array([np.mean([int(a) not in rejected for a in t.admissible]) for t in tasks])
    for f in ("validity", "uniqueness", "recovery"):
        np.testing.assert_allclose(np.asarray(getattr(compat.metrics, f)), share, atol=1e-6)
    assert 0 < np.sum(share < 1) < len(tasks)  # differs on some sets, not on all


def test_extended_not_or_and_voxel_compat_valid():
    # extended depth 2: `NOT (x OR y)` reads as the disallowed NOR in compat mode only
    c = H.boolean_candidates("extended", 2)
    table = H.enumerate_expressions("extended", 2)
    nor = table.text.index("NOT (x OR y)")
    assert not c.in_space[nor] and c.in_space.sum() == len(c.ids) - 1
    # compat_valid widens validity only in compat mode (3D: answers over the height cap);
    # basic depth 2 has no in-space quirk, so only the widened candidate can differ
    c = H.boolean_candidates("basic", 2)
    assert c.in_space.all()
    tasks = H.boolean_collection("basic", 2)
    adm = H.task_masks([t.admissible for t in tasks], c.ids)
    wide = adm | (np.arange(len(c.ids)) == 0)[None, :]
    u, key, n = H.SamplerSpec("uniform_space"), jax.random.key(2), 256
    m_s = H.evaluate(c, adm, u, key=key, mode="strict", compat_valid=wide, n_queries=n).metrics
    m_c = H.evaluate(c, adm, u, key=key, mode="compat", compat_valid=wide, n_queries=n).metrics
    d_v = np.asarray(m_c.validity) - np.asarray(m_s.validity)
    np.testing.assert_array_equal(np.asarray(m_c.recovery), np.asarray(m_s.recovery))
    np.testing.assert_array_equal(np.asarray(m_c.uniqueness), np.asarray(m_s.uniqueness))
    np.testing.assert_array_equal(d_v[adm[:, 0]], 0.0)  # widened id already admissible
    out = d_v[~adm[:, 0]]
    assert np.all(out >= 0) and abs(out.mean() - 0.1) < 4 * np.sqrt(0.09 / n / len(out))
    with pytest.raises(ValueError, match="`mode`"):
        H.evaluate(c, adm, u, key=key, mode="loose")
    with pytest.raises(ValueError, match="`compat_valid`"):
        H.evaluate(c, adm, u, key=key, compat_valid=np.zeros_like(adm))
