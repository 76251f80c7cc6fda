"""AdLift toy: safeguard Gaussians that protect every view of a 3DGS asset (spec vision.md §5.5).

Claim reproduced in miniature (Hong et al., ICML 2026, arXiv:2512.07247): a bounded
adversarial perturbation against an image editor, computed in image space on training views
and *lifted* into extra ("safeguard") Gaussians by fitting, transfers to novel views that
were never used, while the renders stay visually unchanged.

Set-up: a random asset of Gaussians, cameras on a circle (even = training, odd = novel
views). The editor is a stand-in: a small U-Net (``jaxkit.nn.UNet``) trained on renders to
perform a fixed "instruction" edit ``clip(1.2 x[..., ::-1])`` (channel swap and brighten).
Attack (PhotoGuard-style, minimised): ``L_adv(x) = mean (Edit(x) - Edit(grey))^2``;
reported per view as ``L_adv(protected) / L_adv(raw)`` (lower = more protection).
Rows: 2D per-view PGD on the training images (full mode only; no 3D asset, so it cannot
cover novel views), plain AdLift Lifted PGD without any bound handling (full mode only: its
rendered L-inf is 3-4x eta), AdLift bounded (the headline: an augmented-Lagrangian penalty
of the eta bound in every fit, a 10% margin, then a projection phase that runs only while a
training view or one of 8 random "bound" poses still exceeds the margin bound), and a
control: the same pipeline driven by random directions, then scaled per view in image
space to the same PSNR as bounded AdLift (a PSNR-matched random perturbation).
The eta bound is guaranteed on the views the projection phase checks (training views and
bound poses: its stopping rule), not on novel views, which no step sees; those are reported
with their L-inf and the share of values over eta. Measured (quick, seeds 0/1/2, 8 bound
poses): novel L-inf 1.02 / 1.36 / 1.34 eta with 0.01-0.19 % of values over eta. 16 or 32
bound poses do not remove the excess (16: 0.97 / 1.03 / 1.40 eta; 32, seeds 1/2: 1.12 /
0.85 eta) and cost protection (seed 1: novel ratio 0.950 / 0.951 against 0.949), so 8 stay.
``lifted_pgd(certify=True)`` (full mode: the "AdLift certified" row) bounds every view
instead: alpha compositing is convex per pixel, so the safeguards' opacities times their
colour offsets (``adlift.certified_linf``) bound the change anywhere; it is kept under eta
after every step. Measured with the quick set-up (certified in place of the bounded
pipeline, control certified too, seeds 0/1/2): novel L-inf <= 0.0311 < eta in every view,
novel ratio 0.912 / 0.909 / 0.889 (more protection than the bounded 0.943 / 0.949 / 0.935),
PSNR 32.4 / 31.9 / 32.1 dB, but the PSNR-matched random control does as well (0.910 /
0.915 / 0.889): the worst-case budget leaves only a near-uniform, low-frequency change,
whose effect comes from its size, not its direction. With ``mode="end_to_end"`` (Adam on
the safeguards through the renderer, the spec's other baseline; full mode's "certified
end-to-end" row) under the same certificate, quick set-up, seeds 0/1/2: novel ratio 0.900 /
0.892 / 0.890 vs the PSNR-matched control 0.906 / 0.897 / 0.900 (ahead in every seed, by
0.005-0.010), PSNR 32.2 / 31.8 / 32.1 dB, novel L-inf <= 0.0310 < eta.
A full run (trained .ply assets, COLMAP cameras, an InstructPix2Pix VAE) needs a GPU.
"""

import argparse
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import nn, splat
from jaxkit.splat import adlift

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_init, fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_init, fast_jit

ETA, STEP = 8 / 255, 4 / 255
FIT_LR = 2e-2  # tuned here: 5e-3 (the spec's start) fits too little in 4 rounds (0.94)
# measured (quick): hinge 10 -> 100 and 12 rounds instead of 4 restore the protection the
# projection costs; the margin and bound poses cut novel-view excess from 2-4% of values to 0.3%
BOUND = {"hinge": 100.0, "margin": 0.1, "n_project": 200}
N_BOUND_VIEWS = 8
GREY = 0.5


def _edit_target(x):
    return jnp.clip(1.2 * x[..., ::-1], 0.0, 1.0)


def _apply(editor, x):
    return jnp.transpose(editor(jnp.transpose(x, (2, 0, 1))), (1, 2, 0))


