"""The LLM path for the causal domain (spec eval_robust.md §1.2.5) — host-side, not jitted.

- ``openai_client(base_url=, model=, api_key=)``: a minimal OpenAI-compatible
  ``/chat/completions`` client over ``urllib`` (no dependency); returns
  ``prompt -> (text, usage)``. Only the example reads endpoint settings from the
  environment; nothing here does.
- ``causal_prompt`` (the upstream prompt's elements in order, our wording),
  ``parse_causal`` (upstream's parser rules: code fences dropped, first ``Graph:`` line,
  arrow variants, ``No edges``; unknown names, self loops, cycles and too many edges are
  parse failures) and ``format_graph``.
- ``run_causal``: ``N`` sequential queries with the history of every parsed proposal,
  up to ``max_retries`` attempts per query (an API error or a parse failure is retried;
  a query that never parses is id ``-1``), token accounting, and a JSON checkpoint that
  resumes an interrupted run.

Any ``prompt -> text`` or ``prompt -> (text, usage)`` callable is a client (a scripted
fake in the tests).
"""

import dataclasses
import json
import os
import re
import textwrap
import urllib.request
from collections.abc import Callable

import numpy as np

from jaxkit import _validate as V
from jaxkit.hypospace._causal import CausalTask, _check_task, _edge_code, format_observation

NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MODES = ("compat", "strict")


def openai_client(
    *,
    base_url: str,
    model: str,
    api_key: str | None = None,
    temperature: float = 0.7,
    max_tokens: int = 4096,
    timeout: float = 120.0,
) -> Callable[[str], tuple[str, dict]]:
    """A ``prompt -> (text, usage)`` callable for an OpenAI-compatible endpoint (host-side).

    ``base_url`` is the API root (``.../v1``); ``usage`` is the response's token counts.
    Network errors propagate (``run_causal`` retries them).
    """
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"`base_url` must be an http(s) URL, got {base_url!r}.")
    if not isinstance(model, str) or not model:
        raise ValueError(f"`model` must be a non-empty string, got {model!r}.")
    V.finite_scalar(temperature=temperature)
    V.non_negative(temperature=temperature)
    max_tokens = V.python_int(max_tokens, name="max_tokens", minimum=1)
    V.finite_scalar(timeout=timeout)
    V.positive(timeout=timeout)
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def call(prompt: str) -> tuple[str, dict]:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (user URL)
            out = json.loads(resp.read().decode())
        return out["choices"][0]["message"]["content"] or "", out.get("usage", {})

    return call


def _check_max_edges(max_edges: int | None) -> int | None:
    """``max_edges`` as an int >= 0, or ``None`` (no cap)."""
    return None if max_edges is None else V.python_int(max_edges, name="max_edges", minimum=0)


def format_graph(adj) -> str:
    """``Graph: A->B, B->C`` (edges in row-major order) or ``Graph: No edges``."""
    a = np.asarray(adj)
    edges = [f"{NAMES[i]}->{NAMES[j]}" for i, j in zip(*np.nonzero(a), strict=True)]
    return "Graph: " + (", ".join(edges) if edges else "No edges")


def causal_prompt(task: CausalTask, history: list[str], *, max_edges: int | None = None) -> str:
    """The causal prompt for one task given the history lines (host-side).

    Upstream's elements in order, our wording: data, effect semantics, nodes and edge
    cap, observations, prior predictions, task, diversity rule, format rules.

    Raises:
      TypeError: ``task`` not a :class:`CausalTask` (its ``obs`` a ``CausalObs`` of an
        integer ``perturbed``, integer or bool ``effects`` and a bool ``mask``) or its
        ``admissible`` not an integer ``[K]`` array.
      ValueError: a perturbed node outside ``[0, n)`` or an ``admissible`` id outside
        ``[0, 2**(n(n-1)))``; ``max_edges < 0``.
    """
    max_edges = _check_max_edges(max_edges)
    return _causal_prompt(task, history, _check_task(task), max_edges)


