"""Argument checks, result types and the token sampler shared by the WeDLM and AR decoders."""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array

from jaxkit import _tokens, _validate, nn
from jaxkit._tokens import is_greedy, step_key  # noqa: F401  (step_key re-exported)
from jaxkit.kernels.sampling import sample_tokens


class DecodeStats(NamedTuple):
    """Counters of a generation call.

    Attributes:
      n_forward: ``int32[]``, model forwards run after the prefill (loop steps).
      row_forwards: ``int32[B]``, forwards each row took part in before it finished.
    """

    n_forward: Array
    row_forwards: Array


class Generation(NamedTuple):
    """Result of :func:`ar_generate` and :func:`wedlm_generate`.

    Attributes:
      tokens: ``int32[B, N]``, generated tokens; ``pad_token_id`` after each row's end.
      lengths: ``int32[B]``, tokens per row (a stop token included).
      stats: :class:`DecodeStats`.
    """

    tokens: Array
    lengths: Array
    stats: DecodeStats


class Sampling(NamedTuple):
    """Traced hyperparameters of the token sampler (``kernels.sampling.sample_tokens``).

    The fields are the sampler's keyword names: ``sample_tokens(..., **s._asdict())``.
    """

    temperature: Array
    top_k: Array
    top_p: Array
    min_p: Array


def check_sampling(temperature, top_k, top_p, min_p, *, vocab: int) -> Sampling:
    """Python-level checks of the sampler's scalars (concrete values: ValueError).

    ``temperature``, ``top_p`` and ``min_p`` through :func:`jaxkit._tokens.check_sampling`
    (the checks of the adapters' generators too), then ``top_k`` (None: ``vocab``).
    """
    _tokens.check_sampling(temperature, top_p, min_p)
    if top_k is None:
        top_k = vocab
    elif isinstance(top_k, bool):
        raise TypeError(f"`top_k` must be an integer (or None), got {top_k!r}.")
    else:
        _validate.integer(top_k, name="top_k")  # a float, a string or an object: named
        if jnp.ndim(top_k) != 0:
            raise TypeError(f"`top_k` must be a scalar, got shape {jnp.shape(top_k)}.")
        _validate.in_interval(low=1, high=vocab, top_k=top_k)
    return Sampling(temperature, top_k, top_p, min_p)


def choose_tokens(logits: Array, key, s: Sampling, *, greedy: bool) -> Array:
    """Tokens of ``logits [..., V]``: the fused sampler, or the arg-max in greedy mode.

    The decoders' own call of the sampler with all four filters (``s``), so the fused
    sampler is on the decode path by a direct import; the adapters' generators
    (``steering``, ``memory``) use :func:`jaxkit._tokens.choose_tokens`, the same rule
    with the sampler's defaults for ``top_k`` and ``min_p``. ``greedy`` (static): the
    arg-max (ties to the lowest index), the very tokens ``sample_tokens`` gives at
    temperature 0, without the sampler's noise and filters in the decode loop.
    """
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return sample_tokens(logits, key=key, **s._asdict()).token


class Static(NamedTuple):
    """Static decoder settings (hashable: one compiled program per value)."""

    max_new_tokens: int
    max_len: int
    stop_token_ids: tuple[int, ...]
    pad_token_id: int
    greedy: bool


class Checked(NamedTuple):
    """Decoder inputs after :func:`check_generate_args`."""

    prompt: Array
    prompt_len: Array
    sampling: Sampling
    static: Static
    iv: nn.Interventions | None = None


