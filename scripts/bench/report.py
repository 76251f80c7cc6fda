"""Saved bench runs -> BENCHMARKS.md -> the README's marked figures.

Two modes:

  python scripts/bench/report.py --run AREA [AREA ...] [--repeats-runs N]
      runs ``scripts/bench/<area>.py`` (its quick grid) N times (default 3) and saves the
      JSON lines it prints on stdout to ``benchmarks/<area>.jsonl``, after one header line
      ``{"meta": {"area", "date", "runs", "command", "python", "jax", "cpus", "load", ...}}``.
      Then it aggregates, as below.

  python scripts/bench/report.py
      aggregates every saved ``benchmarks/*.jsonl``: lines are grouped by
      (bench, case, sizes, anchor); each group gets the medians of ``ours_s``, ``anchor_s``
      and ``ratio``, its number of lines (runs), its target, ``ok`` re-judged on the median
      ratio, and a date (the line's ``"date"``, else its file's meta date). It writes
      ``BENCHMARKS.md`` (one table per bench) and rewrites the README's marked figures.

Row keys. A row of BENCHMARKS.md is named ``<bench>/<case>/<sizes>`` with sizes written
``k=v,k=v`` in the bench's order (``soft/sort/pav/batch=64,n=1000``); when two anchors share
bench, case and sizes, each key gets ``@<anchor>``. A line's ``temp`` field (the soft bench's
nominal/matched softness) counts as one more size: ``soft/sort/pav/batch=64,n=1000,temp=matched``.

README markers. A figure in the README is generated when it sits between

  <!-- bench:KEY -->1.35×<!-- /bench -->

KEY may be several keys separated by spaces: the figure is then the range ``lo–hi`` of
their values. ``<!-- bench-pending:KEY -->`` marks a figure whose area has no saved runs
yet: it keeps its text (an earlier measurement) and becomes a live marker, regenerated, as
soon as every key is in BENCHMARKS.md. A ``#field`` after the keys picks what is shown:
``#ratio`` (default, ``1.35×``), ``#ours`` or ``#anchor`` (median times, ``12.3 ms``).
``tests/test_benchmarks_md.py`` checks that every marked figure equals what BENCHMARKS.md
says for its keys.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH_DIR = os.path.join(ROOT, "benchmarks")
BENCHMARKS_MD = os.path.join(ROOT, "BENCHMARKS.md")
README = os.path.join(ROOT, "README.md")

# one line: a marker opens and closes on the same line (a README table row)
MARK = re.compile(r"<!-- bench:(?P<spec>[^>]*?) -->(?P<text>[^\n]*?)<!-- /bench -->")
# a figure waiting for its area's saved runs: it keeps its (earlier) text until every key is
# in BENCHMARKS.md, then report.py turns it into a live marker
PENDING = re.compile(r"<!-- bench-pending:(?P<spec>[^>]*?) -->(?P<text>[^\n]*?)<!-- /bench -->")
COLUMNS = [
    "case",
    "sizes",
    "anchor",
    "ours",
    "anchor time",
    "ratio",
    "target",
    "ok",
    "runs",
    "date",
]
FIELDS = {"ratio": "ratio", "ours": "ours", "anchor": "anchor time"}
# Line fields outside ``sizes`` that still tell two cells apart (the soft bench times each
# cell at nominal and at matched softness): they join the sizes in the row key.
VARIANT_FIELDS = ("temp",)


# ----------------------------------------------------------------------------- formatting


def fmt_ratio(x: float | None) -> str:
    """``0.013×``, ``1.35×``, ``13.1×``, ``240×``; ``—`` when there is no ratio."""
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:.0f}×"
    if x >= 10:
        return f"{x:.1f}×"
    if x < 0.1:
        return f"{x:.2g}×"
    return f"{x:.2f}×"


def fmt_time(s: float | None) -> str:
    """Seconds as ``3.21 µs`` / ``12.3 ms`` / ``1.05 s`` (3 significant digits)."""
    if s is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    raise AssertionError


def fmt_sizes(sizes: dict[str, Any]) -> str:
    """``k=v,k=v`` in the bench's order, without spaces (keys are split on whitespace)."""

    def val(v: Any) -> str:
        s = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
        return s.replace(" ", "").replace("|", "/")

    return ",".join(f"{k}={val(v)}" for k, v in sizes.items())


