"""Keyword-sweep recipes for steering (see tests/keywords.py).

The tiny backbone and value model of ``tests/steering/_setup.py`` are imported on first use,
not at import (building them is JAX work).
"""

import equinox as eqx
import jax
import numpy as np

from jaxkit import steering

_rng = np.random.default_rng(0)
Z = _rng.normal(size=(2, 8)).astype(np.float32)  # [B, value_dim]


def _setup():
    from tests.steering import _setup as S

    return S


def _generate(**kw):
    S = _setup()
    return steering.svgt_generate(
        S.P, S.CFG, S.VP, S.SC, S.PROMPT, S.PLEN, key=jax.random.key(0), max_new_tokens=2, **kw
    ).tokens


def _optimizer(**kw):
    tx = steering.svgt_optimizer(3, **kw)
    return tx.init(eqx.filter(_setup().VP, eqx.is_inexact_array))


def _config(**kw):
    """Build an SVGTConfig and use it (a NamedTuple is checked where it is used)."""
    S = _setup()
    cfg = steering.SVGTConfig(**{**S.SC._asdict(), **kw})
    return steering.init_svgt(S.CFG, cfg, key=jax.random.key(0))


RECIPES = {
    "jaxkit.steering.SVGTConfig": _config,
    "jaxkit.steering.svgt_generate": _generate,
    "jaxkit.steering.value_correction": lambda **kw: steering.value_correction(
        _setup().VP.disc, Z, **kw
    ),
    "jaxkit.steering.svgt_optimizer": _optimizer,
    "jaxkit.steering.ValueEncoder": lambda **kw: steering.ValueEncoder(
        8, 4, n_heads=1, n_layers=1, dropout=0.0, key=jax.random.key(0), **kw
    ),
}

EXEMPT: dict[str, str] = {}
