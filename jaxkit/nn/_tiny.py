"""Synthetic low-entropy sequence tasks and the packaged tiny trained LMs.

The tasks have a known ground truth, so a tiny model trained on them in seconds
gives a meaningful accuracy oracle for decoders (cached vs uncached decoding,
parallel decoding, steering). ``scripts/train_tiny_lm.py --task <name>`` trains
and writes a fixture; :func:`load_fixture` loads one shipped in
``jaxkit/_fixtures/<name>/``.

Tasks (token ids; ``V`` = :func:`tiny_task_vocab`):

* ``"counting"``: ``x_0 ~ U{0..15}``, step ``d ~ U{1,2,3}``, ``x_t = x_0 + t·d mod 16``
  (V = 16). Every target from position 2 on is determined by the two previous
  tokens.
* ``"noisy_counting"`` (the WeDLM demo task): ``[level, s, s+d, s+2d, ...]`` over 32
  numbers, ``d ~ U{1..4}``; after the 3-number prompt each token is
  ``prev + d mod 32`` with probability ``1-ρ`` and uniform otherwise, with
  ``ρ = (0, 0.05, 0.2)[level]``. Ids: numbers 0..31, ``MASK`` = 32, level tokens
  33..35 (V = 36). ``MASK`` never occurs in the data; decoders may use it.
* ``"copy"``: ``[a_1..a_k, SEP, a_1..a_k]`` with ``a_i ~ U{0..15}``, ``k = (length-1)//2``,
  ``SEP`` = 16 (V = 17). Targets after SEP are determined.
"""

import importlib.resources
import json
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int

from jaxkit import _validate
from jaxkit.nn._config import TransformerConfig

TASKS = ("counting", "noisy_counting", "copy")
_VOCAB = {"counting": 16, "noisy_counting": 36, "copy": 17}
NOISY_MASK_ID = 32
NOISY_LEVEL_IDS = (33, 34, 35)
NOISY_RHO = (0.0, 0.05, 0.2)
COPY_SEP_ID = 16


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
    _validate.one_of(TASKS, task=task)
    return _VOCAB[task]


def tiny_task(task: str, *, key: jax.Array, batch: int, length: int) -> TinyTask:
    """Sample ``batch`` sequences of ``length`` tokens of a synthetic task.

    Args:
      task: One of ``"counting"``, ``"noisy_counting"``, ``"copy"``.
      key: A typed key from ``jax.random.key``.
      batch: Number of sequences.
      length: Sequence length (>= 4).

    Returns:
      :class:`TinyTask` ``(tokens, loss_mask, prompt_len)``.
    """
    _validate.one_of(TASKS, task=task)
    _validate.is_key(key)
    _validate.positive(batch=batch)
    if not isinstance(length, int) or length < 4:
        raise ValueError(f"`length` must be an int >= 4, got length={length!r}.")
    t = jnp.arange(length, dtype=jnp.int32)[None, :]
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    if task == "counting":
        x0 = jax.random.randint(k1, (batch, 1), 0, 16, jnp.int32)
        d = jax.random.randint(k2, (batch, 1), 1, 4, jnp.int32)
        toks = (x0 + t * d) % 16
        return TinyTask(toks, jnp.broadcast_to(t >= 2, (batch, length)), 2)
    if task == "noisy_counting":
        level = jax.random.randint(k1, (batch,), 0, 3, jnp.int32)
        s = jax.random.randint(k2, (batch,), 0, 32, jnp.int32)
        d = jax.random.randint(k3, (batch,), 1, 5, jnp.int32)
        rho = jnp.asarray(NOISY_RHO, jnp.float32)[level]
        n_cont = length - 4
        flip = jax.random.uniform(k4, (batch, max(n_cont, 0))) < rho[:, None]
        rand = jax.random.randint(k5, (batch, max(n_cont, 0)), 0, 32, jnp.int32)

        def step(prev, xs):
            f, r = xs
            nxt = jnp.where(f, r, (prev + d) % 32)
            return nxt, nxt

        prompt = jnp.stack([s, (s + d) % 32, (s + 2 * d) % 32], axis=1)
        _, cont = jax.lax.scan(step, prompt[:, -1], (flip.T, rand.T))
        toks = jnp.concatenate([(level + NOISY_LEVEL_IDS[0])[:, None], prompt, cont.T], axis=1)
        return TinyTask(toks.astype(jnp.int32), jnp.broadcast_to(t >= 2, (batch, length)), 4)
    k = (length - 1) // 2
    a = jax.random.randint(k1, (batch, k), 0, 16, jnp.int32)
    sep = jnp.full((batch, 1), COPY_SEP_ID, jnp.int32)
    toks = jnp.concatenate([a, sep, a], axis=1)
    pad = length - toks.shape[1]
    if pad:
        toks = jnp.concatenate([toks, jnp.zeros((batch, pad), jnp.int32)], axis=1)
    mask = (t > k) & (t <= 2 * k)
    return TinyTask(toks, jnp.broadcast_to(mask, (batch, length)), k + 1)