def render(texts: list[str]) -> str:
    """The figure for one marker from its keys' BENCHMARKS.md cells: one value or ``lo–hi``.

    Cells are ``<number><unit>`` texts (``1.35×``, ``12.3 ms``); a range keeps the unit of
    its ends when they agree (``7.50–240×``) and writes both units otherwise.
    """
    if len(texts) == 1:
        return texts[0]
    parsed = []
    for t in texts:
        m = re.fullmatch(r"([0-9.]+)\s*(.*)", t)
        if m is None:
            raise ValueError(f"cannot range over {t!r}")
        parsed.append((float(m.group(1)), m.group(1), m.group(2), t))
    scale = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
    parsed.sort(key=lambda p: p[0] * scale.get(p[2], 1.0))
    lo, hi = parsed[0], parsed[-1]
    if lo[3] == hi[3]:
        return lo[3]
    if lo[2] == hi[2]:  # one unit: 7.50–240×, 1.2–3.4 ms
        return f"{lo[1]}–{hi[3]}"
    return f"{lo[3]}–{hi[3]}"


def parse_spec(spec: str) -> tuple[list[str], str]:
    """``"k1 k2#ours"`` -> (["k1", "k2"], "ours")."""
    spec, _, field = spec.strip().partition("#")
    field = field.strip() or "ratio"
    if field not in FIELDS:
        raise ValueError(f"unknown bench marker field {field!r} (one of {sorted(FIELDS)})")
    keys = spec.split()
    if not keys:
        raise ValueError("empty bench marker")
    return keys, field


# ----------------------------------------------------------------------------- loading


