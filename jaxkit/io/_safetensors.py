"""Safetensors checkpoints in the Hugging Face Llama / Qwen2 name layouts.

Reads ``model.safetensors`` or a sharded ``model.safetensors.index.json`` with the
``safetensors`` package's NumPy backend (no torch), converting HF ``[out, in]``
linear weights to jaxkit's ``[in, out]`` and stacking the per-layer tensors on a
leading ``n_layers`` axis. With a mesh, every parameter is built by
``jax.make_array_from_callback`` and each device reads only its own slice from
the memory-mapped file (``safe_open(...).get_slice``), so no full host copy is
made. Never downloads anything: a missing path is an error.

Name map (``{i}`` = layer):
  ``model.embed_tokens.weight`` -> ``embed``; ``model.norm.weight`` -> ``final_norm``;
  ``lm_head.weight`` -> ``lm_head`` (absent when tied);
  ``model.layers.{i}.input_layernorm.weight`` -> ``attn_norm``;
  ``...self_attn.{q,k,v,o}_proj.weight`` -> ``wq, wk, wv, wo``;
  ``...self_attn.{q,k,v}_proj.bias`` -> ``bq, bk, bv`` (Qwen2);
  ``...self_attn.{q,k}_norm.weight`` -> ``q_norm, k_norm`` (qk-norm);
  ``...post_attention_layernorm.weight`` -> ``mlp_norm``;
  ``...mlp.{gate,up,down}_proj.weight`` -> ``w_gate, w_up, w_down``.
"""

import json
import math
import os
import pathlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import _validate
from jaxkit._extras import require
from jaxkit.io._hf_config import config_to_hf
from jaxkit.nn import TransformerConfig, param_shapes, param_specs, stack_layers

_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"

# jaxkit layer key -> (HF suffix, transposed)
_LAYER_NAMES = {
    "attn_norm": ("input_layernorm.weight", False),
    "wq": ("self_attn.q_proj.weight", True),
    "wk": ("self_attn.k_proj.weight", True),
    "wv": ("self_attn.v_proj.weight", True),
    "wo": ("self_attn.o_proj.weight", True),
    "bq": ("self_attn.q_proj.bias", False),
    "bk": ("self_attn.k_proj.bias", False),
    "bv": ("self_attn.v_proj.bias", False),
    "q_norm": ("self_attn.q_norm.weight", False),
    "k_norm": ("self_attn.k_norm.weight", False),
    "mlp_norm": ("post_attention_layernorm.weight", False),
    "w_gate": ("mlp.gate_proj.weight", True),
    "w_up": ("mlp.up_proj.weight", True),
    "w_down": ("mlp.down_proj.weight", True),
}
_TOP_NAMES = {
    "embed": ("model.embed_tokens.weight", False),
    "final_norm": ("model.norm.weight", False),
    "lm_head": ("lm_head.weight", True),
}


def _safe():
    require("safetensors.numpy", extra="io", what="jaxkit.io needs safetensors")
    return require("safetensors", extra="io", what="jaxkit.io needs safetensors")


def _layer_keys(cfg: TransformerConfig) -> list[str]:
    return list(param_shapes(cfg)["layers"])


def _shapes(cfg: TransformerConfig) -> dict:
    """The parameter shapes, per layer for the layer keys."""
    s = param_shapes(cfg)
    out = {k: v for k, v in s.items() if k != "layers"}
    out.update({k: v[1:] for k, v in s["layers"].items()})
    return out


# ----------------------------------------------------------------------------- reading


