"""LoRA for any parameter pytree (and ``jaxkit.nn``): init by name pattern, merge, export.

Weights are ``[*stack, n_in, m_out]`` (``x @ W``, as in ``jaxkit.nn``). A LoRA
module is ``LoraFactors(a: [*stack, m_out, r], b: [*stack, n_in, r])`` with
``Z = a b^T`` (out x in) and merged weight ``W + scale * (a b^T)^T``. The LoRA tree
mirrors ``params`` with ``None`` at non-target leaves, so it can be passed to
the privacy transforms directly. Export follows the PEFT adapter layout
(``lora_A.weight = b^T``, ``lora_B.weight = a``).

References:
  E. Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022.
"""

import json
import os
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, PRNGKeyArray, PyTree, Real

from jaxkit import _validate
from jaxkit.privacy import _common as C
from jaxkit.privacy._lowrank_tangent import check_factor_shapes
from jaxkit.privacy.lowrank import LoraFactors, balanced_random_init, spectral_init

_METHODS = ("balanced", "spectral", "ffa")


def _path_str(path: Any) -> str:
    return jax.tree_util.keystr(path, simple=True, separator="/")


class LoraInit(NamedTuple):
    """Result of :func:`lora_init`.

    Attributes:
      params: The parameters (changed only by ``method='spectral'``, which moves the
        top-``r`` part of each target into the factors).
      lora: A tree like ``params`` with :class:`LoraFactors` at targets and ``None``
        elsewhere.
    """

    params: PyTree
    lora: PyTree


def lora_init(
    params: PyTree,
    *,
    targets: str,
    rank: int,
    key: PRNGKeyArray,
    method: str = "balanced",
    scale: Real[ArrayLike, ""] = 1.0,
    init_scale: float = 0.02,
) -> LoraInit:
    """LoRA factors for the weights whose path matches ``targets``.

    Args:
      params: Any parameter pytree (e.g. ``jaxkit.nn.init_params``), weights
        ``[*stack, n_in, m_out]``.
      targets: Regular expression searched in each leaf path (``"layers/w(q|v)"``).
      rank: LoRA rank ``r <= min(n_in, m_out)``.
      key: PRNG key.
      method: ``'balanced'`` (random orthonormal, scaled by ``init_scale``: PRISM
        needs full-rank factors), ``'spectral'`` (PiSSA-like: the top-``r`` part of
        ``W`` moves into the factors, ``W`` becomes the residual) or ``'ffa'``
        (``a = 0``, ``b`` random: the LoRA start with ``b`` frozen).
      scale: LoRA scaling ``alpha / r`` used by ``'spectral'`` (merge with the same).
      init_scale: Scale of the ``'balanced'`` / ``'ffa'`` factors.

    Returns:
      :class:`LoraInit` ``(params, lora)``: ``params`` (changed only by ``'spectral'``)
      and a tree like ``params`` with :class:`LoraFactors` at targets and ``None``
      elsewhere.

    Raises:
      ValueError: Unknown ``method``, no leaf matches ``targets``, or ``rank`` too large.
    """
    _validate.one_of(_METHODS, method=method)
    rank = _validate.python_int(rank, name="rank", minimum=1)
    _validate.is_key(key)
    for name, v in (("scale", scale), ("init_scale", init_scale)):
        _validate.real(v, name=name)
        _validate.finite_scalar(**{name: v})
    _validate.non_negative(init_scale=init_scale)
    pat = re.compile(targets)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    new_params, lora, hit = [], [], 0
    for i, (path, w) in enumerate(leaves):
        ps = _path_str(path)
        if not (
            pat.search(ps) and jnp.ndim(w) >= 2 and jnp.issubdtype(jnp.result_type(w), jnp.floating)
        ):
            new_params.append(w)
            lora.append(None)
            continue
        hit += 1
        n, m = w.shape[-2:]
        if not 1 <= rank <= min(m, n):
            raise ValueError(
                f"`rank`={rank} must lie in [1, {min(m, n)}] for `{ps}` of shape {w.shape}."
            )
        stack = w.shape[:-2]
        keys = C.stack_keys(jax.random.fold_in(key, i), stack)
        flat_w = w.reshape((-1, n, m))
        flat_k = keys.reshape((-1, *keys.shape[len(stack) :]))  # [S] typed, [S, 2] legacy
        outs_a, outs_b, outs_w = [], [], []
        for j in range(flat_w.shape[0]):
            if method == "spectral":
                si = spectral_init(flat_w[j].T, rank=rank, key=flat_k[j], scale=scale)
                outs_a.append(si.factors.a)
                outs_b.append(si.factors.b)
                outs_w.append(si.residual.T)
            else:
                f = balanced_random_init(
                    key=flat_k[j], m=m, n=n, rank=rank, scale=init_scale, dtype=w.dtype
                )
                outs_a.append(jnp.zeros_like(f.a) if method == "ffa" else f.a)
                outs_b.append(f.b)
        a = jnp.stack(outs_a).reshape((*stack, m, rank))
        b = jnp.stack(outs_b).reshape((*stack, n, rank))
        new_params.append(jnp.stack(outs_w).reshape(w.shape) if outs_w else w)
        lora.append(LoraFactors(a, b))
    if hit == 0:
        raise ValueError(f"`targets`={targets!r} matches no floating weight of rank >= 2.")
    return LoraInit(treedef.unflatten(new_params), treedef.unflatten(lora))


