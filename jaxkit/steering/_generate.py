"""SVGT generation (cached and recompute) and the baselines: CAA and a prompt prefix."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate, decoding, nn
from jaxkit.kernels.sampling import sample_tokens
from jaxkit.steering._refresh import cached_refresh, recompute_refresh
from jaxkit.steering._svgt import (
    SVGTConfig,
    SVGTParams,
    _check_tokens,
    _forward,
    check_config,
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


def _cached(lm_params, vp, prompt, prompt_len, key, temperature, top_p, *, lm_cfg, cfg, n):
    k, layer = cfg.n_bridge, cfg.layer
    h = nn.run_layers(
        lm_params,
        lm_cfg,
        nn.embed(lm_params, lm_cfg, prompt),
        jnp.broadcast_to(jnp.arange(prompt.shape[1], dtype=jnp.int32), prompt.shape),
        stop=layer + 1,
    ).h
    bridge, _ = make_bridge(vp, cfg, h, prompt_len)
    iv = nn.Interventions(insert_layer=layer, insert_at=prompt_len, latents=bridge)
    return decoding.ar_generate(
        lm_params,
        lm_cfg,
        _reserve(prompt, prompt_len, k, 0),
        prompt_len + k,
        key=key,
        max_new_tokens=n,
        temperature=temperature,
        top_p=top_p,
        interventions=iv,
    )


def _choose(logits, key, temperature, top_p, greedy):
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return sample_tokens(logits, key=key, temperature=temperature, top_p=top_p).token


def _recompute(lm_params, vp, prompt, prompt_len, key, temperature, top_p, *, lm_cfg, cfg, n):
    b, p = prompt.shape
    k = cfg.n_bridge
    greedy = not isinstance(temperature, jax.core.Tracer) and float(temperature) == 0.0
    buf = jnp.concatenate([prompt, jnp.zeros((b, n), jnp.int32)], axis=1)
    rows = jnp.arange(b)

    def body(i, c):
        buf, out = c
        f = _forward(lm_params, vp, buf, prompt_len, None, lm_cfg=lm_cfg, cfg=cfg)
        logits = f.logits[rows, prompt_len + k - 1 + i]
        tok = _choose(logits, jax.random.fold_in(key, i), temperature, top_p, greedy)
        return buf.at[rows, prompt_len + i].set(tok), out.at[:, i].set(tok)

    _, out = jax.lax.fori_loop(0, n, body, (buf, jnp.zeros((b, n), jnp.int32)))
    z = jnp.zeros((), jnp.int32)
    return decoding.Generation(
        out, jnp.full((b,), n, jnp.int32), decoding.DecodeStats(z, z + 0 * rows)
    )


def _off(lm_params, vp, prompt, prompt_len, key, temperature, top_p, *, lm_cfg, cfg, n):
    return decoding.ar_generate(
        lm_params,
        lm_cfg,
        prompt,
        prompt_len,
        key=key,
        max_new_tokens=n,
        temperature=temperature,
        top_p=top_p,
    )


def _refreshing(gen):
    def run(lm_params, vp, prompt, prompt_len, key, temperature, top_p, *, lm_cfg, cfg, n):
        greedy = not isinstance(temperature, jax.core.Tracer) and float(temperature) == 0.0

        def choose(logits, k):
            return _choose(logits, k, temperature, top_p, greedy)

        out = gen(lm_params, vp, prompt, prompt_len, key, choose, lm_cfg=lm_cfg, cfg=cfg, n=n)
        b = prompt.shape[0]
        steps = jnp.zeros((b,), jnp.int32) + (n - 1)  # loop steps after the first token
        stats = decoding.DecodeStats(steps[0], steps)
        return decoding.Generation(out, jnp.full((b,), n, jnp.int32), stats)

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
    lm_params, vp, prompt, prompt_len, key, temperature, top_p, *, lm_cfg, cfg, n, mode, greedy
):
    lm_params = jax.lax.stop_gradient(lm_params)
    t = 0.0 if greedy else temperature
    return _MODES[mode](
        lm_params, vp, prompt, prompt_len, key, t, top_p, lm_cfg=lm_cfg, cfg=cfg, n=n
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
) -> decoding.Generation:
    """Generate with the bridge inserted after each row's prompt at block ``cfg.layer``.

    The bridge is built once from the prompt (trigger = the last prompt token's
    block-``l`` hidden; the authors' refresh with that trigger is a no-op, so the
    bridge is static; :func:`~jaxkit.steering.refresh_bridge` rewrites a cache exactly
    when a bridge changes). ``"cached"``: the prompt gets K reserved slots after
    position ``M_b``, ``nn.Interventions`` inserts the bridge there, and
    ``decoding.ar_generate`` decodes with the span hidden from blocks ``<= l`` and
    the gapped positions ``M+K..`` (KV cache). ``"recompute"``: every token runs the
    full :func:`svgt_forward` on ``[prompt ; generated]`` (no cache; the oracle of the
    cached path). ``enabled=False`` is ``decoding.ar_generate`` on the base model,
    exactly. Jitted at module level (configs, sizes, mode static).

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

    Returns:
      :class:`jaxkit.decoding.Generation` (``tokens int32[B, N]``; no stop tokens).

    Raises:
      TypeError / ValueError: bad shapes or ids, ``cfg.layer`` out of range, a bad
        mode, ``max_new_tokens < 1``.
    """
    check_config(lm_cfg, cfg)
    _validate.one_of(("cached", "recompute"), mode=mode)
    _validate.is_key(key)
    n = _validate.python_int(max_new_tokens, name="max_new_tokens", minimum=1)
    prompt, prompt_len = _check_tokens(lm_cfg, prompt, prompt_len)
    _validate.real_scalar(temperature, name="temperature")
    _validate.non_negative(temperature=temperature)
    _validate.in_interval(low=0, high=1, closed="right", top_p=top_p)
    greedy = decoding_greedy(temperature)
    return _generate_core(
        lm_params,
        vparams,
        prompt,
        prompt_len,
        key,
        jnp.asarray(temperature, jnp.float32),
        jnp.asarray(top_p, jnp.float32),
        lm_cfg=lm_cfg,
        cfg=cfg,
        n=n,
        mode=(mode + ("_refresh" if cfg.refresh_every else "")) if enabled else "off",
        greedy=greedy,
    )


def decoding_greedy(temperature) -> bool:
    """A concrete temperature of 0 selects the static greedy mode."""
    return not isinstance(temperature, jax.core.Tracer) and float(temperature) == 0.0


# ----------------------------------------------------------------------------- baselines


@functools.partial(jax.jit, static_argnames=("lm_cfg", "layer"))
def _caa(lm_params, pos, pos_len, neg, neg_len, *, lm_cfg, layer):
    def mean_last(tok, ln):
        h = nn.run_layers(
            lm_params,
            lm_cfg,
            nn.embed(lm_params, lm_cfg, tok),
            jnp.broadcast_to(jnp.arange(tok.shape[1], dtype=jnp.int32), tok.shape),
            stop=layer + 1,
        ).h
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
      ValueError: ``layer`` outside ``[0, n_layers)``; lengths outside ``[1, T]``.
    """
    layer = _validate.python_int(layer, name="layer")
    if not 0 <= layer < lm_cfg.n_layers:
        raise ValueError(f"`layer` must lie in [0, {lm_cfg.n_layers}), got {layer}.")
    pos, pos_len = _check_tokens(lm_cfg, positive, positive_len)
    neg, neg_len = _check_tokens(lm_cfg, negative, negative_len)
    return _caa(lm_params, pos, pos_len, neg, neg_len, lm_cfg=lm_cfg, layer=layer)


