"""Device check for the fused categorical sampler (Pallas vs the jnp reference).

Importable (``rows(interpret=...)`` returns dicts) and runnable:

  python kernels/device_checks/sampling.py             # on a GPU: compiled Pallas
  python kernels/device_checks/sampling.py --interpret # interpret mode, tiny shapes

Prints rows ``kernel | case | max_abs_err | ours_ms | ref_ms | speedup``; ``case``
carries the token agreement (Pallas and reference draw from the same noise, so it
must be 1.0). A case the kernel refuses (NotImplementedError) or that fails to
compile is printed with the error instead of numbers.
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

KERNEL = "sampling"
FILTERS = dict(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02)


def _time_ms(f, *args, repeats=20):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def rows(*, interpret: bool = False) -> list[dict]:
    """One dict per case: kernel, case, max_abs_err, ours_ms, ref_ms, speedup."""
    impl = "pallas_interpret" if interpret else "pallas"
    if interpret:
        shapes = [(8, 64, jnp.float32), (8, 100, jnp.bfloat16)]
        repeats = 2
    else:
        shapes = [
            (256, 4096, jnp.bfloat16),
            (64, 32000, jnp.bfloat16),
            (256, 32000, jnp.bfloat16),
            (4096, 32000, jnp.bfloat16),
            (64, 152064, jnp.bfloat16),
        ]
        repeats = 20
    out = []
    for r, v, dt in shapes:
        x = (3.0 * jax.random.normal(jax.random.key(1), (r, v), jnp.float32)).astype(dt)
        key = jax.random.key(0)
        name = f"{r}x{v} {jnp.dtype(dt).name} T,k,p,min_p"

        def make(impl_):
            return jax.jit(
                lambda a, k: tuple(
                    sampling.sample_tokens(a, key=k, implementation=impl_, **FILTERS)
                )
            )

        try:
            ours_f, ref_f = make(impl), make("xla")
            got, want = ours_f(x, key), ref_f(x, key)
            agree = float(np.mean(np.asarray(got[0]) == np.asarray(want[0])))
            err = max(
                float(jnp.max(jnp.abs(got[i].astype(jnp.float32) - want[i].astype(jnp.float32))))
                for i in (1, 2)
            )
            ours_ms = _time_ms(ours_f, x, key, repeats=repeats)
            ref_ms = _time_ms(ref_f, x, key, repeats=repeats)
            out.append(
                dict(
                    kernel=KERNEL,
                    case=f"{name} tokens_equal={agree:.4f}",
                    max_abs_err=err,
                    ours_ms=ours_ms,
                    ref_ms=ref_ms,
                    speedup=ref_ms / ours_ms,
                )
            )
        except Exception as e:  # noqa: BLE001  (report, keep going)
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            out.append(
                dict(
                    kernel=KERNEL,
                    case=f"{name} FAILED {msg}",
                    max_abs_err=None,
                    ours_ms=None,
                    ref_ms=None,
                    speedup=None,
                )
            )
    return out


def _fmt(v):
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def main() -> None:
    """Write this module's rows for run_device_checks.sh (``--out``) or print them."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interpret", action="store_true", help="interpret mode, tiny shapes")
    p.add_argument("--out", default=None, help="JSON file for the shared table")
    args = p.parse_args()
    got = rows(interpret=args.interpret)
    cols = ("kernel", "case", "max_abs_err", "ours_ms", "ref_ms", "speedup")
    print(" | ".join(cols))
    for row in got:
        print(" | ".join(_fmt(row[c]) for c in cols), flush=True)
    if args.out:
        import _common as C

        shared = []
        for row in got:
            dtype = "bfloat16" if "bfloat16" in row["case"] else "float32"
            tol = 2e-2 if dtype == "bfloat16" else 1e-5
            equal = "tokens_equal=1.0000" in row["case"]
            err = row["max_abs_err"]
            shared.append(
                {
                    "kernel": row["kernel"],
                    "case": row["case"],
                    "dtype": dtype,
                    "mode": "fwd",
                    "err": err,
                    "tol": tol,
                    "ok": bool(err is not None and err <= tol and equal),
                    "times_ms": (
                        {}
                        if row["ours_ms"] is None
                        else {"pallas": row["ours_ms"], "xla": row["ref_ms"]}
                    ),
                }
            )
        C.write_rows(args.out, shared)


if __name__ == "__main__":
    main()
