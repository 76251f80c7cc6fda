"""Convert the WeDLM counting fixture from its old private ``.npz`` to the common format.

    python scripts/convert_wedlm_fixture.py [--src jaxkit/_fixtures/wedlm_counting.npz]
        [--out jaxkit/_fixtures/wedlm_counting]

The old file held the float32 parameters under ``"<key>"`` / ``"layers/<key>"``, the
``TransformerConfig`` fields as JSON in ``__config__`` and the training metadata in
``__meta__``. The output is the folder format of ``jaxkit.io.load_fixture``
(``config.json`` + ``model.safetensors`` + ``task.json``). The script checks that
every weight loads back bit-identical before it returns. The ``.npz`` is no longer
in the tree; to rerun, take it from history first:
``git show dcc9367:jaxkit/_fixtures/wedlm_counting.npz > /tmp/wedlm_counting.npz``.
"""

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxkit import io, nn  # noqa: E402


def read_npz(path) -> tuple[dict, nn.TransformerConfig, dict]:
    z = np.load(path)
    cfg = nn.TransformerConfig(**json.loads(str(z["__config__"])))
    meta = json.loads(str(z["__meta__"]))
    params: dict = {}
    for k in z.files:
        if k.startswith("__"):
            continue
        if "/" in k:
            a, b = k.split("/")
            params.setdefault(a, {})[b] = np.asarray(z[k])
        else:
            params[k] = np.asarray(z[k])
    return params, cfg, meta


def main() -> None:
    fx = ROOT / "jaxkit" / "_fixtures"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=str(fx / "wedlm_counting.npz"))
    p.add_argument("--out", default=str(fx / "wedlm_counting"))
    args = p.parse_args()
    params, cfg, meta = read_npz(args.src)
    meta = {**meta, "task": "noisy_counting", "rule": meta.get("task")}
    meta["script"] = (
        "scripts/train_wedlm_fixture.py (converted by scripts/convert_wedlm_fixture.py)"
    )
    io.save_fixture(params, cfg, args.out, meta)
    back = io.load_fixture(pathlib.Path(args.out).name)
    assert back.cfg == cfg, (back.cfg, cfg)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back.params), strict=True):
        np.testing.assert_array_equal(np.asarray(b), a)  # bit-identical float32
    print(f"wrote {args.out}: weights bit-identical, config {cfg}")


if __name__ == "__main__":
    main()