def steer_add(
    vector: Float[ArrayLike, " D"], scale: float | Array, *, layer: int
) -> nn.Interventions:
    """``nn.Interventions`` adding ``scale * vector`` after block ``layer`` (every token).

    ``scale`` is traced: a sweep over scales reuses one compiled generator. Pass the
    result as ``interventions=`` to ``nn.apply`` / ``decoding.ar_generate`` / ... .
    """
    v = jnp.asarray(vector)
    _validate.floating(v, name="vector")
    _validate.ndim(v, 1, name="vector")
    _validate.real_scalar(scale, name="scale")
    return nn.Interventions({_validate.python_int(layer, name="layer"): scale * v})


@jax.jit
def _prefix(prompt, prompt_len, prefix):
    b, p = prompt.shape
    k = prefix.shape[0]
    return jnp.concatenate([jnp.broadcast_to(prefix, (b, k)), prompt], axis=1), prompt_len + k


def prefix_prompts(
    prompt: Int[ArrayLike, "B P"], prompt_len: Int[ArrayLike, " B"], prefix: Int[ArrayLike, " K"]
) -> tuple[Int[Array, "B K+P"], Int[Array, " B"]]:
    """Prepend a fixed token pattern (e.g. a refusal system prompt) to every prompt.

    Returns ``(prompts [B, K+P], prompt_len + K)`` (right padding kept).
    """
    prompt, prompt_len, prefix = (jnp.asarray(x) for x in (prompt, prompt_len, prefix))
    _validate.integer(prompt, name="prompt")
    _validate.ndim(prompt, 2, name="prompt")
    _validate.integer(prefix, name="prefix")
    _validate.ndim(prefix, 1, name="prefix")
    _validate.shape(prompt_len, (prompt.shape[0],), name="prompt_len")
    return _prefix(prompt.astype(jnp.int32), prompt_len.astype(jnp.int32), prefix.astype(jnp.int32))
