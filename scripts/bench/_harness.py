"""The one timing helper behind every `make bench NAME=<area>`.

Protocol: compile with ``jax.jit(f).lower(*args).compile()`` (timed and reported
separately), one warm-up call, then the median of ``repeats`` calls each ending in
``jax.block_until_ready``. Peak memory is the compiled program's temporary +
output bytes from XLA's memory analysis (or the process RSS high-water mark for
non-JAX anchors). Every comparison prints one JSON line (DESIGN.md):

  {"bench","case","sizes","ours_s","ours_compile_s","anchor","anchor_s","ratio",
   "target","ok","peak_mem_mb","note","date"}   (+ "ours_err", "anchor_err" for accuracy)

``date`` is the UTC day of the run (``scripts/bench/report.py`` dates BENCHMARKS.md rows by it).

ratio = anchor_s / ours_s; ok = ratio >= target, and ``null`` when the line has no
target or no ratio (nothing to judge).
"""

import argparse
import datetime
import json
import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("EQX_ON_ERROR", "nan")  # error_if checks out of the hot path

import jax  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@dataclass
class Timing:
    """Result of :func:`time_jax` / :func:`time_python`."""

    median_s: float
    compile_s: float | None
    peak_mem_mb: float | None
    output: Any = None


def parse_args(description: str) -> argparse.Namespace:
    """The flags every bench script takes: ``--full``, ``--repeats``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--full", action="store_true", help="add the largest sizes")
    p.add_argument("--repeats", type=int, default=7, help="timed calls per case")
    return p.parse_args()


def transformer_config(d_model: int, n_layers: int, **overrides: Any) -> Any:
    """The benches' small ``jaxkit.nn`` transformer: vocab 256, 4 query and 2 KV heads of
    width ``d_model // 4``, MLP ``2 d_model``; ``overrides`` replace any field."""
    from jaxkit import nn

    fields = dict(
        vocab_size=256,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=4,
        n_kv_heads=2,
        head_dim=d_model // 4,
        mlp_dim=2 * d_model,
    )
    return nn.TransformerConfig(**{**fields, **overrides})


def time_jax(fn: Callable[..., Any], *args: Any, repeats: int = 7, jit: bool = True) -> Timing:
    """Compile ``fn`` (unless ``jit=False``), warm up, and time ``repeats`` calls."""
    compile_s = None
    peak = None
    call = fn
    if jit:
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        compile_s = time.perf_counter() - t0
        peak = _compiled_mem_mb(compiled)
        call = compiled
    out = jax.block_until_ready(call(*args))  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call(*args))
        times.append(time.perf_counter() - t0)
    return Timing(statistics.median(times), compile_s, peak, out)


def time_python(fn: Callable[[], Any], *, repeats: int = 7) -> Timing:
    """Time a host callable (an anchor that is not a JAX function)."""
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return Timing(statistics.median(times), None, rss, out)


def time_interleaved(
    fns: dict[str, tuple[Callable[..., Any], tuple]], repeats: int
) -> dict[str, Timing]:
    """Compile each ``name -> (fn, args)``, warm it up, then time one call of each per round
    (interleaved, so load drifts hit every side alike); median per name, compile excluded."""
    compiled, comp_s, mem = {}, {}, {}
    for name, (fn, a) in fns.items():
        t0 = time.perf_counter()
        compiled[name] = jax.jit(fn).lower(*a).compile()
        comp_s[name] = time.perf_counter() - t0
        mem[name] = _compiled_mem_mb(compiled[name])
        jax.block_until_ready(compiled[name](*a))
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, (_, a) in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(compiled[name](*a))
            times[name].append(time.perf_counter() - t0)
    return {n: Timing(statistics.median(times[n]), comp_s[n], mem[n]) for n in fns}


def _compiled_mem_mb(compiled: Any) -> float | None:
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001  (not every backend reports it)
        return None
    if m is None:
        return None
    total = (
        getattr(m, "temp_size_in_bytes", 0)
        + getattr(m, "output_size_in_bytes", 0)
        + getattr(m, "argument_size_in_bytes", 0)
    )
    return round(total / 2**20, 3)


def emit(
    *,
    bench: str,
    case: str,
    sizes: dict[str, Any],
    ours: Timing | None,
    anchor: str,
    anchor_t: Timing | None,
    target: float | None,
    note: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """Print and return one bench JSON line."""
    ours_s = ours.median_s if ours else None
    anchor_s = anchor_t.median_s if anchor_t else None
    ratio = (anchor_s / ours_s) if (ours_s and anchor_s) else None
    line = {
        "bench": bench,
        "case": case,
        "sizes": sizes,
        "ours_s": _r(ours_s),
        "ours_compile_s": _r(ours.compile_s if ours else None),
        "anchor": anchor,
        "anchor_s": _r(anchor_s),
        "ratio": _r(ratio),
        "target": target,
        "ok": None if (ratio is None or target is None) else bool(ratio >= target),
        "peak_mem_mb": ours.peak_mem_mb if ours else None,
        "note": note,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
    }
    for k, v in extra.items():
        line[k] = _r(v) if isinstance(v, float) else v
    print(json.dumps(line), flush=True)
    return line


def _r(x: float | None) -> float | None:
    """Round to 6 significant digits; non-finite values become None (JSON has no NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.6g}")
