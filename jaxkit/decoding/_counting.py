"""The synthetic counting task of the WeDLM demo and its committed tiny model.

Vocabulary: 32 number tokens, ``[MASK]`` (32) and three noise-level tokens
(33, 34, 35 for rho = 0, 0.05, 0.2). Prompt ``[level, s, s+d, s+2d]``;
continuation ``x_t = x_{t-1} + d (mod 32)``, each token replaced by a uniform
number with probability rho. The fixture ``jaxkit/_fixtures/wedlm_counting.npz``
is made by ``scripts/train_wedlm_fixture.py``.
"""

import json
import pathlib


import jax.numpy as jnp
import numpy as np

from jaxkit import nn

N_NUM = 32
MASK_ID = 32
LEVELS = (0.0, 0.05, 0.2)
LEVEL_IDS = (33, 34, 35)
VOCAB = 36
PROMPT_LEN = 4
STEPS = (1, 2, 3)
FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "_fixtures" / "wedlm_counting.npz"


def counting_batch(rng: np.random.Generator, batch: int, new: int, level: int | None = None):
    """Sequences ``[B, 4 + new]``, their step ``d`` and level index (host-side numpy)."""
    lv = rng.integers(0, len(LEVELS), batch) if level is None else np.full(batch, level)
    d = rng.choice(STEPS, batch)
    s = rng.integers(0, N_NUM, batch)
    seq = np.zeros((batch, PROMPT_LEN + new), np.int32)
    seq[:, 0] = np.asarray(LEVEL_IDS)[lv]
    for j in range(3):
        seq[:, 1 + j] = (s + j * d) % N_NUM
    rho = np.asarray(LEVELS)[lv]
    for t in range(PROMPT_LEN, PROMPT_LEN + new):
        nxt = (seq[:, t - 1] + d) % N_NUM
        noisy = rng.random(batch) < rho
        seq[:, t] = np.where(noisy, rng.integers(0, N_NUM, batch), nxt)
    return seq, d, lv


def rule_consistency(prompt_last: np.ndarray, out: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per row, the fraction of generated steps with ``out_t - out_{t-1} = d (mod 32)``."""
    prev = np.concatenate([prompt_last[:, None], out[:, :-1]], axis=1)
    return np.mean((prev + d[:, None]) % N_NUM == out, axis=1)


def save_fixture(path, params, cfg: nn.TransformerConfig, meta: dict) -> None:
    """Write params (float32), config and metadata to one ``.npz``."""
    flat = {}
    for k, v in params.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                flat[f"{k}/{kk}"] = np.asarray(vv, np.float32)
        else:
            flat[k] = np.asarray(v, np.float32)
    cfg_d = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    np.savez_compressed(
        path,
        __config__=np.asarray(json.dumps(cfg_d)),
        __meta__=np.asarray(json.dumps(meta)),
        **flat,
    )


def load_fixture(path=FIXTURE):
    """``(params, cfg, meta)`` of the committed counting model."""
    z = np.load(path)
    cfg = nn.TransformerConfig(**json.loads(str(z["__config__"])))
    meta = json.loads(str(z["__meta__"]))
    params: dict = {}
    for k in z.files:
        if k.startswith("__"):
            continue
        if "/" in k:
            a, b = k.split("/")
            params.setdefault(a, {})[b] = jnp.asarray(z[k])
        else:
            params[k] = jnp.asarray(z[k])
    return params, cfg, meta


def fixture_apply_fn(cfg: nn.TransformerConfig):
    """The ``apply_fn`` of the WeDLM losses for a ``jaxkit.nn`` model."""

    def apply_fn(params, tokens, positions, attn_mask):
        return nn.apply(params, cfg, tokens, positions, attn_mask=attn_mask).logits

    return apply_fn