def _causal_prompt(task: CausalTask, history: list[str], n: int, max_edges: int | None) -> str:
    """:func:`causal_prompt` of a checked task (the query loop's, once per query)."""
    nodes = ", ".join(NAMES[:n])
    obs = "\n".join(
        format_observation(int(p), e)
        for p, e, m in zip(task.obs.perturbed, task.obs.effects, task.obs.mask, strict=True)
        if m
    )
    cap = f" The graph has at most {max_edges} edges." if max_edges is not None else ""
    prior = "\n".join(history) if history else "None"
    text = f"""
    You are given the results of perturbation experiments on a causal system.
    Perturbing a node sets it to 0; every node that is a descendant of it (reachable by a
    directed path) reads 1, and every other node reads 0.
    Nodes: {nodes}.{cap}
    Observations:
    {{obs}}
    Prior predictions:
    {{prior}}
    Task: propose one directed acyclic graph consistent with all observations.
    Give an edge set that is not identical to any prior prediction.
    Rules: use only the listed nodes, no self loops, no cycles. Answer with exactly one
    line `Graph: A->B, B->C` or `Graph: No edges`.
    """
    return textwrap.dedent(text).strip().format(obs=obs, prior=prior)


_ARROWS = re.compile(r"\s*(?:→|-->|=>|->)\s*")
_EMPTY = {"no edge", "no edges", "empty", "none", "null", ""}


def parse_causal(
    text: str, n: int, *, max_edges: int | None = None, mode: str = "compat"
) -> np.ndarray | None:
    r"""``int8[n, n]`` adjacency of an answer, or ``None`` when it does not parse.

    Upstream's rules [C]: drop code fences; the first line matching ``graph\s*:``
    (case-insensitive) else the first line; strip quotes and trailing `` .;``; arrow
    variants normalised; ``no edges`` / ``empty`` / ``none`` / ``null`` is the empty graph;
    each comma piece must be ``X -> Y`` with known names and ``X != Y``; duplicates
    merged. More than ``max_edges`` edges or a cycle: ``None`` (a parse failure, so
    upstream retries it) when ``mode="compat"``; ``mode="strict"`` returns the graph, a
    proposal that :func:`validate` then scores invalid.
    """
    V.one_of(MODES, mode=mode)
    max_edges = _check_max_edges(max_edges)
    if not isinstance(text, str):
        return None
    body = re.sub(r"```[a-zA-Z]*", "", text)
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if not lines:
        return None
    line = next((ln for ln in lines if re.search(r"graph\s*:", ln, re.I)), lines[0])
    m = re.search(r"graph\s*:(.*)", line, re.I)
    line = (m.group(1) if m else line).strip()
    for _ in range(2):  # quotes and trailing punctuation, in either nesting
        line = line.rstrip(" .;").strip().strip("\"'`").strip()
    adj = np.zeros((n, n), np.int8)
    if line.lower() in _EMPTY:
        return adj
    for piece in line.split(","):
        parts = _ARROWS.split(piece.strip())
        if len(parts) != 2 or not all(p in NAMES[:n] and len(p) == 1 for p in parts):
            return None
        i, j = NAMES.index(parts[0]), NAMES.index(parts[1])
        if i == j:
            return None
        adj[i, j] = 1
    if mode == "strict":
        return adj
    if max_edges is not None and int(adj.sum()) > max_edges:
        return None
    reach = adj.astype(bool)
    for _ in range(n):  # transitive closure by repeated squaring on the host
        reach = reach | (reach.astype(np.int32) @ reach.astype(np.int32) > 0)
    if np.any(np.diag(reach)):
        return None
    return adj


@dataclasses.dataclass
class Usage:
    """Token accounting of a run (mutable, host-side)."""

    calls: int = 0
    errors: int = 0
    parse_failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, usage: dict) -> None:
        self.prompt_tokens += int(usage.get("prompt_tokens", 0) or 0)
        self.completion_tokens += int(usage.get("completion_tokens", 0) or 0)


@dataclasses.dataclass
class LLMRun:
    """Result of :func:`run_causal`, ``run_boolean`` or ``run_voxel``.

    ``ids`` (``int32[N]``, -1 = never parsed), ``valid`` and ``counted`` (``bool[N]``, the
    mode's validity and uniqueness flags: score with ``metrics(run.ids, admissible,
    valid=run.valid, counted=run.counted)``), the raw answers of every attempt, the
    history entries shown, ``usage`` and the scoring ``mode``.
    """

    ids: np.ndarray
    answers: list
    history: list
    usage: Usage
    valid: np.ndarray
    counted: np.ndarray
    mode: str = "compat"


