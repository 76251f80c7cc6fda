"""PRISM on digits: gauge-invariant DP-LoRA vs naive DP-LoRA (spec training.md §1.5).

Claim reproduced in miniature (Wang & Zhang, ICML 2026, arXiv:2606.00944): naive
DP-LoRA (DP-Adam on the factors) clips and noises a gauge-dependent quantity, so
rescaling the factors ``(a c, b / c)`` (same model) changes its noise on ``Z``
(``tau^2 (m ||b||^2 + n ||a||^2)``) and its accuracy; PRISM's release depends
only on ``Z`` (noise energy ``std^2 r (m + n - r)`` per module) and gives the
same accuracy for every gauge.

Set-up: an MLP 64-128-128-10 trained non-privately on half of scikit-learn's
digits ("public"); the other half, shifted one pixel ("private"), is the
fine-tuning task: rank-4 LoRA on both hidden layers (spectral init), Poisson
batches (q = 64/N), C = 1, delta = 1e-5, sigma calibrated for each epsilon;
gauges c in {0.03, 1, 30} (gauge condition number ~1e3), more in the full run.
A full run (Gemma-class model, Math-10K) needs a GPU and local weights.
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

from jaxkit import privacy
from jaxkit.privacy import lowrank as L

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_jit

RANK, CLIP, DELTA = 4, 1.0, 1e-5


def _mlp(p, x):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    h = jax.nn.relu(h @ p["w2"] + p["b2"])
    return h @ p["w3"] + p["b3"]


def _ce(p, x, y):
    lp = jax.nn.log_softmax(_mlp(p, x))
    return -jnp.mean(jnp.take_along_axis(lp, y[:, None], axis=-1))


def _data(seed):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int32)
    perm = np.random.default_rng(seed).permutation(len(x))
    x, y = x[perm], y[perm]
    pub = (x[:597], y[:597])
    # domain shift: every image moved one pixel to the right (wrapping)
    xp = np.roll(x[597:].reshape(-1, 8, 8), 1, axis=2).reshape(-1, 64)
    yp = y[597:]
    return pub, (xp[:800], yp[:800]), (xp[800:], yp[800:])


def _init_mlp(key):
    ks = jax.random.split(key, 3)
    dims = [(64, 128), (128, 128), (128, 10)]
    p = {}
    for i, ((a, b), k) in enumerate(zip(dims, ks, strict=True), 1):
        p[f"w{i}"] = jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a)
        p[f"b{i}"] = jnp.zeros((b,), jnp.float32)
    return p


def _pretrain(key, pub, steps, jit=jax.jit):
    # quick mode: the initialisation's draws in one fast_jit program (eager, each draw of a
    # new shape compiles a -O3 program of its own: ~0.5 s of CPU each)
    p = _init_mlp(key) if jit is jax.jit else jit(_init_mlp)(key)
    opt = optax.adam(1e-2)
    x, y = map(jnp.asarray, pub)

    @jit
    def run(p):
        def body(c, _):
            p, s = c
            g = jax.grad(_ce)(p, x, y)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (p, opt.init(p)), None, length=steps)[0][0]

    return run(p)


def _make_trainer(method, base, train, steps, q, max_b, jit=jax.jit):
    x, y = map(jnp.asarray, train)
    n = len(train[0])
    denom = q * n

    def loss(lora, ex):
        xi, yi = ex
        return _ce(privacy.lora_merge(base, lora), xi[None], yi[None])

    def tx_for(sigma, key):
        if method == "prism":
            return privacy.prism(1e-2, clip_norm=CLIP, noise_multiplier=sigma, denom=denom, key=key)
        if method == "naive":
            return privacy.naive_dp_lora(
                1e-2, clip_norm=CLIP, noise_multiplier=sigma, denom=denom, key=key
            )
        return privacy.ffa_lora(
            1e-2, clip_norm=CLIP, noise_multiplier=sigma, denom=denom, key=key, frozen="b"
        )

    @jit
    def run(lora, sigma, key):
        k_noise, k_data = jax.random.split(key)
        tx = tx_for(sigma, k_noise)

        def body(c, t):
            lo, st = c
            pb = privacy.poisson_batch(
                key=jax.random.fold_in(k_data, t), num_examples=n, q=q, max_batch_size=max_b
            )
            g = privacy.per_example_grads(loss, lo, (x[pb.indices], y[pb.indices]), mask=pb.mask)
            u, st = tx.update(g, st, lo)
            energy = next(s.noise_energy for s in st if isinstance(s, privacy.PrivatizeState))
            return (optax.apply_updates(lo, u), st), energy

        (lo, _), energies = jax.lax.scan(body, (lora, tx.init(lora)), jnp.arange(steps))
        return lo, energies

    return run


def _gauge(lora, c):
    return jax.tree.map(
        lambda f: L.LoraFactors(f.a * c, f.b / c) if f is not None else None,
        lora,
        is_leaf=lambda v: v is None or isinstance(v, L.LoraFactors),
    )


def _factor_list(lora):
    return [
        f
        for f in jax.tree.leaves(lora, is_leaf=lambda v: isinstance(v, L.LoraFactors))
        if isinstance(f, L.LoraFactors)
    ]


def _noise_fn(method, key, draws=200, jit=jax.jit):
    """Jitted Monte-Carlo energy on Z of one release's noise (zero gradients, sigma C = 1)."""
    if method == "prism":
        agg = privacy.prism_privatize(clip_norm=CLIP, noise_multiplier=1.0, denom=1.0, key=key)
    else:
        agg = privacy.dp_aggregate(clip_norm=CLIP, noise_multiplier=1.0, denom=1.0, key=key)

    @jit
    def run(lora):
        zero = jax.tree.map(lambda v: jnp.zeros((1, *v.shape), v.dtype), lora)

        def one(t):
            st = privacy.PrivatizeState(t, key, jnp.zeros([], jnp.float32))
            d, _ = agg.update(zero, st, lora)
            return sum(
                jnp.sum(L.tangent_dense(f, df) ** 2)
                for f, df in zip(_factor_list(lora), _factor_list(d), strict=True)
            )

        return jnp.mean(jax.vmap(one)(jnp.arange(draws, dtype=jnp.int32)))

    return run


