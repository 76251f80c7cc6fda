"""The host-side LLM path with a scripted fake client (no network): prompts, the parser's
rules incl. malformed answers, retries, token accounting, checkpoint / resume."""

import json

import numpy as np
import pytest

from jaxkit import hypospace as H


class Scripted:
    """Returns the scripted answers in order (an Exception instance is raised)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.prompts = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a, {"prompt_tokens": len(prompt.split()), "completion_tokens": 3}


def _task():
    return next(t for t in H.generate_collection(3, (1,)) if len(t.admissible) == 4)


@pytest.mark.parametrize(
    "text,edges",
    [
        ("```\nGraph: A->B, B->C\n```", [(0, 1), (1, 2)]),
        ("Some reasoning.\ngraph : A → B, A=>C.", [(0, 1), (0, 2)]),
        ('"Graph: A --> C";', [(0, 2)]),
        ("Graph: No edges", []),
        ("Graph: none", []),
        ("Graph: A->B, A->B", [(0, 1)]),
        ("Graph: A->B, B->A", None),  # cycle
        ("Graph: A->A", None),  # self loop
        ("Graph: A->D", None),  # unknown node
        ("Graph: A-B", None),  # not an edge
        ("", None),
    ],
)
def test_parse_causal(text, edges):
    adj = H.parse_causal(text, 3)
    if edges is None:
        assert adj is None
    else:
        want = np.zeros((3, 3), np.int8)
        for i, j in edges:
            want[i, j] = 1
        np.testing.assert_array_equal(adj, want)
        assert H.parse_causal(H.format_graph(adj), 3).tolist() == adj.tolist()  # round trip


def test_parse_edge_cap():
    assert H.parse_causal("Graph: A->B, B->C", 3, max_edges=1) is None
    assert H.parse_causal("Graph: A->B", 3, max_edges=1) is not None


def test_run_with_retries_usage_and_scores(tmp_path):
    task = _task()
    client = Scripted(
        [
            "Graph: A->B, B->A",  # cycle: retried
            RuntimeError("HTTP 500"),  # API error: retried
            "nonsense",  # third failure: the query is -1
            "```\nGraph: No edges\n```",
            "Graph: A->B",
            "Graph: A->B",
        ]
    )
    run = H.run_causal(client, task, 4, max_retries=3)
    adj_ab = np.zeros((3, 3), np.int8)
    adj_ab[0, 1] = 1
    ab, empty = int(H.canonical_id(adj_ab)), int(H.canonical_id(np.zeros((3, 3), np.int8)))
    assert run.ids.tolist() == [-1, empty, ab, ab]
    u = run.usage
    assert (u.calls, u.errors, u.parse_failures) == (6, 1, 2)
    assert u.completion_tokens == 3 * 5
    assert u.prompt_tokens == sum(len(p.split()) for i, p in enumerate(client.prompts) if i != 1)
    # history: every parsed proposal, duplicates included; the first prompt has none
    assert "Prior predictions:\nNone" in client.prompts[0]
    assert "Graph: No edges\nGraph: A->B" in client.prompts[-1]
    for o in range(len(task.obs.perturbed)):
        assert (
            H.format_observation(int(task.obs.perturbed[o]), task.obs.effects[o])
            in client.prompts[0]
        )
    adm = np.full(8, -1, np.int32)
    adm[: len(task.admissible)] = task.admissible
    m = H.metrics(run.ids, adm)
    want_v = sum(int(i) in set(task.admissible.tolist()) for i in run.ids) / 4
    assert float(m.validity) == pytest.approx(want_v) and float(m.parse_rate) == 0.75


def test_checkpoint_resume(tmp_path):
    task = _task()
    ck = tmp_path / "run.json"
    first = Scripted(["Graph: A->B", "Graph: B->C"])
    r1 = H.run_causal(first, task, 2, checkpoint=ck)
    saved = json.loads(ck.read_text())
    assert saved["task"] == task.name and saved["ids"] == r1.ids.tolist()
    second = Scripted(["Graph: A->C"])  # only the third query reaches the client
    r2 = H.run_causal(second, task, 3, checkpoint=ck)
    assert r2.ids[:2].tolist() == r1.ids.tolist() and len(second.prompts) == 1
    assert "Graph: A->B\nGraph: B->C" in second.prompts[0]
    assert r2.usage.calls == 3


def test_llm_errors():
    with pytest.raises(ValueError, match="`base_url`"):
        H.openai_client(base_url="localhost:8000", model="m")
    with pytest.raises(ValueError, match="`model`"):
        H.openai_client(base_url="http://localhost:8000/v1", model="")
    with pytest.raises(TypeError, match="`client`"):
        H.run_causal("not callable", _task(), 2)
    with pytest.raises(ValueError, match="`max_retries`"):
        H.run_causal(Scripted([]), _task(), 2, max_retries=0)
    assert callable(H.openai_client(base_url="http://127.0.0.1:9/v1", model="m", api_key="k"))
