"""What the documentation site is generated from: areas, public names, README pieces, benches.

One module, used by three callers, so they cannot disagree:

* ``scripts/docs/hooks.py`` (the mkdocs hook) builds the nav from :func:`subpackages` and
  expands the ``<!-- jaxkit:... -->`` directives of the pages (API reference, bench tables,
  README sections and method rows, figures);
* ``tests/test_docs.py`` checks that every area has a page and that every public name is in
  the API reference with a docstring;
* ``scripts/docs/figures.py`` refreshes the committed figures under ``docs/figures/``.

Nothing here imports jaxkit: areas and public names are read from the source with ``ast``,
so the hook and the page test run without JAX.

Public names of a module: its ``__all__`` when it has one; otherwise every top-level name not
starting with ``_`` that the module binds itself (``def``, ``class``, assignment) or
re-exports from jaxkit with a redundant alias (``from jaxkit.x._y import f as f``, the
re-export convention of the areas' ``__init__.py``) or as a jaxkit submodule. The public
modules of an area are its package and every module or package below it whose path has no
``_``-prefixed part (``jaxkit.privacy.lowrank``, ``jaxkit.kernels.sampling``, ...).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import posixpath
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
AREAS_DIR = DOCS / "areas"
FIGURES_DIR = DOCS / "figures"
README = ROOT / "README.md"
BENCH_DIR = ROOT / "benchmarks"

# ----------------------------------------------------------------------------- areas


def subpackages(root: pathlib.Path = ROOT) -> tuple[str, ...]:
    """``jaxkit._SUBPACKAGES``, read from ``jaxkit/__init__.py`` without importing jaxkit."""
    tree = ast.parse((root / "jaxkit" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_SUBPACKAGES" for t in targets):
                return tuple(ast.literal_eval(node.value))
    raise RuntimeError("jaxkit/__init__.py defines no _SUBPACKAGES")


def area_page(area: str) -> pathlib.Path:
    """The page of one area: ``docs/areas/<area>.md``."""
    return AREAS_DIR / f"{area}.md"


# ----------------------------------------------------------------------------- public names


def module_file(module: str, root: pathlib.Path = ROOT) -> pathlib.Path | None:
    """Source file of a dotted jaxkit module (``.py`` or package ``__init__.py``), or None."""
    base = root.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def public_modules(area: str, root: pathlib.Path = ROOT) -> list[str]:
    """The area's package and its public submodules (no ``_`` part), package first."""
    top = f"jaxkit.{area}"
    pkg = root / "jaxkit" / area
    mods = [top]
    if pkg.is_dir():
        for p in sorted(pkg.rglob("*.py")):
            rel = p.relative_to(root / "jaxkit").with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if len(parts) <= 1 or any(s.startswith("_") for s in parts):
                continue
            mods.append("jaxkit." + ".".join(parts))
    return mods


@dataclasses.dataclass(frozen=True)
class Name:
    """One public name: ``module.name``, what it re-exports (``origin``), whether a module."""

    module: str
    name: str
    origin: str | None  # the dotted path it was imported from (re-exports), else None
    is_module: bool

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}"


@functools.cache
def _parse(module: str, root: pathlib.Path = ROOT) -> tuple[list[str] | None, dict[str, Name]]:
    """(``__all__`` or None, every top-level binding the public-name rule can use)."""
    f = module_file(module, root)
    if f is None:
        raise FileNotFoundError(f"no source for {module}")
    tree = ast.parse(f.read_text())
    is_pkg = f.name == "__init__.py"
    all_: list[str] | None = None
    bound: dict[str, Name] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound[node.name] = Name(module, node.name, None, False)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    if t.id == "__all__" and node.value is not None:
                        all_ = list(ast.literal_eval(node.value))
                    else:
                        bound[t.id] = Name(module, t.id, None, False)
        elif isinstance(node, ast.ImportFrom):
            src = node.module or ""
            if node.level:  # relative import: resolve against this module's package
                pkg_parts = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg_parts = pkg_parts[: len(pkg_parts) - (node.level - 1)]
                src = ".".join(pkg_parts + ([src] if src else []))
            if not (src == "jaxkit" or src.startswith("jaxkit.")):
                continue
            for a in node.names:
                sub = module_file(f"{src}.{a.name}", root) is not None
                if a.asname in (None, a.name) and (a.asname == a.name or sub):
                    bound[a.name] = Name(module, a.name, f"{src}.{a.name}", sub)
    return all_, bound


