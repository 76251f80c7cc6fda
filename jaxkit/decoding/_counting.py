"""The WeDLM demo's view of the ``noisy_counting`` task of :func:`jaxkit.nn.tiny_task`.

The task (and its sampler and rule) is defined once, in ``jaxkit.nn``; this module
keeps the names the WeDLM example, bench and training script use. Vocabulary: 32
number tokens, ``[MASK]`` (32) and three noise-level tokens (33, 34, 35 for
rho = 0, 0.05, 0.2). Prompt ``[level, s, s+d, s+2d]``; continuation
``x_t = x_{t-1} + d (mod 32)``, each token replaced by a uniform number with
probability rho. The trained model is ``jaxkit.io.load_fixture("wedlm_counting")``,
made by ``scripts/train_wedlm_fixture.py``.
"""

import jax
import numpy as np

from jaxkit import nn

_SPEC = nn.NOISY_COUNTING
N_NUM = _SPEC.n_symbols
MASK_ID = _SPEC.mask_id
LEVELS = _SPEC.rho
LEVEL_IDS = _SPEC.level_ids
VOCAB = _SPEC.vocab
PROMPT_LEN = _SPEC.prompt_len
STEPS = _SPEC.steps
FIXTURE = "wedlm_counting"


def counting_batch(rng: np.random.Generator, batch: int, new: int, level: int | None = None):
    """Sequences ``[B, 4 + new]``, their step ``d`` and level index (host NumPy arrays).

    Draws a key from ``rng`` and samples ``nn.tiny_task("noisy_counting", ...)``.
    """
    key = jax.random.key(int(rng.integers(0, 2**31 - 1)))
    data = nn.tiny_task(
        "noisy_counting", key=key, batch=batch, length=PROMPT_LEN + new, level=level
    )
    seq = np.asarray(data.tokens)
    d = (seq[:, 2] - seq[:, 1]) % N_NUM
    lv = seq[:, 0] - LEVEL_IDS[0]
    return seq, d, lv


def rule_consistency(prompt_last: np.ndarray, out: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per row, the fraction of generated steps with ``out_t = out_{t-1} + d (mod 32)``.

    Computed by ``nn.tiny_task_accuracy`` on the continuation.
    """
    pl, d = np.asarray(prompt_last), np.asarray(d)
    lv = np.full_like(pl, LEVEL_IDS[0])
    head = np.stack([lv, (pl - 2 * d) % N_NUM, (pl - d) % N_NUM, pl], 1)
    toks = np.concatenate([head, np.asarray(out)], axis=1).astype(np.int32)
    return np.asarray(nn.tiny_task_accuracy("noisy_counting", toks, start=PROMPT_LEN))


def fixture_apply_fn(cfg: nn.TransformerConfig):
    """The ``apply_fn`` of the WeDLM losses for a ``jaxkit.nn`` model."""

    def apply_fn(params, tokens, positions, attn_mask):
        return nn.apply(params, cfg, tokens, positions, attn_mask=attn_mask).logits

    return apply_fn
