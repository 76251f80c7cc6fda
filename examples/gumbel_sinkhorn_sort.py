"""Learning to sort with Gumbel-Sinkhorn (Mena et al. 2018, section 5.1, small scale).

A shared MLP maps each number x_i of a sequence of n uniform numbers to a row of scores
log_alpha[i, :] (position preferences). ``jaxkit.soft.random.gumbel_sinkhorn`` turns the
scores plus Gumbel noise into a doubly-stochastic matrix P whose columns softly pick the
element at each position; training minimises ||P^T x - sort(x)||^2 while an
``exponential_schedule`` anneals the softness. Evaluation uses ``mode="hard"``: the exact
assignment (Hungarian algorithm on the host) of the learned scores, no noise. Metric:
fraction of held-out elements put at their sorted position (chance: 1/n); the exact-order
rate of whole sequences is reported too (chance: 1/n!).
"""

import argparse
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxkit.soft as S

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_jit

R = S.random


def _init(key, n, hidden=32):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (1, hidden)),
        "b1": jnp.zeros((hidden,)),
        "w2": jax.random.normal(k2, (hidden, n)) / math.sqrt(hidden),
        "b2": jnp.zeros((n,)),
    }


def _log_alpha(params, x):  # x: (B, n) -> (B, n, n), row i = scores of element i
    h = jnp.tanh(x[..., None] @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def _hard_accuracy(params, x, key):
    P = R.gumbel_sinkhorn(key, _log_alpha(params, x), softness=1.0, mode="hard", noise="none")
    y = jnp.einsum("bij,bi->bj", P, x)
    hit = np.asarray(y == jnp.sort(x, -1))
    return float(hit.mean()), float(hit.all(-1).mean())


def main(
    *, quick: bool = False, seed: int = 0, out_dir: str = "out", data_dir: str | None = None
) -> dict:
    del data_dir  # synthetic data
    n, batch = (5, 64) if quick else (8, 128)
    steps = 300 if quick else 2000
    key = jax.random.key(seed)
    kp, kd, kt, ke = jax.random.split(key, 4)
    params = _init(kp, n)
    x_test = jax.random.uniform(ke, (1000, n))
    acc0, exact0 = _hard_accuracy(params, x_test, ke)
    sched = R.exponential_schedule(1.0, 0.1, steps)
    opt = optax.adam(1e-2)

    def loss(p, x, k, t):
        P = R.gumbel_sinkhorn(k, _log_alpha(p, x), softness=sched(t), n_iters=20)
        y = jnp.einsum("bij,bi->bj", P, x)
        return jnp.mean((y - jnp.sort(x, -1)) ** 2)

    # quick mode: the step compiles with XLA's back-end optimisation off (examples/_common.py)
    @(fast_jit if quick else jax.jit)
    def step(p, st, t):
        kx, kg = jax.random.split(jax.random.fold_in(kd, t))
        x = jax.random.uniform(kx, (batch, n))
        val, g = jax.value_and_grad(loss)(p, x, kg, t)
        upd, st = opt.update(g, st, p)
        return optax.apply_updates(p, upd), st, val

    st = opt.init(params)
    losses = []
    for t in range(steps):
        params, st, val = step(params, st, jnp.asarray(t))
        losses.append(float(val))
    acc, exact = _hard_accuracy(params, x_test, kt)

    os.makedirs(out_dir, exist_ok=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(8, 3))
    ax[0].semilogy(losses, label="loss (Gumbel samples)")
    ax[0].semilogy([float(sched(t)) for t in range(steps)], label="softness")
    ax[0].set_xlabel("step")
    ax[0].legend()
    P = R.gumbel_sinkhorn(kt, _log_alpha(params, x_test[:1]), softness=0.1, noise="none")
    order = np.argsort(np.asarray(x_test[0]))
    ax[1].imshow(np.asarray(P[0])[order], vmin=0, vmax=1, cmap="viridis")
    ax[1].set_xlabel("position")
    ax[1].set_ylabel("element (by value)")
    ax[1].set_title(f"held-out element accuracy {acc:.3f}")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "gumbel_sinkhorn_sort.png"), dpi=100)
    plt.close(fig)
    chance = 1.0 / n
    return {
        "method": "Gumbel-Sinkhorn",
        "metric": f"held-out element accuracy (n={n})",
        "value": acc,
        "baseline": f"untrained {acc0:.3f}, chance {chance:.3f}",
        "ok": bool(acc > 0.8 and exact > 10.0 / math.factorial(n) and losses[-1] < losses[0]),
        "exact_sequence_rate": exact,
        "untrained_exact_rate": exact0,
        "final_loss": losses[-1],
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    a = p.parse_args()
    print(json.dumps(main(quick=a.quick, seed=a.seed, out_dir=a.out_dir, data_dir=a.data_dir)))
