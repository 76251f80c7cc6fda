"""Shared pytest set-up: 8 fake CPU devices, strict promotion, a `key` fixture.

The jaxtyping+beartype import hook is switched on by `--jaxtyping-packages` in
pyproject's addopts, so every annotated jaxkit function is checked at call time.
"""

import atexit
import gc
import json
import os
import sys
import time

os.environ.setdefault("EQX_ON_ERROR", "raise")

# The suite is compile-bound: most tests run tiny shapes, so XLA's CPU back end, not the
# programs, takes most of the time. Tests compile with the back end's optimisation off and
# with XLA's older (elemental) fusion emitters in one codegen unit instead of the MLIR fusion
# emitters split for parallel codegen (measured: the first two flags cut 37% of the CPU time of
# tests/nn + tests/decoding; the last two cut backend compile CPU by a further ~4x on a soft /
# nn sample, and tests/soft/test_soft.py + test_parity.py from 50 to 22 s CPU). The HLO after
# XLA's optimisation passes, and so what every program computes, is the same; only how
# fusions become machine code differs. Benches and examples (outside pytest) keep XLA's
# defaults, and so does the second pass of `make test-slow` (JAXKIT_TEST_XLA_DEFAULTS=1),
# which runs the tests marked `xla_defaults`: the examples end to end and the float32 OT
# solver checks (see tests/README.md).
TEST_XLA_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1"
)
if not os.environ.get("JAXKIT_TEST_XLA_DEFAULTS"):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()

import hypothesis as hp  # noqa: E402
import jax  # noqa: E402
import pytest  # noqa: E402
from jax._src import traceback_util  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

hp.settings.register_profile(
    "jaxkit", database=None, derandomize=True, deadline=None, max_examples=30
)
hp.settings.load_profile("jaxkit")


# Python's cyclic garbage collector took ~9-10% of a worker's CPU (perf, tests/nn and
# tests/soft): every young collection walks the objects allocated since the last, and
# tracing and lowering allocate millions of short-lived containers, while the older
# generations hold every cached jaxpr and program. The young generation's threshold is
# raised from 700 to 10 000 allocations (fewer, larger young collections; the older
# generations keep their ratios), and what exists once the tests are collected (modules,
# test items, jax's own tables: all alive until the worker exits) is frozen out of every
# later collection. Reference counting still frees everything acyclic at once; cycles wait a
# little longer.
GC_THRESHOLD = (10_000, 10, 10)
gc.set_threshold(*GC_THRESHOLD)


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()


# Every compiled program stays in jax's caches (and in the process's memory maps) for the
# life of a worker. The slow tier compiles thousands of programs per worker, which reached the
# kernel's map limit (vm.max_map_count, 65530 by default) and crashed a worker inside XLA's
# compiler. Past MAP_SOFT_LIMIT maps, the caches are cleared between tests (cheap: a later
# test only recompiles what it uses).
MAP_SOFT_LIMIT = 40_000


def _map_count() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:  # not Linux: nothing to bound
        return 0


# Reading /proc/self/maps costs about 1 us per line (~20 ms of CPU at 25k maps), so it is
# read only after enough compilations to matter: each compiled program adds about 3-4 maps,
# and MAP_CHECK_COMPILES of them stay far below the headroom to the kernel's limit.
MAP_CHECK_COMPILES = 400
_COMPILES_SINCE_CHECK = [MAP_CHECK_COMPILES]


