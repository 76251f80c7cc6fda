"""Steering a frozen causal LM: SVGT (value module + bridge tokens) and baselines.

SVGT (Stable Value Guidance Transformer, ICML 2026): an independent value module
reads block-``l`` hidden states, scores harm in its own value space, and inserts K
bridge tokens after the prompt at block ``l`` through ``jaxkit.nn.Interventions``;
three training stages with the backbone frozen; cached and recompute generation
with an optional EMA bridge refresh from the current token (exact in the cache); a
last-token or learned attention-pooling value encoder. Baselines: mean-difference
activation steering (CAA, :func:`caa_vector` + :func:`steer_add`) and a prompt prefix
(:func:`prefix_prompts`).

The backbone is any ``jaxkit.nn`` parameter dict, e.g. a local Hugging Face folder
(Llama / Qwen2 names) read with ``jaxkit.io.config_from_hf`` +
``jaxkit.io.load_safetensors``; it is never modified (every loss and generator takes
it under ``stop_gradient`` and no optimizer sees it). The value side is saved and
restored with orbax (``jaxkit[ckpt]``).
"""

from jaxkit.steering._generate import caa_vector as caa_vector
from jaxkit.steering._generate import prefix_prompts as prefix_prompts
from jaxkit.steering._generate import steer_add as steer_add
from jaxkit.steering._generate import svgt_generate as svgt_generate
from jaxkit.steering._io import restore_adapter as restore_adapter
from jaxkit.steering._io import save_adapter as save_adapter
from jaxkit.steering._modules import BridgeVLP as BridgeVLP
from jaxkit.steering._modules import Discriminator as Discriminator
from jaxkit.steering._modules import ValueEncoder as ValueEncoder
from jaxkit.steering._svgt import SVGTConfig as SVGTConfig
from jaxkit.steering._svgt import SVGTForward as SVGTForward
from jaxkit.steering._svgt import SVGTParams as SVGTParams
from jaxkit.steering._svgt import init_svgt as init_svgt
from jaxkit.steering._svgt import insert_bridge as insert_bridge
from jaxkit.steering._svgt import refresh_bridge as refresh_bridge
from jaxkit.steering._svgt import svgt_forward as svgt_forward
from jaxkit.steering._svgt import value_correction as value_correction
from jaxkit.steering._train import Stage3Aux as Stage3Aux
from jaxkit.steering._train import hidden_at as hidden_at
from jaxkit.steering._train import stage1_loss as stage1_loss
from jaxkit.steering._train import stage2_loss as stage2_loss
from jaxkit.steering._train import stage3_loss as stage3_loss
from jaxkit.steering._train import svgt_optimizer as svgt_optimizer
from jaxkit.steering._train import svgt_step as svgt_step
