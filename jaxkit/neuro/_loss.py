"""FacRNN's objective: reconstruction + KL + beta * PC (+ alpha * off-block penalty).

``loss = E[-ln p(x_t | z_t)] + E[KL(q(z_t | x_{t-1}) || N(0, I))] + beta PC
+ alpha mean((1 - blockdiag) * (B A))^2``. ``beta = 0, alpha = 0`` is the plain lrRNN,
``alpha > 0`` the block-diagonal bdRNN baseline, ``beta > 0`` FacRNN (``n_groups = K``:
FacRNN-full, i.e. a total-correlation penalty). Read from the authors' code (objective,
defaults) and re-derived; the Poisson likelihood is reconstructed [R].

With the bidirectional-GRU encoder (``encoder="bigru"``, reconstructed [R]) the loss runs on
whole sequences: ``q(z_t | x_{1:T}) = N(mu_t, sigma_q^2 I)`` and the KL is to the RNN's
dynamics prior ``p(z_t | z_{t-1}) = N(B tanh(A z_{t-1} + u_{t-1}) + b, diag sigma_z^2)``,
``p(z_1) = N(0, I)``: the analytic entropy of ``q`` minus a one-path Monte Carlo estimate of
``E_q[ln p(z_{1:T})]`` (Pals et al. 2024 style).
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.neuro import _pc
from jaxkit.neuro._model import LowRankRNN, _lead, posterior_log_std

_LOG_2PI = math.log(2.0 * math.pi)

PRESETS = {
    "facrnn": {"beta": 20.0, "alpha": 0.0},
    "lrrnn": {"beta": 0.0, "alpha": 0.0},
    "bdrnn": {"beta": 0.0, "alpha": 1.0},
}


def preset(name: str) -> dict[str, float]:
    """Hyperparameters of FacRNN and its baselines (the authors' synthetic defaults).

    ``"facrnn"``: ``beta = 20``; ``"lrrnn"``: ``beta = alpha = 0``; ``"bdrnn"``:
    ``alpha = 1`` (block-diagonal latent map). Pass as ``fit(..., **preset(name))``.

    Example:
      >>> preset("bdrnn")
      {'beta': 0.0, 'alpha': 1.0}
    """
    _validate.one_of(PRESETS, name=name)
    return dict(PRESETS[name])


class LossAux(NamedTuple):
    """Per-term values of :func:`facrnn_loss` (minibatch means)."""

    nll: Float[Array, ""]
    kl: Float[Array, ""]
    pc: Float[Array, ""]
    offblock: Float[Array, ""]


def _log_softplus(h):
    return jnp.where(h < -20.0, h, jnp.log(jax.nn.softplus(h)))


def _log_lik(model: LowRankRNN, z, x, u, bin_width):
    acc = accumulation_dtype(z.dtype)
    h = model.decode(z, u).astype(acc)
    x = x.astype(acc)
    if model.obs == "poisson":
        log_rate = jnp.log(jnp.asarray(bin_width, acc)) + _log_softplus(h)
        ll = x * log_rate - jnp.exp(log_rate) - jax.lax.lgamma(x + 1)
    else:
        ls = _lead(model.log_sigma_x.astype(acc), x.ndim)
        r = (x - h) * jnp.exp(-ls)
        ll = -0.5 * r * r - ls - 0.5 * _LOG_2PI
    return jnp.sum(ll, axis=-1)


def _offblock(A, B, n_groups):
    acc = accumulation_dtype(A.dtype)
    m = (B.astype(acc) @ A.astype(acc)).astype(acc)
    k = m.shape[0]
    gid = jnp.arange(k) // (k // n_groups)
    off = gid[:, None] != gid[None, :]
    return jnp.mean(jnp.where(off, m * m, 0)).astype(A.dtype)


def _prior_log_prob(model, z, u):
    """``ln p(z_{1:T})`` per trial under the dynamics prior: ``z`` ``[R, T, K]`` -> ``[R]``."""
    acc = z.dtype
    h = z[:, :-1] @ model.A.T.astype(acc)
    if u is not None:
        h = h + u[:, :-1].astype(acc)
    mean = jnp.tanh(h) @ model.B.T.astype(acc) + _lead(model.b.astype(acc), 3)
    ls = _lead(model.log_sigma_z.astype(acc), 3)
    r = (z[:, 1:] - mean) * jnp.exp(-ls)
    lp = jnp.sum(-0.5 * r * r - ls - 0.5 * _LOG_2PI, axis=(1, 2))
    return lp + jnp.sum(-0.5 * z[:, 0] ** 2 - 0.5 * _LOG_2PI, axis=-1)


def _seq_terms(model, seqs, obs, u, key, n_total, rows, bin_width):
    """Terms of the sequence path (``encoder="bigru"``) on ``seqs`` ``[R, T, N]``.

    The reconstruction and KL are means over all ``R T`` steps; ``(z, mu, log_std)`` are
    returned for the flat rows ``rows`` (all when ``None``), the PC term's samples.
    """
    acc = accumulation_dtype(seqs.dtype)
    r, t, _ = seqs.shape
    mu = model.encode(seqs.astype(model.A.dtype)).astype(acc)  # [R, T, K]
    k = mu.shape[-1]
    ls = posterior_log_std(n_total, k).astype(acc)
    z = mu + jnp.exp(ls) * jax.random.normal(key, mu.shape, acc)
    nll = -jnp.mean(_log_lik(model, z.astype(model.A.dtype), obs, u, bin_width))
    kl = -jnp.sum(_prior_log_prob(model, z, u)) / (r * t) - k * (ls + 0.5 * (1 + _LOG_2PI))
    if rows is not None:
        z, mu = z.reshape(r * t, k)[rows], mu.reshape(r * t, k)[rows]
    else:
        z, mu = z.reshape(r * t, k), mu.reshape(r * t, k)
    return nll, kl, z, mu, jnp.broadcast_to(ls, mu.shape)


def _step_terms(model, x_prev, x_next, u, key, n_total, bin_width):
    acc = accumulation_dtype(x_prev.dtype)
    mu = model.encode(x_prev.astype(model.A.dtype)).astype(acc)
    ls = jnp.broadcast_to(posterior_log_std(n_total, model.rank).astype(acc), mu.shape)
    z = mu + jnp.exp(ls) * jax.random.normal(key, mu.shape, acc)
    nll = -jnp.mean(_log_lik(model, z.astype(model.A.dtype), x_next, u, bin_width))
    return nll, jnp.mean(_pc._kl(mu, ls)), z, mu, ls


def _loss(model, x_prev, x_next, u, key, n_total, beta, alpha, bin_width, rows=None):
    acc = accumulation_dtype(x_prev.dtype)
    if model.encoder == "bigru":
        terms = _seq_terms(model, x_prev, x_next, u, key, n_total, rows, bin_width)
    else:
        terms = _step_terms(model, x_prev, x_next, u, key, n_total, bin_width)
    nll, kl, z, mu, ls = terms
    pc = _pc._pc_train(z, mu, ls, n_total, model.n_groups)
    off = _offblock(model.A, model.B, model.n_groups).astype(acc)
    loss = nll + kl + jnp.asarray(beta, acc) * pc + jnp.asarray(alpha, acc) * off
    dt = model.A.dtype
    return loss.astype(dt), LossAux(*(v.astype(dt) for v in (nll, kl, pc, off)))


_loss_jit = jax.jit(_loss)


def _check_data(model, x_prev, x_next, u, name_prev="x_prev"):
    """Check the data against the model; returns the number of samples (rows of ``z``)."""
    if not isinstance(model, LowRankRNN):
        raise TypeError(f"`model` must be a LowRankRNN, got {type(model).__name__}.")
    _validate.floating(x_prev, name=name_prev)
    shp = jnp.shape(x_prev)
    if model.encoder == "bigru":
        what = "sequences [T, N] or [R, T, N]"
        ok = len(shp) in (2, 3) and shp[-1] == model.n_neurons and shp[-2] >= 2
    else:
        what = "windows [M, W, N]" if model.encoder == "gru" else "[M, N]"
        ok = len(shp) == (3 if model.gru is not None else 2) and shp[-1] == model.n_neurons
    if not ok:
        raise TypeError(
            f"`{name_prev}` must be {what} with N = {model.n_neurons} neurons, got shape {shp}."
        )
    want = shp if model.encoder == "bigru" else (shp[0], shp[-1])
    _validate.shape(x_next, want, name="x_next")
    if u is not None:
        _validate.shape(u, want, name="u")
    return math.prod(shp[:-1]) if model.encoder == "bigru" else shp[0]


def _as_trials(model, v):
    """Sequences ``[T, N]`` -> ``[1, T, N]`` for the bigru path (others unchanged)."""
    if v is None or model.encoder != "bigru" or jnp.ndim(v) == 3:
        return v
    return jnp.asarray(v)[None]


def _hparams(x, beta, alpha, bin_width, n_total=None):
    x = _validate.guard_non_negative(x, beta, name="beta")
    x = _validate.guard_non_negative(x, alpha, name="alpha")
    x = _validate.guard_positive(x, bin_width, name="bin_width")
    if n_total is not None:
        x = _validate.guard_positive(x, n_total, name="n_total")
    return x


def facrnn_loss(
    model: LowRankRNN,
    x_prev: Float[ArrayLike, "m *w n"],
    x_next: Float[ArrayLike, "m *t n"],
    *,
    key: KeyArray,
    n_total: RealScalarLike,
    beta: RealScalarLike = 0.0,
    alpha: RealScalarLike = 0.0,
    bin_width: RealScalarLike = 1.0,
    u: Float[ArrayLike, "m *t n"] | None = None,
) -> tuple[Float[Array, ""], LossAux]:
    """FacRNN's minibatch loss and its terms.

    For each pair ``(x_{t-1}, x_t)`` of the minibatch: ``mu = B tanh(x_{t-1}) + b``,
    ``z = mu + sigma_q eps`` (``ln sigma_q = -ln(n_total)/(K+4)``), then
    ``-ln p(x_t | z) + KL(q || N(0, I)) + beta PC + alpha offblock`` averaged over the
    batch, with PC the minibatch estimator :func:`partial_correlation` over
    ``model.n_groups`` groups and ``offblock = mean((1 - blockdiag) * (B A))^2``. For
    ``obs="poisson"``, ``x_next`` holds spike counts and ``x_prev`` the smoothed
    counts (:func:`causal_smooth`); the rate is ``bin_width * softplus(A z + a + u)``.
    Jitted; ``beta``, ``alpha``, ``bin_width`` and ``n_total`` are traced.

    Bidirectional-GRU encoder (``encoder="bigru"``): ``x_prev`` holds whole sequences
    ``[R, T, N]`` (or one ``[T, N]``), the encoder's input, and ``x_next`` the observations
    at the same steps; ``mu_t`` comes from the whole sequence, the KL is to the dynamics
    prior (module docstring) and the reconstruction and KL are means over all ``M = R T``
    steps. Each step is one sample of the aggregate posterior
    ``q(z) = (1/n_total) sum_s q(z | x_{1:T}, s)``: its ``q`` is a fixed-width Gaussian
    whatever the encoder, so the PC estimator is the same formula over the ``M`` steps'
    ``(z_s, mu_s)`` with importance weights ``(n_total - 1)/(M - 1)``; it is exact for the
    mixture when ``M = n_total``. :func:`fit` passes every training sequence and draws
    ``batch_size`` of the ``R T`` steps uniformly without replacement for the PC term,
    which is the situation the weights assume (a minibatch of trials would not be).

    Args:
      model: The :class:`LowRankRNN`.
      x_prev: Read-in activity at ``t - 1``, ``[M, N]`` (GRU encoder: causal windows
        ``[M, W, N]`` ending at ``t - 1``, see :func:`lagged_windows`; bidirectional GRU:
        sequences ``[R, T, N]`` or ``[T, N]``).
      x_next: Observations at ``t``, ``[M, N]`` (bidirectional GRU: ``x_prev``'s shape).
      key: PRNG key for the reparameterised draw.
      n_total: Training-set size (sets ``sigma_q`` and the PC importance weights).
      beta: PC weight ``>= 0``.
      alpha: Off-block penalty weight ``>= 0``.
      bin_width: Poisson bin width ``> 0`` (ignored by Gaussian observations).
      u: Optional input added to the read-out, ``[M, N]`` (bidirectional GRU: ``x_prev``'s
        shape; it also drives the dynamics prior).

    Returns:
      ``(loss, LossAux(nll, kl, pc, offblock))``.

    Raises:
      TypeError: If ``model`` is not a LowRankRNN or the data shapes do not match it.
      ValueError: If ``M < 2`` or a hyperparameter is out of range (traced: at run time).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> m = LowRankRNN(4, 2, n_groups=2, key=jax.random.key(0))
      >>> x = jnp.ones((8, 4))
      >>> loss, aux = facrnn_loss(m, x, x, key=jax.random.key(1), n_total=100, beta=1.0)
      >>> loss.shape, aux.pc.shape
      ((), ())
    """
    m = _check_data(model, x_prev, x_next, u)
    if m < 2:
        raise ValueError(f"`x_prev` must hold M >= 2 samples, got M = {m}.")
    _validate.is_key(key)
    x_prev = _hparams(jnp.asarray(x_prev), beta, alpha, bin_width)
    _validate.real(n_total, name="n_total")
    nt = jnp.asarray(n_total)
    x_prev = _validate.error_if(
        x_prev, ~((nt >= m) & jnp.isfinite(nt)), f"`n_total` must be finite and >= M = {m}."
    )
    u = None if u is None else jnp.asarray(u)
    x_prev, x_next, u = (_as_trials(model, v) for v in (x_prev, jnp.asarray(x_next), u))
    return _loss_jit(model, x_prev, x_next, u, key, nt, beta, alpha, bin_width)


def _ll_core(model, z, x, u, bin_width):
    return _log_lik(model, z, x, u, bin_width).astype(z.dtype)


_ll_jit = jax.jit(_ll_core)


def observation_log_lik(
    model: LowRankRNN,
    z: Float[ArrayLike, "m k"],
    x: Float[ArrayLike, "m n"],
    *,
    bin_width: RealScalarLike = 1.0,
    u: Float[ArrayLike, "m n"] | None = None,
) -> Float[Array, " m"]:
    """``ln p(x | z)`` per row under the model's observation law. Jitted.

    Gaussian: ``sum_n ln N(x_n; decode(z)_n, sigma_x,n^2)``; Poisson:
    ``sum_n ln Poisson(x_n; bin_width softplus(decode(z)_n))``.

    Args:
      model: The :class:`LowRankRNN`.
      z: Latents ``[M, K]``.
      x: Observations ``[M, N]`` (counts for Poisson).
      bin_width: Poisson bin width ``> 0``.
      u: Optional read-out input ``[M, N]``.

    Returns:
      ``[M]`` log-likelihoods in ``z``'s dtype.

    Raises:
      TypeError: On shapes that do not match the model.
      ValueError: If ``bin_width`` is not finite and > 0.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> m = LowRankRNN(3, 2, key=jax.random.key(0))
      >>> observation_log_lik(m, jnp.zeros((2, 2)), jnp.zeros((2, 3))).shape
      (2,)
    """
    if not isinstance(model, LowRankRNN):
        raise TypeError(f"`model` must be a LowRankRNN, got {type(model).__name__}.")
    _validate.floating(z, name="z")
    _validate.ndim(z, 2, name="z")
    mb = jnp.shape(z)[0]
    _validate.shape(z, (mb, model.rank), name="z")
    _validate.shape(x, (mb, model.n_neurons), name="x")
    if u is not None:
        _validate.shape(u, (mb, model.n_neurons), name="u")
    z = _validate.guard_positive(jnp.asarray(z), bin_width, name="bin_width")
    x = jnp.asarray(x)
    if model.obs == "poisson":  # counts: a negative one is a NaN log-likelihood
        x = _validate.error_if(x, jnp.any(x < 0), "`x` must be >= 0 (Poisson counts).")
    u = None if u is None else jnp.asarray(u)
    return _ll_jit(model, z, x, u, bin_width)


def offblock_penalty(model: LowRankRNN) -> Float[Array, ""]:
    """BdRNN's penalty ``mean((1 - blockdiag) * (B A))^2`` over the ``K x K`` latent map.

    Zero iff the latent-to-latent map ``B A`` is block diagonal in ``model.n_groups``
    groups. Jitted.

    Example:
      >>> import jax
      >>> float(offblock_penalty(LowRankRNN(4, 2, n_groups=1, key=jax.random.key(0))))
      0.0
    """
    if not isinstance(model, LowRankRNN):
        raise TypeError(f"`model` must be a LowRankRNN, got {type(model).__name__}.")
    return _offblock_jit(model.A, model.B, model.n_groups)


_offblock_jit = jax.jit(_offblock, static_argnames=("n_groups",))
