"""The optimizer update and its argument check, shared by the training steps of every area."""

from typing import Any

import jax
import optax
from jaxtyping import PyTree


def optax_update(
    tx: optax.GradientTransformation,
    grads: PyTree,
    opt_state: PyTree,
    params: PyTree,
    /,
    **extra_args: Any,
) -> tuple[PyTree, PyTree]:
    """``(new params, new optimizer state)`` after one ``tx`` update of ``params``.

    ``tx.update`` is traced under standard dtype promotion whatever the caller's setting:
    optax's Adam (0.2.8) mixes its int32 step count with Python floats and its L-BFGS adds
    int32 and int64 indices under x64, which strict promotion (the test suite's) rejects.
    ``tx`` may be user code. ``extra_args`` go to ``tx.update`` (optax's
    ``GradientTransformationExtraArgs``: L-BFGS's ``value``, ``grad``, ``value_fn``).
    """
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = tx.update(grads, opt_state, params, **extra_args)
    return optax.apply_updates(params, updates), opt_state


def check_optimizer(optimizer: Any, *, name: str = "optimizer") -> optax.GradientTransformation:
    """Return ``optimizer`` if it is an optax ``GradientTransformation``, else ``TypeError``."""
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`{name}` must be an optax.GradientTransformation, got {type(optimizer).__name__}."
        )
    return optimizer
