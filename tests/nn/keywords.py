"""Keyword-sweep recipes for nn (see tests/keywords.py)."""

import jax
import numpy as np

from jaxkit import nn
from tests.nn.cases import CFG

_rng = np.random.default_rng(0)
H = _rng.normal(size=(1, 3, CFG.d_model)).astype(np.float32)
POS = np.arange(3, dtype=np.int32)[None]


def _run_layers(**kw):
    params = nn.init_params(CFG, key=jax.random.key(0))
    return nn.run_layers(params, CFG, H, POS, **kw).h


RECIPES = {
    "jaxkit.nn.run_layers": _run_layers,
    "jaxkit.nn.init_cache": lambda **kw: nn.init_cache(CFG, max_len=4, **{"batch": 2, **kw}),
    "jaxkit.nn.tiny_task": lambda **kw: nn.tiny_task(
        "noisy_counting", key=jax.random.key(0), batch=2, length=6, **kw
    ),
}

EXEMPT: dict[str, str] = {}
