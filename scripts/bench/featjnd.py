"""FeatJND: amortised tolerance-map inference vs a per-batch gradient search.

The natural anchor: without the estimator, a tolerance map for new features is found
by optimising it directly, sample by sample, under the same objective (a free map
``s = softplus(r)`` per element, Adam on ``lam_t [Dbar/eps - 1]_+ - lam_m mean log s``,
the same K noise draws per step): the plain gradient-based tolerance search FeatJND
replaces. Ours: one forward pass of a trained ``FeatJNDEstimator``
(``featjnd.tolerance_map``). Both on the same features ``[B, C, 8, 8]`` of a
``jaxkit.nn.SmallCNN`` head; the search runs ``SEARCH_STEPS`` steps (far fewer than
it needs to converge, so the ratio is a lower bound on the speed-up). Compile excluded
(``_harness.time_jax``), median of the repeats. No target in the issue: ``ok`` is null.
Quality next to time: Monte-Carlo E[KL] at alpha = 1 (16 draws) and mean log s of
both maps (larger log s at the same E[KL] is a better map).
"""

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import optax

from jaxkit.nn import SmallCNN
from jaxkit.vision import featjnd as J

SEARCH_STEPS = 50
EPS, LAM_T, K = 0.02, 1.0, 2


def _search(head, f, key):
    """The anchor: Adam on a free per-element map of this batch, the FeatJND objective."""
    opt = optax.adam(5e-2)

    def loss(r, k):
        s = jax.nn.softplus(r)
        z = jax.random.normal(k, (K, *f.shape), f.dtype)
        clean = jax.vmap(head)(f)
        d = jnp.stack([J.kl_discrepancy(clean, jax.vmap(head)(f + s * z[i])) for i in range(K)])
        return LAM_T * jnp.mean(jax.nn.relu(jnp.mean(d, 0) / EPS - 1.0)) - jnp.mean(jnp.log(s))

    def body(carry, k):
        r, st = carry
        g = jax.grad(loss)(r, k)
        u, st = opt.update(g, st, r)
        return (optax.apply_updates(r, u), st), None

    r0 = jnp.full(f.shape, -0.5, f.dtype)
    (r, _), _ = jax.lax.scan(body, (r0, opt.init(r0)), jax.random.split(key, SEARCH_STEPS))
    return jax.nn.softplus(r)


def _quality(head, f, s, key):
    z = jax.random.normal(key, (16, *f.shape), f.dtype)
    clean = jax.vmap(head)(f)
    d = jax.vmap(lambda zk: J.kl_discrepancy(clean, jax.vmap(head)(f + s * zk)))(z)
    return float(jnp.mean(d)), float(jnp.mean(jnp.log(s)))


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    grid = [(64, 16)] + ([(256, 32)] if args.full else [])
    for b, c in grid:
        key = jax.random.key(0)
        head = SmallCNN(c, 10, channels=(c,), key=jax.random.fold_in(key, 1))
        train = jax.nn.relu(jax.random.normal(jax.random.fold_in(key, 2), (512, c, 8, 8)))
        f = jax.nn.relu(jax.random.normal(jax.random.fold_in(key, 3), (b, c, 8, 8)))
        est = J.FeatJNDEstimator(c, hidden=16, key=jax.random.fold_in(key, 4))
        est = J.fit_featjnd(
            est, head, train, key=jax.random.fold_in(key, 5), optimizer=optax.adam(1e-2),
            steps=200, batch_size=32, eps=EPS, lam_t=LAM_T, n_noise=K,
        ).estimator  # fmt: skip
        ours = H.time_jax(J.tolerance_map, est, f, repeats=args.repeats)
        anchor = H.time_jax(
            lambda f_, k_, h=head: _search(h, f_, k_), f, jax.random.fold_in(key, 6),
            repeats=args.repeats,
        )  # fmt: skip
        qk = jax.random.fold_in(key, 7)
        (o_kl, o_log), (a_kl, a_log) = (
            _quality(head, f, ours.output, qk),
            _quality(head, f, anchor.output, qk),
        )
        H.emit(
            bench="featjnd",
            case="tolerance_map_vs_gradient_search",
            sizes={"batch": b, "channels": c, "h": 8, "w": 8, "search_steps": SEARCH_STEPS},
            ours=ours,
            anchor=f"per-batch Adam search on a free map ({SEARCH_STEPS} steps)",
            anchor_t=anchor,
            target=None,
            note=f"eps={EPS}; estimator trained 200 steps on other features (not timed)",
            ours_mean_kl=o_kl,
            anchor_mean_kl=a_kl,
            ours_mean_log_s=o_log,
            anchor_mean_log_s=a_log,
        )


if __name__ == "__main__":
    main()