def tiny_task_accuracy(task: str, tokens: Int[ArrayLike, "B L"], *, start: int) -> Array:
    """Fraction of positions ``>= start`` that follow the task's rule, per row.

    ``counting``/``noisy_counting``: ``x_t - x_{t-1} ≡ d`` (d from the prompt);
    ``copy``: ``x_t`` equals the source symbol it copies.

    Args:
      task: Task name.
      tokens: ``int[B, L]`` full sequences (prompt + continuation).
      start: First position scored (> the prompt's last rule-defining token).

    Returns:
      ``float32[B]`` accuracies.
    """
    _validate.one_of(TASKS, task=task)
    tokens = jnp.asarray(tokens)
    _validate.integer(tokens, name="tokens")
    _validate.ndim(tokens, 2, name="tokens")
    L = tokens.shape[1]
    if not 1 <= start < L:
        raise ValueError(f"`start` must lie in [1, {L}), got start={start}.")
    t = jnp.arange(L)[None, :]
    if task == "copy":
        k = (L - 1) // 2
        src = jnp.take(tokens, jnp.clip(jnp.arange(L) - (k + 1), 0, L - 1), axis=1)
        ok = tokens == src
        scored = (t >= start) & (t > k) & (t <= 2 * k)
    else:
        m, off = (16, 0) if task == "counting" else (32, 1)
        d = (tokens[:, off + 1] - tokens[:, off]) % m
        prev = jnp.concatenate([tokens[:, :1], tokens[:, :-1]], axis=1)
        ok = ((tokens - prev) % m) == d[:, None]
        scored = jnp.broadcast_to(t >= start, tokens.shape)
    num = jnp.sum((ok & scored).astype(jnp.float32), axis=1)
    den = jnp.maximum(jnp.sum(scored.astype(jnp.float32), axis=1), 1.0)
    return num / den


class Fixture(NamedTuple):
    """A packaged tiny model: parameters, configuration and training metadata."""

    params: dict
    cfg: TransformerConfig
    info: dict


def load_fixture(name: str = "tiny_lm") -> Fixture:
    """Load a tiny trained LM shipped in ``jaxkit/_fixtures/<name>/``.

    Args:
      name: Fixture folder name (``"tiny_lm"``: the counting task).

    Returns:
      :class:`Fixture` ``(params (f32), cfg, info)``; ``info`` holds the task name,
      sequence length, training steps and measured accuracy (``task.json``).
    """
    from jaxkit.io import config_from_hf, load_safetensors

    root = importlib.resources.files("jaxkit._fixtures").joinpath(name)
    if not root.joinpath("config.json").is_file():
        raise ValueError(f"no fixture named {name!r} in jaxkit/_fixtures.")
    with importlib.resources.as_file(root) as folder:
        cfg = config_from_hf(json.loads((folder / "config.json").read_text()))
        info_path = folder / "task.json"
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
        params = load_safetensors(folder, cfg, dtype=jnp.float32)
    return Fixture(params, cfg, info)
