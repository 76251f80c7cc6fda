"""jaxkit.soft vs softjax 0.1.1: sort, rank, top-k, quantile per method, fwd+bwd.

Inputs x ~ N(0, 1) of shape (64, n), f32, cotangent weights W ~ N(0, 1); the timed
function is ``jit(value_and_grad(sum(W * op(x))))``. softjax needs Python >= 3.12,
so it runs in a subprocess on the same inputs (passed in an .npz file) with the same
timing protocol; its interpreter comes from ``--softjax-python`` or the environment
variable ``SOFTJAX_PYTHON``. When it is unavailable every line says
``"anchor_s": null`` with the reason.

Two temperature settings per cell (``"temp"`` in the line):
* ``nominal``: softness 0.1 on both sides (softjax's default);
* ``matched``: each side at the softness whose rank MAE on the same fixed
  standard-normal probe is 0.5 (ours: :func:`jaxkit.soft.calibrate`; softjax: the same
  bisection run in the child on the same probe), the fair comparison since nominal
  softness means different blur per method. Only sort and rank.

Methods: pav, softsort, neuralsort, network, ot (n=100), and the banded variants
``softsort_banded`` / ``neuralsort_banded`` (``window=W``; anchor: softjax's dense
softsort / neuralsort; the certified tail bound is reported as ``tail_bound``).
Both sides use softjax's soft-``|.|`` NeuralSort (our default since Foundation III).

``--eager`` (also run by default, first) adds one quick line per op: the EAGER call time
of ``soft.sort`` / ``soft.rank`` (default method, softness 0.1) on an (8, 100) array,
no ``jit`` around the call, median of 50 calls after a warm-up call, against softjax's
eager call in its subprocess (issue 13 item 9: ours was 434 ms per call before the
public functions were jitted like jax.numpy).

Timing: ``--repeats`` calls (median), raised on both sides for a fast cell so that its
timed calls add up to at least 0.2 s (at most 200 calls).

``--pav-large`` runs only PAV sort / rank at n=10000, matched softness (heavy pooling).
The OT rows run in float64 on both sides (softjax's OT aborts in float32 fwd+bwd).
Banded cells use ``window="auto"`` (the band only where it pays); the ``*_forced`` lines
time the band itself (informational, no target).

Targets (ratio = softjax time / ours): PAV rank >= 2 and PAV sort (matched) >= 3 at
n=10000 (--full / --pav-large), >= 1 on every
other line; network rank at n=1000 within 1 GB (``mem_ok``); banded NeuralSort >= 10x
softjax NeuralSort at n=10000; every cell finite (``finite``) in float32.
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import numpy as np

import jaxkit.soft as S
from jaxkit.soft import _calibrate

SJ_NAME = {
    "pav": "fast_soft_sort",
    "network": "sorting_network",
    "softsort_banded": "softsort",
    "neuralsort_banded": "neuralsort",
    "softsort_forced": "softsort",
    "neuralsort_forced": "neuralsort",
}
SOFTNESS = 0.1
# fast cells: both sides time at least MIN_TIMED_S of calls (up to MAX_REPEATS), so that a
# sub-millisecond cell is not the median of three calls
MIN_TIMED_S = 0.2
MAX_REPEATS = 200
TARGET_RANK_ERR = 0.5
K = 10
Q = 0.5
# banded cells: window="auto" (the band only where it pays); forced: the band itself
WINDOW = {
    "softsort_banded": "auto",
    "neuralsort_banded": "auto",
    "softsort_forced": 48,
    "neuralsort_forced": 16,
}

CHILD = r"""
import contextlib, json, math, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
import softjax as sj
cells = json.loads(open(sys.argv[1]).read())
data = np.load(sys.argv[2])
reps, maxr, mins = (float(v) for v in sys.argv[3].split(","))  # see MIN_TIMED_S
def op(name, meth, x, s):
    kw = dict(softness=s, method=meth)
    if name == "sort":
        return sj.sort(x, axis=-1, **kw)
    if name == "rank":
        return sj.rank(x, axis=-1, descending=False, **kw)
    if name == "top_k":
        return sj.top_k(x, %(k)d, axis=-1, **kw)[0]
    return sj.quantile(x, %(q)r, axis=-1, **kw)
