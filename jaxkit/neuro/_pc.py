"""Group-wise independence of latents: partial correlation (PC) and total correlation (TC).

For an amortised Gaussian posterior ``q(z | x_n) = N(mu_n, diag sigma_n^2)`` over ``N_tot``
samples, the aggregate posterior is the mixture ``q(z) = (1/N_tot) sum_n q(z | x_n)``. With
the ``K`` latent dimensions split into ``G`` contiguous groups of ``K/G``, FacRNN's partial
correlation is the KL divergence between ``q(z)`` and the product of its group marginals,

    PC = E_{q(z)}[ ln q(z) - sum_g ln q(z_g) ],

so ``G = 1`` gives 0 and ``G = K`` is beta-TCVAE's total correlation. Everything is computed
in log space: the pairwise log-densities are very negative and their ``exp`` underflows.
Read from the authors' code (JerrySoybean/facrnn, via the PDisVAE estimator) and re-derived;
nothing is copied.
"""

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray, RealScalarLike, accumulation_dtype
from jaxkit.sharding import gather_sharded

_LOG_2PI = math.log(2.0 * math.pi)


def _group_size(k: int, n_groups: int) -> int:
    n_groups = _validate.python_int(n_groups, name="n_groups", minimum=1)
    if k % n_groups:
        raise ValueError(
            f"`n_groups` must divide the latent dimension K = {k} into equal contiguous "
            f"groups, got n_groups={n_groups}."
        )
    return k // n_groups


def _check_latents(mu, log_std, z=None) -> tuple[int, int]:
    _validate.floating(mu, name="mu")
    _validate.floating(log_std, name="log_std")
    _validate.ndim(mu, 2, name="mu")
    _validate.same_shape(log_std=log_std, mu=mu)
    if z is not None:
        _validate.floating(z, name="z")
        _validate.same_shape(z=z, mu=mu)
    m, k = jnp.shape(mu)
    return m, k


def _pairwise(z, mu, log_std, n_groups):
    """``[M, M', G]``: ``ln q(z_{i,g} | x_j)`` summed over group ``g``'s coordinates."""
    # every row needs all of ``mu``/``log_std``; each device computes its own row block
    mu, log_std = gather_sharded(mu), gather_sharded(log_std)
    m1, k = z.shape
    m2 = mu.shape[0]
    d = k // n_groups
    inv = jnp.exp(-log_std)
    r = (z[:, None, :] - mu[None, :, :]) * inv[None, :, :]
    lp = -0.5 * r * r - log_std[None, :, :] - 0.5 * _LOG_2PI
    return jnp.sum(lp.reshape(m1, m2, n_groups, d), axis=-1)


def _pairwise_jit_core(z, mu, log_std, n_groups):
    acc = accumulation_dtype(mu.dtype)
    out = _pairwise(z.astype(acc), mu.astype(acc), log_std.astype(acc), n_groups)
    return out.astype(mu.dtype)


_pairwise_jit = jax.jit(_pairwise_jit_core, static_argnames=("n_groups",))


def pairwise_log_q(
    z: Float[ArrayLike, "m k"],
    mu: Float[ArrayLike, "n k"],
    log_std: Float[ArrayLike, "n k"],
    *,
    n_groups: int,
) -> Float[Array, "m n g"]:
    """Group-wise Gaussian log-densities of every draw under every sample's posterior.

    ``out[i, j, g] = sum_{k in group g} ln N(z_ik; mu_jk, exp(log_std_jk)^2)``: the
    ``[M, N, G]`` tensor behind both PC estimators. Accumulates in f32 (f64 for f64);
    jitted.

    Args:
      z: Latent draws ``[M, K]``.
      mu: Posterior means ``[N, K]``.
      log_std: Posterior log standard deviations ``[N, K]``.
      n_groups: Number of equal contiguous latent groups ``G`` (must divide ``K``).

    Returns:
      ``[M, N, G]`` log-densities in ``mu``'s dtype.

    Raises:
      TypeError: If the arrays are not floating matrices with matching latent width.
      ValueError: If ``n_groups`` does not divide ``K``.

    Example:
      >>> import jax.numpy as jnp
      >>> out = pairwise_log_q(jnp.zeros((2, 4)), jnp.zeros((3, 4)), jnp.zeros((3, 4)),
      ...                      n_groups=2)
      >>> out.shape, round(float(out[0, 0, 0]), 4)
      ((2, 3, 2), -1.8379)
    """
    _validate.floating(z, name="z")
    _validate.ndim(z, 2, name="z")
    _, k = _check_latents(mu, log_std)
    if jnp.shape(z)[1] != k:
        raise TypeError(
            f"`z` must have the latent width K = {k} of `mu`, got shape {jnp.shape(z)}."
        )
    _group_size(k, n_groups)
    return _pairwise_jit(jnp.asarray(z), jnp.asarray(mu), jnp.asarray(log_std), n_groups)


