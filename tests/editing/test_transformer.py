"""Engrams on a jaxkit.nn language model: the tiny_lm fixture, one memory per counting step.

The fixture counts ``s, s+d, s+2d, ... (mod 16)`` with steps ``d`` in {1, 2, 3}, next-token
accuracy 1.0. Memory ``d - 1`` is the set of sequences of step ``d``; the engram is taken at
the MLPs of both blocks (``editing.transformer_*``), read through ``nn``'s read sites, and
the edited model decodes with ``decoding.ar_generate``.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, editing, io, nn

V = 16  # the fixture's vocabulary (counting mod 16)


def _sequences(seed, batch):
    t = nn.tiny_task("counting", key=jax.random.key(seed), batch=batch, length=24)
    tok = np.asarray(t.tokens)
    return tok, (tok[:, 1] - tok[:, 0]) % V  # the step of each sequence


@functools.cache
def _data():
    """The fixture, 4 batches of 128 sequences ``[nb, B, T]`` and their memories ``[nb, B]``."""
    fx = io.load_fixture("tiny_lm")
    data = [_sequences(100 + i, 128) for i in range(4)]
    tokens = jnp.asarray(np.stack([t for t, _ in data]))
    ids = jnp.asarray(np.stack([d - 1 for _, d in data]), jnp.int32)
    return fx, tokens, ids


@functools.cache
def _setup():
    fx, tokens, ids = _data()
    taps = editing.transformer_taps(fx.cfg)
    stats = editing.collect_stats(taps, fx.params, tokens, ids, num_memories=3)
    layers = editing.transformer_layers(fx.params)
    return fx.params, fx.cfg, tokens, layers, editing.extract(layers, stats), stats


@functools.cache
def _eval_sequences():
    """600 sequences none of the statistics saw, and their steps (drawn once per worker)."""
    return _sequences(999, 600)


def _accuracy_by_step(params, cfg):
    """Teacher-forced next-token accuracy after the 2-token prompt, per step 1, 2, 3."""
    tok, step = _eval_sequences()
    pred = jnp.argmax(nn.apply(params, cfg, jnp.asarray(tok)).logits[:, :-1], axis=-1)
    ok = np.asarray(pred == tok[:, 1:])[:, 2:]
    return np.array([ok[step == d].mean() for d in (1, 2, 3)])


def _generation_by_step(params, cfg):
    """Share of exact 8-token greedy continuations of ``(s, s + d)`` prompts, per step."""
    s = np.arange(48) % V
    prompt = np.concatenate([np.stack([s, (s + d) % V], 1) for d in (1, 2, 3)])
    step = np.repeat([1, 2, 3], len(s))
    want = (prompt[:, :1] + np.arange(2, 10)[None, :] * step[:, None]) % V
    out = decoding.ar_generate(
        params,
        cfg,
        jnp.asarray(prompt),
        jnp.full((len(prompt),), 2),
        key=jax.random.key(0),
        max_new_tokens=8,
    )
    ok = np.all(np.asarray(out.tokens) == want, axis=1)
    return np.array([ok[step == d].mean() for d in (1, 2, 3)])


def test_sites_round_trip_and_keep_all_is_the_model_on_its_data():
    params, cfg, tokens, layers, engrams, _ = _setup()
    same = editing.set_transformer_layers(params, layers)
    for name in ("w_gate", "w_up", "w_down"):
        np.testing.assert_array_equal(same["layers"][name], params["layers"][name])
    assert same["layers"]["wq"] is params["layers"]["wq"] and same["embed"] is params["embed"]
    # sum over all memories of E_k = C^+ C w: w on the span of the inputs, so the model with
    # only its engrams computes what it did on the sequences the statistics came from
    kept = editing.set_transformer_layers(params, editing.keep_only(layers, engrams, jnp.arange(3)))
    want = nn.apply(params, cfg, tokens[0]).logits
    got = nn.apply(kept, cfg, tokens[0]).logits
    np.testing.assert_allclose(got, want, atol=1e-3 * float(jnp.max(jnp.abs(want))))
    assert not np.array_equal(kept["layers"]["w_up"], params["layers"]["w_up"])


def _per_erased_step(measure):
    """``measure(params, cfg)`` [3] of the fixture, then with each step's engram erased."""
    params, cfg, _, layers, engrams, _ = _setup()
    edits = [editing.erase(layers, engrams, k) for k in range(3)]
    return measure(params, cfg), [
        measure(editing.set_transformer_layers(params, e), cfg) for e in edits
    ]


