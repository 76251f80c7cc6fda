"""FeatJND on digits: shaped vs Gaussian distortion at matched strength, and token-wise
quantization with FeatJND-guided steps (spec vision.md section 3.5).

Claim checked in miniature (Zhao et al., arXiv 2601.21933): noise shaped by the FeatJND
tolerance map hurts the frozen head less than isotropic Gaussian noise of the same
per-sample l2 norm (same feature SNR), and quantising each spatial token with a step
proportional to its mean tolerance beats uniform steps and the same steps randomly
permuted, at an identical nominal budget ``mean_t Delta_t^2``. The FeatJND training
objective is reconstructed [R] (the authors' code is unpublished).

Set-up: scikit-learn's digits (8x8, 1797 images, offline). Backbone ``g``: conv16 ->
conv32 (ReLU, stride 1; the split point, f in R^{32x8x8}); head ``h``:
``jaxkit.nn.SmallCNN(32, 10, channels=(32,))`` (conv32 -> global average pool -> dense).
Quick mode halves the widths (conv8 -> conv16 | conv16) and shortens both trainings
(200 network steps, 150 estimator steps).
The network is trained, then frozen; the estimator is trained against the head on the
training features. Budgets are given as multiples of the test features' RMS. ReLU
features have exact zeros that quantise for free, so the true MSE is reported next to
the nominal budget.
"""

import argparse
import functools
import json
import os
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit.nn import SmallCNN
from jaxkit.vision import featjnd as J

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_init, fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_init, fast_jit


class Backbone(eqx.Module):
    c1: eqx.nn.Conv2d
    c2: eqx.nn.Conv2d

    def __init__(self, widths, key):
        k1, k2 = jax.random.split(key)
        self.c1 = eqx.nn.Conv2d(1, widths[0], 3, padding=1, key=k1)
        self.c2 = eqx.nn.Conv2d(widths[0], widths[1], 3, padding=1, key=k2)

    def __call__(self, x):  # [1, 8, 8] -> [widths[1], 8, 8]
        return jax.nn.relu(self.c2(jax.nn.relu(self.c1(x))))


def _data(seed):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    perm = np.random.default_rng(seed).permutation(len(x))
    x, y = x[perm], y[perm].astype(np.int32)
    return (x[:1200], y[:1200]), (x[1200:], y[1200:])


NET_OPT = optax.adam(1e-2)  # built once: the jitted steps see the same optimizer objects
EST_OPT = optax.adam(1e-2)


def _build(widths, hidden, net_steps, *, key):
    """Every network, the network's optimizer state and its training's per-step keys (the
    keys the eager build and the scanned training used)."""
    k1, k2, k3 = jax.random.split(jax.random.fold_in(key, 1), 3)
    c = widths[1]
    net = (Backbone(widths, k1), SmallCNN(c, 10, channels=(c,), key=k2))
    est = J.FeatJNDEstimator(c, hidden=hidden, key=jax.random.fold_in(key, 2))
    return net, NET_OPT.init(net), est, jax.random.split(k3, net_steps)


def _init(key, widths, hidden, net_steps):
    """:func:`_build` in one program compiled with ``fast_jit`` (a one-shot: eager, each
    random draw compiles on its own; at -O3 the one program took 5 s of CPU to compile)."""
    return fast_init(functools.partial(_build, widths, hidden, net_steps), key)


def _net_loss(n, xb, yb):
    logits = jax.vmap(lambda a: n[1](n[0](a)))(xb)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))


# The network's training is a Python loop over one jitted step, not a ``lax.scan``: XLA's
# CPU back end runs these convolutions inside a while loop about 20x slower than in a step
# compiled alone (measured: 80 vs 4 ms of CPU per network step). The draws are the scan's.
@functools.partial(jax.jit, static_argnames="batch")
def _net_step(n, state, keys, i, x, y, *, batch):
    idx = jax.random.randint(keys[i], (batch,), 0, x.shape[0])
    g = jax.grad(_net_loss)(n, x[idx], y[idx])
    u, state = NET_OPT.update(g, state, n)
    return optax.apply_updates(n, u), state


