"""AI engrams on digits: erase, keep only and compose class memories in closed form.

Claim reproduced in miniature (Kwon et al., ICML 2026, arXiv:2606.14997, the MNIST
MLP figure): each class's memory trace in every linear layer is found in closed
form from forward statistics alone, ``E_k = (n_k / N) C^+ C_k w``; subtracting it
from every layer erases the class and keeps the others (the 10x10 class-wise
heat-map), the engram alone is a network that still recognises the class, and
engrams compose by addition.

Set-up (spec training.md §4.5): a bias-free MLP 64-256-128-10 (``jaxkit.nn.MLP``)
trained with Adam 1e-3, batch 64, on 70% of scikit-learn's digits; memories are
the 10 classes; per-class covariances of each layer's inputs on the training set
(one jitted scan for all classes); criteria measured on the held-out 30%.

The same edit on a language model (``lm_*`` fields, informational): the ``tiny_lm``
fixture (a 2-block ``jaxkit.nn`` transformer that counts ``s, s+d, s+2d, ...`` mod
16 with steps d in {1, 2, 3}) with one memory per step, engrams at both blocks' MLPs
(``editing.transformer_taps`` reads their inputs through ``nn``'s read sites);
next-token accuracy per step after erasing each step, or keeping only it.
"""

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import editing, io, nn

SITES = {
    "fc0": lambda m: m.weights[0],
    "fc1": lambda m: m.weights[1],
    "fc2": lambda m: m.weights[2],
}


def _forward(ws, x):
    h1 = jax.nn.relu(x @ ws[0])
    h2 = jax.nn.relu(h1 @ ws[1])
    return h2 @ ws[2], x, h1, h2


def taps(mlp, x):
    """The inputs of the three linear layers (the original network's activations)."""
    _, a0, a1, a2 = _forward(mlp.weights, x)
    return {"fc0": a0, "fc1": a1, "fc2": a2}


def apply_layers(layers, x):
    logits, _, h1, h2 = _forward([layers[f"fc{i}"].w for i in range(3)], x)
    return logits, {"h1": h1, "h2": h2}


def _data(seed):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(x))
    x, y = x[perm], y[perm].astype(np.int32)
    n = int(0.7 * len(x))
    return (x[:n], y[:n]), (x[n:], y[n:])


def _train(key, train, epochs):
    k_init, k_perm = jax.random.split(key)
    mlp = nn.MLP(64, 10, hidden=(256, 128), use_bias=False, key=k_init)
    x, y = map(jnp.asarray, train)
    bs, steps_per = 64, len(train[0]) // 64
    opt = optax.adam(1e-3)

    def loss(m, xb, yb):
        lp = jax.nn.log_softmax(jax.vmap(m)(xb))
        return -jnp.mean(jnp.take_along_axis(lp, yb[:, None], axis=-1))

    @jax.jit
    def run(m):
        def epoch(carry, e):
            idx = jax.random.permutation(jax.random.fold_in(k_perm, e), x.shape[0])
            idx = idx[: steps_per * bs].reshape(steps_per, bs)

            def step(c, i):
                m, s = c
                g = jax.grad(loss)(m, x[i], y[i])
                u, s = opt.update(g, s, m)
                return (optax.apply_updates(m, u), s), None

            return jax.lax.scan(step, carry, idx)[0], None

        return jax.lax.scan(epoch, (m, opt.init(m)), jnp.arange(epochs))[0][0]

    return run(mlp)


