import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxkit import io, nn

CFG = nn.TransformerConfig(
    vocab_size=20,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    mlp_dim=24,
    qkv_bias=True,
    family="qwen2",
)


@pytest.fixture(scope="module")
def setup():
    p = nn.init_params(CFG, key=jax.random.key(0))
    p["layers"]["bq"] = jnp.full_like(p["layers"]["bq"], 0.1)
    toks = jax.random.randint(jax.random.key(1), (2, 6), 0, CFG.vocab_size)
    logits = jax.jit(lambda p: nn.apply(p, CFG, toks).logits)
    return p, toks, logits


def _tree_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_roundtrip_single_file(setup, tmp_path):
    p, _, logits = setup
    out = io.save_safetensors(p, CFG, tmp_path)
    assert (out / "model.safetensors").exists()
    cfg2 = io.config_from_hf(json.loads((out / "config.json").read_text()))
    assert cfg2 == CFG
    q = io.load_safetensors(tmp_path, cfg2)
    _tree_equal(p, q)
    np.testing.assert_array_equal(logits(p), logits(q))
    # HF layout: [out, in] weights
    from safetensors.numpy import load_file

    t = load_file(str(out / "model.safetensors"))
    np.testing.assert_array_equal(
        t["model.layers.1.self_attn.q_proj.weight"], np.asarray(p["layers"]["wq"][1]).T
    )
    assert "model.layers.0.self_attn.k_proj.bias" in t


def test_roundtrip_sharded_index(setup, tmp_path):
    p, _, logits = setup
    io.save_safetensors(p, CFG, tmp_path, max_shard_bytes=3000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert not (tmp_path / "model.safetensors").exists()
    q = io.load_safetensors(tmp_path / "model.safetensors.index.json", CFG)
    np.testing.assert_array_equal(logits(p), logits(q))


def test_load_on_mesh_reads_slices(setup, tmp_path, monkeypatch):
    from jaxkit.io import _safetensors as impl

    p, toks, logits = setup
    io.save_safetensors(p, CFG, tmp_path, max_shard_bytes=4000)
    mesh = jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])
    reads = []
    orig = impl._Reader.read

    def spy(self, name, want_shape, index=None):
        out = orig(self, name, want_shape, index)
        reads.append((name, out.shape, tuple(want_shape)))
        return out

    monkeypatch.setattr(impl._Reader, "read", spy)
    q = io.load_safetensors(tmp_path, CFG, mesh=mesh)
    q_proj = [r for r in reads if r[0].endswith("q_proj.weight")]
    assert q_proj and all(got[0] == want[0] // 2 for _, got, want in q_proj)  # half the rows
    emb = [r for r in reads if r[0] == "model.embed_tokens.weight"]
    assert emb and all(got == (10, 16) for _, got, _ in emb)
    assert q["layers"]["wq"].sharding.spec == P(None, None, "model")
    assert q["embed"].sharding.spec == P("model", None)
    _tree_equal(p, q)
    # bf16 conversion on the way in
    r = io.load_safetensors(tmp_path, CFG, dtype=jnp.bfloat16)
    assert r["embed"].dtype == jnp.bfloat16


def test_tied_and_llama_config(tmp_path):
    cfg = nn.TransformerConfig(
        vocab_size=7,
        d_model=8,
        n_layers=1,
        n_heads=2,
        n_kv_heads=2,
        head_dim=4,
        mlp_dim=8,
        tie_embeddings=True,
        qk_norm=True,
    )
    p = nn.init_params(cfg, key=jax.random.key(3))
    io.save_safetensors(p, cfg, tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    assert hf["model_type"] == "llama" and hf["tie_word_embeddings"]
    cfg2 = io.config_from_hf(hf)
    assert cfg2 == cfg
    _tree_equal(p, io.load_safetensors(tmp_path, cfg2))


def test_config_from_hf_qwen2_defaults():
    hf = {
        "model_type": "qwen2",
        "vocab_size": 100,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "rope_theta": 1e6,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    }
    c = io.config_from_hf(hf)
    assert c.qkv_bias and c.family == "qwen2" and c.head_dim == 16 and c.rope_theta == 1e6
    with pytest.raises(ValueError, match="model_type"):
        io.config_from_hf({**hf, "model_type": "gpt2"})
    with pytest.raises(NotImplementedError, match="dynamic"):
        io.config_from_hf({**hf, "rope_scaling": {"type": "dynamic", "factor": 2.0}})
    with pytest.raises(TypeError, match="original_max_position_embeddings"):
        io.config_from_hf({**hf, "rope_scaling": {"type": "llama3", "factor": 8.0}})
    with pytest.raises(ValueError, match="mscale"):
        io.config_from_hf({**hf, "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": 1}})
    with pytest.raises(ValueError, match="hidden_size"):
        io.config_from_hf({k: v for k, v in hf.items() if k != "hidden_size"})
    # a non-numeric field names itself (it used to fail deep inside int())
    with pytest.raises(TypeError, match="intermediate_size"):
        io.config_from_hf({**hf, "intermediate_size": "128"})
    with pytest.raises(TypeError, match="rope_theta"):
        io.config_from_hf({**hf, "rope_theta": [1e6]})
    with pytest.raises(TypeError, match="num_hidden_layers"):
        io.config_from_hf({**hf, "num_hidden_layers": True})
    with pytest.raises(ValueError, match="vocab_size"):
        io.config_from_hf({**hf, "vocab_size": None})
    # sliding window: only when switched on; layers >= max_window_layers slide
    sw = {**hf, "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}
    c = io.config_from_hf(sw)
    assert c.sliding_window == 8 and c.window_layers == (False, True)
    assert io.config_from_hf({**sw, "use_sliding_window": False}).sliding_window is None
    assert io.config_from_hf(io.config_to_hf(c)) == c
    lt = {**sw, "layer_types": ["full_attention", "sliding_attention"]}
    assert io.config_from_hf(lt) == c
    with pytest.raises(NotImplementedError, match="layer_types"):
        io.config_from_hf({**lt, "layer_types": ["sliding_attention", "full_attention"]})
    rs = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    c = io.config_from_hf({**hf, "rope_scaling": rs})
    assert c.rope_scaling == nn.RopeScaling("yarn", 4.0, 32)
    assert io.config_from_hf(io.config_to_hf(c)) == c
    with pytest.raises(ValueError, match="`dtype`"):  # wrote an unreadable config before
        io.config_to_hf(c, dtype="float7")


def test_load_safetensors_given_a_config_json_names_path(setup, tmp_path):
    p, _, _ = setup
    io.save_safetensors(p, CFG, tmp_path)
    with pytest.raises(ValueError, match="`path`.*config"):
        io.load_safetensors(tmp_path / "config.json", CFG)
    other = tmp_path / "weights.bin"
    other.write_bytes(b"not a safetensors file at all")
    with pytest.raises(ValueError, match="`path`"):
        io.load_safetensors(other, CFG)


def test_errors_missing_corrupt_missing_tensor(setup, tmp_path):
    p, _, _ = setup
    with pytest.raises(FileNotFoundError, match="nope"):
        io.load_safetensors(tmp_path / "nope", CFG)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        io.load_safetensors(tmp_path, CFG)  # empty directory
    good = tmp_path / "good"
    io.save_safetensors(p, CFG, good)
    blob = (good / "model.safetensors").read_bytes()
    # truncated file
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "model.safetensors").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match="trunc"):
        io.load_safetensors(trunc, CFG)
    # corrupted header
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes(
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json!!!!!!!" + blob[24:]
    )
    with pytest.raises(ValueError, match="bad"):
        io.load_safetensors(bad, CFG)
    # missing tensor: a config with one more layer than the checkpoint has
    cfg3 = nn.TransformerConfig(**{**CFG.__dict__, "n_layers": 3})
    with pytest.raises(ValueError, match=r"model\.layers\.2\..*good"):
        io.load_safetensors(good, cfg3)
    # shape mismatch
    cfg4 = nn.TransformerConfig(**{**CFG.__dict__, "vocab_size": 21})
    with pytest.raises(ValueError, match="embed_tokens"):
        io.load_safetensors(good, cfg4)
    # index naming a missing shard
    sh = tmp_path / "sharded"
    io.save_safetensors(p, CFG, sh, max_shard_bytes=3000)
    victim = sorted(sh.glob("model-*.safetensors"))[-1]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name):
        io.load_safetensors(sh, CFG)


