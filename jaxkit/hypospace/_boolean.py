"""HypoSpace Boolean genetic-interaction domain (spec eval_robust.md §1.2.4) [C].

Variables ``x`` (maternal), ``y`` (paternal); operator sets ``basic`` {AND, OR},
``extended`` {AND, OR, NOT}, ``full`` {AND, OR, NOT, NOR}. The hypothesis space is built
level by level from {x, y} (level l+1 = level l, NOT of each, AND / OR / NOR of every
ordered pair), deduplicated by the authors' *mechanistic* key: AND/OR children as a set
(commutativity, idempotence), same-operator cascades flattened (associativity), a
one-child AND/OR collapses to its child, NOT kept as is (NOT NOT x != x), NOR = NOT of a
flattened OR; no absorption, distributivity or De Morgan. Mechanistically distinct
expressions with the same truth table are distinct hypotheses.

Truth tables are 4-bit codes, bit ``r`` for input row ``r = 2x + y``. An observation set
is a row mask and the observed output bits; ``validate`` is ``((t ^ out) & mask) == 0``,
jitted over any batch of truth tables. ``in_space_compat`` reproduces upstream's
in-space test (sympy AST depth, where NOR costs two levels; in ``extended`` a NOT over an
OR reads as the disallowed NOR), which rejects some ground truths (spec §1.2.4 quirks).

Enumeration and collections are host-side (the spaces hold at most 65 expressions).
"""

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Int, Shaped

from jaxkit import _validate as V
from jaxkit.hypospace._metrics import _check_task_ids
from jaxkit.hypospace._parse import key_truth as _truth  # 4-bit table, row r = 2x + y

OPS = {
    "basic": ("AND", "OR"),
    "extended": ("AND", "OR", "NOT"),
    "full": ("AND", "OR", "NOT", "NOR"),
}
TOP_OPS = ("VAR", "NOT", "AND", "OR", "NOR")  # stratum codes (NOR = NOT over an OR)
"""Stratum codes of a Boolean expression's top operator (``NOR`` = NOT over an OR)."""


def _and_or(op, a, b):
    kids = set()
    for c in (a, b):
        kids |= c[1] if c[0] == op else {c}
    kids = frozenset(kids)
    return next(iter(kids)) if len(kids) == 1 else (op, kids)


def _not(a):
    return ("NOT", a)


def _text(e) -> str:
    if e[0] == "VAR":
        return e[1]
    if e[0] == "NOT":
        inner = _text(e[1])
        return f"NOT {inner}" if e[1][0] == "VAR" else f"NOT ({inner})"
    parts = sorted(_text(c) if c[0] in ("VAR", "NOT") else f"({_text(c)})" for c in e[1])
    return f" {e[0]} ".join(parts)


def _ref_depth(e) -> int:
    """Upstream's sympy AST depth: a variable is 0, each operator node adds one."""
    if e[0] == "VAR":
        return 0
    kids = [e[1]] if e[0] == "NOT" else list(e[1])
    return 1 + max(_ref_depth(c) for c in kids)


def _size(e) -> int:
    if e[0] == "VAR":
        return 1
    kids = [e[1]] if e[0] == "NOT" else list(e[1])
    return 1 + sum(_size(c) for c in kids)


def _top(e) -> int:
    if e[0] == "NOT" and e[1][0] == "OR":
        return TOP_OPS.index("NOR")
    return TOP_OPS.index(e[0])


def _uses(e, what) -> bool:
    if e[0] == "VAR":
        return False
    if e[0] == "NOT":
        return (what == "NOR" and e[1][0] == "OR") or _uses(e[1], what)
    return any(_uses(c, what) for c in e[1])


