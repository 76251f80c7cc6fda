"""The Boolean and 3D LLM paths with a scripted fake client (no network): upstream's
extraction / parser rules incl. malformed answers, retries, history, token accounting,
checkpoint / resume, and the compat / strict scores of the same answers."""

import json

import jax
import numpy as np
import pytest

from jaxkit import hypospace as H
from tests.hypospace.test_llm import Scripted


def _key(text):
    return H.boolean_key(H.extract_boolean(text))


@pytest.mark.parametrize(
    "text,want",
    [
        ("Expression: x AND y", "x AND y"),
        ("Reasoning...\nexpression: $x \\land \\neg y$.", "x AND NOT y"),
        ("`NOR(x, y)`", "NOT (x OR y)"),  # fallback line with an operator word
        ("Expression: (y OR x) AND (x OR y)", "x OR y"),  # idempotence, commutativity
        ("Expression: x AND (y AND x)", "x AND y"),  # associativity flattening
        ("Expression: NOT NOT x", "NOT NOT x"),  # kept as is
        ("Expression: x ∨ ¬x", "x OR NOT x"),
        ("Expression: ~(x | y) & x", "x AND NOT (x OR y)"),
        ("Expression: xANDNOTy", "x AND NOT y"),  # upstream's plain string replacement
    ],
)
def test_boolean_parser_matches_table_text(text, want):
    t = H.enumerate_expressions("full", 2)
    key = _key(text)
    assert key == H.boolean_key(want) and key in t.keys
    assert H.boolean_key(t.text[t.keys.index(key)]) == key  # the table's text reads back


@pytest.mark.parametrize(
    "text", ["Expression: x AND", "Expression: x XOR y", "x and y", "NOR((x OR y), x)"]
)
def test_boolean_unreadable(text):
    assert H.extract_boolean("I don't know!") is None  # nothing extractable: retried
    assert H.extract_boolean(text) is not None and _key(text) is None


def test_run_boolean_modes_retries_history():
    tasks = H.boolean_collection("full", 2)
    task = next(t for t in tasks if t.name == "n2_inputs_00_11_outputs_00")
    answers = [
        "I don't know!",  # nothing extractable: retried
        RuntimeError("HTTP 503"),
        "Expression: x AND NOT (x OR y)",  # valid; compat depth 3 -> out of space
        "Expression: NOR(x, y)",  # (0,0) -> 1: invalid in both
        "Expression: x AND NOT x",  # valid in both
        "Expression: NOT x AND x",  # same key: a repeat
        "Expression: x AND",  # unreadable: invalid, counted only in strict
    ]
    runs = {}
    for mode in ("compat", "strict"):
        client = Scripted(list(answers))
        runs[mode] = H.run_boolean(client, task, 5, ops="full", depth=2, mode=mode)
        r = runs[mode]
        assert (r.usage.calls, r.usage.errors, r.usage.parse_failures) == (7, 1, 1)
        assert "Prior" not in client.prompts[0] and "None" in client.prompts[0]
        # the history shows every extracted text, duplicates included
        assert "Expression: x AND NOT x\nExpression: NOT x AND x" in client.prompts[-1]
        assert "(x=0, y=0) -> 0\n(x=1, y=1) -> 0" in client.prompts[0]
    c, s = runs["compat"], runs["strict"]
    np.testing.assert_array_equal(c.ids, s.ids)
    assert c.valid.tolist() == [False, False, True, True, False]
    assert s.valid.tolist() == [True, False, True, True, False]
    assert c.counted.tolist() == [False, True, True, True, False]
    assert s.counted.tolist() == [True] * 5
    adm = np.concatenate([task.admissible, -np.ones(2, np.int32)])
    mc = H.metrics(c.ids, adm, valid=c.valid, counted=c.counted)
    ms = H.metrics(s.ids, adm, valid=s.valid, counted=s.counted)
    k = len(task.admissible)
    np.testing.assert_allclose(np.asarray(mc)[:3], [2 / 5, 2 / 5, 1 / k], atol=1e-6)
    np.testing.assert_allclose(np.asarray(ms)[:3], [3 / 5, 4 / 5, 2 / k], atol=1e-6)


