"""The LLM path for the Boolean and 3D voxel domains (spec eval_robust.md §1.2.5) — host-side.

Prompts carry upstream's elements in upstream's order in our wording (their text is not
copied); answers go through :func:`extract_boolean` / :func:`boolean_key` and
:func:`parse_voxel`; the query loop (retries, token accounting, JSON checkpoint / resume)
is the causal runner's (:func:`run_causal`).

History as upstream [C]: Boolean shows every extracted expression text, duplicates and
invalid ones included, plus an ``[ERROR after r attempts] ...`` line for a query whose
attempts all failed with an API error; 3D shows every *unique* parsed structure as an
``Attempt i`` block.

Scoring per ``mode`` (spec §1.3). Boolean ``compat``: in space iff upstream's test passes
(sympy depth, NOR two levels; in ``extended`` a NOT over an OR is the disallowed NOR),
valid iff in space and every observed row matches, uniqueness counts in-space proposals
only; ``strict``: in space iff the mechanistic key is in the enumerated space, uniqueness
counts every parsed proposal. Upstream's scorer also calls a text that sympy cannot read
valid when every observed output is 0; that is not reproduced (an unreadable expression is
invalid in both modes). 3D ``compat``: valid iff the grid size, top view and support match
(no height cap); ``strict`` adds the cap. Ids: a Boolean expression in the space is its
:func:`enumerate_expressions` index, a supported 3D structure within the cap its
:func:`voxel_id`; anything else gets an id above that range from a CRC-32 of the proposal
(stable across processes, so a resumed run keeps them; distinct proposals share one with
probability about 2^-31).
"""

import os
import textwrap
import zlib

import numpy as np

from jaxkit import _validate as V
from jaxkit.hypospace._boolean import OPS, BooleanTask, enumerate_expressions
from jaxkit.hypospace._boolean import _check_task as _check_boolean_task
from jaxkit.hypospace._boolean import format_boolean_observation as _fmt_obs
from jaxkit.hypospace._llm import MODES, LLMRun, _run_loop
from jaxkit.hypospace._parse import (
    boolean_key,
    extract_boolean,
    in_space_compat,
    key_truth,
    parse_voxel,
)
from jaxkit.hypospace._voxel import VoxelTask
from jaxkit.hypospace._voxel import _check_task as _check_voxel_task


def _stable_id(text: str, base: int) -> int:
    return base + zlib.crc32(text.encode()) % (2**31 - 1 - base)


def _key_text(e) -> str:
    if e[0] in ("VAR", "CONST"):
        return f"{e[0]}:{e[1]}"
    if e[0] == "NOT":
        return f"NOT({_key_text(e[1])})"
    return f"{e[0]}(" + ",".join(sorted(_key_text(c) for c in e[1])) + ")"


_GLOSS = {
    "AND": "AND (conjunction)",
    "OR": "OR (disjunction)",
    "NOT": "NOT (negation)",
    "NOR": "NOR (NOT (x OR y))",
}


def boolean_prompt(task: BooleanTask, history: list[str], *, ops: str, depth: int) -> str:
    """The Boolean prompt for one task given the history entries (host-side).

    Upstream's elements in order, our wording: variables, allowed operators with glosses,
    observations, prior expressions, task, requirements (variables, operators, all
    observations, the equivalence rules in force, depth, no constants), output format
    with examples incl. ``NOR(x, y)``, forbidden notations. The operator list has a
    fixed order (upstream's follows Python set order, so its text varies run to run).

    Raises:
      TypeError: ``task`` not a :class:`BooleanTask` with integer scalar ``obs.mask`` /
        ``obs.out`` and an integer ``[K]`` ``admissible``.
      ValueError: an unknown ``ops``, ``depth < 1``, ``obs.mask`` outside ``[1, 15]`` or an
        ``admissible`` id outside the ``(ops, depth)`` space.
    """
    V.one_of(tuple(OPS), ops=ops)
    depth = V.python_int(depth, name="depth", minimum=1)
    _check_boolean_task(task, len(enumerate_expressions(ops, depth).keys))
    return _boolean_prompt(task, history, ops, depth)


