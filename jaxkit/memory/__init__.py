"""DLMR: dual latent memories with a router around a frozen causal LM. [R] reconstructed.

Dual-Latent Memory Routing (ICML 2026; the authors' code is unavailable, so this
area is a reconstruction from the abstract and a reading of the paper, marked [R]):
a visual and a reasoning latent bank, an injector that turns the first k latents
of a bank and the context into k memory tokens, a router that picks at eligible
decoding steps the bank and k or no injection, inference with adaptive injection
(:func:`dlmr_generate`; the memory enters through ``jaxkit.nn.Interventions`` and
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
from jaxkit.memory._generate import DLMRGeneration as DLMRGeneration
from jaxkit.memory._generate import dlmr_generate as dlmr_generate
from jaxkit.memory._modules import Injector as Injector
from jaxkit.memory._modules import Router as Router
