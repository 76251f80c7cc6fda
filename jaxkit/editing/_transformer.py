"""Engram sites of a :mod:`jaxkit.nn` transformer: its MLP weights and their inputs.

A language model's memories (a task, a fact set, a user's text) are edited where
the AI-engram paper edits a classifier: in the linear layers, here the SwiGLU MLP
of every block, stacked over the ``L`` blocks. Two sites:

- ``"mlp_in"``: ``w_gate`` and ``w_up`` side by side (``w [L, D, 2F]``), whose
  input is the block's RMS-normalised residual (``nn`` read site ``mlp_in``);
- ``"down_in"``: ``w_down`` (``w [L, F, D]``), whose input is
  ``silu(x w_gate) * (x w_up)`` (read site ``down_in``).

``w_gate`` and ``w_up`` read the same input, so they are one site with one
covariance (an engram ``C^+ C_k w`` is linear in the columns of ``w``: the edit is
the one of editing the two apart, at half the statistics). ``sites=`` keeps one
of the two: the statistics are ``L x K`` covariances of width ``D`` (``"mlp_in"``)
or ``F`` (``"down_in"``), which for a large model decides the memory. The inputs come from
:class:`jaxkit.nn.Interventions` ``(read_mlp=...)`` in one forward per batch; the
attention weights and embeddings are left as they are (our choice: the paper edits
the linear layers of an MLP classifier, and a transformer's MLPs are its linear
maps of that kind).

Example (a memory per counting step of the ``tiny_lm`` fixture; ``tokens
[nb, B, T]``, ``ids [nb, B]`` the step of each sequence)::

    taps = editing.transformer_taps(cfg)
    stats = editing.collect_stats(taps, params, tokens, ids, num_memories=3)
    layers = editing.transformer_layers(params)
    edited = editing.erase(layers, editing.extract(layers, stats), 2)
    params_without_step_3 = editing.set_transformer_layers(params, edited)
"""

import functools
from collections.abc import Callable, Mapping

import jax.numpy as jnp
from jaxtyping import Array, Int, PyTree

from jaxkit import nn
from jaxkit.editing._engram_checks import Linear, _check_layers

_MLP = ("w_gate", "w_up", "w_down")
SITES = ("mlp_in", "down_in")


def _check_sites(sites) -> tuple[str, ...]:
    if isinstance(sites, str) or not isinstance(sites, tuple | list):
        raise TypeError(f"`sites` must be a tuple of site names from {SITES}, got {sites!r}.")
    if not sites or any(s not in SITES for s in sites) or len(set(sites)) != len(sites):
        raise ValueError(f"`sites` must be distinct names from {SITES}, got {tuple(sites)!r}.")
    return tuple(s for s in SITES if s in sites)


def transformer_taps(
    cfg: nn.TransformerConfig, *, sites: tuple[str, ...] = SITES
) -> Callable[[PyTree, Array], dict[str, Array]]:
    """``taps_fn`` for :func:`collect_stats`: the MLP inputs of every block of ``cfg``'s model.

    The returned function (one object per ``cfg`` and ``sites``, so
    :func:`collect_stats` compiles once) maps ``(params, tokens [B, T])`` to
    ``{"mlp_in": [L, B*T, D], "down_in": [L, B*T, F]}`` (the ``sites`` asked for),
    rows example-major (``ids [nb, B]`` gives every position its sequence's memory;
    ``ids [nb, B, T]`` one per token, ``-1`` for positions to leave out, e.g. padding
    or a prompt). Positions are ``0..T-1`` under the model's default mask (causal,
    or full for an encoder).

    Args:
      cfg: The model's :class:`jaxkit.nn.TransformerConfig`.
      sites: Which of ``"mlp_in"`` (``w_gate``, ``w_up``) and ``"down_in"``
        (``w_down``) to read.

    Raises:
      TypeError: ``cfg`` is not a ``TransformerConfig``; ``sites`` not a tuple.
      ValueError: ``sites`` empty or naming an unknown site.
    """
    if not isinstance(cfg, nn.TransformerConfig):
        raise TypeError(f"`cfg` must be a jaxkit.nn.TransformerConfig, got {type(cfg).__name__}.")
    return _taps(cfg, _check_sites(sites))