def _boolean_prompt(task: BooleanTask, history: list[str], ops: str, depth: int) -> str:
    """:func:`boolean_prompt` of a checked task (the query loop's, once per query)."""
    mask, out = int(task.obs.mask), int(task.obs.out)
    obs = "\n".join(_fmt_obs(r, (out >> r) & 1) for r in range(4) if (mask >> r) & 1)
    prior = "\n".join(f"Expression: {h}" for h in history) if history else "None"
    allowed = ", ".join(_GLOSS[o] for o in OPS[ops])
    text = f"""
    You are given partial observations of a Boolean function of the variables x, y.
    Allowed operators: {allowed}
    Observations (input -> output):
    {{obs}}
    Expressions proposed before (do not repeat one that is equivalent under the rules below):
    {{prior}}
    Task: give one Boolean expression consistent with every observation.
    Requirements:
    1. Variables: only x, y.
    2. Operators: only {", ".join(OPS[ops])}.
    3. It must reproduce every observation.
    4. Two expressions are the same if they differ only by reordering operands
       (commutativity), by repeated operands of AND / OR (idempotence) or by the
       parenthesisation of a chain of one operator (associativity). Distributivity,
       absorption and De Morgan do not make expressions the same.
    5. At most {depth} levels of nested operators.
    6. No constants True / False.
    Output: one line starting with "Expression: ", operators in upper case, variables in
    lower case, parentheses for grouping, plain text, e.g.
    Expression: x AND y
    Expression: (x OR y) AND NOT x
    Expression: NOR(x, y)
    Do not use LaTeX, markdown or logic symbols such as ∧ ∨ ¬.
    """
    return textwrap.dedent(text).strip().format(obs=obs, prior=prior)


def run_boolean(
    client,
    task: BooleanTask,
    n_queries: int,
    *,
    ops: str,
    depth: int,
    max_retries: int = 5,
    checkpoint: str | os.PathLike | None = None,
    mode: str = "compat",
) -> LLMRun:
    """Query ``client`` ``n_queries`` times on one Boolean task (host-side, sequential).

    ``ops`` / ``depth`` name the space of ``task`` (``boolean_collection(ops, depth)``);
    ``max_retries`` defaults to 5 as upstream's Boolean runner. Scoring per ``mode`` and
    ids as in the module docstring; score with ``metrics(run.ids, admissible,
    valid=run.valid, counted=run.counted)``; ``task`` is checked as by
    :func:`boolean_prompt`.
    """
    V.one_of(MODES, mode=mode)
    V.one_of(tuple(OPS), ops=ops)
    depth = V.python_int(depth, name="depth", minimum=1)
    table = enumerate_expressions(ops, depth)
    _check_boolean_task(task, len(table.keys))
    index = {k: i for i, k in enumerate(table.keys)}
    mask, out = int(task.obs.mask), int(task.obs.out)

    def answer(text):
        expr = extract_boolean(text)
        if expr is None:
            return None
        key = boolean_key(expr)
        truth = None if key is None else key_truth(key)
        matches = truth is not None and ((truth ^ out) & mask) == 0
        if mode == "compat":
            in_space = key is not None and in_space_compat(key, OPS[ops], depth)
        else:
            in_space = key in index
        ident = index.get(key)
        if ident is None:
            ident = _stable_id(f"raw:{expr}" if key is None else _key_text(key), len(index))
        counted = in_space if mode == "compat" else True
        return ident, bool(in_space and matches), bool(counted), expr

    def error_entry(err, r):
        return f"[ERROR after {r} attempts] {err}"

    return _run_loop(
        client, task.name, n_queries,
        lambda hist: _boolean_prompt(task, hist, ops, depth), answer,
        max_retries=max_retries, checkpoint=checkpoint, mode=mode, error_entry=error_entry,
    )  # fmt: skip


def format_structure(layers) -> str:
    """``Layer 1:`` (bottom) ... blocks with space-separated rows (host-side)."""
    out = []
    for z, layer in enumerate(np.asarray(layers)):
        out.append(f"Layer {z + 1}:")
        out += [" ".join(str(int(v)) for v in row) for row in layer]
    return "\n".join(out)


def voxel_prompt(task: VoxelTask, history: list[str], *, max_height: int) -> str:
    """The 3D prompt for one task given the earlier unique structures (host-side).

    Upstream's elements in order, our wording: grid size and height cap, the top view as
    rows, every earlier unique structure as an ``Attempt i`` block, the constraints
    (layer 1 is the bottom and not empty, support, no superfluous layers, the cap; with a
    history: a different structure, equal meaning the same blocks in the same places),
    the output format, a worked 3x3x2 example and wrong formats.

    Raises:
      TypeError: ``task`` not a :class:`VoxelTask` with an integer or bool ``[g, g]``
        ``top`` and an integer ``[K]`` ``admissible``.
      ValueError: ``max_height < 1``, ids overflowing int32 or an ``admissible`` id
        outside ``[0, (max_height+1)**(g*g))``.
    """
    _, max_height = _check_voxel_task(task, max_height)
    return _voxel_prompt(task, history, max_height)