def test_raw_tensors_roundtrip_and_errors(tmp_path):
    # the primitive adapter files (e.g. a PEFT LoRA adapter) go through
    t = {"a.lora_A.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2)}
    path = io.save_tensors(t, tmp_path / "sub" / "adapter_model.safetensors", metadata={"k": "v"})
    back = io.load_tensors(path)
    assert set(back) == set(t)
    for k in t:
        np.testing.assert_array_equal(back[k], t[k])
    with pytest.raises(FileNotFoundError, match="nope"):
        io.load_tensors(tmp_path / "nope.safetensors")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="`path`"):
        io.load_tensors(tmp_path / "config.json")
    (tmp_path / "junk.safetensors").write_bytes(b"junk")
    with pytest.raises(ValueError, match="`path`"):
        io.load_tensors(tmp_path / "junk.safetensors")
    with pytest.raises(ValueError, match="tensors"):
        io.save_tensors({}, tmp_path / "empty.safetensors")
    # were safetensors' own errors without the argument name
    with pytest.raises(TypeError, match="tensors"):
        io.save_tensors({"a": np.array(["x"])}, tmp_path / "s.safetensors")
    with pytest.raises(TypeError, match="tensors"):
        io.save_tensors({1: np.ones(2)}, tmp_path / "k.safetensors")
    with pytest.raises(TypeError, match="metadata"):
        io.save_tensors({"a": np.ones(2)}, tmp_path / "m.safetensors", metadata={"k": 1})