def public_names(module: str, root: pathlib.Path = ROOT) -> list[Name]:
    """The public names of one module, in source order (``__all__`` order when it has one)."""
    all_, bound = _parse(module, root)
    if all_ is not None:
        out = []
        for n in all_:
            if n in bound:
                out.append(bound[n])
            else:  # bound some way the rule does not read (``from x import y`` without alias)
                sub = module_file(f"{module}.{n}", root) is not None
                out.append(Name(module, n, f"{module}.{n}" if sub else None, sub))
        return out
    return [b for n, b in bound.items() if not n.startswith("_")]


def canonical(path: str, root: pathlib.Path = ROOT) -> str:
    """Follow re-exports from ``module.name`` to where the object is defined."""
    for _ in range(20):
        module, _, name = path.rpartition(".")
        if module_file(module, root) is None:
            return path
        b = _parse(module, root)[1].get(name)
        if b is None or b.origin is None or b.is_module:
            return path
        path = b.origin
    return path


@dataclasses.dataclass(frozen=True)
class ApiSection:
    """The API reference of one public module: documented paths, and re-exports seen above."""

    module: str
    entries: tuple[str, ...]
    also: tuple[tuple[str, str], ...]  # (path here, path documented above)


def api_sections(area: str, root: pathlib.Path = ROOT) -> list[ApiSection]:
    """Each public object of the area once, at its first (outermost) public path."""
    seen: dict[str, str] = {}  # canonical -> documented path
    out = []
    for mod in public_modules(area, root):
        entries, also = [], []
        for n in public_names(mod, root):
            if n.is_module:
                continue
            c = canonical(n.path, root)
            if c in seen:
                also.append((n.path, seen[c]))
                continue
            seen[c] = n.path
            entries.append(n.path)
        out.append(ApiSection(mod, tuple(entries), tuple(also)))
    return out


def documented_paths(area: str, root: pathlib.Path = ROOT) -> dict[str, str]:
    """{public path: the path its object is documented at} for every public name of the area."""
    out = {}
    for s in api_sections(area, root):
        for p in s.entries:
            out[p] = p
        for p, q in s.also:
            out[p] = q
    return out


def module_summary(module: str, root: pathlib.Path = ROOT) -> str:
    """First line of a module's docstring (empty when it has none)."""
    f = module_file(module, root)
    doc = ast.get_docstring(ast.parse(f.read_text())) if f else None
    return (doc or "").strip().splitlines()[0] if doc else ""


