"""The tiny backbone and SVGT config shared by the steering tests and cases."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import nn, steering

CFG = nn.TransformerConfig(
    vocab_size=23, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=4, mlp_dim=24
)
SC = steering.SVGTConfig(
    layer=1, n_bridge=2, value_dim=8, n_heads=2, n_value_layers=1, vlp_heads=2, dropout=0.1
)
P = nn.init_params(CFG, key=jax.random.key(0))
VP = steering.init_svgt(CFG, SC, key=jax.random.key(1))
_rng = np.random.default_rng(0)
PROMPT = jnp.asarray(_rng.integers(0, 23, (2, 5)), jnp.int32)
PLEN = jnp.array([3, 5], jnp.int32)
SEQ = jnp.asarray(_rng.integers(0, 23, (2, 9)), jnp.int32)  # prompt + response
SEQ_LEN = jnp.array([7, 9], jnp.int32)
