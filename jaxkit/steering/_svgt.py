"""SVGT: a value module and bridge tokens around a frozen causal LM (``jaxkit.nn``).

The value module reads the backbone's block-``l`` hidden states, scores harm in its
own value space, takes one Newton step of the score onto the decision boundary and
turns it into K latent bridge tokens that are *inserted* after the prompt at block
``l`` (``nn.Interventions`` insertion): later blocks and later tokens attend to them
like to any position; no existing position and no backbone weight changes.

Two defects of the authors' code (Clervils/SVGT) are fixed here, not copied:

1. **Positions.** Its training loader gives the response tokens the *gapped*
   positions ``M + K ..`` in every block, but its recompute generator runs the blocks
   ``<= l`` with ungapped positions. Here every path (training forward, cached and
   recompute generation) uses the gapped positions: the prompt at ``0..M-1``, the
   bridge at ``M..M+K-1``, the response from ``M+K``.
2. **Cache refresh.** Its cached refresh writes ``k_proj(bridge)``/``v_proj(bridge)``
   into every block above ``l``, skipping each block's input norm and the blocks in
   between, so the refreshed K/V are not what a forward would give. Here
   :func:`refresh_bridge` recomputes them exactly, by a K-token chunk forward of the
   bridge through blocks ``l+1..N-1`` over the cached prompt.

Reference: Stable Value Guidance Transformer (SVGT), ICML 2026; code Clervils/SVGT
(read to learn only).
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate, nn
from jaxkit._tokens import check_interventions
from jaxkit.steering._modules import BridgeVLP, Discriminator, ValueEncoder


class SVGTConfig(NamedTuple):
    """SVGT settings (static).

    Attributes:
      layer: Block ``l`` after which the bridge is inserted (0-based; the value
        module reads block ``l``'s output).
      n_bridge: K bridge tokens.
      value_dim: d_v (even).
      n_heads: Heads of the value encoder (divides d_v).
      n_value_layers: Self-attention layers of the value encoder.
      dropout: Dropout rate of the value encoder (training only: with a key).
      vlp_heads: Heads of the bridge generator's attention (divides D).
      grad_step: eta of the value correction (a Newton step; 1 lands on s = 0).
      pooling: ``"last"`` (last valid token) or ``"attention"`` (a learned
        attention-pooling query) in the value encoder.
      refresh_every: R: generation refreshes the bridge every R steps from the
        current token (0: never, a static bridge built from the prompt).
      ema: beta of the refresh ``b <- beta b + (1 - beta) b_new`` in ``[0, 1]``.
    """

    layer: int
    n_bridge: int = 5
    value_dim: int = 128
    n_heads: int = 4
    n_value_layers: int = 2
    dropout: float = 0.1
    vlp_heads: int = 4
    grad_step: float = 1.0
    pooling: str = "last"
    refresh_every: int = 0
    ema: float = 0.8


class SVGTParams(NamedTuple):
    """The trainable value side (the backbone is never part of it)."""

    encoder: ValueEncoder
    disc: Discriminator
    bridge: BridgeVLP


def check_config(lm_cfg: nn.TransformerConfig, cfg: SVGTConfig, *, upper: bool = False) -> None:
    """TypeError/ValueError for a bad config (``upper``: block ``l+1`` must exist)."""
    if not isinstance(cfg, SVGTConfig):
        raise TypeError(f"`cfg` must be an SVGTConfig, got {type(cfg).__name__}.")
    if not isinstance(lm_cfg, nn.TransformerConfig):
        raise TypeError(f"`lm_cfg` must be an nn.TransformerConfig, got {type(lm_cfg).__name__}.")
    layer = _validate.python_int(cfg.layer, name="layer")
    hi = lm_cfg.n_layers - 1 if upper else lm_cfg.n_layers
    if not 0 <= layer < hi:
        raise ValueError(f"`layer` must lie in [0, {hi}), got {layer}.")
    # the fields are named bare (`n_heads`), as the SVGTConfig(...) keywords a user wrote
    _validate.python_int(cfg.n_bridge, name="n_bridge", minimum=1)
    dv = _validate.python_int(cfg.value_dim, name="value_dim", minimum=2)
    _validate.python_int(cfg.n_heads, name="n_heads", minimum=1)
    _validate.python_int(cfg.n_value_layers, name="n_value_layers", minimum=0)
    _validate.python_int(cfg.vlp_heads, name="vlp_heads", minimum=1)
    _validate.finite_scalar(grad_step=cfg.grad_step)
    if dv % 2 or dv % cfg.n_heads:
        raise ValueError(f"`value_dim`={dv} must be even and divisible by n_heads.")
    if lm_cfg.d_model % cfg.vlp_heads:
        raise ValueError(f"`vlp_heads`={cfg.vlp_heads} must divide d_model.")
    _validate.in_interval(low=0, high=1, closed="left", dropout=cfg.dropout)
    _validate.one_of(("last", "attention"), pooling=cfg.pooling)
    _validate.python_int(cfg.refresh_every, name="refresh_every", minimum=0)
    _validate.in_interval(low=0, high=1, closed="both", ema=cfg.ema)


def init_svgt(lm_cfg: nn.TransformerConfig, cfg: SVGTConfig, *, key) -> SVGTParams:
    """Fresh value-side parameters (f32) for a backbone of width ``lm_cfg.d_model``."""
    check_config(lm_cfg, cfg)
    _validate.is_key(key)
    k1, k2, k3 = jax.random.split(key, 3)
    d, dv = lm_cfg.d_model, cfg.value_dim
    enc = ValueEncoder(
        d,
        dv,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_value_layers,
        dropout=cfg.dropout,
        key=k1,
        pooling=cfg.pooling,
    )
    return SVGTParams(
        enc, Discriminator(dv, key=k2), BridgeVLP(d, dv, cfg.n_bridge, cfg.vlp_heads, key=k3)
    )


def _value_correction(disc, z, step):
    def one(zi):
        s, g = jax.value_and_grad(disc)(zi)
        return -jax.nn.relu(s) * g / (jnp.sum(g * g) + 1e-8) * step

    return jax.lax.stop_gradient(jax.vmap(one)(z))


value_correction_core = jax.jit(_value_correction)


def value_correction(
    disc: eqx.Module, z: Float[ArrayLike, "B dv"], step: float | Array = 1.0
) -> Float[Array, "B dv"]:
    """``dz = -relu(s(z)) grad s / (||grad s||^2 + 1e-8) * step`` (detached).

    ``disc``: a :class:`Discriminator` or any equinox module mapping one ``z [d_v]``
    to a scalar score.

    One Newton step of the score onto the decision boundary ``s = 0``: exactly zero
    where ``s(z) <= 0`` (already safe); large ``s`` gives a large step (the bridge's
    gate and norm regulariser bound its effect).

    Raises:
      TypeError: ``z`` not a float ``[B, d_v]`` array.
      ValueError: a NaN or infinite ``step`` (traced: under ``jit``).
    """
    _validate.floating(z, name="z")  # before jnp.asarray (a string names no argument)
    z = jnp.asarray(z)
    _validate.ndim(z, 2, name="z")
    _validate.real(step, name="step")
    z = _validate.guard_finite(z, step, name="step")
    return value_correction_core(disc, z, step)


def _insert(h, bridge, prompt_len):
    b, t, _ = h.shape
    k = bridge.shape[1]
    j = jnp.arange(t + k, dtype=jnp.int32)[None, :]
    m = prompt_len.astype(jnp.int32)[:, None]
    in_bridge = (j >= m) & (j < m + k)
    src = jnp.where(j < m, j, j - k)
    hh = jnp.take_along_axis(h, jnp.clip(src, 0, t - 1)[:, :, None], axis=1)
    bb = jnp.take_along_axis(bridge, jnp.clip(j - m, 0, k - 1)[:, :, None], axis=1)
    out = jnp.where(in_bridge[:, :, None], bb.astype(h.dtype), hh)
    return out, jnp.broadcast_to(j, (b, t + k))


insert_bridge_core = jax.jit(_insert)


def insert_bridge(
    h: Float[ArrayLike, "B T D"],
    bridge: Float[ArrayLike, "B K D"],
    prompt_len: Int[ArrayLike, " B"],
) -> tuple[Float[Array, "B T+K D"], Int[Array, "B T+K"]]:
    """``[h_prompt (M_b) ; bridge (K) ; h_rest]`` per row, and positions ``arange(T+K)``.

    A per-row gather (``j < M_b -> j``, ``M_b <= j < M_b+K -> bridge[j-M_b]``, else
    ``j - K``); with the gapped convention the expanded positions are ``arange``.

    Raises:
      TypeError: shapes that disagree; a non-floating ``h`` or ``bridge``, a non-integer
        ``prompt_len``.
      ValueError: a ``prompt_len`` outside ``[0, T]`` (traced: under ``jit``).
    """
    _validate.floating(h, name="h")  # before jnp.asarray (a string names no argument)
    _validate.floating(bridge, name="bridge")
    _validate.integer(prompt_len, name="prompt_len")
    h, bridge, prompt_len = jnp.asarray(h), jnp.asarray(bridge), jnp.asarray(prompt_len)
    _validate.ndim(h, 3, name="h")
    _validate.shape(bridge, (h.shape[0], None, h.shape[2]), name="bridge")
    _validate.shape(prompt_len, (h.shape[0],), name="prompt_len")
    t = h.shape[1]
    bad = _validate.any_outside(prompt_len, 0, t)
    prompt_len = _validate.error_if(prompt_len, bad, f"`prompt_len` must lie in [0, {t}].")
    return insert_bridge_core(h, bridge, prompt_len)


def gapped_positions(prompt_len: Array, t: int, k: int) -> Array:
    """Positions of a sequence without its bridge: ``j`` before ``M_b``, ``j + K`` after."""
    j = jnp.arange(t, dtype=jnp.int32)[None, :]
    return jnp.where(j < prompt_len[:, None], j, j + k)


def lower_pass(lm_params, lm_cfg, tokens, positions, layer, *, cache=None, interventions=None):
    """The frozen backbone's lower pass: embed ``tokens``, run blocks ``0..layer``.

    The one place SVGT, its training, its generators and CAA read block-``layer``
    hidden states (``nn.LayersOutput``; ``.h`` is ``[B, T, D]``). With ``cache`` the
    rows go to slots ``cache.length + arange(T)`` of blocks ``0..layer`` (rows past
    the capacity are dropped: the generators size their caches).
    """
    h = nn.embed(lm_params, lm_cfg, tokens)
    return nn.run_layers(
        lm_params,
        lm_cfg,
        h,
        positions,
        stop=layer + 1,
        cache=cache,
        interventions=interventions,
        overflow="drop",
    )


def make_bridge(vp: SVGTParams, cfg: SVGTConfig, h_l, prompt_len, key=None, mask=None):
    """Bridge ``[B, K, D]`` from block-``l`` hidden states of the prompts (traced).

    The trigger is row ``prompt_len - 1`` (the last prompt token, or the current
    token in a refresh); the value encoder reads ``h_l`` under ``mask`` (default:
    ``j < prompt_len``).
    """
    t = h_l.shape[1]
    pmask = jnp.arange(t)[None, :] < prompt_len[:, None] if mask is None else mask
    h_trig = jnp.take_along_axis(h_l, (prompt_len - 1)[:, None, None], axis=1)
    z = vp.encoder.trigger(h_l, pmask, key=key)
    dz = _value_correction(vp.disc, z, cfg.grad_step)
    return vp.bridge(h_trig, dz), h_trig


class SVGTForward(NamedTuple):
    """Output of :func:`svgt_forward`.

    Attributes:
      logits: ``[B, T+K, V]`` on the expanded sequence (prompt, bridge, rest).
      bridge: ``[B, K, D]``.
      h_trig: ``[B, 1, D]`` block-``l`` hidden of each row's last prompt token.
      hidden: ``[B, T+K, D]`` block-``l+1`` output after insertion (zeros when
        ``l`` is the last block).
    """

    logits: Array
    bridge: Array
    h_trig: Array
    hidden: Array


def edited_bridge(bridge, iv, layer, dtype):
    """The bridge as the stream after block ``layer`` holds it: ``+ iv.add[layer]``.

    ``nn.Interventions``' order at a block: the insertion, then the edit, so the user's
    edit at the bridge's block acts on the bridge rows too (``[D]`` or ``[B, D]``).
    """
    bridge = bridge.astype(dtype)
    return bridge if iv is None else iv.add_to(layer, bridge)


def _forward(lm_params, vp, tokens, prompt_len, key, *, lm_cfg, cfg, iv=None):
    lm_params = jax.lax.stop_gradient(lm_params)  # frozen backbone
    t = tokens.shape[1]
    k, layer = cfg.n_bridge, cfg.layer
    pos = gapped_positions(prompt_len, t, k)
    h = lower_pass(lm_params, lm_cfg, tokens, pos, layer, interventions=iv).h
    bridge, h_trig = make_bridge(vp, cfg, h, prompt_len, key)
    hx, posx = _insert(h, edited_bridge(bridge, iv, layer, h.dtype), prompt_len)
    collect = (layer + 1,) if layer + 1 < lm_cfg.n_layers else ()
    up = nn.run_layers(
        lm_params, lm_cfg, hx, posx, start=layer + 1, collect=collect, interventions=iv
    )
    hid = up.hidden.get(layer + 1, jnp.zeros_like(hx))
    return SVGTForward(nn.unembed(lm_params, lm_cfg, up.h), bridge, h_trig, hid)


svgt_forward_core = jax.jit(_forward, static_argnames=("lm_cfg", "cfg"))


def _check_tokens(lm_cfg, tokens, prompt_len, *, name="tokens", len_name="prompt_len"):
    """``int[B, T]`` rows and their lengths in ``[1, T]``; messages use the public names."""
    if not isinstance(tokens, jax.core.Tracer) and not isinstance(prompt_len, jax.core.Tracer):
        return _check_tokens_host(lm_cfg, tokens, prompt_len, name=name, len_name=len_name)
    tokens, prompt_len = jnp.asarray(tokens), jnp.asarray(prompt_len)
    _validate.token_rows(tokens, prompt_len, name=name, lengths_name=len_name)
    t = tokens.shape[1]
    bad = _validate.any_outside(prompt_len, 1, t)
    prompt_len = _validate.error_if(prompt_len, bad, f"`{len_name}` must lie in [1, {t}].")
    bad = jnp.any((tokens < 0) | (tokens >= lm_cfg.vocab_size))
    tokens = _validate.error_if(tokens, bad, f"`{name}` holds ids outside [0, vocab_size).")
    return tokens.astype(jnp.int32), prompt_len.astype(jnp.int32)


def _as_int32(x, host: np.ndarray) -> Array:
    """``x`` as an int32 device array without an eager program (a host cast if needed)."""
    if isinstance(x, jax.Array) and x.dtype == jnp.int32:
        return x
    return jnp.asarray(host.astype(np.int32))


def _check_tokens_host(lm_cfg, tokens, prompt_len, *, name, len_name):
    """:func:`_check_tokens` for concrete inputs: the same checks in NumPy on the host."""
    tok, pl = np.asarray(tokens), np.asarray(prompt_len)  # dtype checks canonicalize
    _validate.token_rows(tok, pl, name=name, lengths_name=len_name)
    t = tok.shape[1]
    if np.any((pl < 1) | (pl > t)):
        raise ValueError(f"`{len_name}` must lie in [1, {t}].")
    if np.any((tok < 0) | (tok >= lm_cfg.vocab_size)):
        raise ValueError(f"`{name}` holds ids outside [0, vocab_size).")
    return _as_int32(tokens, tok), _as_int32(prompt_len, pl)


def svgt_forward(
    lm_params,
    lm_cfg: nn.TransformerConfig,
    vparams: SVGTParams,
    cfg: SVGTConfig,
    tokens: Int[ArrayLike, "B T"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    key=None,
    interventions: nn.Interventions | None = None,
) -> SVGTForward:
    """The training forward: blocks ``<= l`` at gapped positions, bridge, blocks ``> l``.

    ``tokens`` are ``[prompt ; response]`` right-padded (no bridge slots); the
    prompt's block-``l`` hidden feeds the value module; the bridge is inserted after
    the prompt; the upper blocks run on the expanded sequence at positions
    ``arange(T+K)``. The backbone is frozen (``stop_gradient``). Jitted at module
    level (configs static).

    ``interventions`` (other residual edits, e.g. a CAA vector: teacher-forced
    perplexity under SVGT and CAA together) act as in :func:`svgt_generate`: at every
    position, the bridge being the block-``l`` insertion (edits at blocks ``<= l``
    change what the value module reads; an edit at block ``l`` reaches the bridge rows).

    Args:
      lm_params: The frozen backbone's parameters (``jaxkit.nn`` layout).
      lm_cfg: The backbone's config.
      vparams: The value side (:class:`SVGTParams`).
      cfg: Its :class:`SVGTConfig`.
      tokens: ``int[B, T]``.
      prompt_len: ``int[B]`` in ``[1, T]``.
      key: Dropout key of the value module (None: no dropout).
      interventions: Optional :class:`~jaxkit.nn.Interventions` of additive edits
        (``[D]`` or ``[B, D]`` per block); no insertion, no read sites.

    Returns:
      :class:`SVGTForward`; the response token at original index ``j >= M`` is
      predicted by ``logits[:, j + K - 1]`` (the first one by the last bridge slot).

    Raises:
      TypeError / ValueError: bad shapes, ids, ``cfg.layer`` out of range; a ``key`` that
        is not a key; ``interventions`` as in :func:`svgt_generate`.
    """
    check_config(lm_cfg, cfg)
    tokens, prompt_len = _check_tokens(lm_cfg, tokens, prompt_len)
    if key is not None:
        _validate.is_key(key)
    iv = check_interventions(
        interventions, lm_cfg, tokens.shape[0], span_owner="svgt_forward", where="here"
    )
    return svgt_forward_core(
        lm_params, vparams, tokens, prompt_len, key, lm_cfg=lm_cfg, cfg=cfg, iv=iv
    )


def _refresh(lm_params, cache, bridge, prompt_len, *, lm_cfg, layer):
    k = bridge.shape[1]
    pos = prompt_len[:, None] + jnp.arange(k, dtype=jnp.int32)[None, :]
    at = cache._replace(length=prompt_len)  # write the K rows at slots M..M+K-1
    out = nn.run_layers(lm_params, lm_cfg, bridge, pos, start=layer + 1, cache=at)
    return out.cache._replace(length=cache.length)


refresh_core = jax.jit(_refresh, static_argnames=("lm_cfg", "layer"))


def refresh_bridge(
    lm_params,
    lm_cfg: nn.TransformerConfig,
    cache: nn.KVCache,
    bridge: Float[ArrayLike, "B K D"],
    prompt_len: Int[ArrayLike, " B"],
    *,
    layer: int,
) -> nn.KVCache:
    """Exact cache refresh: the bridge's K/V in blocks ``> layer`` from a chunk forward.

    Runs the K bridge rows through blocks ``layer+1..N-1`` at positions and slots
    ``M..M+K-1`` over the cached prompt (causal among themselves), the K/V a full
    forward gives. (The authors' refresh projects the raw bridge with each block's
    k/v weights, skipping norms and blocks: not reproduced.) Blocks ``<= layer`` and
    ``length`` are unchanged.

    Raises:
      ValueError: ``layer`` out of range; a ``prompt_len`` outside ``[0, S - K]`` (a
        negative one, or a prompt plus bridge longer than the cache's capacity S;
        traced: under ``jit``).
      TypeError: a non-floating ``bridge`` or one of the wrong shape; a ``prompt_len`` that
        is not an integer ``[B]`` array; ``cache`` not a ``KVCache`` with integer ``[B]``
        lengths.
      ValueError: a ``cache.length`` outside ``[0, S]`` (traced: under ``jit``).
    """
    if not isinstance(cache, nn.KVCache):
        raise TypeError(f"`cache` must be a jaxkit.nn.KVCache, got {type(cache).__name__}.")
    _validate.integer(cache.length, name="cache.length")
    _validate.ndim(cache.length, 1, name="cache.length")  # [B]: sizes prompt_len, bridge
    _validate.floating(bridge, name="bridge")  # before jnp.asarray (a string names none)
    _validate.integer(prompt_len, name="prompt_len")
    bridge, prompt_len = jnp.asarray(bridge), jnp.asarray(prompt_len)
    _validate.shape(prompt_len, (cache.length.shape[0],), name="prompt_len")
    prompt_len = prompt_len.astype(jnp.int32)
    layer = _validate.python_int(layer, name="layer")
    if not 0 <= layer < lm_cfg.n_layers:
        raise ValueError(f"`layer` must lie in [0, {lm_cfg.n_layers}), got {layer}.")
    _validate.shape(bridge, (cache.length.shape[0], None, lm_cfg.d_model), name="bridge")
    cap, k = cache.capacity, bridge.shape[1]
    bad = _validate.any_outside(prompt_len, 0, cap - k)
    msg = (
        f"`prompt_len` must lie in [0, {cap - k}] (the prompt plus {k} bridge rows within "
        f"`cache`'s capacity {cap})."
    )
    prompt_len = _validate.error_if(prompt_len, bad, msg)
    bad = _validate.any_outside(cache.length, 0, cap)
    msg = f"`cache.length` must lie in [0, {cap}] (the committed slots of the cache)."
    cache = cache._replace(length=_validate.error_if(cache.length, bad, msg))
    return refresh_core(lm_params, cache, bridge, prompt_len, lm_cfg=lm_cfg, layer=layer)
