"""The low-rank RNN as a VAE (FacRNN's model) and its connectivity.

Observed activity ``x_t in R^N``. Read-in (encoder):
``q(z_t | x_{t-1}) = N(B tanh(x_{t-1}) + b, sigma_q^2 I)`` with ``sigma_q`` fixed,
``ln sigma_q = -ln(N_tot)/(K + 4)`` (a Silverman-style bandwidth). Read-out (decoder):
``p(x_t | z_t) = N(A z_t + a + u_t, diag sigma_x^2)`` (``obs="gaussian"``), the same with a
ReLU on the mean (``"relu_gaussian"``, non-negative data) or, reconstructed [R],
``y_t ~ Poisson(dt * softplus(A z_t + a + u_t))`` on spike counts (``"poisson"``; the
encoder then reads causally smoothed counts, see :func:`causal_smooth`). The recurrent
connectivity is ``J = A B`` (rank ``K``), split into group sub-circuits
``J_g = A[:, g] B[g, :]`` over ``G`` equal contiguous latent groups.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.neuro._encoder import BiGRUEncoder, GRUEncoder

OBSERVATIONS = ("gaussian", "relu_gaussian", "poisson")
ENCODERS = ("linear", "gru", "bigru")


class LowRankRNN(eqx.Module):
    """A rank-``K`` RNN as a VAE over ``N`` neurons (unbatched parameters).

    Attributes:
      A: Read-out ``[N, K]``.
      B: Read-in ``[K, N]``.
      a: Read-out bias ``[N]``.
      b: Read-in bias ``[K]``.
      log_sigma_x: Per-neuron observation log standard deviation ``[N]`` (unused by the
        Poisson path).
      n_groups: Number of equal contiguous latent groups ``G`` (static).
      obs: Observation model, one of ``"gaussian"``, ``"relu_gaussian"``, ``"poisson"``
        (static).
      log_sigma_z: Log standard deviation of the dynamics prior ``[K]`` (``encoder=
        "bigru"``; initialised at 0, unused otherwise).
      gru: The amortised encoder, else ``None``. :class:`GRUEncoder` (``encoder="gru"``)
        replaces the read-in ``B tanh(.) + b`` (``B``, ``b`` stay unused) and ``encode``
        takes causal windows ``[..., W, N]`` (:func:`lagged_windows`).
        :class:`BiGRUEncoder` (``encoder="bigru"``) reads whole sequences ``[..., T, N]``
        and the prior becomes the RNN's own dynamics
        ``p(z_t | z_{t-1}) = N(B tanh(A z_{t-1} + u_{t-1}) + b, diag sigma_z^2)``,
        ``p(z_0) = N(0, I)`` (see :func:`facrnn_loss`), so ``J = A B`` stays the model's
        connectivity.
    """

    A: Float[Array, "n k"]
    B: Float[Array, "k n"]
    a: Float[Array, " n"]
    b: Float[Array, " k"]
    log_sigma_x: Float[Array, " n"]
    log_sigma_z: Float[Array, " k"]
    n_groups: int = eqx.field(static=True)
    obs: str = eqx.field(static=True)
    gru: GRUEncoder | BiGRUEncoder | None

    def __init__(
        self,
        n_neurons: int,
        rank: int,
        *,
        n_groups: int = 1,
        obs: str = "gaussian",
        encoder: str = "linear",
        hidden: int = 32,
        key: KeyArray,
        dtype=jnp.float32,
    ):
        """Initialise ``A, B ~ N(0, 1/fan_in)``, zero biases, ``log sigma_x = -1``.

        Args:
          n_neurons: ``N``.
          rank: Latent dimension ``K`` (the connectivity rank).
          n_groups: Number of latent groups ``G``; must divide ``K``.
          obs: Observation model.
          encoder: ``"linear"`` (the RNN read-in ``B tanh(x_{t-1}) + b``, the authors'),
            ``"gru"`` (amortised over a causal window, :class:`GRUEncoder`) or ``"bigru"``
            (bidirectional over the whole sequence with a dynamics prior,
            :class:`BiGRUEncoder`; the spec's spike-count path [R]).
          hidden: GRU hidden units (per direction for ``"bigru"``).
          key: PRNG key.
          dtype: Parameter dtype.

        Raises:
          TypeError: If sizes are not Python ints or ``key`` is not a key.
          ValueError: If a size is < 1, ``n_groups`` does not divide ``rank`` or ``obs`` or
            ``encoder`` is unknown.
        """
        n = _validate.python_int(n_neurons, name="n_neurons", minimum=1)
        k = _validate.python_int(rank, name="rank", minimum=1)
        g = _validate.python_int(n_groups, name="n_groups", minimum=1)
        if k % g:
            raise ValueError(f"`n_groups` must divide `rank` = {k}, got n_groups={g}.")
        _validate.one_of(OBSERVATIONS, obs=obs)
        _validate.one_of(ENCODERS, encoder=encoder)
        hidden = _validate.python_int(hidden, name="hidden", minimum=1)
        _validate.is_key(key)
        ka, kb = jax.random.split(key)
        self.A = jax.random.normal(ka, (n, k), dtype) / math.sqrt(k)
        self.B = jax.random.normal(kb, (k, n), dtype) / math.sqrt(n)
        self.a = jnp.zeros((n,), dtype)
        self.b = jnp.zeros((k,), dtype)
        self.log_sigma_x = jnp.full((n,), -1.0, dtype)
        self.log_sigma_z = jnp.zeros((k,), dtype)
        self.n_groups = g
        self.obs = obs
        kg = jax.random.fold_in(key, 2)
        enc = {"gru": GRUEncoder, "bigru": BiGRUEncoder}.get(encoder)
        self.gru = None if enc is None else enc(n, k, hidden=hidden, key=kg, dtype=dtype)

    @property
    def encoder(self) -> str:
        """``"linear"``, ``"gru"`` or ``"bigru"``."""
        if self.gru is None:
            return "linear"
        return "bigru" if isinstance(self.gru, BiGRUEncoder) else "gru"

    @property
    def rank(self) -> int:
        """The latent dimension ``K``."""
        return self.A.shape[1]

    @property
    def n_neurons(self) -> int:
        """The number of neurons ``N``."""
        return self.A.shape[0]

    def encode(self, x_prev: Float[Array, "..."]) -> Float[Array, "..."]:
        """Posterior mean of ``z_t``: the read-in ``B tanh(x_{t-1}) + b``, or the GRU's.

        ``x_prev`` is ``[..., N]`` (returns ``[..., K]``); with ``encoder="gru"`` it holds
        causal windows ``[..., W, N]``; with ``encoder="bigru"`` whole sequences
        ``[..., T, N]`` (returns ``[..., T, K]``: ``mu_t`` of ``q(z_t | x_{1:T})``).
        ``x_prev`` may carry leading batch axes.

        Raises:
          TypeError: ``x_prev`` not a floating array with last axis ``N`` of rank >= 1
            (>= 2 with a GRU encoder).
        """
        n = self.n_neurons
        axes = {"gru": "[..., W, N]", "bigru": "[..., T, N]"}.get(self.encoder, "[..., N]")
        _validate.floating(x_prev, name="x_prev")  # before any jnp op: a str names it
        shp = tuple(jnp.shape(x_prev))
        if len(shp) < (1 if self.gru is None else 2) or shp[-1] != n:
            raise TypeError(f"`x_prev` must have shape {axes} with N = {n}, got shape {shp}.")
        if self.gru is not None:
            return self.gru(x_prev)
        return jnp.tanh(x_prev) @ self.B.T + _lead(self.b, x_prev.ndim)

    def decode(
        self, z: Float[Array, "*batch k"], u: Float[Array, "*batch n"] | None = None
    ) -> Float[Array, "*batch n"]:
        """Read-out ``A z + a (+ u)``: the Gaussian mean (ReLU-ed for ``relu_gaussian``).

        For ``poisson`` it is the pre-activation: the rate is ``bin_width softplus(.)``.
        ``z`` may carry leading batch axes; ``u``, if given, has ``z``'s.

        Raises:
          TypeError: ``z`` not a floating ``[..., K]`` array, or ``u`` not a numeric
            ``[..., N]`` array with ``z``'s leading axes.
        """
        k, n = self.rank, self.n_neurons
        _validate.floating(z, name="z")  # before any jnp op: a str names the argument
        zs = tuple(jnp.shape(z))
        if len(zs) < 1 or zs[-1] != k:
            raise TypeError(f"`z` must have shape [..., K] with K = {k}, got shape {zs}.")
        if u is not None:
            _validate.numeric(u=u)
            _validate.shape(u, zs[:-1] + (n,), name="u")
        h = z @ self.A.T + _lead(self.a, z.ndim)
        if u is not None:
            h = h + u
        return jax.nn.relu(h) if self.obs == "relu_gaussian" else h


def _lead(v, ndim):
    """``v`` [d] reshaped to broadcast against a rank-``ndim`` array (explicit ranks)."""
    return v.reshape((1,) * (ndim - 1) + v.shape)


def posterior_log_std(n_total: RealScalarLike, rank: int) -> Array:
    """FacRNN's fixed posterior log standard deviation ``-ln(n_total)/(rank + 4)``.

    Args:
      n_total: Number of training samples.
      rank: Latent dimension ``K``.

    Returns:
      A scalar (f32, or f64 for an f64 ``n_total``).

    Raises:
      ValueError: ``n_total`` not finite and > 0 (traced: under ``jit``).

    Example:
      >>> round(float(posterior_log_std(1000, 6)), 4)
      -0.6908
    """
    _validate.real(n_total, name="n_total")
    rank = _validate.python_int(rank, name="rank", minimum=1)
    nt = jnp.asarray(n_total)
    nt = nt.astype(accumulation_dtype(nt.dtype))
    return _validate.guard_positive(-jnp.log(nt) / (rank + 4), n_total, name="n_total")


def _j(A, B):
    return A @ B


_j_jit = jax.jit(_j)


def connectivity(model: LowRankRNN) -> Float[Array, "n n"]:
    """The recurrent connectivity ``J = A B`` (rank ``K``). Jitted.

    Example:
      >>> import jax
      >>> connectivity(LowRankRNN(5, 2, key=jax.random.key(0))).shape
      (5, 5)

    Raises:
      ValueError: If the model reads in through a windowed GRU (``encoder="gru"``: it has
        no read-in matrix ``B``; ``"bigru"`` models keep ``B`` in their dynamics prior).
    """
    if model.encoder == "gru":
        raise ValueError("`model` has a GRU encoder: `J = A B` needs the linear read-in.")
    return _j_jit(model.A, model.B)


def _sub_j(A, B, n_groups):
    n, k = A.shape
    d = k // n_groups
    Ag = A.reshape(n, n_groups, d).transpose(1, 0, 2)  # [G, N, d]
    Bg = B.reshape(n_groups, d, -1)  # [G, d, N]
    return Ag @ Bg


_sub_j_jit = jax.jit(_sub_j, static_argnames=("n_groups",))


def sub_connectivity(
    A: Float[ArrayLike, "n k"], B: Float[ArrayLike, "k n"], *, n_groups: int
) -> Float[Array, "g n n"]:
    """Per-group sub-circuits ``J_g = A[:, g] B[g, :]`` (they sum to ``A B``). Jitted.

    Args:
      A: Read-out ``[N, K]`` (e.g. ``model.A``).
      B: Read-in ``[K, N]``.
      n_groups: Number of equal contiguous groups (must divide ``K``).

    Returns:
      ``[G, N, N]``.

    Raises:
      TypeError: If ``A``/``B`` are not floating matrices of transposed shapes.
      ValueError: If ``n_groups`` does not divide ``K``.

    Example:
      >>> import jax
      >>> m = LowRankRNN(5, 4, n_groups=2, key=jax.random.key(0))
      >>> sub_connectivity(m.A, m.B, n_groups=2).shape
      (2, 5, 5)
    """
    _validate.floating(A, name="A")
    _validate.floating(B, name="B")
    _validate.ndim(A, 2, name="A")
    n, k = jnp.shape(A)
    _validate.shape(B, (k, n), name="B")
    g = _validate.python_int(n_groups, name="n_groups", minimum=1)
    if k % g:
        raise ValueError(f"`n_groups` must divide K = {k}, got n_groups={g}.")
    return _sub_j_jit(jnp.asarray(A), jnp.asarray(B), g)


def _smooth(counts, decay):
    acc = accumulation_dtype(counts.dtype)
    decay = jnp.asarray(decay, acc)

    def step(h, y):
        h = decay * h + (1 - decay) * y
        return h, h

    _, out = jax.lax.scan(step, jnp.zeros(counts.shape[1:], acc), counts.astype(acc))
    return out.astype(counts.dtype)


_smooth_jit = jax.jit(_smooth)


def causal_smooth(
    counts: Float[ArrayLike, "t ..."], *, tau: RealScalarLike
) -> Float[Array, "t ..."]:
    """Causal exponential synaptic filter over time (axis 0), FacRNN's smoothed read-in.

    ``h_t = d h_{t-1} + (1 - d) y_t`` with ``d = exp(-1/tau)`` and ``h_{-1} = 0``. Jitted.

    Args:
      counts: Activity or spike counts with time on axis 0, any trailing axes (cast to
        float).
      tau: Time constant in bins, ``> 0`` (traced).

    Returns:
      The filtered activity, same shape.

    Raises:
      TypeError: If ``counts`` has rank 0.
      ValueError: If ``tau`` is not finite and > 0.

    Example:
      >>> import jax.numpy as jnp
      >>> print(*(round(v, 3) for v in causal_smooth(jnp.array([1.0, 0.0]), tau=1.0).tolist()))
      0.632 0.233
    """
    _validate.min_ndim(counts, 1, name="counts")
    c = jnp.asarray(counts)
    if not jnp.issubdtype(c.dtype, jnp.floating):
        c = c.astype(jnp.float32)
    tau = _validate.guard_positive(_validate.real_array(tau, name="tau"), tau, name="tau")
    return _smooth_jit(c, jnp.exp(-1 / tau.astype(accumulation_dtype(c.dtype))))
