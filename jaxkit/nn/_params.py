"""Parameters of the transformer backbone: random initialisation and layout checks.

Also the argument checks shared by the forward and decode modules.
Parameters are a plain dict pytree with the per-layer weights stacked on a leading
``n_layers`` axis (weights ``[in, out]``), or per-layer (:func:`unstack_layers`: a tuple of
one dict per block), which every forward takes too.
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, PyTree

from jaxkit import _validate
from jaxkit.nn._cache import KVCache, capacity, check_layout, per_layer, stack_kv, unstack_kv
from jaxkit.nn._config import TransformerConfig
from jaxkit.nn._init import normal_pieces


def check_cfg(cfg) -> None:
    """TypeError unless ``cfg`` is a :class:`TransformerConfig`."""
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")


def check_params(params, cfg) -> None:
    """TypeError unless ``params`` has :func:`init_params`'s layout for ``cfg``."""
    if not isinstance(params, dict) or "embed" not in params or "layers" not in params:
        raise TypeError(
            "`params` must be the dict returned by `init_params` "
            "(keys 'embed', 'layers', 'final_norm'[, 'lm_head'])."
        )
    e = params["embed"]
    if tuple(jnp.shape(e)) != (cfg.vocab_size, cfg.d_model):
        raise TypeError(
            f"`params['embed']` must have shape ({cfg.vocab_size}, "
            f"{cfg.d_model}), got shape {tuple(jnp.shape(e))}."
        )
    layers = params["layers"]
    if isinstance(layers, (tuple, list)):  # per-layer storage (`unstack_layers`)
        if len(layers) != cfg.n_layers:
            raise TypeError(
                f"`params['layers']` must hold {cfg.n_layers} per-layer dicts, got {len(layers)}."
            )
        for i, lp in enumerate(layers):
            if not isinstance(lp, dict) or jnp.ndim(lp.get("wq")) != 2:
                raise TypeError(
                    f"`params['layers'][{i}]` must be one block's dict of weights "
                    "(as `unstack_layers` returns: 'wq' of shape [D, H*Dh], ...)."
                )
        return
    if not isinstance(layers, dict) or "wq" not in layers:
        raise TypeError(
            "`params['layers']` must be a dict of stacked weights or a tuple of per-layer "
            f"dicts, got {type(layers).__name__}."
        )
    nl = jnp.shape(layers["wq"])[0]
    if nl != cfg.n_layers:
        raise TypeError(f"`params['layers']` must stack {cfg.n_layers} layers, got {nl}.")


def per_layer_params(params) -> bool:
    """Whether ``params["layers"]`` is per-layer storage (a tuple of block dicts)."""
    return isinstance(params["layers"], (tuple, list))


def layer_params(params, layer: int) -> dict:
    """Block ``layer``'s weights: a slice of the stacked layout, or its own dict."""
    if per_layer_params(params):
        return params["layers"][layer]
    return jax.tree.map(lambda a: a[layer], params["layers"])


def _checked_layers(params, name: str):
    if not isinstance(params, dict) or "layers" not in params:
        raise TypeError(f"`params` must be a parameter dict with a 'layers' entry ({name}).")
    return params["layers"]


