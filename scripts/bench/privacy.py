"""PRISM vs naive DP-LoRA vs non-private LoRA: step time on a jaxkit.nn transformer.

One full private step each (per-example gradients by vmap over a batch of 64
sequences, clipping, noise, optimizer, apply) for LoRA rank r in {4, 16} on the
attention q/v and MLP down projections. Anchor: our naive DP-LoRA step
(DP-Adam on the factors); target: PRISM <= 1.3x its time (ratio >= 0.769), for the
whole step and for the update alone (aggregation + optimizer on fixed gradients);
an informational line splits off the privatisation alone (aggregator, no optimizer).
Peak memory is XLA's compiled estimate (arguments + temporaries + outputs).
The three compiled steps are timed interleaved (one call of each per round,
median over rounds), so load drift on a shared machine hits all three alike.
Every side is timed in the steady state of training: from the state and the
parameters after one step of its own (PRISM's later steps reuse the frame its
retraction leaves in the state; the first step computes it).
"""

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import optax

from jaxkit import nn, privacy


def _setup(r, *, d_model, n_layers, seq, batch):
    cfg = H.transformer_config(d_model, n_layers)
    key = jax.random.key(0)
    params = nn.init_params(cfg, key=key)
    params, lora = privacy.lora_init(
        params, targets=r"layers/(wq|wv|w_down)", rank=r, key=jax.random.fold_in(key, 1)
    )
    tokens = jax.random.randint(jax.random.fold_in(key, 2), (batch, seq), 0, 256)

    def loss(lo, tok):
        logits = nn.apply(privacy.lora_merge(params, lo, scale=2.0), cfg, tok[None]).logits
        lp = jax.nn.log_softmax(logits[0, :-1].astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(lp, tok[1:, None], axis=-1))

    return cfg, lora, tokens, loss


