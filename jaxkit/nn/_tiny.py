"""Synthetic low-entropy sequence tasks for the packaged tiny trained LMs.

The tasks have a known ground truth, so a tiny model trained on them in seconds
gives a meaningful accuracy oracle for decoders (cached vs uncached decoding,
parallel decoding, steering). The trained models are loaded with
``jaxkit.io.load_fixture``.

One counting task, in two sizes (token ids; ``V`` = :func:`tiny_task_vocab`): a
start ``s`` and a step ``d ~ U{1, 2, 3}``, then ``x_t = x_{t-1} + d`` modulo the
number of symbols, each token after the prompt replaced by a uniform symbol with
probability ``rho``.

* ``"counting"`` (the ``tiny_lm`` fixture): 16 symbols, ``rho = 0``, prompt
  ``[s, s+d]`` (V = 16). Every target from position 2 on is determined.
* ``"noisy_counting"`` (the WeDLM fixture ``wedlm_counting``): 32 symbols, prompt
  ``[level, s, s+d, s+2d]`` with ``rho = (0, 0.05, 0.2)[level]``. Ids: symbols
  0..31, ``MASK`` = 32, level tokens 33..35 (V = 36). ``MASK`` never occurs in the
  data; decoders may use it.

And ``"copy"``: ``[a_1..a_k, SEP, a_1..a_k]`` with ``a_i ~ U{0..15}``,
``k = (length-1)//2``, ``SEP`` = 16 (V = 17). Targets after SEP are determined.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int

from jaxkit import _validate

TINY_TASKS = ("counting", "noisy_counting", "copy")
"""The task names ``tiny_task`` accepts."""
_VOCAB = {"counting": 16, "noisy_counting": 36, "copy": 17}
COUNT_STEPS = (1, 2, 3)
NOISY_N = 32
NOISY_MASK_ID = 32
NOISY_LEVEL_IDS = (33, 34, 35)
NOISY_RHO = (0.0, 0.05, 0.2)
NOISY_PROMPT_LEN = 4
COPY_SEP_ID = 16


class CountingSpec(NamedTuple):
    """The constants of the ``noisy_counting`` task (see the module docstring)."""

    n_symbols: int
    mask_id: int
    level_ids: tuple[int, ...]
    rho: tuple[float, ...]
    prompt_len: int
    steps: tuple[int, ...]
    vocab: int


NOISY_COUNTING = CountingSpec(
    NOISY_N, NOISY_MASK_ID, NOISY_LEVEL_IDS, NOISY_RHO, NOISY_PROMPT_LEN, COUNT_STEPS, 36
)
"""The constants of the ``noisy_counting`` task."""


class TinyTask(NamedTuple):
    """A batch of a synthetic task.

    Attributes:
      tokens: ``int32[B, L]`` sequences.
      loss_mask: ``bool[B, L]``, True where token ``t`` is a target whose value is
        determined (or governed by the task's rule) given tokens ``< t``.
      prompt_len: Number of leading prompt tokens (a Python int, same for all rows).
    """

    tokens: Array
    loss_mask: Array
    prompt_len: int


def tiny_task_vocab(task: str) -> int:
    """Vocabulary size of ``task``."""
    _validate.one_of(TINY_TASKS, task=task)
    return _VOCAB[task]


def _count(key, batch, length, *, n, levels, level):
    """The counting sampler: ``[level?] s, s+d, ... (+ noise after the prompt)``."""
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    if level is None:
        lv = jax.random.randint(k1, (batch,), 0, len(levels), jnp.int32)
    else:
        lv = jnp.full((batch,), level, jnp.int32)
    s = jax.random.randint(k2, (batch,), 0, n, jnp.int32)
    d = jax.random.choice(k3, jnp.asarray(COUNT_STEPS, jnp.int32), (batch,))
    head = 1 if len(levels) > 1 else 0  # the level token
    prompt = head + (3 if head else 2)
    rho = jnp.asarray(levels, jnp.float32)[lv]
    n_cont = length - head
    t = jnp.arange(n_cont, dtype=jnp.int32)[None, :]
    clean = (s[:, None] + t * d[:, None]) % n
    if max(levels) == 0.0:
        seq = clean
    else:
        flip = jax.random.uniform(k4, (batch, n_cont)) < rho[:, None]
        flip = flip & (t >= prompt - head)
        rand = jax.random.randint(k5, (batch, n_cont), 0, n, jnp.int32)

        def step(prev, xs):
            f, r, c = xs
            nxt = jnp.where(f, r, jnp.where(c >= 0, c, (prev + d) % n))
            return nxt, nxt

        fixed = jnp.where(t < prompt - head, clean, -1)
        _, cols = jax.lax.scan(step, s, (flip.T, rand.T, fixed.T))
        seq = cols.T
    if head:
        seq = jnp.concatenate([(lv + NOISY_LEVEL_IDS[0])[:, None], seq], axis=1)
    mask = jnp.broadcast_to(jnp.arange(length)[None, :] >= 2, (batch, length))
    return TinyTask(seq.astype(jnp.int32), mask, prompt)


def tiny_task(
    task: str, *, key: jax.Array, batch: int, length: int, level: int | None = None
) -> TinyTask:
    """Sample ``batch`` sequences of ``length`` tokens of a synthetic task.

    Args:
      task: One of ``"counting"``, ``"noisy_counting"``, ``"copy"``.
      key: A typed key from ``jax.random.key``.
      batch: Number of sequences.
      length: Sequence length (>= 4; >= 5 for ``noisy_counting``).
      level: ``noisy_counting`` only: the noise level index (0, 1, 2) of every row;
        ``None`` draws one per row uniformly.

    Returns:
      :class:`TinyTask` ``(tokens, loss_mask, prompt_len)``.
    """
    _validate.one_of(TINY_TASKS, task=task)
    _validate.is_key(key)
    batch = _validate.python_int(batch, name="batch", minimum=1)
    length = _validate.python_int(length, name="length", minimum=4)
    if level is not None:
        if task != "noisy_counting":
            raise ValueError(f"`level` applies to 'noisy_counting' only, got task={task!r}.")
        level = _validate.python_int(level, name="level", minimum=0)
        if level >= len(NOISY_RHO):
            raise ValueError(f"`level` must be < {len(NOISY_RHO)}, got level={level}.")
    if task == "noisy_counting" and length < NOISY_PROMPT_LEN + 1:
        raise ValueError(f"`length` must be >= 5 for 'noisy_counting', got length={length}.")
    tokens, mask = _sample(key, task=task, batch=batch, length=length, level=level)
    return TinyTask(tokens, mask, _prompt_len(task, length))


def _prompt_len(task: str, length: int) -> int:
    return {"counting": 2, "noisy_counting": NOISY_PROMPT_LEN}.get(task, (length - 1) // 2 + 1)


@functools.partial(jax.jit, static_argnames=("task", "batch", "length", "level"))
def _sample(key, *, task, batch, length, level):
    if task == "counting":
        return _count(key, batch, length, n=16, levels=(0.0,), level=None)[:2]
    if task == "noisy_counting":
        return _count(key, batch, length, n=NOISY_N, levels=NOISY_RHO, level=level)[:2]
    k = (length - 1) // 2
    a = jax.random.randint(key, (batch, k), 0, 16, jnp.int32)
    sep = jnp.full((batch, 1), COPY_SEP_ID, jnp.int32)
    toks = jnp.concatenate([a, sep, a], axis=1)
    pad = length - toks.shape[1]
    if pad:
        toks = jnp.concatenate([toks, jnp.zeros((batch, pad), jnp.int32)], axis=1)
    t = jnp.arange(length)[None, :]
    mask = (t > k) & (t <= 2 * k)
    return toks, jnp.broadcast_to(mask, (batch, length))


def tiny_task_accuracy(task: str, tokens: Int[ArrayLike, "B L"], *, start: int) -> Array:
    """Fraction of positions ``>= start`` that follow the task's rule, per row.

    ``counting``/``noisy_counting``: ``x_t = x_{t-1} + d`` modulo the number of
    symbols (d from the prompt, whose two tokens defining it must be symbols; any other
    token may be any id: a non-symbol token never counts);
    ``copy``: ``x_t`` equals the source symbol it copies.

    Args:
      task: Task name.
      tokens: ``int[B, L]`` full sequences (prompt + continuation).
      start: First position scored (> the prompt's last rule-defining token).

    Returns:
      ``float32[B]`` accuracies.

    Raises:
      TypeError: ``tokens`` not an integer ``[B, L]`` array.
      ValueError: an unknown ``task``; ``start`` outside ``[1, L)``; for the counting
        tasks, a token defining ``d`` (positions 0, 1; 1, 2 for ``noisy_counting``) that
        is not a symbol (traced: under ``jit``).
    """
    _validate.one_of(TINY_TASKS, task=task)
    _validate.integer(tokens, name="tokens")  # before jnp.asarray (a string names none)
    tokens = jnp.asarray(tokens)
    _validate.ndim(tokens, 2, name="tokens")
    L = tokens.shape[1]
    if not 1 <= start < L:
        raise ValueError(f"`start` must lie in [1, {L}), got start={start}.")
    if task != "copy":  # a non-symbol in the prompt gives a wrong step d, scored silently
        m, off = _counting_rule(task)
        bad = _validate.any_outside(tokens[:, off : off + 2], 0, m - 1)
        msg = f"`tokens` must hold symbols in [0, {m - 1}] at positions {off}, {off + 1} (d)."
        tokens = _validate.error_if(tokens, bad, msg)
    return _accuracy(tokens, task=task, start=start)


def _counting_rule(task: str) -> tuple[int, int]:
    """``(number of symbols, index of the first prompt token defining d)`` of a counting task."""
    return (16, 0) if task == "counting" else (NOISY_N, 1)


@functools.partial(jax.jit, static_argnames=("task", "start"))
def _accuracy(tokens, *, task, start):
    L = tokens.shape[1]
    t = jnp.arange(L)[None, :]
    if task == "copy":
        k = (L - 1) // 2
        src = jnp.take(tokens, jnp.clip(jnp.arange(L) - (k + 1), 0, L - 1), axis=1)
        ok = tokens == src
        scored = (t >= start) & (t > k) & (t <= 2 * k)
    else:
        m, off = _counting_rule(task)
        d = (tokens[:, off + 1] - tokens[:, off]) % m
        prev = jnp.concatenate([tokens[:, :1], tokens[:, :-1]], axis=1)
        ok = ((prev + d[:, None]) % m) == tokens
        scored = jnp.broadcast_to(t >= start, tokens.shape)
    num = jnp.sum((ok & scored).astype(jnp.float32), axis=1)
    den = jnp.maximum(jnp.sum(scored.astype(jnp.float32), axis=1), 1.0)
    return num / den
