"""Extractors, margins, prompts and the authors' cache format (spec §4.4 3-4, 7)."""

import json

import jax
import numpy as np
import pytest

from jaxkit import timeseries as ts

SHAPE = ts.LEGACY_V1.primitive("shape")


def test_margins_reproduce_cached_values_exactly():
    c = ts.sampled_confidence(["Oscillate"] * 4, SHAPE)
    assert c.margin == 8.294299608857235 and c.self_consistency == 1.0
    assert c.probs[4] == 0.9990012484394508 and c.probs[0] == 0.00024968789013732833
    c = ts.sampled_confidence(["Oscillate"] * 3 + ["Recover"], SHAPE)
    assert c.margin == 1.0979460661251466 and c.self_consistency == 0.75
    c = ts.sampled_confidence(["Recover", "Oscillate"] * 2, SHAPE)
    assert c.margin == 0.0 and c.label_id == 3  # tie: first label id
    c = ts.sampled_confidence(["Rise", None, None, None], SHAPE)
    assert c.parse_rate == 0.25 and c.valid_count == 1


def _fake_llm(answers):
    """A scripted generate_fn: returns the next canned output, records prompts."""
    calls = []

    def gen(prompt, seed):
        calls.append((prompt, seed))
        return answers[len(calls) - 1]

    return gen, calls


def test_llm_extractor_with_scripted_callable():
    schema = ts.LEGACY_V1
    outs = []
    for p, lab in zip(schema.primitives, ("MILD-RISE", "Low", "Peak", "Delayed"), strict=True):
        key = ts.answer_key(p)
        outs += [f"Step1: Analysis: up.\nStep2: Analysis: down.\n{key}: {lab}"] * 3
        outs += ["no step lines here", f"Step1: Analysis: x.\n{key}: NotALabel"]
        outs += [f"Step1: Analysis: flat.\n{key}: {p.labels[0]}"]  # third try parses
    gen, calls = _fake_llm(outs)
    hist = np.array([1.0, 2.0, 3.0])
    ex = ts.LLMExtractor(gen, n_samples=4, max_retries=2)
    e = ex("Sales rose after the launch.", hist, schema, key=jax.random.key(0))
    assert len(calls) == len(outs)
    assert list(e.label_ids) == [1, 2, 2, 1]
    np.testing.assert_allclose(e.margin, 1.0979460661251466, rtol=1e-6)
    np.testing.assert_allclose(e.parse_rate, 1.0)
    prompt = calls[0][0]
    assert "Sales rose" in prompt and "Do not use" in prompt and "Step1" in prompt


def test_prompt_never_holds_the_future():
    canary = 987654.321
    hist = np.array([1.0, 2.0, 3.0])
    fut = np.array([canary, canary])  # the future exists but no extractor API takes it
    del fut
    for p in ts.V2.primitives:
        assert "987654" not in ts.build_prompt(p, hist, "A quiet day.")
    with pytest.raises(ValueError, match="`history`"):
        ts.build_prompt(SHAPE, np.array([1.0, np.nan]), "x")


def test_rule_extractor_votes_and_unknown_labels():
    lex = {
        "distribution_shift": {"STRONG-RISE": ["soared"], "STRONG-DROP": ["plunged"]},
        "volatility": {"High": ["turbulent"]},
        "shape": {"Peak": ["peaked"]},
        "temporal_influence": {"Immediate": ["at once"]},
    }
    rx = ts.RuleExtractor(lex)
    e = rx("Shares soared, soared again, then plunged; it peaked.", np.zeros(3), ts.LEGACY_V1)
    assert list(e.label_ids) == [0, 1, 2, 2]  # 2 vs 1 votes; volatility neutral (Medium)
    assert e.parse_rate[1] == 0 and e.margin[1] == 0
    assert e.margin[0] == pytest.approx(np.log(2.001 / 1.001))
    with pytest.raises(ValueError, match="shape"):
        ts.RuleExtractor({**lex, "shape": {"Spike": ["x"]}})("x", np.zeros(2), ts.LEGACY_V1)
    ids, feats = ts.confidence_features([e, e])
    assert ids.shape == (2, 4) and feats.shape == (2, 4, 4)


def _record(sid, prim, pred, gt, counts):
    conf = ts.sampled_confidence(sum(([lab] * n for lab, n in counts.items()), []), prim)
    return {
        "sample_id": sid,
        "primitive": prim.name,
        "pred_label": pred,
        "gt_label": gt,
        "gate_target": int(pred == gt),
        "label_id": prim.label_id(pred),
        "gt_label_id": prim.label_id(gt),
        "margin": conf.margin,
        "self_consistency": conf.self_consistency,
        "parse_rate": conf.parse_rate,
        "valid_count": conf.valid_count,
        "num_samples": conf.num_samples,
        "sample_probs": dict(zip(prim.labels, conf.probs.tolist(), strict=True)),
        "backend": "huggingface",
    }


def _write_cache(root):
    for p in ts.LEGACY_V1.primitives:
        a, b = p.labels[0], p.labels[1]
        recs = [_record(1, p, a, b, {a: 3, b: 1}), _record(0, p, b, b, {b: 4})]
        (root / "toy" / p.name).mkdir(parents=True)
        (root / "toy" / p.name / "train.json").write_text(json.dumps(recs))


def test_cache_load_roundtrip_and_gate_target(tmp_path):
    _write_cache(tmp_path)
    c = ts.load_cache(str(tmp_path), dataset="toy", split="train")
    assert list(c.sample_id) == [0, 1]
    np.testing.assert_array_equal(c.gate_target, (c.label_ids == c.gt_label_ids).astype(int))
    assert c.margin[0, 0] == 8.294299608857235 and c.margin[1, 2] == 1.0979460661251466
    ts.save_cache(str(tmp_path / "out"), c, dataset="toy", split="train")
    c2 = ts.load_cache(str(tmp_path / "out"), dataset="toy", split="train")
    for a, b in zip(c, c2, strict=True):
        pairs = zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]
        for x, y in pairs:
            np.testing.assert_array_equal(x, y)


def test_cache_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="<root>/<dataset>/<primitive>"):
        ts.load_cache(str(tmp_path / "absent"), dataset="toy", split="train")
    _write_cache(tmp_path)
    path = tmp_path / "toy" / "shape" / "train.json"
    recs = json.loads(path.read_text())
    recs[0]["pred_label"] = "Zigzag"
    path.write_text(json.dumps(recs))
    with pytest.raises(ValueError, match="Zigzag"):
        ts.load_cache(str(tmp_path), dataset="toy", split="train")
