"""The soft benches' persistent softjax child: builds and times softjax cells on request.

Run as ``<softjax python> scripts/bench/_soft_anchor.py inputs.npz`` (softjax needs Python
>= 3.12, so it cannot share the bench's process). It loads the inputs once, prints
``{"ready": true}`` and then answers one JSON line on stdout per JSON line on stdin:

* ``{"cmd": "build", "key", "op", "method", "x_key", "w_key", "softness", ...}``: build the
  cell (``softness`` a number or ``"matched"``: the rank-MAE bisection of
  :func:`jaxkit.soft.calibrate` on the probe ``"probe<n>"``), compile it (AOT, outside any
  timing), make one warm-up call, check it is finite, time one probe call; answer
  ``{"key", "t1", "softness", "mem", "compile_s"}`` or ``{"key", "error"}``. With ``w_key``
  the cell is ``jit(value_and_grad(sum(W * op(x))))``; with ``"eager": true`` it is the
  un-jitted call ``op(x)``. With ``val_path`` the op's values are saved there (``.npy``).
  A built cell is kept (``key``): a second build of the same key compiles nothing.
* ``{"cmd": "time", "key", "reps"}``: time ``reps`` calls of a built cell, each ending in
  ``block_until_ready``; answer ``{"key", "times": [wall s, ...], "cpu": [CPU s, ...]}``
  (the process's CPU time over each call, every thread).
* ``{"cmd": "quit"}``.

The parent (``scripts/bench/_interleave.py``) alternates these timing blocks with blocks of
its own calls. :class:`Driver` takes the softjax module as an argument, so the protocol can
be tested with a stand-in (``tests/test_bench_soft.py``); only :func:`main` imports softjax.
"""

import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

KEEP = 16  # built cells kept (oldest dropped first); a dropped one is rebuilt on request


def time_block(call: Callable[[], Any], reps: int) -> tuple[list[float], list[float]]:
    """Wall seconds and process CPU seconds (all threads) of ``reps`` calls of ``call``, each
    ending in ``block_until_ready`` (the one timing loop of both sides of the soft benches)."""
    ts, cs = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(call())
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    return ts, cs


def _x64(on: bool):
    return jax.enable_x64(True) if on else contextlib.nullcontext()


class Driver:
    """The child's state: the inputs, the built cells, the matched softnesses."""

    def __init__(self, sj: Any, data: Any):
        self.sj, self.data = sj, data
        self.cells: dict[str, tuple[Callable[[], Any], bool, dict]] = {}
        self.cal: dict[tuple, float] = {}

    def op(self, m: dict, x: Any, s: Any) -> Any:
        kw = {"softness": s}
        for name in ("method", "mode"):  # absent: softjax's default
            if m.get(name) is not None:
                kw[name] = m[name]
        if m["op"] == "sort":
            return self.sj.sort(x, axis=-1, **kw)
        if m["op"] == "rank":
            return self.sj.rank(x, axis=-1, descending=False, **kw)
        if m["op"] == "top_k":
            return self.sj.top_k(x, m["k"], axis=-1, **kw)[0]
        return self.sj.quantile(x, m["q"], axis=-1, **kw)

    def calibrate(self, m: dict, rtol: float = 0.005) -> float:
        """The bisection of ``jaxkit.soft.calibrate`` on the same probe: the softness whose
        rank MAE on ``probe<n>`` is ``m["target"]``."""
        ck = (m["method"], m.get("mode"), m["n"])
        if ck in self.cal:
            return self.cal[ck]
        target = m["target"]
        p = jnp.asarray(self.data[f"probe{m['n']}"])
        hard = (jnp.argsort(jnp.argsort(p, axis=-1), axis=-1) + 1).astype(p.dtype)
        mr = {**m, "op": "rank"}
        err = jax.jit(lambda s: jnp.mean(jnp.abs(self.op(mr, p, s) - hard)))

        def f(e):
            return float(err(jnp.asarray(10.0**e, jnp.float32)))

        lo = -3.0
        flo = f(lo)
        while flo > target and lo > -24:
            lo -= 2.0
            flo = f(lo)
        hi, fhi = lo, flo
        while fhi < target and hi < 24:
            lo, flo = hi, fhi
            hi += 1.0
            fhi = f(hi)
        s = None
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            fm = f(mid)
            if abs(fm - target) <= rtol * target or hi - lo < 1e-7:
                s = 10.0**mid
                break
            if fm < target:
                lo = mid
            else:
                hi = mid
        self.cal[ck] = s if s is not None else 10.0 ** (0.5 * (lo + hi))
        return self.cal[ck]

    def build(self, m: dict) -> dict:
        key = m["key"]
        x64 = bool(m.get("x64"))
        if key in self.cells:  # built already (banded cells share the dense anchor)
            call, _, info = self.cells[key]
            with _x64(x64):
                return {**info, "t1": time_block(call, 1)[0][0]}
        with _x64(x64):
            x = jnp.asarray(self.data[m["x_key"]])
            if x64:
                x = x.astype(jnp.float64)
            s = self.calibrate(m) if m["softness"] == "matched" else m["softness"]
            mem, compile_s = None, None
            if m.get("eager"):

                def call():
                    return self.op(m, x, s)

            else:
                W = jnp.asarray(self.data[m["w_key"]]).astype(x.dtype)
                f = jax.value_and_grad(lambda x: jnp.sum(W * self.op(m, x, s)))
                t0 = time.perf_counter()
                compiled = jax.jit(f).lower(x).compile()
                compile_s = time.perf_counter() - t0
                with contextlib.suppress(Exception):
                    a = compiled.memory_analysis()
                    mem = (
                        a.temp_size_in_bytes + a.output_size_in_bytes + a.argument_size_in_bytes
                    ) / 2**20

                def call():
                    return compiled(x)

            out = jax.block_until_ready(call())  # warm-up
            if not all(bool(jnp.all(jnp.isfinite(o))) for o in jax.tree.leaves(out)):
                raise FloatingPointError("non-finite output or gradient")
            t1 = time_block(call, 1)[0][0]
            if m.get("val_path"):
                val = jax.jit(lambda x: self.op(m, x, s))(x)
                np.save(m["val_path"], np.asarray(val))
        info = {"key": key, "t1": t1, "softness": s, "mem": mem, "compile_s": compile_s}
        self.cells[key] = (call, x64, info)
        while len(self.cells) > KEEP:
            self.cells.pop(next(iter(self.cells)))
        return info

    def time(self, m: dict) -> dict:
        call, x64, _ = self.cells[m["key"]]
        with _x64(x64):
            ts, cs = time_block(call, int(m["reps"]))
            return {"key": m["key"], "times": ts, "cpu": cs}

    def handle(self, m: dict) -> dict:
        """One request to one answer; a failing cell answers ``{"key", "error"}``."""
        try:
            if m["cmd"] == "build":
                return self.build(m)
            if m["cmd"] == "time":
                return self.time(m)
            raise ValueError(f"unknown command {m['cmd']!r}")
        except Exception as e:  # noqa: BLE001  (a softjax failure is the cell's note)
            return {"key": m.get("key"), "error": type(e).__name__ + ": " + str(e)[:160]}


def main() -> None:
    proto = sys.stdout
    sys.stdout = sys.stderr  # only protocol lines on the real stdout
    import softjax

    d = Driver(softjax, np.load(sys.argv[1]))
    print(json.dumps({"ready": True}), file=proto, flush=True)
    for line in sys.stdin:
        m = json.loads(line)
        if m.get("cmd") == "quit":
            break
        print(json.dumps(d.handle(m)), file=proto, flush=True)


if __name__ == "__main__":
    main()