class ExprTable(NamedTuple):
    """An enumerated Boolean hypothesis space (index = canonical id).

    Attributes:
      keys: mechanistic keys (nested tuples / frozensets).
      text: canonical strings, e.g. ``x AND NOT (x OR y)``.
      truth: ``int32[M]`` 4-bit truth tables (bit ``r`` for row ``r = 2x + y``).
      level: ``int32[M]`` generation level (the strict depth, NOR one level).
      ref_depth: ``int32[M]`` upstream's sympy depth (NOR two levels).
      size: ``int32[M]`` node count (a simplicity score).
      top_op: ``int32[M]`` index into ``TOP_OPS`` (a stratum).
      in_space_compat: ``bool[M]`` upstream's in-space test for (ops, depth).
    """

    keys: list
    text: list
    truth: np.ndarray
    level: np.ndarray
    ref_depth: np.ndarray
    size: np.ndarray
    top_op: np.ndarray
    in_space_compat: np.ndarray


def enumerate_expressions(ops: str, depth: int) -> ExprTable:
    """The space for ``ops`` in ``basic | extended | full`` and ``max_depth = depth``.

    Host-side. Sizes [C]: basic 4 / 10, extended 6 / 34, full 7 / 65 for depth 1 / 2.
    Order: insertion order of the level-by-level construction (level 0 ``x, y``; then
    for each level, NOT of each earlier expression, then AND, OR, NOR per ordered pair).
    """
    V.one_of(tuple(OPS), ops=ops)
    depth = V.python_int(depth, name="depth", minimum=0)
    allowed = OPS[ops]
    order: dict = {}
    for v in ("x", "y"):
        order.setdefault(("VAR", v), 0)
    for lvl in range(1, depth + 1):
        prev = list(order)
        new = []
        if "NOT" in allowed:
            new += [_not(a) for a in prev]
        for a, b in itertools.product(prev, repeat=2):
            if "AND" in allowed:
                new.append(_and_or("AND", a, b))
            if "OR" in allowed:
                new.append(_and_or("OR", a, b))
            if "NOR" in allowed:
                new.append(_not(_and_or("OR", a, b)))
        for e in new:
            order.setdefault(e, lvl)
    keys = list(order)

    def arr(fn, dt=np.int32):
        return np.asarray([fn(e) for e in keys], dt)

    def compat(e):  # upstream: sympy depth; in `extended` a NOT over an OR is a NOR
        return _ref_depth(e) <= depth and not (ops == "extended" and _uses(e, "NOR"))

    return ExprTable(
        keys=keys,
        text=[_text(e) for e in keys],
        truth=arr(_truth),
        level=arr(order.__getitem__),
        ref_depth=arr(_ref_depth),
        size=arr(_size),
        top_op=arr(_top),
        in_space_compat=arr(compat, bool),
    )


class BooleanObs(NamedTuple):
    """Observed rows as 4-bit codes: ``mask`` (which rows) and ``out`` (their outputs)."""

    mask: Int[ArrayLike, "..."]
    out: Int[ArrayLike, "..."]


class BooleanTask(NamedTuple):
    """One observation set: ``name``, ``obs``, ``admissible`` (sorted expression ids)."""

    name: str
    obs: BooleanObs
    admissible: np.ndarray


def _check_task(task: BooleanTask, n_ids: int, *, name: str = "task") -> None:
    """Check a :class:`BooleanTask` of a space of ``n_ids`` expressions (host-side record).

    ``obs.mask`` / ``obs.out`` integer scalars (``int(0.5)`` would drop a row), the mask a
    non-empty 4-bit row mask, ``admissible`` expression ids in ``[0, n_ids)``.
    """
    if not isinstance(task, BooleanTask):
        raise TypeError(f"`{name}` must be a BooleanTask, got {type(task).__name__}.")
    obs = task.obs
    if not isinstance(obs, BooleanObs):
        raise TypeError(f"`{name}.obs` must be a BooleanObs, got {type(obs).__name__}.")
    for field, x in (("mask", obs.mask), ("out", obs.out)):
        V.ndim(x, 0, name=f"{name}.obs.{field}")
        V.integer(x, name=f"{name}.obs.{field}")
    if not 1 <= int(obs.mask) <= 0xF:
        raise ValueError(
            f"`{name}.obs.mask` must be a non-empty 4-bit row mask, got {int(obs.mask)}."
        )
    _check_task_ids(task.admissible, n_ids, name=f"{name}.admissible")


