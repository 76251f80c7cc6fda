"""MDLM sampler and TD3B fine-tuning step: jitted vs our un-jitted per-step reference.

Sampler: T reverse steps of a 2-layer bidirectional jaxkit.nn transformer (one
``lax.scan``, ``diffusion.sample``), reported as samples/s. Ours runs the denoiser only
on the rows that unmask a slot at the step and have unmasked one before (rows still
all-[MASK] read one shared row's output; blocks of 64 / 84 / 94 of 128 rows here, the
smallest that holds the step's rows), its last block only at the slots the step draws
(``nn.apply(outputs_at=)``); the anchor, like the authors' ancestral loop,
runs every row at every step. Both draw tokens only at the slots a step unmasks.
Fine-tuning step: one ``diffusion.td3b_train_step`` (WDCE with R replicates + KL
anchor + contrastive term, AdamW). Anchor ``python_loop``: the same computations
written as a plain per-step / per-replicate Python loop run op by op
(``jax.disable_jit()``), the way a direct port of the PyTorch reference executes.
Target: >= 10x. ``mdlm_sample_steered``: the sampler with a steering vector
(``interventions=``) against the same sampler alone, interleaved; informational.
"""

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import diffusion, nn, steering

V, MASK = 20, 20


def _model(d_model, n_layers):
    cfg = nn.TransformerConfig(
        vocab_size=V + 1,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=4,
        n_kv_heads=4,
        head_dim=d_model // 4,
        mlp_dim=2 * d_model,
        causal=False,
    )
    return cfg, nn.init_params(cfg, key=jax.random.key(0))


def _ref_sample(cfg, params, batch, length, steps, seed):
    """Per-step Python loop: NumPy unmasking decisions, forward, host sampling (new slots)."""
    rng = np.random.default_rng(seed)
    z = np.full((batch, length), MASK, np.int32)
    pos = np.broadcast_to(np.arange(length, dtype=np.int32), (batch, length))
    attn = np.ones((batch, length, length), bool)
    for k in range(steps):
        t, s = 1 - k / steps, 1 - (k + 1) / steps
        p_un = 1.0 if k == steps - 1 else (t - s) / t
        new = (z == MASK) & (rng.random((batch, length)) < p_un)
        logits = np.asarray(
            nn.apply(
                params, cfg, jnp.asarray(z), jnp.asarray(pos), attn_mask=jnp.asarray(attn)
            ).logits,
            np.float64,
        )[new]  # tokens are drawn only where a slot is unmasked
        logits[..., MASK] = -np.inf
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        z[new] = (rng.random((len(p), 1)) < p.cumsum(-1)).argmax(-1)
    return z


def _ref_step(cfg, params, ref, opt, opt_state, buf, key, replicates):
    """Per-replicate Python loop for WDCE, then KL and contrastive, one AdamW update."""

    def loss(p):
        wbar = jax.nn.softmax(buf.log_w)
        total = 0.0
        b, length = buf.tokens.shape
        pos = jnp.broadcast_to(jnp.arange(length), (b, length))
        attn = jnp.ones((b, length, length), bool)
        for r in range(replicates):
            k1, k2 = jax.random.split(jax.random.fold_in(key, r))
            lam = jax.random.uniform(k1, (b,))
            m = jax.random.uniform(k2, (b, length)) < lam[:, None]
            z = jnp.where(m, MASK, buf.tokens)
            lg = nn.apply(p, cfg, z, pos, attn_mask=attn).logits
            lg = lg.at[..., MASK].set(-jnp.inf)
            lp = jax.nn.log_softmax(lg, -1)
            nll = -jnp.take_along_axis(lp, buf.tokens[..., None], -1)[..., 0]
            total = total + jnp.sum(wbar * jnp.sum(jnp.where(m, nll, 0.0), -1) / lam)
        wdce = total / replicates
        kk1, kk2 = jax.random.split(jax.random.fold_in(key, 99))
        lam = jax.random.uniform(kk1, (b,))
        m = jax.random.uniform(kk2, (b, length)) < lam[:, None]
        z = jnp.where(m, MASK, buf.tokens)
        lp = jax.nn.log_softmax(
            nn.apply(p, cfg, z, pos, attn_mask=attn).logits.at[..., MASK].set(-jnp.inf), -1
        )
        lq = jax.nn.log_softmax(
            nn.apply(ref, cfg, z, pos, attn_mask=attn).logits.at[..., MASK].set(-jnp.inf), -1
        )
        pp = jnp.exp(lp)
        kl = jnp.where(
            m, jnp.sum(jnp.where(pp > 0, pp * (lp - jnp.where(pp > 0, lq, 0.0)), 0.0), -1), 0.0
        )
        kl = jnp.sum(kl) / kl.size
        out = nn.apply(p, cfg, buf.tokens, pos, attn_mask=attn, collect=(cfg.n_layers - 1,))
        e = out.hidden[cfg.n_layers - 1].mean(1)
        ctr = 0.0
        same, diff, ns, nd = 0.0, 0.0, 0, 0
        d = buf.direction
        dists = []
        for i in range(b):  # pairwise loop over the batch, as the reference code does
            for j in range(b):
                if i != j and d[i] != d[j]:
                    dists.append(jnp.linalg.norm(e[i] - e[j]))
        mg = jax.lax.stop_gradient(jnp.maximum(1.0, 1.5 * jnp.mean(jnp.stack(dists))))
        for i in range(b):
            for j in range(b):
                if i == j:
                    continue
                dd = jnp.sum((e[i] - e[j]) ** 2)
                if d[i] == d[j]:
                    same, ns = same + dd, ns + 1
                else:
                    diff, nd = diff + jnp.maximum(mg - jnp.sqrt(dd), 0.0) ** 2, nd + 1
        ctr = same / max(ns, 1) + diff / max(nd, 1)
        return wdce + 0.1 * kl + 0.1 * ctr

    g = jax.grad(loss)(params)
    u, opt_state = opt.update(g, opt_state, params)
    return optax.apply_updates(params, u), opt_state


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    sizes = [dict(d_model=64, n_layers=2, batch=128, length=12, steps=12, replicates=4)]
    if args.full:
        sizes.append(dict(d_model=128, n_layers=4, batch=256, length=24, steps=24, replicates=8))
    for sz in sizes:
        _bench(sz, args.repeats)


