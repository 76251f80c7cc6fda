"""The optimizer update and its argument check, shared by the training steps of every area."""

from typing import Any

import jax
import jax.numpy as jnp
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
    check_opt_state(tx, opt_state, params)
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = tx.update(grads, opt_state, params, **extra_args)
    return optax.apply_updates(params, updates), opt_state


def check_opt_state(
    tx: optax.GradientTransformation, opt_state: PyTree, params: PyTree, *, name="opt_state"
) -> None:
    """``TypeError`` naming ``name`` unless ``opt_state`` fits ``tx.init(params)``.

    The same tree structure (a state of another optimizer, or of other parameters, fails
    here instead of deep inside optax with a message naming nothing) and the same leaf
    shapes, compared with ``jax.eval_shape(tx.init, params)``: trace-time work only, no
    run-time cost. Dtypes are not compared (a state restored from a checkpoint may hold
    NumPy arrays or another float width; optax casts). Parameters that ``jax.eval_shape``
    cannot trace (an equinox module with non-array leaves, which users filter before
    ``tx.init``) are not checked.
    """
    try:
        with jax.numpy_dtype_promotion("standard"):
            want = jax.eval_shape(tx.init, params)
    except TypeError:
        return  # non-array leaves: no abstract state to compare with
    got_leaves, got_def = jax.tree_util.tree_flatten_with_path(opt_state)
    want_leaves, want_def = jax.tree_util.tree_flatten_with_path(want)
    if got_def != want_def:
        raise TypeError(
            f"`{name}` is not a state of this optimizer for these parameters: its tree "
            f"({len(got_leaves)} leaves) differs from `tx.init(params)`'s "
            f"({len(want_leaves)} leaves); build it with the same optimizer's `init` on the "
            "parameters the step updates."
        )
    for (path, got), (_, w) in zip(got_leaves, want_leaves, strict=True):
        if tuple(jnp.shape(got)) != tuple(w.shape):
            raise TypeError(
                f"`{name}{jax.tree_util.keystr(path)}` has shape {tuple(jnp.shape(got))}, but "
                f"`tx.init(params)` gives {tuple(w.shape)}: a state for other parameters."
            )


def check_optimizer(optimizer: Any, *, name: str = "optimizer") -> optax.GradientTransformation:
    """Return ``optimizer`` if it is an optax ``GradientTransformation``, else ``TypeError``."""
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`{name}` must be an optax.GradientTransformation, got {type(optimizer).__name__}."
        )
    return optimizer