def _validate_core(truth, mask, out):
    t = truth.astype(jnp.int32)
    return ((t ^ out.astype(jnp.int32)) & mask.astype(jnp.int32) & 0xF) == 0


_validate_jit = jax.jit(_validate_core)


def validate_boolean(truth: Shaped[ArrayLike, "..."], obs: BooleanObs) -> Bool[Array, "..."]:
    """Valid iff the truth table matches every observed row (jitted; broadcasts).

    ``truth`` is integer 4-bit codes in ``[0, 15]`` (``ExprTable.truth``) of any shape
    (broadcast with ``obs``).

    Raises:
      TypeError: ``truth``, ``obs.mask`` or ``obs.out`` not integers, ``obs`` not a
        :class:`BooleanObs`.
      ValueError: a ``truth`` code outside ``[0, 15]`` or an ``obs.mask`` outside ``[1, 15]``
        (traced: under ``jit``).
    """
    V.integer(truth, name="truth")
    # a code past 4 bits is no truth table: its high bits were dropped (2**20 read as 0)
    truth = jnp.asarray(truth)
    truth = V.ids_in(truth, 16, name="truth")
    if not isinstance(obs, BooleanObs):
        raise TypeError(f"`obs` must be a BooleanObs, got {type(obs).__name__}.")
    V.integer(obs.mask, name="obs.mask")
    V.integer(obs.out, name="obs.out")
    m = V._concrete(obs.mask)
    if m is not None and np.any((m < 1) | (m > 0xF)):
        raise ValueError(f"`obs.mask` must be a non-empty 4-bit row mask, got {m.tolist()}.")
    mask = obs.mask
    if m is None:  # traced: an empty mask matched every table, high bits were dropped
        mask = jnp.asarray(mask)
        msg = "`obs.mask` must be a non-empty 4-bit row mask (traced)."
        mask = V.error_if(mask, jnp.any((mask < 1) | (mask > 0xF)), msg)
    return _validate_jit(truth, mask, obs.out)


def format_boolean_observation(row: int, value: int) -> str:
    """Upstream string form of one observed row, e.g. ``(x=0, y=1) -> 1`` (host-side)."""
    return f"(x={row >> 1}, y={row & 1}) -> {int(value)}"


def boolean_collection(ops: str, depth: int) -> list[BooleanTask]:
    """Every observation set with >= 1 admissible expression (host-side).

    For ``k = 1..4``, every ``k``-subset of the rows (``itertools.combinations``) and
    every output assignment (``itertools.product`` over {0, 1}) that some expression
    reproduces. Names are upstream's ``n{k}_inputs_{xy_xy..}_outputs_{bits}`` (e.g.
    ``n2_inputs_00_11_outputs_10``). Counts [C]: basic
    6/13/12/4 (both depths), extended 8/22/20/6 (d1), 8/24/32/14 (d2); full 8/22/22/7
    (d1), 8/24/32/16 (d2).
    """
    table = enumerate_expressions(ops, depth)
    truth = table.truth
    tasks = []
    for k in range(1, 5):
        for rows in itertools.combinations(range(4), k):
            mask = sum(1 << r for r in rows)
            for vals in itertools.product((0, 1), repeat=k):
                out = sum(v << r for r, v in zip(rows, vals, strict=True))
                adm = np.flatnonzero(((truth ^ out) & mask) == 0).astype(np.int32)
                if adm.size:
                    obs = BooleanObs(np.int32(mask), np.int32(out))
                    ins = "_".join(f"{r >> 1}{r & 1}" for r in rows)
                    outs = "".join(map(str, vals))
                    tasks.append(BooleanTask(f"n{k}_inputs_{ins}_outputs_{outs}", obs, adm))
    return tasks
