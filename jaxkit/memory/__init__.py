"""DLMR: dual latent memories with a router around a frozen causal LM. [R] reconstructed.

Dual-Latent Memory Routing (ICML 2026; the authors' code is unavailable, so this
area is a reconstruction from the abstract and a reading of the paper, marked [R]):
a visual and a reasoning latent bank, an injector that turns the first k latents
of a bank and the context into k memory tokens (a tiny cross-attention module, or
the spec's LoRA-adapted replica of the frozen LM, one adapter per bank), a router
that picks at eligible decoding steps the bank and k or no injection, inference with
adaptive injection (:func:`dlmr_generate`; the memory enters through ``jaxkit.nn.Interventions`` and
occupies cache slots and positions like ordinary tokens), three training stages
with the backbone frozen, the ablations (shared bank, frozen injector, fixed k),
and orbax save/restore of the adapter.
"""

from jaxkit.memory._dlmr import DLMRConfig as DLMRConfig
from jaxkit.memory._dlmr import DLMRParams as DLMRParams
from jaxkit.memory._dlmr import action_table as action_table
from jaxkit.memory._dlmr import init_dlmr as init_dlmr
from jaxkit.memory._dlmr import inject as inject
from jaxkit.memory._dlmr import memory_interventions as memory_interventions
from jaxkit.memory._forward import context_states as context_states
from jaxkit.memory._forward import memory_forward as memory_forward
from jaxkit.memory._generate import DLMRGeneration as DLMRGeneration
from jaxkit.memory._generate import dlmr_generate as dlmr_generate
from jaxkit.memory._io import restore_adapter as restore_adapter
from jaxkit.memory._io import save_adapter as save_adapter
from jaxkit.memory._lora import LoraInjector as LoraInjector
from jaxkit.memory._lora import lora_apply as lora_apply
from jaxkit.memory._modules import Injector as Injector
from jaxkit.memory._modules import Router as Router
from jaxkit.memory._reward import dlmr_reward as dlmr_reward
from jaxkit.memory._reward import group_advantages as group_advantages
from jaxkit.memory._train import Stage1Aux as Stage1Aux
from jaxkit.memory._train import Stage3Aux as Stage3Aux
from jaxkit.memory._train import dlmr_optimizer as dlmr_optimizer
from jaxkit.memory._train import dlmr_step as dlmr_step
from jaxkit.memory._train import stage1_loss as stage1_loss
from jaxkit.memory._train import stage2_loss as stage2_loss
from jaxkit.memory._train import stage3_loss as stage3_loss
