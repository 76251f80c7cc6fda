"""Checkpoint I/O: safetensors in the Hugging Face Llama / Qwen2 layouts (never downloads)."""

from jaxkit.io._safetensors import config_from_hf as config_from_hf
from jaxkit.io._safetensors import config_to_hf as config_to_hf
from jaxkit.io._safetensors import load_safetensors as load_safetensors
from jaxkit.io._safetensors import save_safetensors as save_safetensors
from jaxkit.io._safetensors import to_hf_tensors as to_hf_tensors
