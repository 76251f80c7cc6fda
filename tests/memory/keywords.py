"""Keyword-sweep recipes for memory (see tests/keywords.py).

The tiny backbone and adapter of ``tests/memory/_setup.py`` are imported on first use, not at
import (building them is JAX work).
"""

import functools

import equinox as eqx
import jax
import numpy as np

from jaxkit import memory, nn
from tests.keywords import adapter_round_trip

_rng = np.random.default_rng(0)
S = 6
CTX = np.ones((2, S, 16), np.float32)
VALID = np.ones((2, S), bool)
AT = np.array([2, 3], np.int32)
K = np.array([1, 3], np.int32)
TARGETS = _rng.normal(size=(2, 2, 16)).astype(np.float32)
BATCH1 = (CTX, VALID, AT, K, TARGETS, VALID[:, :2])
HIDDEN = _rng.normal(size=(2, 16)).astype(np.float32)  # router input [B, D]
DIST = np.array([[5, 4, 3, 2, 1, 0], [3, 2, 1, 0, 0, 0]], np.int32)  # [B, S] to the point


@functools.cache
def _modules():
    """``(injector, router)``: the tiny modules of the method recipes, built once."""
    k = jax.random.key(0)
    return (
        memory.Injector(16, 8, heads=2, n_layers=1, recency=4, key=k),
        memory.Router(16, 8, 3, key=k),
    )


def _setup():
    from tests.memory import _setup as S

    return S


def _generate(**kw):
    S = _setup()
    emb = nn.embed(S.P, S.CFG, S.PROMPT)
    return memory.dlmr_generate(
        S.P, S.CFG, S.AP, S.MC, emb, S.PLEN, max_new_tokens=2, **{"key": jax.random.key(0), **kw}
    ).tokens


def _step(**kw):
    S = _setup()
    tx = memory.dlmr_optimizer(1, lr=1e-2)
    return memory.dlmr_step(1, S.AP, tx.init(S.AP), BATCH1, tx=tx, cfg=S.MC, **kw)


def _optimizer(**kw):
    S = _setup()
    tx = memory.dlmr_optimizer(1, **kw)
    return tx.init(eqx.filter(S.AP, eqx.is_inexact_array))


@functools.cache
def _stage2_batch():
    """``(embeds, labels, ctx, at, action)``: the tiny stage-2 batch (routes 1 and 2)."""
    S = _setup()
    return S.stage2_batch(S.P, S.CFG, [1, 2])


def _stage2(**kw):
    S = _setup()
    return memory.stage2_loss(S.AP, S.P, *_stage2_batch(), lm_cfg=S.CFG, cfg=S.MC, **kw)


_save, _restore = adapter_round_trip(memory, lambda: _setup().AP, "banks")


def _keyed(make, *args, **fixed):
    """A recipe for a constructor with a ``key`` (forwarded through ``kw``)."""
    return lambda **kw: make(*args, **{"key": jax.random.key(0), **fixed, **kw})


RECIPES = {
    "jaxkit.memory.init_dlmr": lambda **kw: _keyed(memory.init_dlmr, _setup().CFG, _setup().MC)(
        **kw
    ),
    "jaxkit.memory.LoraInjector": lambda **kw: _keyed(
        memory.LoraInjector, _setup().CFG, n_banks=1, rank=2, alpha=4.0, targets=("q",)
    )(**kw),
    "jaxkit.memory.Injector": _keyed(memory.Injector, 16, 8, heads=2, n_layers=1, recency=4),
    "jaxkit.memory.Router": _keyed(memory.Router, 16, 8, 3),
    "jaxkit.memory.dlmr_generate": _generate,
    "jaxkit.memory.dlmr_optimizer": _optimizer,
    "jaxkit.memory.dlmr_step": _step,
    "jaxkit.memory.stage1_loss": lambda **kw: memory.stage1_loss(
        _setup().AP, *BATCH1, cfg=_setup().MC, **kw
    ),
    "jaxkit.memory.stage2_loss": _stage2,
    "jaxkit.memory.save_adapter": _save,
    "jaxkit.memory.restore_adapter": _restore,
    "jaxkit.memory.DLMRConfig": lambda **kw: memory.DLMRConfig(0, **kw),
    "jaxkit.memory.inject": lambda **kw: memory.inject(
        _setup().AP, _setup().MC, CTX, VALID, AT, np.array([0, 1], np.int32), K, **kw
    )[0],
    "jaxkit.memory.memory_interventions": lambda **kw: memory.memory_interventions(
        _setup().MC, TARGETS, AT, **kw
    ),
    "jaxkit.memory.Router.__call__": lambda **kw: memory.Router(16, 8, 3, key=jax.random.key(0))(
        HIDDEN, **kw
    ),
    "jaxkit.memory.Injector.forward": lambda **kw: _modules()[0].forward(
        CTX, VALID, DIST, TARGETS, HIDDEN, VALID[:, :2], **kw
    )[0],
    "jaxkit.memory.Router.features": lambda **kw: _modules()[1].features(HIDDEN, **kw),
    "jaxkit.memory.Router.standardize": lambda **kw: _modules()[1].standardize(HIDDEN, **kw).mean,
}

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.memory.Router.__call__:h": "`[*B, D]`: leading batch axes (one state or any batch "
    "of them), as the docstring says",
    "jaxkit.memory.Router.features:h": "`[*B, D]`: leading batch axes, as `Router.__call__`'s "
    "(it is the call's first step), as the docstring says",
}

ANY_INT: dict[str, str] = {
    "jaxkit.memory.Injector.forward:dist": "distances to the injection point, clipped to the "
    "recency table by design (far slots share its last entry; `inject` passes dist <= 0 for "
    "the slots it hides), as the docstring says",
    "jaxkit.memory.memory_interventions:at": "a cache slot of a sequence not known here (the "
    "same object serves every call of a generation); a negative one raises (tested)",
}
