"""An independent NumPy forward written from the Hugging Face Llama/Qwen2 formulas
(``[out, in]`` weights, ``rotate_half`` RoPE, ``repeat_kv``), run directly on the
tensors of a checkpoint written by ``save_safetensors``: it pins the name map, the
transpositions and the architecture to what an HF model would compute."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from jaxkit import io, nn


def _rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def hf_inv_freq(hf):
    """``(inv_freq, attention_scaling)`` as transformers' ``ROPE_INIT_FUNCTIONS`` compute
    them (default, linear, llama3, yarn), written out element by element."""
    dim, base = hf["head_dim"], hf["rope_theta"]
    inv = [1.0 / base ** (2 * i / dim) for i in range(dim // 2)]
    rs = hf.get("rope_scaling")
    if rs is None:
        return np.array(inv), 1.0
    kind, factor = rs.get("rope_type", rs.get("type")), rs["factor"]
    if kind == "linear":
        return np.array(inv) / factor, 1.0
    old = rs["original_max_position_embeddings"]
    if kind == "llama3":
        lo_wl = old / rs["low_freq_factor"]
        hi_wl = old / rs["high_freq_factor"]
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < hi_wl:
                out.append(f)
            elif wl > lo_wl:
                out.append(f / factor)
            else:
                smooth = (old / wl - rs["low_freq_factor"]) / (
                    rs["high_freq_factor"] - rs["low_freq_factor"]
                )
                out.append((1 - smooth) * f / factor + smooth * f)
        return np.array(out), 1.0
    assert kind == "yarn"

    def corr(rot):
        return (dim * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr(rs.get("beta_fast", 32))), 0)
    high = min(math.ceil(corr(rs.get("beta_slow", 1))), dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i, f in enumerate(inv):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extra = 1 - ramp  # share of the extrapolated (unscaled) frequency
        out.append(f / factor * (1 - extra) + f * extra)
    return np.array(out), 0.1 * math.log(factor) + 1.0


def hf_forward(t, hf, ids):
    L, H, Hkv = hf["num_hidden_layers"], hf["num_attention_heads"], hf["num_key_value_heads"]
    Dh, eps = hf["head_dim"], hf["rms_norm_eps"]
    T = ids.shape[0]
    x = t["model.embed_tokens.weight"][ids].astype(np.float64)
    inv_freq, att = hf_inv_freq(hf)
    freqs = np.outer(np.arange(T), inv_freq)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[:, None] * att, np.sin(emb)[:, None] * att
    causal = np.tril(np.ones((T, T), bool))
    qi, kj = np.arange(T)[:, None], np.arange(T)[None, :]
    sw = hf.get("sliding_window") if hf.get("use_sliding_window") else None
    for i in range(L):
        mask = causal
        if sw is not None and i >= hf["max_window_layers"]:
            mask = causal & (kj > qi - sw)  # transformers' sliding_window_overlay
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
        s = np.where(mask, s, -np.inf)
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


_SCALED = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    # theta 100, Dh 16: wavelengths 6.3, 11.2, 19.9, ...: all three llama3 bands
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 2.0,
        "original_max_position_embeddings": 16,
    },
    # Qwen2.5's spelling ("type"); correction range [0, 2] at these sizes
    "yarn": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
}


@pytest.mark.parametrize("kind", ["linear", "llama3", "yarn", "sliding_window"])
def test_rope_scaling_and_sliding_window_match_hf_formulas(kind, tmp_path):
    cfg = nn.TransformerConfig(
        vocab_size=19,
        d_model=16,
        n_layers=2,
        n_heads=2,
        n_kv_heads=1,
        head_dim=16,
        mlp_dim=16,
        qkv_bias=True,
        family="qwen2",
        rope_theta=100.0,
    )
    p = nn.init_params(cfg, key=jax.random.key(1))
    io.save_safetensors(p, cfg, tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    if kind == "sliding_window":
        hf.update(use_sliding_window=True, sliding_window=3, max_window_layers=1)
    else:
        hf["rope_scaling"] = _SCALED[kind]
    cfg2 = io.config_from_hf(hf)
    tensors = {
        k: v.astype(np.float64) for k, v in load_file(str(tmp_path / "model.safetensors")).items()
    }
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8])
    want = hf_forward(tensors, hf, ids)
    plain = hf_forward(tensors, {**hf, "rope_scaling": None, "use_sliding_window": False}, ids)
    assert np.max(np.abs(want - plain)) > 1e-3  # the feature changes the logits
    got = nn.apply(p, cfg2, jnp.asarray(ids)[None]).logits[0]
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4, rtol=2e-4)