def _run_loop(client, name, n_queries, prompt_fn, answer_fn, *, max_retries, checkpoint,
              mode, error_entry=None):  # fmt: skip
    """The shared sequential query loop (host-side).

    ``prompt_fn(history) -> str``; ``answer_fn(text) -> (id, valid, counted, entry) | None``
    (``None``: a parse failure, retried; ``entry`` is appended to the history, or nothing
    when it is ``None``). After ``max_retries`` failed attempts the query is id -1 and,
    when ``error_entry(last_error)`` is given and an API error occurred, its string joins
    the history (upstream's Boolean runner). The JSON ``checkpoint`` holds the whole state.
    """
    n_queries = V.python_int(n_queries, name="n_queries", minimum=1)
    max_retries = V.python_int(max_retries, name="max_retries", minimum=1)
    V.one_of(MODES, mode=mode)
    if not callable(client):
        raise TypeError(f"`client` must be callable, got {type(client).__name__}.")
    state = {"task": name, "mode": mode, "ids": [], "valid": [], "counted": [], "answers": [],
             "history": [], "usage": {}}  # fmt: skip
    if checkpoint is not None and os.path.exists(checkpoint):
        with open(checkpoint) as fh:
            saved = json.load(fh)
        if saved.get("task") == name and saved.get("mode", "compat") == mode:
            state.update(saved)
    usage = Usage(**state["usage"])
    while len(state["ids"]) < n_queries:
        prompt = prompt_fn(state["history"])
        got, last_error = None, None
        for _ in range(max_retries):
            usage.calls += 1
            try:
                out = client(prompt)
            except Exception as e:  # noqa: BLE001 (API errors are retried, then counted)
                usage.errors += 1
                last_error = f"{type(e).__name__}: {e}"
                state["answers"].append(f"[ERROR {last_error}]")
                continue
            text, meta = out if isinstance(out, tuple) else (out, {})
            usage.add(meta or {})
            state["answers"].append(text)
            got = answer_fn(text)
            if got is None:
                usage.parse_failures += 1
                continue
            break
        if got is None:
            got = (-1, False, False, None)
            if error_entry is not None and last_error is not None:
                got = (-1, False, False, error_entry(last_error, max_retries))
        ident, ok, counted, entry = got
        state["ids"].append(int(ident))
        state["valid"].append(bool(ok))
        state["counted"].append(bool(counted))
        if entry is not None:
            state["history"].append(entry)
        state["usage"] = dataclasses.asdict(usage)
        if checkpoint is not None:
            tmp = f"{checkpoint}.tmp"
            with open(tmp, "w") as fh:
                json.dump(state, fh)
            os.replace(tmp, checkpoint)
    return LLMRun(
        np.asarray(state["ids"][:n_queries], np.int32), state["answers"], state["history"],
        usage, np.asarray(state["valid"][:n_queries], bool),
        np.asarray(state["counted"][:n_queries], bool), mode,
    )  # fmt: skip


def run_causal(
    client,
    task: CausalTask,
    n_queries: int,
    *,
    max_edges: int | None = None,
    max_retries: int = 3,
    checkpoint: str | os.PathLike | None = None,
    mode: str = "compat",
) -> LLMRun:
    """Query ``client`` ``n_queries`` times on one causal task (host-side, sequential).

    Each query shows every earlier parsed proposal (duplicates and invalid ones included,
    as upstream). An exception from the client or a parse failure is retried, up to
    ``max_retries`` attempts in all. Ids are :func:`canonical_id` codes (n <= 6), scored
    by :func:`metrics` against ``task.admissible``. ``mode="compat"`` makes a cyclic or
    over-``max_edges`` answer a parse failure (retried, as upstream); ``"strict"`` keeps
    it as an invalid proposal. With ``checkpoint`` (a JSON path) the state is saved after
    every query and a run with the same task name and mode resumes there.

    ``task`` is checked as by :func:`causal_prompt` (a float field or an ``admissible`` id
    off the space raises).
    """
    n = _check_task(task)
    if n * (n - 1) > 31:
        raise ValueError(f"`task` has n={n} nodes; ids fit int32 only for n <= 6.")
    V.one_of(MODES, mode=mode)
    max_edges = _check_max_edges(max_edges)
    adm = {int(a) for a in np.asarray(task.admissible)}

    def answer(text):
        adj = parse_causal(text, n, max_edges=max_edges, mode=mode)
        if adj is None:
            return None
        ident = _edge_code(adj)
        return ident, ident in adm, True, format_graph(adj)

    return _run_loop(
        client, task.name, n_queries,
        lambda hist: _causal_prompt(task, hist, n, max_edges), answer,
        max_retries=max_retries, checkpoint=checkpoint, mode=mode,
    )  # fmt: skip
