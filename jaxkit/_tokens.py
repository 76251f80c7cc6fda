"""Token choice shared by the generators (``decoding``, ``steering``, ``memory``): one copy.

The generators' ``interventions=`` check (:func:`check_interventions`) lives here too.

The sampling arguments' checks (:func:`check_sampling` where concrete, :func:`guard_sampling`
where traced) and the token choice (:func:`choose_tokens`) of every generator, so that the
same bad input raises the same error in each.

A concrete ``temperature`` of 0 selects the static greedy mode, the arg-max (ties to the
lowest index), which is bit for bit what :func:`jaxkit.kernels.sampling.sample_tokens`
gives at temperature 0, without the sampler's noise and filters in the decode loop. A
traced temperature always goes through the sampler (the arg-max where it is 0).

Step ``i`` of a generator draws with ``step_key(key, i)``: ``jax.random.fold_in`` bit for bit,
as one fused program (:func:`jaxkit._threefry.fold_in`; jax.random's threefry is a rolled
loop of small kernels on CPU).
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jaxkit import _validate, nn
from jaxkit._threefry import fold_in as step_key  # noqa: F401  (re-exported)
from jaxkit.kernels.sampling import sample_tokens


def is_greedy(temperature: Any) -> bool:
    """The static greedy mode: a concrete (not traced) temperature equal to 0."""
    return not isinstance(temperature, jax.core.Tracer) and bool(np.asarray(temperature) == 0)


def check_sampling(temperature: Any, top_p: Any, min_p: Any = None) -> bool:
    """Python-level checks of the generators' sampling scalars; the static greedy mode.

    Each of ``temperature``, ``top_p`` (and ``min_p`` where given) must be a real,
    finite scalar (``TypeError`` for a type or shape, ``ValueError`` for a concrete
    non-finite value); then, where concrete, ``temperature >= 0``, ``top_p`` in
    ``(0, 1]`` and ``min_p`` in ``[0, 1]`` (``ValueError``; NaN fails). Traced values
    are checked by :func:`guard_sampling` inside the generator. Returns
    :func:`is_greedy` of ``temperature``.
    """
    named = {"temperature": temperature, "top_p": top_p}
    if min_p is not None:
        named["min_p"] = min_p
    for name, v in named.items():
        _validate.real(v, name=name)
        _validate.finite_scalar(**{name: v})
    _validate.non_negative(temperature=temperature)
    _validate.in_interval(low=0, high=1, closed="right", top_p=top_p)
    if min_p is not None:
        _validate.in_interval(low=0, high=1, closed="both", min_p=min_p)
    return is_greedy(temperature)


def guard_sampling(x: Array, temperature: Any, top_p: Any, min_p: Any = None) -> Array:
    """``x`` guarded so that a traced bad sampling value (NaN, inf included) raises under jit.

    ``temperature`` finite and >= 0, ``top_p`` in ``(0, 1]``, ``min_p`` (where given)
    in ``[0, 1]``: the checks of :func:`check_sampling` as ``eqx.error_if``. Always
    use the result.
    """
    x = _validate.guard_non_negative(x, temperature, name="temperature")
    x = _validate.guard_interval(x, top_p, name="top_p", low=0.0, high=1.0, closed="right")
    if min_p is None:
        return x
    return _validate.guard_interval(x, min_p, name="min_p", low=0.0, high=1.0)


def choose_tokens(
    logits: Array,
    key: Any,
    *,
    greedy: bool,
    temperature: Any,
    top_p: Any,
    top_k: Any = None,
    min_p: Any = 0.0,
) -> Array:
    """Tokens of ``logits [..., V]``: the arg-max in greedy mode (static), else the sampler.

    ``greedy`` (static) is the mode of a concrete ``temperature == 0``: the arg-max
    (ties to the lowest index), the very tokens ``sample_tokens`` gives at temperature
    0, without the sampler's noise and filters in the decode loop. Otherwise the fused
    sampler with the given filters: the adapters' generators (``steering``, ``memory``)
    expose ``temperature`` and ``top_p`` only (``top_k=None`` and ``min_p=0``, the
    sampler's defaults), the decoders all four.
    """
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    out = sample_tokens(
        logits, key=key, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p
    )
    return out.token


def check_interventions(
    iv: Any, cfg: Any, b: int, *, span_owner: str | None = None, where: str = "in generation"
):
    """Python-level check of a generator's ``interventions``: the object to use, or None.

    Returns None for None or an object with nothing to do, else the object with its edits
    guarded finite (a NaN or inf raises naming ``interventions.add[l]``, under ``jit`` too).

    Generation takes additive edits of shape ``[D]`` or ``[B, D]`` (one vector per row at
    every position) at blocks in ``[0, n_layers)``; read sites have no output there. A
    function that inserts its own span (``span_owner``, e.g. ``"svgt_generate"``) takes no
    user insertion: the K/V cache holds one inserted span per row. ``where`` ends the
    messages (``"in generation"``; a forward of such a function says ``"here"``).
    """
    if iv is None:
        return None
    if not isinstance(iv, nn.Interventions):
        raise TypeError(f"`interventions` must be an nn.Interventions, got {type(iv).__name__}.")
    for layer, vec in iv.add.items():
        if not 0 <= layer < cfg.n_layers:
            raise ValueError(
                f"`interventions.add` layer index must lie in [0, {cfg.n_layers}), got {layer}."
            )
        if tuple(vec.shape) not in ((cfg.d_model,), (b, cfg.d_model)):
            raise TypeError(
                f"`interventions.add[{layer}]` must have shape ({cfg.d_model},) or "
                f"({b}, {cfg.d_model}) {where}, got {vec.shape}."
            )
    if iv.read_mlp:
        raise ValueError(f"`interventions.read_mlp` has no output {where}; leave it empty.")
    if span_owner is not None and iv.insert_layer is not None:
        raise ValueError(
            f"`interventions` inserts a span (insert_layer={iv.insert_layer}), but "
            f"{span_owner} inserts its own: one inserted span per call. Pass edits only."
        )
    if not iv.add and iv.insert_layer is None:
        return None  # nothing to do: the plain program (one compiled program for both)
    # a NaN or inf edit would turn every logit NaN and the arg-max into token 0, silently
    add = {
        layer: _validate.all_finite(vec, name=f"interventions.add[{layer}]")
        for layer, vec in iv.add.items()
    }
    return eqx.tree_at(lambda i: i.add, iv, add)
