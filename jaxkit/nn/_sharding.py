"""PartitionSpecs for tensor-parallel sharding of the transformer parameters and cache."""

from jax.sharding import PartitionSpec as P

from jaxkit import _validate
from jaxkit.nn._cache import KVCache
from jaxkit.nn._config import TransformerConfig


def param_specs(
    cfg: TransformerConfig, *, model_axis: str = "model", per_layer: bool = False
) -> dict:
    """PartitionSpecs matching :func:`jaxkit.nn.init_params`, Megatron-style.

    q/k/v projections and the SwiGLU gate/up are split on their output (heads /
    hidden) axis, ``wo`` and ``w_down`` on their input axis, the embedding on the
    vocabulary axis and the LM head on its output (vocabulary) axis; norms are
    replicated. The leading stacked-layer axis is never sharded.

    Args:
      cfg: Model configuration.
      model_axis: Mesh axis name used for tensor parallelism.
      per_layer: Specs for per-layer parameters (:func:`jaxkit.nn.unstack_layers`):
        ``layers`` a tuple of one dict per block, without the layer axis.

    Returns:
      A dict pytree of ``PartitionSpec`` with the structure of the parameters.
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    _check_axis(model_axis, "model_axis")
    _check_bool(per_layer)
    m = model_axis
    col, row = P(None, None, m), P(None, m, None)
    layers = {
        "attn_norm": P(),
        "wq": col,
        "wk": col,
        "wv": col,
        "wo": row,
        "mlp_norm": P(),
        "w_gate": col,
        "w_up": col,
        "w_down": row,
    }
    if cfg.qkv_bias:
        layers.update(bq=P(None, m), bk=P(None, m), bv=P(None, m))
    if cfg.qk_norm:
        layers.update(q_norm=P(), k_norm=P())
    if per_layer:
        layers = tuple({k: P(*s[1:]) for k, s in layers.items()} for _ in range(cfg.n_layers))
    specs = {"embed": P(m, None), "layers": layers, "final_norm": P()}
    if not cfg.tie_embeddings:
        specs["lm_head"] = P(None, m)
    return specs


def cache_specs(
    cfg: TransformerConfig,
    *,
    data_axis: str = "data",
    model_axis: str = "model",
    per_layer: bool = False,
) -> KVCache:
    """PartitionSpecs for a :class:`KVCache`: batch on ``data``, kv-heads on ``model``.

    ``per_layer``: specs for a per-layer cache (a tuple of one spec per block).
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"`cfg` must be a TransformerConfig, got {type(cfg).__name__}.")
    _check_axis(data_axis, "data_axis")
    _check_axis(model_axis, "model_axis")
    _check_bool(per_layer)
    if per_layer:
        kv = (P(data_axis, None, model_axis, None),) * cfg.n_layers
    else:
        kv = P(None, data_axis, None, model_axis, None)
    return KVCache(k=kv, v=kv, length=P(data_axis))


def _check_bool(per_layer) -> None:
    _validate.flags(per_layer=per_layer)


def _check_axis(axis, name: str) -> None:
    """TypeError unless ``axis`` is a mesh axis name, a tuple of them, or None."""
    names = axis if isinstance(axis, tuple) else (axis,)
    if axis is not None and not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"`{name}` must be a mesh axis name (str), a tuple of names or None, got {axis!r}."
        )
