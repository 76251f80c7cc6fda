"""jaxkit.soft vs softjax 0.1.1: sort, rank, top-k, quantile per method, fwd+bwd.

Inputs x ~ N(0, 1) of shape (64, n), f32, cotangent weights W ~ N(0, 1); the timed
function is ``jit(value_and_grad(sum(W * op(x))))``. softjax needs Python >= 3.12,
so it runs in a subprocess on the same inputs (passed in an .npz file) with the same
timing protocol; its interpreter comes from ``--softjax-python`` or the environment
variable ``SOFTJAX_PYTHON``. When it is unavailable every line says
``"anchor_s": null`` with the reason. Targets (ratio = softjax time / ours): PAV rank
>= 2 at n=10000 (--full), >= 1 on every other line; network rank at n=1000 within
1 GB; every cell finite.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import _harness as H  # noqa: I001

import jax
import jax.numpy as jnp

import jaxkit.soft as S

SJ_NAME = {"pav": "fast_soft_sort", "network": "sorting_network"}
SOFTNESS = 0.1
K = 10
Q = 0.5

CHILD = r"""
import json, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
import softjax as sj
cells = json.loads(open(sys.argv[1]).read())
data = np.load(sys.argv[2])
reps = int(sys.argv[3])
def op(name, meth, x):
    kw = dict(softness=%(s)r, method=meth)
    if name == "sort":
        return sj.sort(x, axis=-1, **kw)
    if name == "rank":
        return sj.rank(x, axis=-1, descending=False, **kw)
    if name == "top_k":
        return sj.top_k(x, %(k)d, axis=-1, **kw)[0]
    return sj.quantile(x, %(q)r, axis=-1, **kw)
for c in cells:
    x = jnp.asarray(data["x%%d" %% c["n"]]); W = jnp.asarray(data["w_%%s_%%d" %% (c["op"], c["n"])])
    f = jax.jit(jax.value_and_grad(lambda x: jnp.sum(W * op(c["op"], c["method"], x))))
    try:
        out = jax.block_until_ready(f(x))
        if not all(bool(jnp.all(jnp.isfinite(o))) for o in out):
            raise FloatingPointError("non-finite output or gradient")
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter(); jax.block_until_ready(f(x)); ts.append(time.perf_counter() - t0)
        val = np.asarray(op(c["op"], c["method"], x))
        print(json.dumps({"id": c["id"], "s": statistics.median(ts), "out": val.ravel()[:0].tolist()}), flush=True)
        np.save(sys.argv[4] + "/" + c["id"] + ".npy", val)
    except Exception as e:
        print(json.dumps({"id": c["id"], "error": type(e).__name__ + ": " + str(e)[:160]}), flush=True)
""" % {"s": SOFTNESS, "k": K, "q": Q}


def ours_op(name, method, x):
    kw = dict(softness=SOFTNESS, method=method)
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


def grid(full):
    cells = []
    for n in [100, 1000] + ([10000] if full else []):
        for op in ["sort", "rank", "top_k", "quantile"]:
            for m in ["pav", "softsort", "neuralsort", "network", "ot"]:
                if m == "ot" and n > 100:
                    continue
                if n == 10000 and m not in ("pav",):
                    continue
                cells.append({"id": f"{op}-{m}-{n}", "op": op, "method": m, "n": n})
    return cells


def skip_anchor(c):
    if c["method"] == "network" and c["op"] in ("rank",) and c["n"] >= 1000:
        return "softjax network rank materialises n x n P per layer (28.7 GB at n=1000)"
    if c["method"] in ("softsort", "neuralsort") and c["n"] >= 1000 and c["op"] != "sort":
        return None
    return None


def run_anchor(py, cells, data_path, reps):
    if not py or not os.path.exists(py):
        return {}, "softjax interpreter not given (--softjax-python / SOFTJAX_PYTHON)"
    todo = [{**c, "method": SJ_NAME.get(c["method"], c["method"])} for c in cells
            if not skip_anchor(c)]
    with tempfile.TemporaryDirectory() as d:
        cp = os.path.join(d, "cells.json")
        with open(cp, "w") as f:
            json.dump(todo, f)
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env.pop("XLA_FLAGS", None)
        r = subprocess.run([py, child, cp, data_path, str(reps), d], capture_output=True,
                           text=True, env=env)
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
    return res, ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--softjax-python", default=os.environ.get("SOFTJAX_PYTHON"))
    p.add_argument("--methods", default="pav,softsort,neuralsort,network,ot",
                   help="comma-separated subset of methods")
    args = p.parse_args()
    keep = set(args.methods.split(","))
    cells = [c for c in grid(args.full) if c["method"] in keep]
    rng = np.random.default_rng(0)
    data = {}
    for n in sorted({c["n"] for c in cells}):
        data[f"x{n}"] = rng.standard_normal((64, n)).astype(np.float32)
        for op in ["sort", "rank", "top_k", "quantile"]:
            shape = {"sort": (64, n), "rank": (64, n), "top_k": (64, K), "quantile": (64,)}[op]
            data[f"w_{op}_{n}"] = rng.standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "inputs.npz")
        np.savez(path, **data)
        anchor, why = run_anchor(args.softjax_python, cells, path, args.repeats)
    for c in cells:
        n, op, m = c["n"], c["op"], c["method"]
        x = jnp.asarray(data[f"x{n}"])
        W = jnp.asarray(data[f"w_{op}_{n}"])
        f = jax.value_and_grad(lambda x, W=W, op=op, m=m: jnp.sum(W * ours_op(op, m, x)))
        t = H.time_jax(f, x, repeats=args.repeats)
        val = np.asarray(ours_op(op, m, x))
        finite = bool(np.all(np.isfinite(val)) and all(
            np.all(np.isfinite(np.asarray(o))) for o in jax.tree.leaves(t.output)))
        hard = np.asarray(hard_op(op, x))
        err = float(np.mean(np.abs(val - hard)))
        a = anchor.get(c["id"])
        at, note, aerr = None, why, None
        if skip_anchor(c):
            note = skip_anchor(c)
        elif a is not None and "s" in a:
            at = H.Timing(a["s"], None, None)
            aerr = float(np.mean(np.abs(a["val"] - hard)))
            note = ""
        elif a is not None:
            note = "softjax: " + a["error"]
        if m == "neuralsort":
            note = (note + "; " if note else "") + "ours: exact |.| NeuralSort (softjax: soft abs)"
        target = 2.0 if (m == "pav" and op == "rank" and n >= 10000) else 1.0
        extra = {}
        if m == "network" and op == "rank" and n == 1000:
            extra["mem_target_mb"] = 1024
        H.emit(bench="soft", case=f"{op}/{m}", sizes={"batch": 64, "n": n}, ours=t,
               anchor="softjax", anchor_t=at, target=target, note=note, ours_err=err,
               anchor_err=aerr, finite=finite, **extra)


if __name__ == "__main__":
    main()
