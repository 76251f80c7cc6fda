"""Keyword-sweep recipes for kernels (see tests/keywords.py)."""

import functools

import jax
import numpy as np

from jaxkit.kernels import sampling

_rng = np.random.default_rng(0)
LOGITS = _rng.normal(size=(2, 8)).astype(np.float32)

RECIPES = {
    "jaxkit.kernels.sampling.filtered_probabilities": functools.partial(
        sampling.filtered_probabilities, LOGITS
    ),
    "jaxkit.kernels.sampling.sample_tokens": lambda **kw: sampling.sample_tokens(
        LOGITS, key=jax.random.key(0), **kw
    ),
}

EXEMPT: dict[str, str] = {}
