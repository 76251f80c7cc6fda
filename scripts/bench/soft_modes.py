"""jaxkit.soft PAV p-norm modes (c1, c2) and smooth_sort vs softjax 0.1.1, fwd+bwd.

Inputs x ~ N(0, 1) of shape (64, n), f32, cotangent W ~ N(0, 1); the timed function is
``jit(value_and_grad(sum(W * op(x))))`` as in ``scripts/bench/soft.py``; softjax runs in
a child interpreter (``--softjax-python`` or ``SOFTJAX_PYTHON``) on the same inputs.
Default grid: sort and rank, modes c1/c2, n = 1000 (``--full`` adds n = 10000), plus
smooth_sort sort at n = 100. Target ratio (softjax / ours) >= 1.

Timing as ``scripts/bench/soft.py``: softjax is a persistent child
(``scripts/bench/_soft_anchor.py``) and each cell is timed in alternating blocks, ours then
softjax's, compile excluded on both sides, median over all blocks of each side; each side
makes ``--repeats`` calls, raised for a fast call to 0.2 s of calls (at most 200)
(``scripts/bench/_interleave.py``).
"""

import argparse
import contextlib
import os
import tempfile

import _harness as H  # noqa: I001
import _interleave as I
import jax
import jax.numpy as jnp
import numpy as np

import jaxkit.soft as S

SOFTNESS = 0.1
B = 64


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
    py = args.softjax_python
    why = "" if py and os.path.exists(py) else I.NO_PYTHON
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "inputs.npz")
        np.savez(path, **data)
        with I.AnchorChild(py, path) if not why else contextlib.nullcontext() as child:
            for c in cells:
                cell_line(c, data, child, why, args.repeats, d)


def cell_line(c, data, child, why, repeats, d):
    """Time one cell, ours and softjax's in alternating blocks (``_interleave``)."""
    x, W = jnp.asarray(data[f"x{c['n']}"]), jnp.asarray(data[f"w{c['n']}"])
    f = jax.value_and_grad(lambda x, W=W, c=c: jnp.sum(W * ours_op(c, x)))
    ours = I.OursSide(f, x)
    anchor = None
    if child is not None:
        req = {"key": c["id"], "op": c["op"], "method": c["sj_method"], "mode": c["mode"]}
        req |= {"x_key": f"x{c['n']}", "w_key": f"w{c['n']}", "softness": SOFTNESS}
        anchor = I.ChildSide(child, {**req, "val_path": os.path.join(d, c["id"] + ".npy")})
    pair = I.interleave(ours, anchor, repeats=repeats, note=why)
    t = H.Timing(pair.ours_s, ours.compile_s, ours.mem_mb, ours.output)
    val = np.asarray(ours_op(c, x))
    finite = bool(
        np.all(np.isfinite(val))
        and all(np.all(np.isfinite(np.asarray(o))) for o in jax.tree.leaves(t.output))
    )
    at, note, diff = None, pair.note, None
    if pair.anchor_s is not None:
        at = H.Timing(pair.anchor_s, None, None)
        diff = float(np.max(np.abs(np.load(anchor.request["val_path"]) - val)))
        note = "max |ours - softjax| (softjax f32 solver)"
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
        ours_cpu_s=pair.ours_cpu_s,
        **({"timing": "interleaved", "anchor_cpu_s": pair.anchor_cpu_s} if at else {}),
    )


if __name__ == "__main__":
    main()
