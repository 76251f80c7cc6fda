"""Banzhaf interaction (HBI's index): shapiq oracle, subset definition, axioms, sampler.

Oracles: ``banzhaf_exact`` equals ``shapiq.ExactComputer(...)(index="BII", order=2)``
(pairs and Banzhaf values) and the subset definition ``2^{-(n-2)} sum_S delta_ij v(S)``
summed here by brute force; additive games have no interaction and a dummy player none
with anyone; ``banzhaf_mc`` is unbiased (the mean of many estimates lies within a few
standard errors of the exact index) and its standard error matches the spread.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval


def _index(coalition):
    return sum(1 << p for p in coalition)


def _definition(v, n):
    """``B_ij`` and ``B_i`` by summing over every coalition of the other players."""
    pairs, singles = np.zeros((n, n)), np.zeros(n)
    for i in range(n):
        rest = [p for p in range(n) if p != i]
        for r in range(n):
            for s in itertools.combinations(rest, r):
                singles[i] += v[_index((*s, i))] - v[_index(s)]
        singles[i] /= 2 ** (n - 1)
        for j in range(i + 1, n):
            others = [p for p in range(n) if p not in (i, j)]
            tot = 0.0
            for r in range(n - 1):
                for s in itertools.combinations(others, r):
                    tot += v[_index((*s, i, j))] - v[_index((*s, i))] - v[_index((*s, j))]
                    tot += v[_index(s)]
            pairs[i, j] = pairs[j, i] = tot / 2 ** (n - 2)
    return pairs, singles


def test_banzhaf_exact_equals_the_definition():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for n in (2, 4, 6):
            v = rng.normal(size=(2, 2**n))
            out = retrieval.banzhaf_exact(jnp.asarray(v))  # a batch of two games
            for b in range(2):
                pairs, singles = _definition(v[b], n)
                np.testing.assert_allclose(np.asarray(out.pairs[b]), pairs, atol=1e-12)
                np.testing.assert_allclose(np.asarray(out.singles[b]), singles, atol=1e-12)


@pytest.mark.slow  # importing shapiq costs ~3 s a worker; the definition above is default
def test_banzhaf_exact_equals_shapiq():
    import shapiq

    rng = np.random.default_rng(3)
    for n in (3, 6, 8):
        v = rng.normal(size=2**n)
        with jax.enable_x64(True):
            out = retrieval.banzhaf_exact(jnp.asarray(v))

        def game(coal, t=v, n=n):
            return t[(coal * (2 ** np.arange(n))).sum(1)]

        iv = shapiq.ExactComputer(game, n_players=n)(index="BII", order=2)
        for i, j in itertools.combinations(range(n), 2):
            assert abs(iv[(i, j)] - float(out.pairs[i, j])) <= 1e-9
        for i in range(n):
            assert abs(iv[(i,)] - float(out.singles[i])) <= 1e-9


def test_banzhaf_axioms():
    rng = np.random.default_rng(1)
    n = 5
    masks = retrieval.all_masks(n)
    w = rng.normal(size=n)
    additive = masks @ w
    out = retrieval.banzhaf_exact(jnp.asarray(additive, jnp.float32))
    np.testing.assert_allclose(np.asarray(out.pairs), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.singles), w, rtol=1e-5, atol=1e-5)
    # player 4 is a dummy: the value ignores it
    base = rng.normal(size=2 ** (n - 1))
    dummy = base[np.arange(2**n) & (2 ** (n - 1) - 1)]
    out = retrieval.banzhaf_exact(jnp.asarray(dummy, jnp.float32))
    np.testing.assert_allclose(np.asarray(out.pairs[4]), 0.0, atol=1e-5)
    assert abs(float(out.singles[4])) < 1e-5
    # a pure pair game v = [i and j in S]: B_ij = 1, every other pair 0
    pure = (masks[:, 1] & masks[:, 3]).astype(np.float32)
    out = retrieval.banzhaf_exact(jnp.asarray(pure))
    want = np.zeros((n, n))
    want[1, 3] = want[3, 1] = 1.0
    np.testing.assert_allclose(np.asarray(out.pairs), want, atol=1e-6)


def _table(t, m):
    return t[jnp.sum(jnp.where(m, 2 ** jnp.arange(m.shape[-1]), 0))]


def test_banzhaf_mc_is_unbiased_with_honest_stderr():
    n, runs = 6, 400
    rng = np.random.default_rng(2)
    t = jnp.asarray(rng.normal(size=2**n), jnp.float32)
    exact = np.asarray(retrieval.banzhaf_exact(t).pairs, np.float64)
    keys = jax.random.split(jax.random.key(0), runs)
    est = jax.jit(
        jax.vmap(lambda k: retrieval.banzhaf_mc(_table, t, n_players=n, key=k, n_samples=16))
    )(keys)
    pairs, se = np.asarray(est.pairs, np.float64), np.asarray(est.stderr, np.float64)
    iu = np.triu_indices(n, 1)
    spread = pairs.std(axis=0, ddof=1)[iu]
    z = (pairs.mean(axis=0)[iu] - exact[iu]) / (spread / np.sqrt(runs))
    assert np.all(np.abs(z) < 4.5), z  # unbiased for every pair
    ratio = se.mean(axis=0)[iu] / spread
    assert np.all((ratio > 0.8) & (ratio < 1.2)), ratio  # the standard error is the spread
    np.testing.assert_array_equal(np.diag(pairs[0]), 0.0)


def test_banzhaf_bad_inputs():
    with pytest.raises(ValueError, match="n >= 2"):
        retrieval.banzhaf_exact(jnp.zeros(2))
    with pytest.raises(TypeError, match="values"):
        retrieval.banzhaf_exact(jnp.zeros(6))
    t = jnp.zeros(8)
    with pytest.raises(ValueError, match="n_samples"):
        retrieval.banzhaf_mc(_table, t, n_players=3, key=jax.random.key(0), n_samples=1)
    with pytest.raises(TypeError, match="value_fn"):
        retrieval.banzhaf_mc(None, t, n_players=3, key=jax.random.key(0))
    with pytest.raises(TypeError, match="key"):
        retrieval.banzhaf_mc(_table, t, n_players=3, key=0)