def test_erasing_a_step_removes_it_and_keeps_the_others():
    base, erased = _per_erased_step(_accuracy_by_step)
    np.testing.assert_array_equal(base, 1.0)
    for k, acc in enumerate(erased):
        assert acc[k] < 0.5 and np.all(np.delete(acc, k) >= 0.95), (k, acc)
    params, cfg, _, layers, engrams, _ = _setup()
    for k in range(3):
        only = editing.set_transformer_layers(params, editing.keep_only(layers, engrams, k))
        acc = _accuracy_by_step(only, cfg)
        assert acc[k] >= 0.85 and np.all(acc[k] >= np.delete(acc, k) + 0.3), (k, acc)


def test_one_site_reads_and_writes_only_its_weights():
    # w_down alone (the F x F statistics of the full pair are what a large model cannot hold)
    params, cfg, tokens, layers, _, both = _setup()
    ids = _data()[2]
    taps = editing.transformer_taps(cfg, sites=("down_in",))
    assert taps is editing.transformer_taps(cfg, sites=("down_in",))  # compiled once
    stats = editing.collect_stats(taps, params, tokens, ids, num_memories=3)
    assert set(stats.cov) == {"down_in"}
    np.testing.assert_allclose(stats.cov["down_in"], both.cov["down_in"], rtol=1e-6)
    down = editing.transformer_layers(params, sites=("down_in",))
    np.testing.assert_array_equal(down["down_in"].w, layers["down_in"].w)
    out = editing.set_transformer_layers(
        params, editing.erase(down, editing.extract(down, stats), 2)
    )
    assert out["layers"]["w_up"] is params["layers"]["w_up"]
    assert out["layers"]["w_gate"] is params["layers"]["w_gate"]
    acc = _accuracy_by_step(out, cfg)
    assert acc[2] < 0.7 and np.all(acc[:2] >= 0.95), acc


@pytest.mark.slow
def test_erased_lm_decodes_without_the_step():
    base, erased = _per_erased_step(_generation_by_step)
    np.testing.assert_array_equal(base, 1.0)
    for k, gen in enumerate(erased):
        assert gen[k] <= 0.1 and np.all(np.delete(gen, k) >= 0.5), (k, gen)


def test_transformer_sites_bad_input():
    params, cfg, _, layers, _, _ = _setup()
    with pytest.raises(TypeError, match="cfg"):
        editing.transformer_taps({"d_model": 32})
    with pytest.raises(TypeError, match="params.*stack_layers"):
        editing.transformer_layers(nn.unstack_layers(params))
    for bad in ({}, {"attn": layers["mlp_in"]}, [layers["mlp_in"]]):
        with pytest.raises(TypeError, match="layers"):
            editing.set_transformer_layers(params, bad)
    with pytest.raises(TypeError, match="sites"):
        editing.transformer_taps(cfg, sites="mlp_in")
    for bad in ((), ("mlp_in", "mlp_in"), ("w_up",)):
        with pytest.raises(ValueError, match="sites"):
            editing.transformer_layers(params, sites=bad)
    short = layers | {"down_in": editing.Linear(layers["down_in"].w[:, 1:])}
    with pytest.raises(TypeError, match="down_in"):
        editing.set_transformer_layers(params, short)
    biased = layers | {"down_in": editing.Linear(layers["down_in"].w, jnp.zeros(cfg.d_model))}
    with pytest.raises(TypeError, match="down_in"):
        editing.set_transformer_layers(params, biased)
    ints = layers | {"mlp_in": editing.Linear(layers["mlp_in"].w.astype(jnp.int32))}
    with pytest.raises(TypeError, match="mlp_in"):
        editing.set_transformer_layers(params, ints)