def unstack_layers(params: PyTree) -> PyTree:
    """The same parameters (or :class:`KVCache`) with one entry per block: per-layer storage.

    ``params["layers"]`` becomes a tuple of ``n_layers`` dicts (each weight without the
    leading layer axis); every other entry is kept as it is. Given a :class:`KVCache`, its
    ``k`` and ``v`` become tuples of ``[B, S, Hkv, Dh]`` buffers (as ``init_cache(...,
    per_layer=True)`` builds). Every ``nn`` forward (:func:`apply`, :func:`run_layers`,
    :func:`prefill`, :func:`decode_step`, :func:`write_kv`) and the decoders built on them
    take either layout of each and compute the same values (bit for bit on CPU);
    :func:`prefill` returns its cache in the parameters' layout.

    What it is for: XLA:CPU copies a block's slice of a stacked array before each product
    that reads it. A program holding one decode step (``jax.jit(decode_step)`` called from
    a Python loop) copies every block's weights on every call (in a compiled loop these
    copies are hoisted out), and every step copies each block's K/V slice of a stacked
    cache, in loops too. Per-layer storage has nothing to slice (measured on CPU, docs:
    ``nn``, "Per-layer storage": one jitted step at ``d_model`` 512, 8 blocks 5x less
    time; a 16-token decode loop at 512 cached tokens 1.46x). Costs: every block is
    inlined in the program (no layer scan), so deep models compile longer; keep the
    parameters and the cache in the same layout (stacked weights with a per-layer cache
    keep their weight slices inside loops). ``param_specs`` / ``cache_specs`` take
    ``per_layer=True``; LoRA ``targets`` match the per-layer leaf paths (``layers/0/wq``);
    the HF export stacks by itself; :func:`stack_layers` goes back.

    Works eagerly and under ``jit``; each block's arrays keep the input's sharding of
    their other axes.

    Args:
      params: Parameters in the stacked layout of :func:`init_params`, or a
        :class:`KVCache` (per-layer ones are returned as they are).

    Returns:
      The parameters with ``layers`` a tuple of per-block dicts, or the per-layer cache.

    Raises:
      TypeError: ``params`` is neither an ``nn`` parameter dict nor a :class:`KVCache`.
    """
    if isinstance(params, KVCache):
        return unstack_kv(params)
    layers = _checked_layers(params, "unstack_layers")
    if isinstance(layers, (tuple, list)):
        return {**params, "layers": tuple(layers)}
    if not isinstance(layers, dict) or "wq" not in layers:
        raise TypeError("`params['layers']` must be a dict of stacked weights.")
    n = jnp.shape(layers["wq"])[0]
    return {**params, "layers": tuple(jax.tree.map(lambda a, i=i: a[i], layers) for i in range(n))}


def stack_layers(params: PyTree) -> PyTree:
    """The inverse of :func:`unstack_layers`: ``layers`` (or a cache) stacked on a leading axis.

    Stacked parameters and caches are returned as they are. Works eagerly and under ``jit``.

    Args:
      params: Parameters with per-layer or stacked ``layers``, or a :class:`KVCache`.

    Returns:
      The parameters in :func:`init_params`'s layout, or the stacked cache.

    Raises:
      TypeError: ``params`` is neither an ``nn`` parameter dict nor a :class:`KVCache`, or
        its blocks differ in structure.
    """
    if isinstance(params, KVCache):
        return stack_kv(params)
    layers = _checked_layers(params, "stack_layers")
    if not isinstance(layers, (tuple, list)):
        return params
    if not layers or any(not isinstance(lp, dict) for lp in layers):
        raise TypeError("`params['layers']` must be a non-empty tuple of per-layer dicts.")
    if any(set(lp) != set(layers[0]) for lp in layers):
        raise TypeError("`params['layers']`: every block must hold the same weights.")
    return {**params, "layers": jax.tree.map(lambda *a: jnp.stack(a), *layers)}


OVERFLOW = ("error", "drop")


def guard(x, pred, msg: str) -> Array:
    """``x`` guarded by ``pred`` (ValueError eagerly, ``eqx.error_if`` under ``jit``).

    The traced check runs on a zero scalar added to ``x``, so ``x`` keeps its
    sharding (an ``error_if`` on a sharded array gathers it to one device). Eagerly
    ``x`` is returned as it is once ``pred`` is known to be False.
    """
    x = jnp.asarray(x)
    if not isinstance(x, jax.core.Tracer) and not isinstance(pred, jax.core.Tracer):
        return _validate.error_if(x, pred, msg)
    return x + _validate.error_if(jnp.zeros((), x.dtype), pred, msg)


