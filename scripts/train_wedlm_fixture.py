"""Train the tiny WeDLM counting model committed as jaxkit/_fixtures/wedlm_counting/.

A 2-layer, d_model-64 causal transformer trained from scratch with the WeDLM
dual-stream objective ((L_mlm + L_ar) / 2, block size 8) on the ``noisy_counting`` task of
``jaxkit.nn.tiny_task`` (three noise levels mixed), AdamW with warmup and
cosine decay. Deterministic for a given --seed. Usage:

    python scripts/train_wedlm_fixture.py [--steps 1500] [--out jaxkit/_fixtures/wedlm_counting]

Writes the fixture format of ``jaxkit.io.load_fixture`` (``jaxkit.io.save_fixture``).
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

from jaxkit import io, nn  # noqa: E402
from jaxkit.decoding import _counting as C  # noqa: E402
from jaxkit.decoding import dual_stream_batch, wedlm_loss  # noqa: E402

NEW = 28  # continuation length: sequences of 32 tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)  # the committed fixture: 1500
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--out", default=os.path.join(ROOT, "jaxkit", "_fixtures", C.FIXTURE))
    args = p.parse_args()

    cfg = nn.TransformerConfig(
        vocab_size=C.VOCAB,
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=4,
        head_dim=16,
        mlp_dim=128,
    )
    params = nn.init_params(cfg, key=jax.random.key(args.seed))
    sched = optax.warmup_cosine_decay_schedule(
        0.0, args.lr, max(args.steps // 20, 1), args.steps, args.lr * 0.05
    )
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    state = opt.init(params)
    apply_fn = C.fixture_apply_fn(cfg)
    loss_mask = np.zeros((args.batch, C.PROMPT_LEN + NEW), bool)
    loss_mask[:, C.PROMPT_LEN :] = True
    loss_mask = jnp.asarray(loss_mask)

    @jax.jit
    def step(params, state, tokens, key):
        batch = dual_stream_batch(
            tokens, loss_mask, key=key, block_size=args.block, mask_token_id=C.MASK_ID
        )
        (loss, m), g = jax.value_and_grad(lambda p_: wedlm_loss(apply_fn, p_, batch), has_aux=True)(
            params
        )
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss, m

    rng = np.random.default_rng(args.seed)
    key = jax.random.key(args.seed + 1)
    t0 = time.perf_counter()
    for i in range(args.steps):
        seq, _, _ = C.counting_batch(rng, args.batch, NEW)
        params, state, loss, m = step(params, state, jnp.asarray(seq), jax.random.fold_in(key, i))
        if i % 100 == 0 or i == args.steps - 1:
            print(
                f"step {i:5d} loss {float(loss):.4f} mlm {float(m['mlm']):.4f} "
                f"ar {float(m['ar']):.4f} ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
    wall = time.perf_counter() - t0
    meta = {
        "task": "noisy_counting",
        "rule": "counting mod 32, d in {1,2,3}, rho in {0, 0.05, 0.2}",
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "seed": args.seed,
        "block_size": args.block,
        "seq_len": C.PROMPT_LEN + NEW,
        "final_loss": float(loss),
        "train_seconds": round(wall, 1),
        "mask_token_id": C.MASK_ID,
    }
    out = io.save_fixture(params, cfg, args.out, meta)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {args.out} ({size / 1024:.0f} KiB) in {wall:.0f}s")


if __name__ == "__main__":
    main()
