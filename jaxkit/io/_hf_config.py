"""Hugging Face ``config.json`` <-> :class:`jaxkit.nn.TransformerConfig`.

Numeric fields are type-checked one by one (a wrong or missing field raises an error
naming it); ``rope_scaling`` (``linear``, ``llama3``, ``yarn``) and Qwen2's sliding
window (``use_sliding_window``, ``sliding_window``, ``max_window_layers`` or
``layer_types``) are read into the config.
"""

import dataclasses

from jaxkit import _validate
from jaxkit.nn import RopeScaling, TransformerConfig, rope_scaling_from_hf


def _num(c: dict, name: str, kind, default=None, *, required: bool = False):
    """Field ``name`` of ``config_json`` as ``kind`` (int or float), naming it on error."""
    if name not in c or c[name] is None:
        if required:
            raise ValueError(f"`config_json` is missing the field {name!r}.")
        return default
    v = c[name]
    ok = isinstance(v, int) if kind is int else isinstance(v, int | float)
    if isinstance(v, bool) or not ok:
        what = "an integer" if kind is int else "a number"
        raise TypeError(f"`config_json[{name!r}]` must be {what}, got {type(v).__name__} {v!r}.")
    return kind(v)


def _flag(c: dict, name: str, default: bool) -> bool:
    v = c.get(name, default)
    if not isinstance(v, bool):
        raise TypeError(f"`config_json[{name!r}]` must be a bool, got {type(v).__name__} {v!r}.")
    return v


def _window(c: dict, n_layers: int) -> tuple[int | None, int]:
    """``(sliding_window, max_window_layers)`` from Qwen2's fields (or ``layer_types``)."""
    sw = _num(c, "sliding_window", int) if _flag(c, "use_sliding_window", False) else None
    mw = _num(c, "max_window_layers", int, 28)
    lt = c.get("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != n_layers:
            raise ValueError(f"`config_json['layer_types']` must list {n_layers} layer types.")
        on = [t == "sliding_attention" for t in lt]
        if not any(on):
            return None, 0
        mw = on.index(True)
        if not all(on[mw:]) or sw is None:
            raise NotImplementedError(
                "`config_json['layer_types']`: only sliding-window layers from one index on "
                "(Qwen2's `max_window_layers` rule) with `use_sliding_window` are supported."
            )
    return sw, (0 if sw is None else mw)


def config_from_hf(config_json: dict) -> TransformerConfig:
    """A :class:`TransformerConfig` from a Hugging Face ``config.json`` dict.

    Supports ``model_type`` ``"llama"``, ``"qwen2"`` and ``"qwen3"`` (qk-norm, Qwen2
    names), ``rope_scaling`` of type ``linear``, ``llama3`` and ``yarn``, and Qwen2's
    sliding window (``use_sliding_window``, ``sliding_window``; blocks
    ``>= max_window_layers`` slide).

    Args:
      config_json: The parsed ``config.json``.

    Returns:
      The configuration.

    Raises:
      TypeError: For a field of the wrong type (e.g. a string where a number is due);
        the message names the field.
      ValueError: For an unsupported ``model_type`` or a missing field (named).
      NotImplementedError: For ``rope_scaling`` of type ``dynamic`` (or another
        unsupported type) or an activation other than SiLU.
    """
    if not isinstance(config_json, dict):
        raise TypeError(f"`config_json` must be a dict, got {type(config_json).__name__}.")
    c = config_json
    mt = c.get("model_type")
    if mt not in ("llama", "qwen2", "qwen3"):
        raise ValueError(
            f"`config_json['model_type']` must be one of 'llama', 'qwen2', 'qwen3'; got {mt!r}."
        )
    d = _num(c, "hidden_size", int, required=True)
    h = _num(c, "num_attention_heads", int, required=True)
    n_layers = _num(c, "num_hidden_layers", int, required=True)
    kw = dict(
        vocab_size=_num(c, "vocab_size", int, required=True),
        d_model=d,
        n_layers=n_layers,
        n_heads=h,
        n_kv_heads=_num(c, "num_key_value_heads", int, h),
        head_dim=_num(c, "head_dim", int, d // h if h else 0),
        mlp_dim=_num(c, "intermediate_size", int, required=True),
    )
    if c.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act={c['hidden_act']!r}; only 'silu' (SwiGLU).")
    rs = c.get("rope_scaling")
    if rs is not None and not isinstance(rs, dict):
        raise TypeError(f"`config_json['rope_scaling']` must be a dict, got {type(rs).__name__}.")
    if rs is not None and (rs.get("rope_type") or rs.get("type")) == "default":
        rs = None
    sw, mw = (None, 0) if mt == "llama" else _window(c, n_layers)
    extra = c.get("jaxkit", {})
    return TransformerConfig(
        **kw,
        rope_theta=_num(c, "rope_theta", float, 10000.0),
        norm_eps=_num(c, "rms_norm_eps", float, 1e-6),
        qk_norm=bool(extra.get("qk_norm", mt == "qwen3")),
        qkv_bias=_flag(c, "attention_bias", mt == "qwen2"),
        tie_embeddings=_flag(c, "tie_word_embeddings", False),
        causal=bool(extra.get("causal", True)),
        family="llama" if mt == "llama" else "qwen2",
        rope_scaling=None if rs is None else rope_scaling_from_hf(rs),
        sliding_window=sw,
        max_window_layers=mw,
    )


def _rope_to_hf(rs: RopeScaling) -> dict:
    out = {"rope_type": rs.rope_type, "factor": rs.factor}
    default = RopeScaling("linear", 1.0)
    for f in dataclasses.fields(RopeScaling)[2:]:
        v = getattr(rs, f.name)
        if v != getattr(default, f.name):
            out[f.name] = v
    return out


_HF_DTYPES = ("float32", "float16", "bfloat16", "float64")


def config_to_hf(cfg: TransformerConfig, *, dtype: str = "float32") -> dict:
    """The HF ``config.json`` dict written by :func:`save_safetensors`.

    The inverse of :func:`config_from_hf`; jaxkit-only switches go under the
    ``"jaxkit"`` key. ``dtype`` (the ``torch_dtype`` written) is one of ``"float32"``,
    ``"float16"``, ``"bfloat16"``, ``"float64"``: another name raises ValueError, a
    non-string TypeError.
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    _validate.one_of(_HF_DTYPES, dtype=dtype)  # another name: a config.json HF cannot read
    if cfg.family == "llama":
        mt, arch = "llama", "LlamaForCausalLM"
    elif cfg.qk_norm and not cfg.qkv_bias:
        mt, arch = "qwen3", "Qwen3ForCausalLM"
    else:
        mt, arch = "qwen2", "Qwen2ForCausalLM"
    if cfg.sliding_window is not None and cfg.family == "llama":
        raise ValueError("`cfg`: a sliding window needs family='qwen2' in the HF layout.")
    out = {
        "architectures": [arch],
        "model_type": mt,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.mlp_dim,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": cfg.qkv_bias,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "torch_dtype": dtype,
        "jaxkit": {"qk_norm": cfg.qk_norm, "causal": cfg.causal},
    }
    rs = cfg.rope_scaling
    if rs is not None:
        out["rope_scaling"] = _rope_to_hf(rs)
        if rs.rope_type == "yarn":  # newer HF versions derive the factor from this ratio
            out["max_position_embeddings"] = int(rs.original_max_position_embeddings * rs.factor)
    if cfg.sliding_window is not None:
        out.update(
            use_sliding_window=True,
            sliding_window=cfg.sliding_window,
            max_window_layers=cfg.max_window_layers,
        )
    return out