class _Reader:
    """Resolves HF tensor names to files and reads (slices of) them."""

    def __init__(self, path):
        st = _safe()
        self._st = st
        p = pathlib.Path(os.fspath(path))
        if not p.exists():
            raise FileNotFoundError(
                f"checkpoint path {str(p)!r} does not exist (jaxkit.io never downloads)."
            )
        if p.is_dir():
            if (p / _INDEX).exists():
                p = p / _INDEX
            elif (p / _SINGLE).exists():
                p = p / _SINGLE
            else:
                raise FileNotFoundError(f"no {_SINGLE} or {_INDEX} in {str(p)!r}.")
        self.where = str(p)
        self._handles: dict[str, object] = {}
        if p.name.endswith(".json"):
            try:
                index = json.loads(p.read_text())
                wm = index["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError):
                hint = " (that is a model config, not weights)" if p.name == "config.json" else ""
                raise ValueError(
                    f"`path` {str(p)!r} is not a safetensors index (a JSON file with a "
                    f"'weight_map'){hint}; pass the checkpoint folder, a .safetensors file "
                    f"or {_INDEX}."
                ) from None
            self._map = {k: str(p.parent / v) for k, v in wm.items()}
        else:
            self._map = {k: str(p) for k in self._open(str(p)).keys()}

    def _open(self, file: str):
        if file not in self._handles:
            if not os.path.exists(file):
                raise FileNotFoundError(f"checkpoint shard {file!r} does not exist.")
            try:
                self._handles[file] = self._st.safe_open(file, framework="numpy")
            except Exception as e:  # noqa: BLE001  (SafetensorError, OSError)
                raise ValueError(
                    f"`path`: cannot read safetensors file {file!r} (not a safetensors file, "
                    f"or truncated/corrupted): {e}"
                ) from None
        return self._handles[file]

    def has(self, name: str) -> bool:
        return name in self._map

    def open_slice(self, name: str, want_shape: tuple[int, ...]):
        if name not in self._map:
            raise ValueError(f"tensor {name!r} not found in {self.where!r}.")
        file = self._map[name]
        f = self._open(file)
        try:
            sl = f.get_slice(name)
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"tensor {name!r} not found or unreadable in {file!r}: {e}") from None
        shape = tuple(sl.get_shape())
        if shape != tuple(want_shape):
            raise ValueError(
                f"tensor {name!r} in {file!r} has shape {shape}, expected "
                f"{tuple(want_shape)} for this config."
            )
        return sl, file

    def read(self, name: str, want_shape, index: tuple[slice, ...] | None = None) -> np.ndarray:
        sl, file = self.open_slice(name, want_shape)
        try:
            if index is None:
                return np.asarray(sl[tuple(slice(None) for _ in want_shape)])
            return np.asarray(sl[index])
        except Exception as e:  # noqa: BLE001
            raise ValueError(
                f"cannot read tensor {name!r} from {file!r} (truncated or corrupted?): {e}"
            ) from None


def _leaf_plan(cfg: TransformerConfig, reader: _Reader):
    """[(path tuple, global shape, read(index) -> np.ndarray)] for every parameter."""
    shapes = _shapes(cfg)
    plan: list[tuple[tuple[str, ...], tuple[int, ...], Callable]] = []

    def hf_shape(shape, transposed):
        return tuple(reversed(shape)) if transposed else shape

    def norm_index(index, shape):
        return tuple(range(n)[s] for s, n in zip(index, shape, strict=True))

    for key, (name, tr) in _TOP_NAMES.items():
        if key == "lm_head" and cfg.tie_embeddings:
            continue
        shp = shapes[key]

        def read(index, name=name, tr=tr, shp=shp):
            rng = norm_index(index, shp)
            hf_idx = tuple(slice(r.start, r.stop, r.step) for r in (rng[::-1] if tr else rng))
            a = reader.read(name, hf_shape(shp, tr), hf_idx)
            return a.T if tr else a

        plan.append(((key,), shp, read))

    for key in _layer_keys(cfg):
        suffix, tr = _LAYER_NAMES[key]
        shp = shapes[key]
        gshape = (cfg.n_layers, *shp)

        def read(index, suffix=suffix, tr=tr, shp=shp, gshape=gshape):
            rng = norm_index(index, gshape)
            inner = tuple(
                slice(r.start, r.stop, r.step) for r in (rng[1:][::-1] if tr else rng[1:])
            )
            parts = []
            for i in rng[0]:
                a = reader.read(f"model.layers.{i}.{suffix}", hf_shape(shp, tr), inner)
                parts.append(a.T if tr else a)
            if not parts:
                return np.zeros((0,) + tuple(len(r) for r in rng[1:]), np.float32)
            return np.stack(parts)

        plan.append((("layers", key), gshape, read))
    return plan