def attack_loss(params, x, x_raw):
    """Encoder-style attack toward the edit of a grey image, plus an optional random
    linear term (weights ``w_edit``, ``w_rand``: the random control uses the same function)."""
    del x_raw
    editor, target, rand, w_edit, w_rand = params
    edit = jnp.mean((_apply(editor, x) - target) ** 2)
    return w_edit * edit + w_rand * jnp.mean(rand * x)


def _random_scene(seed, n, jit=jax.jit):
    """``n`` random anisotropic Gaussians in [-1, 1]^3 (host RNG: nothing to compile)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return _build_scene[jit](
        rng.uniform(-1.0, 1.0, (n, 3)).astype(f32),
        rng.uniform(-2.8, -1.8, (n, 3)).astype(f32),
        rng.normal(size=(n, 4)).astype(f32),
        (rng.normal(size=n) + 1.0).astype(f32),
        rng.uniform(size=(n, 3)).astype(f32),
    )


def _train_editor(key, images, steps, jit=jax.jit):
    make = functools.partial(nn.UNet, 3, 3, channels=(8, 16))
    # quick: the editor's random draws in one fast_jit program (eager, each compiles alone)
    editor = make(key=key) if jit is jax.jit else fast_init(make, key)
    opt = optax.adam(3e-3)

    @jit
    def step(ed, st, xs):
        def loss(e):
            return jnp.mean((jax.vmap(lambda x: _apply(e, x))(xs) - _edit_target(xs)) ** 2)

        val, g = jax.value_and_grad(loss)(ed)
        up, st = opt.update(g, st, ed)
        return optax.apply_updates(ed, up), st, val

    st = opt.init(editor)
    for i in range(steps):
        batch = images[(i * 16) % len(images) :][:16]
        editor, st, mse = step(editor, st, batch)
    return editor, float(mse)


def _per_view_pgd(params, xs, steps):
    """2D baseline: projected sign steps on each training image directly."""
    g = jax.jit(jax.vmap(jax.grad(attack_loss, argnums=1), in_axes=(None, 0, 0)))
    x = xs
    for _ in range(steps):
        x = adlift.pgd_image_step(x, xs, g(params, x, xs), eta=ETA, step=STEP)
    return x


def main(
    *, quick: bool = False, seed: int = 0, out_dir: str = "out", data_dir: str | None = None
) -> dict:
    del data_dir  # synthetic scene
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    n_raw, n_safe = (100, 100) if quick else (300, 150)
    n_cams, hw = (8, (24, 24)) if quick else (16, (32, 32))
    n_outer, editor_steps = (12, 60) if quick else (12, 300)
    # quick mode: its small programs (renders, the editor's 60 steps, the ratios and edits)
    # compile with XLA's back-end optimisation off (examples/_common.py's fast_jit): their
    # compile, not their run, is most of their time. Lifted PGD (the library's program: 12
    # rounds over 4 views of 10 Adam steps through the renderer) keeps XLA's defaults: at
    # -O0 the example took 64 instead of 34 s of CPU. Full mode keeps jax.jit.
    jit = fast_jit if quick else jax.jit
    edits, ratio = _edits[jit], _ratio_fn[jit]
    raw = _random_scene(seed * 1000 + 1, n_raw, jit)
    cams = splat.orbit_cameras(n_cams, radius=4.0, height=1.0, focal=1.15 * hw[0], hw=hw)
    train = jax.tree.map(lambda a: a[0::2], cams)
    render_views = jax.vmap(lambda g, c: splat.render(g, c, hw=hw), in_axes=(None, 0))
    render_all = jit(render_views)

    # the stand-in editor: trained on renders of the asset and of other random scenes
    imgs = [render_all(raw, cams)]
    for s in range(1 if quick else 3):
        imgs.append(render_all(_random_scene(seed * 1000 + 100 + s, n_raw, jit), cams))
    editor, editor_mse = _train_editor(
        jax.random.fold_in(key, 2), jnp.concatenate(imgs), editor_steps, jit
    )
    target = edits(editor, jnp.full((1, *hw, 3), GREY))[0]
    rand = jit(lambda k: jnp.sign(jax.random.normal(k, (*hw, 3))))(jax.random.fold_in(key, 3))
    adv = (editor, target, jnp.zeros((*hw, 3)), 1.0, 0.0)  # the attack
    ctl = (editor, target, rand, 0.0, 1.0)  # random directions, same pipeline

    theta0 = adlift.init_safeguards(raw, n_safe, key=jax.random.fold_in(key, 4))
    kw = {"hw": hw, "eta": ETA, "step": STEP, "n_outer": n_outer, "n_fit": 10, "fit_lr": FIT_LR}
    bkw = {**kw, **BOUND, "bound_cameras": _bound_cameras(seed, N_BOUND_VIEWS, hw)}
    bounded = adlift.lifted_pgd(raw, theta0, train, attack_loss, adv, **bkw)
    rnd = adlift.lifted_pgd(raw, theta0, train, attack_loss, ctl, **bkw).safeguards
    prot = bounded.safeguards

    def split(tree):  # (train, novel) halves of an all-camera result
        return jax.tree.map(lambda a: a[0::2], tree), jax.tree.map(lambda a: a[1::2], tree)

    rows, res = [], {}
    x_raw = render_all(raw, cams)

    @jit
    def ev_core(theta, raw, cams, x_raw, adv):  # one program, not a dozen eager ones
        x = render_views(adlift.protected_scene(raw, theta), cams)
        d = x - x_raw
        linf = jnp.max(jnp.abs(d), axis=(1, 2, 3))
        psnr = -10 * jnp.log10(jnp.mean(d**2, axis=(1, 2, 3)))
        ratios = jax.vmap(_ratio_core, in_axes=(None, 0, 0))(adv, x, x_raw)
        return adlift.Protection(ratios, linf, psnr), d

    def ev(theta):  # adlift.evaluate_protection's figures
        prot, d = ev_core(theta, raw, cams, x_raw, adv)
        return split(prot), split(d)

    l2d = None
    if not quick:  # the 2D baseline (one more compile): full mode only
        x_raw_tr = x_raw[0::2]
        x2d = _per_view_pgd(adv, x_raw_tr, 8)
        l2d = ratio(adv, x2d, x_raw_tr)
        rows.append(_row("2D per-view PGD (8 steps)", l2d, None, dx=(x2d - x_raw_tr,)))
    runs = [("AdLift bounded", prot), ("random directions", rnd)]
    if not quick:  # plain Lifted PGD, no bound handling (another compile): full mode only
        runs.insert(0, ("AdLift plain", adlift.lifted_pgd(raw, theta0, train, attack_loss, adv,
                                                            **kw).safeguards))  # fmt: skip
        # certified: the view-independent bound (adlift.certified_linf) kept under eta
        for name, mode in (("AdLift certified", "lifted"), ("certified end-to-end", "end_to_end")):
            th = adlift.lifted_pgd(
                raw, theta0, train, attack_loss, adv, certify=True, mode=mode, **kw
            )
            runs.append((name, th.safeguards))
    for name, theta in runs:
        (pt, pn), dx = ev(theta)
        res[name] = (pt, pn)
        rows.append(_row(name, pt.adv_rel, pn.adv_rel, dx=dx))
    # PSNR-matched random control: scale each view's random perturbation to AdLift's MSE
    x_rnd = render_all(adlift.protected_scene(raw, rnd), cams)
    x_adl = render_all(adlift.protected_scene(raw, prot), cams)
    mse_a = jnp.mean((x_adl - x_raw) ** 2, axis=(1, 2, 3))
    mse_r = jnp.mean((x_rnd - x_raw) ** 2, axis=(1, 2, 3))
    x_ctl = jnp.clip(x_raw + jnp.sqrt(mse_a / mse_r)[:, None, None, None] * (x_rnd - x_raw), 0, 1)
    ctl_ratio = split(ratio(adv, x_ctl, x_raw))
    _save(out_dir, x_raw[1::2], x_adl[1::2], x_ctl[1::2], editor, edits)
    dx = split(x_ctl - x_raw)
    rows.append(_row("random, PSNR-matched", *ctl_ratio, dx=dx))
    ctrl = {"novel": ctl_ratio}
    pt, pn = res["AdLift bounded"]
    novel_ratio = float(jnp.mean(pn.adv_rel))
    ctrl_ratio = float(jnp.mean(ctrl["novel"][1]))
    psnr_min = float(jnp.minimum(jnp.min(pt.psnr), jnp.min(pn.psnr)))
    (_, dn), dtr = split(x_adl - x_raw), x_adl[0::2] - x_raw[0::2]
    train_linf = float(jnp.max(pt.linf))
    plain, cert = res.get("AdLift plain"), res.get("AdLift certified")
    return {
        "method": "adlift",
        "metric": "novel-view L_adv(protected)/L_adv(raw) (lower = more protection)",
        "value": round(novel_ratio, 4),
        "baseline": round(ctrl_ratio, 4),
        "ok": bool(
            novel_ratio < 0.95
            and novel_ratio < ctrl_ratio
            and psnr_min > 28.0
            and train_linf <= ETA + 1e-6
        ),
        "train_ratio": round(float(jnp.mean(pt.adv_rel)), 4),
        "per_view_2d_ratio": None if l2d is None else round(float(jnp.mean(l2d)), 4),
        "eta": round(ETA, 4),
        "train_linf_max": round(train_linf, 4),
        "novel_linf_max": round(float(jnp.max(pn.linf)), 4),
        "train_over_eta": round(float(jnp.mean(jnp.abs(dtr) > ETA)), 4),
        "novel_over_eta": round(float(jnp.mean(jnp.abs(dn) > ETA)), 4),
        "project_steps": int(bounded.project_steps),
        "psnr_min_db": round(psnr_min, 2),
        "plain_novel_ratio": None if plain is None else round(float(jnp.mean(plain[1].adv_rel)), 4),
        "plain_linf_max": None if plain is None else round(float(jnp.max(plain[1].linf)), 4),
        "certified_novel_ratio": None
        if cert is None
        else round(float(jnp.mean(cert[1].adv_rel)), 4),
        "certified_linf_max": None if cert is None else round(float(jnp.max(cert[1].linf)), 4),
        "editor_mse": round(editor_mse, 4),
        "table": rows,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _bound_cameras(seed, n, hw):
    """``n`` random poses on the orbit (random azimuth, height 1 +- 0.3) for the projection
    phase's bound; drawn from their own seed, never the evaluation's novel poses."""
    rng = np.random.default_rng(seed * 1000 + 7)
    eyes = [(4.0 * np.cos(a), 4.0 * np.sin(a), 1.0 + rng.uniform(-0.3, 0.3))
            for a in rng.uniform(0, 2 * np.pi, n)]  # fmt: skip
    return splat.stack_cameras(
        [splat.look_at(e, (0.0, 0.0, 0.0), focal=1.15 * hw[0], hw=hw) for e in eyes]
    )


def _ratio_core(params, x, x_raw):
    return attack_loss(params, x, x_raw) / attack_loss(params, x_raw, x_raw)


def _row(name, tr, nv, *, dx=()):
    """One table row: mean ratios; max L-inf, min PSNR and the share of pixel values whose
    perturbation exceeds eta, from the image differences ``dx``."""
    # host NumPy: eager jax ops here would each compile a program of their own
    dx = [np.asarray(d) for d in dx]
    linf = max(float(np.max(np.abs(d))) for d in dx)
    psnr = min(float(np.min(-10 * np.log10(np.mean(d**2, axis=(1, 2, 3))))) for d in dx)
    over = float(np.mean(np.concatenate([np.ravel(np.abs(d) > ETA) for d in dx])))
    return {
        "method": name,
        "train": round(float(np.mean(np.asarray(tr))), 4),
        "novel": None if nv is None else round(float(np.mean(np.asarray(nv))), 4),
        "max_linf": round(linf, 4),
        "min_psnr_db": round(psnr, 2),
        "over_eta": round(over, 4),
    }


def _save(out_dir, x_raw, x_adl, x_ctl, editor, edits):
    """One PNG grid: rows = novel views; columns = raw, AdLift, control, their edits."""
    os.makedirs(out_dir, exist_ok=True)
    cols = [x_raw, x_adl, x_ctl, edits(editor, x_raw), edits(editor, x_adl)]
    n = min(4, x_raw.shape[0])
    grid = np.concatenate(
        [np.concatenate([np.pad(np.asarray(c[i]), ((1, 1), (1, 1), (0, 0))) for c in cols], 1)
         for i in range(n)],
        0,
    )  # fmt: skip
    img = (np.clip(np.kron(grid, np.ones((4, 4, 1))), 0, 1) * 255).astype(np.uint8)
    _write_png(os.path.join(out_dir, "adlift_toy.png"), img)


def _write_png(path, rgb):
    """Minimal RGB8 PNG writer (zlib + CRC chunks), so the demo needs no plotting library."""
    import struct
    import zlib

    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[i].tobytes() for i in range(h))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(chunk(b"IEND", b""))


def _edits_core(editor, xs):
    return jax.vmap(lambda x: _apply(editor, x))(xs)


# module-level programs, compiled with jax.jit (full mode) or fast_jit (quick mode)
_build_scene = {j: j(splat.from_scale_rotation) for j in (jax.jit, fast_jit)}
_ratio_fn = {j: j(jax.vmap(_ratio_core, in_axes=(None, 0, 0))) for j in (jax.jit, fast_jit)}
_edits = {j: j(_edits_core) for j in (jax.jit, fast_jit)}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    res = main(**{k.replace("-", "_"): v for k, v in vars(p.parse_args()).items()})
    table = res.pop("table")
    for row in table:
        print(row)
    print(json.dumps(res))
