"""Gravity-constrained 3D voxel domain (spec eval_robust.md §1.2.3, §1.4 items 1-3, 6).

Oracles: the spec's counts (129 sets / 2619 structures, K = 3^b, |H| = 262143), an
explicit per-cell layer loop as the validator's brute force, the eight grid symmetries,
the int32 overflow boundary and the exact oracle-uniform recovery 1 - (1 - 1/K)^K.
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import hypospace as H


def _loop_validate(layers, top, max_height, strict):
    """Explicit loops over layers and cells."""
    L, g, _ = layers.shape
    for z, i, j in itertools.product(range(L), range(g), range(g)):
        if layers[z, i, j] not in (0, 1):
            return False
        if z > 0 and layers[z, i, j] == 1 and layers[z - 1, i, j] != 1:
            return False
    for i, j in itertools.product(range(g), range(g)):
        col = int(sum(layers[z, i, j] for z in range(L)))
        if (col > 0) != bool(top[i, j]) or (strict and col > max_height):
            return False
    return True


def test_validator_brute_force():
    rng = np.random.default_rng(0)
    top = np.array([[1, 0, 0], [0, 1, 1], [0, 0, 0]], np.int8)
    good = H.layers_from_heights(top * rng.integers(1, 5, (3, 3)), 5)
    cand = rng.choice(np.array([0, 1, 1, 2]), size=(300, 5, 3, 3)).astype(np.int8)
    ok = [H.layers_from_heights(top * rng.integers(1, 5, (3, 3)), 5) for _ in range(20)]
    cand = np.concatenate([cand, good[None], (cand * top).clip(0, 1)[:50], np.stack(ok)])
    cand[:100] = np.minimum.accumulate(cand[:100].clip(0, 1), axis=1)  # supported ones
    cand[100:120, :, 2] = 5  # out-of-range entries
    for strict in (False, True):
        got = np.asarray(H.validate_voxel(cand, top, max_height=3, strict=strict))
        want = np.array([_loop_validate(c, top, 3, strict) for c in cand])
        np.testing.assert_array_equal(got, want)
    assert bool(H.validate_voxel(good, top)) and got.any() and not got.all()


def test_collection_counts_and_ids():
    tasks = H.voxel_collection(3, 3, 3, fixed=False)
    assert len(tasks) == 129
    assert [sum(f"_b{b}_" in t.name for t in tasks) for b in (1, 2, 3)] == [9, 36, 84]
    assert sum(len(t.admissible) for t in tasks) == 2619
    assert all(len(t.admissible) == 3 ** int(t.top.sum()) for t in tasks)
    # every admissible id decodes to a valid, capped structure with that top view
    t = tasks[20]
    hs = H.enumerate_admissible(t.top, 3)
    layers = np.stack([H.layers_from_heights(h, 3) for h in hs])
    assert np.all(np.asarray(H.validate_voxel(layers, t.top, strict=True)))
    assert len(set(np.asarray(H.voxel_id(hs, max_height=3)).tolist())) == len(hs)
    # |H| = (H+1)^(g*g) - 1 non-empty supported structures: ids of all height maps are 0..
    all_h = np.array(list(itertools.product(range(4), repeat=9)), np.int8).reshape(-1, 3, 3)
    ids = np.asarray(H.voxel_id(all_h, max_height=3))
    assert np.array_equal(np.sort(ids), np.arange(4**9)) and int((ids > 0).sum()) == 262143
    # oracle-uniform recovery at x1.0 (spec §1.4.6): 0.704 / 0.654 / 0.639
    for b, want in ((1, 0.704), (2, 0.654), (3, 0.639)):
        k = 3**b
        assert abs(1 - (1 - 1 / k) ** k - want) < 5e-4


def _syms(a):
    return [np.rot90(a, r, axes=(-2, -1)) for r in range(4)] + [
        np.rot90(np.swapaxes(a, -1, -2), r, axes=(-2, -1)) for r in range(4)
    ]


def test_grid_symmetries_map_admissible_sets():
    tasks = {t.top.tobytes(): t for t in H.voxel_collection(3, 3, 2)}
    for t in list(tasks.values())[::5]:
        hs = H.enumerate_admissible(t.top, 3)
        for st, sh in zip(_syms(t.top), _syms(hs), strict=True):
            other = tasks[np.ascontiguousarray(st).tobytes()]
            got = np.sort(np.asarray(H.voxel_id(np.ascontiguousarray(sh), max_height=3)))
            assert np.array_equal(got, other.admissible)


def test_voxel_errors():
    with pytest.raises(ValueError, match="overflow"):
        H.voxel_collection(4, 3, 1)
    with pytest.raises(ValueError, match="overflow"):
        H.voxel_id(np.zeros((3, 3), np.int32), max_height=10)
    H.voxel_id(np.zeros((3, 3), np.int32), max_height=9)  # 10^9 < 2^31 fits
    with pytest.raises(TypeError, match="`layers`"):
        H.validate_voxel(np.zeros((2, 3, 4), np.int8), np.zeros((3, 3), np.int8))
    with pytest.raises(TypeError, match="`top`"):
        H.validate_voxel(np.zeros((2, 3, 3), np.int8), np.zeros((2, 2), np.int8))
    with pytest.raises(ValueError, match="`max_height`"):
        H.validate_voxel(np.zeros((2, 3, 3), np.int8), np.zeros((3, 3), np.int8), max_height=0)
    with pytest.raises(ValueError, match="`max_blocks`"):
        H.voxel_collection(2, 3, 5)
    # a cyclic-like malformed stack (entry 2, floating block) scores False, never raises
    bad = jnp.asarray([[[2, 0], [0, 0]], [[0, 1], [0, 0]]], jnp.int8)
    assert not bool(H.validate_voxel(bad, np.array([[1, 1], [0, 0]], np.int8)))