def _bench(sz, repeats):
    cfg, params = _model(sz["d_model"], sz["n_layers"])
    apply_fn = diffusion.transformer_denoiser(cfg)
    b, length, steps = sz["batch"], sz["length"], sz["steps"]
    template = jnp.full((b, length), MASK, jnp.int32)

    def run(p, tmpl, key):
        return diffusion.sample(apply_fn, p, tmpl, key=key, mask_id=MASK, num_steps=steps)

    ours = H.time_jax(run, params, template, jax.random.key(1), repeats=repeats)
    with jax.disable_jit():
        ref = H.time_python(lambda: _ref_sample(cfg, params, b, length, steps, 0), repeats=2)
    H.emit(
        bench="diffusion",
        case="mdlm_sample",
        sizes=sz,
        ours=ours,
        anchor="python_loop",
        anchor_t=ref,
        target=10.0,
        note=f"samples/s ours={b / ours.median_s:.0f}, python_loop={b / ref.median_s:.1f}; "
        "anchor: per-step Python loop, op by op (jax.disable_jit), every row every step; "
        "ours: forward only on rows that unmask a slot (rows still all-[MASK]: one shared "
        "row, computed once), the last block only at the drawn slots; both draw "
        "tokens only at the unmasked slots",
        samples_per_s=b / ours.median_s,
    )

    # two methods on one model: a steering vector in every denoiser forward, against the
    # same sampler alone (interleaved; informational: what composing costs)
    vec = jax.random.normal(jax.random.key(5), (sz["d_model"],))
    iv = steering.steer_add(vec, 0.5, layer=sz["n_layers"] // 2)

    def steered(p, tmpl, key, iv):
        return diffusion.sample(
            apply_fn, p, tmpl, key=key, mask_id=MASK, num_steps=steps, interventions=iv
        )

    args = (params, template, jax.random.key(1))
    t = H.time_interleaved({"steered": (steered, (*args, iv)), "alone": (run, args)}, repeats)
    H.emit(
        bench="diffusion",
        case="mdlm_sample_steered",
        sizes=sz,
        ours=t["steered"],
        anchor="sample_alone",
        anchor_t=t["alone"],
        target=None,
        note="the sampler above with a steering vector added after the middle block "
        "(interventions=steering.steer_add(...)) vs the same sampler alone; samples/s "
        f"{b / t['steered'].median_s:.0f}",
    )

    nb = min(b, 32)
    x = jax.random.randint(jax.random.key(2), (nb, length), 0, V).astype(jnp.int32)
    z = jnp.zeros((nb,))
    d = jnp.where(jnp.arange(nb) % 2 == 0, 1, -1).astype(jnp.int32)
    buf = diffusion.Buffer(
        tokens=x,
        unmask_step=jnp.zeros_like(x),
        valid=jnp.ones_like(x, dtype=bool),
        direction=d,
        affinity=z,
        p_agonist=z + 0.5,
        reward=z,
        log_ratio=z,
        log_w=jax.random.normal(jax.random.key(3), (nb,)),
    )
    opt = optax.adamw(3e-4)
    ref_params = jax.tree.map(lambda a: a * 0.99, params)
    embed_fn = diffusion.transformer_embedder(cfg)
    reps = sz["replicates"]

    def step(p, s, buf_, key):
        return diffusion.td3b_train_step(
            apply_fn,
            embed_fn,
            opt,
            p,
            s,
            ref_params,
            buf_,
            key=key,
            mask_id=MASK,
            replicates=reps,
        )

    with jax.numpy_dtype_promotion("standard"):
        st = opt.init(params)
        ours = H.time_jax(step, params, st, buf, jax.random.key(4), repeats=repeats)
        with jax.disable_jit():
            ref = H.time_python(
                lambda: _ref_step(cfg, params, ref_params, opt, st, buf, jax.random.key(4), reps),
                repeats=1,
            )
    H.emit(
        bench="diffusion",
        case="td3b_train_step",
        sizes={**sz, "buffer": nb},
        ours=ours,
        anchor="python_loop",
        anchor_t=ref,
        target=10.0,
        note="WDCE (R replicates) + KL + contrastive + AdamW; anchor: per-replicate and "
        "per-pair Python loops, op by op (jax.disable_jit)",
    )


if __name__ == "__main__":
    main()
