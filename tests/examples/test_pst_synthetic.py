"""Tests of examples/pst_synthetic.py beyond the quick-mode run of test_examples.py."""

import jax
import numpy as np
import pytest

from tests._subprocess import load_example


def _example():
    return load_example("pst_synthetic", "pst_synthetic")


def test_unknown_split_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="split"):
        _example().main(quick=True, split="compositional_test", out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="size"):
        _example().main(size="huge", out_dir=str(tmp_path))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="local_weight"):
            _example().main(quick=True, local_weight=bad, out_dir=str(tmp_path))
    for bad in ("0.1", True, None):
        with pytest.raises(TypeError, match="local_weight"):
            _example().main(quick=True, local_weight=bad, out_dir=str(tmp_path))
    with pytest.raises(TypeError, match="compress"):
        _example().main(quick=True, compress="yes", out_dir=str(tmp_path))


def test_local_weight_scales_the_token_stages_only():
    ex = _example()
    assert ex._scaled((1.0, 1.0, 0.5, 0.5), 0.1) == pytest.approx((0.1, 0.1, 0.05, 0.5))
    assert ex._scaled((0.0, 0.0, 0.0, 0.0), 0.1) == (0.0, 0.0, 0.0, 0.0)  # global-only
    assert ex._scaled(ex.VARIANTS["pst"], 1.0) == ex.VARIANTS["pst"]  # the spec's weights


def test_threshold_protocol_counts_synonym_twins():
    # captions 0 and 1 are the same up to synonyms: the model swaps them, so `normal`
    # scores both as misses while `threshold` (canonical identity) counts them as hits
    ex = _example()
    n = 40  # the guo protocol needs >= 32 pairs
    canon = np.array(["raise left arm"] * 2 + [f"kick right leg {i}" for i in range(n - 2)])
    selfsim = ex._canonical_selfsim(canon)
    assert selfsim[0, :3].tolist() == [1.0, 1.0, 0.0] and selfsim.sum() == n + 2
    sims = np.eye(n, dtype=np.float32)[[1, 0, *range(2, n)]]
    scores = np.stack([np.zeros_like(sims)] * 2 + [sims])
    out = ex._evaluate(scores, (0.0, 0.0, 0.0), jax.random.key(0), selfsim)
    assert out["normal/t2m/R01"] == 95.0 and out["normal/m2t/R01"] == 95.0
    assert out["threshold/t2m/R01"] == 100.0 and out["threshold/m2t/R01"] == 100.0


def test_stage_recall_reads_each_stage_alone():
    # stage 0 ranks every pair right, stage 1 every pair wrong: their own R@1 sums are
    # 200 and 0, and the combined score (global + 0.5 (segment + joint)) is reported apart
    n = 40
    right = 5 * np.eye(n, dtype=np.float32)
    scores = np.stack([right, -right, np.zeros((n, n), np.float32)])
    out = _example()._evaluate(scores, (1.0, 0.0, 0.0), jax.random.key(0))
    assert out["stage_joint/R01_sum"] == 200.0
    assert out["stage_segment/R01_sum"] == 0.0
    assert out["normal/t2m/MedR"] == (n + 1) / 2  # combined: 0.5 (right - right), all ties


def test_gamma_sweep_scores_each_test_weight():
    # global ranks every pair wrong, the joint stage every pair right: the combined score
    # global + g (segment + joint) is wrong below g = 1, all ties at 1, right above (the
    # order of the right and wrong sweeps rules out a sweep that ignores g)
    ex = _example()
    n = 40
    right = np.eye(n, dtype=np.float32)
    selfsim = ex._canonical_selfsim(np.array([f"caption {i}" for i in range(n)]))
    scores = np.stack([right, np.zeros_like(right), -right])
    out = ex._evaluate(scores, (1.0, 0.0, 0.0), jax.random.key(0), selfsim)["threshold_r1_by_gamma"]
    assert set(out) == set(ex.GAMMAS)
    assert out[0.0] == out[0.5] == 0.0 and out[2.0] == 200.0
    assert out[1.0] == 0.0  # an n-way tie: the averaged rank (n + 1) / 2 is no hit
    # a global-only model has no token stages: no sweep
    assert "threshold_r1_by_gamma" not in ex._evaluate(
        scores, (0.0, 0, 0), jax.random.key(0), selfsim
    )


def test_slot_truth_and_alignment_of_compressed_slots():
    # one clip of 8 time steps (frames 0-15) with segments [0, 6) and [6, 16); two motion
    # slots: steps 0-2 (frames 0, 2, 4 -> segment 0) and steps 3-7 (6..14 -> segment 1),
    # except step 4 moved to slot 0, which stays majority segment 0; words: subject (-1),
    # three words of segment 0, "then" (-1), two of segment 1; phrase slots: {subject,
    # w1, w2} -> 0, {w3, then, w5} -> 1 by majority (w3 is segment 0, w5 segment 1: tie
    # -> the lower segment), {w6} -> 1
    ex = _example()

    class Data:
        seg_frames = np.array([[[0, 6], [6, 16]]])
        seg_part = np.array([[0, 1]])
        word_segment = np.array([[-1, 0, 0, 0, -1, 1, 1]])

    class Cfg:
        n_windows, n_phrases, order_smooth = 2, 3, 0.1

    steps = np.array([[0, 0, 0, 1, 0, 1, 1, 1]])
    words = np.array([[0, 0, 0, 1, 1, 1, 2]])
    truth, phrase_truth = ex._slot_truth(Cfg, Data, steps, words)
    assert truth.tolist() == [[0, 1]] and phrase_truth.tolist() == [[0, 0, 1]]
    pmask = np.ones((1, 3), bool)
    scores = np.array([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])  # slot 0 -> phrase slot 1 (seg 0)
    assert ex._top_phrase_accuracy(scores, pmask, truth, phrase_truth) == 1.0
    scores = np.array([[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]])  # both wrong
    assert ex._top_phrase_accuracy(scores, pmask, truth, phrase_truth) == 0.0
    # a padded phrase slot is never the top one, whatever its score
    scores = np.array([[[0.0, 0.0, 9.0], [0.0, 0.0, 1.0]]])
    acc = ex._top_phrase_accuracy(scores, np.array([[True, True, False]]), truth, phrase_truth)
    assert acc == 0.5  # slot 0 -> phrase slot 0 (right), slot 1 -> slot 0 (wrong)
    # no member with a segment: truth -1, not counted
    assert ex._majority(np.array([[0, 0]]), np.array([[-1, -1]]), 2).tolist() == [[-1, -1]]


def test_bad_compressor_or_pool_is_refused(tmp_path):
    with pytest.raises(ValueError, match="compressor"):
        _example().main(quick=True, compress=True, compressor="mlp", out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="compress=True"):
        _example().main(quick=True, compressor="layer", out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="pool"):
        _example().main(quick=True, pool="max", out_dir=str(tmp_path))
