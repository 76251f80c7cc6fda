"""Checkpoint I/O and the packaged fixtures.

Safetensors in the Hugging Face Llama / Qwen2 layouts (never downloads), raw named
tensors (``save_tensors`` / ``load_tensors``, e.g. for LoRA adapters), and one loader
with one on-disk format for every packaged fixture.
"""

from jaxkit.io._fixtures import Fixture as Fixture
from jaxkit.io._fixtures import load_fixture as load_fixture
from jaxkit.io._fixtures import load_fixture_tensors as load_fixture_tensors
from jaxkit.io._fixtures import save_fixture as save_fixture
from jaxkit.io._hf_config import config_from_hf as config_from_hf
from jaxkit.io._hf_config import config_to_hf as config_to_hf
from jaxkit.io._orbax import restore_checkpoint as restore_checkpoint
from jaxkit.io._orbax import save_checkpoint as save_checkpoint
from jaxkit.io._safetensors import load_safetensors as load_safetensors
from jaxkit.io._safetensors import load_tensors as load_tensors
from jaxkit.io._safetensors import save_safetensors as save_safetensors
from jaxkit.io._safetensors import save_tensors as save_tensors
from jaxkit.io._safetensors import to_hf_tensors as to_hf_tensors
