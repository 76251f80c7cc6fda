"""The TESS forecaster (gated primitive prefix over PatchTST), its loss and training.

Prefix token k: ``e_k = g_k (E_k[label_k] + T_k)`` with a label table ``E_k`` and a type
embedding ``T_k`` [C for the design, R for the details]; ``g_k = σ(gate logit)`` from the
confidence gate, or a given gate (``gate=`` zeros gives PatchTST bit for bit, ones the
ungated prefix). Loss ``MSE(ŷ, y) + λ_gate · BCE(g, gate_target)`` (λ_gate = 0.1 [C]).
The model never receives the future window: its inputs are the history, the extracted
labels and their confidence features.
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate
from jaxkit._optim import check_opt_state
from jaxkit.timeseries._bow import BoWForecaster, check_bow
from jaxkit.timeseries._extract import N_CONF_FEATURES
from jaxkit.timeseries._gate import ConfidenceGate, check_item, check_labels, lookup
from jaxkit.timeseries._model import PatchTST, check_series, check_x
from jaxkit.timeseries._schema import Schema, check_schema


@functools.partial(jax.jit, static_argnames=("k", "c", "d", "dtype"))
def _init_prefix(key, *, k, c, d, dtype):
    k1, k2 = jax.random.split(key)
    return (
        jax.random.normal(k1, (k, c, d)).astype(dtype),
        (0.02 * jax.random.normal(k2, (k, d))).astype(dtype),
    )


class TESSForecaster(eqx.Module):
    """PatchTST plus K gated primitive prefix tokens (unbatched ``__call__``)."""

    backbone: PatchTST
    gate: ConfidenceGate
    label_table: Array  # [K, Cmax, D]
    type_emb: Array  # [K, D]
    sizes: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, backbone: PatchTST, schema: Schema, *, key: jax.Array, gate_width: int = 32):
        """Wrap ``backbone`` (its weights are shared, not copied) for ``schema``'s primitives."""
        if not isinstance(backbone, PatchTST):
            raise TypeError(f"`backbone` must be a PatchTST, got {type(backbone).__name__}.")
        schema = check_schema(schema)
        gate_width = _validate.python_int(gate_width, name="gate_width", minimum=1)
        _validate.is_key(key)
        k = jax.random.split(key, 3)
        d = backbone.pos.shape[-1]
        dt = backbone.pos.dtype
        nk, cmax = len(schema.primitives), max(schema.sizes)
        self.backbone = backbone
        self.gate = ConfidenceGate(schema, d, width=gate_width, key=k[0], dtype=dt)
        self.label_table, self.type_emb = _init_prefix(k[1], k=nk, c=cmax, d=d, dtype=dt)
        self.sizes = schema.sizes

    def __call__(
        self,
        x: Array,
        label_ids: Array,
        conf: Array,
        gate: Array | None = None,
        learned: Array | bool = True,
    ):
        """``x [L, C]``, ``label_ids [K]``, ``conf [K, 4]`` -> (``[H, C]``, gate logits ``[K]``).

        ``gate [K]`` (with ``learned`` False) replaces the learned gate values; ``learned``
        is a bool (a traced bool scalar under :func:`tess_forecast`). Unbatched (``jax.vmap``
        it, or use :func:`tess_forecast`).

        Raises:
          TypeError: ``x`` not a floating ``[L, C]`` array for the backbone, ``label_ids``
            not an integer ``[K]`` array, ``conf`` not a floating ``[K, 4]`` array, ``gate``
            not a floating ``[K]`` array, ``learned`` not a bool scalar.
          ValueError: a ``label_ids`` entry outside ``[0, |C_k|)`` (traced: under ``jit``).
        """
        bb = self.backbone
        k = len(self.sizes)
        check_series(bb, x)
        check_item(label_ids, conf, k)
        if gate is not None:
            _validate.floating(gate, name="gate")
            _validate.shape(gate, (k,), name="gate")
        _validate.boolean(learned, name="learned")
        _validate.ndim(learned, 0, name="learned")
        label_ids = check_labels(label_ids, self.sizes)  # one_hot of a bad id gives zeros
        z, stats = bb.embed(x)
        # the gate reads the pooled history embedding without shaping it (stop_gradient):
        # with the gate fixed at 0 the backbone then trains exactly as a PatchTST would
        logits = self.gate._logits(label_ids, conf, jax.lax.stop_gradient(jnp.mean(z, (0, 1))))
        g = jax.nn.sigmoid(logits)
        if gate is not None:
            g = jnp.where(learned, g, gate.astype(g.dtype))
        emb = lookup(self.label_table, label_ids)
        prefix = g[:, None] * (emb + self.type_emb)
        z = jax.vmap(lambda zc: bb.encode(zc, prefix, g))(z)
        return bb.head(z, stats), logits