def _train_net(net, state, keys, train, batch):
    x, y = map(jnp.asarray, train)
    for i in range(keys.shape[0]):
        net, state = _net_step(net, state, keys, i, x, y, batch=batch)
    return net


def _accuracy(head, f, y):
    return jnp.mean((jnp.argmax(jax.vmap(head)(f), -1) == y).astype(jnp.float32))


# one-shot programs (each runs once): compiled with ``fast_jit``, LLVM at -O0
@functools.partial(fast_jit, static_argnames="n_train")
def _features(backbone, head, x, y_te, *, n_train):
    """Features of the training and test images and the clean test accuracy."""
    f = jax.vmap(backbone)(x)
    return f[:n_train], f[n_train:], _accuracy(head, f[n_train:], y_te)


_MODES = ("featjnd", "uniform", "permute")


def _quant_table(head, f, y, s, budgets, key):
    """The quantization table (per budget and mode: accuracy, true MSE, nominal MSE
    ``mean Delta^2 / 12``); budgets in multiples of the feature RMS."""
    rms = jnp.sqrt(jnp.mean(f**2))
    out = {}
    for mode in _MODES:
        rows = []
        for i in range(budgets.shape[0]):
            st = J.token_steps(s, budget_rms=budgets[i] * rms, mode=mode, key=key)
            q = J.quantize(f, st)
            rows.append((_accuracy(head, q, y), jnp.mean((q - f) ** 2), jnp.mean(st**2) / 12))
        out[mode] = dict(
            zip(("acc", "mse", "nominal"), map(jnp.stack, zip(*rows, strict=True)), strict=True)
        )
    return rms, out


@jax.jit
def _evaluate(head, est, f, y, alphas, budgets, key):
    """Tolerance map, the distortion curve (one sweep over alpha) and the quantization
    table, in one program."""
    s = J.tolerance_map(est, f)
    curve = J.matched_strength_curve(head, f, y, s, alphas, key=jax.random.fold_in(key, 10))
    return curve, *_quant_table(head, f, y, s, budgets, jax.random.fold_in(key, 20))


# `matched_mse=True`: token-wise and per-feature FeatJND steps, and the per-feature steps
# shuffled, each at the true MSE of the uniform steps (not at their nominal budget)
_MATCHED = {
    "featjnd": ("featjnd", (2, 3)),
    "featjnd_feature": ("featjnd", (1, 2, 3)),
    "permute_feature": ("permute", (1, 2, 3)),
}
# the uniform steps' budgets (multiples of the feature RMS) that `matched_mse=True` matches
_MATCHED_BUDGETS = (1.0, 2.0, 3.0, 4.0)


@jax.jit
def _matched_mse(head, est, f, y, budgets, key):
    """Per uniform budget (multiples of the feature RMS): uniform's accuracy and true MSE,
    and each of ``_MATCHED`` at that true MSE (accuracy, and the nominal budget it took,
    found by 40 geometric bisection steps over [0.01, 200] times uniform's budget)."""
    s = J.tolerance_map(est, f)
    rms = jnp.sqrt(jnp.mean(f**2))
    k = jax.random.fold_in(key, 30)

    def run(mode, axes, b):
        q = J.quantize(f, J.token_steps(s, budget_rms=b, mode=mode, key=k, token_axes=axes))
        return _accuracy(head, q, y), jnp.mean((q - f) ** 2)

    def one(c):
        acc_u, mse_u = run("uniform", (2, 3), c * rms)
        out = {"acc_uniform": acc_u, "mse": mse_u}
        for name, (mode, axes) in _MATCHED.items():

            def halve(_, lohi, mode=mode, axes=axes):
                lo, hi = lohi
                mid = jnp.sqrt(lo * hi)
                below = run(mode, axes, mid)[1] < mse_u
                return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

            lo, _ = jax.lax.fori_loop(0, 40, halve, (0.01 * c * rms, 200.0 * c * rms))
            out[f"acc_{name}"] = run(mode, axes, lo)[0]
            out[f"nominal_{name}"] = lo / rms
        return out

    return jax.lax.map(one, budgets)


