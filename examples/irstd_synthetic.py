"""Diffuse-to-Detect on synthetic IR scenes: pseudo-labels from points, then a detector.

Claim checked in miniature (Liu et al., arXiv 2605.20766; spec vision.md §4.6):

1. Pseudo-label quality. On synthetic 128x128 scenes (quick mode: the detector's 128
   32x32 training scenes) with known GT masks, point labels are expanded into masks by
   (a) disks of radius 1/2/3, (b) Fokker-Planck diffusion alone, (c) diffusion fused with
   local intensity, all at the authors' defaults (no parameter fitted to GT masks;
   ``irdet.pseudo_mask``). Assertion (``ok``): the fused labels beat diffusion alone and
   the best disk in mean per-image IoU. The spec's target, fused >= best disk + 0.05, is
   reported (``margin_over_best_disk``, ``target_0.05``).
2. Detector. A small U-Net (``jaxkit.nn.UNet``) trained with soft-IoU + BCE on 64x64
   scenes (32x32, channels 8-16 and 180 steps in quick mode) from four label sources:
   GT masks, the best disk, diffusion pseudo-masks, and diffusion + bi-level sample
   weighting (15 features, residual proxy) + one detection-feedback refinement of the
   diffusion parameters phi (``phi_loss`` on validation pseudo-masks, then regenerated
   labels). As the repo (spec §4.2): every 4th weighted step adds ``(1 / 1.2) L_val`` on
   a validation batch (its *pseudo-masks*) to that step's loss, and the weighter's outer
   update follows the step, on the updated model's predictions, with the validation
   residual in its three alignment features (zero in the inner step). Test IoU and Pd
   (256 test scenes, ~650 targets, in quick mode; 128 in full mode) are reported as
   measured, Pd also at one false-alarm level (``pd_at_fa_0.001``: the lowest threshold
   of 0.05..0.95 whose Fa <= 1e-3, the ROC-style comparison of detection papers) and at
   GT's (``pd_at_gt_fa``). The spec's expected order GT > diffusion(+weights) > disk is
   reported in ``detector_order_holds`` (not part of ``ok``: in a run this small it is
   measured, not guaranteed; ``--seeds N`` prints mean +- s.e. and paired differences).

Scenes: GT masks end at 35 % of each target's peak (``mask_level=0.35``, the edge levels
of real SIRST v1 annotations), target centres are >= 10 px apart (``min_separation=10``,
SIRST v1 pair statistics) and every scene is a window of a 128x128 clutter frame
(``clutter_hw=FRAME``: small frames are locally rougher); reasons and measurements in the
``jaxkit.vision.irdet._synthetic`` docstring. Point labels are the rounded target
centres; nothing reads the GT masks to make labels (the repo's prior script does: a leak).

Measured figures (per seed, the Pd analysis by target contrast, the weighting's controls,
their history) are on the docs page ``docs/areas/vision.md``. In short (quick, seeds
0-5): the label margin is met in 5 of 6 seeds; IoU orders GT > diffusion > disk in 6 of 6;
Pd does not separate the label sources, at the fixed threshold or at one Fa, because it
asks only whether the detector fires at a target and every miss is a locally faint
target whose detection varies between training runs; the weighting gives no gain.

A full run (SIRST3 via ``load_irstd_folder``, ALCL-Net, 400 epochs) needs a GPU and
local data.
"""

import argparse
import copy
import functools
import json
import os
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit.vision import irdet

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_filter_jit, fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_filter_jit, fast_jit


def _miou(pred, gt):
    pred, gt = np.asarray(pred), np.asarray(gt)
    inter = (pred & gt).sum((1, 2))
    union = (pred | gt).sum((1, 2))
    return float((inter / union).mean())  # GT never empty: union > 0


def _loss(model, x, y, w):
    # soft-IoU (the repo's loss) + pixel BCE: in our ~100x shorter runs soft-IoU alone
    # sometimes stalls with every pixel below 0.5 (one of three seeds); BCE removes that
    logits = jax.vmap(model)(x)
    bce = jnp.mean(jax.nn.softplus(logits) - y * logits, axis=(1, 2))
    return jnp.mean(w * (irdet.soft_iou_loss(logits, y) + bce)), logits


