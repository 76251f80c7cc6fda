"""RECM on rotated scikit-learn digits: theta -> 0 under symmetry, > 0 where it breaks.

Each 8x8 digit appears in its four 90-degree rotations with weights ``pi``: uniform
``pi`` makes the empirical (image, label) law exactly C_4-invariant; skewed ``pi =
(0.7, 0.1, 0.1, 0.1)`` makes orientation informative (6 vs 9), a real symmetry gap.
Model: relaxed p4 lifting conv -> relaxed p4 group conv -> relaxed p4 group conv ->
invariant pooling (mean over the group axis, max over space) -> linear. Compared, on the same data and
steps: RECM (theta per layer by the recurrence), the strictly equivariant model
(theta = 0), CR's triangle-scheduled relaxation (theta(t) shared by all layers,
free branch switched off at evaluation; its Lie-derivative penalty is not applied
to the convolutions here) and a plain CNN of the same width. All C_4 runs share one
jitted step (mode and pi traced); the accuracy is the ``pi``-weighted test accuracy over
the four rotations. Per-layer theta is plotted against each layer's MMD gap.

The result's ``ok`` checks the theta claims. The paper's accuracy claim (RECM >=
max(strict, CNN) and > CR on the skewed setting) is reported as
``accuracy_claim_met``; in our runs it does not hold (quick: RECM 0.80, strict 0.83,
CR 0.83, CNN 0.87).
"""

import argparse
import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxkit.equivariance as E

PIS = {"uniform": (0.25, 0.25, 0.25, 0.25), "skewed": (0.7, 0.1, 0.1, 0.1)}
MODES = ("recm", "strict", "cr")
LAM = 0.1
LR = 5e-3


class C4Net(eqx.Module):
    layers: list
    head: eqx.nn.Linear

    def __init__(self, width: int, *, key):
        k = jax.random.split(key, 4)
        self.layers = [
            E.RECMGroupConvC4(1, width, 3, key=k[0], lifting=True),
            E.RECMGroupConvC4(width, width, 3, key=k[1]),
            E.RECMGroupConvC4(width, width, 3, key=k[2]),
        ]
        self.head = eqx.nn.Linear(width, 10, key=k[3])

    def features(self, x):
        hs = []
        h = x
        for layer in self.layers:
            h = jax.nn.relu(layer(h))
            hs.append(h)
        return hs

    def __call__(self, x):
        return self.head(jnp.max(jnp.mean(self.features(x)[-1], axis=1), axis=(1, 2)))


class CNN(eqx.Module):
    convs: list
    head: eqx.nn.Linear

    def __init__(self, width: int, *, key):
        k = jax.random.split(key, 4)
        self.convs = [
            eqx.nn.Conv2d(1, width, 3, padding=1, key=k[0]),
            eqx.nn.Conv2d(width, width, 3, padding=1, key=k[1]),
            eqx.nn.Conv2d(width, width, 3, padding=1, key=k[2]),
        ]
        self.head = eqx.nn.Linear(width, 10, key=k[3])

    def __call__(self, x):
        for c in self.convs:
            x = jax.nn.relu(c(x))
        return self.head(jnp.max(x, axis=(1, 2)))


def _is_conv(n):
    return isinstance(n, E.RECMGroupConvC4)


def _with_thetas(model, mode, step, total, *, train):
    """theta used by each variant: learned (RECM), 0 (strict), CR schedule (train)."""
    sched = E.cr_triangle_schedule(step, total) if train else jnp.zeros([])

    def fix(layer):
        if not _is_conv(layer):
            return layer
        th = jnp.where(mode == 0, layer.theta, jnp.where(mode == 2, sched, 0.0))
        return eqx.tree_at(lambda m: m.theta, layer, th)

    return jax.tree.map(fix, model, is_leaf=_is_conv)


def _orbit(x):
    """[N, 1, 8, 8] -> [4, N, 1, 8, 8]: the four rotations."""
    return np.stack([np.rot90(x, k, axes=(-2, -1)) for k in range(4)])


def _weighted_ce(model, xo, y, pi):
    logits = jax.vmap(jax.vmap(model))(xo)  # [4, B, 10]
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits, jnp.broadcast_to(y, logits.shape[:2])
    )
    return jnp.sum(pi[:, None] * ce) / y.shape[0]