class TESSOutput(NamedTuple):
    """``y_hat [B, H, C]`` and ``gate_logits [B, K]``."""

    y_hat: Array
    gate_logits: Array


def _check_x(model, x, name="x"):
    return check_x(model if isinstance(model, PatchTST) else model.backbone, x, name)


def _check_model(model, cls):
    if not isinstance(model, cls):
        raise TypeError(f"`model` must be a {cls.__name__}, got {type(model).__name__}.")


def _check_side(model, x, label_ids, conf, gate):
    b, k = x.shape[0], len(model.sizes)
    label_ids = check_labels(label_ids, model.sizes)
    _validate.shape(label_ids, (b, k), name="label_ids")
    _validate.floating(conf, name="conf")  # before jnp.asarray: a str names the argument
    conf = jnp.asarray(conf)
    _validate.shape(conf, (b, k, N_CONF_FEATURES), name="conf")
    conf = _validate.all_finite(conf, name="conf")
    if gate is not None:
        _validate.floating(gate, name="gate")
        gate = jnp.asarray(gate)
        _validate.shape(gate, (b, k), name="gate")
        gate = _validate.error_if(
            gate, ~jnp.all((gate >= 0) & (gate <= 1)), "`gate` must lie in [0, 1]."
        )
    return label_ids, conf, gate


@jax.jit
def _patchtst_jit(model, x):
    return jax.vmap(model)(x)


def patchtst_forecast(model: PatchTST, x: Float[ArrayLike, "B L C"]) -> Float[Array, "B H C"]:
    """Unimodal PatchTST forecasts ``[B, H, C]`` (jitted like jax.numpy).

    Raises:
      TypeError: ``model`` not a PatchTST; ``x`` not ``[B, L, C]`` for it.
      ValueError: NaN or inf in ``x``.
    """
    _check_model(model, PatchTST)
    return _patchtst_jit(model, _check_x(model, x))


def _fixed(gate, label_ids, dtype):
    """(gate values, learned?): a learned gate and a given one share one program."""
    if gate is None:
        return jnp.zeros_like(label_ids, dtype=dtype), jnp.asarray(True)
    return gate, jnp.asarray(False)


def _tess_core(model, x, label_ids, conf, gate, learned):
    y, lg = jax.vmap(lambda a, b, c, g: model(a, b, c, g, learned))(x, label_ids, conf, gate)
    return TESSOutput(y, lg)


_tess_jit = jax.jit(_tess_core)


def tess_forecast(
    model: TESSForecaster,
    x: Float[ArrayLike, "B L C"],
    label_ids: Int[ArrayLike, "B K"],
    conf: Float[ArrayLike, "B K F"],
    *,
    gate: Float[ArrayLike, "B K"] | None = None,
) -> TESSOutput:
    """TESS forecasts and gate logits (jitted like jax.numpy).

    Args:
      model: A :class:`TESSForecaster`.
      x: ``[B, L, C]`` histories.
      label_ids: ``int[B, K]`` extracted labels (ids within each primitive's label set).
      conf: ``[B, K, 4]`` confidence features (:func:`confidence_features`).
      gate: Optional ``[B, K]`` gate values in [0, 1] replacing the learned gate (zeros:
        the prefix is removed and the output equals the backbone PatchTST bit for bit).

    Returns:
      :class:`TESSOutput` ``(y_hat [B, H, C], gate_logits [B, K])``.

    Raises:
      TypeError: wrong types or shapes.
      ValueError: an unknown primitive label id, NaN/inf inputs, a gate outside [0, 1].
    """
    _check_model(model, TESSForecaster)
    x = _check_x(model, x)
    label_ids, conf, gate = _check_side(model, x, label_ids, conf, gate)
    return _tess_jit(model, x, label_ids, conf, *_fixed(gate, label_ids, x.dtype))


class TESSBatch(NamedTuple):
    """Training data of B windows.

    ``x [B, L, C]``, ``y [B, H, C]``, ``label_ids [B, K]``, ``conf [B, K, 4]``,
    ``gate_target [B, K]`` (0/1 of any real dtype; a float in ``[0, 1]`` is a soft BCE
    target) and, optionally, ``text [B, V]`` bag-of-words vectors
    (only the :class:`BoWForecaster` baseline reads them).
    """

    x: Array
    y: Array
    label_ids: Array
    conf: Array
    gate_target: Array
    text: Array | None = None


