"""The README's generated figures equal BENCHMARKS.md (text against text, no timing).

A figure between ``<!-- bench:KEY -->`` and ``<!-- /bench -->`` in README.md must be what
``scripts/bench/report.py`` renders from BENCHMARKS.md's row KEY (several keys: their
range). After new saved runs, ``make report`` regenerates both files.
"""

import pathlib
import re

import pytest

from scripts.bench import report as R

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _table():
    return R.read_benchmarks_md((ROOT / "BENCHMARKS.md").read_text())


def test_readme_marked_figures_equal_benchmarks_md():
    table = _table()
    readme = (ROOT / "README.md").read_text()
    marks = list(R.MARK.finditer(readme))
    assert marks, "README.md has no <!-- bench:KEY --> marked figure"
    missing, wrong = [], []
    for m in marks:
        keys, _ = R.parse_spec(m.group("spec"))
        if any(k not in table for k in keys):
            missing += [k for k in keys if k not in table]
            continue
        want = R.marked_figure(m.group("spec"), table)
        if m.group("text") != want:
            wrong.append(f"{m.group('spec')}: README {m.group('text')!r}, BENCHMARKS.md {want!r}")
    assert not missing, f"keys absent from BENCHMARKS.md: {missing} (run `make report`)"
    assert not wrong, "README figures differ from BENCHMARKS.md (run `make report`):\n" + "\n".join(
        wrong
    )


# "(target ≥ 0.77: met" / "(#14: ≥ 0.77: **not met**" written just after a marked figure
_CLAIM = re.compile(
    r"[^(<|]{0,60}\((?:#\d+: )?(?:target )?≥ ?[\d.]+[^:()<]*: (?:\*\*)?(not met|met)\b"
)


def test_readme_met_claims_agree_with_benchmarks_md():
    # the words beside a figure are hand-written: a re-save that turns a cell must turn them too
    table = _table()
    readme = (ROOT / "README.md").read_text()
    checked, wrong = 0, []
    for m in R.MARK.finditer(readme):
        claim = _CLAIM.match(readme, m.end())
        keys, _ = R.parse_spec(m.group("spec"))
        if claim is None or any(k not in table for k in keys):
            continue
        oks = [table[k]["ok"] for k in keys]
        met = all(ok == "yes" for ok in oks)
        checked += 1
        if (claim.group(1) == "met") != met:
            wrong.append(f"{m.group('spec')}: README says {claim.group(1)!r}, ok column {oks}")
    assert checked >= 10, f"only {checked} README claims found: has the wording changed?"
    assert not wrong, "README met / not met claims differ from BENCHMARKS.md:\n" + "\n".join(wrong)


def test_pending_figures_wait_for_missing_keys():
    # a pending figure whose keys are all saved must have been made live by `make report`
    table = _table()
    readme = (ROOT / "README.md").read_text()
    stale = [
        m.group("spec")
        for m in R.PENDING.finditer(readme)
        if all(k in table for k in R.parse_spec(m.group("spec"))[0])
    ]
    assert not stale, (
        f"pending figures whose keys are in BENCHMARKS.md (run `make report`): {stale}"
    )


def test_benchmarks_md_rows_are_well_formed():
    table = _table()
    assert table
    for key, row in table.items():
        assert key.startswith(f"{row['bench']}/{row['case']}/"), key
        assert row["runs"].isdigit() and int(row["runs"]) >= 1, key
        if row["ratio"] != "—" and row["target"] != "—":
            ratio = float(row["ratio"].rstrip("×"))
            target = float(row["target"].lstrip("≥ "))
            # ok is judged on the median ratio (the rounded text may sit on the edge)
            if abs(ratio - target) > 0.01 * target:
                assert row["ok"] == ("yes" if ratio >= target else "**no**"), key


def _line(case, ours, anchor_s, target=1.0, anchor="a", n=10, date=None):
    ln = {
        "bench": "toy",
        "case": case,
        "sizes": {"n": n, "batch": 2},
        "ours_s": ours,
        "anchor": anchor,
        "anchor_s": anchor_s,
        "ratio": None if ours is None or anchor_s is None else anchor_s / ours,
        "target": target,
        "ok": None,
    }
    return ln | ({"date": date} if date else {})