def _weighted_acc(model, xo, y, pi):
    pred = jnp.argmax(jax.vmap(jax.vmap(model))(xo), -1)
    return jnp.sum(pi[:, None] * (pred == y[None]).astype(jnp.float32)) / y.shape[0]


def main(
    *,
    quick: bool = False,
    seed: int = 0,
    out_dir: str = "out",
    data_dir: str | None = None,
) -> dict:
    del data_dir  # the data ship with scikit-learn
    from sklearn.datasets import load_digits

    xs, ys = load_digits(return_X_y=True)
    xs = (xs / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    perm = np.random.default_rng(seed).permutation(len(xs))
    n_train = 1300
    tr, te = perm[:n_train], perm[n_train:]
    xtr, ytr = jnp.asarray(_orbit(xs[tr])), jnp.asarray(ys[tr])
    xte, yte = jnp.asarray(_orbit(xs[te])), jnp.asarray(ys[te])
    width, steps, batch = (6, 250, 32) if quick else (8, 1500, 64)

    key = jax.random.key(seed)
    model0 = C4Net(width, key=key)
    params0, static = eqx.partition(model0, eqx.is_inexact_array)
    opt = E.recm_optimizer(optax.adam(LR), learning_rate=0.2, decay=LAM)

    def c4_step(c, i, mode, pi):
        p, s = c

        def loss(p, xb, yb):
            m = _with_thetas(eqx.combine(p, static), mode, i, steps, train=True)
            return _weighted_ce(m, xb, yb, pi)

        idx = jax.random.choice(
            jax.random.fold_in(key, i), n_train, (batch,), replace=False
        )
        upd, s = opt.update(jax.grad(loss)(p, xtr[:, idx], ytr[idx]), s, p)
        p = optax.apply_updates(p, upd)
        return (p, s), jnp.stack([m.theta for m in eqx.combine(p, static).layers])

    # A Python loop over one jitted step: on XLA:CPU, convolutions inside a
    # `lax.scan` body ran ~25x slower than the same step called from Python.
    # One compile serves every run (mode and pi are traced arguments).
    step_c4 = jax.jit(c4_step)
    evaluate = jax.jit(
        lambda p, mode, pi: _weighted_acc(
            _with_thetas(eqx.combine(p, static), mode, steps, steps, train=False),
            xte,
            yte,
            pi,
        )
    )
    # Quick mode skips the baselines on the symmetric setting (only RECM's theta -> 0
    # is checked there); the full run trains every model on both settings.
    c4_runs = [
        (m, st)
        for m in MODES
        for st in ("uniform", "skewed")
        if not (quick and m != "recm" and st == "uniform")
    ]
    acc, recm_params, theta_trace = {}, {}, {}
    for m, st in c4_runs:
        mode, pi = jnp.asarray(MODES.index(m)), jnp.asarray(PIS[st], jnp.float32)
        c, trace = (params0, opt.init(params0)), []
        for i in range(steps):
            c, th = step_c4(c, jnp.asarray(i), mode, pi)
            trace.append(th)
        acc[m, st] = float(evaluate(c[0], mode, pi))
        if m == "recm":
            recm_params[st], theta_trace[st] = c[0], np.asarray(jnp.stack(trace))

    cnn0 = CNN(4 * width, key=jax.random.fold_in(key, 1))
    cparams0, cstatic = eqx.partition(cnn0, eqx.is_inexact_array)
    copt = optax.adam(LR)

    def cnn_step(c, i, pi):
        p, s = c

        def loss(p, xb, yb):
            return _weighted_ce(eqx.combine(p, cstatic), xb, yb, pi)

        idx = jax.random.choice(
            jax.random.fold_in(key, i), n_train, (batch,), replace=False
        )
        upd, s = copt.update(jax.grad(loss)(p, xtr[:, idx], ytr[idx]), s, p)
        return optax.apply_updates(p, upd), s

    step_cnn = jax.jit(cnn_step)
    eval_cnn = jax.jit(
        lambda p, pi: _weighted_acc(eqx.combine(p, cstatic), xte, yte, pi)
    )
    for st in ("skewed",) if quick else ("uniform", "skewed"):
        pi = jnp.asarray(PIS[st], jnp.float32)
        c = (cparams0, copt.init(cparams0))
        for i in range(steps):
            c = step_cnn(c, jnp.asarray(i), pi)
        acc["cnn", st] = float(eval_cnn(c[0], pi))

    res = {}
    for setting in ("uniform", "skewed"):
        r = {m: acc.get((m, setting)) for m in (*MODES, "cnn")}
        r["theta"] = [float(t) for t in theta_trace[setting][-1]]
        res[setting] = r
        shown = " ".join(
            f"{m} {v:.3f}" for m, v in r.items() if m != "theta" and v is not None
        )
        print(
            f"{setting:8s} acc: {shown} | RECM theta per layer "
            + " ".join(f"{t:.4f}" for t in r["theta"])
        )

    gaps = _layer_gaps(recm_params, static, xtr, width, seed)
    u, s = res["uniform"], res["skewed"]
    # `ok` is the mechanism claim (theta -> 0 under symmetry, > 0 in the late layer when
    # it breaks). The paper's accuracy claim is measured separately and reported as
    # `accuracy_claim_met`; in our runs it is NOT met (see the README row).
    ok = bool(max(u["theta"]) < 0.05 and s["theta"][-1] > 0.05)
    accuracy_claim_met = bool(
        s["recm"] >= max(s["strict"], s["cnn"]) - 1e-9 and s["recm"] > s["cr"]
    )

    os.makedirs(out_dir, exist_ok=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for si, setting in enumerate(("uniform", "skewed")):
        for li in range(3):
            axes[0].plot(
                theta_trace[setting][:, li],
                ls="-" if si else "--",
                label=f"{setting} layer {li + 1}",
            )
        axes[1].plot(gaps[setting], res[setting]["theta"], "o-", label=setting)
    axes[0].set_xlabel("step")
    axes[0].set_ylabel(r"$\theta_l$")
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("layer MMD gap statistic")
    axes[1].set_ylabel(r"final $\theta_l$")
    axes[1].legend()
    fig.suptitle("RECM on rotated digits (C4): per-layer theta vs gap")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "recm_digits_c4.png"), dpi=100)
    plt.close(fig)
    return {
        "method": "RECM (digits, C4)",
        "metric": "late-layer theta, skewed (uniform max theta < 0.05)",
        "value": s["theta"][-1],
        "baseline": (f"acc RECM {s['recm']:.3f} vs strict {s['strict']:.3f} / "
                     f"CNN {s['cnn']:.3f} / CR {s['cr']:.3f}"),
        "ok": ok,
        "accuracy_claim_met": accuracy_claim_met,
        "uniform": u,
        "skewed": s,
        "mmd_gap": gaps,
    }


