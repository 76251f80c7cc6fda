"""Train the frozen base of ``examples/dlmr_toy_grid.py`` and save it as a fixture.

    python scripts/train_dlmr_fixture.py --steps 1500 --out jaxkit/_fixtures/dlmr_grid

A 2-block D=64 causal LM with a sliding window of 12 on the grid world's streams
(image embeddings from the example's frozen random vision encoder, seed 1234).
Writes ``config.json`` + ``model.safetensors`` + ``task.json`` (steps, seed, final
loss, answer accuracy of early and late queries) with ``jaxkit.io.save_fixture``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from _fixture_cli import load_example, parse_args

from jaxkit import io, nn


def main() -> None:
    a = parse_args(__doc__, "dlmr_grid")
    ex = load_example("dlmr_toy_grid")
    enc = ex.vision_encoder()
    rng = np.random.default_rng(a.seed)
    params, loss = ex.train_base(rng, a.steps, jax.random.key(a.seed), enc)
    cells, toks, q = ex.sample_streams(np.random.default_rng(99), 256)
    x = ex.embeds(params, enc, cells, toks)
    lg = nn.apply(params, ex.CFG, inputs_embeds=x).logits
    pred = np.asarray(jnp.argmax(lg[q[:, 0], q[:, 2]], -1))
    ok = pred == q[:, 3]
    late = ex.is_late(q)
    info = {
        "task": "dlmr toy grid (examples/dlmr_toy_grid.py)",
        "steps": a.steps,
        "seed": a.seed,
        "final_loss": loss,
        "acc_filler": float(ok[q[:, 1] == 0].mean()),
        "acc_early_queries": float(ok[~late & (q[:, 1] > 0)].mean()),
        "acc_late_queries": float(ok[late].mean()),
    }
    io.save_fixture(jax.tree.map(np.asarray, params), ex.CFG, a.out, info)
    print(info)


if __name__ == "__main__":
    main()