def _count_compile(event: str, duration: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES_SINCE_CHECK[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)


# Every traced `eqx.error_if` (jaxkit's `_validate.error_if` guards) walks the whole Python
# stack and asks jax's `traceback_util.include_frame` about each frame: ~35 excluded paths,
# each an `abspath` + `commonpath` + `os.path.samefile` (two `stat` calls). Under pytest the
# stack is ~60-100 frames deep, so each guard cost thousands of `stat` calls (cProfile of
# tests/soft: 3.5k frames, 120k `samefile`, ~4% of the run). The answer depends only on the
# file name and the exclusion list, so it is memoised per (name, length of the list): a path
# registered later still counts. Same frames kept, same error messages.
_include_filename = getattr(traceback_util, "include_filename", None)
_INCLUDE_CACHE: dict[tuple[str, int], bool] = {}


def _include_filename_cached(filename: str) -> bool:
    key = (filename, len(traceback_util._exclude_paths))
    hit = _INCLUDE_CACHE.get(key)
    if hit is None:
        hit = _INCLUDE_CACHE[key] = _include_filename(filename)
    return hit


# A private jax function (jax is pinned in constraints.txt): if a later jax moves it, the
# suite runs unpatched instead of failing.
if _include_filename is not None and hasattr(traceback_util, "_exclude_paths"):
    traceback_util.include_filename = _include_filename_cached


@pytest.fixture(autouse=True)
def _bound_compiled_code():
    yield
    if _COMPILES_SINCE_CHECK[0] < MAP_CHECK_COMPILES:
        return
    _COMPILES_SINCE_CHECK[0] = 0
    if _map_count() > MAP_SOFT_LIMIT:
        jax.clear_caches()
        gc.collect()


# An xdist worker's last act was jax's own exit handler (`jax._src.api.clean_up`: clear every
# cache, destroy the CPU client), which frees the thousands of programs the worker compiled
# one by one: past xdist's 10 s exit timeout in a full `make test` (the controller then kills
# the worker, and the run's wall time has 10 s of nothing at its end). By the time a worker's
# interpreter exits, its results are with the controller and its channel is closed, so the
# worker leaves at once (the operating system frees its memory) instead.
def _leave_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# At the end of a worker's session pytest's unraisable-exception plugin runs a full
# `gc.collect()` twice (its unconfigure hook and its clean-up; to report exceptions raised in
# `__del__` of garbage cycles). By then a worker's heap holds every program traced and compiled
# since collection (millions of objects), and the two collections took ~1.5 and ~1.8 s in
# which the controller waited for the worker (wave 27: `faulthandler` stacks and hook
# timestamps of a full run). A worker freezes what it holds once its fixtures are torn down
# (the run's periodic full collections have examined all but the newest garbage), so those
# collections scan only what is created after.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        atexit.register(_leave_now)  # registered last: runs first, before jax's clean-up


# A failure inside jax's lowering or compilation chains exceptions whose messages print whole
# jaxprs (a cache's KeyError keyed by the program): wave 40's CI log kept the start of such a
# report and cut the rest, the exception that failed the test with it. A failure report longer
# than REPORT_MAX characters keeps its first REPORT_HEAD and its last REPORT_TAIL, which hold
# the test's own lines and the last exception raised.
REPORT_MAX, REPORT_HEAD, REPORT_TAIL = 20_000, 4_000, 12_000


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.longrepr is not None:
        text = str(report.longrepr)
        if len(text) > REPORT_MAX:
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
            cut = len(text) - REPORT_HEAD - REPORT_TAIL
            report.longrepr = (  # the first line is the short summary's: the failing exception
                f"{crash[:300]}\n{text[:REPORT_HEAD]}\n[... {cut} characters of this failure "
                f"report cut by tests/conftest.py (REPORT_MAX) ...]\n{text[-REPORT_TAIL:]}"
            )


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture(scope="session")
def mesh8():
    """An explicit 1-D mesh of the 8 fake devices, axis ``data``."""
    return jax.make_mesh((8,), ("data",))


# ------------------------------------------------------------------ per-area totals
# `make test` ends with one line per area (seconds of test time summed over workers), so
# anyone can see which area grew. Budgets are in tests/README.md.
_AREA_SECONDS: dict[str, float] = {}
_AREA_COUNTS: dict[str, int] = {}


# Each example counts in the budget of the area whose method it shows (issue 13: a new area's
# <= 2 min of `make test-slow` includes its examples' slow tests); `examples.<area>` lines.
_EXAMPLE_AREAS = {
    "adlift_toy": "splat", "credal_diabetes": "robust", "credal_groups": "robust",
    "credal_newsvendor": "robust", "dlmr_toy_grid": "memory", "engram_digits": "editing",
    "facrnn_lorenz_thomas": "neuro", "featjnd_digits": "vision.featjnd",
    "gumbel_sinkhorn_sort": "soft", "hobit_synthetic": "data", "hypospace_collapse": "hypospace",
    "irstd_synthetic": "vision.irdet", "mts_digits": "data", "nn_cached_decoding": "nn",
    "prism_digits": "privacy", "private_parallel_lm": "privacy", "pst_synthetic": "retrieval",
    "recm_digits_c4": "equivariance", "recm_e3nn_gravity": "equivariance",
    "recm_gap_tracking": "equivariance", "sampling_demo": "kernels", "sharded_ridge": "core",
    "soft_digits": "soft", "svgt_toy_safety": "steering", "td3b_toy_peptides": "diffusion",
    "tess_semisynthetic": "timeseries", "train_pod": "nn", "wbmm_digits": "vision",
    "wedlm_counting": "decoding",
}  # fmt: skip


def _example_area(path: str, rest: str) -> str:
    """``examples.<area>`` of a test in tests/examples (test_examples.py or test_<stem>.py)."""
    stem = path.rsplit("/", 1)[-1].removeprefix("test_").removesuffix(".py")
    if stem == "examples":  # test_example[<stem>]
        stem = rest.split("[", 1)[1].rstrip("]") if "[" in rest else ""
    if stem not in _EXAMPLE_AREAS:
        raise KeyError(f"tests/conftest.py: add example {stem!r} to _EXAMPLE_AREAS")
    return f"examples.{_EXAMPLE_AREAS[stem]}"


def _area(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    parts = path.split("/")
    if parts[:2] == ["tests", "examples"] and len(parts) > 2 and "::" in nodeid:
        return _example_area(path, rest)
    if len(parts) > 2:  # tests/<area>/test_x.py, jaxkit/<area>/x.py (doctests)
        area = {"kernels_sampling": "kernels", "pod": "nn"}.get(parts[1], parts[1])
    elif parts[-1] == "test_conformance.py" and "[" in rest:  # t[soft.x-jit]
        area = rest.split("[", 1)[1].split(".", 1)[0].split("/", 1)[0].split("-", 1)[0]
    elif parts[-1] == "test_keywords.py" and "[jaxkit." in rest:  # t[jaxkit.soft.sort]
        area = rest.split("[jaxkit.", 1)[1].split(".", 1)[0]
    elif parts[-1] == "test_docs.py":
        return "docs"
    else:
        return "core"
    if area == "vision":  # FeatJND and IR detection came after Foundation III: their own lines
        for sub in ("featjnd", "irdet"):
            if sub in nodeid:
                return f"vision.{sub}"
    return area


# The areas that existed at Foundation III (issue 13: `make test` <= 5 min for these; each
# area added since has its own <= 25 s, i.e. <= 50 s summed over the two workers).
_FOUNDATION = {
    "core", "soft", "nn", "io", "interop", "decoding", "kernels", "privacy", "equivariance",
    "vision",
}  # fmt: skip
_T0 = time.monotonic()


def pytest_runtest_logreport(report):
    area = _area(report.nodeid)
    _AREA_SECONDS[area] = _AREA_SECONDS.get(area, 0.0) + report.duration
    if report.when == "call":
        _AREA_COUNTS[area] = _AREA_COUNTS.get(area, 0) + 1


def _base(area: str) -> str:
    return area.removeprefix("examples.")  # an example's area; vision.irdet stays itself


# `make test-slow` runs two passes (two processes): the first saves its per-area seconds in
# a git-ignored file (pytest's cache is off), the second adds them up against the slow budgets
# of tests/README.md.
_SLOW_PASSES = ("slow and not xla_defaults", "slow and xla_defaults")
_SLOW_FILE = ".test-slow-pass1.json"


def _slow_budget_lines(both: dict[str, float]) -> list[str]:
    """One line per budget of `make test-slow` (tests/README.md), from both passes' seconds."""
    lines = []
    pool = sum(v for k, v in both.items() if k.startswith("examples.") and _base(k) in _FOUNDATION)
    lines.append(f"examples of Foundation III areas (together)  {pool:7.1f} s  budget 450")
    areas: dict[str, float] = {}
    for k, v in both.items():
        if k.startswith("examples.") and _base(k) in _FOUNDATION:
            continue  # counted in the pool above
        name = k.removeprefix("examples.")  # a new area's examples count in its own budget
        areas[name] = areas.get(name, 0.0) + v
    for name, secs in sorted(areas.items(), key=lambda kv: -kv[1]):
        budget = 900 if name == "soft" else 120
        own = f"examples.{name}" in both and name not in _FOUNDATION  # else in the pool
        what = "tests + examples" if own else "tests"
        flag = "" if secs <= budget else "  OVER"
        lines.append(f"{name:14s} {what:16s} {secs:7.1f} s  budget {budget}{flag}")
    return lines


def pytest_terminal_summary(terminalreporter):
    if not _AREA_SECONDS:
        return
    tr = terminalreporter
    tr.write_sep("-", "per-area test time (s, summed over workers; budgets: tests/README.md)")
    for area, secs in sorted(_AREA_SECONDS.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"{area:22s} {secs:8.1f} s  {_AREA_COUNTS.get(area, 0):5d} tests")
    old = sum(v for k, v in _AREA_SECONDS.items() if _base(k) in _FOUNDATION)
    new = sum(v for k, v in _AREA_SECONDS.items() if _base(k) not in _FOUNDATION)
    wall = time.monotonic() - _T0
    tr.write_line(
        f"Foundation III areas {old:.1f} s, areas added since {new:.1f} s (summed); of this "
        f"run's {wall:.0f} s wall, the Foundation III share is {wall * old / (old + new):.0f} s"
    )
    markexpr = tr.config.getoption("markexpr", "")
    if markexpr not in _SLOW_PASSES:
        return
    saved = tr.config.rootpath / _SLOW_FILE
    if markexpr == _SLOW_PASSES[0]:
        saved.write_text(json.dumps({"seconds": _AREA_SECONDS, "time": time.time()}))
        return
    if not saved.exists():
        tr.write_line(f"make test-slow budgets: no first pass saved ({_SLOW_FILE}), not summed")
        return
    first = json.loads(saved.read_text())
    both = dict(first["seconds"])
    for k, v in _AREA_SECONDS.items():
        both[k] = both.get(k, 0.0) + v
    age = (time.time() - first["time"]) / 60
    tr.write_sep("-", f"make test-slow, both passes (first pass {age:.0f} min ago), per budget")
    for line in _slow_budget_lines(both):
        tr.write_line(line)
