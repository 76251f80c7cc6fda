"""Shared neural-network backbone: functional transformer with logical RoPE positions
and a KV cache, bidirectional encoder (``causal=False``), MLP / small CNN / U-Net.
"""

from jaxkit.nn._cache import KVCache as KVCache
from jaxkit.nn._cache import commit as commit
from jaxkit.nn._cache import init_cache as init_cache
from jaxkit.nn._config import TransformerConfig as TransformerConfig
from jaxkit.nn._transformer import LMOutput as LMOutput
from jaxkit.nn._transformer import apply as apply
from jaxkit.nn._transformer import attention as attention
from jaxkit.nn._transformer import decode_step as decode_step
from jaxkit.nn._transformer import default_mask as default_mask
from jaxkit.nn._transformer import embed as embed
from jaxkit.nn._transformer import init_params as init_params
from jaxkit.nn._transformer import prefill as prefill
from jaxkit.nn._transformer import run_layers as run_layers
from jaxkit.nn._transformer import unembed as unembed
from jaxkit.nn._layers import MLP as MLP
from jaxkit.nn._layers import SmallCNN as SmallCNN
from jaxkit.nn._layers import UNet as UNet
from jaxkit.nn._sharding import cache_specs as cache_specs
from jaxkit.nn._sharding import param_specs as param_specs
from jaxkit.nn._tiny import Fixture as Fixture
from jaxkit.nn._tiny import TinyTask as TinyTask
from jaxkit.nn._tiny import load_fixture as load_fixture
from jaxkit.nn._tiny import tiny_task as tiny_task
from jaxkit.nn._tiny import tiny_task_accuracy as tiny_task_accuracy
from jaxkit.nn._tiny import tiny_task_vocab as tiny_task_vocab