def api_markdown(area: str, root: pathlib.Path = ROOT) -> str:
    """The API reference of an area as mkdocstrings ``:::`` blocks, one per public object."""
    lines = []
    for s in api_sections(area, root):
        if not s.entries and not s.also:
            continue
        lines += [f"### `{s.module}`", ""]
        summary = module_summary(s.module, root)
        if summary:
            lines += [summary, ""]
        for p in s.entries:
            lines += [f"::: {p}", ""]
        if s.also:
            refs = ", ".join(f"`{p}` (= `{q}`)" for p, q in s.also)
            lines += [f"Also public here, documented above: {refs}.", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- README


def _strip_fences(lines: list[str]) -> list[bool]:
    """For each line, whether it is inside a fenced code block (fence lines count as inside)."""
    inside, out = False, []
    for ln in lines:
        if ln.lstrip().startswith("```"):
            out.append(True)
            inside = not inside
            continue
        out.append(inside)
    return out


def readme_sections(text: str | None = None) -> dict[str, str]:
    """{heading title: body} for every ``##``..``####`` heading of the README (body without
    the heading line; a section ends at the next heading of the same or a higher level)."""
    text = README.read_text() if text is None else text
    lines = text.splitlines()
    fenced = _strip_fences(lines)
    heads = []
    for i, ln in enumerate(lines):
        m = re.match(r"(#{2,4}) (.+)$", ln)
        if m and not fenced[i]:
            heads.append((i, len(m.group(1)), m.group(2).strip()))
    out = {}
    for j, (i, level, title) in enumerate(heads):
        end = len(lines)
        for i2, level2, _ in heads[j + 1 :]:
            if level2 <= level:
                end = i2
                break
        out[title] = "\n".join(lines[i + 1 : end]).strip("\n")
    return out


# a cell separator: a `|` outside code spans and not escaped (`\|` belongs to its cell)
_OUTSIDE_CODE_BAR = re.compile(r"(?<!\\)\|(?=(?:[^`]*`[^`]*`)*[^`]*$)")


def _escape_cell(text: str) -> str:
    """Escape the ``|`` of a table cell that are outside code spans."""
    parts = text.split("`")
    return "`".join(
        re.sub(r"(?<!\\)\|", r"\\|", p) if i % 2 == 0 else p for i, p in enumerate(parts)
    )


_MARKER = re.compile(r"<!-- /?bench(-pending)?(:[^>]*)? -->")


def readme_method_table(text: str | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the README's method table, the first table of its "Methods" section;
    a row is its cells, split at the ``|`` outside code spans that are not escaped (``\\|``)."""
    body = readme_sections(text).get("Methods", "").splitlines()
    start = next((i for i, ln in enumerate(body) if ln.startswith("|")), len(body))
    end = next((i for i in range(start, len(body)) if not body[i].startswith("|")), len(body))
    lines = body[start:end]
    if len(lines) < 2:
        return [], []
    header = [c.strip() for c in lines[0].strip().strip("|").split("|")]
    rows = []
    for ln in lines[2:]:
        # a bare `|x|` (a set's size) belongs to its cell; so does a `|` inside backticks
        ln = re.sub(r"(?<=\s)\|(\w)\|(?=\s)", "\x00\\1\x00", ln.strip())
        rows.append([c.strip().replace("\x00", "|") for c in _OUTSIDE_CODE_BAR.split(ln)[1:-1]])
    return header, rows


def readme_method_rows(area: str, extra: list[str] = (), text: str | None = None) -> list[dict]:
    """Rows of the README's method table whose public-function cell names ``jaxkit.<area>``
    (or whose method cell starts with one of ``extra``), bench markers removed."""
    header, rows = readme_method_table(text)
    pat = re.compile(rf"\bjaxkit\.{re.escape(area)}\b")
    out = []
    for cells in rows:
        if len(cells) != len(header):
            continue
        row = {h: _MARKER.sub("", c) for h, c in zip(header, cells, strict=True)}
        method = row.get("method", "")
        if pat.search(row.get("public function", "")) or any(method.startswith(e) for e in extra):
            out.append(row)
    return out


_README_DOCS_LINK = re.compile(r"\]\(docs/([^)#\s]+)(#[^)\s]*)?\)")


def readme_links(text: str, page: str) -> str:
    """README text for the page ``page`` (its path under docs/): a README link into docs/
    (``[history](docs/areas/x.md#y)``) made relative to that page, as mkdocs resolves it."""

    def rel(m: re.Match) -> str:
        target = posixpath.relpath(m.group(1), posixpath.dirname(page) or ".")
        return f"]({target}{m.group(2) or ''})"

    return _README_DOCS_LINK.sub(rel, text)


def methods_markdown(area: str, extra: list[str] = ()) -> str:
    """Table: method, paper, exact / reconstructed, example (from the README's rows)."""
    rows = readme_method_rows(area, extra)
    if not rows:
        return "The README's method table has no row for this area."
    cols = ["method", "paper", "exact / reconstructed", "example"]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_escape_cell(r.get(c, "")) for c in cols) + " |")
    figures = [r.get("measured vs anchor", "") for r in rows]
    out += ["", "Measured (the README's last column):", ""]
    out += [f"- **{r['method']}**: {f}" for r, f in zip(rows, figures, strict=True) if f]
    return "\n".join(out)


# ----------------------------------------------------------------------------- benches


# the site's column order: the comparison first, the long sizes last (same cells as BENCHMARKS.md)
BENCH_COLUMNS = ["case", "anchor", "ratio", "target", "ok", "ours", "anchor time", "runs", "date"]


def bench_markdown(names: list[str], bench_dir: pathlib.Path = BENCH_DIR) -> str:
    """The tables of the saved runs ``benchmarks/<name>.jsonl``: the rows, medians and cell
    formats of ``BENCHMARKS.md`` (``scripts/bench/report.py``'s own ``aggregate`` and
    ``cells``), columns reordered so the ratio is visible; sizes go below each case."""
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from scripts.bench import report as R

    out = []
    for n in names:
        p = bench_dir / f"{n}.jsonl"
        if not p.is_file():
            continue
        meta, lines = R.read_jsonl(str(p))
        rows = R.aggregate(lines, meta.get("date"))
        by_bench: dict[str, list] = {}
        for r in rows:
            by_bench.setdefault(r["bench"], []).append(r)
        for bench, brows in by_bench.items():
            out += [f"### {bench}", "", R._meta_line(n, meta), ""]
            out.append("| " + " | ".join(BENCH_COLUMNS) + " |")
            out.append("|" + "|".join("---" for _ in BENCH_COLUMNS) + "|")
            for r in brows:
                c = R.cells(r)
                c["case"] = f"{c['case']}<br><small>`{c['sizes']}`</small>"
                out.append("| " + " | ".join(c[h] for h in BENCH_COLUMNS) + " |")
            out.append("")
    return "\n".join(out)