def test_aggregate_medians_rejudge_and_keys():
    lines = [
        _line("sort", 1.0, 3.0),  # ratio 3
        _line("sort", 2.0, 1.0),  # ratio 0.5
        _line("sort", 1.5, 1.2, date="2026-12-02"),  # ratio 0.8: median ratio 0.8 < 1
        _line("rank", 1.0, 2.0, anchor="x"),
        _line("rank", 1.0, 4.0, anchor="y y"),
        _line("info", 1.0, None, target=None),
        _line("soft", 1.0, 2.0) | {"temp": "nominal"},
        _line("soft", 1.0, 5.0) | {"temp": "matched"},
    ]
    rows = {r["key"]: r for r in R.aggregate(lines, "2026-12-01")}
    s = rows["toy/sort/n=10,batch=2"]
    assert (s["ours_s"], s["anchor_s"], s["runs"]) == (1.5, 1.2, 3)
    assert s["ratio"] == pytest.approx(0.8) and s["ok"] is False
    assert s["date"] == "2026-12-02"
    assert {"toy/rank/n=10,batch=2@x", "toy/rank/n=10,batch=2@y_y"} <= set(rows)
    # the soft bench's nominal / matched cells stay apart
    assert rows["toy/soft/n=10,batch=2,temp=matched"]["ratio"] == 5.0
    assert rows["toy/soft/n=10,batch=2,temp=nominal"]["runs"] == 1
    info = rows["toy/info/n=10,batch=2"]
    assert info["ratio"] is None and info["ok"] is None and info["date"] == "2026-12-01"
    # BENCHMARKS.md text round-trips to the same keys and cells
    table = R.read_benchmarks_md(R.benchmarks_md({"toy": list(rows.values())}))
    assert set(table) == set(rows)
    assert table["toy/sort/n=10,batch=2"]["ratio"] == "0.80×"
    assert table["toy/sort/n=10,batch=2"]["ok"] == "**no**"
    assert table["toy/rank/n=10,batch=2@y_y"]["ours"] == "1 s"


def test_rewrite_readme_ranges_fields_and_missing_keys():
    rows = R.aggregate(
        [_line("a", 1e-3, 7.5e-3, n=64), _line("a", 1e-3, 0.24, n=512), _line("b", 2e-6, 1e-6)],
        "2026-12-01",
    )
    table = R.read_benchmarks_md(R.benchmarks_md({"toy": rows}))
    text = (
        "x <!-- bench:toy/a/n=64,batch=2 toy/a/n=512,batch=2 -->old<!-- /bench --> y "
        "<!-- bench:toy/b/n=10,batch=2#ours -->old<!-- /bench --> "
        "<!-- bench:toy/b/n=10,batch=2 -->old<!-- /bench --> "
        "<!-- bench:toy/zzz/n=1 -->keep<!-- /bench -->"
    )
    new, problems = R.rewrite_readme(text, table)
    assert "-->7.50–240×<!--" in new
    assert "-->2 µs<!--" in new and "-->0.50×<!--" in new
    assert "-->keep<!--" in new and len(problems) == 1 and "toy/zzz/n=1" in problems[0]
    again, _ = R.rewrite_readme(new, table)
    assert again == new
    pend = (
        "<!-- bench-pending:toy/b/n=10,batch=2 -->1.0×<!-- /bench --> "
        "<!-- bench-pending:toy/b/n=10,batch=2 toy/q/n=1 -->3×<!-- /bench -->"
    )
    new, problems = R.rewrite_readme(pend, table)
    assert new.startswith("<!-- bench:toy/b/n=10,batch=2 -->0.50×<!-- /bench -->") and not problems
    assert "<!-- bench-pending:toy/b/n=10,batch=2 toy/q/n=1 -->3×" in new
    with pytest.raises(ValueError):
        R.parse_spec("toy/a/n=1#speed")