def _pc_train(z, mu, log_std, n_total, n_groups):
    acc = accumulation_dtype(mu.dtype)
    m = mu.shape[0]
    lp = _pairwise(z.astype(acc), mu.astype(acc), log_std.astype(acc), n_groups)
    n_total = jnp.asarray(n_total, acc)
    # importance weights of the minibatch mixture: w_ii = 1, w_ij = (N_tot - 1)/(M - 1)
    log_w_off = jnp.log(n_total - 1) - math.log(m - 1)
    eye = jnp.eye(m, dtype=bool)
    log_w = jnp.where(eye, jnp.zeros((), acc), log_w_off)
    log_qz = jax.nn.logsumexp(jnp.sum(lp, -1) + log_w, axis=1) - jnp.log(n_total)
    log_qg = jax.nn.logsumexp(lp + log_w[:, :, None], axis=1) - jnp.log(n_total)
    return jnp.mean(log_qz - jnp.sum(log_qg, -1)).astype(mu.dtype)


_pc_train_jit = jax.jit(_pc_train, static_argnames=("n_groups",))


def partial_correlation(
    z: Float[ArrayLike, "m k"],
    mu: Float[ArrayLike, "m k"],
    log_std: Float[ArrayLike, "m k"],
    *,
    n_groups: int,
    n_total: RealScalarLike,
) -> Float[Array, ""]:
    """Minibatch estimator of the partial correlation (FacRNN's training penalty).

    For draws ``z_i ~ q(z | x_i)`` of a minibatch of ``M`` out of ``N_tot`` samples,
    ``ln q(z_i) ~= logsumexp_j [ln q(z_i | x_j) + ln w_ij] - ln N_tot`` with importance
    weights ``w_ii = 1`` and ``w_ij = (N_tot - 1)/(M - 1)`` (``j != i``); the same over
    group ``g``'s coordinates gives ``ln q(z_ig)``, and
    ``PC ~= mean_i [ln q(z_i) - sum_g ln q(z_ig)]``. With ``M = N_tot`` it is exactly the
    full-data mixture. ``n_groups = K`` gives the total correlation. Log space throughout,
    f32 accumulation (f64 for f64); jitted with ``n_groups`` static, ``n_total`` traced.

    Args:
      z: One posterior draw per sample ``[M, K]``.
      mu: Posterior means ``[M, K]``.
      log_std: Posterior log standard deviations ``[M, K]``.
      n_groups: Number of equal contiguous latent groups ``G`` (must divide ``K``).
      n_total: Size of the training set the minibatch is drawn from (``>= M``; using the
        batch size instead silently biases PC).

    Returns:
      The scalar estimate, in ``mu``'s dtype.

    Raises:
      TypeError: On non-floating or mismatched arrays.
      ValueError: If ``n_groups`` does not divide ``K``, ``M < 2``, or ``n_total`` is not
        finite and ``>= M`` (traced: a runtime error).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> mu = jax.random.normal(jax.random.key(0), (16, 4))
      >>> float(partial_correlation(mu, mu, jnp.zeros((16, 4)), n_groups=1, n_total=100))
      0.0
    """
    m, k = _check_latents(mu, log_std, z)
    _group_size(k, n_groups)
    if m < 2:
        raise ValueError(f"`mu` must hold a minibatch of M >= 2 samples, got M = {m}.")
    _validate.real(n_total, name="n_total")
    nt = jnp.asarray(n_total)
    bad = ~((nt >= m) & jnp.isfinite(nt))
    z = _validate.error_if(
        jnp.asarray(z), bad, f"`n_total` must be finite and >= the minibatch size M = {m}."
    )
    return _pc_train_jit(z, jnp.asarray(mu), jnp.asarray(log_std), nt, n_groups)


