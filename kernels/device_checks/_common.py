"""Shared helpers of the per-kernel device-check modules (not part of the package).

A check module (``kernels/device_checks/<kernel>.py``) runs its kernel against its jnp
reference (values and gradients) and times it, then writes a JSON list of rows
``{"kernel", "case", "dtype", "mode", "err", "tol", "ok", "times_ms": {name: ms}}``
(optionally ``"extra": {name: number}``, e.g. tokens/s or a speedup) with :func:`write_rows`.
``table.py`` prints every module's rows as one table. ``run_device_checks.sh`` gives each
module a time budget (``DEVICE_CHECK_BUDGET_S``); a module that writes its rows after each
case and stops at :func:`deadline` keeps what it measured.
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--interpret", action="store_true", help="CPU dry run: Pallas interpret mode on tiny shapes"
    )
    p.add_argument("--out", required=True, help="JSON file for this module's rows")
    p.add_argument("--repeats", type=int, default=10)
    return p.parse_args()


def deadline(margin_s: float = 15.0) -> float:
    """``time.monotonic()`` after which a module should start no new case.

    The budget is ``DEVICE_CHECK_BUDGET_S`` (set per module by run_device_checks.sh; no limit
    when unset) minus ``margin_s`` for the case in flight and the final write.
    """
    budget = os.environ.get("DEVICE_CHECK_BUDGET_S")
    if not budget:
        return float("inf")
    return time.monotonic() + max(float(budget) - margin_s, 0.0)


def failed_row(kernel: str, case: str, dtype: str, mode: str, e: BaseException) -> dict:
    """The row of a case that raised (printed with its error; not ok)."""
    msg = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
    return {
        "kernel": kernel,
        "case": case,
        "dtype": dtype,
        "mode": mode,
        "err": None,
        "tol": None,
        "ok": False,
        "times_ms": {},
        "error": msg,
    }


def time_ms(fn, *args, repeats: int) -> float:
    """Median wall time (ms) of a jitted ``fn`` after compile and one warm-up."""
    import jax

    f = jax.jit(fn)
    jax.block_until_ready(f(*args))
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return 1e3 * ts[len(ts) // 2]


def rel_err(got, want) -> float:
    """Largest over leaves of ``max |got - want| / max |want|``, in float64."""
    import jax
    import numpy as np

    worst = 0.0
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        worst = max(worst, float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-30))
    return worst


def write_rows(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
