"""AI engrams: closed-form memory traces in linear layers (identify, erase, keep, compose).

Per linear site ``y = x @ w + b`` and memory ``k`` (a class, a fact set, a user's
data), the engram ``E_k = (n_k / N) C^+ C_k [w; b]`` is found in closed form from
forward statistics only (:func:`collect_stats` -> :func:`extract`); :func:`erase`
removes memories, :func:`keep_only` keeps only them, :func:`compose` mixes them.
:func:`criteria` measures necessity, specificity, sufficiency and reactivation.
On a :mod:`jaxkit.nn` language model, :func:`transformer_taps`,
:func:`transformer_layers` and :func:`set_transformer_layers` give the MLP sites.

References:
  J. Kwon, D.-K. Kim, J. Kim, Y. Kim, W. Kook, M. Cha, "AI Engram: In Search of
  Memory Traces in Artificial Intelligence", ICML 2026, arXiv:2606.14997 (code
  jeakwon/ai-engram).
"""

from jaxkit.editing._conv import conv_patches as conv_patches
from jaxkit.editing._conv import conv_weight_to_linear as conv_weight_to_linear
from jaxkit.editing._conv import linear_to_conv_weight as linear_to_conv_weight
from jaxkit.editing._criteria import Criteria as Criteria
from jaxkit.editing._criteria import criteria as criteria
from jaxkit.editing._engram import compose as compose
from jaxkit.editing._engram import default_rcond as default_rcond
from jaxkit.editing._engram import engram_projection as engram_projection
from jaxkit.editing._engram import erase as erase
from jaxkit.editing._engram import extract as extract
from jaxkit.editing._engram import get_layers as get_layers
from jaxkit.editing._engram import keep_only as keep_only
from jaxkit.editing._engram import set_layers as set_layers
from jaxkit.editing._engram_checks import Engrams as Engrams
from jaxkit.editing._engram_checks import Linear as Linear
from jaxkit.editing._equivalence import memit_erase as memit_erase
from jaxkit.editing._equivalence import natural_gradient_erase as natural_gradient_erase
from jaxkit.editing._stats import CovStats as CovStats
from jaxkit.editing._stats import collect_stats as collect_stats
from jaxkit.editing._stats import merge_stats as merge_stats
from jaxkit.editing._transformer import set_transformer_layers as set_transformer_layers
from jaxkit.editing._transformer import transformer_layers as transformer_layers
from jaxkit.editing._transformer import transformer_taps as transformer_taps