def _gate_bce(logits, target, balanced):
    """BCE with logits per primitive, averaged; ``balanced`` averages the two classes' means.

    Balanced: for primitive k, ``(mean_{t=1} BCE + mean_{t=0} BCE) / (#classes present)``,
    so the rarer class (usually the wrong labels) carries half the weight (spec §4.7).
    """
    t = target.astype(logits.dtype)
    ell = jax.nn.softplus(logits) - t * logits
    if not balanced:
        return jnp.mean(ell)
    n1, n0 = jnp.sum(t, 0), jnp.sum(1 - t, 0)
    m1 = jnp.sum(t * ell, 0) / jnp.maximum(n1, 1)
    m0 = jnp.sum((1 - t) * ell, 0) / jnp.maximum(n0, 1)
    present = (n1 > 0).astype(ell.dtype) + (n0 > 0).astype(ell.dtype)
    return jnp.mean((m1 + m0) / jnp.maximum(present, 1))


def _loss(model, batch, lambda_gate, gate, learned, balanced=False):
    if isinstance(model, PatchTST):
        y_hat = jax.vmap(model)(batch.x)
        mse = jnp.mean(jnp.square(y_hat - batch.y))
        zero = jnp.zeros((), mse.dtype)
        return mse, {"mse": mse, "bce": zero, "gate_mean": zero}
    if isinstance(model, BoWForecaster):
        y_hat = jax.vmap(model)(batch.x, batch.text)
        mse = jnp.mean(jnp.square(y_hat - batch.y))
        zero = jnp.zeros((), mse.dtype)
        return mse, {"mse": mse, "bce": zero, "gate_mean": jnp.ones((), mse.dtype)}
    out = _tess_core(model, batch.x, batch.label_ids, batch.conf, gate, learned)
    mse = jnp.mean(jnp.square(out.y_hat - batch.y))
    lg = out.gate_logits
    bce = _gate_bce(lg, batch.gate_target, balanced)
    g = jnp.where(learned, jax.nn.sigmoid(lg), gate.astype(lg.dtype))
    loss = mse + jnp.asarray(lambda_gate, mse.dtype) * bce
    return loss, {"mse": mse, "bce": bce, "gate_mean": jnp.mean(g)}


_loss_jit = jax.jit(_loss, static_argnames=("balanced",))


def _check_batch(model, batch, lambda_gate, gate, name="batch"):
    """Check a :class:`TESSBatch` argument called ``name`` (errors name ``name.field``)."""
    if not isinstance(batch, TESSBatch):
        raise TypeError(f"`{name}` must be a TESSBatch, got {type(batch).__name__}.")
    _check_model(model, PatchTST | TESSForecaster | BoWForecaster)
    x = _check_x(model, batch.x, f"{name}.x")
    _validate.nonempty(x, name=f"{name}.x")  # the mean losses of no window were NaN
    bb = model if isinstance(model, PatchTST) else model.backbone
    y = jnp.asarray(batch.y)
    _validate.floating(y, name=f"{name}.y")
    _validate.shape(y, (x.shape[0], bb.horizon, x.shape[2]), name=f"{name}.y")
    y = _validate.all_finite(y, name=f"{name}.y")
    _validate.real(lambda_gate, name="lambda_gate")
    x = _validate.guard_non_negative(x, lambda_gate, name="lambda_gate")
    if isinstance(model, PatchTST | BoWForecaster):
        if isinstance(model, BoWForecaster):
            if batch.text is None:
                raise TypeError(f"`{name}.text` (bag-of-words vectors) is required for BoW.")
            batch = batch._replace(text=check_bow(model, batch.text, x.shape[0], f"{name}.text"))
        return batch._replace(x=x, y=y), jnp.zeros((x.shape[0], 1), x.dtype), jnp.asarray(True)
    ids, conf, gate = _check_side(model, x, batch.label_ids, batch.conf, gate)
    tg = jnp.asarray(batch.gate_target)
    _validate.shape(tg, ids.shape, name=f"{name}.gate_target")
    bad = _validate.any_outside(tg, 0, 1) | _validate.any_nonfinite(tg)
    msg = f"`{name}.gate_target` must lie in [0, 1] (0/1 or soft BCE targets)."
    tg = _validate.error_if(tg, bad, msg)
    return (TESSBatch(x, y, ids, conf, tg, batch.text), *_fixed(gate, ids, x.dtype))


def _check_balanced(balanced_gate):
    _validate.flags(balanced_gate=balanced_gate)
    return balanced_gate


