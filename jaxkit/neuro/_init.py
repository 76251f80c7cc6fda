"""A data-driven start for the linear read-in: principal directions, rotated per restart [R].

Not in the authors' code (they start from PyTorch's default initialisation). On spike counts
read in through the linear read-in, random starts stop in a basin whose likelihood is
worse than what the same objective reaches from an informed start (see the neuro docs page);
this start reaches it. It is unsupervised: the read-in projects ``tanh(x_{t-1})`` onto its
``K`` leading principal directions, scaled to unit-variance latents and rotated by a random
orthogonal ``K x K`` matrix (the PC penalty then chooses the groups; without the rotation the
principal axes themselves, which mix both systems, are where FacRNN starts), and the read-out
is the least-squares regression of the inverse link of ``x_t`` on those latents.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.neuro import _loss
from jaxkit.neuro._model import LowRankRNN


def _inverse_link(model, x_next, u, bin_width):
    """Pre-activation targets: ``x - u`` (Gaussian) or ``softplus^-1((y + 1/2) / bin_width)``."""
    if model.obs == "poisson":
        r = (x_next + 0.5) / bin_width  # the half count keeps empty bins finite
        return r + jnp.log(-jnp.expm1(-r))  # log(expm1(r)) without overflow
    return x_next if u is None else x_next - u


def _haar(key, k, dtype):
    """Haar-random orthogonal ``[K, K]``: Gram-Schmidt of a Gaussian matrix, without LAPACK.

    Equals the QR factor with a positive ``R`` diagonal (the Haar sign convention), but is
    built from matmuls: under ``jax.vmap`` over keys a QR would be one batched LAPACK call,
    which this project avoids (``tests/privacy/test_lapack_unbatched.py`` says why). Each
    column is orthogonalised twice against the earlier ones (classical Gram-Schmidt, re-run
    once), which is accurate to rounding for the small ``K`` of a low-rank RNN.
    """
    g = jax.random.normal(key, (k, k), dtype)
    cols = jnp.arange(k)

    def one(j, q):
        v = g[:, j]
        earlier = jnp.where(cols[None, :] < j, q, jnp.zeros_like(q))
        for _ in range(2):
            v = v - earlier @ (earlier.T @ v)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, k, one, jnp.zeros_like(g))


def _principal(model, x_prev, x_next, u, key, bin_width):
    acc = accumulation_dtype(model.A.dtype)
    k = model.rank
    f = jnp.tanh(x_prev.astype(acc))
    m = jnp.mean(f, axis=0, keepdims=True)
    c = f - m
    s = f.shape[0]
    _, sv, vt = jnp.linalg.svd(c, full_matrices=False)
    # unit-variance latents: z = c V_K diag(sqrt(S) / sigma_K)
    scale = jnp.sqrt(jnp.asarray(s, acc)) / jnp.maximum(sv[:k], jnp.finfo(acc).tiny)
    b0 = vt[:k] * scale[:, None]  # [K, N]
    B = _haar(key, k, acc) @ b0
    b = -(B @ m[0])
    z = c @ B.T
    h = _inverse_link(model, x_next.astype(acc), None if u is None else u.astype(acc), bin_width)
    # the latents are centred and white, so least squares is a projection: A = h_c^T z / S
    a = jnp.mean(h, axis=0)
    hc = h - a[None, :]
    A = hc.T @ z / s
    resid = hc - z @ A.T
    log_sx = 0.5 * jnp.log(jnp.maximum(jnp.mean(resid * resid, axis=0), jnp.finfo(acc).tiny))
    if model.obs == "poisson":
        log_sx = model.log_sigma_x.astype(acc)  # unused by the Poisson likelihood
    dt = model.A.dtype
    new = tuple(v.astype(dt) for v in (A, B, a, b, log_sx))
    return eqx.tree_at(lambda mdl: (mdl.A, mdl.B, mdl.a, mdl.b, mdl.log_sigma_x), model, new)


_principal_jit = jax.jit(_principal)


def principal_init(
    model: LowRankRNN,
    x_prev: Float[ArrayLike, "s n"],
    x_next: Float[ArrayLike, "s n"],
    *,
    key: KeyArray,
    bin_width: RealScalarLike = 1.0,
    u: Float[ArrayLike, "s n"] | None = None,
) -> LowRankRNN:
    """Start a linear-read-in model from the principal directions of its read-in [R].

    With ``f_s = tanh(x_prev[s])`` centred and ``V_K`` its ``K`` leading principal
    directions: ``B = Q diag(sqrt(S) / sigma_k) V_K^T`` (unit-variance latents rotated by
    a Haar-random orthogonal ``Q`` drawn from ``key``) and ``b = -B mean(f)``; then ``A``,
    ``a`` are the least-squares regression of the inverse link of ``x_next`` on the latents
    ``B f + b`` (Gaussian: ``x_next - u``, and ``log sigma_x`` the residual log std;
    Poisson: ``softplus^-1((y + 1/2) / bin_width)``). Vary ``key`` across restarts and keep
    the lowest training objective: different ``Q`` give the PC penalty different starting
    partitions. Jitted; ``bin_width`` is traced. Safe to ``jax.vmap`` over ``key``
    (restarts): the SVD depends on the data only and ``Q`` is built without LAPACK, so no
    LAPACK call is batched (vmapping over the data would batch the SVD).

    Args:
      model: A :class:`LowRankRNN` with the linear read-in (its other fields are kept).
      x_prev: Read-in activity at ``t - 1``, ``[S, N]`` (Poisson: the smoothed counts).
      x_next: Observations at ``t``, ``[S, N]`` (Poisson: counts per bin).
      key: PRNG key of the rotation ``Q``.
      bin_width: Poisson bin width ``> 0``.
      u: Optional read-out input ``[S, N]`` (subtracted from the Gaussian target).

    Returns:
      The model with ``A, B, a, b`` (and Gaussian ``log_sigma_x``) replaced.

    Raises:
      TypeError: If ``model`` is not a LowRankRNN or the data do not match it.
      ValueError: If the model's encoder is not linear, ``S <= K`` or ``bin_width`` is
        not finite and > 0.

    Example:
      >>> import jax
      >>> m = LowRankRNN(5, 2, key=jax.random.key(0))
      >>> x = jax.random.normal(jax.random.key(1), (40, 5))
      >>> m2 = principal_init(m, x[:-1], x[1:], key=jax.random.key(2))
      >>> m2.encode(x[:-1]).std(0).round(2).tolist()
      [1.0, 1.0]
    """
    if isinstance(model, LowRankRNN) and model.encoder != "linear":
        raise ValueError(f"`model` must have the linear read-in, got encoder={model.encoder!r}.")
    s = _loss._check_data(model, x_prev, x_next, u)
    if s <= model.rank:
        raise ValueError(f"`x_prev` must hold more than K = {model.rank} rows, got {s}.")
    _validate.is_key(key)
    x_prev = _validate.guard_positive(jnp.asarray(x_prev), bin_width, name="bin_width")
    u = None if u is None else jnp.asarray(u)
    bw = jnp.asarray(bin_width, accumulation_dtype(model.A.dtype))
    return _principal_jit(model, x_prev, jnp.asarray(x_next), u, key, bw)
