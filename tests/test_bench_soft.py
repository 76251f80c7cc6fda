"""The soft benches' timing method: ours and softjax in alternating blocks, compile untimed.

``scripts/bench/_interleave.py`` schedules the blocks; ``scripts/bench/_soft_anchor.py`` is
the persistent softjax child. softjax is not needed: the child's :class:`Driver` runs here
in-process on a stand-in module, behind a client that round-trips every request and answer
through JSON as the pipe does.
"""

import json
import types

import jax
import jax.numpy as jnp
import numpy as np

from scripts.bench import _interleave as I
from scripts.bench import _soft_anchor as A

_COMPILES = [0]


def _count(event: str, duration: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count)


class _Fake:
    """A side that takes ``t1`` per probe call and ``call_s`` per timed call."""

    def __init__(self, name, log, t1, call_s):
        self.name, self.log, self.t1, self.call_s = name, log, t1, call_s

    def prepare(self):
        self.log.append((self.name, "prepare", 0))
        return self.t1

    def block(self, reps):
        self.log.append((self.name, "block", reps))
        return [self.call_s] * reps, [self.call_s / 2] * reps


def test_scheduler_alternates_blocks_after_both_prepares():
    log = []
    ours, anchor = _Fake("ours", log, 1e-3, 1.0), _Fake("anchor", log, 0.05, 2.0)
    pair = I.interleave(ours, anchor, repeats=3, min_timed_s=0.2, max_repeats=200, blocks=8)
    assert log[:2] == [("ours", "prepare", 0), ("anchor", "prepare", 0)]
    blocks = log[2:]
    # ours needs 200 calls (0.2 s of 1 ms), the anchor 4 (0.2 s of 50 ms): 4 blocks a side
    assert [b[0] for b in blocks] == ["ours", "anchor"] * 4
    assert [b[2] for b in blocks[0::2]] == [50] * 4
    assert [b[2] for b in blocks[1::2]] == [1] * 4
    assert (pair.ours_s, pair.anchor_s, pair.note) == (1.0, 2.0, "")
    assert (pair.ours_cpu_s, pair.anchor_cpu_s) == (0.5, 1.0)
    # no anchor: ours alone, and the line says why
    log.clear()
    pair = I.interleave(ours, None, repeats=3, note="no softjax")
    assert [b[0] for b in log] == ["ours"] * len(log) and pair.anchor_s is None
    assert pair.note == "no softjax"


class _Client:
    """The pipe to the child, in-process: JSON both ways, each request logged."""

    def __init__(self, driver, log):
        self.driver, self.log = driver, log

    def request(self, msg):
        self.log.append(("anchor", msg["cmd"], _COMPILES[0]))
        out = json.loads(json.dumps(self.driver.handle(json.loads(json.dumps(msg)))))
        self.log.append(("anchor", "done", _COMPILES[0]))
        return out


class _Logged(I.OursSide):
    def __init__(self, log, *a):
        super().__init__(*a)
        self.log = log

    def prepare(self):
        self.log.append(("ours", "prepare", _COMPILES[0]))
        out = super().prepare()
        self.log.append(("ours", "done", _COMPILES[0]))
        return out

    def block(self, reps):
        self.log.append(("ours", "block", _COMPILES[0]))
        out = super().block(reps)
        self.log.append(("ours", "done", _COMPILES[0]))
        return out


def test_both_sides_compile_only_before_their_timed_blocks(tmp_path):
    rng = np.random.default_rng(0)
    data = {"x5": rng.standard_normal((3, 5)).astype(np.float32)}
    data["w_sort_5"] = rng.standard_normal((3, 5)).astype(np.float32)
    sj = types.SimpleNamespace(sort=lambda x, axis, softness, method: jnp.sort(x, axis) * softness)
    log = []
    child = _Client(A.Driver(sj, data), log)
    req = {"key": "k", "op": "sort", "method": "m", "x_key": "x5", "w_key": "w_sort_5"}
    req |= {"softness": 0.5, "val_path": str(tmp_path / "v.npy")}
    anchor = I.ChildSide(child, req)
    x, w = jnp.asarray(data["x5"]), jnp.asarray(data["w_sort_5"])
    ours = _Logged(log, jax.value_and_grad(lambda x: jnp.sum(w * jnp.sort(x, -1) * 0.5)), x)
    pair = I.interleave(ours, anchor, repeats=3, min_timed_s=0.0, blocks=8)
    steps = [(side, what) for side, what, _ in log[0::2]]
    assert steps[:2] == [("ours", "prepare"), ("anchor", "build")]
    assert steps[2:] == [("ours", "block"), ("anchor", "time")] * 3
    compiled = [end[2] - start[2] for start, end in zip(log[0::2], log[1::2], strict=True)]
    assert compiled[0] >= 1 and compiled[1] >= 1, "each side compiles when prepared"
    assert not any(compiled[2:]), f"a timed block compiled: {log}"
    assert len(pair.ours_times) == len(pair.anchor_times) == 3
    assert ours.compile_s is not None and anchor.info["compile_s"] is not None
    np.testing.assert_allclose(np.load(req["val_path"]), np.sort(data["x5"], -1) * 0.5)
    # a failing anchor cell: ours still timed, the note is softjax's error
    bad = I.ChildSide(child, {**req, "key": "bad", "op": "rank"})
    pair = I.interleave(_Fake("ours", [], 1.0, 1.0), bad, repeats=2, min_timed_s=0.0)
    assert pair.anchor_s is None and pair.note.startswith("softjax: AttributeError")