def test_boolean_error_history_and_checkpoint(tmp_path):
    task = H.boolean_collection("basic", 1)[0]
    ck = tmp_path / "b.json"
    r1 = H.run_boolean(
        Scripted([OSError("timeout")] * 2 + ["Expression: x AND y"]), task, 2,
        ops="basic", depth=1, max_retries=2, checkpoint=ck,
    )  # fmt: skip
    assert r1.ids[0] == -1 and r1.history[0].startswith("[ERROR after 2 attempts] OSError")
    second = Scripted(["Expression: x OR y"])
    r2 = H.run_boolean(second, task, 3, ops="basic", depth=1, checkpoint=ck)
    assert r2.ids[:2].tolist() == r1.ids.tolist() and len(second.prompts) == 1
    assert "Expression: [ERROR after 2" in second.prompts[0]
    assert json.loads(ck.read_text())["mode"] == "compat"


@pytest.mark.parametrize(
    "text,layers",
    [
        ("Structure:\nLayer 1:\n1 0\n0 0\nLayer 2:\n1 0\n0 0", [[[1, 0], [0, 0]]] * 2),
        ("Layer 1:\n1,0\n[0 1]\nNote: fine", [[[1, 0], [0, 1]]]),
        ("Structure:\nLayer 1:\n1|0|1\nLayer 3:\n1 1 1", [[[1, 0, 1]]]),  # out of order
        ("Structure:\nLayer 1:\n1 2 1\n0 x\n1\nthis structure works", [[[1], [1]]]),
        ("Structure:\nLayer 1:\n1 0\nLayer 2:\n0 0", [[[1, 0]]]),  # empty top trimmed
        ("no structure here", None),
    ],
)
def test_parse_voxel(text, layers):
    got = H.parse_voxel(text)
    if layers is None:
        assert got is None
    else:
        np.testing.assert_array_equal(got, np.asarray(layers))


def test_run_voxel_modes_height_cap():
    task = H.voxel_collection(2, 2, 1)[0]  # top view 10 / 00, K = 2 (heights 1, 2)
    tall = "Structure:\n" + "\n".join(f"Layer {z}:\n1 0\n0 0" for z in (1, 2, 3))
    answers = [
        tall,  # right top view, over the cap: compat-valid, never admissible
        "Structure:\nLayer 1:\n0 0\n0 0\nLayer 2:\n1 0\n0 0",  # unsupported
        "Structure:\nLayer 1:\n1 0\n0 0",  # h = 1: admissible
        "Layer 1:\n1 0\n0 0",  # repeat
        "blah",
        "blah",
        "blah",  # third failure: -1
    ]
    runs = {}
    for mode in ("compat", "strict"):
        client = Scripted(list(answers))
        runs[mode] = H.run_voxel(client, task, 5, max_height=2, mode=mode)
        assert "Attempt 1:\nLayer 1:\n1 0\n0 0\nLayer 2:" in client.prompts[1]
        assert client.prompts[-1].count("Attempt") == 3  # unique structures only
        assert "Top view (1 where any layer has a block):\n1 0\n0 0" in client.prompts[0]
    c, s = runs["compat"], runs["strict"]
    np.testing.assert_array_equal(c.ids, s.ids)
    assert c.valid.tolist() == [True, False, True, True, False]
    assert s.valid.tolist() == [False, False, True, True, False]
    assert c.ids[2] == int(H.voxel_id(np.array([[1, 0], [0, 0]]), max_height=2))
    adm = task.admissible
    mc = H.metrics(c.ids, adm, valid=c.valid, counted=c.counted)
    ms = H.metrics(s.ids, adm, valid=s.valid, counted=s.counted)
    np.testing.assert_allclose(np.asarray(mc), [3 / 5, 3 / 5, 1 / 2, 4 / 5], atol=1e-6)
    np.testing.assert_allclose(np.asarray(ms), [2 / 5, 3 / 5, 1 / 2, 4 / 5], atol=1e-6)


