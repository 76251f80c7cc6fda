"""DLMR on a backbone loaded from a local Hugging Face folder (config.json + safetensors)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import decoding, io, memory, nn
from tests.memory._setup import AP, CFG, MC, NODELIM, PLEN, PROMPT, TX2, P, stage2_batch

QWEN2 = dataclasses.replace(CFG, family="qwen2", qkv_bias=True)


@pytest.mark.parametrize(
    "lm_cfg", [CFG, pytest.param(QWEN2, marks=pytest.mark.slow)], ids=["llama", "qwen2"]
)
def test_dlmr_runs_on_a_backbone_loaded_from_an_hf_folder(tmp_path, lm_cfg):
    params = P if lm_cfg is CFG else nn.init_params(lm_cfg, key=jax.random.key(4))
    # the folder a user downloads: config.json + model.safetensors in HF names
    io.save_safetensors(params, lm_cfg, tmp_path)
    names = set(io.load_tensors(tmp_path / "model.safetensors"))
    assert "model.layers.0.self_attn.q_proj.weight" in names
    assert ("model.layers.0.self_attn.q_proj.bias" in names) == lm_cfg.qkv_bias
    cfg = io.config_from_hf(json.loads((tmp_path / "config.json").read_text()))
    assert cfg == lm_cfg
    loaded = io.load_safetensors(tmp_path, cfg)
    jax.tree.map(np.testing.assert_array_equal, loaded, params)
    before = jax.tree.map(np.array, loaded)

    ap = AP if lm_cfg is CFG else memory.init_dlmr(cfg, MC, key=jax.random.key(1))
    emb = nn.embed(loaded, cfg, PROMPT)
    kw = dict(key=jax.random.key(0), max_new_tokens=6)
    # router forced to the null: the base model, token for token, and nothing injected
    null = memory.dlmr_generate(loaded, cfg, ap, MC, emb, PLEN, force_action=0, **kw)
    base = decoding.ar_generate(loaded, cfg, PROMPT, PLEN, **kw)
    np.testing.assert_array_equal(null.tokens, base.tokens)
    assert int(jnp.sum(null.injected)) == 0 and not bool(jnp.any(null.actions))
    # a forced injection on the loaded backbone equals it on the in-memory one (every step
    # eligible: action 3 injects one latent before token 0; test_dlmr's forced-injection
    # oracle runs the same program on P)
    forced = memory.dlmr_generate(loaded, cfg, ap, NODELIM, emb, PLEN, force_action=3, **kw)
    ref = memory.dlmr_generate(
        params, lm_cfg, ap, NODELIM, nn.embed(params, lm_cfg, PROMPT), PLEN, force_action=3, **kw
    )
    assert int(jnp.min(forced.injected)) > 0
    np.testing.assert_array_equal(forced.tokens, ref.tokens)
    np.testing.assert_array_equal(forced.injected, ref.injected)
    # one stage-2 step: the adapter moves, the loaded backbone stays bit-identical
    tx, batch = TX2, stage2_batch(loaded, cfg, [2, 4])
    p2, _, loss, _ = memory.dlmr_step(
        2, ap, tx.init(ap), batch, tx=tx, cfg=MC, lm_params=loaded, lm_cfg=cfg
    )
    assert np.isfinite(float(loss))
    assert not np.array_equal(np.asarray(p2.banks[0]), np.asarray(ap.banks[0]))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, loaded), before)
