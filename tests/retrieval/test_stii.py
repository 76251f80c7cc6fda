"""Exact STII: shapiq oracle, definition, Moebius closed form, axioms, bad inputs (spec 3.4)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval


def _index(coal, n):
    return sum(1 << i for i in coal)


def _brute_stii(v, n):
    """The subset definition: STII_ij = (2/n) sum_S delta_ij v(S) / C(n-1, |S|)."""
    pairs = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        rest = [k for k in range(n) if k not in (i, j)]
        tot = 0.0
        for s in range(len(rest) + 1):
            for S in itertools.combinations(rest, s):
                b = _index(S, n)
                d = v[b | 1 << i | 1 << j] - v[b | 1 << i] - v[b | 1 << j] + v[b]
                tot += d / math.comb(n - 1, s)
        pairs[i, j] = pairs[j, i] = 2.0 / n * tot
    singles = np.array([v[1 << i] - v[0] for i in range(n)])
    return pairs, singles


def test_all_masks_bit_order():
    m = retrieval.all_masks(3)
    assert m.shape == (8, 3) and m.dtype == bool
    for idx in range(8):
        assert [bool(idx >> i & 1) for i in range(3)] == m[idx].tolist()


def test_exact_equals_shapiq_f64():
    import shapiq  # imported here: collecting it in every xdist worker costs ~4 s each

    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for n in (3, 6, 9):
            vals = rng.normal(size=(2, 2**n))  # a batch of two random games
            out = retrieval.stii_exact(jnp.asarray(vals))
            assert out.pairs.dtype == jnp.float64
            pairs, singles = np.asarray(out.pairs), np.asarray(out.singles)  # index on the host
            for g in range(2):

                def game(coal, v=vals[g], n=n):
                    return v[(coal.astype(np.int64) << np.arange(n)).sum(1)]

                iv = shapiq.ExactComputer(game, n_players=n)(index="STII", order=2)
                for i in range(n):
                    assert abs(iv[(i,)] - float(singles[g, i])) < 1e-9
                    for j in range(i + 1, n):
                        assert abs(iv[(i, j)] - float(pairs[g, i, j])) < 1e-9
                        assert float(pairs[g, j, i]) == float(pairs[g, i, j])
                assert np.all(np.diag(pairs[g]) == 0)


def test_exact_equals_subset_definition():
    rng = np.random.default_rng(1)
    n = 6
    v = rng.normal(size=2**n)
    with jax.enable_x64(True):
        out = retrieval.stii_exact(jnp.asarray(v))
    pairs, singles = _brute_stii(v, n)
    np.testing.assert_allclose(np.asarray(out.pairs), pairs, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out.singles), singles, atol=1e-12)


def test_moebius_closed_form():
    # a game given by random Moebius coefficients up to order 3
    rng = np.random.default_rng(2)
    n = 7
    coef = {T: rng.normal() for k in (1, 2, 3) for T in itertools.combinations(range(n), k)}
    v = np.zeros(2**n)
    for m in range(2**n):
        members = {i for i in range(n) if m >> i & 1}
        v[m] = 1.5 + sum(c for T, c in coef.items() if set(T) <= members)
    with jax.enable_x64(True):
        a = np.asarray(retrieval.moebius_transform(jnp.asarray(v)))
        out = retrieval.stii_exact(jnp.asarray(v))
    want_a = np.zeros(2**n)
    want_a[0] = 1.5
    for T, c in coef.items():
        want_a[_index(T, n)] = c
    np.testing.assert_allclose(a, want_a, atol=1e-12)
    for i, j in itertools.combinations(range(n), 2):
        want = coef[(i, j)] + sum(coef[T] / 3.0 for T in coef if len(T) == 3 and {i, j} <= set(T))
        assert abs(float(out.pairs[i, j]) - want) < 1e-12
    for i in range(n):
        assert abs(float(out.singles[i]) - coef[(i,)]) < 1e-12


def test_axioms():
    rng = np.random.default_rng(3)
    n = 6
    masks = retrieval.all_masks(n)

    def stii(v):  # checks on the host: eager jnp reductions compile one program each
        out = retrieval.stii_exact(jnp.asarray(v))
        return np.asarray(out.pairs), np.asarray(out.singles)

    with jax.enable_x64(True):
        v = rng.normal(size=2**n)
        pairs, singles = stii(v)
        # efficiency
        total = float(np.sum(singles) + np.sum(np.triu(pairs, 1)))
        assert abs(total - (v[-1] - v[0])) < 1e-12
        # additive game: no pair interactions
        c = rng.normal(size=n)
        add_pairs, add_singles = stii(masks @ c + 0.3)
        assert float(np.max(np.abs(add_pairs))) < 1e-12
        np.testing.assert_allclose(add_singles, c, atol=1e-12)
        # dummy player 2: v(S + 2) = v(S)
        vd = v[np.arange(2**n) & ~(1 << 2)]
        dummy_pairs, dummy_singles = stii(vd)
        assert float(np.max(np.abs(dummy_pairs[2]))) < 1e-12
        assert abs(float(dummy_singles[2])) < 1e-12
        # symmetric players 0 and 1 (v depends on them only through their count)
        swap = np.array([int(_swap_bits(m, 0, 1)) for m in range(2**n)])
        vs = 0.5 * (v + v[swap])
        sym_pairs, sym_singles = stii(vs)
        np.testing.assert_allclose(sym_pairs[0, 2:], sym_pairs[1, 2:])
        assert abs(float(sym_singles[0] - sym_singles[1])) < 1e-12
        # relabelling: v'(S) = v(pi(S)) permutes the indices
        perm = rng.permutation(n)
        relabel = np.array(
            [sum(1 << int(perm[i]) for i in range(n) if m >> i & 1) for m in range(2**n)]
        )
        re_pairs, re_singles = stii(v[relabel])
        np.testing.assert_allclose(re_pairs, pairs[np.ix_(perm, perm)], atol=1e-12)
        np.testing.assert_allclose(re_singles, singles[perm], atol=1e-12)


def _swap_bits(m, i, j):
    bi, bj = m >> i & 1, m >> j & 1
    if bi != bj:
        m ^= (1 << i) | (1 << j)
    return m


@pytest.mark.parametrize(
    "values, error, match",
    [
        (jnp.zeros(2), ValueError, "n >= 2"),
        (jnp.zeros(6), TypeError, r"2\*\*n"),
        (jnp.zeros(16, jnp.int32), TypeError, "values"),
        (jax.ShapeDtypeStruct((2**21,), jnp.float32), ValueError, "n <= 20"),
    ],
)
def test_stii_exact_bad_inputs(values, error, match):
    if isinstance(values, jax.ShapeDtypeStruct):
        values = np.zeros(values.shape, np.float32)  # 8 MB; never reaches the core
    with pytest.raises(error, match=match):
        retrieval.stii_exact(values)


def test_size_guards():
    with pytest.raises(ValueError, match="n_players"):
        retrieval.all_masks(21)
    with pytest.raises(ValueError, match="n_players"):
        retrieval.game_values(retrieval.cross_modal_value, (), n_players=25)
    with pytest.raises(TypeError, match="value_fn"):
        retrieval.game_values(3, (), n_players=4)
    with pytest.raises(ValueError, match="sim"):
        retrieval.cross_modal_stii(jnp.zeros((11, 10)), jnp.zeros(11), jnp.zeros(10))
