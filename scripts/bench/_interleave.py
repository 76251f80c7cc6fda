"""Interleaved timing of ours (this process) against softjax in a persistent child process.

The soft benches' anchor, softjax, needs Python >= 3.12, so it runs in a child
(``scripts/bench/_soft_anchor.py``, started once per bench run and kept). Each cell is
timed by :func:`interleave`:

1. both sides are prepared: ours AOT-compiled in this process, the anchor compiled in the
   child (each followed by one warm-up call and one probe call); no compile is timed;
2. each side's number of timed calls is ``repeats``, raised for a fast call so that its calls
   add up to at least ``min_timed_s`` (at most ``max_repeats``);
3. the calls are split into at most ``blocks`` blocks per side and run as ours block,
   anchor block, ours block, anchor block, ..., so a slow drift of the shared machine
   (thermal, other load) falls on both sides alike;
4. each side's time is the median over all its timed calls (every block's); the median
   process CPU time per call (all threads) comes with it, a check that does not count the
   time a busy machine keeps a side waiting.

Before this (up to wave 19) all our cells ran in one stretch and all softjax cells in another,
and a cell's ratio could read 0.84x (top_k/softsort, n=100) where a same-process comparison,
alternating per call, read 1.03-1.15x (wave 20; 1.3-1.4x in wave 19); interleaved, idle, 3 runs:
1.24x.
"""

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, NamedTuple, Protocol

import jax

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _harness as H  # noqa: E402
from _soft_anchor import time_block  # noqa: E402

DRIVER = os.path.join(HERE, "_soft_anchor.py")
MIN_TIMED_S = 0.2
MAX_REPEATS = 200
BLOCKS = 8
NO_PYTHON = "softjax interpreter not given (--softjax-python / SOFTJAX_PYTHON)"


class AnchorError(RuntimeError):
    """The anchor could not build or time a cell (the message is the line's note)."""


class Side(Protocol):
    def prepare(self) -> float: ...  # compile + warm-up; returns one probe call's seconds

    # wall and CPU seconds of ``reps`` timed calls
    def block(self, reps: int) -> tuple[list[float], list[float]]: ...


class Pair(NamedTuple):
    ours_s: float
    anchor_s: float | None
    note: str  # why the anchor has no time ("" when it has one)
    ours_times: list[float]
    anchor_times: list[float]
    ours_cpu_s: float  # median process CPU seconds per call (all threads)
    anchor_cpu_s: float | None


def n_calls(t1: float, repeats: int, min_timed_s: float, max_repeats: int) -> int:
    """``repeats``, raised so that calls of ``t1`` seconds add up to ``min_timed_s``."""
    return int(max(repeats, min(max_repeats, math.ceil(min_timed_s / max(t1, 1e-9)))))


def split(total: int, blocks: int) -> list[int]:
    """``total`` calls in ``blocks`` blocks as even as possible (larger ones first)."""
    q, r = divmod(total, blocks)
    return [q + (i < r) for i in range(blocks)]


def interleave(
    ours: Side,
    anchor: Side | None,
    *,
    repeats: int,
    blocks: int = BLOCKS,
    min_timed_s: float = MIN_TIMED_S,
    max_repeats: int = MAX_REPEATS,
    note: str = "",
) -> Pair:
    """Time ``ours`` and ``anchor`` in alternating blocks (module docstring); ``anchor=None``
    or an anchor that fails times ours alone and says why in ``note``."""
    t_ours = ours.prepare()
    t_anchor = None
    if anchor is not None:
        try:
            t_anchor = anchor.prepare()
        except AnchorError as e:
            anchor, note = None, str(e)
    n_o = n_calls(t_ours, repeats, min_timed_s, max_repeats)
    n_a = n_calls(t_anchor, repeats, min_timed_s, max_repeats) if anchor is not None else 1
    nb = max(1, min(blocks, n_o, n_a))
    sizes_o, sizes_a = split(n_o, nb), split(n_a, nb)
    ts_o, cs_o, ts_a, cs_a = [], [], [], []
    for b in range(nb):
        t, c = ours.block(sizes_o[b])
        ts_o, cs_o = ts_o + t, cs_o + c
        if anchor is not None:
            try:
                t, c = anchor.block(sizes_a[b])
                ts_a, cs_a = ts_a + t, cs_a + c
            except AnchorError as e:
                anchor, note, ts_a, cs_a = None, str(e), [], []
    ok = anchor is not None and bool(ts_a)
    med = statistics.median
    return Pair(
        med(ts_o),
        med(ts_a) if ok else None,
        "" if ok else note,
        ts_o,
        ts_a,
        med(cs_o),
        med(cs_a) if ok else None,
    )


class OursSide:
    """Our side: ``fn(*args)`` AOT-compiled (``compile_s``, ``mem_mb``; ``jit=False``: called
    as is, e.g. an eager call), one warm-up call (``output``), then timed blocks."""

    def __init__(self, fn: Any, *args: Any, jit: bool = True):
        self.fn, self.args, self.jit = fn, args, jit
        self.call, self.compile_s, self.mem_mb, self.output = fn, None, None, None

    def prepare(self) -> float:
        if self.jit:
            t0 = time.perf_counter()
            self.call = jax.jit(self.fn).lower(*self.args).compile()
            self.compile_s = time.perf_counter() - t0
            self.mem_mb = H._compiled_mem_mb(self.call)
        self.output = jax.block_until_ready(self.call(*self.args))
        return time_block(lambda: self.call(*self.args), 1)[0][0]

    def block(self, reps: int) -> tuple[list[float], list[float]]:
        return time_block(lambda: self.call(*self.args), reps)


class ChildSide:
    """The anchor's side: one cell of the persistent child (``build`` then ``time``)."""

    def __init__(self, child: "AnchorChild", request: dict[str, Any]):
        self.child, self.request, self.info = child, request, {}

    def prepare(self) -> float:
        self.info = self.child.request({"cmd": "build", **self.request})
        if "error" in self.info:
            raise AnchorError("softjax: " + self.info["error"])
        return self.info["t1"]

    def block(self, reps: int) -> tuple[list[float], list[float]]:
        r = self.child.request({"cmd": "time", "key": self.request["key"], "reps": reps})
        if "error" in r:
            raise AnchorError("softjax: " + r["error"])
        return r["times"], r["cpu"]


class AnchorChild:
    """The persistent child ``<python> _soft_anchor.py <inputs.npz>``, started on the first
    request (CPU only, XLA's default flags) and restarted after it dies; its stderr goes to
    a temporary file (the tail is the note of a cell that killed it)."""

    def __init__(self, python: str, data_path: str):
        self.python, self.data_path = python, data_path
        self.proc: subprocess.Popen | None = None
        self.failed = ""  # the child could not start: every request says why

    def _tail(self) -> str:
        self.err.seek(0)
        return self.err.read()[-200:]

    def _start(self) -> None:
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env.pop("XLA_FLAGS", None)
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [self.python, DRIVER, self.data_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            env=env,
        )
        if not self.proc.stdout.readline():
            self.failed = "softjax subprocess failed: " + self._tail()
            self.close()

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.failed:
            raise AnchorError(self.failed)
        if self.proc is None:
            self._start()
            if self.failed:
                raise AnchorError(self.failed)
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            why = "softjax subprocess died: " + self._tail()
            self.close()
            raise AnchorError(why)
        return json.loads(line)

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> "AnchorChild":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