SEP = 10.0  # least target-centre distance (px): make_dataset's min_separation, docstring
FRAME = (128, 128)  # every scene is a window of a frame this size (clutter_hw), docstring
OPT = optax.adamw(3e-3)  # built once: the jitted steps see the same optimizer object
WOPT = optax.adamw(1e-3)
POPT = optax.adamw(1e-2)  # phi feedback steps
# programs that run a few times on small arrays: their compile is most of their cost, so
# they compile with ``fast_jit`` (examples/_common.py's FAST_COMPILE: LLVM at -O0, as
# make_dataset's generator); the detector's step stays -O3
_phi_grad = fast_jit(jax.grad(irdet.phi_loss))  # one, reused


@eqx.filter_jit
def _grads(model, x, y, w):
    (_, logits), g = eqx.filter_value_and_grad(_loss, has_aux=True)(model, x, y, w)
    return g, irdet.soft_iou_loss(logits, y)


@eqx.filter_jit
def _apply(model, opt_state, g):
    upd, opt_state = OPT.update(g, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, upd), opt_state


_add = eqx.filter_jit(lambda a, b: jax.tree.map(jnp.add, a, b))


def _train_step(model, opt_state, x, y, w):
    g, per = _grads(model, x, y, w)
    return *_apply(model, opt_state, g), per


@functools.partial(fast_jit, static_argnums=0)
def _weights(w_static, w_params, logits, y, ema, idx, val_residual):
    """Bi-level weights of a batch from the model's logits (stop-gradient inputs of the
    weighted step) and the features they come from. ``val_residual`` is zero in the inner
    step and the mean validation residual in the outer update (the repo's, spec §4.2).
    ``ema[idx]``: the batch's loss EMA, gathered here (not in an eager op per step)."""
    weighter = eqx.combine(w_params, w_static)
    sur = irdet.surrogate_refine(jax.nn.sigmoid(logits))
    feats = irdet.weight_features(logits, y, sur, ema[idx], val_residual)
    return irdet.sample_weights(weighter, feats), feats


_val_residual = fast_jit(lambda pv, yv: jnp.mean(pv - yv, axis=0))


@eqx.filter_jit
def _forward(model, x):
    logits = jax.vmap(model)(x)
    return logits, jax.nn.sigmoid(logits)


def _predict(model, x):
    return _forward(model, x)[1]


@functools.partial(fast_jit, static_argnums=0)
def _weighter_core(w_static, w_params, wstate, feats, scores):
    g = jax.grad(lambda q: irdet.weighter_loss(eqx.combine(q, w_static), feats, scores))(w_params)
    upd, wstate = WOPT.update(g, wstate, w_params)
    return eqx.apply_updates(w_params, upd), wstate


def _weighter_step(weighter, wstate, feats, scores):
    params, static = eqx.partition(weighter, eqx.is_array)
    params, wstate = _weighter_core(static, params, wstate, feats, scores)
    return eqx.combine(params, static), wstate


@fast_filter_jit
def _init(key, channels, n):
    """Detector, weighter, their optimizer states and the loss EMA in one compiled
    program (built eagerly, each random draw and zeros_like of a new shape compiled on
    its own: most of the quick mode's compile count); it runs once per detector, so it
    compiles with ``fast_filter_jit`` (back end at -O0; measured: 1.2 -> 0.25 s of CPU)."""
    model = irdet.Detector(key=key, channels=channels)
    weighter = irdet.make_weighter(key=jax.random.fold_in(key, 1))
    return (model, OPT.init(eqx.filter(model, eqx.is_array)), weighter,
            WOPT.init(eqx.filter(weighter, eqx.is_array)), jnp.zeros(n))  # fmt: skip


@jax.jit
def _ema(ema, idx, per):
    return ema.at[idx].set(0.9 * ema[idx] + 0.1 * per)