def main(
    *,
    quick: bool = False,
    seed: int = 0,
    out_dir: str = "out",
    data_dir: str | None = None,
    matched_mse: bool = False,
) -> dict:
    """Train, fit the estimator, evaluate. ``matched_mse=True`` adds ``res["matched_mse"]``:
    per budget of the uniform steps, the accuracy of token-wise and per-feature FeatJND
    steps and of the per-feature steps shuffled, each at uniform's true MSE (the per-feature
    steps spend their nominal budget on features that are zero and quantise for free; docs:
    vision, "FeatJND")."""
    del data_dir  # digits ship with scikit-learn
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    train, test = _data(seed)
    widths = (8, 16) if quick else (16, 32)  # quick: a narrower net (CPU time / 8)
    net0, net_state, est0, keys = _init(key, widths, 8 if quick else 32, 200 if quick else 400)
    backbone, head = _train_net(net0, net_state, keys, train, 64 if quick else 128)
    y_te = jnp.asarray(test[1])
    x_all = jnp.asarray(np.concatenate([train[0], test[0]]))
    f_tr, f_te, clean_acc = _features(backbone, head, x_all, y_te, n_train=len(train[0]))

    fit = J.fit_featjnd(
        est0, head, f_tr, key=jax.random.fold_in(key, 3), optimizer=EST_OPT,
        steps=150 if quick else 500, batch_size=32 if quick else 64, eps=0.02, n_noise=2,
    )  # fmt: skip
    alphas, budgets = (1.0, 2.0, 4.0, 8.0), (0.5, 1.0, 2.0, 3.0)
    curve, rms, table = _evaluate(
        head, fit.estimator, f_te, y_te, jnp.asarray(alphas), jnp.asarray(budgets), key
    )
    rows = [
        {"alpha": a, "snr_db": float(curve.snr_db[i]),
         "acc_featjnd": float(curve.acc_featjnd[i]), "acc_gaussian": float(curve.acc_gaussian[i])}
        for i, a in enumerate(alphas)
    ]  # fmt: skip

    rms, table = float(rms), jax.tree.map(np.asarray, table)
    qrows = []
    for i, c in enumerate(budgets):
        row = {"budget_rms": c * rms, "budget_x_feature_rms": c}
        for mode in _MODES:
            for name in ("acc", "mse", "nominal"):
                row[f"{name}_{mode}"] = float(table[mode][name][i])
        qrows.append(row)

    gains = [r["acc_featjnd"] - r["acc_gaussian"] for r in rows if r["alpha"] >= 2]
    coarse = qrows[-2:]
    q_gain = min(
        np.mean([r["acc_featjnd"] - r[f"acc_{b}"] for r in coarse]) for b in ("uniform", "permute")
    )
    ok = bool(min(gains) > 0 and q_gain > 0)
    res = {
        "method": "FeatJND",
        "metric": "mean accuracy gain over Gaussian at matched l2 (alpha >= 2)",
        "value": float(np.mean(gains)),
        "baseline": 0.0,
        "ok": ok,
        "clean_acc": float(clean_acc),
        "quant_gain_coarse": float(q_gain),
        "distortion": rows,
        "quantization": qrows,
        "estimator_final_loss": float(fit.losses[-1]),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if matched_mse:
        mm = jax.tree.map(np.asarray, _matched_mse(
            head, fit.estimator, f_te, y_te, jnp.asarray(_MATCHED_BUDGETS), key
        ))  # fmt: skip
        res["matched_mse"] = [
            {"uniform_budget_x_feature_rms": c, **{k: float(v[i]) for k, v in mm.items()}}
            for i, c in enumerate(_MATCHED_BUDGETS)
        ]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "featjnd_digits.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    return res


def summarize(runs):
    """Mean and spread (sample std, min, max) over seeds of the accuracies per alpha and
    per budget, and of the two headline gains."""

    def stat(v):
        v = np.asarray(v, float)
        sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
        return {"mean": round(float(v.mean()), 4), "std": round(sd, 4),
                "min": round(float(v.min()), 4), "max": round(float(v.max()), 4)}  # fmt: skip

    dist = [
        {"alpha": row["alpha"], **{k: stat([r["distortion"][i][k] for r in runs])
                                   for k in ("acc_featjnd", "acc_gaussian")}}
        for i, row in enumerate(runs[0]["distortion"])
    ]  # fmt: skip
    modes = ("acc_featjnd", "acc_uniform", "acc_permute")
    quant = [
        {"budget_x_feature_rms": row["budget_x_feature_rms"],
         **{k: stat([r["quantization"][i][k] for r in runs]) for k in modes}}
        for i, row in enumerate(runs[0]["quantization"])
    ]  # fmt: skip
    matched = {}
    if "matched_mse" in runs[0]:
        pairs = (("featjnd", "uniform"), ("featjnd_feature", "uniform"),
                 ("featjnd_feature", "permute_feature"))  # fmt: skip
        matched = {"matched_mse": [
            {"uniform_budget_x_feature_rms": row["uniform_budget_x_feature_rms"],
             **{f"{a}-{b}": {**stat([r["matched_mse"][i][f"acc_{a}"]
                                      - r["matched_mse"][i][f"acc_{b}"] for r in runs]),
                             "above": sum(r["matched_mse"][i][f"acc_{a}"]
                                          > r["matched_mse"][i][f"acc_{b}"] for r in runs)}
                for a, b in pairs},
             "nominal_featjnd_feature": stat([r["matched_mse"][i]["nominal_featjnd_feature"]
                                              for r in runs])}
            for i, row in enumerate(runs[0]["matched_mse"])
        ]}  # fmt: skip
    return {
        "seeds": len(runs),
        "gain_over_gaussian": stat([r["value"] for r in runs]),
        "quant_gain_coarse": stat([r["quant_gain_coarse"] for r in runs]),
        "ok_in_seeds": sum(r["ok"] for r in runs),
        "distortion": dist,
        "quantization": quant,
        **matched,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="run seeds seed..seed+n-1, summarize")
    p.add_argument("--out", default="out")
    p.add_argument("--matched-mse", action="store_true", help="add the equal-true-MSE table")
    a = p.parse_args()
    runs = [
        main(quick=a.quick, seed=s, out_dir=a.out, matched_mse=a.matched_mse)
        for s in range(a.seed, a.seed + a.seeds)
    ]
    if a.seeds > 1:
        print(json.dumps(summarize(runs), indent=1))
    r = runs[0]
    print(f"clean accuracy {r['clean_acc']:.3f}")
    print("alpha  SNR(dB)  acc FeatJND  acc Gaussian")
    for row in r["distortion"]:
        print(
            f"{row['alpha']:5.0f}  {row['snr_db']:7.1f}  {row['acc_featjnd']:11.3f}  "
            f"{row['acc_gaussian']:12.3f}"
        )
    print("budget(xRMS)  FeatJND  uniform  permute   (true MSE: FeatJND / uniform / permute)")
    for row in r["quantization"]:
        print(
            f"{row['budget_x_feature_rms']:12.1f}  {row['acc_featjnd']:7.3f}  "
            f"{row['acc_uniform']:7.3f}  {row['acc_permute']:7.3f}   {row['mse_featjnd']:.4f} / "
            f"{row['mse_uniform']:.4f} / {row['mse_permute']:.4f}"
        )
    if "matched_mse" in r:
        print("at uniform's true MSE: budget  uniform  FeatJND  per-feature  shuffled (nominal)")
        for row in r["matched_mse"]:
            print(
                f"{row['uniform_budget_x_feature_rms']:22.1f}  {row['acc_uniform']:7.3f}  "
                f"{row['acc_featjnd']:7.3f}  {row['acc_featjnd_feature']:11.3f}  "
                f"{row['acc_permute_feature']:8.3f} (x{row['nominal_featjnd_feature']:.1f})"
            )
    print(json.dumps({k: r[k] for k in ("method", "metric", "value", "baseline", "ok", "seconds")}))