def _batches(x, y, bs=128):
    """Pad to whole batches; padded rows get memory id -1 (left out of the statistics)."""
    n = len(x)
    nb = -(-n // bs)
    xp = np.zeros((nb * bs, x.shape[1]), np.float32)
    ip = np.full((nb * bs,), -1, np.int32)
    xp[:n], ip[:n] = x, y
    return jnp.asarray(xp.reshape(nb, bs, -1)), jnp.asarray(ip.reshape(nb, bs))


def _lm_memories(seed):
    """Erase / keep-only each counting step of the ``tiny_lm`` fixture: accuracy per step."""
    params, cfg, _ = io.load_fixture("tiny_lm")

    def sequences(s, batch):
        tok = np.asarray(
            nn.tiny_task("counting", key=jax.random.key(s), batch=batch, length=24).tokens
        )
        return tok, (tok[:, 1] - tok[:, 0]) % cfg.vocab_size - 1  # memory = step - 1

    train = [sequences(1000 * seed + i, 128) for i in range(4)]
    tokens = jnp.asarray(np.stack([tok for tok, _ in train]))
    ids = jnp.asarray(np.stack([mem for _, mem in train]), jnp.int32)
    stats = editing.collect_stats(
        editing.transformer_taps(cfg), params, tokens, ids, num_memories=3
    )
    layers = editing.transformer_layers(params)
    engrams = editing.extract(layers, stats)
    tok, mem = sequences(1000 * seed + 999, 600)

    def step_acc(p):  # next-token accuracy after the 2-token prompt, per step
        pred = jnp.argmax(nn.apply(p, cfg, jnp.asarray(tok)).logits[:, :-1], axis=-1)
        ok = np.asarray(pred == tok[:, 1:])[:, 2:]
        return [round(float(ok[mem == k].mean()), 3) for k in range(3)]

    def edited(edit):
        return [step_acc(editing.set_transformer_layers(params, edit(k))) for k in range(3)]

    erase = edited(lambda k: editing.erase(layers, engrams, k))
    keep = edited(lambda k: editing.keep_only(layers, engrams, k))
    return step_acc(params), erase, keep


def main(
    *, quick: bool = False, seed: int = 0, out_dir: str = "out", data_dir: str | None = None
) -> dict:
    del data_dir  # digits ship with scikit-learn
    t0 = time.perf_counter()
    train, test = _data(seed)
    mlp = _train(jax.random.key(seed), train, 20 if quick else 60)
    t_train = time.perf_counter() - t0

    t1 = time.perf_counter()
    xb, ib = _batches(*train)
    stats = editing.collect_stats(taps, mlp, xb, ib, num_memories=10)
    layers = editing.get_layers(mlp, SITES)
    engrams = editing.extract(layers, stats)
    jax.block_until_ready(engrams)
    t_extract = time.perf_counter() - t1

    xt, yt = jnp.asarray(test[0]), jnp.asarray(test[1])
    crit = editing.criteria(apply_layers, layers, engrams, xt, yt, yt)
    heat = np.asarray(crit.erase_accuracy)

    def class_acc(lay):
        logits, _ = apply_layers(lay, xt)
        correct = np.asarray(jnp.argmax(logits, -1) == yt)
        return np.array([correct[np.asarray(yt) == c].mean() for c in range(10)])

    half = class_acc(editing.keep_only(layers, engrams, jnp.arange(5)))
    pair = class_acc(editing.erase(layers, engrams, jnp.array([3, 8])))
    # the edited weights drop back into the model (the classifier path needs nothing else)
    edited = editing.set_layers(mlp, SITES, editing.erase(layers, engrams, 7))
    acc7 = float(jnp.mean(jnp.argmax(jax.vmap(edited)(xt[yt == 7]), -1) == 7))
    single = []
    if not quick:  # distributed storage: editing one layer at a time is weaker
        for site in SITES:
            one = editing.erase({site: layers[site]}, engrams, jnp.arange(1))
            lay = {**layers, **one}
            single.append(float(class_acc(lay)[0]))

    lm_base, lm_erase, lm_keep = _lm_memories(seed)
    necessity = float(np.mean(crit.necessity))
    specificity = float(np.mean(crit.specificity))
    sufficiency = float(np.mean(crit.sufficiency))
    os.makedirs(out_dir, exist_ok=True)
    _plot(out_dir, heat, np.asarray(crit.keep_accuracy))
    ok = necessity < 0.10 and specificity > 0.95 and sufficiency > 0.95
    return {
        "method": "editing: AI engrams (closed-form erase / keep-only / compose)",
        "metric": "mean erased-class test accuracy (erase each class, all 3 layers, alpha=1)",
        "value": necessity,
        "baseline": f"retained classes {specificity:.3f}; engram-only on its class "
        f"{sufficiency:.3f}; base {float(np.mean(crit.base_accuracy)):.3f}",
        "ok": bool(ok),
        "erased_class_acc": necessity,
        "retained_acc": specificity,
        "engram_only_acc": sufficiency,
        "base_acc": float(np.mean(crit.base_accuracy)),
        "reactivation_on": float(np.mean(crit.reactivation_on)),
        "reactivation_off": float(np.mean(crit.reactivation_off)),
        "keep_0_4_on_0_4": float(np.mean(half[:5])),
        "keep_0_4_on_5_9": float(np.mean(half[5:])),
        "erase_3_8": [float(pair[3]), float(pair[8])],
        "erase_3_8_others_min": float(np.min(np.delete(pair, [3, 8]))),
        "erase_7_via_set_layers": acc7,
        "single_layer_erase_class0": single,
        "lm_base_step_acc": lm_base,
        "lm_erase_step_acc": lm_erase,  # row: erased step 1, 2, 3; column: evaluated step
        "lm_keep_only_step_acc": lm_keep,
        "lm_erased_step_acc": float(np.mean(np.diag(lm_erase))),
        "lm_other_steps_min": float(np.min(np.asarray(lm_erase)[~np.eye(3, dtype=bool)])),
        "train_s": round(t_train, 1),
        "stats_and_extract_s": round(t_extract, 2),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _plot(out_dir, heat, keep):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, mat, title in (
        (axes[0], heat, "erase class (row): accuracy per class"),
        (axes[1], keep, "engram only (row): accuracy per class"),
    ):
        im = ax.imshow(mat, vmin=0, vmax=1, cmap="viridis")
        ax.set_xlabel("evaluated class")
        ax.set_ylabel("edited class")
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
    fig.colorbar(im, ax=axes, shrink=0.8)
    fig.savefig(os.path.join(out_dir, "engram_digits.png"), dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    print(json.dumps(main(**{k.replace("-", "_"): v for k, v in vars(p.parse_args()).items()})))