def _voxel_prompt(task: VoxelTask, history: list[str], max_height: int) -> str:
    """:func:`voxel_prompt` of a checked task (the query loop's, once per query)."""
    top = np.asarray(task.top)
    g = top.shape[0]
    rows = "\n".join(" ".join(str(int(v)) for v in r) for r in top)
    prior = "".join(f"\nAttempt {i}:\n{h}\n" for i, h in enumerate(history, 1))
    prior = f"\nStructures proposed before (do not repeat one):{prior}" if history else ""
    diff = (
        "\n6. Give a structure different from every earlier one; two structures are equal"
        " when they have the same blocks in the same places."
        if history
        else ""
    )
    head = f"""
    A structure of unit blocks stands on a {g}x{g} grid, at most {max_height} layers high.
    Top view (1 where any layer has a block):
    {{rows}}
    """
    tail = f"""
    Task: give one 3D structure that produces this top view.
    Each layer is a {g}x{g} grid of 0 (empty) and 1 (block), listed from the bottom up.
    Constraints:
    1. Layer 1 is the bottom layer and holds at least one block.
    2. A block above layer 1 needs a block directly below it.
    3. No empty layers at the bottom or the top.
    4. Layers are numbered from the bottom (Layer 1) up.
    5. At most {max_height} layers.{{diff}}
    Output format:
    Structure:
    Layer 1:
    <row 1, values separated by spaces>
    ...
    Layer 2:
    ...
    Example for a 3x3 grid, two layers (blocks in the corners, two of them stacked):
    Structure:
    Layer 1:
    1 0 1
    0 0 0
    1 0 1
    Layer 2:
    1 0 0
    0 0 0
    0 0 1
    Wrong: an empty Layer 1; commas between values; a block with nothing below it; more
    than {max_height} layers.
    """
    text = textwrap.dedent(head).strip().format(rows=rows) + "\n" + prior
    return text + "\n" + textwrap.dedent(tail).strip().format(diff=diff)


def run_voxel(
    client,
    task: VoxelTask,
    n_queries: int,
    *,
    max_height: int,
    max_retries: int = 3,
    checkpoint: str | os.PathLike | None = None,
    mode: str = "compat",
) -> LLMRun:
    """Query ``client`` ``n_queries`` times on one 3D task (host-side, sequential).

    ``max_height`` is the collection's cap (``voxel_collection(g, max_height, ...)``).
    Scoring per ``mode`` and ids as in the module docstring (``compat``: an answer over
    the cap with the right top view is valid but never recovered); ``task`` is checked as
    by :func:`voxel_prompt`.
    """
    V.one_of(MODES, mode=mode)
    g, max_height = _check_voxel_task(task, max_height)
    top = np.asarray(task.top) != 0
    base = (max_height + 1) ** (g * g)
    w = (max_height + 1) ** np.arange(g * g - 1, -1, -1, dtype=np.int64)
    if base >= 2**31 - 2**20:
        raise ValueError(f"3D proposal ids overflow int32 for g={g}, max_height={max_height}.")

    def prompt(hist):  # upstream shows each distinct structure once
        return _voxel_prompt(task, list(dict.fromkeys(hist)), max_height)

    def answer(text):
        layers = parse_voxel(text)
        if layers is None:
            return None
        shaped = layers.shape[1:] == (g, g)
        supported = bool(np.all(layers[1:] <= layers[:-1]))
        tall = layers.shape[0] > max_height
        ok = shaped and supported and np.array_equal(layers.any(axis=0), top)
        ok = ok and (mode == "compat" or not tall)
        if shaped and supported and not tall:
            ident = int(layers.sum(axis=0).reshape(-1).astype(np.int64) @ w)
        else:
            ident = _stable_id(f"{layers.shape}:{layers.tobytes().hex()}", base)
        return ident, bool(ok), True, format_structure(layers)

    return _run_loop(
        client, task.name, n_queries, prompt, answer,
        max_retries=max_retries, checkpoint=checkpoint, mode=mode,
    )  # fmt: skip
