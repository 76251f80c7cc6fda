"""The cross-modal WTI game (spec 3.4 oracle 5) and its exact STII block."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import retrieval


def _wti_np(sim, wa, wb, A, B):
    """The spec's definition, transcribed with Python sets."""
    if not A or not B:
        return 0.0
    ea = {a: np.exp(wa[a]) for a in A}
    eb = {b: np.exp(wb[b]) for b in B}
    za, zb = sum(ea.values()), sum(eb.values())
    t = sum(eb[b] / zb * max(sim[a, b] for a in A) for b in B)
    m = sum(ea[a] / za * max(sim[a, b] for b in B) for a in A)
    return 0.5 * (t + m)


def _game(key, na, nb, dtype=jnp.float64):
    k = jax.random.split(key, 3)
    sim = jax.random.uniform(k[0], (na, nb), dtype, -1, 1)
    return sim, jax.random.normal(k[1], (na,), dtype), jax.random.normal(k[2], (nb,), dtype)


def test_wti_all_masks_match_definition_and_no_nan(key):
    na, nb = 4, 4
    with jax.enable_x64(True):
        sim, wa, wb = _game(key, na, nb)
        vals = retrieval.game_values(retrieval.cross_modal_value, (sim, wa, wb), n_players=8)
        grads = jax.jit(  # one program (an eager grad compiles every op's JVP)
            jax.grad(
                lambda s: jnp.sum(
                    retrieval.game_values(retrieval.cross_modal_value, (s, wa, wb), n_players=8)
                )
            )
        )(sim)
    vals = np.asarray(vals)  # indexed on the host below
    assert np.all(np.isfinite(np.asarray(vals))) and np.all(np.isfinite(np.asarray(grads)))
    s, a, b = (np.asarray(x) for x in (sim, wa, wb))
    masks = retrieval.all_masks(8)
    for m in range(2**8):
        A = [i for i in range(na) if masks[m, i]]
        B = [j for j in range(nb) if masks[m, na + j]]
        assert abs(float(vals[m]) - _wti_np(s, a, b, A, B)) < 1e-12
    # the full coalition is the stage score; an empty side is worth 0
    with jax.enable_x64(True):
        full = retrieval.wti_value(sim, wa, wb, jnp.ones(na, bool), jnp.ones(nb, bool))
        empty = retrieval.wti_value(sim, wa, wb, jnp.zeros(na, bool), jnp.ones(nb, bool))
    assert abs(float(full) - _wti_np(s, a, b, range(na), range(nb))) < 1e-12
    assert float(empty) == 0.0


def test_cross_modal_stii_equals_shapiq(key):
    import shapiq  # imported here: collecting it in every xdist worker costs ~3 s each

    na, nb = 3, 4
    with jax.enable_x64(True):
        sims, was, wbs = zip(
            *[_game(jax.random.fold_in(key, g), na, nb) for g in range(2)], strict=True
        )
        phi = retrieval.cross_modal_stii(jnp.stack(sims), jnp.stack(was), jnp.stack(wbs))
    phi = np.asarray(phi)  # indexed on the host below
    for g in range(2):
        s, a, b = (np.asarray(x[g]) for x in (sims, was, wbs))

        def game(coal, s=s, a=a, b=b):
            return np.array(
                [
                    _wti_np(
                        s, a, b, [i for i in range(na) if c[i]], [j for j in range(nb) if c[na + j]]
                    )
                    for c in coal
                ]
            )

        iv = shapiq.ExactComputer(game, n_players=na + nb)(index="STII", order=2)
        for i, j in itertools.product(range(na), range(nb)):
            assert abs(iv[(i, na + j)] - float(phi[g, i, j])) < 1e-9


def test_wti_bad_inputs():
    import pytest

    sim = jnp.zeros((3, 2))
    with pytest.raises(TypeError, match="w_a"):
        retrieval.wti_value(sim, jnp.zeros(2), jnp.zeros(2), jnp.ones(3, bool), jnp.ones(2, bool))
    with pytest.raises(TypeError, match="mask_b"):
        retrieval.wti_value(sim, jnp.zeros(3), jnp.zeros(2), jnp.ones(3, bool), jnp.ones(2))


def test_padded_players_are_dummies(key):
    with jax.enable_x64(True):
        sim, wa, wb = _game(key, 3, 4)
        full = retrieval.cross_modal_stii(sim[:2, :3], wa[:2], wb[:3])
        padded = retrieval.cross_modal_stii(
            sim, wa, wb, jnp.array([True, True, False]), jnp.array([True, True, True, False])
        )
    p = np.asarray(padded)
    np.testing.assert_allclose(p[:2, :3], np.asarray(full), atol=1e-12)
    assert np.max(np.abs(p[2])) == 0.0 and np.max(np.abs(p[:, 3])) == 0.0