def tess_loss(
    model: PatchTST | TESSForecaster | BoWForecaster,
    batch: TESSBatch,
    *,
    lambda_gate: float | Array = 0.1,
    gate: Float[ArrayLike, "B K"] | None = None,
    balanced_gate: bool = False,
) -> tuple[Array, dict]:
    """``MSE(ŷ, y) + λ_gate · BCE(gate, gate_target)`` and its parts (jitted).

    A :class:`PatchTST` gives the unimodal MSE and a :class:`BoWForecaster` the
    bag-of-words fusion MSE (reading ``batch.text``; the BCE part is 0 for both), so one
    training routine serves the baselines and TESS on identical windows.
    ``balanced_gate`` (static) averages the BCE of correct and of wrong labels per
    primitive instead of over all labels: the rarer class (usually the wrong labels) then
    carries half the weight (spec §4.7, class imbalance); False is the authors' plain BCE.

    Returns:
      ``(loss, {"mse", "bce", "gate_mean"})``.

    Raises:
      TypeError: wrong types or shapes (an empty batch too); ``balanced_gate`` not a bool;
        ``batch.text`` missing for a :class:`BoWForecaster`.
      ValueError: NaN/inf data, ``lambda_gate < 0``, an unknown label id, a gate outside
        ``[0, 1]``.
    """
    batch, gate, learned = _check_batch(model, batch, lambda_gate, gate)
    balanced = _check_balanced(balanced_gate)
    return _loss_jit(model, batch, jnp.asarray(lambda_gate), gate, learned, balanced=balanced)


def _step(model, opt_state, batch, lambda_gate, gate, learned, optimizer, balanced=False):
    (loss, aux), grads = jax.value_and_grad(_loss, has_aux=True)(
        model, batch, lambda_gate, gate, learned, balanced
    )
    check_opt_state(optimizer, opt_state, model)
    updates, opt_state = optimizer.update(grads, opt_state, model)
    return optax.apply_updates(model, updates), opt_state, loss, aux


_step_jit = jax.jit(_step, static_argnames=("optimizer", "balanced"))


def tess_train_step(
    model: PatchTST | TESSForecaster | BoWForecaster,
    opt_state: optax.OptState,
    batch: TESSBatch,
    *,
    optimizer: optax.GradientTransformation,
    lambda_gate: float | Array = 0.1,
    gate: Float[ArrayLike, "B K"] | None = None,
    balanced_gate: bool = False,
):
    """One jitted optax step on :func:`tess_loss`.

    ``optimizer`` and ``balanced_gate`` are static, ``lambda_gate`` traced. Returns
    ``(model, opt_state, loss, aux)``. An ``opt_state`` that is not
    ``optimizer.init(model)``'s tree and shapes is a ``TypeError`` naming it.
    """
    batch, gate, learned = _check_batch(model, batch, lambda_gate, gate)
    balanced = _check_balanced(balanced_gate)
    return _step_jit(
        model,
        opt_state,
        batch,
        jnp.asarray(lambda_gate),
        gate,
        learned,
        optimizer=optimizer,
        balanced=balanced,
    )


@functools.partial(jax.jit, static_argnames=("optimizer", "steps", "batch_size", "balanced"))
def _fit(model, data, key, lambda_gate, gate, learned, *, optimizer, steps, batch_size, balanced):
    n = data.x.shape[0]

    def body(carry, k):
        m, s = carry
        idx = jax.random.choice(k, n, (batch_size,), replace=False)
        b = jax.tree.map(lambda a: a[idx], data)
        m, s, loss, _ = _step(m, s, b, lambda_gate, gate[idx], learned, optimizer, balanced)
        return (m, s), loss

    (model, _), losses = jax.lax.scan(
        body, (model, optimizer.init(model)), jax.random.split(key, steps)
    )
    return model, losses


def fit_forecaster(
    model: PatchTST | TESSForecaster | BoWForecaster,
    data: TESSBatch,
    *,
    key: jax.Array,
    optimizer: optax.GradientTransformation,
    steps: int,
    batch_size: int,
    lambda_gate: float | Array = 0.1,
    gate: Float[ArrayLike, "N K"] | None = None,
    balanced_gate: bool = False,
):
    """Train for ``steps`` minibatch steps as one ``lax.scan`` inside one jit.

    Returns ``(model, losses [steps])``. ``gate`` (optional, per window) fixes the gate
    (e.g. ones: the ungated prefix). ``model`` may be a :class:`PatchTST`, a
    :class:`TESSForecaster` or a :class:`BoWForecaster`; ``balanced_gate`` as in
    :func:`tess_loss`.
    """
    _validate.is_key(key)
    steps = _validate.python_int(steps, name="steps", minimum=1)
    batch_size = _validate.python_int(batch_size, name="batch_size", minimum=1)
    data, gate, learned = _check_batch(model, data, lambda_gate, gate, name="data")
    if batch_size > data.x.shape[0]:
        raise ValueError(f"`batch_size` must be <= {data.x.shape[0]} windows, got {batch_size}.")
    return _fit(
        model,
        data,
        key,
        jnp.asarray(lambda_gate),
        gate,
        learned,
        optimizer=optimizer,
        steps=steps,
        batch_size=batch_size,
        balanced=_check_balanced(balanced_gate),
    )
