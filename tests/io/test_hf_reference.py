"""An independent NumPy forward written from the Hugging Face Llama/Qwen2 formulas
(``[out, in]`` weights, ``rotate_half`` RoPE, ``repeat_kv``), run directly on the
tensors of a checkpoint written by ``save_safetensors``: it pins the name map, the
transpositions and the architecture to what an HF model would compute."""

import json

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file

from jaxkit import io, nn


def _rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def hf_forward(t, hf, ids):
    L, H, Hkv = hf["num_hidden_layers"], hf["num_attention_heads"], hf["num_key_value_heads"]
    Dh, eps = hf["head_dim"], hf["rms_norm_eps"]
    T = ids.shape[0]
    x = t["model.embed_tokens.weight"][ids].astype(np.float64)
    inv_freq = 1.0 / (hf["rope_theta"] ** (np.arange(0, Dh, 2) / Dh))
    freqs = np.outer(np.arange(T), inv_freq)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]
    causal = np.tril(np.ones((T, T), bool))
    for i in range(L):
        pre = f"model.layers.{i}."
        h = _rms(x, t[pre + "input_layernorm.weight"], eps)
        q = h @ t[pre + "self_attn.q_proj.weight"].T
        k = h @ t[pre + "self_attn.k_proj.weight"].T
        v = h @ t[pre + "self_attn.v_proj.weight"].T
        if hf.get("attention_bias"):
            q = q + t[pre + "self_attn.q_proj.bias"]
            k = k + t[pre + "self_attn.k_proj.bias"]
            v = v + t[pre + "self_attn.v_proj.bias"]
        q, k, v = q.reshape(T, H, Dh), k.reshape(T, Hkv, Dh), v.reshape(T, Hkv, Dh)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)  # repeat_kv
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(Dh)
        s = np.where(causal, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, v).reshape(T, H * Dh)
        x = x + o @ t[pre + "self_attn.o_proj.weight"].T
        h = _rms(x, t[pre + "post_attention_layernorm.weight"], eps)
        g = h @ t[pre + "mlp.gate_proj.weight"].T
        u = h @ t[pre + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[pre + "mlp.down_proj.weight"].T
    x = _rms(x, t["model.norm.weight"], eps)
    head = t["lm_head.weight"] if "lm_head.weight" in t else t["model.embed_tokens.weight"]
    return x @ head.T


def test_loaded_model_matches_hf_formulas(tmp_path):
    cfg = nn.TransformerConfig(
        vocab_size=29,
        d_model=16,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=6,
        mlp_dim=20,
        qkv_bias=True,
        family="qwen2",
        rope_theta=500.0,
    )
    p = nn.init_params(cfg, key=jax.random.key(0))
    for name in ("bq", "bk", "bv"):
        p["layers"][name] = 0.2 * jax.random.normal(
            jax.random.key(len(name) + ord(name[1])), p["layers"][name].shape
        )
    p["layers"]["attn_norm"] = 1.0 + 0.1 * jax.random.normal(jax.random.key(9), (2, 16))
    io.save_safetensors(p, cfg, tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    tensors = {
        k: v.astype(np.float64) for k, v in load_file(str(tmp_path / "model.safetensors")).items()
    }
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])
    want = hf_forward(tensors, hf, ids)
    q = io.load_safetensors(tmp_path, io.config_from_hf(hf))
    got = jax.jit(lambda q, t: nn.apply(q, cfg, t).logits[0])(q, jnp.asarray(ids)[None])
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4, rtol=2e-4)
