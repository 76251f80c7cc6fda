"""The confidence-aware gate of TESS [R for the architecture, C for its supervision].

For primitive k, features ``φ_k = [margin, self-consistency, parse rate, entropy,
label embedding]`` with a pooled history embedding give ``g_k = σ(MLP_k(φ_k))``; the gate
is trained by BCE against ``gate_target = 1[pred_label == oracle_label]`` (train windows).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate
from jaxkit.timeseries._extract import N_CONF_FEATURES
from jaxkit.timeseries._schema import Schema, check_schema


def check_labels(label_ids, sizes: tuple[int, ...], *, name: str = "label_ids"):
    """``label_ids [..., K]`` integer, guarded so an id outside ``[0, |C_k|)`` raises."""
    _validate.integer(label_ids, name=name)  # before jnp.asarray (a string names none)
    label_ids = jnp.asarray(label_ids)
    if label_ids.ndim < 1 or label_ids.shape[-1] != len(sizes):
        raise TypeError(f"`{name}` must have last axis {len(sizes)}, got shape {label_ids.shape}.")
    bad = jnp.any(label_ids < 0)
    for k, s in enumerate(sizes):
        bad = bad | jnp.any(label_ids[..., k] >= s)
    msg = f"`{name}` holds an unknown primitive label (ids must lie in [0, {list(sizes)}))."
    return label_ids + _validate.error_if(jnp.zeros((), label_ids.dtype), bad, msg)


def check_item(label_ids, conf, k: int) -> None:
    """One item's ``label_ids int[K]`` and ``conf float[K, 4]`` (dtypes, shapes: tracers pass).

    The modules' unbatched ``__call__`` check, before any ``jnp`` op (a string names its
    argument); :func:`check_labels` is the batched functions'.
    """
    _validate.integer(label_ids, name="label_ids")
    _validate.shape(label_ids, (k,), name="label_ids")
    _validate.floating(conf, name="conf")
    _validate.shape(conf, (k, N_CONF_FEATURES), name="conf")


def lookup(table, ids):
    """``table[k, ids[k]]`` for ``table [K, C, E]`` and ``ids [K]``.

    A one-hot contraction, so it keeps the batch sharding of ``ids`` under ``vmap``.
    """
    onehot = jax.nn.one_hot(ids, table.shape[1], dtype=table.dtype)
    return jnp.einsum("kc,kce->ke", onehot, table)


@functools.partial(jax.jit, static_argnames=("k", "c", "embed", "fin", "width", "dtype"))
def _init_gate(key, *, k, c, embed, fin, width, dtype):
    ks = jax.random.split(key, 3)
    return (
        (0.5 * jax.random.normal(ks[0], (k, c, embed))).astype(dtype),
        (jax.random.normal(ks[1], (k, fin, width)) / fin**0.5).astype(dtype),
        jnp.zeros((k, width), dtype),
        (jax.random.normal(ks[2], (k, width)) / width**0.5).astype(dtype),
        jnp.zeros((k,), dtype),
    )


class ConfidenceGate(eqx.Module):
    """Per-primitive gate MLPs (one hidden layer, stacked over the K primitives).

    Unbatched: ``gate(label_ids [K], conf [K, 4], context [D]) -> logits [K]``.
    """

    label_table: Array  # [K, Cmax, E]
    w1: Array  # [K, 4 + E + D, W]
    b1: Array  # [K, W]
    w2: Array  # [K, W]
    b2: Array  # [K]
    sizes: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        schema: Schema,
        context_dim: int,
        *,
        width: int = 32,
        embed: int = 8,
        key: jax.Array,
        dtype=jnp.float32,
    ):
        schema = check_schema(schema)
        context_dim = _validate.python_int(context_dim, name="context_dim", minimum=1)
        width = _validate.python_int(width, name="width", minimum=1)
        embed = _validate.python_int(embed, name="embed", minimum=1)
        _validate.is_key(key)
        k, c = len(schema.primitives), max(schema.sizes)
        fin = N_CONF_FEATURES + embed + context_dim
        self.sizes = schema.sizes
        self.label_table, self.w1, self.b1, self.w2, self.b2 = _init_gate(
            key, k=k, c=c, embed=embed, fin=fin, width=width, dtype=jnp.dtype(dtype)
        )

    def __call__(
        self,
        label_ids: Int[ArrayLike, " K"],
        conf: Float[ArrayLike, "K F"],
        context: Float[ArrayLike, " D"],
    ) -> Float[Array, " K"]:
        """Gate logits ``[K]`` (apply ``jax.nn.sigmoid`` for the gate values).

        Unbatched (``jax.vmap`` it over a batch).

        Raises:
          TypeError: ``label_ids`` not an integer ``[K]`` array, ``conf`` not a floating
            ``[K, 4]`` array, ``context`` not a floating ``[D]`` array (``D`` the gate's
            ``context_dim``).
          ValueError: a ``label_ids`` entry outside ``[0, |C_k|)`` (traced: under ``jit``).
        """
        check_item(label_ids, conf, len(self.sizes))
        _validate.floating(context, name="context")
        d = self.w1.shape[1] - N_CONF_FEATURES - self.label_table.shape[2]
        _validate.shape(context, (d,), name="context")
        label_ids = check_labels(label_ids, self.sizes)  # one_hot of a bad id gives zeros
        return self._logits(label_ids, conf, context)

    def _logits(self, label_ids, conf, context):
        """:meth:`__call__` on checked arguments (:class:`TESSForecaster` checks its own)."""
        k = len(self.sizes)
        dt = self.w1.dtype
        emb = lookup(self.label_table, label_ids)
        ctx = jnp.broadcast_to(jnp.asarray(context, dt)[None], (k, context.shape[-1]))
        phi = jnp.concatenate([jnp.asarray(conf, dt), emb, ctx], -1)
        h = jax.nn.gelu(jnp.einsum("kf,kfw->kw", phi, self.w1) + self.b1)
        return jnp.einsum("kw,kw->k", h, self.w2) + self.b2


def gate_targets(
    pred_ids: Int[ArrayLike, "N K"], oracle_ids: Int[ArrayLike, "N K"]
) -> Int[Array, "N K"]:
    """Gate supervision ``1[pred == oracle]`` as int32 [C].

    The ids are compared only for equality (any integers; no schema is read here).
    """
    _validate.integer(pred_ids, name="pred_ids")  # before jnp.asarray: a str names it
    _validate.integer(oracle_ids, name="oracle_ids")
    pred_ids, oracle_ids = jnp.asarray(pred_ids), jnp.asarray(oracle_ids)
    _validate.same_shape(pred_ids=pred_ids, oracle_ids=oracle_ids)
    return (pred_ids == oracle_ids).astype(jnp.int32)