def main(
    *, quick: bool = False, seed: int = 0, out_dir: str = "out", data_dir: str | None = None
) -> dict:
    del data_dir  # digits ship with scikit-learn
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    pub, train, test = _data(seed)
    # quick mode: its programs (pre-training, the three trainers' 30 steps, accuracy, noise
    # draws) compile with XLA's back-end optimisation off (examples/_common.py's fast_jit):
    # their compile, not their run, is most of its time. Full mode keeps jax.jit.
    jit = fast_jit if quick else jax.jit
    base0 = _pretrain(jax.random.fold_in(key, 1), pub, 150 if quick else 400, jit)
    lora_init = functools.partial(
        privacy.lora_init, targets=r"^w[12]$", rank=RANK, method="spectral"
    )  # quick: its two spectral inits (SVDs) in one fast_jit program
    base, lora = (jit(lora_init) if quick else lora_init)(base0, key=jax.random.fold_in(key, 2))
    eps_list = [3.0] if quick else [1.0, 3.0, 8.0]
    gauges = [0.03, 1.0, 30.0] if quick else [0.03, 0.1, 1.0, 10.0, 30.0]
    steps = 30 if quick else 300
    n = len(train[0])
    q = 64 / n
    xt, yt = map(jnp.asarray, test)
    acc_fn = jit(
        lambda lo: jnp.mean(
            (jnp.argmax(_mlp(privacy.lora_merge(base, lo), xt), -1) == yt).astype(jnp.float32)
        )
    )
    acc0 = float(acc_fn(lora))
    trainers = {m: _make_trainer(m, base, train, steps, q, 128, jit) for m in ("prism", "naive")}
    # FFA-LoRA starts from the original weights (a = 0, b random and frozen)
    trainers["ffa"] = _make_trainer("ffa", base0, train, steps, q, 128, jit)
    acc_ffa = jit(
        lambda lo: jnp.mean(
            (jnp.argmax(_mlp(privacy.lora_merge(base0, lo), xt), -1) == yt).astype(jnp.float32)
        )
    )
    ffa_init = (jit(_ffa_init) if quick else _ffa_init)(lora, jax.random.fold_in(key, 3))
    table, energy_check = [], []
    for eps in eps_list:
        sigma = privacy.calibrate_sigma(epsilon=eps, delta=DELTA, q=q, steps=steps)
        k = jax.random.fold_in(key, int(eps * 10))
        for method in ("prism", "naive"):
            for c in gauges:
                lo, energies = trainers[method](_gauge(lora, c), jnp.float32(sigma), k)
                table.append({"eps": eps, "method": method, "gauge": c, "acc": float(acc_fn(lo))})
                if method == "prism" and c == 1.0:
                    std = sigma * CLIP / (q * n)
                    closed = std**2 * sum(
                        f.a.shape[-1] * (f.a.shape[-2] + f.b.shape[-2] - f.a.shape[-1])
                        for f in _factor_list(lora)
                    )
                    energy_check.append(float(jnp.mean(energies)) / closed)
        lo, _ = trainers["ffa"](ffa_init, jnp.float32(sigma), k)
        table.append({"eps": eps, "method": "ffa", "gauge": 1.0, "acc": float(acc_ffa(lo))})

    # noise on Z against gauge conditioning (one release, zero gradients, sigma C = 1)
    cs = np.geomspace(0.05, 20.0, 5 if quick else 13)
    kz = jax.random.fold_in(key, 4)
    nfn = {m: _noise_fn(m, kz, jit=jit) for m in ("prism", "naive")}
    noise = {"prism": [], "naive": [], "naive_formula": [], "prism_formula": []}
    for c in cs:
        lc = _gauge(lora, float(c))
        noise["prism"].append(float(nfn["prism"](lc)))
        noise["naive"].append(float(nfn["naive"](lc)))
        fl = _factor_list(lc)
        noise["naive_formula"].append(sum(float(L.naive_noise_energy(f, tau=1.0)) for f in fl))
        noise["prism_formula"].append(sum(float(L.prism_noise_energy(f, std=1.0)) for f in fl))
    naive_rel = float(
        np.max(np.abs(np.array(noise["naive"]) / np.array(noise["naive_formula"]) - 1))
    )
    prism_rel = float(
        np.max(np.abs(np.array(noise["prism"]) / np.array(noise["prism_formula"]) - 1))
    )

    def accs(method, eps):
        return [r["acc"] for r in table if r["method"] == method and r["eps"] == eps]

    prism_spread = max(max(accs("prism", e)) - min(accs("prism", e)) for e in eps_list)
    naive_spread = max(max(accs("naive", e)) - min(accs("naive", e)) for e in eps_list)
    logged_rel = float(np.max(np.abs(np.array(energy_check) - 1)))

    os.makedirs(out_dir, exist_ok=True)
    _plot(out_dir, cs, noise, table, eps_list, gauges)
    with open(os.path.join(out_dir, "prism_digits_table.json"), "w") as fh:
        json.dump(table, fh, indent=1)
    ok = (
        prism_spread <= 0.01
        and naive_spread > 0.05
        and naive_rel < 0.25
        and prism_rel < 0.1
        and logged_rel < 0.05
    )
    prism_main = float(
        np.mean([r["acc"] for r in table if r["method"] == "prism" and r["gauge"] == 1.0])
    )
    naive_main = float(
        np.mean([r["acc"] for r in table if r["method"] == "naive" and r["gauge"] == 1.0])
    )
    return {
        "method": "privacy: PRISM (gauge-invariant DP-LoRA)",
        "metric": f"test acc spread over gauges c in {gauges} (PRISM)",
        "value": prism_spread,
        "baseline": f"naive DP-LoRA spread {naive_spread:.3f}",
        "ok": bool(ok),
        "prism_acc": prism_main,
        "naive_acc": naive_main,
        "acc_before_finetune": acc0,
        "logged_noise_energy_rel_err": logged_rel,
        "naive_noise_formula_rel_err": naive_rel,
        "prism_noise_formula_rel_err": prism_rel,
        "epsilons": eps_list,
        "steps": steps,
        "table": table,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _ffa_init(lora, key):
    """FFA start: frozen random b, trainable a = 0 (same shapes as the PRISM factors)."""
    fl = _factor_list(lora)
    keys = iter(jax.random.split(key, len(fl)))

    def one(f):
        if not isinstance(f, L.LoraFactors):
            return f
        b = 0.02 * jax.random.normal(next(keys), f.b.shape, f.b.dtype)
        return L.LoraFactors(jnp.zeros_like(f.a), b)

    return jax.tree.map(one, lora, is_leaf=lambda v: v is None or isinstance(v, L.LoraFactors))


def _plot(out_dir, cs, noise, table, eps_list, gauges):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax = axes[0]
    ax.loglog(cs, noise["naive"], "o", label="naive DP-LoRA (measured)")
    ax.loglog(cs, noise["naive_formula"], "-", label=r"$\tau^2(m\|B\|^2+n\|A\|^2)$")
    ax.loglog(cs, noise["prism"], "s", label="PRISM (measured)")
    ax.loglog(cs, noise["prism_formula"], "--", label=r"$std^2\, r(m+n-r)$")
    ax.set_xlabel("gauge scaling c  (A c, B / c)")
    ax.set_ylabel("noise energy on Z per release")
    ax.legend(fontsize=7)
    ax = axes[1]
    width = 0.8 / (2 * len(gauges) + 1)
    xs = np.arange(len(eps_list))
    i = 0
    for method in ("prism", "naive"):
        for c in gauges:
            v = [
                next(
                    r["acc"]
                    for r in table
                    if r["method"] == method and r["gauge"] == c and r["eps"] == e
                )
                for e in eps_list
            ]
            ax.bar(xs + i * width, v, width, label=f"{method} c={c:g}")
            i += 1
    v = [next(r["acc"] for r in table if r["method"] == "ffa" and r["eps"] == e) for e in eps_list]
    ax.bar(xs + i * width, v, width, label="FFA-LoRA")
    ax.set_xticks(xs + 0.4 - width / 2, [f"eps={e:g}" for e in eps_list])
    ax.set_ylabel("private test accuracy")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "prism_digits.png"), dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    res = main(**{k.replace("-", "_"): v for k, v in vars(p.parse_args()).items()})
    res.pop("table")
    print(json.dumps(res))
