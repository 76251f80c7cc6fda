"""The tour behind `make demo`: run every examples/*.py in one process.

Each example's ``main(quick=..., seed=0, out_dir=..., data_dir=...)`` returns a
dict with at least method, metric, value, baseline and ok (DESIGN.md). The tour
shows a progress bar, prints one results table, writes ``out/results.json`` (the
examples write their own plots under ``out/``) and exits non-zero if any example
raised or reported ``ok: false``.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)  # examples that build a mesh get 8 CPU devices


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(f"examples.{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="quick mode (the tour's default)")
    p.add_argument("--out", default="out")
    p.add_argument("--only", default=None, help="substring filter on example names")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    args = p.parse_args()

    from tqdm import tqdm

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = sorted((ROOT / "examples").glob("*.py"))
    paths = [q for q in paths if not q.name.startswith("_")]
    if args.only:
        paths = [q for q in paths if args.only in q.stem]
    results = []
    t_all = time.perf_counter()
    bar = tqdm(paths, desc="tour", unit="example", file=sys.stderr)
    for path in bar:
        bar.set_postfix_str(path.stem)
        t0 = time.perf_counter()
        try:
            res = dict(
                _load(path).main(quick=args.quick, seed=0, out_dir=str(out), data_dir=args.data_dir)
            )
            res.setdefault("method", path.stem)
        except Exception as e:  # noqa: BLE001  (the tour reports and goes on)
            traceback.print_exc()
            res = {
                "method": path.stem,
                "metric": "error",
                "value": repr(e)[:80],
                "baseline": None,
                "ok": False,
            }
        res["example"] = path.stem
        res["seconds"] = round(time.perf_counter() - t0, 2)
        results.append(res)
    total = time.perf_counter() - t_all

    cols = ["method", "metric", "value", "baseline", "ok", "seconds"]
    rows = [[_fmt(r.get(c)) for c in cols] for r in results]
    widths = [
        max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)
    ]
    print()
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    failed = [r["example"] for r in results if r.get("ok") is not True]
    print(
        f"\n{len(results)} examples in {total:.1f} s; {len(failed)} not ok"
        + (f": {', '.join(failed)}" if failed else "")
    )
    (out / "results.json").write_text(
        json.dumps({"total_seconds": round(total, 2), "results": results}, indent=2, default=str)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
