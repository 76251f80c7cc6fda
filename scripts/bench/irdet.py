"""IR small-target pseudo-labels: jitted batched Fokker-Planck diffusion vs NumPy.

Ours: ``jaxkit.vision.irdet.fokker_planck`` (jitted, batched over images x points)
on the heat-diffusion problem of the pseudo-label generator: per target a unit mass,
image-driven diffusivity and drift, ``substeps`` explicit finite-volume sub-steps with
reflecting walls. Anchor: ``numpy_fp``, the same scheme written in vectorised NumPy
(whole batch per sub-step, float32) on the same inputs; the line records the maximum
absolute difference of the two results. A second line times the whole pseudo-label
generator (``pseudo_mask``: diffusivity, diffusion, fusion, Otsu) with no anchor.
Median of repeated calls, compile excluded (reported separately).
"""

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import numpy as np

from jaxkit.vision import irdet


def _numpy_fp(u0, d, v, time, substeps):
    """The explicit finite-volume scheme of ``fokker_planck`` in NumPy (the anchor)."""
    u = u0.copy()
    h = np.float32(time / substeps)
    vy, vx = v[..., 0, :, :], v[..., 1, :, :]
    vfx = 0.5 * (vx[..., :, 1:] + vx[..., :, :-1])
    vfy = 0.5 * (vy[..., 1:, :] + vy[..., :-1, :])
    px, nx = np.maximum(vfx, 0), np.minimum(vfx, 0)
    py, ny = np.maximum(vfy, 0), np.minimum(vfy, 0)
    fx = np.zeros(u.shape[:-1] + (u.shape[-1] + 1,), np.float32)
    fy = np.zeros(u.shape[:-2] + (u.shape[-2] + 1, u.shape[-1]), np.float32)
    for _ in range(substeps):
        du = d * u
        fx[..., 1:-1] = du[..., :, :-1] - du[..., :, 1:] + px * u[..., :, :-1] + nx * u[..., :, 1:]
        fy[..., 1:-1, :] = (
            du[..., :-1, :] - du[..., 1:, :] + py * u[..., :-1, :] + ny * u[..., 1:, :]
        )
        u = u - h * ((fx[..., 1:] - fx[..., :-1]) + (fy[..., 1:, :] - fy[..., :-1, :]))
    return u


def _problem(b, k, hw):
    sc = irdet.make_dataset(b, key=jax.random.key(0), hw=hw, n_targets=(k, k))
    img = sc.image - sc.image.min(axis=(1, 2), keepdims=True)
    img = img / img.max(axis=(1, 2), keepdims=True)
    d = irdet.diffusivity(img)
    gy, gx = jnp.gradient(img, axis=(1, 2))
    v = jnp.stack([gy, gx], axis=1)
    u0 = jax.vmap(lambda p: irdet.point_sources(p, hw))(sc.points)  # [B, K, H, W]
    rep = (1, k, 1, 1)
    d4 = jnp.tile(d[:, None], rep)
    v4 = jnp.tile(v[:, None], (1, k, 1, 1, 1))
    return sc, u0, d4, v4


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    sizes = [dict(b=16, k=4, hw=(64, 64))]
    if args.full:
        sizes.append(dict(b=32, k=4, hw=(128, 128)))
    time_, substeps = 0.5, 12
    for sz in sizes:
        sc, u0, d, v = _problem(**sz)
        ours = H.time_jax(
            lambda a, b_, c: irdet.fokker_planck(a, b_, c, time=time_, substeps=substeps),
            u0,
            d,
            v,
            repeats=args.repeats,
        )
        un, dn, vn = (np.asarray(a, np.float32) for a in (u0, d, v))
        anchor = H.time_python(
            lambda un=un, dn=dn, vn=vn: _numpy_fp(un, dn, vn, time_, substeps), repeats=args.repeats
        )
        err = float(np.max(np.abs(np.asarray(ours.output) - anchor.output)))
        H.emit(
            bench="irdet",
            case="fokker_planck_vs_numpy",
            sizes={**sz, "hw": list(sz["hw"]), "substeps": substeps},
            ours=ours,
            anchor="numpy_fp (same explicit FV scheme, vectorised NumPy, f32)",
            anchor_t=anchor,
            target=1.0,
            note="pseudo-label diffusion: B images x K points, one unit mass each",
            max_abs_diff=err,
        )
        pl = H.time_jax(
            lambda i, p, va: irdet.pseudo_mask(i, p, va, time=time_, substeps=substeps),
            sc.image,
            sc.points,
            sc.valid,
            repeats=args.repeats,
        )
        H.emit(
            bench="irdet",
            case="pseudo_mask_generator",
            sizes={**sz, "hw": list(sz["hw"]), "substeps": substeps},
            ours=pl,
            anchor="none",
            anchor_t=None,
            target=None,
            note="whole generator: diffusivity + FP heat + intensity fusion + Otsu (jitted)",
        )


if __name__ == "__main__":
    main()
