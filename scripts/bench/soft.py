"""jaxkit.soft vs softjax 0.1.1: sort, rank, top-k, quantile per method, fwd+bwd.

Inputs x ~ N(0, 1) of shape (64, n), f32, cotangent weights W ~ N(0, 1); the timed
function is ``jit(value_and_grad(sum(W * op(x))))``. softjax needs Python >= 3.12,
so it runs in one persistent child process (``scripts/bench/_soft_anchor.py``, started
once per run) on the same inputs (passed in an .npz file); its interpreter comes from
``--softjax-python`` or the environment variable ``SOFTJAX_PYTHON``. When it is
unavailable every line says ``"anchor_s": null`` with the reason.

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
eager call in the child, in alternating blocks as below (issue 13 item 9: ours was
434 ms per call before the public functions were jitted like jax.numpy).

Timing (``scripts/bench/_interleave.py``; lines timed this way say
``"timing": "interleaved"``), per cell:
1. ours is AOT-compiled here and softjax's cell in the child (the compile is timed apart:
   ``ours_compile_s``); each side makes one warm-up call and one probe call;
2. each side makes ``--repeats`` timed calls, raised for a fast call so that they add up to
   at least 0.2 s (at most 200 calls), each ending in ``block_until_ready``;
3. the calls run in at most 8 blocks a side, alternated: ours, softjax, ours, softjax, ...
   so a slow drift of the shared machine (thermal, other load) falls on both sides;
4. each side's time is the median over all its blocks' calls; ``ours_cpu_s`` and
   ``anchor_cpu_s`` are the median process CPU seconds per call (all threads), which do not
   count the time a busy machine keeps a side waiting.
Up to wave 19 all our cells ran in one stretch and all softjax's in another child run: the
n=100 ``top_k/softsort`` cell read 0.84x there and 1.3-1.4x in a same-process comparison.

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
import os
import statistics
import tempfile
import time

import _harness as H  # noqa: I001
import _interleave as I
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


BENCH = "soft"
"""The lines' ``bench`` field (``soft_large.py`` sets ``soft_large``)."""

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


def eager_lines(data, child, why):
    """One line per op: our eager call vs softjax's eager call on the (8, 100) ``x_eager``,
    ``EAGER_CALLS`` calls a side in alternating blocks."""
    xj = jnp.asarray(data["x_eager"])
    for name in ("sort", "rank"):
        fn = getattr(S, name)
        ours = I.OursSide(fn, xj, jit=False)
        req = {"key": f"eager/{name}", "op": name, "eager": True, "x_key": "x_eager"}
        anchor = I.ChildSide(child, {**req, "softness": SOFTNESS}) if child else None
        pair = I.interleave(
            ours,
            anchor,
            repeats=EAGER_CALLS,
            min_timed_s=0.0,
            max_repeats=EAGER_CALLS,
            note=why,
        )
        H.emit(
            bench=BENCH,
            case=f"eager/{name}",
            sizes={"batch": 8, "n": 100},
            ours=H.Timing(pair.ours_s, None, None),
            anchor="softjax " + name + " (eager)",
            anchor_t=H.Timing(pair.anchor_s, None, None) if pair.anchor_s else None,
            target=1.0,
            note=pair.note or "eager call, no jit around it; default method",
            ours_jit_s=_eager_s(jax.jit(fn), xj),
            **_timing(pair),
        )


def _timing(pair):
    """How the two sides were timed (when both were), and each side's median CPU seconds
    per call (all threads): ``timing``, ``ours_cpu_s``, ``anchor_cpu_s``."""
    if pair.anchor_s is None:
        return {"ours_cpu_s": pair.ours_cpu_s}
    return {
        "timing": "interleaved",
        "ours_cpu_s": pair.ours_cpu_s,
        "anchor_cpu_s": pair.anchor_cpu_s,
    }


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


