"""Static configuration of the shared transformer backbone."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Sizes and switches of a decoder-only transformer (or encoder, ``causal=False``).

    Frozen and hashable: pass it as a static argument of ``jit`` or close over it.

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
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_dim: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    qk_norm: bool = False
    qkv_bias: bool = False
    tie_embeddings: bool = False
    causal: bool = True
    family: str = "llama"

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
        if not self.rope_theta > 0:
            raise ValueError(f"`rope_theta` must be > 0, got rope_theta={self.rope_theta}.")
        if not self.norm_eps > 0:
            raise ValueError(f"`norm_eps` must be > 0, got norm_eps={self.norm_eps}.")
        if self.family not in ("llama", "qwen2"):
            raise ValueError(f"`family` must be one of 'llama', 'qwen2'; got {self.family!r}.")
