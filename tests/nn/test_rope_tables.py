"""RoPE's tables once per forward: the fenced (CPU) and plain (other platforms) paths agree.

Oracle: ``rope_tables(fence=True)``, ``rope_tables()`` and ``forward_tables`` give the same
values bit for bit (no scaling, YaRN with its attention factor; f32 and x64), and
``forward_tables`` lowered for a non-CPU platform is the plain computation (no fence).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import nn
from jaxkit.nn._attention import forward_tables, rope_tables

YARN = nn.TransformerConfig(
    vocab_size=17,
    d_model=16,
    n_layers=1,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    mlp_dim=24,
    rope_scaling=nn.RopeScaling("yarn", 2.0, original_max_position_embeddings=4),
)
PLAIN = dataclasses.replace(YARN, rope_scaling=None)
POS = np.array([[0, 1, 2, 3, 4, 9], [5, 3, 0, 7, 2, 11]], np.int32)


def _three(pos, cfg, dtype):
    return (
        rope_tables(pos, cfg, dtype),
        rope_tables(pos, cfg, dtype, fence=True),
        forward_tables(pos, cfg, dtype),
    )


_three_jit = jax.jit(_three, static_argnums=(1, 2))


@pytest.mark.parametrize("cfg", [PLAIN, YARN], ids=["plain", "yarn"])
def test_fenced_and_plain_tables_are_equal(cfg):
    plain, fenced, fwd = _three_jit(POS, cfg, jnp.float32)
    inv, att = nn._attention.rope_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
    ang = POS[..., None, None] * inv  # float64 reference
    for name, (c, s) in (("plain", plain), ("fenced", fenced), ("forward", fwd)):
        assert c.shape == s.shape == (2, 6, 1, cfg.head_dim // 2), name
        np.testing.assert_allclose(c, att * np.cos(ang), atol=2e-6, err_msg=name)
        np.testing.assert_allclose(s, att * np.sin(ang), atol=2e-6, err_msg=name)
    for c, s in (fenced, fwd):  # the same values bit for bit
        np.testing.assert_array_equal(c, plain[0])
        np.testing.assert_array_equal(s, plain[1])


def test_fenced_and_plain_tables_are_equal_x64():
    with jax.enable_x64(True):
        plain, fenced, fwd = _three_jit(POS, YARN, jnp.float64)
        assert plain[0].dtype == jnp.float64
        for c, s in (fenced, fwd):
            np.testing.assert_array_equal(c, plain[0])
            np.testing.assert_array_equal(s, plain[1])


def test_forward_tables_fence_only_on_cpu():
    # Lowered for CPU both equal branches of the fence are in the module (two cosines);
    # for GPU / TPU only the plain tables (one cosine, no predicate on the angles).
    traced = jax.jit(forward_tables, static_argnums=(1, 2)).trace(POS, PLAIN, jnp.float32)
    for plat, n in (("cpu", 2), ("cuda", 1), ("tpu", 1)):
        txt = traced.lower(lowering_platforms=(plat,)).as_text()
        assert txt.count("stablehlo.cosine") == n, plat
        assert ("stablehlo.compare" in txt) == (plat == "cpu"), plat
