"""WBMM vs depthwise conv: a small WBMM network against the same network with 7x7 depthwise
convolutions (the same 49-pixel receptive field per mixer) on scikit-learn's digits.

The paper's claim (WBMM, ICML 2026) is training speed at equal accuracy: the windowed
matmul replaces a large-kernel depthwise convolution, whose gradient is slow in XLA
(jax-ml/jax#13800). Here the 8x8 digits are resized to 14x14; both networks are
stem (3x3 conv) -> [mixer block, 3x3 depthwise block] -> head, width 24, trained with
AdamW (cosine decay) for 600 steps of 64 (quick: width 16, 100 steps of 32); mixer =
WBMM window 7 (2x2 windows) or a 7x7 ``lax`` depthwise conv. We report test accuracy
and the median time of a jitted training step (ok: accuracy within 2 points or better,
and a faster step), and check that the re-parameterised (folded) WBMM net gives the
same test predictions. A full run needs ImageNet and a GPU (see the spec); this is
the miniature.
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

from jaxkit.vision import WBMMNet, reparameterize

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_init, fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_init, fast_jit


def _data(seed: int):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    x = np.asarray(jax.image.resize(jnp.asarray(x), (len(x), 14, 14, 1), "bilinear"))
    x = (x - x.mean()) / x.std()
    perm = np.random.default_rng(seed).permutation(len(x))
    n_tr = 1400
    tr, te = perm[:n_tr], perm[n_tr:]
    return x[tr], y[tr].astype(np.int32), x[te], y[te].astype(np.int32)


# One-shot programs (initialisation, test predictions) compile with XLA's back-end
# optimisation off: on CPU compiling them costs more than running them (the eager
# initialisation compiled each random draw alone: ~6 s of CPU in quick mode). The timed
# training steps keep XLA's defaults. (``fast_jit`` / ``fast_init``: ``examples/_common.py``.)
def _make(mixer, key, width):
    """(model, BN state), initialised in one compiled program."""
    return fast_init(functools.partial(_build, mixer, width=width), key)


def _build(mixer, key, *, width):
    return eqx.nn.make_with_state(WBMMNet)(
        depths=(2,),
        dims=(width,),
        patterns=((mixer, "D"),),
        in_channels=1,
        num_classes=10,
        window=7,
        stem_strides=(1,),
        layer_scale_init=1.0,
        bn_momentum=0.3,
        key=key,
    )  # short runs: running BN stats must track the weights


@functools.partial(fast_jit, static_argnames="static")
def _predict(arrays, xb, *, static):
    m, s = eqx.combine(arrays, static)
    return jnp.argmax(m(xb, s, inference=True)[0], axis=-1)


def _train(mixer, data, *, steps, batch, width, seed):
    xtr, ytr, xte, yte = data
    key = jax.random.key(seed)
    k_init, k_data = jax.random.split(key)
    model, state = _make(mixer, k_init, width)
    opt = optax.adamw(optax.cosine_decay_schedule(3e-3, steps), weight_decay=0.05)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))

    def loss_fn(m, s, xb, yb):
        logits, s = m(xb, s, inference=False)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean(), s

    @eqx.filter_jit
    def step(m, s, o, xb, yb):
        (val, s), g = eqx.filter_value_and_grad(loss_fn, has_aux=True)(m, s, xb, yb)
        upd, o = opt.update(g, o, eqx.filter(m, eqx.is_array))
        return eqx.apply_updates(m, upd), s, o, val

    def predict(m, s, xb):
        arrays, static = eqx.partition((m, s), eqx.is_array)
        return _predict(arrays, xb, static=static)

    idx = np.asarray(jax.random.randint(k_data, (steps, batch), 0, len(xtr)))
    t0 = time.perf_counter()
    model, state, opt_state, val = step(model, state, opt_state, xtr[idx[0]], ytr[idx[0]])
    jax.block_until_ready(val)
    compile_s = time.perf_counter() - t0
    losses, times = [float(val)], []
    for i in range(1, steps):
        t0 = time.perf_counter()
        model, state, opt_state, val = step(model, state, opt_state, xtr[idx[i]], ytr[idx[i]])
        jax.block_until_ready(val)
        times.append(time.perf_counter() - t0)
        losses.append(float(val))
    pred = np.asarray(predict(model, state, xte))
    acc = float(np.mean(pred == yte))
    extra = {}
    if mixer == "W":
        folded = reparameterize(model, state)
        extra["fold_agree"] = float(np.mean(np.asarray(predict(folded, state, xte)) == pred))
    return {
        "acc": acc,
        "step_s": float(np.median(times)),
        "train_s": float(np.sum(times)),
        "compile_s": compile_s,
        "losses": losses,
        **extra,
    }


def main(
    *, quick: bool = False, seed: int = 0, out_dir: str = "out", data_dir: str | None = None
) -> dict:
    del data_dir  # the digits ship with scikit-learn
    data = _data(seed)
    steps, batch, width = (100, 32, 16) if quick else (600, 64, 24)
    res = {
        name: _train(mixer, data, steps=steps, batch=batch, width=width, seed=seed)
        for name, mixer in (("wbmm_w7", "W"), ("depthwise_7x7", 7))
    }
    w, d = res["wbmm_w7"], res["depthwise_7x7"]
    speedup = d["step_s"] / w["step_s"]

    os.makedirs(out_dir, exist_ok=True)
    rows = ["| network | test acc | step (ms) | train (s) | compile (s) |", "|---|---|---|---|---|"]
    for name, r in res.items():
        rows.append(
            f"| {name} | {r['acc']:.3f} | {1e3 * r['step_s']:.1f} | "
            f"{r['train_s']:.1f} | {r['compile_s']:.1f} |"
        )
    with open(os.path.join(out_dir, "wbmm_digits.md"), "w") as f:
        f.write("\n".join(rows) + "\n")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for name, r in res.items():
        t = np.concatenate([[0.0], np.cumsum([r["step_s"]] * (len(r["losses"]) - 1))])
        axes[0].plot(t, r["losses"], label=f"{name} (acc {r['acc']:.3f})")
    axes[0].set_xlabel("training time (s, median step x steps)")
    axes[0].set_ylabel("train loss")
    axes[0].set_yscale("log")
    axes[0].legend()
    axes[1].bar(list(res), [1e3 * r["step_s"] for r in res.values()], color=["C0", "C1"])
    axes[1].set_ylabel("ms per training step")
    axes[1].set_title(f"WBMM step {speedup:.1f}x faster")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "wbmm_digits.png"), dpi=100)
    plt.close(fig)

    ok = (w["acc"] >= d["acc"] - 0.02) and speedup > 1.0 and w["fold_agree"] >= 0.99
    return {
        "method": "WBMM (vision.WBMMNet)",
        "metric": "test accuracy (digits 14x14)",
        "value": w["acc"],
        "baseline": f"depthwise 7x7 net: {d['acc']:.3f}",
        "ok": bool(ok),
        "step_speedup_vs_depthwise": speedup,
        "wbmm_step_ms": 1e3 * w["step_s"],
        "depthwise_step_ms": 1e3 * d["step_s"],
        "folded_prediction_agreement": w["fold_agree"],
        "steps": steps,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    print(json.dumps(main(**{k.replace("-", "_"): v for k, v in vars(p.parse_args()).items()})))
