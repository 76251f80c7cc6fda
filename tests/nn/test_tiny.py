import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import io, nn


@pytest.mark.parametrize("task", ["counting", "noisy_counting", "copy"])
def test_tasks_follow_their_rule(task, key):
    d = nn.tiny_task(task, key=key, batch=16, length=12)
    assert d.tokens.shape == (16, 12) and d.tokens.dtype == jnp.int32
    assert int(d.tokens.max()) < nn.tiny_task_vocab(task)
    acc = nn.tiny_task_accuracy(task, d.tokens, start=d.prompt_len)
    if task == "noisy_counting":
        level0 = np.asarray(d.tokens[:, 0] == 33)
        assert level0.any() and np.all(np.asarray(acc)[level0] == 1.0)
    else:
        np.testing.assert_array_equal(acc, 1.0)
    # the accuracy oracle can fail: corrupt one scored token per row
    bad = d.tokens.at[:, -2].set((d.tokens[:, -2] + 1) % 16)
    assert np.all(np.asarray(nn.tiny_task_accuracy(task, bad, start=d.prompt_len)) < 1.0)


def test_one_counting_task_the_wedlm_fixture_was_trained_on(key):
    spec = nn.NOISY_COUNTING
    assert (spec.n_symbols, spec.mask_id, spec.level_ids) == (32, 32, (33, 34, 35))
    assert spec.rho == (0.0, 0.05, 0.2) and spec.steps == (1, 2, 3)
    d = nn.tiny_task("noisy_counting", key=key, batch=16, length=12)  # compiled above
    t = np.asarray(d.tokens)
    assert d.prompt_len == spec.prompt_len == 4 and set(t[:, 0]) <= {33, 34, 35}
    steps = (t[:, 2] - t[:, 1]) % 32
    assert set(steps.tolist()) <= {1, 2, 3} and len(set(steps.tolist())) > 1  # not 1..4
    np.testing.assert_array_equal((t[:, 1] + 2 * steps) % 32, t[:, 3])  # clean prompt
    off_rule = (t[:, 3:-1] + steps[:, None]) % 32 != t[:, 4:]
    assert not off_rule[t[:, 0] == 33].any() and off_rule[t[:, 0] == 35].any()  # rho 0 / 0.2
    # a non-symbol token never follows the rule (the old modular test accepted 33 - 1)
    ok = t.copy()
    ok[:, 4:] = (t[:, 3:4] + steps[:, None] * np.arange(1, 9)) % 32
    ok[0, 5] = (ok[0, 4] + steps[0]) % 32 + 32
    acc = np.asarray(nn.tiny_task_accuracy("noisy_counting", ok, start=4))
    assert acc[0] < 1.0 and np.all(acc[1:] == 1.0)
    with pytest.raises(ValueError, match="level"):
        nn.tiny_task("counting", key=key, batch=2, length=6, level=0)


def test_fixtures_load_through_io_and_solve_their_task():
    fx = io.load_fixture("tiny_lm")
    assert isinstance(fx, io.Fixture) and fx.info["task"] == "counting"
    n = sum(x.size for x in jax.tree.leaves(fx.params))
    assert 5_000 < n < 100_000
    d = nn.tiny_task("counting", key=jax.random.key(99), batch=16, length=12)
    logits = nn.apply(fx.params, fx.cfg, d.tokens[:, :-1]).logits
    pred = np.asarray(jnp.argmax(logits, -1))[:, 1:]
    assert np.mean(pred == np.asarray(d.tokens[:, 2:])) > 0.99
    # the WeDLM model, same on-disk format: greedy next tokens follow the clean rule
    we = io.load_fixture("wedlm_counting")
    assert we.info["task"] == "noisy_counting" and we.cfg.vocab_size == nn.NOISY_COUNTING.vocab
    d = nn.tiny_task("noisy_counting", key=jax.random.key(7), batch=16, length=12)
    logits = nn.apply(we.params, we.cfg, d.tokens[:, :-1]).logits
    clean = np.asarray(d.tokens[:, 0] == 33)  # level 0: the rule holds exactly
    pred = np.asarray(jnp.argmax(logits, -1))[clean, 3:]
    assert clean.sum() >= 3 and np.mean(pred == np.asarray(d.tokens)[clean, 4:]) > 0.95
    with pytest.raises(ValueError, match="wedlm_counting"):
        io.load_fixture("does_not_exist")


def test_fixture_tensors_load_through_io(tmp_path):
    """Arrays shipped beside a fixture's model (the DLMR adapter) load by name, errors name."""
    got = io.load_fixture_tensors("dlmr_grid", "adapter.safetensors")
    assert got and all(isinstance(v, np.ndarray) and np.all(np.isfinite(v)) for v in got.values())
    # the same file read directly equals what the fixture loader returns
    path = pathlib.Path(io.__file__).parents[1] / "_fixtures" / "dlmr_grid" / "adapter.safetensors"
    direct = io.load_tensors(path)
    assert sorted(direct) == sorted(got)
    assert all(np.array_equal(direct[k], got[k]) for k in got)
    with pytest.raises(ValueError, match="filename"):
        io.load_fixture_tensors("dlmr_grid", "nope.safetensors")
    with pytest.raises(ValueError, match="name"):
        io.load_fixture_tensors("does_not_exist", "adapter.safetensors")
    with pytest.raises(TypeError, match="filename"):
        io.load_fixture_tensors("dlmr_grid", 3)
