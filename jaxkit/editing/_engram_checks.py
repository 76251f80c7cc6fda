"""The engram records and the argument checks of the engram edits.

:class:`Linear` (one linear site) and :class:`Engrams` (the engrams of K memories at
every site), and the host-side checks of :mod:`jaxkit.editing`'s edits: layers,
engrams, per-layer scales, memory ids and the shapes of a site written back.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array

from jaxkit import _validate


class Linear(NamedTuple):
    """One linear site ``y = x @ w + b``: ``w [*stack, D_in, D_out]``, ``b [*stack, D_out]``."""

    w: Array
    b: Array | None = None


class Engrams(NamedTuple):
    """Engrams of K memories at every site.

    Attributes:
      projection: site -> :class:`Linear` of projections ``P_k = C^+ C_k [w; b]``
        with a leading memory axis ``[K, *stack, D_in, D_out]``.
      ratio: site -> ``n_k / N`` ``[K]`` (the engram is ``E_k = ratio_k * P_k``).
    """

    projection: dict[str, Linear]
    ratio: dict[str, Array]


def _check_layers(layers: Mapping[str, Linear], name: str = "layers") -> dict[str, Linear]:
    if not isinstance(layers, Mapping) or not layers:
        raise TypeError(f"`{name}` must be a non-empty dict of site name -> Linear.")
    out = {}
    for site, lin in layers.items():
        if not isinstance(lin, Linear):
            lin = Linear(jnp.asarray(lin))
        _validate.floating(lin.w, name=f"{name}[{site!r}].w")
        _validate.min_ndim(lin.w, 2, name=f"{name}[{site!r}].w")
        if lin.b is not None:
            _validate.shape(lin.b, (*lin.w.shape[:-2], lin.w.shape[-1]), name=f"{name}[{site!r}].b")
        out[site] = lin
    return out


def _check_engrams(layers, engrams):
    if not isinstance(engrams, Engrams):
        raise TypeError(
            f"`engrams` must be an Engrams (from extract), got {type(engrams).__name__}."
        )
    ks = set()
    for s, lin in layers.items():
        if s not in engrams.projection or s not in engrams.ratio:
            raise TypeError(f"`engrams` has no site {s!r}.")
        p = engrams.projection[s]
        if not isinstance(p, Linear):
            raise TypeError(f"`engrams.projection[{s!r}]` must be a Linear, got {p!r:.80}.")
        if jnp.shape(p.w)[1:] != lin.w.shape or (p.b is None) != (lin.b is None):
            raise TypeError(
                f"`engrams` site {s!r} has shape {jnp.shape(p.w)[1:]} (bias {p.b is not None}); "
                f"the layer has {lin.w.shape} (bias {lin.b is not None})."
            )
        k = jnp.shape(p.w)[0]  # [K, *stack, D_in, D_out]
        if p.b is not None:
            _validate.shape(p.b, (k, *jnp.shape(lin.b)), name=f"engrams.projection[{s!r}].b")
        _validate.shape(engrams.ratio[s], (k,), name=f"engrams.ratio[{s!r}]")
        ks.add(k)
    if len(ks) != 1:
        raise TypeError(f"`engrams` sites disagree on the number of memories: {sorted(ks)}.")
    return ks.pop()


def _check_layer_scale(layer_scale, layers):
    if layer_scale is None:
        return None
    if not isinstance(layer_scale, Mapping):
        raise TypeError("`layer_scale` must be a dict of site name -> scale (or None).")
    for s in layer_scale:
        if s not in layers:
            raise ValueError(f"`layer_scale` names site {s!r}, which is not in `layers`.")
    return {s: _validate.all_finite(v, name=f"layer_scale[{s!r}]") for s, v in layer_scale.items()}


def _selection(memories, k: int) -> Array:
    _validate.integer(memories, name="memories")  # before jnp.asarray: a str names it
    m = jnp.asarray(memories)
    _validate.ndim(m, (0, 1), name="memories")
    m = m.reshape(-1).astype(jnp.int32)
    m = _validate.error_if(
        m,
        jnp.any((m < 0) | (m >= k)),
        f"`memories` must be ids in [0, {k}) (K = {k} memories were extracted).",
    )
    return m


def _check_site_shapes(lin: Linear, old: Any, site: str) -> None:
    """``lin`` has the shapes of the site ``old`` (``w`` or ``(w, b)``) it replaces."""
    old_w, old_b = old if isinstance(old, tuple) and len(old) == 2 else (old, None)
    _validate.shape(lin.w, jnp.shape(old_w), name=f"layers[{site!r}].w")
    if lin.b is not None and old_b is not None:
        _validate.shape(lin.b, jnp.shape(old_b), name=f"layers[{site!r}].b")
