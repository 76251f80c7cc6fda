"""Sampled STII: unbiasedness, variance, stratum allocation, bad inputs (spec 3.4 oracle 4)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval
from jaxkit.retrieval import _sampling

N = 10


def _table(t, m):
    """A general game: its value table looked up at the coalition's index."""
    idx = jnp.sum(jnp.where(m, 2 ** jnp.arange(m.shape[-1]), 0))
    return t[idx]


def _strat(k, t):
    return retrieval.stii_stratified(_table, t, n_players=N, key=k, n_samples=18)


def _perm(k, t):
    return retrieval.stii_permutation(_table, t, n_players=N, key=k, n_perms=18)


def test_size_probabilities_match_subset_weights():
    # P(s) = (2/n) C(n-2, s) / C(n-1, s): the subset formula's mass on size s
    for n in (3, 7, 10):
        p = _sampling.size_probabilities(n)
        want = [2 / n * math.comb(n - 2, s) / math.comb(n - 1, s) for s in range(n - 1)]
        np.testing.assert_allclose(p, want, rtol=1e-12)
        assert abs(p.sum() - 1) < 1e-12
        for total in (2 * (n - 1), 5 * n + 3):
            m = _sampling.stratum_allocation(n, total)
            assert m.sum() == total and m.min() >= 2


def test_order_two_game_is_estimated_exactly(key):
    # for a game with Moebius coefficients of order <= 2, delta_ij v(S) = a_ij for every S
    rng = np.random.default_rng(0)
    n = 4
    a2 = np.triu(rng.normal(size=(n, n)), 1)
    masks = retrieval.all_masks(n).astype(np.float32)
    t = jnp.asarray(
        np.einsum("mi,ij,mj->m", masks, a2, masks) + masks @ rng.normal(size=n), jnp.float32
    )
    exact = retrieval.stii_exact(t)
    for est in (
        retrieval.stii_stratified(_table, t, n_players=n, key=key, n_samples=8),
        retrieval.stii_permutation(_table, t, n_players=n, key=key, n_perms=4),
    ):
        np.testing.assert_allclose(np.asarray(est.pairs), np.asarray(exact.pairs), atol=1e-5)
        np.testing.assert_allclose(np.asarray(est.singles), np.asarray(exact.singles), atol=1e-5)
        np.testing.assert_allclose(np.asarray(est.stderr), 0, atol=1e-5)


@pytest.mark.slow
def test_samplers_unbiased_and_stratified_variance():
    """Mean of R independent estimates vs exact, n = 10, every pair.

    z = (mean - exact) / (sd / sqrt(R)); with R = 400 the mean is close to normal and
    P(|z| > 4.5) = 6.8e-6 per pair, so 45 pairs x 2 estimators fail by chance with
    probability < 1e-3 (Bonferroni). The reported stderr must match the spread.
    """
    rng = np.random.default_rng(0)
    t = jnp.asarray(rng.normal(size=2**N), jnp.float32)
    exact = np.asarray(retrieval.stii_exact(t).pairs)
    keys = jax.random.split(jax.random.key(1), 400)
    iu = np.triu_indices(N, 1)
    for fn in (_strat, _perm):
        outs = [fn(k, t) for k in keys]  # eager calls of one compiled program
        p = np.stack([np.asarray(o.pairs, np.float64)[iu] for o in outs])
        z = (p.mean(0) - exact[iu]) / (p.std(0, ddof=1) / np.sqrt(len(keys)))
        assert np.max(np.abs(z)) < 4.5, (fn.__name__, np.max(np.abs(z)))
        reported = np.mean([np.asarray(o.stderr, np.float64)[iu] ** 2 for o in outs], axis=0).sum()
        assert 0.8 < reported / p.var(0, ddof=1).sum() < 1.25
    # at equal budget (4 x 18 value calls per pair) stratification lowers the variance on
    # the WTI game: summed over pairs, 200 runs each
    k = jax.random.split(jax.random.key(2), 3)
    game = (
        jax.random.uniform(k[0], (5, 5), minval=-1, maxval=1),
        jax.random.normal(k[1], (5,)),
        jax.random.normal(k[2], (5,)),
    )
    var = {}
    for name, f in (("strat", retrieval.stii_stratified), ("perm", retrieval.stii_permutation)):
        kw = {"n_samples": 18} if name == "strat" else {"n_perms": 18}

        est = [
            np.asarray(f(retrieval.cross_modal_value, game, n_players=N, key=k, **kw).pairs)[iu]
            for k in keys[:200]
        ]
        var[name] = np.var(est, axis=0).sum()
    assert var["strat"] < var["perm"], var


def test_sampler_bad_inputs(key):
    t = jnp.zeros(2**4)
    with pytest.raises(ValueError, match="n_samples"):
        retrieval.stii_stratified(_table, t, n_players=4, key=key, n_samples=5)
    with pytest.raises(ValueError, match="n_players"):
        retrieval.stii_stratified(_table, t, n_players=1, key=key, n_samples=5)
    with pytest.raises(ValueError, match="n_perms"):
        retrieval.stii_permutation(_table, t, n_players=4, key=key, n_perms=1)
    with pytest.raises(TypeError, match="key"):
        retrieval.stii_permutation(_table, t, n_players=4, key=3, n_perms=4)
    with pytest.raises(TypeError, match="value_fn"):
        retrieval.stii_permutation(None, t, n_players=4, key=key, n_perms=4)
