"""Train the frozen base of ``examples/svgt_toy_safety.py`` and save it as a fixture.

    python scripts/train_svgt_fixture.py [--steps 1500] [--out jaxkit/_fixtures/svgt_toy_base]

A 3-block D=64 causal LM (the example's ``CFG``) trained by the example's
``train_base`` on the synthetic harm world (10% of prompts with the system-prompt
prefix). Writes ``config.json`` + ``model.safetensors`` + ``task.json`` with
``jaxkit.io.save_fixture``; ``task.json`` holds the steps, seed, final loss and the
teacher-forced quality on held-out rows (seed 99) that ``tests/steering`` re-checks:
benign (reversal) response token accuracy, the probability mass of harmful contents
at a harmful prompt's first response token (the world's 0.7), and of REFUSE after
the system prompt (1.0).
"""

import time

import jax
import numpy as np
from _fixture_cli import load_example, parse_args

from jaxkit import io


def main() -> None:
    a = parse_args(__doc__, "svgt_toy_base")
    ex = load_example("svgt_toy_safety")
    t0 = time.process_time()
    params, loss = ex.train_base(
        np.random.default_rng(a.seed), a.steps, jax.random.fold_in(jax.random.key(a.seed), 1)
    )
    cpu = time.process_time() - t0
    info = {
        "task": "svgt toy harm world (examples/svgt_toy_safety.py)",
        "steps": a.steps,
        "batch": 64,
        "lr": 3e-3,
        "seed": a.seed,
        "final_loss": loss,
        **ex.base_quality(params, np.random.default_rng(99), 256),
        "train_cpu_seconds": round(cpu, 1),
        "script": "scripts/train_svgt_fixture.py",
    }
    io.save_fixture(jax.tree.map(np.asarray, params), ex.CFG, a.out, info)
    print(info)


if __name__ == "__main__":
    main()
