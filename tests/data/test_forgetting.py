"""Forgetting counts (spec training.md 2.4 item 6) against a NumPy brute force."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import data


def _brute(history, order):
    """Per example: its correctness sequence in presentation order, count 1 -> 0 steps."""
    n = history.shape[1]
    count = np.zeros(n, int)
    ever = np.zeros(n, bool)
    for i in range(n):
        seq = [history[t, i] for t in range(len(order)) if order[t][i]]
        count[i] = sum(1 for a, b in zip(seq[:-1], seq[1:], strict=True) if a and not b)
        ever[i] = any(seq)
    return count, ever


def test_forgetting_matches_brute_force_inside_jitted_scan():
    rng = np.random.default_rng(0)
    n, b, steps = 12, 5, 40
    idx = np.stack([rng.permutation(n)[:b] for _ in range(steps)]).astype(np.int32)
    acc = rng.random((steps, n)) < 0.6  # recorded accuracy history (all examples, each step)
    correct = np.take_along_axis(acc, idx, axis=1)

    @jax.jit
    def loop(c, ix):  # the update inside a jitted training loop
        def body(s, xs):
            return data.forgetting_update(s, xs[0], xs[1]), None

        return jax.lax.scan(body, data.forgetting_init(n), (c, ix))[0]

    st = loop(jnp.asarray(correct), jnp.asarray(idx))
    shown = np.zeros((steps, n), bool)
    np.put_along_axis(shown, idx, True, axis=1)
    want, ever = _brute(acc, shown)
    np.testing.assert_array_equal(np.asarray(st.count), want)
    np.testing.assert_array_equal(np.asarray(st.ever_correct), ever)
    assert want.max() >= 2  # the history exercises repeated forgetting
    # full-dataset form (idx=None): every example presented every step
    s = data.forgetting_init(n)
    for t in range(steps):
        s = data.forgetting_update(s, jnp.asarray(acc[t]))
    want_full, _ = _brute(acc, np.ones((steps, n), bool))
    np.testing.assert_array_equal(np.asarray(s.count), want_full)
    np.testing.assert_array_equal(np.asarray(s.prev_correct), acc[-1])


def test_forgetting_hand_sequence_and_bad_inputs():
    s = data.forgetting_init(3)
    for row in ([1, 0, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1]):  # ex0: 1010, ex1: 0011, ex2: 0101
        s = data.forgetting_update(s, jnp.asarray(row, bool))
    np.testing.assert_array_equal(np.asarray(s.count), [2, 0, 1])
    with pytest.raises(TypeError, match="correct"):
        data.forgetting_update(s, jnp.ones(3, jnp.int32))
    with pytest.raises(TypeError, match="correct"):
        data.forgetting_update(s, jnp.ones(2, bool))
    with pytest.raises(ValueError, match="idx"):
        data.forgetting_update(s, jnp.ones(2, bool), jnp.array([0, 3]))
    with pytest.raises(ValueError, match="idx"):
        data.forgetting_update(s, jnp.ones(2, bool), jnp.array([1, 1]))
    with pytest.raises(TypeError, match="state"):
        data.forgetting_update((1, 2, 3), jnp.ones(3, bool))
    with pytest.raises(ValueError, match="n"):
        data.forgetting_init(0)
