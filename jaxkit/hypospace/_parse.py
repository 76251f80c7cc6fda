r"""Answer parsers for the Boolean and 3D voxel domains (spec eval_robust.md §1.2.5) — host-side.

- ``extract_boolean`` applies upstream's text rules [C]: the first line holding
  ``Expression:`` / ``expression:``, LaTeX delimiters, ``$``, backticks, ``\land \lor
  \lnot \neg \wedge \vee``, ``∧ ∨ ¬``, ``\text{}``, trailing ``*``, quotes and ``.,;``
  cleaned; else the first non-comment line holding an operator word or only alphanumerics,
  parentheses and spaces. ``None`` only when no text can be extracted (a parse failure,
  retried). Upstream then rewrites the text (``NOR(a, b)`` without nested parentheses to
  ``~(a | b)``, then plain replacement of ``AND OR NOT XOR`` by ``& | ~ ^``) and hands it
  to sympy; we apply the same rewriting and parse with our own recursive-descent grammar
  (``boolean_key``): ``|`` below ``&`` below ``~``, parentheses, names. Operators are
  upper case (the replacement is case sensitive; sympy would read a lower-case ``x and
  y`` as Python's ``and``, we reject it). The result is the mechanistic key of
  :func:`enumerate_expressions` (AND/OR children as a set, cascades flattened), or ``None``
  when the text is not an expression.
- ``parse_voxel`` applies upstream's 3D rules [C]: start at the first line containing
  ``Structure:`` (else one starting ``Layer 1:``); consecutive ``Layer k:`` headers (an out
  of order one stops parsing); blank and ``Note:`` / ``Reasoning:`` / ``Explanation:``
  lines skipped; a line with a reasoning word stops parsing; rows split on commas, pipes,
  brackets or spaces; a token that is an integer other than 0/1 truncates its row (the
  partial row is kept), any other bad token drops the row; ragged rows and layers are
  zero-padded to the largest size; empty top layers trimmed.
"""

import re

import numpy as np

_LATEX = (
    ("\\land", "AND"), ("\\lor", "OR"), ("\\lnot", "NOT"), ("\\neg", "NOT"),
    ("\\wedge", "AND"), ("\\vee", "OR"), ("∧", "AND"), ("∨", "OR"), ("¬", "NOT"),
    ("⊕", "XOR"),
)  # fmt: skip
_OPWORDS = ("AND", "OR", "NOT", "XOR", "NOR")


def _clean(expr: str) -> str:
    expr = re.sub(r"\\[()\[\]]", "", expr)
    expr = re.sub(r"\$+", "", expr).strip("`")
    for a, b in _LATEX:
        expr = expr.replace(a, b)
    expr = re.sub(r"\\text\{([^}]+)\}", r"\1", expr)
    expr = re.sub(r"\*+$", "", expr)
    return expr.strip("\"'").rstrip(".,;").strip()


def extract_boolean(text) -> str | None:
    """The expression text of an answer by upstream's rules, or ``None`` (host-side)."""
    if not isinstance(text, str):
        return None
    lines = text.strip().split("\n")
    for line in lines:
        if "Expression:" in line or "expression:" in line:
            parts = re.split(r"[Ee]xpression:", line)
            if len(parts) >= 2 and (e := _clean(parts[1])):
                return e
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            c = _clean(line)
            if any(op in c.upper() for op in _OPWORDS):
                return c
            if all(ch.isalnum() or ch in "() " for ch in c):
                return c
    return None


_TOKEN = re.compile(r"\s*(?:(\()|(\))|(&)|(\|)|(~)|([A-Za-z_][A-Za-z_0-9]*))")
_NOR = re.compile(r"\bNOR\s*\(([^)]*)\)", re.IGNORECASE)


def _tokens(s: str):
    # upstream's rewriting before sympy: NOR(a, b) (no nested parentheses) -> ~(a | b),
    # then plain string replacement AND -> &, OR -> |, NOT -> ~, XOR -> ^ (so "NOTx" is
    # ~x, and XOR ends up as an unreadable "X|")
    s = _NOR.sub(lambda m: "~(" + " | ".join(p.strip() for p in m.group(1).split(",")) + ")", s)
    s = s.replace("AND", "&").replace("OR", "|").replace("NOT", "~").replace("XOR", "^")
    out, pos = [], 0
    s = s.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            return None
        tok = m.group(m.lastindex)
        out.append({"&": "AND", "|": "OR", "~": "NOT"}.get(tok, tok))
        pos = m.end()
    return out


def _and_or(op, kids):
    flat = set()
    for c in kids:
        flat |= c[1] if c[0] == op else {c}
    flat = frozenset(flat)
    return next(iter(flat)) if len(flat) == 1 else (op, flat)


class _Parser:
    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want=None):
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise ValueError(tok)
        self.i += 1
        return tok

    def _chain(self, op, operand):
        """``operand (op operand)*``: one operand alone, or an ``op`` node of them."""
        kids = [operand()]
        while self.peek() == op:
            self.take()
            kids.append(operand())
        return kids[0] if len(kids) == 1 else _and_or(op, kids)

    def expr(self):
        return self._chain("OR", self.conj)

    def conj(self):
        return self._chain("AND", self.neg)

    def neg(self):
        if self.peek() == "NOT":
            self.take()
            return ("NOT", self.neg())
        return self.atom()

    def atom(self):
        tok = self.take()
        if tok == "(":
            e = self.expr()
            self.take(")")
            return e
        if tok in ("AND", "OR", "NOT", ")"):
            raise ValueError(tok)
        if tok in ("True", "False", "true", "false"):
            return ("CONST", tok.lower() == "true")
        return ("VAR", tok)


