"""Device check of the fused categorical sampler: Pallas kernel, XLA path, sort reference.

Importable (``rows(interpret=...)`` returns dicts) and runnable:

  python kernels/device_checks/sampling.py             # on a GPU: compiled Pallas (Triton)
  python kernels/device_checks/sampling.py --interpret # interpret mode, tiny shapes

Three implementations draw from the same noise (``jax.random.gumbel(key, (R, V))``), so
their tokens must agree exactly: ``implementation="pallas"`` (the kernel), ``"xla"`` (the
sort-free bisection on the whole array: what ``"auto"`` gives GPU users today) and the
sort-based spec ``sample_rows_reference``. Each row carries ``pallas_ms``, ``xla_ms``,
``sort_ms`` (median of ``repeats``), the kernel's lower+compile time ``compile_s``, and the
token agreement of the kernel and of the XLA path with the sort reference (1.0 each).

Cases small to large, in phases, so that one slow Triton compile cannot eat the rows of
the others: first the XLA path and the sort reference of every case, then the kernel's
compile and timing, case by case; then, with budget left, a few other Triton warp counts
(``WARP_VARIANTS``, rows ``... warps=N``: tuning information). Rows are written after each
step; a kernel case still compiling when the budget (``DEVICE_CHECK_BUDGET_S``) kills the
module keeps its row with "pallas compile did not finish" (so a hung compile shows as
such), and no kernel compile starts with less than ``COMPILE_MARGIN_S`` of the budget
left. A vocabulary the kernel refuses (``NotImplementedError``: more than 65 536 padded
columns) is reported as refused (``"auto"`` takes the XLA path there), with the XLA-path
figures.
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("EQX_ON_ERROR", "nan")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxkit.kernels import sampling  # noqa: E402
from jaxkit.kernels.sampling import _pallas  # noqa: E402

KERNEL = "sampling"
FILTERS = dict(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02)
COMPILE_MARGIN_S = 12.0
GPU_SHAPES = [
    (64, 4096, jnp.bfloat16),
    (256, 4096, jnp.bfloat16),
    (64, 32000, jnp.bfloat16),
    (256, 32000, jnp.bfloat16),
    (4096, 32000, jnp.bfloat16),
    (64, 152064, jnp.bfloat16),  # refused by the kernel: the XLA path's figures
    (1, 32000, jnp.bfloat16),  # one row: a batch-1 decode step
    (256, 32000, jnp.float32),
]
# phase 3 (tuning, only with budget left): other warp counts on these cases (GPU_SHAPES
# indices; the default is about 16 elements a thread: 8 warps at V = 4096, 32 at V = 32000;
# on the H200 the warp count moved the time less than run-to-run spread)
WARP_VARIANTS = [(3, 16), (1, 4)]


def _time_ms(f, *args, repeats=20):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def _api(impl):
    return jax.jit(
        lambda a, k: tuple(sampling.sample_tokens(a, key=k, implementation=impl, **FILTERS))
    )


def _sort_reference(a, k):
    """The spec on the noise ``sample_tokens`` draws (threefry, partitionable layout)."""
    r, v = a.shape
    cd = jnp.float32 if a.dtype != jnp.float64 else jnp.float64
    g = jax.random.gumbel(k, (r, v), cd)
    return tuple(sampling.sample_rows_reference(a, g, *_per_row(r, cd)))


def _per_row(r, cd):
    """FILTERS as the per-row (t, k, p, mp) arrays."""
    dts = (cd, jnp.int32, cd, cd)
    return [jnp.full((r,), FILTERS[n], d) for n, d in zip(FILTERS, dts, strict=True)]


def _agree(got, want) -> tuple[float, float]:
    """(token agreement, max |prob/entropy difference|)."""
    agree = float(np.mean(np.asarray(got[0]) == np.asarray(want[0])))
    err = max(
        float(jnp.max(jnp.abs(got[i].astype(jnp.float32) - want[i].astype(jnp.float32))))
        for i in (1, 2)
    )
    return agree, err


def _case(r, v, dt):
    return f"{r}x{v} {jnp.dtype(dt).name} T,k,p,min_p"


def rows(*, interpret: bool = False, emit=None, deadline: float = float("inf")) -> list[dict]:
    """One dict per case: kernel, case, max_abs_err, pallas_ms, xla_ms, sort_ms, ... .

    ``emit(rows)`` is called after each step (the caller writes them); ``deadline`` is the
    ``time.monotonic()`` after which no kernel compile starts.
    """
    impl = "pallas_interpret" if interpret else "pallas"
    if interpret:
        shapes, repeats = [(8, 64, jnp.float32), (8, 100, jnp.bfloat16)], 2
    else:
        shapes, repeats = GPU_SHAPES, 20
    emit = emit or (lambda _: None)
    key = jax.random.key(0)
    out, inputs = [], []
    # phase 1: the XLA path and the sort reference, every case
    for r, v, dt in shapes:
        x = (3.0 * jax.random.normal(jax.random.key(1), (r, v), jnp.float32)).astype(dt)
        row = dict(kernel=KERNEL, case=_case(r, v, dt), dtype=jnp.dtype(dt).name)
        try:
            xla_f, sort_f = _api("xla"), jax.jit(_sort_reference)
            want = sort_f(x, key)
            row["xla_agree"], row["xla_err"] = _agree(xla_f(x, key), want)
            row["xla_ms"] = _time_ms(xla_f, x, key, repeats=repeats)
            row["sort_ms"] = _time_ms(sort_f, x, key, repeats=repeats)
            row["status"] = "pallas compile did not finish (killed by the budget?)"
            inputs.append((x, want))
        except Exception as e:  # noqa: BLE001  (report, keep going)
            row["status"] = f"FAILED reference {type(e).__name__}: {str(e).splitlines()[0][:100]}"
            inputs.append(None)
        out.append(row)
        emit(out)
    # phase 2: the kernel, small to large
    for row, got_in in zip(out, inputs, strict=True):
        if got_in is None:
            continue
        if time.monotonic() > deadline:
            row["status"] = "pallas not started: time budget spent"
            emit(out)
            continue
        x, want = got_in
        try:
            f = _api(impl)
            t0 = time.perf_counter()
            compiled = f.lower(x, key).compile()
            row["compile_s"] = time.perf_counter() - t0
            row["status"] = "pallas compiled; its run did not finish (killed by the budget?)"
            emit(out)
            row["pallas_agree"], row["pallas_err"] = _agree(compiled(x, key), want)
            row["pallas_ms"] = _time_ms(compiled, x, key, repeats=repeats)
            row["status"] = "ok"
        except NotImplementedError as e:
            row["status"] = f"pallas refused ({str(e).splitlines()[0][:90]}): auto takes xla"
        except Exception as e:  # noqa: BLE001  (report, keep going)
            row["status"] = f"pallas FAILED {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        emit(out)
    # phase 3: Triton's warps per program, on cases whose default compiled and agreed
    variants = [(0, None)] if interpret else WARP_VARIANTS
    for i, warps in variants:
        if i >= len(out) or out[i].get("pallas_agree") != 1.0 or time.monotonic() > deadline:
            continue
        x, want = inputs[i]
        row = dict(out[i], case=f"{out[i]['case']} warps={warps}")
        for k_ in ("pallas_agree", "pallas_err", "pallas_ms", "compile_s"):
            row.pop(k_, None)
        row["status"] = "pallas compile did not finish (killed by the budget?)"
        out.append(row)
        emit(out)
        try:
            f = jax.jit(
                lambda a, kd, *rows_, w=warps: tuple(
                    _pallas.sample_rows_pallas(a, kd, *rows_, interpret=interpret, num_warps=w)
                )
            )
            args_ = (x, jax.random.key_data(key), *_per_row(x.shape[0], jnp.float32))
            t0 = time.perf_counter()
            compiled = f.lower(*args_).compile()
            row["compile_s"] = time.perf_counter() - t0
            got = compiled(*args_)
            got = (got[0], got[1].astype(x.dtype), got[2].astype(x.dtype))  # as sample_tokens
            row["pallas_agree"], row["pallas_err"] = _agree(got, want)
            row["pallas_ms"] = _time_ms(compiled, *args_, repeats=repeats)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001  (report, keep going)
            row["status"] = f"pallas FAILED {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        emit(out)
    return out


def shared_row(row: dict) -> dict:
    """The row in the shared table's format (``_common``): ok when every number agrees."""
    dtype = row["dtype"]
    tol = 2e-2 if dtype == "bfloat16" else 1e-5
    errs = [row[k] for k in ("xla_err", "pallas_err") if k in row]
    refused = row["status"].startswith("pallas refused")
    ok = (
        "xla_agree" in row
        and row["xla_agree"] == 1.0
        and (row.get("pallas_agree") == 1.0 or refused)
        and all(e <= tol for e in errs)
    )
    agree = " ".join(f"{k}={row[k]:.4f}" for k in ("pallas_agree", "xla_agree") if k in row)
    times = {
        name: row[k]
        for name, k in (("pallas", "pallas_ms"), ("xla", "xla_ms"), ("sort", "sort_ms"))
        if k in row
    }
    extra = {}
    if "compile_s" in row:
        extra["compile_s"] = row["compile_s"]
    if "pallas_ms" in row:
        extra["xla/pallas"] = row["xla_ms"] / row["pallas_ms"]
    if "xla_ms" in row:
        extra["sort/xla"] = row["sort_ms"] / row["xla_ms"]
    status = "" if row["status"] == "ok" else f" {row['status']}"
    return {
        "kernel": row["kernel"],
        "case": f"{row['case']} {agree}{status}",
        "dtype": dtype,
        "mode": "fwd",
        "err": max(errs) if errs else None,
        "tol": tol,
        "ok": bool(ok),
        "times_ms": times,
        "extra": extra,
    }


def main() -> None:
    """Write this module's rows for run_device_checks.sh (``--out``) or print them."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interpret", action="store_true", help="interpret mode, tiny shapes")
    p.add_argument("--out", default=None, help="JSON file for the shared table")
    args = p.parse_args()
    import _common as C

    def emit(rs):
        if args.out:
            C.write_rows(args.out, [shared_row(r) for r in rs])

    got = rows(interpret=args.interpret, emit=emit, deadline=C.deadline(margin_s=COMPILE_MARGIN_S))
    for row in got:
        print(shared_row(row), flush=True)


if __name__ == "__main__":
    main()
