"""Print every device-check module's rows (JSON files) as one table; exit 1 if any failed."""

import json
import sys


def main(paths: list[str]) -> int:
    rows = []
    for p in paths:
        try:
            with open(p) as f:
                rows.extend(json.load(f))
        except (OSError, json.JSONDecodeError) as e:
            rows.append(
                {
                    "kernel": p,
                    "case": "-",
                    "dtype": "-",
                    "mode": "-",
                    "err": None,
                    "tol": None,
                    "ok": False,
                    "times_ms": {},
                    "error": repr(e),
                }
            )
    head = ["kernel", "case", "dtype", "mode", "rel err", "tol", "ok", "times (ms)"]
    body = []
    for r in rows:
        times = " ".join(f"{k}={v:.3f}" for k, v in r.get("times_ms", {}).items())
        extra = " ".join(f"{k}={v:.4g}" for k, v in (r.get("extra") or {}).items())
        times = f"{times}; {extra}" if extra else times
        if r.get("error"):
            times = (times + " " if times else "") + "ERROR " + r["error"][:80]
        err = "-" if r.get("err") is None else f"{r['err']:.2e}"
        tol = "-" if r.get("tol") is None else f"{r['tol']:.0e}"
        body.append(
            [
                r["kernel"],
                r["case"],
                r["dtype"],
                r["mode"],
                err,
                tol,
                "yes" if r.get("ok") else "NO",
                times,
            ]
        )
    widths = [
        max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)
    ]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for b in body:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(b, widths, strict=True)) + " |")
    bad = [r for r in rows if not r.get("ok")]
    print(f"\n{len(rows)} rows, {len(bad)} not ok")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
