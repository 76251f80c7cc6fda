"""Packaged fixtures: tiny trained models shipped in ``jaxkit/_fixtures/<name>/``.

One on-disk format for every fixture: a Hugging Face layout checkpoint folder
(``config.json`` + ``model.safetensors``, see :func:`save_safetensors`) plus a
``task.json`` with the training metadata (task, steps, measured accuracy, ...). A
fixture may also ship trained adapter arrays beside its model, as named tensors in a
``.safetensors`` file (:func:`jaxkit.io.save_tensors`), read by
:func:`load_fixture_tensors`.
"""

import importlib.resources
import json
import os
import pathlib
from typing import NamedTuple

import jax.numpy as jnp

from jaxkit.io._hf_config import config_from_hf
from jaxkit.io._safetensors import load_safetensors, load_tensors, save_safetensors
from jaxkit.nn import TransformerConfig

_INFO = "task.json"


class Fixture(NamedTuple):
    """A packaged tiny model: parameters, configuration and training metadata."""

    params: dict
    cfg: TransformerConfig
    info: dict


def _names() -> list[str]:
    root = importlib.resources.files("jaxkit._fixtures")
    return sorted(p.name for p in root.iterdir() if p.joinpath("config.json").is_file())


def _root(name):
    """The packaged folder of fixture ``name``; errors name the argument."""
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a str, got {type(name).__name__}.")
    root = importlib.resources.files("jaxkit._fixtures").joinpath(name)
    if not root.joinpath("config.json").is_file():
        raise ValueError(
            f"`name`: no fixture named {name!r} in jaxkit/_fixtures "
            f"(available: {', '.join(map(repr, _names()))})."
        )
    return root


def load_fixture(name: str = "tiny_lm") -> Fixture:
    """Load a tiny trained model shipped in ``jaxkit/_fixtures/<name>/``.

    Args:
      name: Fixture folder name: ``"tiny_lm"`` (the ``counting`` task of
        :func:`jaxkit.nn.tiny_task`, made by ``scripts/train_tiny_lm.py``) or
        ``"wedlm_counting"`` (the WeDLM model of the ``noisy_counting`` task, made by
        ``scripts/train_wedlm_fixture.py``) or ``"td3b_toy_mdlm"`` (the toy peptide
        MDLM of ``jaxkit.diffusion``, made by ``scripts/train_td3b_fixture.py``).

    Returns:
      :class:`Fixture` ``(params (f32), cfg, info)``; ``info`` holds the task name,
      training steps and measured accuracy (``task.json``).

    Raises:
      ValueError: If no fixture of that name is shipped (the message lists them).
    """
    root = _root(name)
    with importlib.resources.as_file(root) as folder:
        cfg = config_from_hf(json.loads((folder / "config.json").read_text()))
        info_path = folder / _INFO
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
        params = load_safetensors(folder, cfg, dtype=jnp.float32)
    return Fixture(params, cfg, info)


def load_fixture_tensors(name: str, filename: str) -> dict:
    """Named arrays shipped beside a fixture's model (e.g. a trained adapter).

    Args:
      name: Fixture folder name (as :func:`load_fixture`'s).
      filename: A ``.safetensors`` file in that folder, written by
        :func:`jaxkit.io.save_tensors`.

    Returns:
      ``{name: numpy array}`` (:func:`jaxkit.io.load_tensors`).

    Raises:
      ValueError: If the fixture or the file is not shipped (the message lists what is).
    """
    if not isinstance(filename, str):
        raise TypeError(f"`filename` must be a str, got {type(filename).__name__}.")
    root = _root(name)
    if not filename.endswith(".safetensors") or not root.joinpath(filename).is_file():
        have = sorted(p.name for p in root.iterdir() if p.name.endswith(".safetensors"))
        raise ValueError(f"`filename`: fixture {name!r} ships no {filename!r} (it has {have}).")
    with importlib.resources.as_file(root.joinpath(filename)) as f:
        return load_tensors(f)


def save_fixture(params: dict, cfg: TransformerConfig, out_dir, info: dict) -> pathlib.Path:
    """Write a fixture folder in :func:`load_fixture`'s format.

    Args:
      params: Parameters (:func:`jaxkit.nn.init_params` layout), stored as given.
      cfg: Their configuration.
      out_dir: Output folder (created if needed).
      info: JSON-serialisable training metadata, written to ``task.json``.

    Returns:
      The output folder.
    """
    if not isinstance(info, dict):
        raise TypeError(f"`info` must be a dict, got {type(info).__name__}.")
    out = save_safetensors(params, cfg, out_dir)
    (pathlib.Path(os.fspath(out)) / _INFO).write_text(json.dumps(info, indent=2) + "\n")
    return out
