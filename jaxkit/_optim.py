"""The optimizer update shared by the training steps of every area (one copy)."""

import jax
import optax
from jaxtyping import PyTree


def optax_update(
    tx: optax.GradientTransformation, grads: PyTree, opt_state: PyTree, params: PyTree
) -> tuple[PyTree, PyTree]:
    """``(new params, new optimizer state)`` after one ``tx`` update of ``params``.

    ``tx.update`` is traced under standard dtype promotion whatever the caller's setting:
    optax's Adam (0.2.8) mixes its int32 step count with Python floats, which strict
    promotion (the test suite's) rejects. ``tx`` may be user code.
    """
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