def read_jsonl(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(meta, bench lines) of one saved file; lines that are not bench lines are skipped."""
    meta: dict[str, Any] = {}
    lines = []
    with open(path) as f:
        for raw in f:
            raw = raw.strip()
            if not raw.startswith("{"):
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if "meta" in obj and isinstance(obj["meta"], dict):
                meta = {**meta, **obj["meta"]}
            elif "bench" in obj and "case" in obj:
                lines.append(obj)
    return meta, lines


def _median(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def _sizes(ln: dict[str, Any]) -> dict[str, Any]:
    """A line's sizes, plus its variant fields (``temp``: nominal/matched softness)."""
    sizes = dict(ln.get("sizes") or {})
    for f in VARIANT_FIELDS:
        if f in ln and f not in sizes:
            sizes[f] = ln[f]
    return sizes


def aggregate(lines: list[dict[str, Any]], default_date: str | None) -> list[dict[str, Any]]:
    """One row per (bench, case, sizes, anchor), in first-seen order, with medians."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for ln in lines:
        sizes = _sizes(ln)
        k = (ln["bench"], ln["case"], json.dumps(sizes, sort_keys=True), ln.get("anchor"))
        groups.setdefault(k, []).append(ln)
    rows = []
    for (bench, case, _, anchor), g in groups.items():
        ratio = _median(ln.get("ratio") for ln in g)
        targets = [ln.get("target") for ln in g if ln.get("target") is not None]
        target = targets[-1] if targets else None
        dates = [ln.get("date") or default_date for ln in g]
        dates = [d for d in dates if d]
        rows.append(
            {
                "bench": bench,
                "case": case,
                "sizes": _sizes(g[0]),
                "anchor": anchor,
                "ours_s": _median(ln.get("ours_s") for ln in g),
                "anchor_s": _median(ln.get("anchor_s") for ln in g),
                "ratio": ratio,
                "target": target,
                "ok": None if (ratio is None or target is None) else bool(ratio >= target),
                "runs": len(g),
                "date": max(dates) if dates else None,
            }
        )
    _assign_keys(rows)
    return rows


def _assign_keys(rows: list[dict[str, Any]]) -> None:
    base = [f"{r['bench']}/{r['case']}/{fmt_sizes(r['sizes'])}" for r in rows]
    for r, b in zip(rows, base, strict=True):
        r["key"] = b + (f"@{r['anchor']}".replace(" ", "_") if base.count(b) > 1 else "")


def load_all(
    bench_dir: str = BENCH_DIR, metas: dict[str, dict[str, Any]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """{area: rows} for every ``<bench_dir>/*.jsonl``, areas in name order (headers -> metas)."""
    out = {}
    if not os.path.isdir(bench_dir):
        return out
    for name in sorted(os.listdir(bench_dir)):
        if name.endswith(".jsonl"):
            meta, lines = read_jsonl(os.path.join(bench_dir, name))
            out[name[: -len(".jsonl")]] = aggregate(lines, meta.get("date"))
            if metas is not None:
                metas[name[: -len(".jsonl")]] = meta
    return out


def _meta_line(area: str, meta: dict[str, Any]) -> str:
    """One sentence on how a saved file was made (from its header, when it has one)."""
    if not meta:
        return f"Saved in `benchmarks/{area}.jsonl` (no header: runs counted per row)."
    parts = [f"{meta.get('runs', '?')} run(s) of `{meta.get('command', area)}`"]
    if meta.get("date"):
        parts.append(f"on {meta['date']}")
    if meta.get("cpus"):
        parts.append(f"{meta['cpus']} CPUs")
    if meta.get("load") is not None:
        parts.append(f"load average {meta['load']} at the start")
    if meta.get("wall_s"):
        parts.append("seconds per run " + "/".join(f"{w:.0f}" for w in meta["wall_s"]))
    return f"Saved in `benchmarks/{area}.jsonl`: " + ", ".join(parts) + "."


# ----------------------------------------------------------------------------- BENCHMARKS.md


def cells(r: dict[str, Any]) -> dict[str, str]:
    target = r["target"]
    return {
        "case": r["case"],
        "sizes": fmt_sizes(r["sizes"]),
        "anchor": str(r["anchor"]).replace("|", "/"),
        "ours": fmt_time(r["ours_s"]),
        "anchor time": fmt_time(r["anchor_s"]),
        "ratio": fmt_ratio(r["ratio"]),
        "target": "—" if target is None else f"≥ {target:g}",
        "ok": {True: "yes", False: "**no**", None: "—"}[r["ok"]],
        "runs": str(r["runs"]),
        "date": r["date"] or "—",
    }


def benchmarks_md(
    areas: dict[str, list[dict[str, Any]]], metas: dict[str, dict[str, Any]] | None = None
) -> str:
    out = [
        "# Benchmarks",
        "",
        "Generated by `scripts/bench/report.py` (`make report`) from the saved runs in",
        "`benchmarks/<area>.jsonl` (each the JSON lines of N runs of `make bench NAME=<area>`,",
        "quick grids, compile excluded). Each row is the median over its runs; ratio = anchor",
        "time / ours (above 1: ours is faster); ok is judged on the median ratio. A row's key",
        "is `<bench>/<case>/<sizes>` (with `@<anchor>` when two anchors share it): the README",
        "quotes these rows between `<!-- bench:KEY -->` markers. Do not edit by hand.",
        "",
    ]
    for area, rows in areas.items():
        by_bench: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_bench.setdefault(r["bench"], []).append(r)
        for bench, brows in by_bench.items():
            out += [f"## {bench}", "", _meta_line(area, (metas or {}).get(area, {})), ""]
            out.append("| " + " | ".join(COLUMNS) + " |")
            out.append("|" + "|".join("---" for _ in COLUMNS) + "|")
            for r in brows:
                c = cells(r)
                out.append("| " + " | ".join(c[h] for h in COLUMNS) + " |")
            out.append("")
    return "\n".join(out)


def read_benchmarks_md(text: str) -> dict[str, dict[str, str]]:
    """{key: {column: cell}} parsed back from BENCHMARKS.md text (what the test compares)."""
    rows: list[dict[str, str]] = []
    bench = None
    header: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            bench, header = line[3:].strip(), None
        elif line.startswith("|") and bench is not None:
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            if header is None:
                header = parts
            elif not set(line) <= set("|-: "):
                rows.append({"bench": bench, **dict(zip(header, parts, strict=True))})
    base = [f"{r['bench']}/{r['case']}/{r['sizes']}" for r in rows]
    out = {}
    for r, b in zip(rows, base, strict=True):
        key = b + (f"@{r['anchor']}".replace(" ", "_") if base.count(b) > 1 else "")
        out[key] = r
    return out


# ----------------------------------------------------------------------------- README


def marked_figure(spec: str, table: dict[str, dict[str, str]]) -> str:
    """The text a README marker must hold, from BENCHMARKS.md cells (KeyError: missing key)."""
    keys, field = parse_spec(spec)
    missing = [k for k in keys if k not in table]
    if missing:
        raise KeyError(", ".join(missing))
    texts = [table[k][FIELDS[field]] for k in keys]
    if any(t == "—" for t in texts):
        raise ValueError(f"marker {spec!r}: a key has no {field}")
    return render(texts)


def rewrite_readme(readme: str, table: dict[str, dict[str, str]]) -> tuple[str, list[str]]:
    """README text with every marked figure regenerated, and the markers that could not be.

    Pending markers (``<!-- bench-pending:KEY -->``) whose keys are all in ``table`` become
    live markers first; the others keep their text.
    """
    problems = []

    def live(m: re.Match) -> str:
        keys, _ = parse_spec(m.group("spec"))
        if any(k not in table for k in keys):
            return m.group(0)
        return f"<!-- bench:{m.group('spec')} -->{m.group('text')}<!-- /bench -->"

    readme = PENDING.sub(live, readme)

    def sub(m: re.Match) -> str:
        try:
            fig = marked_figure(m.group("spec"), table)
        except (KeyError, ValueError) as e:
            problems.append(f"{m.group('spec')}: {e}")
            return m.group(0)
        return f"<!-- bench:{m.group('spec')} -->{fig}<!-- /bench -->"

    return MARK.sub(sub, readme), problems


# ----------------------------------------------------------------------------- running


def run_area(
    area: str, runs: int, extra: list[str], slow_s: float | None = None, bench_dir: str = BENCH_DIR
) -> str:
    """Run ``scripts/bench/<area>.py`` ``runs`` times; save its JSON lines; return the path.

    With ``slow_s``, an area whose first run took longer than that stops after one run
    (the header's ``runs`` says how many were made).
    """
    script = os.path.join(ROOT, "scripts", "bench", f"{area}.py")
    if not os.path.isfile(script):
        raise SystemExit(f"no bench script scripts/bench/{area}.py")
    env = {**os.environ, "PYTHONPATH": ROOT}
    import jax  # only for the version in the header

    meta = {
        "area": area,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"),
        "runs": runs,
        "command": " ".join([f"scripts/bench/{area}.py", *extra]),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
        "softjax_anchor": bool(os.environ.get("SOFTJAX_PYTHON")),
    }
    lines: list[str] = []
    walls = []
    for i in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, script, *extra],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        walls.append(round(time.perf_counter() - t0, 1))
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"{area}: run {i + 1} exited with {proc.returncode}")
        got = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        lines += got
        print(f"{area}: run {i + 1}/{runs}: {len(got)} lines, {walls[-1]} s", file=sys.stderr)
        if slow_s is not None and walls[-1] > slow_s:
            print(f"{area}: slower than {slow_s} s a run: stopping at {i + 1}", file=sys.stderr)
            break
    meta["runs"] = len(walls)
    meta["wall_s"] = walls
    os.makedirs(bench_dir, exist_ok=True)
    path = os.path.join(bench_dir, f"{area}.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        f.write("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", nargs="+", metavar="AREA", help="run these areas' quick benches")
    p.add_argument("--repeats-runs", type=int, default=3, help="runs per area (default 3)")
    p.add_argument("--bench-args", default="", help="extra arguments for the bench scripts")
    p.add_argument(
        "--slow-s", type=float, default=None, help="one run only for areas slower than this"
    )
    p.add_argument("--dir", default=BENCH_DIR, help="saved runs folder (default benchmarks/)")
    p.add_argument("--no-readme", action="store_true", help="do not rewrite README.md")
    args = p.parse_args(argv)
    if args.repeats_runs < 1:
        p.error("--repeats-runs must be >= 1")
    for area in args.run or []:
        run_area(area, args.repeats_runs, args.bench_args.split(), args.slow_s, args.dir)
    metas: dict[str, dict[str, Any]] = {}
    areas = load_all(args.dir, metas)
    md = benchmarks_md(areas, metas)
    with open(BENCHMARKS_MD, "w") as f:
        f.write(md)
    print(f"wrote BENCHMARKS.md ({sum(len(r) for r in areas.values())} rows)", file=sys.stderr)
    if args.no_readme:
        return 0
    with open(README) as f:
        readme = f.read()
    new, problems = rewrite_readme(readme, read_benchmarks_md(md))
    if new != readme:
        with open(README, "w") as f:
            f.write(new)
    n = len(MARK.findall(new))
    print(f"README: {n} marked figures, {n - len(problems)} regenerated", file=sys.stderr)
    pending = PENDING.findall(new)
    if pending:
        print(f"README: {len(pending)} figures pending (keys not saved yet)", file=sys.stderr)
    for pr in problems:
        print(f"  not regenerated: {pr}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