def guard_tokens(
    tokens, cfg: TransformerConfig, *, name: str = "tokens", ndim: int | None = None
) -> Array:
    """Integer ``tokens`` guarded so that an id outside ``[0, V)`` raises.

    ValueError eagerly, an ``eqx.error_if`` error under ``jit``; then, with ``ndim``, a
    TypeError unless ``tokens`` has that rank.
    """
    _validate.integer(tokens, name=name)  # before jnp.asarray (a string names none)
    tokens = jnp.asarray(tokens)
    v = cfg.vocab_size
    bad = _validate.any_outside(tokens, 0, v - 1)
    tokens = guard(tokens, bad, f"`{name}` must hold token ids in [0, {v}).")
    if ndim is not None:
        _validate.ndim(tokens, ndim, name=name)
    return tokens


def check_overflow(overflow) -> None:
    """ValueError unless ``overflow`` is ``"error"`` or ``"drop"`` (TypeError if not a str)."""
    _validate.one_of(OVERFLOW, overflow=overflow)


def check_cache(cache, cfg: TransformerConfig, b: int, t: int, overflow: str) -> KVCache:
    """Check the cache layout; with ``overflow="error"`` guard that the T new rows fit.

    The layout itself (:func:`jaxkit.nn._cache.check_layout`: a ``KVCache``, ``k`` and ``v``
    alike, an integer ``length [B]``) first, then its fit to ``cfg`` and ``b`` rows: a buffer
    of the wrong shape (e.g. a batch of ``b = 0`` rows against a cache of one) is a
    ``TypeError`` naming ``cache`` (the public argument) and the field. The overflow guard
    also rejects a negative ``length`` (``"error"`` only: ``"drop"``, which the decode loops
    use on caches they build, adds no runtime check).
    """
    if isinstance(cache, KVCache) and per_layer(cache):
        v = cache.v
        if not isinstance(v, (tuple, list)) or not len(cache.k) == len(v) == cfg.n_layers:
            got = len(v) if isinstance(v, (tuple, list)) else type(v).__name__
            raise TypeError(
                f"a per-layer `cache` must hold {cfg.n_layers} K and V buffers (tuples), got "
                f"{len(cache.k)} and {got}."
            )
    check_layout(cache)

    def fits(x, want, name):
        try:
            _validate.shape(x, want, name=name)
        except TypeError as e:
            raise TypeError(f"`cache` does not fit `cfg` and a batch of {b}: {e}") from None

    k0 = cache.k[0] if per_layer(cache) else cache.k
    lead = () if per_layer(cache) else (cfg.n_layers,)
    fits(
        k0,
        (*lead, b, None, cfg.n_kv_heads, cfg.head_dim),
        name="cache.k[0]" if lead == () else "cache.k",
    )
    fits(cache.length, (b,), name="cache.length")
    if overflow == "error":
        s = capacity(cache)
        cache = guard_length(
            cache,
            s - t,
            f": writing {t} new row(s) past it overflows the cache (capacity {s}); pass "
            "`overflow='drop'` to drop the rows past the end.",
        )
    return cache


def guard_length(cache: KVCache, hi: int, why: str = ".") -> KVCache:
    """``cache`` with its ``length`` guarded to ``[0, hi]`` (:func:`guard`).

    ``why`` ends the message "`cache.length` must lie in [0, hi]".
    """
    bad = _validate.any_outside(cache.length, 0, hi)
    msg = f"`cache.length` must lie in [0, {hi}]{why}"
    return cache._replace(length=guard(cache.length, bad, msg))


def check_range(start, stop, collect, cfg):
    stop = cfg.n_layers if stop is None else stop
    _validate.python_int(start, name="start")
    _validate.python_int(stop, name="stop")
    if not 0 <= start <= stop <= cfg.n_layers:
        raise ValueError(
            f"`start`/`stop` must satisfy 0 <= start <= stop <= "
            f"{cfg.n_layers}, got start={start}, stop={stop}."
        )
    collect = tuple(sorted({int(c) for c in collect}))
    for c in collect:
        if not start <= c < stop:
            raise ValueError(f"`collect` entries must lie in [{start}, {stop}), got {c}.")
    return stop, collect


def check_mask(attn_mask, b, t, s):
    if attn_mask is None:
        return None
    _validate.boolean(attn_mask, name="attn_mask")
    mask = jnp.asarray(attn_mask)
    _validate.shape(mask, (b, t, s), name="attn_mask")
    return mask


