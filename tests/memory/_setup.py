"""The tiny backbone and DLMR config shared by the memory tests and cases."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import memory, nn

CFG = nn.TransformerConfig(
    vocab_size=23, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=4, mlp_dim=24
)
DELIM = 5
MC = memory.DLMRConfig(
    layer=1,
    bank_sizes=(4, 4),
    budgets=(1, 3),
    n_max=1,
    delimiter_ids=(DELIM,),
    injector_dim=8,
    injector_heads=2,
    injector_layers=1,
    recency=8,
    router_hidden=8,
)
# every step eligible (no delimiter set): with n_max = 1 a forced action injects before token 0
# (test_dlmr's forced-injection oracle and test_hf's loaded backbone share this config, so a
# worker compiles their forced ``dlmr_generate`` once)
NODELIM = memory.DLMRConfig(**{**MC.__dict__, "delimiter_ids": ()})
P = nn.init_params(CFG, key=jax.random.key(0))
AP = memory.init_dlmr(CFG, MC, key=jax.random.key(1))
# a trained-looking adapter: non-zero injector output and router head (fresh ones give
# the bank's latents and a uniform router)
AP = eqx.tree_at(
    lambda p: (p.injector.w_out.w, p.router.l2.w),
    AP,
    (
        0.3 * jax.random.normal(jax.random.key(7), AP.injector.w_out.w.shape),
        jax.random.normal(jax.random.key(8), AP.router.l2.w.shape),
    ),
)
_rng = np.random.default_rng(0)
PROMPT = jnp.asarray(_rng.integers(6, 23, (2, 5)), jnp.int32)
PLEN = jnp.array([3, 5], jnp.int32)

# A stage-2 batch and optimizer shared by the tests that take a stage-2 step: the optimizer
# is a static argument of ``dlmr_step``, so one object (and one batch shape) is one compiled
# step per worker.
TOK = jnp.asarray(np.random.default_rng(5).integers(0, 23, (2, 7)), jnp.int32)
AT = jnp.array([3, 5], jnp.int32)
TX2 = memory.dlmr_optimizer(2, lr=3e-2)


def stage2_batch(params, lm_cfg, action):
    """``(embeds, labels, ctx, at, action)`` of :data:`TOK` on the backbone ``params``."""
    emb = nn.embed(params, lm_cfg, TOK)
    ctx, _ = memory.context_states(params, lm_cfg, MC, emb)
    labels = jnp.concatenate([TOK[:, 1:], jnp.full((TOK.shape[0], 1), -1, jnp.int32)], axis=1)
    return (emb, labels, ctx, AT, jnp.asarray(action, jnp.int32))