@functools.cache
def _taps(cfg: nn.TransformerConfig, sites: tuple[str, ...]) -> Callable:
    reads = nn.Interventions(read_mlp=tuple(range(cfg.n_layers)))
    width = {"mlp_in": cfg.d_model, "down_in": cfg.mlp_dim}

    def taps(params: PyTree, tokens: Int[Array, "B T"]) -> dict[str, Array]:
        out = nn.apply(params, cfg, tokens, interventions=reads)
        return {
            s: jnp.stack([getattr(out.reads[i], s) for i in range(cfg.n_layers)]).reshape(
                cfg.n_layers, -1, width[s]
            )
            for s in sites
        }

    return taps


def _mlp_weights(params: PyTree) -> dict[str, Array]:
    layers = params.get("layers") if isinstance(params, Mapping) else None
    if not isinstance(layers, Mapping) or any(k not in layers for k in _MLP):
        raise TypeError(
            "`params` must be jaxkit.nn transformer parameters in the stacked layout "
            "(params['layers'] holding w_gate, w_up, w_down of shape [L, ...]; per-layer "
            "parameters: nn.stack_layers first)."
        )
    w = {k: jnp.asarray(layers[k]) for k in _MLP}
    if w["w_gate"].ndim != 3 or w["w_up"].shape != w["w_gate"].shape:
        raise TypeError(
            "`params`: w_gate and w_up must be stacked [L, D, F] of one shape, got "
            f"{w['w_gate'].shape} and {w['w_up'].shape}."
        )
    return w


def transformer_layers(params: PyTree, *, sites: tuple[str, ...] = SITES) -> dict[str, Linear]:
    """The engram sites of a stacked ``jaxkit.nn`` transformer (host-side helper).

    Args:
      params: Transformer parameters, stacked layout.
      sites: As :func:`transformer_taps`'s.

    Returns:
      ``{"mlp_in": Linear(concat([w_gate, w_up], -1)), "down_in": Linear(w_down)}``
      (the ``sites`` asked for), the sites :func:`transformer_taps` reads the inputs of.

    Raises:
      TypeError: ``params`` are not stacked transformer parameters; ``sites`` not a tuple.
      ValueError: ``sites`` empty or naming an unknown site.
    """
    sites = _check_sites(sites)
    w = _mlp_weights(params)
    out = {
        "mlp_in": Linear(jnp.concatenate([w["w_gate"], w["w_up"]], axis=-1)),
        "down_in": Linear(w["w_down"]),
    }
    return {s: out[s] for s in sites}


def set_transformer_layers(params: PyTree, layers: Mapping[str, Linear]) -> PyTree:
    """Write edited sites (from :func:`erase`, :func:`keep_only`, :func:`compose`) back.

    Returns a new parameter dict: the weights of the sites in ``layers`` (``w_gate``
    and ``w_up`` for ``"mlp_in"``, ``w_down`` for ``"down_in"``) replaced, in the
    parameters' dtype; every other leaf the same object.

    Raises:
      TypeError: ``params`` are not stacked transformer parameters, or ``layers``
        names no site or an unknown one, has a bias, or does not match the
        parameters' shapes.
    """
    w = _mlp_weights(params)
    if not isinstance(layers, Mapping) or not layers or not set(layers) <= set(SITES):
        raise TypeError(
            f"`layers` must map some of the sites {SITES} (transformer_layers) to Linear, got "
            f"{sorted(layers) if isinstance(layers, Mapping) else type(layers).__name__}."
        )
    layers = _check_layers(layers)  # floating Linear records (a bare array: no bias)
    f = w["w_gate"].shape[-1]
    want = {"mlp_in": (*w["w_gate"].shape[:-1], 2 * f), "down_in": w["w_down"].shape}
    new = {}
    for site, lin in layers.items():
        if lin.b is not None:
            raise TypeError(f"`layers[{site!r}].b` must be None: the model's MLP has no bias.")
        if jnp.shape(lin.w) != want[site]:
            raise TypeError(
                f"`layers[{site!r}].w` must have the model's shape {want[site]}, got "
                f"{jnp.shape(lin.w)}."
            )
        x = jnp.asarray(lin.w)
        if site == "mlp_in":
            new["w_gate"] = x[..., :f].astype(w["w_gate"].dtype)
            new["w_up"] = x[..., f:].astype(w["w_up"].dtype)
        else:
            new["w_down"] = x.astype(w["w_down"].dtype)
    return {**params, "layers": {**params["layers"], **new}}
