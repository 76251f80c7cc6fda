"""Make the softjax 0.1.1 parity golden file ``jaxkit/_fixtures/soft_golden.npz``.

softjax needs Python >= 3.12, so this script runs a child interpreter that has
``softjax==0.1.1`` installed (give its path as the first argument or in
``SOFTJAX_PYTHON``), feeds it the fixed inputs and the list of configurations
below, and stores inputs, outputs and the configuration list (JSON) in one .npz.
Run once; ``tests/soft/test_parity.py`` compares ``jaxkit.soft`` against it.

    python scripts/make_soft_golden.py /path/to/python3.12
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "jaxkit", "_fixtures", "soft_golden.npz")


def configs() -> list[dict]:
    """(name, fn, args, kwargs) in softjax's calling convention (explicit axis/descending)."""
    c = []
    modes = ["smooth", "c0", "c1", "c2"]
    for m in modes:
        for f in ["sigmoidal", "heaviside", "sign", "abs", "round"]:
            c.append(dict(name=f"{f}/{m}", fn=f, args=["e"], kw=dict(softness=0.3, mode=m)))
        for g in [False, True]:
            c.append(
                dict(
                    name=f"relu/{m}/gated={g}",
                    fn="relu",
                    args=["e"],
                    kw=dict(softness=0.3, mode=m, gated=g),
                )
            )
        c.append(
            dict(name=f"clip/{m}", fn="clip", args=["e", -0.5, 0.7], kw=dict(softness=0.3, mode=m))
        )
        for f in [
            "greater",
            "greater_equal",
            "less",
            "less_equal",
            "equal",
            "not_equal",
            "isclose",
        ]:
            c.append(dict(name=f"{f}/{m}", fn=f, args=["e", "e2"], kw=dict(softness=0.3, mode=m)))
    for g in [False, True]:
        for f in ["all", "any"]:
            c.append(dict(name=f"{f}/geo={g}", fn=f, args=["b"], kw=dict(use_geometric_mean=g)))
        for f in ["logical_and", "logical_or", "logical_xor"]:
            c.append(
                dict(name=f"{f}/geo={g}", fn=f, args=["b", "b2"], kw=dict(use_geometric_mean=g))
            )
    c.append(dict(name="logical_not", fn="logical_not", args=["b"], kw={}))
    for f in ["sqrt", "log", "arcsin", "arccos"]:
        c.append(dict(name=f, fn=f, args=["e"], kw={}))
    c.append(dict(name="div", fn="div", args=["e", "e2"], kw={}))
    c.append(dict(name="norm", fn="norm", args=["e"], kw=dict(axis=-1)))
    c.append(dict(name="where", fn="where", args=["b", "e", "e2"], kw={}))
    c.append(dict(name="take_along_axis", fn="take_along_axis", args=["x", "p3"], kw=dict(axis=-1)))
    c.append(dict(name="take", fn="take", args=["x", "p2"], kw=dict(axis=-1)))
    c.append(dict(name="choose", fn="choose", args=["pc", "x"], kw={}))
    c.append(
        dict(
            name="dynamic_index_in_dim",
            fn="dynamic_index_in_dim",
            args=["x", "p1"],
            kw=dict(axis=1),
        )
    )
    c.append(
        dict(
            name="dynamic_slice_in_dim",
            fn="dynamic_slice_in_dim",
            args=["x", "p1"],
            kw=dict(slice_size=4, axis=1),
        )
    )
    idx = ["softsort", "neuralsort", "sorting_network"]
    val = idx + ["fast_soft_sort"]
    for m in modes:
        for meth in val:
            if meth == "fast_soft_sort" and m in ("c1", "c2"):
                continue
            for d in [False, True]:
                kw = dict(axis=-1, softness=0.2, mode=m, method=meth, descending=d)
                c.append(dict(name=f"sort/{meth}/{m}/desc={d}", fn="sort", args=["x"], kw=kw))
                c.append(dict(name=f"rank/{meth}/{m}/desc={d}", fn="rank", args=["x"], kw=kw))
            kw = dict(axis=-1, softness=0.2, mode=m, method=meth)
            c.append(dict(name=f"max/{meth}/{m}", fn="max", args=["x"], kw=kw))
            c.append(dict(name=f"min/{meth}/{m}", fn="min", args=["x"], kw=kw))
            c.append(dict(name=f"top_k/{meth}/{m}", fn="top_k", args=["x", 3], kw=kw))
            c.append(dict(name=f"quantile/{meth}/{m}", fn="quantile", args=["x", "q"], kw=kw))
            c.append(dict(name=f"median/{meth}/{m}", fn="median", args=["x"], kw=kw))
        for meth in idx:
            kw = dict(axis=-1, softness=0.2, mode=m, method=meth)
            c.append(dict(name=f"argsort/{meth}/{m}", fn="argsort", args=["x"], kw=kw))
            c.append(dict(name=f"argmax/{meth}/{m}", fn="argmax", args=["x"], kw=kw))
            c.append(dict(name=f"argquantile/{meth}/{m}", fn="argquantile", args=["x", "q"], kw=kw))
    for f, a in [
        ("sort", ["x"]),
        ("rank", ["x"]),
        ("argsort", ["x"]),
        ("argmax", ["x"]),
        ("top_k", ["x", 3]),
        ("quantile", ["x", "q"]),
    ]:
        c.append(
            dict(
                name=f"{f}/ot/smooth",
                fn=f,
                args=a,
                kw=dict(axis=-1, softness=0.2, mode="smooth", method="ot"),
            )
        )
    return c


