"""Tiny random models for the decoder tests."""

import jax
import jax.numpy as jnp

from jaxkit import nn

V, MASK = 13, 12


def tiny(seed=0, *, layers=2, sharpen=4.0):
    cfg = nn.TransformerConfig(
        vocab_size=V, d_model=16, n_layers=layers, n_heads=2, n_kv_heads=1, head_dim=8, mlp_dim=32
    )
    params = nn.init_params(cfg, key=jax.random.key(seed))
    # Sharper output distributions so that entropies spread over (0, log V).
    params = dict(params, lm_head=params["lm_head"] * sharpen)
    return params, cfg


def prompts(seed, b, p, lens):
    toks = jax.random.randint(jax.random.key(100 + seed), (b, p), 0, MASK)
    return toks.astype(jnp.int32), jnp.asarray(lens, jnp.int32)
