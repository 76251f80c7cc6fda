"""Shared helpers of the per-kernel device-check modules (not part of the package).

A check module (``kernels/device_checks/<kernel>.py``) runs its kernel against its jnp
reference (values and gradients) and times it, then writes a JSON list of rows
``{"kernel", "case", "dtype", "mode", "err", "tol", "ok", "times_ms": {name: ms}}``
with :func:`write_rows`. ``table.py`` prints every module's rows as one table.
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