def _train(labels, data, *, steps, batch, key, channels, weighted=False, val=None, phi_refine=None,
           snapshot_at=None, resume=None, val_term=False):  # fmt: skip
    """Train one detector; optionally with bi-level weights and one phi refinement.

    ``snapshot_at=t`` also returns the state before step ``t`` (model, optimizer states,
    loss EMA, batch sampler); ``resume=`` continues from such a state. The weighted run
    equals the unweighted one on the same labels until its weights start, so it resumes
    from that run's snapshot (the same steps, not run twice). ``val_term``: every 4th
    weighted step adds ``(1 / 1.2) L_val`` on the validation batch to that step's loss
    (one gradient step, the repo's ``Ltr + (1 / 1.2) (L_val + 0.1 BCE)``; our loss already
    holds a BCE term). The weighter's outer update follows the step and sees the updated
    model, with the validation residual in its alignment features (the repo's order)."""
    x_tr = data["x"]
    if resume is None:
        model, opt_state, weighter, wstate, ema = _init(key, channels, x_tr.shape[0])
        rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**30)))
        t0 = 0
    else:
        model, opt_state, weighter, wstate, ema, rng, t0 = resume
        rng = copy.deepcopy(rng)
    start_w = steps // 3
    zero_rv = np.zeros(x_tr.shape[1:], np.float32)
    # host arrays and constants built once: no eager gather or fill compiled per step, and
    # a strong float32 validation weight (a weak-typed one compiled `_grads` a second time)
    y_all = np.asarray(labels)
    ones, w_val = jnp.ones(batch, jnp.float32), jnp.full(batch, 1 / 1.2, jnp.float32)
    snap = None
    for t in range(t0, steps):
        if t == snapshot_at:
            snap = (model, opt_state, weighter, wstate, ema, copy.deepcopy(rng), t)
        idx = rng.choice(x_tr.shape[0], batch, replace=False)
        x, y = x_tr[idx], y_all[idx]
        if phi_refine is not None and t == steps // 2:
            y_all = np.asarray(phi_refine(model))  # the labels of later steps (batch drawn)
        if weighted and t >= start_w:
            w_split = eqx.partition(weighter, eqx.is_array)[::-1]
            logits, _ = _forward(model, x)  # the val batch's shape: compiled once for both
            w, _ = _weights(*w_split, logits, y, ema, idx, zero_rv)
            g, per = _grads(model, x, y, w)
            if val_term and t % 4 == 0:  # the repo's + (1 / 1.2) L_val, in the same step
                g = _add(g, _grads(model, val["x"], val["y"], w_val)[0])
            model, opt_state = _apply(model, opt_state, g)
            ema = _ema(ema, idx, per)
            if t % 4 == 0:  # outer update of the weighter, after the step (the repo's order)
                logits, p = _forward(model, x)
                pv = _predict(model, val["x"])
                rv = _val_residual(pv, val["y"])  # the alignment features see it here
                _, feats = _weights(*w_split, logits, y, ema, idx, rv)
                scores = irdet.residual_scores(p, y, pv, val["y"])
                weighter, wstate = _weighter_step(weighter, wstate, feats, scores)
        else:
            model, opt_state, per = _train_step(model, opt_state, x, y, ones)
            ema = _ema(ema, idx, per)
    return model if snapshot_at is None else (model, snap)


def _pd_by_size(pred, gt, small=9):
    """Pd split by GT component area (<= ``small`` px: the repo's "Point" type, or larger),
    each component matched on its own (a diagnostic, not the metric)."""
    from scipy import ndimage

    comps = {"small": ([], []), "large": ([], [])}
    for p, g in zip(pred, gt, strict=True):
        lab, n = ndimage.label(g, structure=np.ones((3, 3), bool))
        for c in range(1, n + 1):
            comp = lab == c
            b = comps["small" if comp.sum() <= small else "large"]
            b[0].append(p)
            b[1].append(comp)
    # each component its own image: one pd_fa call per size class
    r = {k: irdet.pd_fa(np.stack(v[0]), np.stack(v[1])) if v[0] else None for k, v in comps.items()}
    return {k: (v.pd if v else None) for k, v in r.items()} | {
        "n_small": len(comps["small"][0]),
        "n_large": len(comps["large"][0]),
    }


FA_LEVELS = (1e-3,)  # the ROC-style comparison's Fa (5e-4: out of some detectors' reach)