def check_generate_args(
    cfg,
    key,
    prompt,
    prompt_len,
    *,
    max_new_tokens,
    max_len,
    window,
    stop_token_ids,
    token_ids,
    sampling,
    interventions=None,
) -> Checked:
    """Validate the common decoder inputs (Python-level; traced token ids get a guard).

    ``token_ids``: ``{name: id}`` of static ids that must lie in the vocabulary;
    ``sampling``: ``(temperature, top_k, top_p, min_p)`` as passed by the user;
    ``interventions``: the generator's :class:`~jaxkit.nn.Interventions` or None
    (checked by :func:`jaxkit._tokens.check_interventions`, returned as ``iv``).
    """
    _validate.is_key(key)
    stops = tuple(_validate.python_int(s, name="stop_token_ids") for s in stop_token_ids)
    extra_ids = [*token_ids.items(), *[("stop_token_ids", s) for s in stops]]
    _validate.integer(prompt, name="prompt")  # before jnp.asarray: a str names the argument
    _validate.integer(prompt_len, name="prompt_len")
    prompt = jnp.asarray(prompt)
    prompt_len = jnp.asarray(prompt_len)
    _validate.token_rows(prompt, prompt_len, name="prompt")
    if 0 in prompt.shape:
        raise TypeError(f"`prompt` must have at least one row and one column, got {prompt.shape}.")
    max_new_tokens = _validate.python_int(max_new_tokens, name="max_new_tokens", minimum=1)
    window = _validate.python_int(window, name="window", minimum=1)
    t = prompt.shape[1]
    if max_len is None:
        max_len = t + max_new_tokens
    max_len = _validate.python_int(max_len, name="max_len", minimum=1)
    if t > max_len:
        raise ValueError(
            f"`prompt` is longer than the cache: prompt length {t} > max_len={max_len}."
        )
    if window > max_len:
        raise ValueError(f"`window`={window} is larger than the cache (max_len={max_len}).")
    if t + max_new_tokens > max_len:
        raise ValueError(
            f"`max_len`={max_len} is too small for prompt length {t} + "
            f"max_new_tokens={max_new_tokens}."
        )
    v = cfg.vocab_size
    for name, tid in extra_ids:
        tid = _validate.python_int(tid, name=name)
        if not 0 <= tid < v:
            raise ValueError(f"`{name}` must be a token id in [0, {v}), got {tid!r}.")
    bad_tok = jnp.any((prompt < 0) | (prompt >= v))
    prompt = _validate.error_if(
        prompt, bad_tok, f"`prompt` holds token ids outside [0, vocab_size={v})."
    )
    bad_len = _validate.any_outside(prompt_len, 1, t)
    prompt_len = _validate.error_if(
        prompt_len, bad_len, f"`prompt_len` must lie in [1, {t}] (the prompt width)."
    )
    sampling = check_sampling(*sampling, vocab=v)
    greedy = is_greedy(sampling.temperature)
    static = Static(max_new_tokens, max_len, stops, token_ids["pad_token_id"], greedy)
    iv = _tokens.check_interventions(interventions, cfg, prompt.shape[0])
    return Checked(prompt.astype(jnp.int32), prompt_len.astype(jnp.int32), sampling, static, iv)


def stop_info(out: Array, n_gen: Array, stop_token_ids: tuple[int, ...]):
    """(any stop inside the first n_gen tokens, index of the first one)."""
    n = out.shape[1]
    if not stop_token_ids:
        z = jnp.zeros_like(out[:, 0])  # *_like: keeps the batch sharding
        return z > 0, z.astype(jnp.int32)
    is_stop = jnp.zeros(out.shape, bool)
    for s in stop_token_ids:
        is_stop = is_stop | (out == s)
    is_stop = is_stop & (jnp.arange(n)[None, :] < n_gen[:, None])
    return jnp.any(is_stop, axis=1), jnp.argmax(is_stop, axis=1).astype(jnp.int32)


def finalize(out: Array, n_gen: Array, stop_token_ids, pad_token_id: int):
    """Truncate at the first stop token (kept) and pad the rest."""
    has, first = stop_info(out, n_gen, stop_token_ids)
    lengths = jnp.where(has, first + 1, n_gen).astype(jnp.int32)
    keep = jnp.arange(out.shape[1])[None, :] < lengths[:, None]
    return jnp.where(keep, out, jnp.full_like(out, pad_token_id)), lengths


def write_at(out: Array, idx: Array, vals: Array) -> Array:
    """``out[b, idx[b, k]] = vals[b, k]`` for distinct in-range ``idx`` per row; others dropped.

    Elementwise (a one-hot select instead of a scatter), so a batch-sharded ``out``
    keeps its sharding under an explicit mesh.
    """
    if idx.shape[1] == 1:  # one write per row: a single select
        hit = idx == jnp.arange(out.shape[1], dtype=idx.dtype)[None, :]
        return jnp.where(hit, vals.astype(out.dtype), out)
    hit = idx[:, :, None] == jnp.arange(out.shape[1], dtype=idx.dtype)[None, None, :]
    val = jnp.sum(jnp.where(hit, vals[:, :, None], jnp.zeros_like(vals)[:, :, None]), axis=1)
    return jnp.where(jnp.any(hit, axis=1), val.astype(out.dtype), out)


def ar_step(params, cfg, state, key, s: Sampling, *, static, overflow, iv=None):
    """One AR decode step of the active rows: feed ``tok``, draw, write, update ``done``.

    The loop body shared by :func:`ar_generate` and WeDLM's one-token fallback;
    ``state`` is ``(cache, tok, out, n_gen, done)``; returns the next state (``tok``
    the token just drawn) and the rows that were active. ``iv``: the generation's
    :class:`~jaxkit.nn.Interventions` (or None).
    """
    cache, tok, out, n_gen, done = state
    n = static.max_new_tokens
    active = ~done
    logits, cache = nn.decode_step(params, cfg, tok, cache, overflow=overflow, interventions=iv)
    nxt = choose_tokens(logits, key, s, greedy=static.greedy)
    out = write_at(out, jnp.where(active, n_gen, n)[:, None], nxt[:, None])
    n_gen = n_gen + active.astype(jnp.int32)
    has_stop, _ = stop_info(out, n_gen, static.stop_token_ids)
    done = done | has_stop | (n_gen >= n)
    return (cache, nxt, out, n_gen, done), active