def check_inputs(cfg, b, t, positions, cache, attn_mask, overflow):
    """Check ``positions`` (or None), ``cache`` (guarding overflow) and ``attn_mask``."""
    if positions is not None:
        _validate.integer(positions, name="positions")  # before jnp.asarray: a string
        positions = jnp.asarray(positions)
        _validate.shape(positions, (b, t), name="positions")
    if cache is not None:
        cache = check_cache(cache, cfg, b, t, overflow)
    mask = check_mask(attn_mask, b, t, t if cache is None else capacity(cache))
    return positions, cache, mask


def check_h(h, cfg, name):
    _validate.floating(h, name=name)  # before jnp.asarray (a string names none)
    h = jnp.asarray(h)
    _validate.ndim(h, 3, name=name)
    if h.shape[-1] != cfg.d_model:
        raise TypeError(f"`{name}` must have last axis {cfg.d_model}, got shape {h.shape}.")
    return h


def param_shapes(cfg: TransformerConfig) -> dict:
    """The shapes of :func:`init_params`'s pytree (a dict of tuples, same structure).

    Layer weights are ``[in, out]`` and stacked on a leading ``n_layers`` axis.
    """
    check_cfg(cfg)
    L, D, F, V = cfg.n_layers, cfg.d_model, cfg.mlp_dim, cfg.vocab_size
    q, kv, dh = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.head_dim
    layers = {
        "attn_norm": (L, D),
        "wq": (L, D, q),
        "wk": (L, D, kv),
        "wv": (L, D, kv),
        "wo": (L, q, D),
        "mlp_norm": (L, D),
        "w_gate": (L, D, F),
        "w_up": (L, D, F),
        "w_down": (L, F, D),
    }
    if cfg.qkv_bias:
        layers.update(bq=(L, q), bk=(L, kv), bv=(L, kv))
    if cfg.qk_norm:
        layers.update(q_norm=(L, dh), k_norm=(L, dh))
    out = {"embed": (V, D), "layers": layers, "final_norm": (D,)}
    if not cfg.tie_embeddings:
        out["lm_head"] = (D, V)
    return out


_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


@functools.partial(jax.jit, static_argnames=("cfg", "dtype"))
def _init_params(key, *, cfg, dtype):
    shapes = param_shapes(cfg)
    ls = shapes["layers"]
    head = shapes.get("lm_head", (0,))
    # One draw, in this order (fan-in = the input axis; embeddings unit variance).
    d = shapes["embed"][1]
    specs = [(ls[k], ls[k][1]) for k in _WEIGHTS] + [(shapes["embed"], 1.0), (head, d)]
    drawn = normal_pieces(key, specs, dtype)
    layers = dict(zip(_WEIGHTS, drawn[: len(_WEIGHTS)], strict=True))
    for k, shp in ls.items():
        if k not in layers:  # norms 1, biases 0
            layers[k] = (jnp.zeros if k.startswith("b") else jnp.ones)(shp, dtype)
    params = {
        "embed": drawn[-2],
        "layers": layers,
        "final_norm": jnp.ones(shapes["final_norm"], dtype),
    }
    if not cfg.tie_embeddings:
        params["lm_head"] = drawn[-1]
    return params


def init_params(cfg: TransformerConfig, *, key: jax.Array, dtype=jnp.float32) -> dict:
    """Random parameters (normal, std ``1/sqrt(fan_in)``; norms 1; biases 0).

    Jitted like jax.numpy (module level, ``cfg`` and ``dtype`` static).

    Args:
      cfg: Model configuration.
      key: A typed key from ``jax.random.key`` (legacy uint32 keys accepted).
      dtype: Floating dtype of every parameter.

    Returns:
      ``{"embed": [V,D], "layers": {...stacked [L,...]}, "final_norm": [D],
      "lm_head": [D,V]}`` (no ``lm_head`` when ``cfg.tie_embeddings``); weights
      are ``[in, out]``.
    """
    check_cfg(cfg)
    _validate.is_key(key)
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {jnp.dtype(dtype)}.")
    return _init_params(key, cfg=cfg, dtype=jnp.dtype(dtype))