CAL = {}
def calibrate(meth, n, target=%(t)r, rtol=0.005):
    # the bisection of jaxkit.soft.calibrate, on the same probe
    if (meth, n) in CAL:
        return CAL[meth, n]
    p = jnp.asarray(data["probe%%d" %% n])
    hard = (jnp.argsort(jnp.argsort(p, axis=-1), axis=-1) + 1).astype(p.dtype)
    err = jax.jit(lambda s: jnp.mean(jnp.abs(op("rank", meth, p, s) - hard)))
    f = lambda e: float(err(jnp.asarray(10.0 ** e, jnp.float32)))
    lo = -3.0; flo = f(lo)
    while flo > target and lo > -24:
        lo -= 2.0; flo = f(lo)
    hi, fhi = lo, flo
    while fhi < target and hi < 24:
        lo, flo = hi, fhi; hi += 1.0; fhi = f(hi)
    s = None
    for _ in range(60):
        mid = 0.5 * (lo + hi); fm = f(mid)
        if abs(fm - target) <= rtol * target or hi - lo < 1e-7:
            s = 10.0 ** mid; break
        if fm < target: lo = mid
        else: hi = mid
    CAL[meth, n] = s if s is not None else 10.0 ** (0.5 * (lo + hi))
    return CAL[meth, n]
def run(c):
    x = jnp.asarray(data["x%%d" %% c["n"]]); W = jnp.asarray(data["w_%%s_%%d" %% (c["op"], c["n"])])
    if c.get("x64"):
        x, W = x.astype(jnp.float64), W.astype(jnp.float64)
    try:
        s = calibrate(c["method"], c["n"]) if c["temp"] == "matched" else %(s)r
        f = jax.jit(jax.value_and_grad(lambda x: jnp.sum(W * op(c["op"], c["method"], x, s))))
        mem = None
        try:
            m = f.lower(x).compile().memory_analysis()
            mem = (m.temp_size_in_bytes + m.output_size_in_bytes + m.argument_size_in_bytes) / 2**20
        except Exception:
            pass
        out = jax.block_until_ready(f(x))
        if not all(bool(jnp.all(jnp.isfinite(o))) for o in out):
            raise FloatingPointError("non-finite output or gradient")
        t0 = time.perf_counter(); jax.block_until_ready(f(x)); t1 = time.perf_counter() - t0
        ts = []
        for _ in range(int(max(reps, min(maxr, math.ceil(mins / max(t1, 1e-9)))))):
            t0 = time.perf_counter(); jax.block_until_ready(f(x)); ts.append(time.perf_counter() - t0)
        val = np.asarray(jax.jit(lambda x: op(c["op"], c["method"], x, s))(x))
        np.save(sys.argv[4] + "/" + c["id"] + ".npy", val)
        print(json.dumps({"id": c["id"], "s": statistics.median(ts), "softness": s, "mem": mem}), flush=True)
    except Exception as e:
        print(json.dumps({"id": c["id"], "error": type(e).__name__ + ": " + str(e)[:160]}), flush=True)
for c in cells:
    with (jax.enable_x64(True) if c.get("x64") else contextlib.nullcontext()):
        run(c)