def _pd_curve(prob, gt, fa_stop):
    """(threshold, Fa, Pd) at thresholds 0.05..0.95 up to Fa <= ``fa_stop`` (ROC-style);
    every threshold scored in one ``pd_fa_curve`` call (one labelling pass)."""
    c = irdet.pd_fa_curve(prob, gt, thresholds=np.arange(0.05, 0.951, 0.05))
    out = []
    for t, fa, pd in zip(c.threshold, c.fa, c.pd, strict=True):
        out.append((round(float(t), 2), float(fa), float(pd)))
        if fa <= fa_stop:
            break
    return out


def _pd_at_fa(curve, fa_max):
    """Pd at the lowest threshold of ``curve`` whose Fa is <= ``fa_max``: detectors compared
    at one false-alarm level, not at one threshold (a diagnostic)."""
    for t, fa, pd in curve:
        if fa <= fa_max:
            return pd, t
    return None, None


def _evaluate(model, test, chunk=16):
    # in training-batch chunks: the forward compiled for the batch shape serves the test set
    x = test["x"]
    prob = np.concatenate(
        [np.asarray(_predict(model, x[i : i + chunk])) for i in range(0, len(x), chunk)]
    )
    pred = prob > 0.5
    gt = np.asarray(test["mask"])
    out = {"iou": irdet.iou(pred, gt), "niou": irdet.niou(pred, gt, empty="one")}
    r = irdet.pd_fa(pred, gt)
    out.update(pd=r.pd, fa=r.fa)
    by = _pd_by_size(pred, gt)
    out.update(pd_small=by["small"], pd_large=by["large"])
    out["n_small_large"] = (by["n_small"], by["n_large"])
    return out, prob


