"""Steering the MDLM sampler: its ``interventions=`` check and the per-row edits.

:func:`jaxkit.diffusion.sample` takes additive edits only (``nn.Interventions(add=)``,
``[D]`` or ``[B, D]`` per block). Inside its program they travel as ``{layer: [B, D]}``
(one vector per row), gathered with the rows of every compacted forward, and reach the
denoiser as ``apply_fn(..., interventions=nn.Interventions(edits))``.
"""

import jax.numpy as jnp

from jaxkit import nn
from jaxkit._tokens import check_interventions

_NEEDS_CFG = (
    "`interventions` needs a denoiser from transformer_denoiser (or an apply_fn with a "
    "`cfg` attribute and an `interventions=` keyword)"
)


def check(interventions, apply_fn, b: int) -> dict:
    """The sampler's edits ``{layer: [D] or [B, D]}`` (guarded finite); ``{}`` for none.

    None or an object with nothing to do: ``{}`` (today's program; no ``cfg`` needed).
    Otherwise the denoiser's ``cfg`` (the attribute ``apply_fn.cfg``) gives the widths.

    Raises:
      TypeError: not an ``nn.Interventions``; an ``apply_fn`` without a ``cfg``; an edit
        of another shape (naming ``interventions.add[l]``).
      ValueError: an insertion or read sites (no span and no output in sampling); a
        layer outside ``[0, n_layers)``.
    """
    if interventions is None:
        return {}
    if not isinstance(interventions, nn.Interventions):
        raise TypeError(
            f"`interventions` must be an nn.Interventions, got {type(interventions).__name__}."
        )
    iv = interventions
    if not iv.add and iv.insert_layer is None and not iv.read_mlp:
        return {}
    if iv.insert_layer is not None:
        raise ValueError(
            f"`interventions` inserts a span (insert_layer={iv.insert_layer}); sampling takes "
            "additive edits only (`add`)."
        )
    cfg = getattr(apply_fn, "cfg", None)
    if not isinstance(cfg, nn.TransformerConfig):
        raise TypeError(f"{_NEEDS_CFG}; got an apply_fn without a TransformerConfig `cfg`.")
    iv = check_interventions(iv, cfg, b, where="in sampling")
    return {} if iv is None else dict(iv.add)


def per_row(edits: dict, b: int) -> dict:
    """``{layer: [B, D]}``: a shared ``[D]`` edit repeated for each of the ``b`` rows."""
    return {layer: jnp.broadcast_to(v, (b, v.shape[-1])) for layer, v in edits.items()}


def rows_alike(edits: dict):
    """Whether every row gets the first row's edits (a traced bool)."""
    same = jnp.asarray(True)
    for v in edits.values():
        same = same & jnp.all(v == v[:1])
    return same


def keywords(edits) -> dict:
    """The denoiser's extra keywords: ``{}`` without edits (the plain call)."""
    return {"interventions": nn.Interventions(edits)} if edits else {}