""" % {"s": SOFTNESS, "k": K, "q": Q, "t": TARGET_RANK_ERR}  # noqa: E501, UP031


def _kw(method, softness):
    if method in WINDOW:
        return dict(softness=softness, method=method.split("_")[0], window=WINDOW[method])
    return dict(softness=softness, method=method)


def ours_op(name, method, x, softness):
    kw = _kw(method, softness)
    if name == "sort":
        return S.sort(x, **kw)
    if name == "rank":
        return S.rank(x, **kw)
    if name == "top_k":
        return S.top_k(x, K, **kw)[0]
    return S.quantile(x, Q, axis=-1, **kw)


def hard_op(name, x):
    if name == "sort":
        return jnp.sort(x)
    if name == "rank":
        return (jnp.argsort(jnp.argsort(x)) + 1).astype(x.dtype)
    if name == "top_k":
        return jax.lax.top_k(x, K)[0]
    return jnp.quantile(x, Q, axis=-1)


METHODS = [
    "pav",
    "softsort",
    "neuralsort",
    "network",
    "ot",
    "softsort_banded",
    "neuralsort_banded",
    "softsort_forced",
    "neuralsort_forced",
]
OPS = ["sort", "rank", "top_k", "quantile"]


def grid(full):
    cells = []
    for n in [100, 1000] + ([10000] if full else []):
        for temp in ["nominal", "matched"]:
            for op in OPS:
                for m in METHODS:
                    if m == "ot" and (n > 100 or temp == "matched"):
                        continue
                    if temp == "matched" and op not in ("sort", "rank"):
                        continue
                    if n == 10000 and m not in ("pav", "neuralsort_banded", "neuralsort_forced"):
                        continue
                    if (
                        n == 10000
                        and m in ("neuralsort_banded", "neuralsort_forced")
                        and (temp != "matched" or op != "rank")
                    ):
                        continue
                    cells.append(
                        {
                            "id": f"{op}-{m}-{n}-{temp}",
                            "op": op,
                            "method": m,
                            "n": n,
                            "temp": temp,
                            "x64": m == "ot",
                        }
                    )
    return cells


def skip_anchor(c):
    if c["method"] == "network" and c["op"] == "rank" and c["n"] >= 1000:
        return "softjax network rank materialises n x n P per layer (28.7 GB at n=1000)"
    return None


def run_anchor(py, cells, data_path, reps):
    if not py or not os.path.exists(py):
        return {}, "softjax interpreter not given (--softjax-python / SOFTJAX_PYTHON)"
    todo = [
        {**c, "method": SJ_NAME.get(c["method"], c["method"])} for c in cells if not skip_anchor(c)
    ]
    # one softjax run per distinct (op, method, n, temp): banded cells share the dense anchor
    uniq = {}
    for c in todo:
        uniq.setdefault(f"{c['op']}-{c['method']}-{c['n']}-{c['temp']}", {**c, "id": None})
    for key, c in uniq.items():
        c["id"] = key
    with tempfile.TemporaryDirectory() as d:
        cp = os.path.join(d, "cells.json")
        with open(cp, "w") as f:
            json.dump(list(uniq.values()), f)
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env.pop("XLA_FLAGS", None)
        r = subprocess.run(
            [py, child, cp, data_path, f"{reps},{MAX_REPEATS},{MIN_TIMED_S}", d],
            capture_output=True,
            text=True,
            env=env,
        )
        res = {}
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                o = json.loads(line)
                p = os.path.join(d, o["id"] + ".npy")
                if os.path.exists(p):
                    o["val"] = np.load(p)
                res[o["id"]] = o
        if r.returncode != 0 and not res:
            return {}, "softjax subprocess failed: " + r.stderr[-200:]
    out = {}
    for c in todo:
        out[c["id"]] = res.get(f"{c['op']}-{c['method']}-{c['n']}-{c['temp']}")
    return out, ""


EAGER_CHILD = r"""
import json, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
import softjax as sj
x = jnp.asarray(np.load(sys.argv[1]))
for name in ("sort", "rank"):
    f = getattr(sj, name)
    kw = dict(axis=-1, softness=0.1) | ({"descending": False} if name == "rank" else {})
    try:
        jax.block_until_ready(f(x, **kw))
        ts = []
        for _ in range(int(sys.argv[2])):
            t0 = time.perf_counter()
            jax.block_until_ready(f(x, **kw))
            ts.append(time.perf_counter() - t0)
        print(json.dumps({"id": name, "s": statistics.median(ts)}), flush=True)
    except Exception as e:
        print(json.dumps({"id": name, "error": type(e).__name__ + ": " + str(e)[:160]}), flush=True)
