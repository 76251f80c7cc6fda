"""Tests of examples/irstd_synthetic.py beyond the quick-mode run of test_examples.py."""

import numpy as np

from tests._subprocess import load_example


def test_pd_at_a_false_alarm_level_reads_the_threshold_curve():
    # one target (3x3, probability 0.9) and one false blob (2x2, probability 0.3) in a
    # 10x10 image: below 0.3 the blob's 4 pixels are false alarms (Fa 0.04), from 0.3 on
    # only the target is left (Fa 0); above 0.9 nothing is (Pd 0)
    ex = load_example("irstd_synthetic")
    gt = np.zeros((1, 10, 10), bool)
    gt[0, 1:4, 1:4] = True
    prob = np.zeros((1, 10, 10))
    prob[0, 1:4, 1:4] = 0.9
    prob[0, 7:9, 7:9] = 0.3
    curve = ex._pd_curve(prob, gt, 0.0)
    assert [t for t, _, _ in curve] == [0.05, 0.1, 0.15, 0.2, 0.25, 0.3]  # stops at Fa 0
    assert [fa for _, fa, _ in curve] == [0.04] * 5 + [0.0]
    assert ex._pd_at_fa(curve, 0.05) == (1.0, 0.05)  # the lowest threshold within the level
    assert ex._pd_at_fa(curve, 0.01) == (1.0, 0.3)
    full = ex._pd_curve(prob, gt, -1.0)  # never stops: the whole grid
    assert len(full) == 19 and full[-1][2] == 0.0  # at 0.95 the target is lost
    assert ex._pd_at_fa(full[:5], 0.01) == (None, None)  # the level is never reached
