"""Make ``jaxkit/_fixtures/soft_golden_modes.npz``: softjax 0.1.1 outputs for PAV modes
c1/c2 (``fast_soft_sort``) and ``smooth_sort``.

Same protocol as ``scripts/make_soft_golden.py`` (a child Python >= 3.12 interpreter with
``softjax==0.1.1``; path as first argument or ``SOFTJAX_PYTHON``), run twice: once with
``jax_enable_x64`` (softjax then solves its p-norm PAV blocks and the smooth_sort L-BFGS
dual in float64, its most accurate setting; stored as ``out64:``) and once without
(float32 solvers, stored as ``out32:`` for reference); for ``smooth_sort`` a third run
(``outT:``) is float64 with softjax's L-BFGS tolerance lowered from 1e-5 to 1e-12 (same
algorithm, solved to convergence). Inputs are float32 in every run.

    python scripts/make_soft_golden_modes.py /path/to/python3.12
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_soft_golden import ROOT  # noqa: E402

OUT = os.path.join(ROOT, "jaxkit", "_fixtures", "soft_golden_modes.npz")
SOFTNESS = (0.1, 1.0)


def configs() -> list[dict]:
    c = []
    for xn in ("x7", "x33"):
        for s in SOFTNESS:
            for meth, modes in (("fast_soft_sort", ("c1", "c2")), ("smooth_sort", ("smooth",))):
                for m in modes:
                    kw = dict(axis=-1, softness=s, mode=m, method=meth)
                    tag = f"{meth}/{m}/{s}/{xn}"
                    c.append(
                        dict(
                            name=f"sort/{tag}", fn="sort", args=[xn], kw={**kw, "descending": False}
                        )
                    )
                    c.append(
                        dict(
                            name=f"rank/{tag}", fn="rank", args=[xn], kw={**kw, "descending": False}
                        )
                    )
                    c.append(
                        dict(
                            name=f"rank_desc/{tag}",
                            fn="rank",
                            args=[xn],
                            kw={**kw, "descending": True},
                        )
                    )
                    c.append(dict(name=f"quantile/{tag}", fn="quantile", args=[xn, "q"], kw=kw))
                    c.append(dict(name=f"max/{tag}", fn="max", args=[xn], kw=kw))
                    if meth == "fast_soft_sort":
                        c.append(dict(name=f"top_k/{tag}", fn="top_k", args=[xn, 3], kw=kw))
    return c


def inputs() -> dict:
    rng = np.random.default_rng(7)
    x7 = rng.normal(size=(3, 7)).astype(np.float32)
    x7[1, 3:5] = x7[1, 0]  # a row with ties
    x33 = rng.normal(size=(3, 33)).astype(np.float32)
    x33[2, 10:16] = x33[2, 1]
    x33[2, 20] = x33[2, 2]
    return dict(x7=x7, x33=x33, q=np.array([0.3, 0.5], np.float32))


CHILD = r"""
import json, sys
import jax
if sys.argv[4] in ("64", "T"):
    jax.config.update("jax_enable_x64", True)
import functools
import numpy as np
import jax.numpy as jnp
import softjax as sj
import softjax.functions as sjf
if sys.argv[4] == "T":  # same algorithm, L-BFGS run to tolerance 1e-12
    sjf._proj_permutahedron_smooth_sort = functools.partial(
        sjf._proj_permutahedron_smooth_sort, lbfgs_tol=1e-12)
    cfgs = [c for c in json.loads(open(sys.argv[1]).read()) if "smooth_sort" in c["name"]]
else:
    cfgs = json.loads(open(sys.argv[1]).read())
inp = dict(np.load(sys.argv[2]))
out, fails = {}, {}
for c in cfgs:
    args = [jnp.asarray(inp[a]) if isinstance(a, str) else a for a in c["args"]]
    try:
        r = getattr(sj, c["fn"])(*args, **c["kw"])
        if isinstance(r, tuple):
            r = r[0]
        r = np.asarray(r)
        if not np.all(np.isfinite(r)):
            raise FloatingPointError("non-finite output")
        out["out:" + c["name"]] = r
    except Exception as e:  # noqa: BLE001
        fails[c["name"]] = f"{type(e).__name__}: {str(e)[:200]}"
out["failures"] = np.array(json.dumps(fails))
np.savez_compressed(sys.argv[3], **out)
print(sys.argv[4], len(out) - 1, "outputs;", len(fails), "failures")
"""


def main() -> None:
    py = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SOFTJAX_PYTHON")
    if not py:
        raise SystemExit("give the Python >= 3.12 interpreter with softjax==0.1.1 installed")
    res = {}
    with tempfile.TemporaryDirectory() as d:
        cfg_path, in_path = os.path.join(d, "c.json"), os.path.join(d, "i.npz")
        cfgs = configs()
        with open(cfg_path, "w") as f:
            json.dump(cfgs, f)
        inp = inputs()
        np.savez(in_path, **inp)
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        for bits in ("64", "32", "T"):
            out_path = os.path.join(d, f"o{bits}.npz")
            subprocess.run([py, child, cfg_path, in_path, out_path, bits], check=True, env=env)
            for k, v in np.load(out_path).items():
                res[k.replace("out:", f"out{bits}:") if k.startswith("out:") else f"{k}{bits}"] = v
    res.update({"in:" + k: v for k, v in inp.items()})
    res["configs"] = np.array(json.dumps(cfgs))
    np.savez_compressed(OUT, **res)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
