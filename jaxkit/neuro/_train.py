"""Training FacRNN and its baselines: every optimiser step in one jitted ``lax.scan``."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._optim import optax_update
from jaxkit._typing import KeyArray, RealScalarLike
from jaxkit.neuro import _loss
from jaxkit.neuro._model import LowRankRNN


class FitResult(NamedTuple):
    """Result of :func:`fit`.

    Attributes:
      model: The trained :class:`LowRankRNN`.
      loss: ``[steps]`` minibatch loss per step.
      pc: ``[steps]`` minibatch PC estimate per step.
    """

    model: LowRankRNN
    loss: Float[Array, " steps"]
    pc: Float[Array, " steps"]


def _batch(key, s, batch_size):
    if batch_size >= s:
        return jnp.arange(s)
    return jax.random.permutation(key, s)[:batch_size]


def make_step(batch_size: int):
    """The one training step (module-level construction, reused by the bench's loop)."""

    def step(carry, i, *, data, hp):
        model, opt_state = carry
        x_prev, x_next, u, key = data
        beta, alpha, lr, wd, bin_width = hp[:5]
        if len(hp) > 5:  # linear warm-up of beta over the first `warmup` steps (0: none)
            one = jnp.ones((), beta.dtype)
            ramp = (i + 1).astype(beta.dtype) / jnp.maximum(hp[5], one)
            beta = beta * jnp.minimum(one, ramp)
        kb, kz = jax.random.split(jax.random.fold_in(key, i))
        seq = model.encoder == "bigru"  # whole sequences [R, T, N]; PC on `batch_size` steps
        s = x_prev.shape[0] * x_prev.shape[1] if seq else x_prev.shape[0]
        idx = _batch(kb, s, batch_size)
        n_total = jnp.asarray(s, beta.dtype)

        def f(mdl):
            if seq:
                return _loss._loss(
                    mdl, x_prev, x_next, u, kz, n_total, beta, alpha, bin_width, rows=idx
                )
            ub = None if u is None else u[idx]
            return _loss._loss(
                mdl, x_prev[idx], x_next[idx], ub, kz, n_total, beta, alpha, bin_width
            )

        (loss, aux), g = jax.value_and_grad(f, has_aux=True)(model)
        model, opt_state = optax_update(optax.adamw(lr, weight_decay=wd), g, opt_state, model)
        return (model, opt_state), (loss, aux.pc)

    return step


def _fit(model, x_prev, x_next, u, key, beta, alpha, lr, wd, bin_width, warmup, steps, batch_size):
    opt = optax.adamw(lr, weight_decay=wd)
    step = make_step(batch_size)
    data = (x_prev, x_next, u, key)
    hp = (beta, alpha, lr, wd, bin_width, warmup)
    (model, _), (loss, pc) = jax.lax.scan(
        lambda c, i: step(c, i, data=data, hp=hp), (model, opt.init(model)), jnp.arange(steps)
    )
    return FitResult(model, loss, pc)


_fit_jit = jax.jit(_fit, static_argnames=("steps", "batch_size"))


def fit(
    model: LowRankRNN,
    x_prev: Float[ArrayLike, "s *w n"],
    x_next: Float[ArrayLike, "s *t n"],
    *,
    key: KeyArray,
    steps: int,
    batch_size: int = 128,
    beta: RealScalarLike = 0.0,
    alpha: RealScalarLike = 0.0,
    learning_rate: RealScalarLike = 1e-3,
    weight_decay: RealScalarLike = 1e-2,
    bin_width: RealScalarLike = 1.0,
    beta_warmup: RealScalarLike = 0,
    u: Float[ArrayLike, "s *t n"] | None = None,
) -> FitResult:
    """Train a :class:`LowRankRNN` with :func:`facrnn_loss` and AdamW, all steps scanned.

    The ``S`` training pairs ``(x_prev[s], x_next[s])`` (read-in at ``t - 1``,
    observation at ``t``) are the whole training set: ``n_total = S`` sets the posterior
    width and the PC importance weights. Each step draws a minibatch of ``batch_size``
    rows without replacement (the full set when ``batch_size >= S``). With the
    bidirectional-GRU encoder (``encoder="bigru"``) the data are whole sequences
    ``[R, T, N]`` (or ``[T, N]``): every step runs the encoder over all of them
    (reconstruction and KL to the dynamics prior averaged over all ``S = R T`` steps) and
    the PC term takes ``batch_size`` of the ``S`` steps drawn uniformly without
    replacement (see :func:`facrnn_loss`). The whole run is
    one jitted ``lax.scan`` (``steps`` and ``batch_size`` static; ``beta``, ``alpha``,
    the learning rate, weight decay and bin width traced, so a sweep or ``jax.vmap`` over
    them does not recompile). Use :func:`preset` for FacRNN/lrRNN/bdRNN settings.

    Args:
      model: Initial model (its ``n_groups`` and ``obs`` choose the penalty groups and
        the likelihood).
      x_prev: Read-in activity ``[S, N]`` (GRU encoder: causal windows ``[S, W, N]``;
        bidirectional GRU: the encoder's input sequences ``[R, T, N]`` or ``[T, N]``).
      x_next: Observations one step later ``[S, N]`` (bidirectional GRU: the
        observations at the same steps, ``x_prev``'s shape).
      key: PRNG key (minibatches and reparameterised draws).
      steps: Optimiser steps ``>= 1``.
      batch_size: Minibatch size ``>= 2``.
      beta: PC weight ``>= 0``.
      alpha: Off-block penalty weight ``>= 0``.
      learning_rate: AdamW learning rate ``> 0``.
      weight_decay: AdamW decoupled weight decay ``>= 0``.
      bin_width: Poisson bin width ``> 0``.
      beta_warmup: Steps over which the PC weight ramps linearly from ``beta / warmup``
        to ``beta`` (``0``: constant ``beta``, the authors' schedule). Traced, ``>= 0``.
      u: Optional read-out input ``[S, N]`` (bidirectional GRU: ``x_prev``'s shape).

    Returns:
      :class:`FitResult` (trained model, per-step loss and PC).

    Raises:
      TypeError: If the data do not match the model.
      ValueError: If ``steps < 1``, ``batch_size < 2``, ``S < 2`` or a hyperparameter is
        out of range.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> m = LowRankRNN(4, 2, key=jax.random.key(0))
      >>> x = jax.random.normal(jax.random.key(1), (32, 4))
      >>> res = fit(m, x[:-1], x[1:], key=jax.random.key(2), steps=3, batch_size=8)
      >>> res.loss.shape
      (3,)
    """
    s = _loss._check_data(model, x_prev, x_next, u)
    if s < 2:
        raise ValueError(f"`x_prev` must hold S >= 2 training pairs, got S = {s}.")
    _validate.is_key(key)
    steps = _validate.python_int(steps, name="steps", minimum=1)
    batch_size = _validate.python_int(batch_size, name="batch_size", minimum=2)
    x_prev = _loss._hparams(jnp.asarray(x_prev), beta, alpha, bin_width)
    x_prev = _validate.guard_positive(x_prev, learning_rate, name="learning_rate")
    x_prev = _validate.guard_non_negative(x_prev, weight_decay, name="weight_decay")
    x_prev = _validate.guard_non_negative(x_prev, beta_warmup, name="beta_warmup")
    u = None if u is None else jnp.asarray(u)
    x_prev, x_next, u = (_loss._as_trials(model, v) for v in (x_prev, jnp.asarray(x_next), u))
    dt = model.A.dtype
    hp = [
        jnp.asarray(v, dt)
        for v in (beta, alpha, learning_rate, weight_decay, bin_width, beta_warmup)
    ]
    return _fit_jit(model, x_prev, x_next, u, key, *hp, steps=steps, batch_size=batch_size)
