"""FacRNN: jitted training vs Python loops of the same model; PC/TC vs NumPy float64.

1. ``train_step_vs_python_loop``: one jitted FacRNN training step (loss over a minibatch of
   128 time steps, gradient, AdamW update; ``neuro.facrnn_loss``) against the same step
   written as a per-time-step Python loop over the minibatch (read-in, draw, read-out and
   likelihood per time step, then the PC/KL terms and the gradient, run eagerly; anchor
   ``python_loop``). Both use the same draws; ``ours_err`` is the loss difference.
   Target >= 10x.
2. ``fit_scanned_vs_python_loop`` (informational): ``neuro.fit`` (every AdamW step of the
   FacRNN loss in one jitted ``lax.scan``) against the same training written as a Python
   loop that calls one jitted step per iteration (same model, loss, optimiser, minibatch
   sampler; anchor ``python_loop``), 500 steps (``--full``: 5000). No target.
   Sizes throughout: N = 20 neurons, K = 6 (G = 2), 1000 samples, batch 128, beta = 20.
3. ``pc_estimator_vs_numpy_f64``: ``neuro.partial_correlation`` (float32, jitted) against a
   vectorised NumPy float64 transcription of the spec's minibatch formula (anchor
   ``numpy_f64``) at M = 512, K = 6, G = 2 and G = K (the TC); ``ours_err`` is the absolute
   difference (agreement target <= 1e-5 relative, reported in the note).
"""

import time

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import numpy as np
import optax
from scipy.special import logsumexp

from jaxkit import neuro

N, K, G, S, BATCH = 20, 6, 2, 1000, 128


def _data():
    x = jax.random.normal(jax.random.key(1), (S + 1, N))
    return x[:-1], x[1:]


def _step(model, opt_state, xp, xn, key, i):
    kb, kz = jax.random.split(jax.random.fold_in(key, i))
    idx = jax.random.permutation(kb, S)[:BATCH]

    def f(m):
        return neuro.facrnn_loss(m, xp[idx], xn[idx], key=kz, n_total=float(S), beta=20.0)

    (loss, _), g = jax.value_and_grad(f, has_aux=True)(model)
    opt = optax.adamw(1e-3, weight_decay=1e-2)
    upd, opt_state = opt.update(g, opt_state, model)
    return optax.apply_updates(model, upd), opt_state, loss


_step_jit = jax.jit(_step)


def _python_loop(model, xp, xn, key, steps):
    opt_state = optax.adamw(1e-3, weight_decay=1e-2).init(model)
    losses = []
    for i in range(steps):
        model, opt_state, loss = _step_jit(model, opt_state, xp, xn, key, i)
        losses.append(loss)
    return jax.block_until_ready((model, jnp.stack(losses)))


def _train_step(model, opt_state, xp, xn, key):
    def f(m):
        return neuro.facrnn_loss(m, xp, xn, key=key, n_total=float(S), beta=20.0)

    (loss, _), g = jax.value_and_grad(f, has_aux=True)(model)
    opt = optax.adamw(1e-3, weight_decay=1e-2)
    upd, opt_state = opt.update(g, opt_state, model)
    return optax.apply_updates(model, upd), opt_state, loss


def _loop_loss(model, xp, xn, eps):
    """The same loss written time step by time step (a naive RNN implementation)."""
    ls = neuro.posterior_log_std(float(S), K)
    sig = jnp.exp(model.log_sigma_x)
    mus, zs, nll = [], [], 0.0
    for t in range(xp.shape[0]):
        mu_t = model.B @ jnp.tanh(xp[t]) + model.b
        z_t = mu_t + jnp.exp(ls) * eps[t]
        r = (xn[t] - (model.A @ z_t + model.a)) / sig
        nll = nll - jnp.sum(-0.5 * r * r - model.log_sigma_x - 0.5 * np.log(2 * np.pi))
        mus.append(mu_t)
        zs.append(z_t)
    mu, z = jnp.stack(mus), jnp.stack(zs)
    lsm = jnp.full_like(mu, ls)
    kl = jnp.mean(neuro.kl_std_normal(mu, lsm))
    pc = neuro.partial_correlation(z, mu, lsm, n_groups=G, n_total=float(S))
    off = neuro.offblock_penalty(model)
    return nll / xp.shape[0] + kl + 20.0 * pc + 0.0 * off


