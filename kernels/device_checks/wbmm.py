"""Device check of the WBMM Pallas kernel: values and gradients vs the jnp reference, and
timings against the reference (XLA) and XLA's depthwise conv (``lax``, cuDNN on GPU).

GPU: WBMM-T stage shapes 56x56x80, 28x28x160, 14x14x320 at batch 32, windows 7 and 14,
bf16 (f32 too on the first shape), forward and forward+backward (gradients for x and the
table); 16 rows, about 2 minutes.
``--interpret``: Pallas interpret mode on CPU with one tiny shape (a dry run of this
script; its timings mean nothing).
"""

import _common as C  # noqa: I001

import jax
import jax.numpy as jnp
from jax import lax

from jaxkit.kernels.windowed_matmul import windowed_matmul

TOL = {"float32": 2e-4, "bfloat16": 3e-2}  # relative to the largest |reference| entry


def depthwise_lax(x, k):
    kk = k.shape[0]
    return lax.conv_general_dilated(
        x,
        k[:, :, None, :].astype(x.dtype),
        (1, 1),
        [(kk // 2, kk // 2)] * 2,
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=x.shape[-1],
    )


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    impl = "pallas_interpret" if args.interpret else "pallas"
    if args.interpret:
        shapes, batch, windows, repeats = [(14, 14, 4)], 1, (7,), 2
    else:
        shapes, batch, windows, repeats = (
            [(56, 56, 80), (28, 28, 160), (14, 14, 320)],
            32,
            (7, 14),
            args.repeats,
        )
    # bf16 (the GPU dtype) on every shape; f32 on the first shape only (time budget)
    plan = [
        (shape, win, dtype)
        for shape in shapes
        for win in windows
        for dtype in ((jnp.float32, jnp.bfloat16) if shape == shapes[0] else (jnp.bfloat16,))
    ]
    rows = []
    for (h, w, c), win, dtype in plan:
        key = jax.random.key(h + win)
        kx, kt, kg, kk = jax.random.split(key, 4)
        x = jax.random.normal(kx, (batch, h, w, c), jnp.float32).astype(dtype)
        t = 0.05 * jax.random.normal(kt, (c, (2 * win - 1) ** 2), jnp.float32)
        g = jax.random.normal(kg, (batch, h, w, c), jnp.float32)
        k7 = 0.05 * jax.random.normal(kk, (7, 7, c), jnp.float32)

        def fwd(implementation, win=win):
            return lambda a, b: windowed_matmul(a, b, window=win, implementation=implementation)

        def fwdbwd(f, g=g):
            return jax.grad(lambda a, b: jnp.sum(f(a, b).astype(jnp.float32) * g), argnums=(0, 1))

        x32 = x.astype(jnp.float32)
        name = f"{h}x{w}x{c} b{batch} w{win}"
        dt = jnp.dtype(dtype).name
        for mode in ("fwd", "fwdbwd"):
            ours = fwd(impl) if mode == "fwd" else fwdbwd(fwd(impl))
            ref = fwd("xla") if mode == "fwd" else fwdbwd(fwd("xla"))
            dw = depthwise_lax if mode == "fwd" else fwdbwd(depthwise_lax)
            row = {
                "kernel": "windowed_matmul",
                "case": name,
                "dtype": dt,
                "mode": mode,
                "tol": TOL[dt],
            }
            try:
                got = jax.jit(ours)(x, t)
                # the error's reference in IEEE f32: XLA:GPU's default f32 dot is TF32 (an
                # H200 run gave 3.3e-4 "errors" that were the reference's), while the f32
                # kernel asks for HIGHEST; the timed reference keeps XLA's default
                with jax.default_matmul_precision("highest"):
                    want = jax.jit(ref)(x32, t)
                row["err"] = C.rel_err(got, want)
                row["ok"] = row["err"] <= TOL[dt]
                row["times_ms"] = {
                    "pallas": C.time_ms(ours, x, t, repeats=repeats),
                    "xla_reference": C.time_ms(ref, x, t, repeats=repeats),
                    "depthwise_lax_k7": C.time_ms(dw, x, k7, repeats=repeats),
                }
            except Exception as e:  # noqa: BLE001  (report and go on)
                row.update(
                    err=None, ok=False, times_ms={}, error=f"{type(e).__name__}: {str(e)[:300]}"
                )
            rows.append(row)
            print(row, flush=True)
            C.write_rows(args.out, rows)  # after every row: a timeout keeps them
    C.write_rows(args.out, rows)


if __name__ == "__main__":
    main()
