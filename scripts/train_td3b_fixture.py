"""Train the toy peptide MDLM committed as jaxkit/_fixtures/td3b_toy_mdlm/.

A 2-layer, d_model-64 bidirectional jaxkit.nn transformer over the 20 amino acids
+ [MASK] (id 20), trained with the MDLM continuous-time ELBO
(``jaxkit.diffusion.mdlm_loss``, log-linear schedule) on sequences of length 12
drawn from the toy "nature" Markov chain (``jaxkit.diffusion.toy_nature_sample``),
AdamW with warmup-cosine decay. Deterministic for a given --seed. Usage:

    python scripts/train_td3b_fixture.py [--steps 600] [--out jaxkit/_fixtures/td3b_toy_mdlm]
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from jaxkit import diffusion, io, nn  # noqa: E402


def config() -> nn.TransformerConfig:
    return nn.TransformerConfig(
        vocab_size=21,
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=4,
        head_dim=16,
        mlp_dim=128,
        causal=False,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "jaxkit", "_fixtures", "td3b_toy_mdlm"))
    p.add_argument(
        "--no-absolute-positions",
        dest="absolute_positions",
        action="store_false",
        help="RoPE only (position-blind on a fully masked input; the fixture before wave 9)",
    )
    args = p.parse_args()
    cfg = config()
    apply_fn = diffusion.transformer_denoiser(cfg, absolute_positions=args.absolute_positions)
    params = nn.init_params(cfg, key=jax.random.key(args.seed))
    data = diffusion.toy_nature_sample(20000, seed=args.seed + 1)
    sched = optax.warmup_cosine_decay_schedule(
        0.0, args.lr, max(args.steps // 20, 1), args.steps, args.lr * 0.05
    )
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))

    @jax.jit
    def step(params, state, x, key):
        loss, g = jax.value_and_grad(
            lambda p: diffusion.mdlm_loss(apply_fn, p, x, key=key, mask_id=20)
        )(params)
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state, loss

    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    with jax.numpy_dtype_promotion("standard"):  # optax.adamw mixes int32 and floats
        state = opt.init(params)
        losses = []
        for i in range(args.steps):
            x = jnp.asarray(data[rng.integers(0, len(data), args.batch)])
            params, state, loss = step(params, state, x, jax.random.key(1000 + i))
            losses.append(float(loss))
            if i % 100 == 0:
                print(f"step {i} loss {np.mean(losses[-100:]):.3f} ({time.time() - t0:.0f}s)")
    held = jnp.asarray(diffusion.toy_nature_sample(512, seed=12345))
    bound = diffusion.log_likelihood_bound(
        apply_fn, params, held, key=jax.random.key(7), mask_id=20, num_samples=16
    )
    nll = float(-jnp.mean(bound)) / held.shape[1]
    info = {
        "task": "td3b_toy_peptides",
        "mask_id": 20,
        "length": 12,
        "steps": args.steps,
        "seed": args.seed,
        "absolute_positions": args.absolute_positions,
        "final_loss": float(np.mean(losses[-50:])),
        "heldout_nelbo_per_token": nll,
    }
    out = io.save_fixture(params, cfg, args.out, info)
    print(f"wrote {out} ({time.time() - t0:.0f}s); held-out NELBO/token {nll:.3f}")


if __name__ == "__main__":
    main()
