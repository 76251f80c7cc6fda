"""Shared neural-network backbone.

A functional transformer with logical RoPE positions, a KV cache and one
intervention mechanism (``interventions=``: residual edits, inserted latents, MLP
read sites), the
bidirectional encoder (``causal=False``), MLP / small CNN / U-Net, and the synthetic
tasks of the packaged tiny models (loaded with ``jaxkit.io.load_fixture``).
"""

from jaxkit.nn._attention import attention as attention
from jaxkit.nn._blocks import LayersOutput as LayersOutput
from jaxkit.nn._blocks import default_mask as default_mask
from jaxkit.nn._blocks import run_layers as run_layers
from jaxkit.nn._cache import KVCache as KVCache
from jaxkit.nn._cache import commit as commit
from jaxkit.nn._cache import init_cache as init_cache
from jaxkit.nn._config import RopeScaling as RopeScaling
from jaxkit.nn._config import TransformerConfig as TransformerConfig
from jaxkit.nn._config import rope_scaling_from_hf as rope_scaling_from_hf
from jaxkit.nn._decode import StepOutput as StepOutput
from jaxkit.nn._decode import decode_step as decode_step
from jaxkit.nn._decode import prefill as prefill
from jaxkit.nn._forward import LMOutput as LMOutput
from jaxkit.nn._forward import apply as apply
from jaxkit.nn._forward import embed as embed
from jaxkit.nn._forward import unembed as unembed
from jaxkit.nn._intervene import Interventions as Interventions
from jaxkit.nn._intervene import MLPRead as MLPRead
from jaxkit.nn._intervene import combine_interventions as combine_interventions
from jaxkit.nn._kv_rows import write_kv as write_kv
from jaxkit.nn._layers import MLP as MLP
from jaxkit.nn._layers import SmallCNN as SmallCNN
from jaxkit.nn._layers import UNet as UNet
from jaxkit.nn._params import init_params as init_params
from jaxkit.nn._params import param_shapes as param_shapes
from jaxkit.nn._params import stack_layers as stack_layers
from jaxkit.nn._params import unstack_layers as unstack_layers
from jaxkit.nn._sharding import cache_specs as cache_specs
from jaxkit.nn._sharding import param_specs as param_specs
from jaxkit.nn._tiny import NOISY_COUNTING as NOISY_COUNTING
from jaxkit.nn._tiny import TINY_TASKS as TINY_TASKS
from jaxkit.nn._tiny import CountingSpec as CountingSpec
from jaxkit.nn._tiny import TinyTask as TinyTask
from jaxkit.nn._tiny import tiny_task as tiny_task
from jaxkit.nn._tiny import tiny_task_accuracy as tiny_task_accuracy
from jaxkit.nn._tiny import tiny_task_vocab as tiny_task_vocab
