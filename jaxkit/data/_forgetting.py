"""MTS training-dynamics feature: forgetting counts (Toneva et al., ICLR 2019).

A forgetting event for example ``i`` is a presentation at which ``i`` is
misclassified after having been classified correctly at its previous presentation
(spec ``training.md`` section 2.2, ``pre_forgetting``). The count is a running state
updated once per mini-batch, pure so it can live inside a jitted training loop.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int

from jaxkit import _validate as V


class ForgettingState(NamedTuple):
    """Running forgetting statistics of ``N`` training examples."""

    prev_correct: Bool[Array, " n"]  # correctness at the latest presentation (False before any)
    count: Int[Array, " n"]  # forgetting events so far (correct -> incorrect transitions)
    ever_correct: Bool[Array, " n"]  # classified correctly at least once (else "never learned")


def forgetting_init(n: int) -> ForgettingState:
    """Initial :class:`ForgettingState` for ``n`` examples (nothing presented yet).

    ``prev_correct`` starts ``False`` (as the authors' ``prev_accs = 0``), so a first
    presentation is never a forgetting event.
    """
    n = V.python_int(n, name="n", minimum=1)
    return ForgettingState(jnp.zeros(n, bool), jnp.zeros(n, jnp.int32), jnp.zeros(n, bool))


def _update(state, correct, idx):
    if idx is None:
        forgot = state.prev_correct & ~correct
        return ForgettingState(
            correct, state.count + forgot.astype(jnp.int32), state.ever_correct | correct
        )
    forgot = state.prev_correct[idx] & ~correct
    return ForgettingState(
        state.prev_correct.at[idx].set(correct),
        state.count.at[idx].add(forgot.astype(jnp.int32)),
        state.ever_correct.at[idx].max(correct),
    )


_update_jit = jax.jit(_update)


def _check_state(state) -> None:
    """``state`` a :class:`ForgettingState`: bool masks and an integer count, all ``[N]``.

    A TypeError naming the field (static checks only: dtype and shape).
    """
    if not isinstance(state, ForgettingState):
        raise TypeError(f"`state` must be a ForgettingState, got {type(state).__name__}.")
    V.boolean(state.prev_correct, name="state.prev_correct")
    V.integer(state.count, name="state.count")
    V.boolean(state.ever_correct, name="state.ever_correct")
    V.ndim(state.count, 1, name="state.count")
    n = jnp.shape(state.count)
    V.shape(state.prev_correct, n, name="state.prev_correct")
    V.shape(state.ever_correct, n, name="state.ever_correct")


def forgetting_update(
    state: ForgettingState,
    correct: Bool[ArrayLike, " b"],
    idx: Int[ArrayLike, " b"] | None = None,
) -> ForgettingState:
    """Record one presentation of a mini-batch and count forgetting events.

    ``correct[j]`` says whether example ``idx[j]`` (its row in the dataset, ``[B]``
    distinct integers in ``[0, N)``) is classified correctly now (e.g.
    ``logits.argmax(-1) == labels``, computed at the training forward pass as the
    authors do). ``idx=None``: ``correct`` covers all ``N`` examples in order (one
    full-dataset evaluation). Example ``i``'s count grows by one when it was correct at
    its previous presentation and is incorrect now. A never-learned example keeps
    count 0 (the authors' feature); ``ever_correct`` tells them apart. Pure and jitted,
    callable inside a jitted training loop (``lax.scan`` carry). Out-of-range or
    repeated ``idx`` raise (``eqx.error_if``); a ``state`` whose masks are not bool,
    whose count is not integer or whose fields are not all ``[N]`` raises a ``TypeError``
    naming the field. The state is dataset-sized and unsharded: under an ``Explicit``
    mesh pass ``correct`` / ``idx`` replicated (jax cannot scatter rows split over a mesh
    axis into an unsplit array).
    """
    _check_state(state)
    n = state.count.shape[0]
    V.numeric(correct=correct)  # before jnp.asarray: a str names the argument
    correct = jnp.asarray(correct)
    V.ndim(correct, 1, name="correct")
    if correct.dtype != jnp.bool_:
        raise TypeError(f"`correct` must be boolean, got dtype {correct.dtype}.")
    if idx is None:
        V.shape(correct, (n,), name="correct")
    else:
        V.integer(idx, name="idx")
        idx = jnp.asarray(idx)
        V.shape(idx, correct.shape, name="idx")
        s = jnp.sort(idx)
        bad = jnp.any((idx < 0) | (idx >= n)) | jnp.any(s[1:] == s[:-1])
        idx = V.error_if(idx, bad, "`idx` must be distinct rows in [0, N).")
    return _update_jit(state, correct, idx)


__all__ = ["ForgettingState", "forgetting_init", "forgetting_update"]
