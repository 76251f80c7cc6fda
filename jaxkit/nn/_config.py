"""Static configuration of the shared transformer backbone."""

import dataclasses
import math

from jaxkit import _validate

ROPE_TYPES = ("linear", "llama3", "yarn")


def _real(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"`{name}` must be a real number, got {type(v).__name__}.")
    if not math.isfinite(v):
        raise ValueError(f"`{name}` must be finite, got {name}={v}.")
    return float(v)


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling (Hugging Face ``rope_scaling``), frozen and hashable.

    Attributes:
      rope_type: ``"linear"`` (position interpolation), ``"llama3"`` (Llama 3.1+) or
        ``"yarn"`` (Qwen2.5 long context).
      factor: Context extension factor (> 0; >= 1 for ``llama3`` and ``yarn``).
      original_max_position_embeddings: Pre-training context length (``llama3``,
        ``yarn``; required there).
      low_freq_factor: ``llama3``: wavelengths above ``original / low_freq_factor``
        are fully interpolated.
      high_freq_factor: ``llama3``: wavelengths below ``original / high_freq_factor``
        are kept.
      beta_fast: ``yarn``: rotations bounding the extrapolated (high-frequency) band.
      beta_slow: ``yarn``: rotations bounding the interpolated (low-frequency) band.
      attention_factor: ``yarn``: cos/sin scale (default ``0.1 ln(factor) + 1``).
    """

    rope_type: str
    factor: float | int
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | int = 1.0
    high_freq_factor: float | int = 4.0
    beta_fast: float | int = 32.0
    beta_slow: float | int = 1.0
    attention_factor: float | int | None = None

    def __post_init__(self):
        if self.rope_type == "dynamic":
            raise NotImplementedError(
                "`rope_scaling` type 'dynamic' is not supported (its frequencies depend on "
                "the current sequence length, which a KV cache does not define)."
            )
        _validate.one_of(ROPE_TYPES, rope_type=self.rope_type)
        for name in ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            object.__setattr__(self, name, _real(getattr(self, name), name))
        if self.attention_factor is not None:
            object.__setattr__(
                self, "attention_factor", _real(self.attention_factor, "attention_factor")
            )
        if not self.factor > 0 or (self.rope_type != "linear" and self.factor < 1):
            raise ValueError(f"`factor` must be > 0 (>= 1 for llama3/yarn), got {self.factor}.")
        if self.rope_type != "linear":
            o = self.original_max_position_embeddings
            if isinstance(o, bool) or not isinstance(o, int):
                raise TypeError(
                    "`original_max_position_embeddings` must be a Python int for "
                    f"{self.rope_type!r} scaling, got {type(o).__name__}."
                )
            if o <= 0:
                raise ValueError(f"`original_max_position_embeddings` must be > 0, got {o}.")
        if self.rope_type == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError(
                "`high_freq_factor` must be > `low_freq_factor` > 0, got "
                f"{self.high_freq_factor} and {self.low_freq_factor}."
            )
        if self.attention_factor is not None and not self.attention_factor > 0:
            raise ValueError(
                f"`attention_factor` must be > 0, got attention_factor={self.attention_factor}."
            )
        if self.rope_type == "yarn" and not self.beta_fast > self.beta_slow > 0:
            raise ValueError(
                f"`beta_fast` must be > `beta_slow` > 0, got {self.beta_fast} and {self.beta_slow}."
            )


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Sizes and switches of a decoder-only transformer (or encoder, ``causal=False``).

    Frozen and hashable: the public functions take it as a static argument of their
    module-level ``jit``.

    Attributes:
      vocab_size: Vocabulary size V.
      d_model: Residual width D.
      n_layers: Number of blocks L.
      n_heads: Query heads H.
      n_kv_heads: Key/value heads Hkv (grouped-query attention; H % Hkv == 0).
      head_dim: Per-head size Dh (even, for RoPE).
      mlp_dim: SwiGLU hidden width F.
      rope_theta: RoPE base.
      norm_eps: RMSNorm epsilon.
      qk_norm: RMSNorm on each query/key head before RoPE (Qwen3 style).
      qkv_bias: Biases on the q/k/v projections (Qwen2).
      tie_embeddings: The LM head reuses ``embed`` (no ``lm_head`` parameter).
      causal: ``False`` gives a bidirectional encoder (full default mask).
      family: Checkpoint name layout, ``"llama"`` or ``"qwen2"``.
      rope_scaling: Optional :class:`RopeScaling` (a dict with the Hugging Face keys
        is converted).
      sliding_window: Qwen2 sliding-window attention: a query at logical position
        ``p`` sees keys at positions ``> p - sliding_window``; ``None`` disables it.
      max_window_layers: Blocks ``l >= max_window_layers`` use the sliding window
        (Qwen2's rule); blocks below it attend fully.
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_dim: int
    rope_theta: float | int = 10000.0
    norm_eps: float = 1e-6
    qk_norm: bool = False
    qkv_bias: bool = False
    tie_embeddings: bool = False
    causal: bool = True
    family: str = "llama"
    rope_scaling: RopeScaling | dict | None = None
    sliding_window: int | None = None
    max_window_layers: int = 0

    def __post_init__(self):
        for name in (
            "vocab_size",
            "d_model",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "mlp_dim",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"`{name}` must be a Python int, got {type(v).__name__}.")
            if v <= 0:
                raise ValueError(f"`{name}` must be > 0, got {name}={v}.")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"`n_heads` must be a multiple of `n_kv_heads`, got n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}."
            )
        if self.head_dim % 2:
            raise ValueError(f"`head_dim` must be even (RoPE), got head_dim={self.head_dim}.")
        for name in ("rope_theta", "norm_eps"):  # finite reals (inf: no rotation / zero norm)
            _real(getattr(self, name), name)
        if not self.rope_theta > 0:
            raise ValueError(f"`rope_theta` must be > 0, got rope_theta={self.rope_theta}.")
        if not self.norm_eps > 0:
            raise ValueError(f"`norm_eps` must be > 0, got norm_eps={self.norm_eps}.")
        for name in ("qk_norm", "qkv_bias", "tie_embeddings", "causal"):
            value = _validate.flag(getattr(self, name), name=name)  # NumPy's bool: JSON-able
            object.__setattr__(self, name, value)
        _validate.one_of(("llama", "qwen2"), family=self.family)
        rs = self.rope_scaling
        if isinstance(rs, dict):
            object.__setattr__(self, "rope_scaling", rope_scaling_from_hf(rs))
        elif rs is not None and not isinstance(rs, RopeScaling):
            raise TypeError(
                f"`rope_scaling` must be a RopeScaling, a dict or None, got {type(rs).__name__}."
            )
        sw = self.sliding_window
        if sw is not None and (not isinstance(sw, int) or isinstance(sw, bool)):
            raise TypeError(
                f"`sliding_window` must be a Python int or None, got {type(sw).__name__}."
            )
        if sw is not None and sw <= 0:
            raise ValueError(f"`sliding_window` must be > 0, got sliding_window={sw}.")
        mw = self.max_window_layers
        if not isinstance(mw, int) or isinstance(mw, bool):
            raise TypeError(f"`max_window_layers` must be a Python int, got {type(mw).__name__}.")
        if mw < 0:
            raise ValueError(f"`max_window_layers` must be >= 0, got max_window_layers={mw}.")

    @property
    def window_layers(self) -> tuple[bool, ...]:
        """Per block, whether it uses the sliding window."""
        on = self.sliding_window is not None
        return tuple(on and i >= self.max_window_layers for i in range(self.n_layers))


_HF_ROPE_KEYS = tuple(f.name for f in dataclasses.fields(RopeScaling))[1:]


def rope_scaling_from_hf(d: dict) -> RopeScaling:
    """A :class:`RopeScaling` from a Hugging Face ``rope_scaling`` dict.

    The type is read from ``rope_type`` (or the older ``type`` key); unknown keys raise
    ``ValueError`` naming them.
    """
    if not isinstance(d, dict):
        raise TypeError(f"`rope_scaling` must be a dict, got {type(d).__name__}.")
    d = dict(d)
    rtype = d.pop("rope_type", None)
    old = d.pop("type", None)
    rtype = rtype or old
    if rtype is None:
        raise ValueError("`rope_scaling` has no 'rope_type' (or 'type') field.")
    if rtype == "default":
        raise ValueError("`rope_scaling` type 'default' means no scaling: pass None.")
    unknown = sorted(set(d) - set(_HF_ROPE_KEYS))
    if unknown:
        raise ValueError(
            f"`rope_scaling` field(s) {', '.join(map(repr, unknown))} are not supported "
            f"for type {rtype!r}."
        )
    if "factor" not in d:
        raise ValueError("`rope_scaling` is missing the field 'factor'.")
    return RopeScaling(rope_type=rtype, **d)
