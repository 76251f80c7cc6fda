"""Gaussian rasterizer: render + backward time on CPU, tiled vs dense (jaxkit.splat).

One scene of N random anisotropic Gaussians in a unit cube seen from 4 units away
(projected sigma of a few pixels), rendered at H x W. ``fwdbwd``: value and gradient of
``sum(render * G)`` (G a fixed random image) with respect to every Gaussian field;
``fwd``: the render alone. Anchor: our dense path (every Gaussian against every pixel, the
exact reference); ours: the tiled path (16 x 16 tiles, per-tile capacity sized with
``tile_counts``, so both compute the same image with the same 3-sigma cutoff: the line's
``ours_err`` is the max |tiled - dense|). ratio = dense / tiled; target 1.0 (the tiled path
should not be slower). Quick grid: N = 1e3 at 64^2; ``--full`` adds 1e3 at 128^2 and 1e4 at
64^2 and 128^2 (the dense path's O(H W N) memory makes the last one heavy).
"""

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import splat


def _scene(n, key):
    ks = jax.random.split(key, 5)
    return splat.from_scale_rotation(
        jax.random.uniform(ks[0], (n, 3), minval=-1.0, maxval=1.0),
        jax.random.uniform(ks[1], (n, 3), minval=-4.0, maxval=-3.0),
        jax.random.normal(ks[2], (n, 4)),
        jax.random.normal(ks[3], (n,)),
        jax.random.uniform(ks[4], (n, 3)),
    )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    grid = [(1000, 64)]
    if args.full:
        grid += [(1000, 128), (10_000, 64), (10_000, 128)]
    for n, side in grid:
        hw = (side, side)
        g = _scene(n, jax.random.key(n + side))
        cam = splat.look_at((0.0, -4.0, 1.0), (0.0, 0.0, 0.0), focal=1.2 * side, hw=hw)
        cap = int(jnp.max(splat.tile_counts(g, cam, hw=hw, tile=16)))
        cap = max(8, -(-cap // 8) * 8)
        weight = jax.random.normal(jax.random.key(1), (*hw, 3))
        fns = {
            "dense": lambda g, c, hw=hw: splat.render(g, c, hw=hw, cutoff=3.0),
            "tiled": lambda g, c, cap=cap, hw=hw: splat.render(
                g, c, hw=hw, method="tiled", tile=16, capacity=cap
            ),
        }
        err = float(np.max(np.abs(np.asarray(fns["tiled"](g, cam) - fns["dense"](g, cam)))))
        sizes = {"n": n, "h": side, "w": side, "tile": 16, "capacity": cap}
        for mode in ("fwdbwd", "fwd"):
            t = {}
            for name, f in fns.items():
                if mode == "fwdbwd":
                    fn = jax.value_and_grad(lambda g, c, f=f, w=weight: jnp.sum(f(g, c) * w))
                else:
                    fn = f
                t[name] = H.time_jax(fn, g, cam, repeats=args.repeats)
            H.emit(
                bench="splat",
                case=f"render_{mode}_tiled_vs_dense",
                sizes=sizes,
                ours=t["tiled"],
                anchor="dense",
                anchor_t=t["dense"],
                target=1.0,
                note="CPU; same image (3-sigma cutoff in both); ours_err = max |tiled - dense|",
                ours_err=err,
                anchor_err=0.0,
                anchor_peak_mem_mb=t["dense"].peak_mem_mb,
            )


if __name__ == "__main__":
    main()
