"""The device-check script's CPU dry run (interpret mode, tiny shapes) passes (slow)."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_run_device_checks_interpret(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "kernels" / "run_device_checks.sh"),
            "--interpret",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for mod in ("wbmm", "sampling", "wedlm", "soft_pav", "splat"):
        rows = json.loads((tmp_path / f"{mod}.json").read_text())
        assert rows and all(r["ok"] for r in rows), (mod, rows)
    for kernel in ("windowed_matmul", "sampling", "wedlm_decode", "soft_pav", "splat_render"):
        assert kernel in proc.stdout
    # the two timing modules report their figures (tokens/s, speedup, slowdown)
    wedlm = json.loads((tmp_path / "wedlm.json").read_text())
    assert all(r["extra"]["tok/s wedlm"] > 0 and r["extra"]["speedup"] > 0 for r in wedlm)
    pav = json.loads((tmp_path / "soft_pav.json").read_text())
    assert {r["case"].split()[0] for r in pav} == {"sort", "rank"}


def test_device_check_budgets_fit_six_minutes():
    """Every module of the script has a budget; together they leave 20 s of 6 minutes."""
    import re

    text = (ROOT / "kernels" / "run_device_checks.sh").read_text()
    block = re.search(r"MODULES=\((.*?)\)", text, re.S).group(1)
    entries = re.findall(r'"(\w+) (\d+)"', block)
    mods = {m for m, _ in entries}
    checks = {p.stem for p in (ROOT / "kernels" / "device_checks").glob("*.py")}
    assert mods == checks - {"_common", "table", "__init__"}, (mods, checks)
    assert sum(int(b) for _, b in entries) <= 6 * 60 - 20, entries