def _checked_scale(scale):
    """``scale`` as given, checked finite (concrete: ValueError; traced: a guard)."""
    _validate.real(scale, name="scale")
    _validate.finite_scalar(scale=scale)
    return _validate.guard_finite(scale, scale, name="scale")


def _delta(f: LoraFactors, scale) -> jax.Array:
    return jnp.einsum("...nr,...mr->...nm", f.b, f.a) * jnp.asarray(scale).astype(f.a.dtype)


def _delta_like(f: LoraFactors, scale, w, path) -> jax.Array:
    check_factor_shapes(f.a, f.b, name=f"lora{jax.tree_util.keystr(path)}")
    want = (*f.a.shape[:-2], f.b.shape[-2], f.a.shape[-2])
    if tuple(jnp.shape(w)) != want:
        raise TypeError(
            f"`lora` factors of shapes {f.a.shape}, {f.b.shape} do not fit a weight of shape "
            f"{jnp.shape(w)} (they give a delta of shape {want})."
        )
    return _delta(f, scale).astype(w.dtype)


def lora_merge(params: PyTree, lora: PyTree, *, scale: Real[ArrayLike, ""] = 1.0) -> PyTree:
    """``W + scale * (a b^T)^T`` at every LoRA leaf (differentiable in ``lora``)."""
    scale = _checked_scale(scale)
    return jax.tree_util.tree_map_with_path(
        lambda path, f, w: w if f is None else w + _delta_like(f, scale, w, path),
        lora,
        params,
        is_leaf=lambda x: x is None or C.is_lora(x),
    )


def lora_unmerge(params: PyTree, lora: PyTree, *, scale: Real[ArrayLike, ""] = 1.0) -> PyTree:
    """Inverse of :func:`lora_merge`."""
    scale = _checked_scale(scale)
    return jax.tree_util.tree_map_with_path(
        lambda path, f, w: w if f is None else w - _delta_like(f, scale, w, path),
        lora,
        params,
        is_leaf=lambda x: x is None or C.is_lora(x),
    )


def _peft_name(path: str, idx: tuple[int, ...]) -> str:
    parts = path.split("/")
    if idx:
        parts = parts[:1] + [str(i) for i in idx] + parts[1:]
    return "base_model.model." + ".".join(parts)


def export_adapter(
    lora: PyTree, directory: str, *, alpha: float, dtype: Any = np.float32
) -> list[str]:
    """Write a standard (PEFT-layout) LoRA adapter: ``adapter_model.safetensors`` + config.

    Each module ``path`` (stacked axes split into ``path0.i.rest``) becomes
    ``base_model.model.<path>.lora_A.weight`` (``[r, in] = b^T``) and
    ``...lora_B.weight`` (``[out, r] = a``); the config records ``r`` and
    ``lora_alpha`` (merge scale ``alpha / r``).

    Returns:
      The tensor names written.
    """
    from safetensors.numpy import save_file

    _validate.real(alpha, name="alpha")
    _validate.finite_scalar(alpha=alpha)
    _validate.positive(alpha=alpha)
    if not np.issubdtype(np.dtype(dtype), np.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {np.dtype(dtype)}.")

    tensors: dict[str, np.ndarray] = {}
    rank = None
    targets = set()
    for path, f in jax.tree_util.tree_flatten_with_path(lora, is_leaf=C.is_lora)[0]:
        if not C.is_lora(f):
            continue
        ps = _path_str(path)
        a, b = np.asarray(f.a, np.float32), np.asarray(f.b, np.float32)
        rank = a.shape[-1]
        targets.add(ps.split("/")[-1])
        stack = a.shape[:-2]
        for idx in np.ndindex(*stack) if stack else [()]:
            name = _peft_name(ps, idx)
            tensors[name + ".lora_A.weight"] = np.ascontiguousarray(b[idx].T).astype(dtype)
            tensors[name + ".lora_B.weight"] = np.ascontiguousarray(a[idx]).astype(dtype)
    if not tensors:
        raise ValueError("`lora` holds no LoraFactors.")
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, "adapter_model.safetensors"))
    with open(os.path.join(directory, "adapter_config.json"), "w") as fh:
        json.dump(
            {
                "peft_type": "LORA",
                "r": int(rank),
                "lora_alpha": float(alpha),
                "target_modules": sorted(targets),
                "bias": "none",
            },
            fh,
            indent=1,
        )
    return sorted(tensors)


def load_adapter(directory: str, *, like: PyTree) -> PyTree:
    """Read an adapter written by :func:`export_adapter` into the structure of ``like``."""
    from safetensors.numpy import load_file

    t = load_file(os.path.join(directory, "adapter_model.safetensors"))

    def one(path, f):
        if not C.is_lora(f):
            return f
        ps = _path_str(path)
        stack = f.a.shape[:-2]
        a = np.zeros(f.a.shape, np.float32)
        b = np.zeros(f.b.shape, np.float32)
        for idx in np.ndindex(*stack) if stack else [()]:
            name = _peft_name(ps, idx)
            b[idx] = t[name + ".lora_A.weight"].T
            a[idx] = t[name + ".lora_B.weight"]
        return LoraFactors(jnp.asarray(a, f.a.dtype), jnp.asarray(b, f.b.dtype))

    return jax.tree_util.tree_map_with_path(one, like, is_leaf=C.is_lora)