def _step(tx, loss):
    def step(lora, state, tokens):
        g = privacy.per_example_grads(loss, lora, tokens)
        u, state = tx.update(g, state, lora)
        return optax.apply_updates(lora, u), state

    return step


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    sizes = [dict(d_model=128, n_layers=2, seq=32, batch=64)]
    if args.full:
        sizes.append(dict(d_model=256, n_layers=4, seq=64, batch=64))
    for sz in sizes:
        for r in (4, 16):
            cfg, lora, tokens, loss = _setup(r, **sz)
            key = jax.random.key(1)
            b = sz["batch"]
            txs = {
                "prism": privacy.prism(1e-3, clip_norm=1.0, noise_multiplier=1.0, denom=b, key=key),
                "naive_dp_lora": privacy.naive_dp_lora(
                    1e-3, clip_norm=1.0, noise_multiplier=1.0, denom=b, key=key
                ),
                "nonprivate_lora": privacy.nonprivate_lora(1e-3),
            }
            t = H.time_interleaved(
                {
                    name: (
                        _step(tx, loss),
                        (*_after_one(_step(tx, loss), tx, lora, tokens), tokens),
                    )
                    for name, tx in txs.items()
                },
                args.repeats,
            )
            sizes_d = {**sz, "rank": r, "targets": "wq,wv,w_down"}
            note = (
                "jaxkit.nn transformer; per-example grads by vmap through merged weights "
                f"(same for all three); peak MB naive={t['naive_dp_lora'].peak_mem_mb}, "
                f"nonprivate={t['nonprivate_lora'].peak_mem_mb}"
            )
            H.emit(
                bench="privacy",
                case="prism_step_vs_naive_dp_lora",
                sizes=sizes_d,
                ours=t["prism"],
                anchor="naive_dp_lora",
                anchor_t=t["naive_dp_lora"],
                target=0.769,
                note=note,
                anchor_peak_mem_mb=t["naive_dp_lora"].peak_mem_mb,
            )
            # the private aggregation + update alone, on fixed per-example gradients
            g = jax.jit(lambda lo, tok, fn=loss: privacy.per_example_grads(fn, lo, tok))(
                lora, tokens
            )

            def update_pair(txs, case, target, note, apply=True, g=g, lora=lora, sizes_d=sizes_d):
                """Time ``tx.update`` of PRISM's and naive's transforms, interleaved, from the
                state (and, with ``apply``, the params) after one update of its own."""
                r = H.time_interleaved(
                    {
                        name: (
                            lambda g_, s_, p_, tx=tx: tx.update(g_, s_, p_),
                            (g, *_after_one_update(tx, g, lora, apply)),
                        )
                        for name, tx in txs.items()
                    },
                    3 * args.repeats,
                )
                H.emit(
                    bench="privacy",
                    case=case,
                    sizes=sizes_d,
                    ours=r["prism"],
                    anchor="naive_dp_lora",
                    anchor_t=r["naive_dp_lora"],
                    target=target,
                    note=note,
                )

            update_pair(
                {name: txs[name] for name in ("prism", "naive_dp_lora")},
                "prism_update_vs_naive_update",
                0.769,
                "clip+noise+optimizer only, given the per-example gradients "
                "(PRISM's O((m+n)r^2) per-example norms, batched as einsums, show here)",
            )
            # the privatisation alone (spec steps 3-6: frame, lift, global clip, tangent
            # noise) against naive's clip + noise (dp_aggregate), no optimizer on either side
            update_pair(
                {
                    "prism": privacy.prism_privatize(
                        clip_norm=1.0, noise_multiplier=1.0, denom=b, key=key
                    ),
                    "naive_dp_lora": privacy.dp_aggregate(
                        clip_norm=1.0, noise_multiplier=1.0, denom=b, key=key
                    ),
                },
                "prism_privatize_vs_naive_clip_noise",
                None,
                "informational: the update line without either optimizer "
                "(prism_privatize vs dp_aggregate on the same per-example gradients; "
                "the aggregator alone computes its frame at every step)",
                apply=False,
            )
            H.emit(
                bench="privacy",
                case="prism_step_vs_nonprivate_lora",
                sizes=sizes_d,
                ours=t["prism"],
                anchor="nonprivate_lora",
                anchor_t=t["nonprivate_lora"],
                target=None,
                note="informational: cost of privacy (no target)",
                anchor_peak_mem_mb=t["nonprivate_lora"].peak_mem_mb,
            )
    _eager_line(args.repeats)


def _after_one(step, tx, lora, tokens):
    """``(params, state)`` after one jitted ``step`` from ``tx.init``."""
    return jax.jit(step)(lora, tx.init(lora), tokens)


def _after_one_update(tx, g, lora, apply):
    """``(state, params)`` after one jitted ``tx.update`` (applied to the params if ``apply``)."""
    u, s = jax.jit(tx.update)(g, tx.init(lora), lora)
    return s, (optax.apply_updates(lora, u) if apply else lora)


def _eager_line(repeats):
    """Eager (un-jitted) ``update`` of PRISM vs the naive DP-LoRA anchor on fixed gradients."""
    key = jax.random.key(0)
    f = privacy.lowrank.balanced_random_init(key=key, m=64, n=48, rank=4)
    g = jax.tree.map(lambda x: jax.random.normal(key, (16, *x.shape)), f)
    t = {}
    for name, make in (("prism", privacy.prism), ("naive_dp_lora", privacy.naive_dp_lora)):
        tx = make(1e-3, clip_norm=1.0, noise_multiplier=1.0, denom=16.0, key=key)
        t[name] = H.time_jax(tx.update, g, tx.init(f), f, repeats=repeats, jit=False)
    H.emit(
        bench="privacy",
        case="eager_update",
        sizes={"m": 64, "n": 48, "rank": 4, "batch": 16},
        ours=t["prism"],
        anchor="naive_dp_lora",
        anchor_t=t["naive_dp_lora"],
        target=None,
        note="informational: eager call time (no jit around the step; op-by-op, cache hits)",
    )


if __name__ == "__main__":
    main()