def _pc_eval(mu, log_std, key, n_groups, n_mc, chunk):
    acc = accumulation_dtype(mu.dtype)
    mu_a, ls_a = mu.astype(acc), log_std.astype(acc)
    s, k = mu.shape
    eps = jax.random.normal(key, (n_mc, s, k), acc)
    z = (mu_a[None] + jnp.exp(ls_a)[None] * eps).reshape(n_mc * s, k)
    log_s = jnp.log(jnp.asarray(s, acc))

    def row(zi):
        lp = _pairwise(zi[None], mu_a, ls_a, n_groups)[0]  # [S, G]
        log_qz = jax.nn.logsumexp(jnp.sum(lp, -1)) - log_s
        log_qg = jax.nn.logsumexp(lp, axis=0) - log_s
        return log_qz - jnp.sum(log_qg)

    vals = jax.lax.map(row, z, batch_size=chunk)
    return jnp.mean(vals).astype(mu.dtype)


_pc_eval_jit = jax.jit(_pc_eval, static_argnames=("n_groups", "n_mc", "chunk"))


def partial_correlation_eval(
    mu: Float[ArrayLike, "n k"],
    log_std: Float[ArrayLike, "n k"],
    *,
    n_groups: int,
    key: KeyArray,
    n_mc: int = 10,
    chunk: int = 1024,
) -> Float[Array, ""]:
    """Evaluation estimator of the partial correlation over a whole data set.

    Draws ``n_mc`` samples from every ``q(z | x_n)`` and scores each against the full
    mixture of all ``N`` posteriors without reweighting:
    ``mean [ln q(z) - sum_g ln q(z_g)]``. Rows are processed ``chunk`` at a time so the
    ``[n_mc N, N, G]`` tensor is never materialised (memory ``O(chunk N G)``). Jitted
    with ``n_groups``, ``n_mc`` and ``chunk`` static.

    Args:
      mu: Posterior means ``[N, K]``.
      log_std: Posterior log standard deviations ``[N, K]``.
      n_groups: Number of equal contiguous latent groups (``K`` gives the TC).
      key: PRNG key for the draws.
      n_mc: Draws per sample.
      chunk: Rows of the pairwise tensor computed at once.

    Returns:
      The scalar estimate (nats), in ``mu``'s dtype.

    Raises:
      TypeError: On non-floating or mismatched arrays, a non-key ``key``.
      ValueError: If ``n_groups`` does not divide ``K`` or ``n_mc``/``chunk`` < 1.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> mu = jax.random.normal(jax.random.key(0), (64, 2))
      >>> pc = partial_correlation_eval(mu, jnp.zeros((64, 2)), n_groups=2,
      ...                               key=jax.random.key(1), n_mc=2)
      >>> abs(float(pc)) < 0.1
      True
    """
    _, k = _check_latents(mu, log_std)
    _group_size(k, n_groups)
    _validate.is_key(key)
    n_mc = _validate.python_int(n_mc, name="n_mc", minimum=1)
    chunk = _validate.python_int(chunk, name="chunk", minimum=1)
    return _pc_eval_jit(jnp.asarray(mu), jnp.asarray(log_std), key, n_groups, n_mc, chunk)


def total_correlation(
    mu: Float[ArrayLike, "n k"],
    log_std: Float[ArrayLike, "n k"],
    *,
    key: KeyArray,
    n_mc: int = 10,
    chunk: int = 1024,
) -> Float[Array, ""]:
    """Total correlation of the aggregate posterior (beta-TCVAE's TC).

    :func:`partial_correlation_eval` with one group per latent dimension. Jitted.

    Args:
      mu: Posterior means ``[N, K]``.
      log_std: Posterior log standard deviations ``[N, K]``.
      key: PRNG key for the draws.
      n_mc: Draws per sample.
      chunk: Rows of the pairwise tensor computed at once.

    Returns:
      The scalar estimate (nats).

    Raises:
      TypeError: On non-floating or mismatched arrays.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> mu = jax.random.normal(jax.random.key(0), (64, 3))
      >>> tc = total_correlation(mu, jnp.full((64, 3), -3.0), key=jax.random.key(1), n_mc=1)
      >>> tc.shape
      ()
    """
    _, k = _check_latents(mu, log_std)
    return partial_correlation_eval(mu, log_std, n_groups=k, key=key, n_mc=n_mc, chunk=chunk)