"""
EAGER_CALLS = 50


def _eager_s(fn, x, calls=EAGER_CALLS):
    """Median wall time of an eager (un-jitted) call, after one warm-up call."""
    jax.block_until_ready(fn(x))
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(x))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def eager_lines(py):
    """One line per op: our eager call vs softjax's eager call on an (8, 100) array."""
    x = np.random.default_rng(0).standard_normal((8, 100)).astype(np.float32)
    anchor, why = {}, "softjax interpreter not given (--softjax-python / SOFTJAX_PYTHON)"
    if py and os.path.exists(py):
        with tempfile.TemporaryDirectory() as d:
            xp, child = os.path.join(d, "x.npy"), os.path.join(d, "child.py")
            np.save(xp, x)
            with open(child, "w") as f:
                f.write(EAGER_CHILD)
            env = {**os.environ, "JAX_PLATFORMS": "cpu"}
            env.pop("XLA_FLAGS", None)
            r = subprocess.run(
                [py, child, xp, str(EAGER_CALLS)], capture_output=True, text=True, env=env
            )
            anchor = {o["id"]: o for o in map(json.loads, r.stdout.splitlines()) if "id" in o}
            why = "" if anchor else "softjax subprocess failed: " + r.stderr[-200:]
    xj = jnp.asarray(x)
    for name in ("sort", "rank"):
        fn = getattr(S, name)
        ours = H.Timing(_eager_s(fn, xj), None, None)
        jitted = jax.jit(fn)
        a = anchor.get(name, {})
        note = why or a.get("error", "")
        H.emit(
            bench="soft",
            case=f"eager/{name}",
            sizes={"batch": 8, "n": 100},
            ours=ours,
            anchor="softjax " + name + " (eager)",
            anchor_t=H.Timing(a["s"], None, None) if "s" in a else None,
            target=1.0,
            note=note or "eager call, no jit around it; default method",
            ours_jit_s=_eager_s(jitted, xj),
        )


def target_of(c):
    if c["method"].endswith("_forced"):
        return None  # informational: the forced band where "auto" would not band
    if c["method"] == "pav" and c["op"] == "rank" and c["n"] >= 10000:
        return 2.0
    if c["method"] == "pav" and c["op"] == "sort" and c["n"] >= 10000 and c["temp"] == "matched":
        return 3.0  # heavy pooling: the parallel pooling phase
    if c["method"] == "neuralsort_banded" and c["n"] >= 10000:
        return 10.0
    return 1.0


def time_cell(f, x, repeats):
    """``H.time_jax`` with ``repeats`` raised for a fast call (as the anchor's child does):
    the timed calls add up to at least ``MIN_TIMED_S`` (at most ``MAX_REPEATS`` calls)."""
    t0 = time.perf_counter()
    compiled = jax.jit(f).lower(x).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(x))
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(x))
    t1 = time.perf_counter() - t0
    reps = max(repeats, min(MAX_REPEATS, math.ceil(MIN_TIMED_S / max(t1, 1e-9))))
    t = H.time_jax(compiled, x, repeats=reps, jit=False)
    m = compiled.memory_analysis()
    mem = m.temp_size_in_bytes + m.output_size_in_bytes + m.argument_size_in_bytes
    return H.Timing(t.median_s, compile_s, round(mem / 2**20, 3), t.output)


