"""Independent no-cache references for the decoders (host loops, tests only)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import nn
from jaxkit.decoding import select_by_entropy

_PAD = 64
_JIT = {}


def prompt_row(pr, pl, b):
    """Row ``b``'s prompt as a list (NumPy indexing: no eager jax programs)."""
    return list(np.asarray(pr)[b, : int(np.asarray(pl)[b])])


def _logits(params, cfg, seq, pos):
    """Causal logits of one sequence; right-padded to a fixed width (causal => exact)."""
    n = len(seq)
    width = _PAD * (1 + (n - 1) // _PAD)
    if (cfg, width) not in _JIT:
        _JIT[(cfg, width)] = jax.jit(lambda p, t, q: nn.apply(p, cfg, t, q).logits)
    t = np.zeros((1, width), np.int32)
    q = np.zeros((1, width), np.int32)
    t[0, :n], q[0, :n] = seq, pos
    return np.asarray(_JIT[(cfg, width)](params, t, q)[0, :n], np.float32)


def wedlm_reference_row(params, cfg, prompt, *, mask, n_new, window, tau, lam, stops=()):
    """WeDLM on one row, recomputing [prompt, committed, reordered window] each step."""
    w = window
    committed: list[int] = []
    win_tok, filled = [mask] * w, [False] * w
    n_fwd = 0
    while True:
        n_lead = 0
        while n_lead < w and filled[n_lead]:
            n_lead += 1
        tok2, filled2 = win_tok + [mask] * w, filled + [False] * w
        rank = [0 if filled2[j] else (1 if j < w + n_lead else 2) for j in range(2 * w)]
        perm = sorted(range(2 * w), key=lambda j: (rank[j], j))
        length = len(prompt) + len(committed)
        seq = list(prompt) + committed + [tok2[j] for j in perm]
        pos = list(range(length)) + [length + j for j in perm]
        lg = _logits(params, cfg, seq, pos)[length:]
        n_fwd += 1
        committed += win_tok[:n_lead]
        logical = {perm[i]: lg[i] for i in range(2 * w)}
        win_tok, filled = tok2[n_lead : n_lead + w], filled2[n_lead : n_lead + w]
        wl = np.stack([logical[j + n_lead] for j in range(w)])
        sel = [(not filled[j]) and (len(committed) + j < n_new) for j in range(w)]
        fill = np.asarray(
            select_by_entropy(
                jnp.asarray(wl)[None], jnp.asarray(sel)[None], threshold=tau, pos_penalty=lam
            )
        )[0]
        for j in range(w):
            if fill[j]:
                win_tok[j], filled[j] = int(np.argmax(wl[j])), True
        lead = 0
        while lead < w and filled[lead]:
            lead += 1
        emitted = (committed + win_tok[:lead])[:n_new]
        hit = [i for i, t in enumerate(emitted) if t in stops]
        if hit:
            return emitted[: hit[0] + 1], n_fwd
        if len(emitted) >= n_new:
            return emitted, n_fwd


def mask_predict_greedy_row(params, cfg, prompt, *, mask, n_new):
    """Left-to-right greedy decoding with the mask-predict head (no cache)."""
    seq = list(prompt)
    for _ in range(n_new):
        lg = _logits(params, cfg, seq + [mask], list(range(len(seq) + 1)))
        seq.append(int(np.argmax(lg[-1])))
    return seq[len(prompt) :]


def ar_greedy_row(params, cfg, prompt, *, n_new):
    """Greedy next-token decoding recomputing the full sequence (no cache)."""
    seq = list(prompt)
    for _ in range(n_new):
        seq.append(int(np.argmax(_logits(params, cfg, seq, list(range(len(seq))))[-1])))
    return seq[len(prompt) :]
