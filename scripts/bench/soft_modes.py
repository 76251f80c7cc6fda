"""jaxkit.soft PAV p-norm modes (c1, c2) and smooth_sort vs softjax 0.1.1, fwd+bwd.

Inputs x ~ N(0, 1) of shape (64, n), f32, cotangent W ~ N(0, 1); the timed function is
``jit(value_and_grad(sum(W * op(x))))`` as in ``scripts/bench/soft.py``; softjax runs in
a child interpreter (``--softjax-python`` or ``SOFTJAX_PYTHON``) on the same inputs.
Default grid: sort and rank, modes c1/c2, n = 1000 (``--full`` adds n = 10000), plus
smooth_sort sort at n = 100. Target ratio (softjax / ours) >= 1.
"""

import argparse
import json
import os
import subprocess
import tempfile

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import numpy as np

import jaxkit.soft as S

SOFTNESS = 0.1
B = 64

CHILD = r"""
import json, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
import softjax as sj
cells = json.loads(open(sys.argv[1]).read())
data = np.load(sys.argv[2])
reps = int(sys.argv[3])
def op(c, x):
    kw = dict(axis=-1, softness=%(s)r, method=c["sj_method"], mode=c["mode"])
    if c["op"] == "sort":
        return sj.sort(x, **kw)
    return sj.rank(x, descending=False, **kw)
for c in cells:
    x = jnp.asarray(data["x%%d" %% c["n"]]); W = jnp.asarray(data["w%%d" %% c["n"]])
    f = jax.jit(jax.value_and_grad(lambda x: jnp.sum(W * op(c, x))))
    try:
        jax.block_until_ready(f(x))
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter(); jax.block_until_ready(f(x)); ts.append(time.perf_counter() - t0)
        np.save(sys.argv[4] + "/" + c["id"] + ".npy", np.asarray(op(c, x)))
        print(json.dumps({"id": c["id"], "s": statistics.median(ts)}), flush=True)
    except Exception as e:
        print(json.dumps({"id": c["id"], "error": type(e).__name__ + ": " + str(e)[:160]}), flush=True)
""" % {"s": SOFTNESS}  # noqa: E501, UP031


def grid(full):
    cells = []
    for n in [1000] + ([10000] if full else []):
        for op in ("sort", "rank"):
            for mode in ("c1", "c2"):
                cells.append(
                    dict(
                        id=f"{op}-pav-{mode}-{n}",
                        op=op,
                        method="pav",
                        sj_method="fast_soft_sort",
                        mode=mode,
                        n=n,
                    )
                )
    cells.append(
        dict(
            id="sort-smooth_sort-100",
            op="sort",
            method="smooth_sort",
            sj_method="smooth_sort",
            mode="smooth",
            n=100,
        )
    )
    return cells


def ours_op(c, x):
    kw = dict(softness=SOFTNESS, method=c["method"], mode=c["mode"])
    return S.sort(x, **kw) if c["op"] == "sort" else S.rank(x, **kw)


def run_anchor(py, cells, data_path, reps):
    if not py or not os.path.exists(py):
        return {}, "softjax interpreter not given (--softjax-python / SOFTJAX_PYTHON)"
    with tempfile.TemporaryDirectory() as d:
        cp = os.path.join(d, "cells.json")
        with open(cp, "w") as f:
            json.dump(cells, f)
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env.pop("XLA_FLAGS", None)
        r = subprocess.run(
            [py, child, cp, data_path, str(reps), d], capture_output=True, text=True, env=env
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
    return res, ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--softjax-python", default=os.environ.get("SOFTJAX_PYTHON"))
    p.add_argument(
        "--only",
        default=None,
        help="run only the cells whose id contains this, e.g. sort-pav-c2-1000",
    )
    args = p.parse_args()
    cells = [c for c in grid(args.full) if args.only is None or args.only in c["id"]]
    rng = np.random.default_rng(0)
    data = {}
    for n in sorted({c["n"] for c in cells}):
        data[f"x{n}"] = rng.standard_normal((B, n)).astype(np.float32)
        data[f"w{n}"] = rng.standard_normal((B, n)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "inputs.npz")
        np.savez(path, **data)
        anchor, why = run_anchor(args.softjax_python, cells, path, args.repeats)
    for c in cells:
        x, W = jnp.asarray(data[f"x{c['n']}"]), jnp.asarray(data[f"w{c['n']}"])
        f = jax.value_and_grad(lambda x, W=W, c=c: jnp.sum(W * ours_op(c, x)))
        t = H.time_jax(f, x, repeats=args.repeats)
        val = np.asarray(ours_op(c, x))
        finite = bool(
            np.all(np.isfinite(val))
            and all(np.all(np.isfinite(np.asarray(o))) for o in jax.tree.leaves(t.output))
        )
        a = anchor.get(c["id"])
        at, note, diff = None, why, None
        if a is not None and "s" in a:
            at = H.Timing(a["s"], None, None)
            diff = float(np.max(np.abs(a["val"] - val)))
            note = "max |ours - softjax| (softjax f32 solver)"
        elif a is not None:
            note = "softjax: " + a["error"]
        H.emit(
            bench="soft_modes",
            case=f"{c['op']}/{c['method']}/{c['mode']}",
            sizes={"batch": B, "n": c["n"]},
            ours=t,
            anchor="softjax",
            anchor_t=at,
            target=1.0,
            note=note,
            max_diff=diff,
            finite=finite,
        )


if __name__ == "__main__":
    main()
