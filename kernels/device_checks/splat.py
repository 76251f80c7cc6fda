"""Device check of the Gaussian rasterizer (jaxkit.splat.render): forward + backward time of
the tiled path against the dense path on one device, and their agreement.

Cases: N random anisotropic Gaussians at H x W (float32); the tiled path uses 16 x 16 tiles
with ``capacity`` sized by ``tile_counts`` (so it computes the dense path's image with the
same 3-sigma cutoff). ``err``: max |tiled - dense| over the image and max relative gradient
difference (``rel_err``) on the means. ``times_ms``: ``tiled`` and ``dense`` (fwd+bwd of
``sum(render * G)``); ``extra.speedup`` = dense / tiled. The dense path is skipped (time and
error from the tiled path alone, ``err`` null) where its O(H W N) buffers would not fit a
small budget (N H W > 3e9). No Pallas kernel here: XLA only, so ``--interpret`` is simply
the CPU dry run on tiny shapes (its timings mean nothing). Rows are written after each case;
the module starts no case once its time budget (``DEVICE_CHECK_BUDGET_S``) is nearly spent.
"""

import _common as C  # noqa: I001

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import splat

KERNEL = "splat_render"
TOL = 1e-4
DENSE_LIMIT = 3e9


def _scene(n, key):
    ks = jax.random.split(key, 5)
    return splat.from_scale_rotation(
        jax.random.uniform(ks[0], (n, 3), minval=-1.0, maxval=1.0),
        jax.random.uniform(ks[1], (n, 3), minval=-4.5, maxval=-3.5),
        jax.random.normal(ks[2], (n, 4)),
        jax.random.normal(ks[3], (n,)),
        jax.random.uniform(ks[4], (n, 3)),
    )


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    deadline = C.deadline()
    if args.interpret:
        plan, repeats = [(200, 32)], 2
    else:
        plan, repeats = [(10_000, 128), (10_000, 256), (100_000, 256)], args.repeats
    rows: list[dict] = []
    for n, side in plan:
        case = f"n={n} {side}x{side} tile=16"
        if time.monotonic() > deadline:
            print(f"time budget spent: skipping {case}", flush=True)
            continue
        try:
            hw = (side, side)
            g = _scene(n, jax.random.key(n + side))
            cam = splat.look_at((0.0, -4.0, 1.0), (0.0, 0.0, 0.0), focal=1.2 * side, hw=hw)
            cap = int(jnp.max(splat.tile_counts(g, cam, hw=hw, tile=16)))
            cap = max(8, -(-cap // 8) * 8)
            w = jax.random.normal(jax.random.key(1), (*hw, 3))

            def tiled(g, c, cap=cap, hw=hw):
                return splat.render(g, c, hw=hw, method="tiled", tile=16, capacity=cap)

            def dense(g, c, hw=hw):
                return splat.render(g, c, hw=hw, cutoff=3.0)

            def fwdbwd(f, w=w):
                return jax.value_and_grad(lambda gs, cm, f=f, w=w: jnp.sum(f(gs, cm) * w))

            times = {"tiled": C.time_ms(fwdbwd(tiled), g, cam, repeats=repeats)}
            extra = {"capacity": cap}
            err = None
            if n * side * side <= DENSE_LIMIT:
                img_t, img_d = jax.jit(tiled)(g, cam), jax.jit(dense)(g, cam)
                gt = jax.jit(jax.grad(lambda g, c=cam, w=w: jnp.sum(tiled(g, c) * w)))(g).means
                gd = jax.jit(jax.grad(lambda g, c=cam, w=w: jnp.sum(dense(g, c) * w)))(g).means
                err = max(float(np.max(np.abs(np.asarray(img_t - img_d)))), C.rel_err(gt, gd))
                times["dense"] = C.time_ms(fwdbwd(dense), g, cam, repeats=repeats)
                extra["speedup"] = times["dense"] / times["tiled"]
            rows.append(
                {
                    "kernel": KERNEL,
                    "case": case,
                    "dtype": "float32",
                    "mode": "fwdbwd",
                    "err": err,
                    "tol": TOL,
                    "ok": bool(err is None or err <= TOL),
                    "times_ms": times,
                    "extra": extra,
                }
            )
        except Exception as e:  # noqa: BLE001  (report, keep going)
            rows.append(C.failed_row(KERNEL, case, "float32", "fwdbwd", e))
        C.write_rows(args.out, rows)
        print(rows[-1], flush=True)
    C.write_rows(args.out, rows)


if __name__ == "__main__":
    main()
