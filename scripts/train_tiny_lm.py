"""Train a tiny causal LM on a synthetic low-entropy task and save it as a fixture.

    python scripts/train_tiny_lm.py --task counting --out jaxkit/_fixtures/tiny_lm

Writes the fixture format of ``jaxkit.io.load_fixture`` with ``jaxkit.io.save_fixture``:
``config.json`` + ``model.safetensors`` and ``task.json`` (task, length, steps, seed,
measured accuracy). The functions
``train`` and ``evaluate`` are importable for other fixtures (``--task`` selects
the synthetic task; see ``jaxkit.nn.tiny_task``).
"""

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from jaxkit import io, nn  # noqa: E402


def default_config(
    task: str,
    *,
    d_model: int = 32,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    mlp_dim: int = 64,
) -> nn.TransformerConfig:
    return nn.TransformerConfig(
        vocab_size=nn.tiny_task_vocab(task),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=d_model // n_heads,
        mlp_dim=mlp_dim,
        qkv_bias=True,
        family="qwen2",
    )


def loss_fn(params, cfg, tokens, loss_mask):
    logits = nn.apply(params, cfg, tokens[:, :-1]).logits
    tgt = tokens[:, 1:]
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, tgt)
    w = loss_mask[:, 1:].astype(nll.dtype)
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


def train(
    task: str,
    cfg: nn.TransformerConfig,
    *,
    steps: int = 600,
    batch: int = 64,
    length: int = 24,
    lr: float = 3e-3,
    seed: int = 0,
    log_every: int = 250,
):
    """Next-token training on fresh task batches; returns (params, losses)."""
    key = jax.random.key(seed)
    k_init, k_data = jax.random.split(key)
    params = nn.init_params(cfg, key=k_init)
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, max(steps // 20, 1), steps, lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    state = opt.init(params)

    @jax.jit
    def step(params, state, i):
        data = nn.tiny_task(task, key=jax.random.fold_in(k_data, i), batch=batch, length=length)
        loss, g = jax.value_and_grad(loss_fn)(params, cfg, data.tokens, data.loss_mask)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss

    losses = []
    t0 = time.perf_counter()
    for i in range(steps):
        params, state, loss = step(params, state, jnp.int32(i))
        if i % log_every == 0 or i == steps - 1:
            losses.append(float(loss))
            print(
                f"step {i:5d}  loss {float(loss):.4f}  ({time.perf_counter() - t0:.1f}s)",
                flush=True,
            )
    return params, losses


def evaluate(params, cfg, task: str, *, length: int = 24, n: int = 256, seed: int = 123):
    """Greedy next-token accuracy on the determined targets of fresh sequences."""
    data = nn.tiny_task(task, key=jax.random.key(seed), batch=n, length=length)
    logits = jax.jit(lambda p, t: nn.apply(p, cfg, t).logits)(params, data.tokens[:, :-1])
    pred = jnp.argmax(logits, -1)
    m = data.loss_mask[:, 1:]
    return float(jnp.sum((pred == data.tokens[:, 1:]) & m) / jnp.sum(m))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="counting", choices=list(nn.TINY_TASKS))
    p.add_argument("--out", default=str(ROOT / "jaxkit" / "_fixtures" / "tiny_lm"))
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--length", type=int, default=24)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--n-layers", type=int, default=2)
    args = p.parse_args()
    cfg = default_config(args.task, d_model=args.d_model, n_layers=args.n_layers)
    t0 = time.perf_counter()
    params, losses = train(
        args.task,
        cfg,
        steps=args.steps,
        batch=args.batch,
        length=args.length,
        lr=args.lr,
        seed=args.seed,
    )
    secs = time.perf_counter() - t0
    acc = evaluate(params, cfg, args.task, length=args.length)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    info = {
        "task": args.task,
        "length": args.length,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "seed": args.seed,
        "n_params": int(n_params),
        "final_loss": losses[-1],
        "next_token_accuracy": acc,
        "train_seconds": round(secs, 1),
        "script": "scripts/train_tiny_lm.py",
    }
    out = io.save_fixture(params, cfg, args.out, info)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(json.dumps({**info, "bytes": size, "out": os.path.relpath(out, ROOT)}))


if __name__ == "__main__":
    main()