def _loop_step(model, opt_state, xp, xn, key):
    eps = jax.random.normal(key, (xp.shape[0], K))
    loss, g = jax.value_and_grad(_loop_loss)(model, xp, xn, eps)
    opt = optax.adamw(1e-3, weight_decay=1e-2)
    upd, opt_state = opt.update(g, opt_state, model)
    return jax.block_until_ready((optax.apply_updates(model, upd), opt_state, loss))


def _np_pc(z, mu, ls, n_groups, n_total):
    """Vectorised float64 transcription of the minibatch PC formula."""
    m, k = z.shape
    d = k // n_groups
    var = np.exp(2 * ls)
    lp = -0.5 * (z[:, None] - mu[None]) ** 2 / var[None] - ls[None] - 0.5 * np.log(2 * np.pi)
    lpg = lp.reshape(m, m, n_groups, d).sum(-1)
    log_w = np.full((m, m), np.log((n_total - 1) / (m - 1)))
    np.fill_diagonal(log_w, 0.0)
    log_qz = logsumexp(lpg.sum(-1) + log_w, axis=1) - np.log(n_total)
    log_qg = logsumexp(lpg + log_w[:, :, None], axis=1) - np.log(n_total)
    return float(np.mean(log_qz - log_qg.sum(-1)))


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    xp, xn = _data()
    model = neuro.LowRankRNN(N, K, n_groups=G, key=jax.random.key(0))
    key = jax.random.key(2)
    opt_state = optax.adamw(1e-3, weight_decay=1e-2).init(model)
    xb, xnb = xp[:BATCH], xn[:BATCH]
    ours = H.time_jax(_train_step, model, opt_state, xb, xnb, key, repeats=max(args.repeats, 20))
    anchor = H.time_python(lambda: _loop_step(model, opt_state, xb, xnb, key), repeats=3)
    H.emit(
        bench="neuro",
        case="train_step_vs_python_loop",
        sizes={"n_neurons": N, "rank": K, "groups": G, "batch_time_steps": BATCH},
        ours=ours,
        anchor="python_loop",
        anchor_t=anchor,
        target=10.0,
        note="per-time-step Python loop of the same model and loss, gradient and update run "
        "eagerly, same draws; 3 timed runs",
        ours_err=abs(float(ours.output[2]) - float(anchor.output[2])),
    )
    for steps in [500] + ([5000] if args.full else []):

        def ours_fn(m, a, b, k, steps=steps):
            return neuro.fit(m, a, b, key=k, steps=steps, batch_size=BATCH, beta=20.0).loss

        ours = H.time_jax(ours_fn, model, xp, xn, key, repeats=args.repeats)
        reps = max(1, min(args.repeats, 3))
        anchor = H.time_python(lambda s=steps: _python_loop(model, xp, xn, key, s), repeats=reps)
        H.emit(
            bench="neuro",
            case="fit_scanned_vs_python_loop",
            sizes={
                "n_neurons": N,
                "rank": K,
                "groups": G,
                "samples": S,
                "batch": BATCH,
                "steps": steps,
            },
            ours=ours,
            anchor="python_loop",
            anchor_t=anchor,
            target=None,
            note=f"informational: Python loop calling one jitted step per iteration, {reps} runs",
        )

    rng = np.random.default_rng(0)
    m = 512
    mu = rng.normal(size=(m, K)) @ rng.normal(size=(K, K))
    ls = -0.7 + 0.2 * rng.normal(size=(m, K))
    z = mu + np.exp(ls) * rng.normal(size=(m, K))
    for groups in (G, K):
        args32 = [jnp.asarray(a, jnp.float32) for a in (z, mu, ls)]

        def pc_fn(a, b, c, groups=groups):
            return neuro.partial_correlation(a, b, c, n_groups=groups, n_total=5000.0)

        ours = H.time_jax(pc_fn, *args32, repeats=max(args.repeats, 20))
        anchor = H.time_python(lambda g=groups: _np_pc(z, mu, ls, g, 5000.0), repeats=5)
        err = abs(float(ours.output) - anchor.output)
        rel = err / max(1.0, abs(anchor.output))
        H.emit(
            bench="neuro",
            case="pc_estimator_vs_numpy_f64" if groups < K else "tc_estimator_vs_numpy_f64",
            sizes={"m": m, "rank": K, "groups": groups},
            ours=ours,
            anchor="numpy_f64",
            anchor_t=anchor,
            target=None,
            note=f"float32 jitted vs float64 NumPy; relative difference {rel:.2e} "
            f"({'within' if rel <= 1e-5 else 'above'} the 1e-5 target)",
            ours_err=err,
        )


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"# neuro bench done in {time.perf_counter() - t0:.1f} s")