def _layer_gaps(recm_params, static, xtr, width, seed):
    """MMD statistic of each layer's (pooled input, pooled output) pair per setting.

    Features are pooled over space to vectors carrying the regular (or trivial)
    representation, so the C_4 action is a cyclic shift of the group axis.
    """
    out = {}
    n = 200
    for si, setting in enumerate(("uniform", "skewed")):
        pi = np.asarray(PIS[setting])
        rng = np.random.default_rng(seed + si)
        k = rng.choice(4, size=n, p=pi)
        idx = rng.choice(xtr.shape[1], size=n, replace=False)
        x = xtr[k, idx]  # [n, 1, 8, 8] drawn from the pi-weighted law
        m = eqx.combine(recm_params[setting], static)  # RECM run of this setting
        hs = jax.vmap(m.features)(x)
        ins = [jnp.mean(x, axis=(2, 3))] + [
            jnp.mean(h, axis=(3, 4)).reshape(n, -1) for h in hs[:-1]
        ]
        outs = [jnp.mean(h, axis=(3, 4)).reshape(n, -1) for h in hs]
        gaps = []
        for li, (a, b) in enumerate(zip(ins, outs, strict=True)):
            g = E.c4_regular(
                channels_in=1 if li == 0 else width,
                channels_out=width,
                trivial_in=li == 0,
            )
            r = E.mmd_gap(a, b, g, key=jax.random.key(seed + li), n_permutations=50)
            gaps.append(float(r.mmd2))
        out[setting] = gaps
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    print(
        json.dumps(
            main(**{k.replace("-", "_"): v for k, v in vars(p.parse_args()).items()})
        )
    )
