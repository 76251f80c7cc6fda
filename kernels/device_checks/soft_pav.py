"""Device check of soft sort / rank by permutahedron projection (PAV) at n = 1e4 - 1e5:
forward + backward time of ``jaxkit.soft.sort`` / ``rank`` (``method="pav"``, the default
``solver="hybrid"``) against a hard ``jnp.sort`` / rank baseline of the same rows.

Rows: batch 64 (16 at n = 1e5), float32, standard normal rows, softness 0.1 (softjax's
default) and 1.0 (heavy pooling: the regime where the pooling phase dominates). ``err``
checks the timed solver against ``solver="sequential"`` (the one-block-at-a-time PAV,
the same projection) on the first row, values and gradients (relative to the largest
entry). ``times_ms``: ``pav`` (soft, fwd+bwd) and ``hard_sort`` (fwd+bwd of
``jnp.sort`` values, or of the hard rank's float cast, which has no gradient path: an
argsort and a scatter); ``extra.slowdown`` = pav / hard_sort.
``--interpret``: a CPU dry run (n = 64, batch 2); its timings mean nothing. Rows are
written after each case; the module stops starting cases when its time budget
(``DEVICE_CHECK_BUDGET_S``) is nearly spent.
"""

import _common as C  # noqa: I001

import time

import jax
import jax.numpy as jnp

from jaxkit import soft

KERNEL = "soft_pav"
TOL = 1e-4


def _soft(op, softness, solver="hybrid"):
    f = soft.sort if op == "sort" else soft.rank
    return lambda x: f(x, softness=softness, method="pav", solver=solver)


def _hard(op):
    if op == "sort":
        return jnp.sort
    return lambda x: jnp.argsort(jnp.argsort(x, axis=-1), axis=-1).astype(x.dtype) + 1


def _fwdbwd(f, g):
    return jax.value_and_grad(lambda x: jnp.sum(f(x) * g))


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    deadline = C.deadline()
    if args.interpret:
        plan = [("sort", 64, 2, 0.1), ("rank", 64, 2, 1.0)]
        repeats = 2
    else:
        plan = [
            ("sort", 10_000, 64, 0.1),
            ("rank", 10_000, 64, 0.1),
            ("sort", 10_000, 64, 1.0),
            ("rank", 10_000, 64, 1.0),
            ("sort", 100_000, 16, 0.1),
            ("rank", 100_000, 16, 0.1),
            ("sort", 100_000, 16, 1.0),
            ("rank", 100_000, 16, 1.0),
        ]
        repeats = args.repeats
    rows: list[dict] = []
    for op, n, batch, softness in plan:
        if time.monotonic() > deadline:
            print(f"time budget spent: skipping {op} n={n} softness={softness}", flush=True)
            continue
        case = f"{op} n={n} b{batch} softness={softness:g}"
        try:
            kx, kg = jax.random.split(jax.random.key(n + int(10 * softness)))
            x = jax.random.normal(kx, (batch, n), jnp.float32)
            g = jax.random.normal(kg, (batch, n), jnp.float32)
            ours = _fwdbwd(_soft(op, softness), g)
            _, grad = jax.jit(ours)(x)
            want = jax.jit(_fwdbwd(_soft(op, softness, "sequential"), g[:1]))(x[:1])
            # the loss sums over the batch: compare the first row's gradient and values
            err = max(
                C.rel_err(grad[:1], want[1]),
                C.rel_err(_soft(op, softness)(x[:1]), _soft(op, softness, "sequential")(x[:1])),
            )
            t_pav = C.time_ms(ours, x, repeats=repeats)
            t_hard = C.time_ms(_fwdbwd(_hard(op), g), x, repeats=repeats)
            rows.append(
                {
                    "kernel": KERNEL,
                    "case": case,
                    "dtype": "float32",
                    "mode": "fwdbwd",
                    "err": err,
                    "tol": TOL,
                    "ok": bool(err <= TOL),
                    "times_ms": {"pav": t_pav, "hard_sort": t_hard},
                    "extra": {"slowdown": t_pav / t_hard, "rows/s": batch / (1e-3 * t_pav)},
                }
            )
        except Exception as e:  # noqa: BLE001  (report, keep going)
            rows.append(C.failed_row(KERNEL, case, "float32", "fwdbwd", e))
        C.write_rows(args.out, rows)
        print(rows[-1], flush=True)
    C.write_rows(args.out, rows)


if __name__ == "__main__":
    main()