def main(*, quick=False, seed=0, out_dir="out", data_dir=None):
    del data_dir  # synthetic data only
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    k_pl, k_tr, k_det = jax.random.split(key, 3)

    # ---- 2. detector from four label sources
    hw = (32, 32) if quick else (64, 64)
    # quick: 256 test scenes (~650 targets; one Pd's binomial s.e. 0.009) and 180 steps (at
    # 60-120 an under-trained detector fires first on the disk's big labels; docs page)
    n_tr, n_te = (128, 256) if quick else (256, 128)
    steps = 180 if quick else 300
    channels = (8, 16) if quick else (8, 16, 32)
    n_va = 16
    # one generator call for all splits, one pseudo-label program for train + val scenes
    allsc = irdet.make_dataset(
        n_tr + n_va + n_te, key=k_tr, hw=hw, min_separation=SEP, clutter_hw=FRAME
    )
    # host copies: NumPy slices below (eager jax slices compile one program per shape)
    allsc = jax.tree.map(np.asarray, allsc)
    lab = jax.tree.map(lambda a: a[: n_tr + n_va], allsc)
    pl_all = np.asarray(irdet.pseudo_mask(lab.image, lab.points, lab.valid).mask)

    # ---- 1. pseudo-label quality: 128x128 scenes; quick mode reuses the detector's
    # 32x32 training scenes (no second compilation of the generator and the solver)
    if quick:
        n_pl, pl_hw = n_tr, hw
        sc = jax.tree.map(lambda a: a[:n_tr], allsc)
        fused_mask = pl_all[:n_tr]
    else:
        n_pl, pl_hw = 40, (128, 128)
        sc = irdet.make_dataset(n_pl, key=k_pl, hw=pl_hw, min_separation=SEP, clutter_hw=FRAME)
        fused_mask = irdet.pseudo_mask(sc.image, sc.points, sc.valid).mask
    gt = np.asarray(sc.mask)
    disk = {
        r: _miou(irdet.disk_mask(sc.points, sc.valid, hw=pl_hw, radius=float(r)), gt)
        for r in (1, 2, 3)
    }
    best_r = max(disk, key=disk.get)
    # quick: diffusion alone on the same 144 scenes as the fused call (one compiled
    # program for both; each image is labelled on its own, so the slice is the same)
    src = lab if quick else sc
    alone = irdet.pseudo_mask(src.image, src.points, src.valid, weight=1.0).mask
    fp_alone = _miou(np.asarray(alone)[:n_pl], gt)
    fused = _miou(fused_mask, gt)
    margin = fused - disk[best_r]

    tr, va, te = (
        jax.tree.map(lambda a, lo=lo, hi=hi: a[lo:hi], allsc)
        for lo, hi in ((0, n_tr), (n_tr, n_tr + n_va), (n_tr + n_va, n_tr + n_va + n_te))
    )

    def norm(x):  # per-dataset standardisation, as the repo's mean/std normalisation
        return (x - 0.4) / 0.1

    pl_all = pl_all.astype(np.float32)
    data = {"x": norm(tr.image)}
    val = {"x": norm(va.image), "y": pl_all[n_tr : n_tr + n_va]}  # pseudo-masks, not GT
    test = {"x": norm(te.image), "mask": te.mask}
    disk_tr = irdet.disk_mask(tr.points, tr.valid, hw=hw, radius=float(best_r))
    labels = {
        "gt": tr.mask.astype(jnp.float32),
        f"disk r={best_r}": disk_tr.astype(jnp.float32),
        "diffusion": pl_all[:n_tr],
    }
    u_phi = {"u": jnp.zeros(4)}

    def phi_refine(model):
        """Detection feedback: a few AdamW steps on u (phi_loss), then regenerate labels."""
        ps = POPT.init(u_phi["u"])
        pv = _predict(model, val["x"])
        u = u_phi["u"]
        for _ in range(5):
            g = _phi_grad(u, pv, val["y"])
            upd, ps = POPT.update(g, ps, u)
            u = optax.apply_updates(u, upd)
        u_phi["u"] = u
        ph = irdet.phi_from_u(u)
        m = irdet.pseudo_mask(
            lab.image,
            lab.points,
            lab.valid,
            d0=ph.d0,
            beta=ph.beta,
            alpha=ph.alpha,
            weight=ph.rho,  # the refined rho is the fusion weight
        )
        return m.mask.astype(jnp.float32)[:n_tr]

    batch = 16
    results, probs = {}, {}
    snap = None
    for name, y in labels.items():
        kw = {"snapshot_at": steps // 3} if name == "diffusion" else {}
        model = _train(y, data, steps=steps, batch=batch, key=k_det, channels=channels, **kw)
        if name == "diffusion":
            model, snap = model
        results[name], probs[name] = _evaluate(model, test)
    model = _train(
        labels["diffusion"],
        data,
        steps=steps,
        batch=batch,
        key=k_det,
        channels=channels,
        weighted=True,
        val=val,
        phi_refine=phi_refine,
        resume=snap,  # its first steps // 3 steps are the diffusion run's
        val_term=True,
    )
    results["diffusion+weights"], probs["diffusion+weights"] = _evaluate(model, test)
    # Pd at one false-alarm level (GT's, 1e-3): at 0.5 the detectors sit at different Fa
    for name, r in results.items():
        curve = _pd_curve(probs[name], np.asarray(te.mask), min(results["gt"]["fa"], *FA_LEVELS))
        r["pd_at_gt_fa"], r["thr_at_gt_fa"] = _pd_at_fa(curve, results["gt"]["fa"])
        for lv in FA_LEVELS:
            r[f"pd_at_fa_{lv:g}"] = _pd_at_fa(curve, lv)[0]
    dname = f"disk r={best_r}"
    dw = results["diffusion+weights"]
    order = {
        m: bool(results["gt"][m] > dw[m] > results[dname][m])
        if None not in (results["gt"][m], dw[m], results[dname][m])
        else None
        for m in ("iou", "pd", *(f"pd_at_fa_{lv:g}" for lv in FA_LEVELS))
    }
    # ok: what every measured seed gives (docstring); the 0.05 target is reported, not asserted
    ok = fused > fp_alone and margin > 0
    table = [{"labels": k, **{m: _r4(v) for m, v in r.items()}} for k, r in results.items()]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "irstd_synthetic.json"), "w") as f:
        json.dump(
            {"pseudo_label_iou": {**{f"disk r={r}": v for r, v in disk.items()}}, "table": table}, f
        )
    return {
        "method": "vision.irdet: Diffuse-to-Detect pseudo-labels + detector",
        "metric": "pseudo-label mean IoU, diffusion + local-intensity fusion",
        "value": round(fused, 4),
        "baseline": f"diffusion alone {fp_alone:.3f}; best disk (r={best_r}) {disk[best_r]:.3f}",
        "ok": bool(ok),
        "margin_over_best_disk": round(margin, 4),
        "target_0.05": "met" if margin >= 0.05 else "not met",
        "margin_over_diffusion_alone": round(fused - fp_alone, 4),
        "pseudo_label_iou": {
            **{f"disk r={r}": round(v, 4) for r, v in disk.items()},
            "diffusion alone": round(fp_alone, 4),
            "diffusion + fusion": round(fused, 4),
        },
        "detector": {k: {m: _r4(v) for m, v in r.items()} for k, r in results.items()},
        "detector_order_holds": order,
        "phi_after_feedback": [round(float(v), 4) for v in irdet.phi_from_u(u_phi["u"])],
        "sizes": {
            "pl_scenes": n_pl,
            "pl_hw": pl_hw,
            "hw": hw,
            "train": n_tr,
            "test": n_te,
            "steps": steps,
            "channels": channels,
        },
        "table": table,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _r4(v):
    return round(v, 4) if isinstance(v, float) else v


def summarize(runs):
    """Mean and spread (sample std, s.e., min, max) over seeds of each detector's IoU,
    nIoU, Pd and the size-split Pd; paired differences between label sources (mean and
    s.e. over seeds); the label margin; and how often each order holds."""
    out = {}
    for k in runs[0]["detector"]:
        out[k] = {}
        for m in ("iou", "niou", "pd", "pd_small", "pd_large", "pd_at_gt_fa",
                  *(f"pd_at_fa_{lv:g}" for lv in FA_LEVELS)):  # fmt: skip
            v = np.asarray([np.nan if (x := r["detector"][k][m]) is None else x for r in runs])
            sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
            out[k][m] = {"mean": _r4(float(v.mean())), "std": _r4(sd),
                         "se": _r4(sd / np.sqrt(len(v))), "min": _r4(float(v.min())),
                         "max": _r4(float(v.max()))}  # fmt: skip
    holds = {m: sum(bool(r["detector_order_holds"][m]) for r in runs)
             for m in runs[0]["detector_order_holds"]}  # fmt: skip
    # paired differences over seeds (same test scenes within a seed): mean and s.e.
    disk = next(k for k in runs[0]["detector"] if k.startswith("disk"))
    pairs = {"gt - diffusion+weights": ("gt", "diffusion+weights"),
             "diffusion+weights - disk": ("diffusion+weights", disk),
             "diffusion+weights - diffusion": ("diffusion+weights", "diffusion")}  # fmt: skip
    paired = {}
    for name, (a, b) in pairs.items():
        for m in ("iou", "pd", "pd_at_fa_0.001"):
            d = np.asarray([np.nan if None in (x := r["detector"][a][m], y := r["detector"][b][m])
                            else x - y for r in runs])  # fmt: skip
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
            paired[f"{name} {m}"] = {"mean": _r4(float(d.mean())), "se": _r4(se)}
    margin = np.asarray([r["margin_over_best_disk"] for r in runs])
    se = float(margin.std(ddof=1) / np.sqrt(len(margin))) if len(margin) > 1 else 0.0
    return {"seeds": len(runs), "margin_over_best_disk": {"mean": _r4(float(margin.mean())),
            "se": _r4(se), "met_0.05": int((margin >= 0.05).sum())}, "detector": out,
            "paired": paired, "order_holds_in_seeds": holds}  # fmt: skip


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="run seeds seed..seed+n-1, summarize")
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    a = vars(p.parse_args())
    n = a.pop("seeds")
    runs = []
    for s in range(a["seed"], a["seed"] + n):
        res = main(**{**{k.replace("-", "_"): v for k, v in a.items()}, "seed": s})
        res.pop("table")
        print(json.dumps(res), flush=True)
        runs.append(res)
    if n > 1:
        print(json.dumps(summarize(runs)))