def load_safetensors(
    path, cfg: TransformerConfig, *, dtype=jnp.float32, mesh=None, specs=None
) -> dict:
    """Load HF Llama/Qwen2-layout safetensors into the jaxkit parameter pytree.

    Args:
      path: A directory holding ``model.safetensors`` or
        ``model.safetensors.index.json``, or the path of either file.
      cfg: The model configuration (e.g. from :func:`config_from_hf`); every
        tensor's shape is checked against it.
      dtype: Parameter dtype (``None`` keeps the stored dtype).
      mesh: Optional ``jax.sharding.Mesh``; each parameter is then assembled with
        ``jax.make_array_from_callback``, each device reading only its slice.
      specs: PartitionSpec pytree for ``mesh`` (default
        :func:`jaxkit.nn.param_specs`).

    Returns:
      The parameter dict of :func:`jaxkit.nn.init_params`'s layout.

    Raises:
      FileNotFoundError: If the path (or a shard named by the index) is missing.
      ValueError: If a file is truncated/corrupted, a tensor is missing, or a shape
        disagrees with ``cfg``; the message names the file and the tensor.
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    if dtype is not None and not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {jnp.dtype(dtype)}.")
    reader = _Reader(path)
    plan = _leaf_plan(cfg, reader)
    if mesh is not None and specs is None:
        specs = param_specs(cfg)
    params: dict = {"layers": {}}
    for keys, gshape, read in plan:
        if mesh is None:
            arr = read(tuple(slice(None) for _ in gshape))
            out = jnp.asarray(arr, dtype=dtype)
        else:
            spec = specs
            for k in keys:
                spec = spec[k]
            sharding = jax.sharding.NamedSharding(mesh, spec)
            np_dt = None if dtype is None else np.dtype(jnp.dtype(dtype))

            def cb(index, read=read, np_dt=np_dt):
                a = read(index)
                return a if np_dt is None else a.astype(np_dt)

            out = jax.make_array_from_callback(gshape, sharding, cb)
        if keys[0] == "layers":
            params["layers"][keys[1]] = out
        else:
            params[keys[0]] = out
    return {k: params[k] for k in ("embed", "layers", "final_norm", "lm_head") if k in params}


# ----------------------------------------------------------------------------- raw tensors


def save_tensors(tensors: dict, path, *, metadata: dict | None = None) -> pathlib.Path:
    """Write named arrays to one ``.safetensors`` file (any layout, e.g. a LoRA adapter).

    Args:
      tensors: ``{name: array}``; arrays are converted to contiguous NumPy arrays.
      path: The output file (its folder is created if needed).
      metadata: Optional ``{str: str}`` header metadata.

    Returns:
      The written path.
    """
    st = _safe()
    if not isinstance(tensors, dict) or not tensors:
        raise ValueError("`tensors` must be a non-empty dict of named arrays.")
    for name, v in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"`tensors` keys must be str names, got {name!r}.")
        dt = np.result_type(jax.device_get(v)) if not isinstance(v, str) else np.dtype("U1")
        if not (np.issubdtype(dt, np.number) or np.issubdtype(dt, np.bool_)):
            raise TypeError(f"`tensors[{name!r}]` must be a numeric array, got dtype {dt}.")
    if metadata is not None and not all(
        isinstance(a, str) and isinstance(b, str) for a, b in metadata.items()
    ):
        raise TypeError("`metadata` must map str to str.")
    out = pathlib.Path(os.fspath(path))
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.ascontiguousarray(jax.device_get(v)) for k, v in tensors.items()}
    st.numpy.save_file(arrays, str(out), metadata=metadata)
    return out


def load_tensors(path) -> dict[str, np.ndarray]:
    """Every tensor of one ``.safetensors`` file, as NumPy arrays (never downloads).

    Raises:
      FileNotFoundError: If ``path`` does not exist.
      ValueError: If ``path`` is not a readable safetensors file (the message names
        ``path``).
    """
    p = pathlib.Path(os.fspath(path))
    if p.is_dir() or p.name.endswith(".json"):
        raise ValueError(f"`path` must be a .safetensors file, got {str(p)!r}.")
    r = _Reader(p)
    f = r._open(str(p))
    return {k: np.asarray(f.get_tensor(k)) for k in f.keys()}


# ----------------------------------------------------------------------------- writing


def to_hf_tensors(params: dict, cfg: TransformerConfig) -> dict[str, np.ndarray]:
    """The HF-named NumPy tensors (``[out, in]`` linear weights) of ``params``.

    ``params`` in either layout (stacked, or per-layer from ``nn.unstack_layers``).
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    if isinstance(params, dict) and isinstance(params.get("layers"), (tuple, list)):
        params = stack_layers(params)
    out: dict[str, np.ndarray] = {}
    shapes = _shapes(cfg)
    for key, (name, tr) in _TOP_NAMES.items():
        if key == "lm_head" and cfg.tie_embeddings:
            continue
        if key not in params:
            raise ValueError(f"`params` has no {key!r} entry.")
        a = np.asarray(jax.device_get(params[key]))
        if a.shape != shapes[key]:
            raise ValueError(f"`params[{key!r}]` has shape {a.shape}, expected {shapes[key]}.")
        out[name] = np.ascontiguousarray(a.T if tr else a)
    for key in _layer_keys(cfg):
        suffix, tr = _LAYER_NAMES[key]
        if key not in params["layers"]:
            raise ValueError(f"`params['layers']` has no {key!r} entry.")
        a = np.asarray(jax.device_get(params["layers"][key]))
        if a.shape != (cfg.n_layers, *shapes[key]):
            raise ValueError(
                f"`params['layers'][{key!r}]` has shape {a.shape}, expected "
                f"{(cfg.n_layers, *shapes[key])}."
            )
        for i in range(cfg.n_layers):
            out[f"model.layers.{i}.{suffix}"] = np.ascontiguousarray(a[i].T if tr else a[i])
    return out