def cell_line(c, data, anchor, why, repeats):
    """Time one cell on our side and print its line (OT rows in float64 on both sides)."""
    n, op, m, temp = c["n"], c["op"], c["method"], c["temp"]
    x = jnp.asarray(data[f"x{n}"])
    W = jnp.asarray(data[f"w_{op}_{n}"])
    if c["x64"]:
        x, W = x.astype(jnp.float64), W.astype(jnp.float64)
    if temp == "matched":
        kw = {"window": WINDOW[m]} if m in WINDOW else {}
        s = S.calibrate(m.split("_")[0], n, TARGET_RANK_ERR, **kw)
    else:
        s = SOFTNESS
    f = jax.value_and_grad(lambda x, W=W, op=op, m=m, s=s: jnp.sum(W * ours_op(op, m, x, s)))
    t = time_cell(f, x, repeats)
    val = np.asarray(jax.jit(lambda x, op=op, m=m, s=s: ours_op(op, m, x, s))(x))
    finite = bool(
        np.all(np.isfinite(val))
        and all(np.all(np.isfinite(np.asarray(o))) for o in jax.tree.leaves(t.output))
    )
    hard = np.asarray(hard_op(op, x))
    err = float(np.mean(np.abs(val - hard)))
    a = anchor.get(c["id"])
    at, note, aerr, asoft, amem = None, why, None, None, None
    if skip_anchor(c):
        note = skip_anchor(c)
    elif a is not None and "s" in a:
        at = H.Timing(a["s"], None, None)
        aerr = float(np.mean(np.abs(a["val"] - hard)))
        asoft, amem = a.get("softness"), a.get("mem")
        note = ""
    elif a is not None:
        note = "softjax: " + a["error"]
    extra = {
        "temp": temp,
        "softness": s,
        "anchor_softness": asoft,
        "anchor_peak_mem_mb": amem,
        "ours_err": err,
        "anchor_err": aerr,
        "finite": finite,
    }
    if c["x64"]:
        extra["dtype"] = "float64"
    if m in WINDOW:
        extra["window"] = WINDOW[m]
        b = S.banded_error_bound(
            op,
            x,
            *(() if op in ("sort", "rank") else ((K,) if op == "top_k" else (Q,))),
            **_kw(m, s),
            **({"axis": -1} if op == "quantile" else {}),
        )
        extra["tail_bound"] = float(jnp.max(b))
    if m == "network" and op == "rank" and n == 1000:
        extra["mem_target_mb"] = 1024
        extra["mem_ok"] = bool(t.peak_mem_mb is not None and t.peak_mem_mb <= 1024)
    H.emit(
        bench="soft",
        case=f"{op}/{m}",
        sizes={"batch": 64, "n": n},
        ours=t,
        anchor="softjax " + SJ_NAME.get(m, m),
        anchor_t=at,
        target=target_of(c),
        note=note,
        **extra,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="add n=10000 (pav, banded neuralsort)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--softjax-python", default=os.environ.get("SOFTJAX_PYTHON"))
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of methods")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of ops")
    p.add_argument("--n", default="", help="comma-separated subset of sizes")
    p.add_argument("--temps", default="nominal,matched")
    p.add_argument("--eager", action="store_true", help="only the eager call lines")
    p.add_argument(
        "--pav-large",
        action="store_true",
        help="only PAV sort/rank at n=10000, matched softness (the heavy-pooling cells)",
    )
    args = p.parse_args()
    if args.pav_large:
        args.methods, args.ops, args.n, args.temps = "pav", "sort,rank", "10000", "matched"
    eager_lines(args.softjax_python)
    if args.eager:
        return
    keep, ops = set(args.methods.split(",")), set(args.ops.split(","))
    temps = set(args.temps.split(","))
    sizes = {int(s) for s in args.n.split(",") if s}
    cells = [
        c
        for c in grid(args.full or 10000 in sizes)
        if c["method"] in keep
        and c["op"] in ops
        and c["temp"] in temps
        and (not sizes or c["n"] in sizes)
    ]
    rng = np.random.default_rng(0)
    data = {}
    for n in sorted({c["n"] for c in cells}):
        data[f"x{n}"] = rng.standard_normal((64, n)).astype(np.float32)
        for op in OPS:
            shape = {"sort": (64, n), "rank": (64, n), "top_k": (64, K), "quantile": (64,)}[op]
            data[f"w_{op}_{n}"] = rng.standard_normal(shape).astype(np.float32)
        data[f"probe{n}"] = _calibrate._probe(n, jax.random.key(0))  # jaxkit.soft.calibrate's probe
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "inputs.npz")
        np.savez(path, **data)
        anchor, why = run_anchor(args.softjax_python, cells, path, args.repeats)
    for c in cells:
        with jax.enable_x64(True) if c["x64"] else contextlib.nullcontext():
            cell_line(c, data, anchor, why, args.repeats)


if __name__ == "__main__":
    main()
