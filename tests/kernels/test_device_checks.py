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
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "wbmm.json").read_text())
    assert rows and all(r["ok"] for r in rows)
    assert "windowed_matmul" in proc.stdout
