"""Token choice shared by the generators (``decoding``, ``steering``, ``memory``): one copy.

A concrete ``temperature`` of 0 selects the static greedy mode, the arg-max (ties to the
lowest index), which is bit for bit what :func:`jaxkit.kernels.sampling.sample_tokens`
gives at temperature 0, without the sampler's noise and filters in the decode loop. A
traced temperature always goes through the sampler (the arg-max where it is 0).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jaxkit import _validate
from jaxkit.kernels.sampling import sample_tokens


def is_greedy(temperature: Any) -> bool:
    """The static greedy mode: a concrete (not traced) temperature equal to 0."""
    return not isinstance(temperature, jax.core.Tracer) and bool(np.asarray(temperature) == 0)


def check_sampling(temperature: Any, top_p: Any) -> bool:
    """Checks the adapters' ``temperature`` (real, >= 0) and ``top_p`` (in (0, 1]).

    The values are checked where concrete (``jaxkit._validate``); returns
    :func:`is_greedy` of ``temperature``, the static greedy mode.
    """
    _validate.real_scalar(temperature, name="temperature")
    _validate.non_negative(temperature=temperature)
    _validate.in_interval(low=0, high=1, closed="right", top_p=top_p)
    return is_greedy(temperature)


def choose_tokens(logits: Array, key: Any, *, greedy: bool, temperature: Any, top_p: Any) -> Array:
    """Tokens of ``logits [..., V]``: the arg-max in greedy mode (static), else the sampler.

    The adapters' generators expose ``temperature`` and ``top_p`` only (no top-k, no min-p).
    """
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return sample_tokens(logits, key=key, temperature=temperature, top_p=top_p).token
