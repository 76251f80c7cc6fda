"""DLMR's configuration and adapter parameters, and the check of a pair of configs.

The bank indices (``VISUAL``, ``REASONING``), :class:`DLMRConfig` (static, validated on
construction), :class:`DLMRParams` (the trainable adapter) and :func:`check_config` (the
DLMR config against the backbone's). :mod:`jaxkit.memory._dlmr` re-exports them; the rest
of the area imports them from there.
"""

import dataclasses
from typing import NamedTuple

from jaxkit import _validate, nn
from jaxkit.memory._lora import TARGETS
from jaxkit.memory._modules import Injector, Router

VISUAL, REASONING = 0, 1


@dataclasses.dataclass(frozen=True)
class DLMRConfig:
    """DLMR settings (static, hashable).

    Attributes:
      layer: Block ``l`` after which memory tokens are inserted (``0 <= l <
        n_layers - 1``: some block must read them); the injector reads block-``l``
        hidden states of the context.
      bank_sizes: ``(M_v, M_r)`` latents per bank (each >= max budget).
      budgets: Memory budgets ``k`` the router chooses among (each >= 1).
      n_max: Most injections per sequence.
      delimiter_ids: Token ids after which a step is eligible; empty: every
        generated step is eligible. [R] (the paper's set is not published.)
      injector: ``"tiny"`` (:class:`~jaxkit.memory.Injector`, a small cross-attention
        module over the block-``l`` states of the context) or ``"lora_replica"``
        (the spec's injector, :class:`~jaxkit.memory.LoraInjector`: the frozen LM
        with a LoRA adapter per bank, run on the context's embeddings and the
        latents). The default stays ``"tiny"`` (the spec's is ``"lora_replica"``):
        the replica re-runs the whole LM over the context at every injection.
      lora_rank: LoRA rank ``r`` (``"lora_replica"``).
      lora_alpha: LoRA ``alpha`` (scale ``alpha / r``).
      lora_targets: Adapted weights, among ``q k v o gate up down``.
      injector_dim: Width of the tiny injector.
      injector_heads: Its attention heads (divide ``injector_dim``).
      injector_layers: Its cross blocks.
      recency: Distances (in slots) the tiny injector's recency table tells apart.
      router_hidden: Hidden width of the router MLP.
      shared_bank: Ablation: one bank of ``M_v + M_r`` latents for both memories.
      fixed_k: Ablation: every eligible step injects ``fixed_k`` tokens (the
        router only picks the bank; no null at eligible steps). Must be a budget.
    """

    layer: int
    bank_sizes: tuple[int, int] = (32, 32)
    budgets: tuple[int, ...] = (4, 8, 16)
    n_max: int = 4
    delimiter_ids: tuple[int, ...] = ()
    injector: str = "tiny"
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
    injector_dim: int = 64
    injector_heads: int = 4
    injector_layers: int = 2
    recency: int = 64
    router_hidden: int = 64
    shared_bank: bool = False
    fixed_k: int | None = None

    def __post_init__(self):
        _validate.python_int(self.layer, name="layer", minimum=0)
        for name in ("bank_sizes", "budgets", "delimiter_ids"):
            v = getattr(self, name)
            if not isinstance(v, tuple | list):
                raise TypeError(f"`{name}` must be a tuple of ints, got {type(v).__name__}.")
            object.__setattr__(self, name, tuple(_validate.python_int(x, name=name) for x in v))
        if len(self.bank_sizes) != 2:
            raise ValueError(f"`bank_sizes` must hold 2 sizes, got {self.bank_sizes}.")
        if not self.budgets:
            raise ValueError("`budgets` must hold at least one memory budget.")
        if min(self.budgets) <= 0:
            raise ValueError(f"every memory budget must be >= 1, got budgets={self.budgets}.")
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"`budgets` must be distinct, got {self.budgets}.")
        if min(self.bank_sizes) < max(self.budgets):
            raise ValueError(
                f"`bank_sizes` {self.bank_sizes} must each be >= the largest budget "
                f"{max(self.budgets)}."
            )
        _validate.python_int(self.n_max, name="n_max", minimum=1)
        _validate.one_of(("tiny", "lora_replica"), injector=self.injector)
        _validate.python_int(self.lora_rank, name="lora_rank", minimum=1)
        a = self.lora_alpha
        if isinstance(a, bool) or not isinstance(a, int | float):
            raise TypeError(f"`lora_alpha` must be a Python number, got {type(a).__name__} {a!r}.")
        if not 0 < a < float("inf"):
            raise ValueError(
                f"`lora_alpha` must be a finite positive number, got {self.lora_alpha!r}."
            )
        if not isinstance(self.lora_targets, tuple | list) or not self.lora_targets:
            raise TypeError("`lora_targets` must be a non-empty tuple of names.")
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        bad = [t for t in self.lora_targets if t not in TARGETS]
        if bad:
            raise ValueError(f"`lora_targets` must be among {tuple(TARGETS)}, got {bad}.")
        for name in ("injector_dim", "injector_heads", "injector_layers", "recency"):
            _validate.python_int(getattr(self, name), name=name, minimum=1)
        _validate.python_int(self.router_hidden, name="router_hidden", minimum=1)
        if self.injector_dim % self.injector_heads:
            raise ValueError("`injector_heads` must divide `injector_dim`.")
        shared_bank = _validate.flag(self.shared_bank, name="shared_bank")  # NumPy's: hashable
        object.__setattr__(self, "shared_bank", shared_bank)
        if self.fixed_k is not None:
            k = _validate.python_int(self.fixed_k, name="fixed_k", minimum=1)
            if k not in self.budgets:
                raise ValueError(f"`fixed_k`={k} must be one of the budgets {self.budgets}.")

    @property
    def k_max(self) -> int:
        return max(self.budgets)

    @property
    def n_actions(self) -> int:
        """``1 + 2 |budgets|``: 0 is the null, ``1 + s |budgets| + j`` is (bank s, budgets[j])."""
        return 1 + 2 * len(self.budgets)


class DLMRParams(NamedTuple):
    """The trainable adapter (the backbone is never part of it).

    Attributes:
      banks: ``(Z^v [M_v, D], Z^r [M_r, D])``, or ``(Z [M_v + M_r, D],)`` with
        ``shared_bank``.
      injector: :class:`~jaxkit.memory.Injector` or :class:`~jaxkit.memory.LoraInjector`.
      router: :class:`~jaxkit.memory.Router`.
    """

    banks: tuple
    injector: Injector
    router: Router


def check_config(lm_cfg, cfg) -> None:
    """TypeError / ValueError for a bad pair of configs (the layer out of range)."""
    if not isinstance(cfg, DLMRConfig):
        raise TypeError(f"`cfg` must be a DLMRConfig, got {type(cfg).__name__}.")
    if not isinstance(lm_cfg, nn.TransformerConfig):
        raise TypeError(f"`lm_cfg` must be an nn.TransformerConfig, got {type(lm_cfg).__name__}.")
    if not lm_cfg.causal:
        raise ValueError("DLMR needs a causal backbone (`lm_cfg.causal=True`).")
    hi = lm_cfg.n_layers - 1
    if not 0 <= cfg.layer < hi:
        raise ValueError(
            f"`cfg.layer` must lie in [0, {hi}) (a block above it must read the memory), "
            f"got {cfg.layer}."
        )