def inputs() -> dict:
    rng = np.random.default_rng(0)
    b, n = 4, 9
    x = rng.normal(size=(b, n)).astype(np.float32)
    p3 = rng.dirichlet(np.ones(n), size=(b, 3)).astype(np.float32)
    return dict(
        x=x,
        e=np.linspace(-2.0, 2.0, 41, dtype=np.float32),
        e2=np.float32(0.3) * np.cos(np.arange(41, dtype=np.float32)),
        b=rng.uniform(size=(5, 6)).astype(np.float32),
        b2=rng.uniform(size=(5, 6)).astype(np.float32),
        p3=p3,
        p2=p3[0],
        p1=p3[0, 0],
        pc=rng.dirichlet(np.ones(b), size=(n,)).astype(np.float32),
        q=np.array([0.3, 0.5], np.float32),
    )


CHILD = r"""
import json, sys
import numpy as np
import jax, jax.numpy as jnp
import softjax as sj
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
sj_version = sj.__version__ if hasattr(sj, "__version__") else "0.1.1"
out["versions"] = np.array(json.dumps({"softjax": sj_version, "jax": jax.__version__}))
np.savez_compressed(sys.argv[3], **out)
print(len(out) - 2, "outputs;", len(fails), "failures")
"""


def softjax_python() -> str:
    """The softjax interpreter: first argument or ``SOFTJAX_PYTHON``."""
    py = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SOFTJAX_PYTHON")
    if not py:
        raise SystemExit("give the Python >= 3.12 interpreter with softjax==0.1.1 installed")
    return py


def generate(py: str, child_src: str, cfgs: list[dict], inp: dict, out: str) -> None:
    """Run ``child_src`` under softjax's interpreter on ``cfgs``/``inp``; write ``out``."""
    with tempfile.TemporaryDirectory() as d:
        cfg_path, in_path, out_path = (os.path.join(d, f) for f in ("c.json", "i.npz", "o.npz"))
        with open(cfg_path, "w") as f:
            json.dump(cfgs, f)
        np.savez(in_path, **inp)
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write(child_src)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        subprocess.run([py, child, cfg_path, in_path, out_path], check=True, env=env)
        res = dict(np.load(out_path))
    res.update({"in:" + k: v for k, v in inp.items()})
    res["configs"] = np.array(json.dumps(cfgs))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    np.savez_compressed(out, **res)
    print("wrote", out, os.path.getsize(out), "bytes")


def main() -> None:
    generate(softjax_python(), CHILD, configs(), inputs(), OUT)


if __name__ == "__main__":
    main()