def anchor_side(c, child, d):
    """The softjax side of cell ``c`` in the persistent child (``None``: no child)."""
    if child is None:
        return None
    sj = SJ_NAME.get(c["method"], c["method"])
    key = f"{c['op']}-{sj}-{c['n']}-{c['temp']}"  # banded cells share the dense anchor
    req = {
        "key": key,
        "op": c["op"],
        "method": sj,
        "n": c["n"],
        "x_key": f"x{c['n']}",
        "w_key": f"w_{c['op']}_{c['n']}",
        "softness": "matched" if c["temp"] == "matched" else SOFTNESS,
        "x64": c["x64"],
        "k": K,
        "q": Q,
        "target": TARGET_RANK_ERR,
        "val_path": os.path.join(d, key + ".npy"),
    }
    return I.ChildSide(child, req)


def cell_line(c, data, child, why, repeats, d):
    """Time one cell, ours and softjax's in alternating blocks (``_interleave``), and print
    its line (OT rows in float64 on both sides)."""
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
    ours = I.OursSide(f, x)
    anchor = None if skip_anchor(c) else anchor_side(c, child, d)
    pair = I.interleave(ours, anchor, repeats=repeats, note=skip_anchor(c) or why)
    t = H.Timing(pair.ours_s, ours.compile_s, ours.mem_mb, ours.output)
    val = np.asarray(jax.jit(lambda x, op=op, m=m, s=s: ours_op(op, m, x, s))(x))
    finite = bool(
        np.all(np.isfinite(val))
        and all(np.all(np.isfinite(np.asarray(o))) for o in jax.tree.leaves(t.output))
    )
    hard = np.asarray(hard_op(op, x))
    err = float(np.mean(np.abs(val - hard)))
    at, aerr, asoft, amem = None, None, None, None
    if pair.anchor_s is not None:
        at = H.Timing(pair.anchor_s, None, None)
        aerr = float(np.mean(np.abs(np.load(anchor.request["val_path"]) - hard)))
        asoft, amem = anchor.info.get("softness"), anchor.info.get("mem")
    extra = {
        "temp": temp,
        "softness": s,
        "anchor_softness": asoft,
        "anchor_peak_mem_mb": amem,
        "ours_err": err,
        "anchor_err": aerr,
        "finite": finite,
        **_timing(pair),
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
        bench=BENCH,
        case=f"{op}/{m}",
        sizes={"batch": 64, "n": n},
        ours=t,
        anchor="softjax " + SJ_NAME.get(m, m),
        anchor_t=at,
        target=target_of(c),
        note=pair.note,
        **extra,
    )


def main(argv: list[str] | None = None) -> None:
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
    args = p.parse_args(argv)
    if args.pav_large:
        args.methods, args.ops, args.n, args.temps = "pav", "sort,rank", "10000", "matched"
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
    if args.eager:
        cells = []
    data = {"x_eager": np.random.default_rng(0).standard_normal((8, 100)).astype(np.float32)}
    rng = np.random.default_rng(0)
    for n in sorted({c["n"] for c in cells}):
        data[f"x{n}"] = rng.standard_normal((64, n)).astype(np.float32)
        for op in OPS:
            shape = {"sort": (64, n), "rank": (64, n), "top_k": (64, K), "quantile": (64,)}[op]
            data[f"w_{op}_{n}"] = rng.standard_normal(shape).astype(np.float32)
        data[f"probe{n}"] = _calibrate._probe(n, jax.random.key(0))  # jaxkit.soft.calibrate's probe
    py = args.softjax_python
    why = "" if py and os.path.exists(py) else I.NO_PYTHON
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "inputs.npz")
        np.savez(path, **data)
        with I.AnchorChild(py, path) if not why else contextlib.nullcontext() as child:
            if not args.pav_large:  # the eager lines belong to the quick grid
                eager_lines(data, child, why)
            for c in cells:
                with jax.enable_x64(True) if c["x64"] else contextlib.nullcontext():
                    cell_line(c, data, child, why, args.repeats, d)


if __name__ == "__main__":
    main()
