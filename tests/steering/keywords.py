"""Keyword-sweep recipes for steering (see tests/keywords.py).

The tiny backbone and value model of ``tests/steering/_setup.py`` are imported on first use,
not at import (building them is JAX work).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import nn, steering
from tests.keywords import adapter_round_trip

_rng = np.random.default_rng(0)
Z = _rng.normal(size=(2, 8)).astype(np.float32)  # [B, value_dim]
BRIDGE = _rng.normal(size=(2, 2, 16)).astype(np.float32)  # [B, K, d_model]
HID = _rng.normal(size=(2, 5, 16)).astype(np.float32)  # [B, T, d_model]


def _setup():
    from tests.steering import _setup as S

    return S


def _generate(**kw):
    S = _setup()
    return steering.svgt_generate(
        S.P,
        S.CFG,
        S.VP,
        S.SC,
        S.PROMPT,
        S.PLEN,
        max_new_tokens=2,
        **{"key": jax.random.key(0), **kw},
    ).tokens


def _optimizer(**kw):
    tx = steering.svgt_optimizer(3, **kw)
    return tx.init(eqx.filter(_setup().VP, eqx.is_inexact_array))


def _config(**kw):
    """Build an SVGTConfig and use it (a NamedTuple is checked where it is used)."""
    S = _setup()
    cfg = steering.SVGTConfig(**{**S.SC._asdict(), **kw})
    return steering.init_svgt(S.CFG, cfg, key=jax.random.key(0))


def _stage_batch(stage):
    """A stage-1 ``(h, mask, labels)`` or stage-2 ``(h, prompt_mask, response_mask, labels)``."""
    S = _setup()
    h = steering.hidden_at(S.P, S.CFG, S.SEQ, layer=S.SC.layer)
    mask = jnp.arange(9)[None] < S.SEQ_LEN[:, None]
    pm = jnp.arange(9)[None] < S.PLEN[:, None]
    lab = jnp.array([0.0, 1.0])
    return (h, mask, lab) if stage == 1 else (h, pm, mask & ~pm, lab)


def _stage3(**kw):
    S = _setup()
    args = (S.VP, S.P, S.SEQ, S.PLEN, S.SEQ_LEN)
    return steering.stage3_loss(*args, lm_cfg=S.CFG, cfg=S.SC, **kw)[0]


def _step(**kw):
    S = _setup()
    tx = steering.svgt_optimizer(1)
    st = tx.init(S.VP)
    out = steering.svgt_step(
        1, S.VP, st, _stage_batch(1), tx=tx, **{"key": jax.random.key(0), **kw}
    )
    return out[2]  # the loss


def _refresh(**kw):
    """Refresh a K = 2 bridge over a cache of the prompts (room for the bridge)."""
    S = _setup()
    cache = nn.prefill(S.P, S.CFG, S.PROMPT, S.PLEN, max_len=8).cache
    out = steering.refresh_bridge(S.P, S.CFG, cache, BRIDGE, S.PLEN, **{"layer": 1, **kw})
    return out.k


_save, _restore = adapter_round_trip(steering, lambda: _setup().VP, "disc")


RECIPES = {
    "jaxkit.steering.SVGTConfig": _config,
    "jaxkit.steering.svgt_generate": _generate,
    "jaxkit.steering.value_correction": lambda **kw: steering.value_correction(
        _setup().VP.disc, Z, **kw
    ),
    "jaxkit.steering.svgt_optimizer": _optimizer,
    "jaxkit.steering.ValueEncoder": lambda **kw: steering.ValueEncoder(
        8, 4, n_heads=1, n_layers=1, dropout=0.0, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.steering.Discriminator": lambda **kw: steering.Discriminator(
        8, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.steering.BridgeVLP": lambda **kw: steering.BridgeVLP(
        16, 8, 2, 2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.steering.init_svgt": lambda **kw: steering.init_svgt(
        _setup().CFG, _setup().SC, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.steering.svgt_forward": lambda **kw: (
        steering.svgt_forward(
            _setup().P, _setup().CFG, _setup().VP, _setup().SC, _setup().SEQ, _setup().PLEN, **kw
        ).logits
    ),
    "jaxkit.steering.stage1_loss": lambda **kw: steering.stage1_loss(
        _setup().VP, *_stage_batch(1), **kw
    ),
    "jaxkit.steering.stage2_loss": lambda **kw: steering.stage2_loss(
        _setup().VP, *_stage_batch(2), **kw
    ),
    "jaxkit.steering.stage3_loss": _stage3,
    "jaxkit.steering.svgt_step": _step,
    "jaxkit.steering.caa_vector": lambda **kw: steering.caa_vector(
        _setup().P,
        _setup().CFG,
        _setup().PROMPT,
        _setup().PLEN,
        _setup().SEQ,
        _setup().SEQ_LEN,
        **{"layer": 1, **kw},
    ),
    "jaxkit.steering.prefix_prompts": lambda **kw: steering.prefix_prompts(
        _setup().PROMPT, _setup().PLEN, np.array([1, 2], np.int32), **kw
    )[0],
    "jaxkit.steering.steer_add": lambda **kw: steering.steer_add(Z[0], 0.5, **{"layer": 1, **kw}),
    "jaxkit.steering.insert_bridge": lambda **kw: steering.insert_bridge(
        HID, BRIDGE, _setup().PLEN, **kw
    )[0],
    "jaxkit.steering.refresh_bridge": _refresh,
    "jaxkit.steering.save_adapter": _save,
    "jaxkit.steering.restore_adapter": _restore,
}

HTRIG = _rng.normal(size=(2, 1, 16)).astype(np.float32)  # [B, 1, d_model]


@functools.cache
def _disc():
    return steering.Discriminator(8, key=jax.random.key(0))


@functools.cache
def _bridge():
    return steering.BridgeVLP(16, 8, 2, 2, key=jax.random.key(0))


RECIPES.update(
    {
        "jaxkit.steering.Discriminator.__call__": lambda **kw: _disc()(Z, **kw),
        "jaxkit.steering.BridgeVLP.__call__": lambda **kw: _bridge()(HTRIG, Z, **kw),
    }
)

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.steering.Discriminator.__call__:z": "`[..., d_v]`: any leading batch axes "
    "(value_correction differentiates one `z [d_v]`, the losses score `[B, d_v]`)",
}

ANY_DTYPE: dict[str, str] = {}

ANY_INT: dict[str, str] = {
    "jaxkit.steering.prefix_prompts:prompt": "token ids copied as they are (concatenated "
    "after the prefix); no vocabulary is known here",
    "jaxkit.steering.prefix_prompts:prefix": "token ids copied as they are (prepended to "
    "every prompt); no vocabulary is known here",
}
