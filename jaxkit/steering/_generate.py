"""SVGT generation (cached and recompute) and the baselines: CAA and a prompt prefix."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate, decoding, nn
from jaxkit._tokens import (
    check_interventions,
    check_sampling,
    choose_tokens,
    guard_sampling,
    is_greedy,
    step_key,
)
from jaxkit.steering._refresh import cached_refresh, recompute_refresh
from jaxkit.steering._svgt import (
    SVGTConfig,
    SVGTParams,
    _check_tokens,
    _forward,
    check_config,
    edited_bridge,
    lower_pass,
    make_bridge,
)


def _reserve(tokens, prompt_len, k, fill):
    """``[prompt (M_b) ; fill x K ; rest]`` per row (int gather)."""
    b, t = tokens.shape
    j = jnp.arange(t + k, dtype=jnp.int32)[None, :]
    m = prompt_len[:, None]
    src = jnp.clip(jnp.where(j < m, j, j - k), 0, t - 1)
    out = jnp.take_along_axis(tokens, src, axis=1)
    return jnp.where((j >= m) & (j < m + k), jnp.asarray(fill, tokens.dtype), out)


def _cached(lm_params, vp, prompt, prompt_len, key, temperature, top_p, iv, *, lm_cfg, cfg, n):
    # One pass over the prompt: blocks <= l fill the cache (the K reserved slots hidden)
    # and give the value module its block-l hidden, the bridge replaces the reserved
    # rows, blocks > l finish the prefill. Decode steps carry only the masking
    # (``n_insert``): the bridge's K/V are in the cache already.
    b, p = prompt.shape
    k, layer = cfg.n_bridge, cfg.layer
    greedy = is_greedy(temperature)
    zb = jnp.zeros_like(prompt_len)  # batch-shaped arrays keep the prompts' sharding
    reserved = _reserve(prompt, prompt_len, k, 0)
    pos = zb[:, None] + jnp.arange(p + k, dtype=jnp.int32)[None, :]
    cache = nn.init_cache(
        lm_cfg, max_len=p + k + n, like=prompt_len, dtype=lm_params["embed"].dtype
    )
    # the user's edits (``iv``) with the span's masking: one object for every call
    hide = nn.combine_interventions(
        iv, nn.Interventions(insert_layer=layer, insert_at=prompt_len, n_insert=k)
    )
    low = lower_pass(lm_params, lm_cfg, reserved, pos, layer, cache=cache, interventions=hide)
    # rows < M_b <= P of `low.h` are the prompt's (the reserved rows are hidden from them)
    bridge, _ = make_bridge(vp, cfg, low.h[:, :p], prompt_len)
    j = pos - prompt_len[:, None]
    span = (j >= 0) & (j < k)
    br = jnp.take_along_axis(bridge, jnp.clip(j, 0, k - 1)[:, :, None], axis=1)
    hx = jnp.where(span[:, :, None], edited_bridge(br, iv, layer, low.h.dtype), low.h)
    up = nn.run_layers(
        lm_params,
        lm_cfg,
        hx,
        pos,
        start=layer + 1,
        cache=low.cache,
        overflow="drop",
        interventions=iv,
    )
    last = jnp.take_along_axis(up.h, (prompt_len + k - 1)[:, None, None], axis=1)
    logits = nn.unembed(lm_params, lm_cfg, last)[:, 0]
    cache = up.cache._replace(length=prompt_len + k)
    tok = _choose(logits, step_key(key, 0), temperature, top_p, greedy)
    out = (zb[:, None] + jnp.zeros((1, n), jnp.int32)).at[:, 0].set(tok)
    # the loop on per-layer weights and cache, as `ar_generate`'s (no K/V slice copies)
    lm_params, cache = nn.unstack_layers(lm_params), nn.unstack_layers(cache)

    def body(i, c):
        cache, tok, out = c
        logits, cache = nn.decode_step(
            lm_params, lm_cfg, tok, cache, overflow="drop", interventions=hide
        )
        tok = _choose(logits, step_key(key, i), temperature, top_p, greedy)
        return cache, tok, out.at[:, i].set(tok)

    _, _, out = jax.lax.fori_loop(1, n, body, (cache, tok, out))
    return _generation(out, prompt_len, n)


def _generation(out, prompt_len, n):
    """The :class:`decoding.Generation` of ``n`` tokens per row after a prefill (no stops)."""
    zb = jnp.zeros_like(prompt_len)  # batch-shaped arrays keep the prompts' sharding
    steps = zb + (n - 1)  # loop steps after the first token
    return decoding.Generation(out, zb + n, decoding.DecodeStats(jnp.int32(n - 1), steps))


def _choose(logits, key, temperature, top_p, greedy):
    return choose_tokens(logits, key, greedy=greedy, temperature=temperature, top_p=top_p)


def _recompute(lm_params, vp, prompt, prompt_len, key, temperature, top_p, iv, *, lm_cfg, cfg, n):
    b, p = prompt.shape
    k = cfg.n_bridge
    greedy = is_greedy(temperature)
    buf = jnp.concatenate([prompt, jnp.zeros((b, n), jnp.int32)], axis=1)
    rows = jnp.arange(b)

    def body(i, c):
        buf, out = c
        f = _forward(lm_params, vp, buf, prompt_len, None, lm_cfg=lm_cfg, cfg=cfg, iv=iv)
        logits = f.logits[rows, prompt_len + k - 1 + i]
        tok = _choose(logits, step_key(key, i), temperature, top_p, greedy)
        return buf.at[rows, prompt_len + i].set(tok), out.at[:, i].set(tok)

    _, out = jax.lax.fori_loop(0, n, body, (buf, jnp.zeros((b, n), jnp.int32)))
    z = jnp.zeros((), jnp.int32)
    return decoding.Generation(
        out, jnp.full((b,), n, jnp.int32), decoding.DecodeStats(z, z + 0 * rows)
    )


def _off(lm_params, vp, prompt, prompt_len, key, temperature, top_p, iv, *, lm_cfg, cfg, n):
    return decoding.ar_generate(
        lm_params,
        lm_cfg,
        prompt,
        prompt_len,
        key=key,
        max_new_tokens=n,
        temperature=temperature,
        top_p=top_p,
        interventions=iv,
    )


def _refreshing(gen):
    def run(lm_params, vp, prompt, prompt_len, key, temperature, top_p, iv, *, lm_cfg, cfg, n):
        greedy = is_greedy(temperature)

        def choose(logits, k):
            return _choose(logits, k, temperature, top_p, greedy)

        out, _ = gen(
            lm_params, vp, prompt, prompt_len, key, choose, lm_cfg=lm_cfg, cfg=cfg, n=n, iv=iv
        )
        return _generation(out, prompt_len, n)

    return run


_MODES = {
    "cached": _cached,
    "recompute": _recompute,
    "off": _off,
    "cached_refresh": _refreshing(cached_refresh),
    "recompute_refresh": _refreshing(recompute_refresh),
}


@functools.partial(jax.jit, static_argnames=("lm_cfg", "cfg", "n", "mode", "greedy"))
def _generate_core(
    lm_params, vp, prompt, prompt_len, key, temperature, top_p, iv, *, lm_cfg, cfg, n, mode, greedy
):
    lm_params = jax.lax.stop_gradient(lm_params)
    prompt_len = guard_sampling(prompt_len, temperature, top_p)  # traced values
    t = 0.0 if greedy else temperature
    return _MODES[mode](
        lm_params, vp, prompt, prompt_len, key, t, top_p, iv, lm_cfg=lm_cfg, cfg=cfg, n=n
    )


def svgt_generate(
    lm_params,
    lm_cfg: nn.TransformerConfig,
    vparams: SVGTParams,
    cfg: SVGTConfig,
    prompt: Int[ArrayLike, "B P"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    key,
    max_new_tokens: int,
    mode: str = "cached",
    enabled: bool = True,
    temperature: float | Array = 0.0,
    top_p: float | Array = 1.0,
    interventions: nn.Interventions | None = None,
) -> decoding.Generation:
    """Generate with the bridge inserted after each row's prompt at block ``cfg.layer``.

    The bridge is built from the prompt (trigger = the last prompt token's block-``l``
    hidden). With ``cfg.refresh_every = 0`` it stays fixed (the authors' refresh,
    whose trigger stays the last prompt token, is a no-op). With ``R > 0`` every R
    steps a new bridge is built from the *current* token (its block-``l`` hidden is
    the trigger; the value encoder reads the prompt and the tokens so far) and
    smoothed, ``b <- cfg.ema * b + (1 - cfg.ema) * b_new``; each step's logits are
    those of ``[prompt ; b ; generated]``. ``"cached"``: the prompt gets K reserved
    slots after position ``M_b``; one pass fills the cache (blocks ``<= l`` with the
    span hidden, the bridge inserted after block ``l``, blocks ``> l``) and the decode
    steps keep the span hidden below ``l`` at the gapped positions ``M+K..``; a
    refresh rewrites the K/V of the bridge *and* of every generated token above ``l``
    exactly (a chunk forward; the current token is re-run). ``"recompute"``: every
    token runs the blocks on ``[prompt ; generated]`` and the bridge (no cache; the
    oracle of the cached path). ``enabled=False`` is ``decoding.ar_generate`` on the
    base model, exactly. Jitted at module level (configs, sizes, mode static).

    ``interventions`` composes SVGT with other edits of the residual stream (a CAA
    vector of :func:`steer_add`, several joined by ``nn.combine_interventions``): they
    act in every forward of the generation, at every position, as
    ``nn.Interventions`` defines them, with the bridge as the block-``l`` insertion:
    edits at blocks ``<= l`` change what the value module reads, and an edit at block
    ``l`` itself is added to the bridge rows too (the insertion, then the edit). Every
    mode honours them (``enabled=False``: ``decoding.ar_generate`` with the same edits).

    Args:
      lm_params: The frozen backbone's parameters (``jaxkit.nn`` layout).
      lm_cfg: The backbone's config.
      vparams: The value side (:class:`SVGTParams`).
      cfg: Its :class:`SVGTConfig`.
      prompt: ``int[B, P]`` right-padded prompts.
      prompt_len: ``int[B]`` in ``[1, P]``.
      key: PRNG key (token ``i`` drawn with ``fold_in(key, i)``).
      max_new_tokens: N (static).
      mode: ``"cached"`` or ``"recompute"``.
      enabled: False: the base model (adapter off).
      temperature: 0 (concrete) for greedy, else sampling (traced).
      top_p: Nucleus mass in (0, 1].
      interventions: Optional :class:`~jaxkit.nn.Interventions` of additive edits
        (``[D]`` or ``[B, D]`` per block); no insertion (the bridge is this call's one
        inserted span) and no read sites.

    Returns:
      :class:`jaxkit.decoding.Generation` (``tokens int32[B, N]``; no stop tokens).

    Raises:
      TypeError / ValueError: bad shapes or ids, ``cfg.layer`` out of range, a bad
        mode, ``max_new_tokens < 1``, a ``temperature`` or ``top_p`` that is not a
        real scalar, a non-finite or negative ``temperature``, ``top_p`` outside
        ``(0, 1]`` (NaN fails; traced values raise under ``jit``; the checks of
        ``decoding.ar_generate``); ``interventions`` that is not an
        ``nn.Interventions`` or holds an edit of another shape (TypeError), an edit at a
        block outside the model, read sites or an inserted span (ValueError).
    """
    check_config(lm_cfg, cfg)
    _validate.one_of(("cached", "recompute"), mode=mode)
    _validate.flags(enabled=enabled)
    _validate.is_key(key)
    n = _validate.python_int(max_new_tokens, name="max_new_tokens", minimum=1)
    prompt, prompt_len = _check_tokens(lm_cfg, prompt, prompt_len, name="prompt")
    greedy = check_sampling(temperature, top_p)
    iv = check_interventions(interventions, lm_cfg, prompt.shape[0], span_owner="svgt_generate")
    return _generate_core(
        lm_params,
        vparams,
        prompt,
        prompt_len,
        key,
        jnp.asarray(temperature, jnp.float32),
        jnp.asarray(top_p, jnp.float32),
        iv,
        lm_cfg=lm_cfg,
        cfg=cfg,
        n=n,
        mode=(mode + ("_refresh" if cfg.refresh_every else "")) if enabled else "off",
        greedy=greedy,
    )


# ----------------------------------------------------------------------------- baselines


@functools.partial(jax.jit, static_argnames=("lm_cfg", "layer"))
def _caa(lm_params, pos, pos_len, neg, neg_len, *, lm_cfg, layer):
    def mean_last(tok, ln):
        pos = jnp.broadcast_to(jnp.arange(tok.shape[1], dtype=jnp.int32), tok.shape)
        h = lower_pass(lm_params, lm_cfg, tok, pos, layer).h
        last = jnp.take_along_axis(h, (ln - 1)[:, None, None], axis=1)[:, 0]
        return jnp.mean(last.astype(jnp.float32), axis=0)

    return mean_last(pos, pos_len) - mean_last(neg, neg_len)


def caa_vector(
    lm_params,
    lm_cfg: nn.TransformerConfig,
    positive: Int[ArrayLike, "B T"],
    positive_len: Int[ArrayLike, " B"],
    negative: Int[ArrayLike, "C U"],
    negative_len: Int[ArrayLike, " C"],
    *,
    layer: int,
) -> Float[Array, " D"]:
    """Contrastive activation addition: mean difference of block-``layer`` outputs.

    ``mean_b h_l(positive_b)[last] - mean_c h_l(negative_c)[last]`` at each
    sequence's last valid token (Rimsky et al., "Steering Llama 2 via Contrastive
    Activation Addition", 2024). Apply it with :func:`steer_add`.

    Raises:
      TypeError: an empty ``positive`` or ``negative`` batch.
      ValueError: ``layer`` outside ``[0, n_layers)``; lengths outside ``[1, T]``.
    """
    layer = _validate.python_int(layer, name="layer")
    if not 0 <= layer < lm_cfg.n_layers:
        raise ValueError(f"`layer` must lie in [0, {lm_cfg.n_layers}), got {layer}.")
    pos, pos_len = _check_tokens(
        lm_cfg, positive, positive_len, name="positive", len_name="positive_len"
    )
    neg, neg_len = _check_tokens(
        lm_cfg, negative, negative_len, name="negative", len_name="negative_len"
    )
    for name, x in (("positive", pos), ("negative", neg)):
        _validate.nonempty(x, name=name)
    return _caa(lm_params, pos, pos_len, neg, neg_len, lm_cfg=lm_cfg, layer=layer)


def steer_add(
    vector: Float[ArrayLike, " D"], scale: float | Array, *, layer: int
) -> nn.Interventions:
    """``nn.Interventions`` adding ``scale * vector`` after block ``layer`` (every token).

    ``scale`` is traced: a sweep over scales reuses one compiled generator. Pass the
    result as ``interventions=`` to ``nn.apply`` / ``decoding.ar_generate`` / ... .

    Raises:
      TypeError: ``vector`` not a float ``[D]`` array; ``layer`` not an int.
      ValueError: a negative ``layer``; a NaN or infinite ``scale`` or ``vector`` entry
        (traced: under ``jit``).
    """
    _validate.floating(vector, name="vector")  # before jnp.asarray (a string names none)
    v = jnp.asarray(vector)
    _validate.ndim(v, 1, name="vector")
    v = _validate.all_finite(v, name="vector")  # checked once here, not in the decode loop
    layer = _validate.python_int(layer, name="layer", minimum=0)
    _validate.real(scale, name="scale")
    return nn.Interventions({layer: _validate.guard_finite(scale * v, scale, name="scale")})


@jax.jit
def _prefix(prompt, prompt_len, prefix):
    b, p = prompt.shape
    k = prefix.shape[0]
    return jnp.concatenate([jnp.broadcast_to(prefix, (b, k)), prompt], axis=1), prompt_len + k


def prefix_prompts(
    prompt: Int[ArrayLike, "B P"], prompt_len: Int[ArrayLike, " B"], prefix: Int[ArrayLike, " K"]
) -> tuple[Int[Array, "B K+P"], Int[Array, " B"]]:
    """Prepend a fixed token pattern (e.g. a refusal system prompt) to every prompt.

    Returns ``(prompts [B, K+P], prompt_len + K)`` (right padding kept). The token ids of
    ``prompt`` and ``prefix`` are copied as they are (any integers: no vocabulary here).

    Raises:
      TypeError: non-integer or misshapen ``prompt``, ``prompt_len``, ``prefix``.
      ValueError: a ``prompt_len`` outside ``[0, P]`` (traced: under ``jit``).
    """
    _validate.integer(prompt, name="prompt")  # before jnp.asarray (a string names no argument)
    _validate.integer(prefix, name="prefix")
    _validate.integer(prompt_len, name="prompt_len")
    prompt, prompt_len, prefix = (jnp.asarray(x) for x in (prompt, prompt_len, prefix))
    _validate.ndim(prompt, 2, name="prompt")
    _validate.ndim(prefix, 1, name="prefix")
    _validate.shape(prompt_len, (prompt.shape[0],), name="prompt_len")
    p = prompt.shape[1]
    bad = _validate.any_outside(prompt_len, 0, p)
    prompt_len = _validate.error_if(prompt_len, bad, f"`prompt_len` must lie in [0, {p}].")
    return _prefix(prompt.astype(jnp.int32), prompt_len.astype(jnp.int32), prefix.astype(jnp.int32))