def boolean_key(text: str):
    """Mechanistic key of an expression text (our grammar), or ``None`` (host-side).

    Keys are those of :func:`enumerate_expressions` (``("VAR", v)``, ``("NOT", e)``,
    ``("AND" | "OR", frozenset)``); unknown names stay ``("VAR", name)`` and constants
    ``("CONST", bool)``, so the in-space tests can reject them.
    """
    if not isinstance(text, str):
        return None
    toks = _tokens(text)
    if not toks:
        return None
    p = _Parser(toks)
    try:
        e = p.expr()
    except ValueError:
        return None
    return e if p.i == len(toks) else None


def key_truth(e) -> int | None:
    """4-bit truth table of a key (bit ``r`` for row ``r = 2x + y``).

    ``None`` if the key holds another variable or a constant.
    """
    if e[0] == "VAR":
        return {"x": 0b1100, "y": 0b1010}.get(e[1])
    if e[0] == "CONST":
        return None
    if e[0] == "NOT":
        t = key_truth(e[1])
        return None if t is None else ~t & 0xF
    vals = [key_truth(c) for c in e[1]]
    if any(v is None for v in vals):
        return None
    out = vals[0]
    for v in vals[1:]:
        out = out & v if e[0] == "AND" else out | v
    return out


def in_space_compat(e, ops: tuple, depth: int) -> bool:
    """Upstream's in-space test of a parsed key [C].

    Variables x, y only, no constant, allowed operators (a NOT over an OR is a NOR and its
    inside is not inspected), sympy AST depth (NOR two levels) <= ``depth``.
    """

    def ok(n):
        if n[0] == "VAR":
            return n[1] in ("x", "y")
        if n[0] == "CONST":
            return False
        if n[0] == "NOT" and n[1][0] == "OR":
            return "NOR" in ops and _vars_ok(n[1])
        if n[0] not in ops:
            return False
        kids = [n[1]] if n[0] == "NOT" else list(n[1])
        return all(ok(c) for c in kids)

    def _vars_ok(n):
        if n[0] == "VAR":
            return n[1] in ("x", "y")
        if n[0] == "CONST":
            return False
        kids = [n[1]] if n[0] == "NOT" else list(n[1])
        return all(_vars_ok(c) for c in kids)

    def d(n):
        if n[0] in ("VAR", "CONST"):
            return 0
        kids = [n[1]] if n[0] == "NOT" else list(n[1])
        return 1 + max(d(c) for c in kids)

    return ok(e) and d(e) <= depth


_REASONING = (
    "therefore", "because", "since", "thus", "hence", "reasoning:", "explanation:", "note:",
    "this means", "this structure", "the structure", "i chose", "i created",
)  # fmt: skip


def _row(line: str):
    if "," in line:
        parts = [x.strip() for x in line.split(",")]
    elif "|" in line:
        parts = [x.strip() for x in line.split("|")]
    elif "[" in line or "]" in line:
        line = line.strip("[]")
        parts = [x.strip() for x in line.split(",")] if "," in line else line.split()
    else:
        parts = line.split()
    row = []
    for x in parts:
        if x.strip():
            try:
                v = int(x)
            except ValueError:
                return None  # upstream: the exception drops the whole row
            if v not in (0, 1):
                break  # upstream: a non-binary integer truncates the row
            row.append(v)
    return row or None


def parse_voxel(text) -> np.ndarray | None:
    """``int8[L, R, C]`` layer stack of an answer (layer 0 = bottom), or ``None``.

    Host-side; upstream's rules (module docstring). The shape is whatever the answer
    gave (``R x C`` may differ from the grid; the validator then rejects it). An answer
    whose layers are all empty keeps one empty layer, as upstream's normalisation does.
    """
    if not isinstance(text, str):
        return None
    lines = text.strip().split("\n")
    start = next((i for i, ln in enumerate(lines) if "Structure:" in ln), -1)
    if start < 0:
        start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("Layer 1:")), -1)
    if start < 0:
        return None
    layers, cur, in_layer, num = [], [], False, 0
    for line in lines[start:]:
        line = line.strip()
        if not line or line.startswith(("Note:", "Reasoning:", "Explanation:")):
            continue
        if line.startswith("Layer "):
            m = re.match(r"Layer\s+(\d+)", line)
            if m:
                k = int(m.group(1))
                if k != num + 1:
                    break
                if cur:
                    layers.append(cur)
                    cur = []
                in_layer, num = True, k
        elif in_layer:
            if any(w in line.lower() for w in _REASONING):
                break
            if len(line) > 100:
                continue
            row = _row(line)
            if row:
                cur.append(row)
    if cur:
        layers.append(cur)
    if not layers:
        return None
    rows = max(len(la) for la in layers)
    cols = max(len(r) for la in layers for r in la)
    out = np.zeros((len(layers), rows, cols), np.int8)
    for z, la in enumerate(layers):
        for i, r in enumerate(la):
            out[z, i, : len(r)] = r
    keep = np.flatnonzero(out.reshape(len(layers), -1).any(axis=1))
    return out[: (keep[-1] + 1 if keep.size else 1)]