def save_safetensors(
    params: dict, cfg: TransformerConfig, out_dir, *, max_shard_bytes: int | None = None
) -> pathlib.Path:
    """Write ``params`` as an HF-layout checkpoint directory (weights ``[out, in]``).

    Writes ``config.json`` (:func:`config_to_hf`) and either ``model.safetensors``
    or, when the tensors exceed ``max_shard_bytes``, shards
    ``model-0000k-of-0000n.safetensors`` plus ``model.safetensors.index.json``.

    Args:
      params: Parameters in :func:`jaxkit.nn.init_params` layout.
      cfg: Their configuration.
      out_dir: Output directory (created if needed).
      max_shard_bytes: Maximum bytes per shard file (``None``: one file).

    Returns:
      The output directory.
    """
    _safe()  # the ImportError naming the extra comes first
    if max_shard_bytes is not None:
        _validate.python_int(max_shard_bytes, name="max_shard_bytes", minimum=1)
    tensors = to_hf_tensors(params, cfg)
    out = pathlib.Path(os.fspath(out_dir))
    out.mkdir(parents=True, exist_ok=True)
    dt = str(np.asarray(jax.device_get(params["embed"])).dtype)
    (out / "config.json").write_text(json.dumps(config_to_hf(cfg, dtype=dt), indent=2) + "\n")
    meta = {"format": "pt"}
    total = sum(a.nbytes for a in tensors.values())
    if max_shard_bytes is None or total <= max_shard_bytes:
        save_tensors(tensors, out / _SINGLE, metadata=meta)
        return out
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, a in tensors.items():
        if shards[-1] and size + a.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = a
        size += a.nbytes
    n = len(shards)
    width = max(5, int(math.log10(n)) + 1)
    weight_map = {}
    for k, shard in enumerate(shards, start=1):
        fname = f"model-{k:0{width}d}-of-{n:0{width}d}.safetensors"
        save_tensors(shard, out / fname, metadata=meta)
        weight_map.update({name: fname for name in shard})
    index = {"metadata": {"total_size": int(total)}, "weight_map": weight_map}
    (out / _INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return out