def _group_tc(cov, n_groups):
    acc = accumulation_dtype(cov.dtype)
    c = gather_sharded(cov.astype(acc))  # a small [K, K] matrix: blocks need whole rows
    k = c.shape[-1]
    d = k // n_groups
    blocks = jnp.stack([c[g * d : (g + 1) * d, g * d : (g + 1) * d] for g in range(n_groups)])
    sign_b, logdet_b = jnp.linalg.slogdet(blocks)
    sign, logdet = jnp.linalg.slogdet(c)
    out = (0.5 * (jnp.sum(logdet_b) - logdet)).astype(cov.dtype)
    bad = (sign <= 0) | jnp.any(sign_b <= 0)  # not positive definite: a meaningless value
    return _validate.error_if(out, bad, "`cov` must be positive definite.")


_group_tc_jit = jax.jit(_group_tc, static_argnames=("n_groups",))


def gaussian_group_tc(cov: Float[ArrayLike, "k k"], *, n_groups: int) -> Float[Array, ""]:
    """Closed-form partial correlation of a Gaussian ``N(m, cov)``.

    ``PC = 1/2 (sum_g ln det cov_gg - ln det cov)`` over ``n_groups`` equal contiguous
    groups: the KL between the Gaussian and the product of its group marginals (the oracle
    for the estimators; 0 iff ``cov`` is block diagonal). Jitted.

    Args:
      cov: Symmetric positive-definite covariance ``[K, K]``.
      n_groups: Number of groups (must divide ``K``).

    Returns:
      The scalar PC in nats.

    Raises:
      TypeError: If ``cov`` is not a floating square matrix.
      ValueError: If ``n_groups`` does not divide ``K``.

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(gaussian_group_tc(jnp.array([[1.0, 0.5], [0.5, 1.0]]), n_groups=2)), 4)
      0.1438
    """
    _validate.floating(cov, name="cov")
    _validate.ndim(cov, 2, name="cov")
    k = jnp.shape(cov)[0]
    if jnp.shape(cov)[1] != k:
        raise TypeError(f"`cov` must be square, got shape {jnp.shape(cov)}.")
    _group_size(k, n_groups)
    return _group_tc_jit(jnp.asarray(cov), n_groups)


def _kl(mu, log_std):
    acc = accumulation_dtype(mu.dtype)
    m, ls = mu.astype(acc), log_std.astype(acc)
    kl = 0.5 * jnp.sum(m * m + jnp.exp(2 * ls) - 1 - 2 * ls, axis=-1)
    return kl.astype(mu.dtype)


_kl_jit = jax.jit(_kl)


def kl_std_normal(
    mu: Float[ArrayLike, "*batch k"], log_std: Float[ArrayLike, "*batch k"]
) -> Float[Array, "*batch"]:
    """``KL(N(mu, diag exp(log_std)^2) || N(0, I))`` in closed form, per row. Jitted.

    ``1/2 sum_k (mu_k^2 + sigma_k^2 - 1 - 2 ln sigma_k)``.

    Args:
      mu: Means ``[..., K]``.
      log_std: Log standard deviations, same shape.

    Returns:
      ``[...]`` divergences in ``mu``'s dtype.

    Raises:
      TypeError: On non-floating or mismatched arrays.

    Example:
      >>> import jax.numpy as jnp
      >>> float(kl_std_normal(jnp.zeros(3), jnp.zeros(3)))
      0.0
    """
    _validate.floating_pair(mu, log_std, names=("mu", "log_std"), rank=1)
    return _kl_jit(jnp.asarray(mu), jnp.asarray(log_std))