def test_run_causal_modes_cycles():
    task = next(t for t in H.generate_collection(3, (1,)) if len(t.admissible) == 4)
    answers = ["Graph: A->B, B->A", "Graph: A->B"]
    c = H.run_causal(Scripted(list(answers)), task, 1, mode="compat")
    s = H.run_causal(Scripted(list(answers)), task, 2, mode="strict")
    assert c.usage.parse_failures == 1 and c.ids[0] >= 0  # the cycle was retried
    assert s.usage.parse_failures == 0 and not s.valid[0]  # the cycle is an invalid proposal
    assert s.history[0] == "Graph: A->B, B->A"


def test_domain_llm_errors():
    with pytest.raises(TypeError, match="task"):
        H.run_voxel(Scripted([]), H.boolean_collection("basic", 1)[0], 1, max_height=3)
    with pytest.raises(TypeError, match="task"):
        H.run_boolean(Scripted([]), H.voxel_collection()[0], 1, ops="basic", depth=1)
    with pytest.raises(ValueError, match="`mode`"):
        H.run_voxel(Scripted([]), H.voxel_collection()[0], 1, max_height=3, mode="x")
    with pytest.raises(ValueError, match="`ops`"):
        H.boolean_prompt(H.boolean_collection("basic", 1)[0], [], ops="xor", depth=1)


def test_record_fields_checked():
    """Record fields (candidates, tasks) are checked where they enter, naming the field."""
    c = H.boolean_candidates("basic", 1)
    adm = H.task_masks([t.admissible for t in H.boolean_collection("basic", 1)[:2]], c.ids)
    spec, key = H.SamplerSpec("uniform_space"), jax.random.key(0)
    bad_ids = c.ids.copy()
    bad_ids[0] = -5
    for bad, err, name in [
        (c._replace(ids=bad_ids), ValueError, "`candidates.ids`"),
        (c._replace(strata=c.strata + c.num_strata), ValueError, "`candidates.strata`"),
        (c._replace(strata=c.strata + 0.5), TypeError, "`candidates.strata`"),
        (c._replace(in_space=c.in_space.astype(np.float32)), TypeError, "`candidates.in_space`"),
    ]:
        with pytest.raises(err, match=name):
            H.evaluate(bad, adm, spec, key=key)
    ct = H.generate_collection(3, (1,))[0]
    for bad, err, name in [
        (ct._replace(admissible=ct.admissible + 64), ValueError, "`task.admissible`"),
        (ct._replace(admissible=ct.admissible + 0.5), TypeError, "`task.admissible`"),
        (ct._replace(obs=ct.obs._replace(effects=ct.obs.effects + 0.5)), TypeError, "effects`"),
        (ct._replace(obs=ct.obs._replace(mask=ct.obs.mask + 0.5)), TypeError, "`task.obs.mask`"),
    ]:
        with pytest.raises(err, match=name):
            H.causal_prompt(bad, [])
        with pytest.raises(err, match=name):
            H.run_causal(Scripted([]), bad, 1)
    bt = H.boolean_collection("basic", 1)[0]
    with pytest.raises(ValueError, match="`task.admissible`"):
        H.run_boolean(Scripted([]), bt._replace(admissible=bt.admissible + 4), 1, ops="basic",
                      depth=1)  # fmt: skip
    vt = H.voxel_collection(2, 2, 1)[0]
    with pytest.raises(TypeError, match="`task.top`"):
        H.voxel_prompt(vt._replace(top=vt.top + 0.5), [], max_height=2)
    with pytest.raises(ValueError, match="`task.admissible`"):
        H.run_voxel(Scripted([]), vt._replace(admissible=vt.admissible - 100), 1, max_height=2)
