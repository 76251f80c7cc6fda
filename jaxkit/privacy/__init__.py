"""Differentially private LoRA: PRISM, baselines, LoRA utilities, accounting, audit.

PRISM (Wang & Zhang, ICML 2026, arXiv:2606.00944) clips and noises the intrinsic
(tangent-space) update of each LoRA module, so privatization depends only on
``Z = a b^T`` and not on the factor gauge. ``lowrank`` holds the fixed-rank
geometry; ``audit`` an empirical canary audit.
"""

from jaxkit.privacy import audit as audit
from jaxkit.privacy import lowrank as lowrank
from jaxkit.privacy._accounting import calibrate_sigma as calibrate_sigma
from jaxkit.privacy._accounting import epsilon as epsilon
from jaxkit.privacy._baselines import dp_aggregate as dp_aggregate
from jaxkit.privacy._baselines import ffa_lora as ffa_lora
from jaxkit.privacy._baselines import naive_dp_lora as naive_dp_lora
from jaxkit.privacy._baselines import nonprivate_lora as nonprivate_lora
from jaxkit.privacy._lora import LoraInit as LoraInit
from jaxkit.privacy._lora import export_adapter as export_adapter
from jaxkit.privacy._lora import load_adapter as load_adapter
from jaxkit.privacy._lora import lora_init as lora_init
from jaxkit.privacy._lora import lora_merge as lora_merge
from jaxkit.privacy._lora import lora_unmerge as lora_unmerge
from jaxkit.privacy._pergrad import PoissonBatch as PoissonBatch
from jaxkit.privacy._pergrad import per_example_grads as per_example_grads
from jaxkit.privacy._pergrad import poisson_batch as poisson_batch
from jaxkit.privacy._prism import PrivatizeState as PrivatizeState
from jaxkit.privacy._prism import prism as prism
from jaxkit.privacy._prism import prism_privatize as prism_privatize
from jaxkit.privacy._prism_adaptive import PrismAdaptiveState as PrismAdaptiveState
from jaxkit.privacy._prism_adaptive import prism_adaptive as prism_adaptive
from jaxkit.privacy.lowrank import LoraFactors as LoraFactors
