"""Train the frozen base of ``examples/dlmr_toy_grid.py`` and save it as a fixture.

    python scripts/train_dlmr_fixture.py --steps 1500 --out jaxkit/_fixtures/dlmr_grid

A 2-block D=64 causal LM with a sliding window of 12 on the grid world's streams
(image embeddings from the example's frozen random vision encoder, seed 1234).
Writes ``config.json`` + ``model.safetensors`` + ``task.json`` (steps, seed, final
loss, answer accuracy of early and late queries) with ``jaxkit.io.save_fixture``.
"""

import argparse
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxkit import io, nn  # noqa: E402


def _example():
    spec = importlib.util.spec_from_file_location(
        "dlmr_toy_grid", ROOT / "examples" / "dlmr_toy_grid.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "jaxkit" / "_fixtures" / "dlmr_grid"))
    a = p.parse_args()
    ex = _example()
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
