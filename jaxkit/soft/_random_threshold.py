"""Soft threshold samplers: bernoulli (uniform or logistic noise), rademacher, binomial.

Each public function validates its static arguments and concrete values, then calls a
module-level ``jax.jit`` core (static choices static, ``p`` and ``softness`` traced).

References:
  Maddison, Mnih & Teh, The Concrete distribution <https://arxiv.org/abs/1611.00712>, 2017.
"""

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import KeyArray, RealScalarLike
from jaxkit.soft import _random_common as RC
from jaxkit.soft._common import as_float
from jaxkit.soft._elementwise import less as _less

THRESHOLD_NOISES = ("uniform", "logistic")


def _bernoulli_core(key, p, softness, *, shape, rng_mode, mode, noise):
    dt = p.dtype
    if mode == "hard":
        b = jax.random.bernoulli(key, jnp.broadcast_to(p, shape), shape, mode=rng_mode)
        return b.astype(dt)
    p = jnp.broadcast_to(RC.guard_probabilities(p, upper=True), shape)
    p = RC.guard_soft(p, softness, mode)
    if rng_mode == "high":  # the draw of jax.random.bernoulli(mode="high")
        u1, u2 = jax.random.uniform(key, (2, *shape), dt)
        u2 = u2 * jnp.asarray(2.0 ** -jnp.finfo(dt).nmant, dt)
        a, b = u2, p - u1  # decision a < b, u = u1 + u2 (fine resolution near 0)
        u = u1 + u2
    else:
        u = jax.random.uniform(key, shape, dt)
        a, b = u, p
    if mode == "_hard":
        return jnp.less(a, b).astype(dt)
    if noise == "uniform":
        return _less(a, b, softness, mode).astype(dt)
    tiny = jnp.asarray(jnp.finfo(dt).tiny, dt)
    pc = jnp.clip(p, tiny, 1 - jnp.finfo(dt).epsneg)
    uc = jnp.clip(u, tiny, 1 - jnp.finfo(dt).epsneg)
    z = (jnp.log(pc) - jnp.log1p(-pc)) - (jnp.log(uc) - jnp.log1p(-uc))
    return jax.nn.sigmoid(z / jnp.asarray(softness).astype(dt)).astype(dt)


_bernoulli = jax.jit(_bernoulli_core, static_argnames=("shape", "rng_mode", "mode", "noise"))


def _check_bernoulli(key, p, shape, rng_mode, softness, mode, noise):
    RC.check_sampler(key, mode, softness, noise, THRESHOLD_NOISES)
    RC.check_rng_mode(rng_mode, ("low", "high"))
    if noise == "logistic" and mode not in ("hard", "_hard", "smooth"):
        raise ValueError(
            f"`noise='logistic'` supports mode 'hard', '_hard' and 'smooth'; got mode={mode!r}."
        )
    p = as_float(V.real_array(p, name="p"), name="p")  # a bool `p`: TypeError
    shape = p.shape if shape is None else RC.sample_shape(shape)
    RC.check_broadcast(shape, p.shape, "p")
    if mode != "hard" and RC.is_concrete(p):
        RC.guard_probabilities(p, upper=True)
    return p, shape


def bernoulli(
    key: KeyArray | ArrayLike,
    p: ArrayLike = 0.5,
    shape: tuple[int, ...] | None = None,
    rng_mode: str = "low",
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    noise: str = "uniform",
) -> Array:
    """Soft ``jax.random.bernoulli``.

    ``noise="uniform"``: ``less(u, p)`` with ``u ~ U(0, 1)`` (the draw
    ``jax.random.bernoulli`` uses, so ``"_hard"`` equals ``"hard"``);
    ``noise="logistic"``: binary Concrete ``sigmoid((logit p - logit u) / softness)``
    (``mode="smooth"`` only for the relaxation; the hard decision is the same
    ``u < p``), whose ``P(sample > 1/2) = p`` exactly.

    ``rng_mode`` (``"low"``/``"high"``, static) is ``jax.random.bernoulli``'s ``mode``:
    ``"high"`` draws two uniforms ``u1, u2`` and decides ``u2 2^-nmant < p - u1`` (correct
    for tiny ``p`` in float32); the soft modes relax that same comparison,
    ``less(u2 2^-nmant, p - u1)``, so ``"_hard"`` equals ``"hard"`` in both modes.
    ``p`` (traced) must lie in ``[0, 1]`` (NaN raises) in every mode but ``"hard"``.

    Returns:
      Samples in ``[0, 1]`` of shape ``shape`` (default ``p.shape``), dtype of ``p``
      (the default float for a Python ``p``).

    References:
      Maddison et al., The Concrete distribution <https://arxiv.org/abs/1611.00712>, 2017.
    """
    p, shape = _check_bernoulli(key, p, shape, rng_mode, softness, mode, noise)
    return _bernoulli(key, p, softness, shape=shape, rng_mode=rng_mode, mode=mode, noise=noise)


def _float_dtype(dtype: Any, default: Any) -> Any:
    dt = jnp.dtype(dtype) if dtype is not None else jnp.dtype(default)
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"`dtype` must be floating for soft samples, got {dt}.")
    return dt


def _rademacher_core(key, softness, *, shape, dtype, mode, noise):
    if mode == "hard":
        return jax.random.rademacher(key, shape, dtype)
    half = jnp.full(shape, 0.5, dtype)
    b = _bernoulli_core(key, half, softness, shape=shape, rng_mode="low", mode=mode, noise=noise)
    return 2 * b - 1


_rademacher = jax.jit(_rademacher_core, static_argnames=("shape", "dtype", "mode", "noise"))


def rademacher(
    key: KeyArray | ArrayLike,
    shape: tuple[int, ...] = (),
    dtype: Any = None,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    noise: str = "uniform",
) -> Array:
    """Soft ``jax.random.rademacher``: ``2 bernoulli(1/2) - 1`` (values in [-1, 1])."""
    dt = _float_dtype(dtype, jnp.result_type(float))
    _check_bernoulli(key, jnp.zeros((), dt), (), "low", softness, mode, noise)
    shape = RC.sample_shape(shape)
    return _rademacher(key, softness, shape=shape, dtype=dt, mode=mode, noise=noise)


def _binomial_core(key, p, softness, *, n, shape, dtype, mode, noise):
    if mode == "hard":
        return jax.random.binomial(key, n, p, shape, dtype)
    if n == 0:
        return jnp.zeros(shape, dtype)
    b = _bernoulli_core(key, p, softness, shape=(n, *shape), rng_mode="low", mode=mode, noise=noise)
    return jnp.sum(b, axis=0).astype(dtype)


_binomial = jax.jit(_binomial_core, static_argnames=("n", "shape", "dtype", "mode", "noise"))


def binomial(
    key: KeyArray | ArrayLike,
    n: int,
    p: ArrayLike,
    shape: tuple[int, ...] | None = None,
    dtype: Any = None,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    noise: str = "uniform",
) -> Array:
    """Soft ``jax.random.binomial``: sum of ``n`` soft Bernoulli draws (static ``n``)."""
    n = V.python_int(n, name="n", minimum=0)
    p, shape = _check_bernoulli(key, p, shape, "low", softness, mode, noise)
    dt = jnp.dtype(dtype) if dtype is not None else p.dtype
    return _binomial(key, p, softness, n=n, shape=shape, dtype=dt, mode=mode, noise=noise)
