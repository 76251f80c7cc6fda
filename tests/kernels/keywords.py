"""Keyword-sweep recipes for kernels (see tests/keywords.py)."""

import functools

import jax
import numpy as np

from jaxkit.kernels import sampling
from jaxkit.kernels import windowed_matmul as wm

_rng = np.random.default_rng(0)
LOGITS = _rng.normal(size=(2, 8)).astype(np.float32)
NOISE = _rng.gumbel(size=(2, 8)).astype(np.float32)
# per-row temperature, top_k, top_p, min_p of the flattened sampler
ROW_PARAMS = (
    np.full((2,), 0.7, np.float32),
    np.full((2,), 4, np.int32),
    np.full((2,), 0.9, np.float32),
    np.zeros((2,), np.float32),
)
WINDOW = (2, 3)
FEATURES = _rng.normal(size=(1, 2, 3, 2)).astype(np.float32)  # [B, H, W, C]
KERNEL = _rng.normal(size=(3, 3, 2)).astype(np.float32)  # [K, L, C] depthwise
TABLE = (0.3 * _rng.normal(size=(2, 15))).astype(np.float32)  # [C, (2wh-1)(2ww-1)]

RECIPES = {
    "jaxkit.kernels.sampling.filtered_probabilities": functools.partial(
        sampling.filtered_probabilities, LOGITS
    ),
    "jaxkit.kernels.sampling.sample_tokens": lambda **kw: sampling.sample_tokens(
        LOGITS, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.kernels.sampling.sample_rows_reference": functools.partial(
        sampling.sample_rows_reference, LOGITS, NOISE, *ROW_PARAMS
    ),
    "jaxkit.kernels.windowed_matmul.windowed_matmul": functools.partial(
        wm.windowed_matmul, FEATURES, TABLE, window=WINDOW
    ),
    "jaxkit.kernels.windowed_matmul.windowed_matmul_reference": functools.partial(
        wm.windowed_matmul_reference, FEATURES, TABLE, window=WINDOW
    ),
    "jaxkit.kernels.windowed_matmul.windowed_matmul_cached": functools.partial(
        wm.windowed_matmul_cached, FEATURES, wm.window_matrix(TABLE, window=WINDOW), window=WINDOW
    ),
    "jaxkit.kernels.windowed_matmul.window_matrix": functools.partial(
        wm.window_matrix, TABLE, window=WINDOW
    ),
    "jaxkit.kernels.windowed_matmul.table_from_depthwise_kernel": functools.partial(
        wm.table_from_depthwise_kernel, KERNEL, window=WINDOW
    ),
}

EXEMPT: dict[str, str] = {}

ANY_RANK = {
    "jaxkit.kernels.sampling.sample_tokens:logits": (
        "[*batch, vocab]: any leading batch axes (one row [vocab] included), one token each"
    ),
    "jaxkit.kernels.sampling.filtered_probabilities:logits": (
        "[*batch, vocab]: any leading batch axes (one row [vocab] included)"
    ),
}
