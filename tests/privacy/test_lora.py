"""LoRA utilities: init by name pattern on jaxkit.nn, merge/unmerge, PEFT export, PRISM step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import nn, privacy
from jaxkit.privacy import lowrank as L

CFG = nn.TransformerConfig(
    vocab_size=32, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=8, mlp_dim=32
)


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_lora_on_transformer_merge_export(key, tmp_path):
    params = nn.init_params(CFG, key=key)
    p2, lora = privacy.lora_init(params, targets=r"layers/(wq|wv|w_down)", rank=2, key=key)
    assert lora["layers"]["wq"].a.shape == (2, 16, 2) and lora["layers"]["wk"] is None
    assert lora["layers"]["w_down"].b.shape == (2, 32, 2)
    merged = privacy.lora_merge(params, lora, scale=2.0)
    back = privacy.lora_unmerge(merged, lora, scale=2.0)
    np.testing.assert_allclose(back["layers"]["wq"], params["layers"]["wq"], atol=1e-6)
    dq = merged["layers"]["wq"][1] - params["layers"]["wq"][1]
    f1 = jax.tree.map(lambda x: x[1], lora["layers"]["wq"])
    np.testing.assert_allclose(dq, 2.0 * L.to_dense(f1).T, atol=1e-6)
    # spectral init keeps the merged model unchanged
    p3, l3 = privacy.lora_init(
        params, targets="w_up", rank=3, key=key, method="spectral", scale=0.5
    )
    np.testing.assert_allclose(
        privacy.lora_merge(p3, l3, scale=0.5)["layers"]["w_up"], params["layers"]["w_up"], atol=1e-5
    )
    # PEFT export round trip
    names = privacy.export_adapter(lora, str(tmp_path), alpha=4.0)
    assert "base_model.model.layers.1.wq.lora_A.weight" in names
    loaded = privacy.load_adapter(str(tmp_path), like=lora)
    np.testing.assert_allclose(loaded["layers"]["wv"].b, lora["layers"]["wv"].b)


@pytest.mark.slow
def test_prism_step_on_transformer(key):
    """Per-example grads through jaxkit.nn + one PRISM step on the stacked factors."""
    params = nn.init_params(CFG, key=key)
    _, lora = privacy.lora_init(params, targets=r"layers/(wq|wv|w_down)", rank=2, key=key)
    tokens = jax.random.randint(key, (4, 6), 0, 32)

    def loss(lo, tok):
        logits = nn.apply(privacy.lora_merge(params, lo, scale=2.0), CFG, tok[None]).logits
        return -jnp.mean(
            jnp.take_along_axis(jax.nn.log_softmax(logits[0, :-1]), tok[1:, None], axis=-1)
        )

    g = privacy.per_example_grads(loss, lora, tokens)
    tx = privacy.prism(0.01, clip_norm=1.0, noise_multiplier=0.5, denom=4.0, key=key)
    u, _ = jax.jit(tx.update)(g, tx.init(lora), lora)
    new = optax.apply_updates(lora, u)
    a = new["layers"]["wq"].a
    assert a.shape == (2, 16, 2) and bool(jnp.all(jnp.isfinite(a)))


def test_lora_bad_inputs(key):
    params = {"w": jnp.ones((4, 3))}
    with pytest.raises(ValueError, match="targets"):
        privacy.lora_init(params, targets="nomatch", rank=1, key=key)
    with pytest.raises(ValueError, match="rank"):
        privacy.lora_init(params, targets="w", rank=4, key=key)
    with pytest.raises(ValueError, match="method"):
        privacy.lora_init(params, targets="w", rank=1, key=key, method="x")
    with pytest.raises(ValueError, match="init_scale"):  # NaN factors before
        privacy.lora_init(params, targets="w", rank=1, key=key, init_scale=np.nan)
    lo = privacy.lora_init(params, targets="w", rank=1, key=key).lora
    with pytest.raises(ValueError, match="scale"):
        privacy.lora_merge(params, lo, scale=np.nan)
    with pytest.raises(Exception, match="scale"):  # traced: a runtime error
        jax.block_until_ready(jax.jit(lambda s: privacy.lora_unmerge(params, lo, scale=s))(np.inf))
    with pytest.raises(TypeError, match="lora"):  # was an opaque broadcasting error
        privacy.lora_merge({"w": jnp.ones((5, 3))}, lo)
    with pytest.raises(ValueError, match="alpha"):
        privacy.export_adapter(lo, "/nonexistent-dir", alpha=0.0)
