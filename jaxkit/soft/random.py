"""Soft (differentiable) counterparts of ``jax.random`` samplers.

Categorical-type samplers perturb logits with Gumbel noise and replace the hard
``argmax`` / ``top_k`` / ``argsort`` by :func:`jaxkit.soft.argmax`,
:func:`jaxkit.soft.argtop_k` and :func:`jaxkit.soft.argsort` (Gumbel-max,
Gumbel-top-k, Gumbel-sort); threshold-type samplers compare a uniform draw with the
probability through :func:`jaxkit.soft.less` (``bernoulli = less(u, p)``), or, with
``noise="logistic"``, use the binary Concrete relaxation.

Modes (static): ``"hard"`` calls the ``jax.random`` sampler itself; ``"_hard"`` runs the
hard decision on the *same noise* as the soft modes (so a straight-through pair shares
its sample); ``"smooth"``, ``"c0"``, ``"c1"``, ``"c2"`` are the relaxations of
:mod:`jaxkit.soft`. ``softness`` is a traced scalar. The ``*_st`` variants return the
``"_hard"`` sample with the gradient of the requested soft mode.

Non-finite logits: ``-inf`` (an impossible category) is replaced by the finite floor
``-1e30`` (``+inf`` by ``+1e30``) before the Gumbel noise is added, so soft modes stay
finite and such categories get (numerically) zero weight; NaN logits raise.

``rng_mode`` (static) is passed to ``jax.random``'s ``mode=`` argument ("low"/"high"
bits of the Gumbel or uniform draw; ``None`` = JAX's default) in the hard *and* the soft
paths, so ``"_hard"`` keeps matching ``"hard"``. :func:`gumbel_sinkhorn` relaxes a random
permutation matrix (Mena et al. 2018); :func:`exponential_schedule`,
:func:`linear_schedule` and :func:`temperature_schedule` anneal ``softness`` during
training.

References:
  Gumbel, Statistical theory of extreme values, 1954; Maddison, Mnih & Teh, The
  Concrete distribution <https://arxiv.org/abs/1611.00712>, 2017; Jang, Gu & Poole,
  Categorical reparameterization with Gumbel-softmax <https://arxiv.org/abs/1611.01144>,
  2017; Kool, van Hoof & Welling, Stochastic beams and where to find them (Gumbel-top-k)
  <https://arxiv.org/abs/1903.06059>, 2019; Grover et al., NeuralSort
  <https://arxiv.org/abs/1903.08850>, 2019; Mena, Belanger, Linderman & Snoek,
  Learning latent permutations with Gumbel-Sinkhorn networks
  <https://arxiv.org/abs/1802.08665>, 2018; Paulus et al., SoftJAX & SoftTorch
  <https://arxiv.org/abs/2603.08824>, 2026.
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import KeyArray, RealScalarLike
from jaxkit.soft import _st
from jaxkit.soft._axiswise import _check_lp, _finish
from jaxkit.soft._axiswise import argmax as _argmax
from jaxkit.soft._axiswise import argsort as _argsort
from jaxkit.soft._axiswise import argtop_k as _argtop_k
from jaxkit.soft._common import as_float, check_softness, compute_dtype
from jaxkit.soft._elementwise import less as _less

RANDOM_MODES = ("hard", "_hard", "smooth", "c0", "c1", "c2")
FLOOR = 1e30

__all__ = [
    "bernoulli",
    "bernoulli_st",
    "binomial",
    "binomial_st",
    "categorical",
    "categorical_st",
    "choice",
    "choice_st",
    "exponential_schedule",
    "gumbel_sinkhorn",
    "gumbel_sinkhorn_st",
    "linear_schedule",
    "multinomial",
    "multinomial_st",
    "permutation",
    "permutation_st",
    "rademacher",
    "rademacher_st",
    "temperature_schedule",
]
RNG_MODES = (None, "low", "high")
GS_MODES = ("hard", "_hard", "smooth")
GS_NOISES = ("gumbel", "none")


# ----------------------------------------------------------------------------- helpers


def _check(key, mode, softness, noise, noises):
    V.is_key(key)
    V.one_of(RANDOM_MODES, mode=mode)
    V.one_of(noises, noise=noise)
    check_softness(softness)


def _static_int(n, name, low=0):
    if isinstance(n, bool) or not isinstance(n, int) or n < low:
        raise ValueError(f"`{name}` must be a static int >= {low}, got {name}={n!r}.")
    return n


def _int_or_array(a, name, low):
    """``jnp.arange(a)`` for a static int ``a >= low``, else ``a`` as a float array (ndim >= 1)."""
    if isinstance(a, int) and not isinstance(a, bool):
        _static_int(a, name, low)
        return jnp.arange(a, dtype=jnp.result_type(float))
    arr = as_float(a)
    if arr.ndim == 0:
        raise TypeError(f"`{name}` must be an int or an array with at least one dimension.")
    return arr


def _shape(shape, name="shape"):
    if shape is None:
        return None
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError as e:
        raise TypeError(f"`{name}` must be a tuple of ints, got {shape!r}.") from e
    return shape


def _check_broadcast(shape, batch, name):
    if (
        len(shape) < len(batch)
        or jnp.broadcast_shapes(shape[len(shape) - len(batch) :], batch)
        != shape[len(shape) - len(batch) :]
    ):
        raise ValueError(
            f"`shape` {shape} must be broadcast-compatible with the {name} batch shape {batch}."
        )


def _finite_floor(logits, name="logits"):
    """Replace -inf/+inf logits by -/+1e30; NaN raises (documented in the module)."""
    logits = V.error_if(logits, jnp.any(jnp.isnan(logits)), f"`{name}` must not contain NaN.")
    floor = jnp.asarray(-FLOOR, logits.dtype)
    return jnp.where(jnp.isneginf(logits), floor, jnp.where(jnp.isposinf(logits), -floor, logits))


def _soft_mode(mode):
    return "hard" if mode == "_hard" else mode


def _check_rng_mode(rng_mode, allowed=RNG_MODES):
    V.one_of(allowed, rng_mode=rng_mode)


def _guard_softness(x, softness):
    if isinstance(softness, jax.core.Tracer):
        x = V.error_if(x, ~(jnp.asarray(softness) > 0), "`softness` must be > 0.")
    return x


# ----------------------------------------------------------------------------- categorical


def categorical(
    key: KeyArray | ArrayLike,
    logits: ArrayLike,
    axis: int = -1,
    shape: tuple[int, ...] | None = None,
    replace: bool = True,
    rng_mode: str | None = None,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    noise: str = "gumbel",
    standardize: bool = False,
    return_log_probs: bool = False,
    log_prob_eps: RealScalarLike | None = None,
) -> Array:
    """Soft ``jax.random.categorical``: a relaxed one-hot sample ``(*shape, [n])``.

    ``replace=True``: soft argmax of ``logits + Gumbel`` (with ``method="softsort"`` and
    ``mode="smooth"`` this is the Gumbel-softmax / Concrete sample); ``replace=False``:
    soft argtop-k (Gumbel-top-k) with ``k = prod(shape[:len(shape) - len(batch)])``,
    the k draws leading as in ``jax.random.categorical``.

    Args:
      key: PRNG key (typed ``jax.random.key`` or legacy).
      logits: unnormalised log-probabilities; ``softmax(logits, axis)`` are the
        probabilities. ``-inf`` entries are floored at ``-1e30``.
      axis: the category axis.
      shape: sample shape, broadcast-compatible with ``logits.shape`` without ``axis``.
      replace: sample with (``True``) or without replacement.
      rng_mode: ``mode`` of the Gumbel draw (``None``, ``"low"``, ``"high"``; static), as
        ``jax.random.categorical``'s ``mode``.
      softness: temperature (> 0), traced.
      mode: ``"hard"``, ``"_hard"``, ``"smooth"``, ``"c0"``, ``"c1"``, ``"c2"``.
      method: soft argmax method (``"softsort"``, ``"neuralsort"``, ``"ot"``, ``"network"``).
      noise: ``"gumbel"``.
      standardize: standardize the perturbed logits before the soft argmax.
      return_log_probs: static bool; return the log of the relaxed sample weights (not a
        log-likelihood under ``logits``): exact ``-inf`` at the zeros of sparse/hard modes,
        ``log_softmax`` directly for ``mode="smooth"``, ``method="softsort"``.
      log_prob_eps: with ``return_log_probs``: floor the weights at this value in (0, 1)
        and renormalise before the log (finite values and gradients).

    Returns:
      Soft index with the dtype of ``logits`` (one-hot in the hard modes), or its log.

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>; Maddison et al. 2017
      <https://arxiv.org/abs/1611.00712>; Kool et al. 2019
      <https://arxiv.org/abs/1903.06059>.
    """
    _check(key, mode, softness, noise, ("gumbel",))
    _check_rng_mode(rng_mode)
    _check_lp(return_log_probs, log_prob_eps)
    lp = {"return_log_probs": return_log_probs, "log_prob_eps": log_prob_eps}
    logits = as_float(logits)
    if logits.ndim == 0:
        raise TypeError("`logits` must have at least one dimension.")
    ax = V.axis(axis, logits.ndim)
    n = logits.shape[ax]
    batch = tuple(s for i, s in enumerate(logits.shape) if i != ax)
    shape = batch if shape is None else _shape(shape)
    _check_broadcast(shape, batch, "logits")
    prefix = shape[: len(shape) - len(batch)]
    dt = logits.dtype
    if mode == "hard":
        idx = jax.random.categorical(
            key, logits, axis=ax, shape=shape, replace=replace, mode=rng_mode
        )
        return _finish(jax.nn.one_hot(idx, n, dtype=dt), False, return_log_probs, log_prob_eps)
    logits = _finite_floor(logits)
    lg = jnp.moveaxis(logits, ax, -1)  # (*batch, n)
    if replace:
        # same noise layout as jax.random.categorical, so "_hard" == "hard"
        neg = ax - logits.ndim
        full = list(shape[len(shape) - len(batch) :])
        full.insert(neg % logits.ndim, n)
        g = jax.random.gumbel(key, (*prefix, *full), dt, mode=rng_mode)
        g = jnp.moveaxis(g, len(prefix) + neg % logits.ndim, -1)
        pert = g + jnp.broadcast_to(lg, g.shape)
        return _argmax(
            pert,
            -1,
            softness=softness,
            mode=_soft_mode(mode),
            method=method,
            standardize=standardize,
            **lp,
        )
    k = math.prod(prefix)
    if k > n:
        raise ValueError(
            f"Number of samples without replacement (k={k}) cannot exceed the "
            f"number of categories ({n}); see `shape`."
        )
    pert = jnp.moveaxis(logits + jax.random.gumbel(key, logits.shape, dt, mode=rng_mode), ax, -1)
    pert = jnp.broadcast_to(pert, (*shape[len(prefix) :], n))
    if k == 0:
        return jnp.zeros((*shape, n), dt)
    P = _argtop_k(
        pert,
        k,
        -1,
        softness=softness,
        mode=_soft_mode(mode),
        method=method,
        standardize=standardize,
        **lp,
    )  # (*batch, k, n)
    P = jnp.moveaxis(P, -2, 0)
    return P.reshape(*prefix, *P.shape[1:]).astype(dt)


def choice(
    key: KeyArray | ArrayLike,
    a: int | ArrayLike,
    shape: tuple[int, ...] = (),
    replace: bool = True,
    p: ArrayLike | None = None,
    axis: int = 0,
    rng_mode: str | None = None,
    *,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    noise: str = "gumbel",
    standardize: bool = False,
) -> Array:
    """Soft ``jax.random.choice``: a soft mixture of the entries of ``a`` along ``axis``.

    Draws a soft categorical index ``(*shape, [n])`` from ``log p`` (uniform without
    ``p``) as :func:`categorical` (``replace=False``: Gumbel-top-k with
    ``k = prod(shape)``) and contracts it with ``a``; the result has shape
    ``a.shape[:axis] + shape + a.shape[axis + 1:]`` like ``jax.random.choice``. An int
    ``a`` means ``arange(a)`` (soft integer values, as floats). ``rng_mode`` is passed to
    ``jax.random.choice`` (hard) and to the Gumbel draw (other modes).

    Returns:
      Array of the floating dtype of ``a`` (the default float for integer ``a``).

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>; Kool et al. 2019
      <https://arxiv.org/abs/1903.06059>.
    """
    _check(key, mode, softness, noise, ("gumbel",))
    _check_rng_mode(rng_mode)
    shape = _shape(shape)
    arr = _int_or_array(a, "a", 1)
    ax = V.axis(axis, arr.ndim)
    n = arr.shape[ax]
    dt = arr.dtype
    if p is None:
        logits = jnp.zeros((n,), dt)
    else:
        p = as_float(p).astype(dt)
        if p.shape != (n,):
            raise TypeError(f"`p` must have shape ({n},), got {p.shape}.")
        V.non_negative(p=p)
        logits = jnp.log(p)
    if mode == "hard":
        out = jax.random.choice(key, arr, shape=shape, replace=replace, p=p, axis=ax, mode=rng_mode)
        return out.astype(dt)
    if replace:
        P = categorical(
            key,
            logits,
            shape=shape,
            rng_mode=rng_mode,
            softness=softness,
            mode=mode,
            method=method,
            standardize=standardize,
        )
    else:
        k = math.prod(shape)
        P = categorical(
            key,
            logits,
            shape=(k,),
            replace=False,
            rng_mode=rng_mode,
            softness=softness,
            mode=mode,
            method=method,
            standardize=standardize,
        )
        P = P.reshape(*shape, n)
    am = jnp.moveaxis(arr, ax, 0)  # (n, *rest)
    out = jnp.tensordot(P.astype(dt), am, axes=([-1], [0]))  # (*shape, *rest)
    # jax.random.choice puts the sample axes where `axis` was
    lead = len(shape)
    return jnp.moveaxis(out, tuple(range(lead, lead + ax)), tuple(range(ax)))


def permutation(
    key: KeyArray | ArrayLike,
    x: int | ArrayLike,
    axis: int = 0,
    independent: bool = False,
    *,
    rng_mode: str | None = None,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "neuralsort",
    noise: str = "gumbel",
    standardize: bool = False,
    n_iters: int = 20,
) -> Array:
    """Soft ``jax.random.permutation``: ``x`` mixed along ``axis`` by a soft permutation.

    The soft permutation is the soft argsort (:func:`jaxkit.soft.argsort`, ``method``)
    of i.i.d. Gumbel scores, one score vector shared by the whole array, or one per
    1-D slice along ``axis`` with ``independent=True``. ``permutation(key, jnp.eye(n))``
    returns the soft permutation matrix itself. An int ``x`` means ``arange(x)``.

    ``method="gumbel_sinkhorn"``: the soft permutation is :func:`gumbel_sinkhorn` of an
    all-zero ``log_alpha`` (i.e. ``n_iters`` Sinkhorn steps on an ``n x n`` Gumbel matrix
    over ``softness``; doubly stochastic; modes ``"hard"``, ``"_hard"``, ``"smooth"``;
    ``"_hard"`` is the exact assignment on the same noise, a uniform random permutation,
    computed on the host). ``rng_mode`` sets the Gumbel draw's ``mode`` (the ``"hard"``
    path calls ``jax.random.permutation``, which has none).

    Returns:
      Array of ``x``'s shape and floating dtype.

    References:
      Grover et al., NeuralSort <https://arxiv.org/abs/1903.08850>, 2019; Mena et al.,
      Gumbel-Sinkhorn <https://arxiv.org/abs/1802.08665>, 2018.
    """
    _check(key, mode, softness, noise, ("gumbel",))
    _check_rng_mode(rng_mode)
    if method == "gumbel_sinkhorn":
        _static_int(n_iters, "n_iters", 1)
        if mode not in GS_MODES:
            raise ValueError(
                f"`method='gumbel_sinkhorn'` supports mode {GS_MODES}; got mode={mode!r}."
            )
    arr = _int_or_array(x, "x", 0)
    ax = V.axis(axis, arr.ndim)
    n = arr.shape[ax]
    dt = arr.dtype
    xm = jnp.moveaxis(arr, ax, -1)  # (..., n)
    if mode == "hard":
        return jax.random.permutation(key, arr, axis=ax, independent=independent).astype(dt)
    if n == 0:
        return arr
    if method == "gumbel_sinkhorn":
        la = jnp.zeros((*xm.shape[:-1], n, n) if independent else (n, n), dt)
        P = gumbel_sinkhorn(
            key, la, softness=softness, n_iters=n_iters, mode=mode, rng_mode=rng_mode
        ).astype(dt)
        sub = "...ij,...j->...i" if independent else "ij,...j->...i"
        return jnp.moveaxis(jnp.einsum(sub, P, xm), -1, ax)
    sm = _soft_mode(mode)
    if independent:
        g = jax.random.gumbel(key, xm.shape, dt, mode=rng_mode)
        P = _argsort(g, -1, softness=softness, mode=sm, method=method, standardize=standardize)
        out = jnp.einsum("...ij,...j->...i", P.astype(dt), xm)
    else:
        g = jax.random.gumbel(key, (n,), dt, mode=rng_mode)
        P = _argsort(g, -1, softness=softness, mode=sm, method=method, standardize=standardize)
        out = jnp.einsum("ij,...j->...i", P.astype(dt), xm)
    return jnp.moveaxis(out, -1, ax)


def multinomial(
    key: KeyArray | ArrayLike,
    n: int,
    p: ArrayLike,
    *,
    shape: tuple[int, ...] | None = None,
    dtype: Any = None,
    softness: RealScalarLike = 0.1,
    mode: str = "smooth",
    method: str = "softsort",
    noise: str = "gumbel",
    standardize: bool = False,
) -> Array:
    """Soft ``jax.random.multinomial``: sum of ``n`` soft categorical draws (static ``n``).

    ``p`` (..., k) are the category probabilities (last axis); the result has shape
    ``(*shape, k)`` (``shape`` defaults to ``p.shape[:-1]``) and sums to ``n`` along the
    last axis.

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>.
    """
    _check(key, mode, softness, noise, ("gumbel",))
    _static_int(n, "n", 0)
    p = as_float(p)
    if p.ndim == 0:
        raise TypeError("`p` must have at least one dimension (categories last).")
    dt = jnp.dtype(dtype) if dtype is not None else p.dtype
    batch = p.shape[:-1]
    shape = batch if shape is None else _shape(shape)
    _check_broadcast(shape, batch, "p")
    k = p.shape[-1]
    if mode == "hard":
        return jax.random.multinomial(key, n, p, shape=(*shape, k), dtype=dt)
    V.non_negative(p=p)
    if n == 0:
        return jnp.zeros((*shape, k), dt)
    P = categorical(
        key,
        jnp.log(p),
        -1,
        shape=(n, *shape),
        softness=softness,
        mode=mode,
        method=method,
        standardize=standardize,
    )
    return jnp.sum(P, axis=0).astype(dt)


# ----------------------------------------------------------------------------- threshold family


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

    Returns:
      Samples in ``[0, 1]`` of shape ``shape`` (default ``p.shape``), dtype of ``p``
      (the default float for a Python ``p``).

    References:
      Maddison et al., The Concrete distribution <https://arxiv.org/abs/1611.00712>, 2017.
    """
    _check(key, mode, softness, noise, ("uniform", "logistic"))
    _check_rng_mode(rng_mode, ("low", "high"))
    p = as_float(p)
    if noise == "logistic" and mode not in ("hard", "_hard", "smooth"):
        raise ValueError(
            f"`noise='logistic'` supports mode 'hard', '_hard' and 'smooth'; got mode={mode!r}."
        )
    shape = p.shape if shape is None else _shape(shape)
    _check_broadcast(shape, p.shape, "p")
    dt = p.dtype
    if mode == "hard":
        return jax.random.bernoulli(key, jnp.broadcast_to(p, shape), shape, mode=rng_mode).astype(
            dt
        )
    p = V.error_if(p, jnp.any((p < 0) | (p > 1) | jnp.isnan(p)), "`p` must lie in [0, 1].")
    p = jnp.broadcast_to(p, shape)
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
    dt = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"`dtype` must be floating for soft samples, got {dt}.")
    shape = _shape(shape)
    if mode == "hard":
        _check(key, mode, softness, noise, ("uniform", "logistic"))
        return jax.random.rademacher(key, shape, dt)
    b = bernoulli(key, jnp.full(shape, 0.5, dt), softness=softness, mode=mode, noise=noise)
    return 2 * b - 1


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
    _check(key, mode, softness, noise, ("uniform", "logistic"))
    _static_int(n, "n", 0)
    p = as_float(p)
    dt = jnp.dtype(dtype) if dtype is not None else p.dtype
    shape = p.shape if shape is None else _shape(shape)
    _check_broadcast(shape, p.shape, "p")
    if mode == "hard":
        return jax.random.binomial(key, n, p, shape, dt)
    if n == 0:
        return jnp.zeros(shape, dt)
    b = bernoulli(key, p, (n, *shape), softness=softness, mode=mode, noise=noise)
    return jnp.sum(b, axis=0).astype(dt)


# ----------------------------------------------------------------------------- Gumbel-Sinkhorn


def _assignment_host(z: Any) -> np.ndarray:
    """Row -> column of the max-weight perfect matching of every ``(n, n)`` matrix of ``z``."""
    from scipy.optimize import linear_sum_assignment

    z = np.asarray(z, np.float64)
    n = z.shape[-1]
    flat = z.reshape(-1, n, n)
    out = np.empty(flat.shape[:2], np.int32)
    for b in range(flat.shape[0]):
        rows, cols = linear_sum_assignment(flat[b], maximize=True)
        out[b, rows] = cols
    return out.reshape(z.shape[:-1])


def _assignment(z: Array) -> Array:
    """Exact assignment on the host (``jax.pure_callback``); no gradient."""
    spec = jax.ShapeDtypeStruct(z.shape[:-1], jnp.int32)
    return jax.pure_callback(
        _assignment_host, spec, lax.stop_gradient(z), vmap_method="expand_dims"
    )


def _sinkhorn_log(z: Array, n_iters: int) -> Array:
    """``n_iters`` rounds of row then column normalisation of ``exp(z)`` in log space."""

    def body(_, v):
        v = v - jax.nn.logsumexp(v, axis=-1, keepdims=True)
        return v - jax.nn.logsumexp(v, axis=-2, keepdims=True)

    return lax.fori_loop(0, n_iters, body, z)


def gumbel_sinkhorn(
    key: KeyArray | ArrayLike,
    log_alpha: ArrayLike,
    *,
    softness: RealScalarLike,
    n_iters: int = 20,
    noise: str = "gumbel",
    mode: str = "smooth",
    rng_mode: str | None = None,
    return_log_probs: bool = False,
) -> Array:
    """Gumbel-Sinkhorn: a relaxed random permutation matrix (Mena et al. 2018).

    With ``G`` i.i.d. standard Gumbel noise of ``log_alpha``'s shape, ``mode="smooth"``
    returns ``S((log_alpha + G) / softness)``, where the Sinkhorn operator ``S`` runs
    ``n_iters`` rounds of row then column normalisation of ``exp`` in log space
    (``logsumexp``; no overflow at small ``softness``). The result is doubly stochastic:
    columns sum to 1 exactly, rows up to the Sinkhorn tolerance after ``n_iters``
    rounds (more rounds are needed as ``softness`` shrinks). As ``softness -> 0`` it tends
    to the permutation matrix maximising ``<P, log_alpha + G>`` (unique almost surely),
    which ``mode="hard"`` (and ``"_hard"``, the same: both use this function's own noise)
    returns exactly: a linear assignment solved by ``scipy.optimize.linear_sum_assignment``
    on the host through ``jax.pure_callback`` (works under ``jit`` and ``vmap``; no
    gradient: the output is a constant of ``log_alpha``; under ``vmap`` the whole batch goes
    to the host in one call; a sharded input is gathered, the output is replicated, and the
    host round-trip dominates the cost on accelerators). With ``log_alpha = 0`` the hard
    sample is a uniformly random permutation. ``-inf`` entries of ``log_alpha``
    (forbidden assignments) are floored at ``-1e30``; NaN raises.

    Args:
      key: PRNG key.
      log_alpha: scores ``(..., n, n)``; leading axes are a batch (independent noise).
      softness: temperature ``tau > 0`` (traced), keyword-only and required.
      n_iters: static number of Sinkhorn rounds (>= 1).
      noise: ``"gumbel"`` or ``"none"`` (plain Sinkhorn of ``log_alpha / softness``).
      mode: ``"smooth"``, ``"hard"`` or ``"_hard"``.
      rng_mode: ``mode`` of ``jax.random.gumbel`` (``None``, ``"low"``, ``"high"``).
      return_log_probs: static bool; return ``log P``, taken directly from the log-domain
        iterates (finite at any softness in smooth mode; ``0``/``-inf`` in hard modes).

    Returns:
      Array of ``log_alpha``'s shape and floating dtype; row ``i`` spreads over the
      columns that position ``i`` is mapped to (hard: ``P[i, j] = 1`` iff ``i -> j``).

    References:
      Mena, Belanger, Linderman & Snoek, Learning latent permutations with
      Gumbel-Sinkhorn networks <https://arxiv.org/abs/1802.08665>, 2018; Sinkhorn, A
      relationship between arbitrary positive matrices and doubly stochastic matrices,
      1964.
    """
    V.is_key(key)
    V.one_of(GS_MODES, mode=mode)
    V.one_of(GS_NOISES, noise=noise)
    check_softness(softness)
    _check_rng_mode(rng_mode)
    _static_int(n_iters, "n_iters", 1)
    _check_lp(return_log_probs, None)
    la = as_float(log_alpha)
    if la.ndim < 2 or la.shape[-1] != la.shape[-2]:
        raise TypeError(f"`log_alpha` must have shape (..., n, n), got {la.shape}.")
    dt = la.dtype
    la = _finite_floor(la, "log_alpha")
    if noise == "gumbel":
        z = la + jax.random.gumbel(key, la.shape, dt, mode=rng_mode)
    else:
        z = la
    n = la.shape[-1]
    if n == 0:
        return jnp.zeros_like(la)
    if mode in ("hard", "_hard"):
        return _finish(jax.nn.one_hot(_assignment(z), n, dtype=dt), False, return_log_probs, None)
    cdt = compute_dtype(dt)
    zc = _guard_softness(z.astype(cdt), softness) / jnp.asarray(softness).astype(cdt)
    v = _sinkhorn_log(zc, n_iters)
    return (v if return_log_probs else jnp.exp(v)).astype(dt)


# ----------------------------------------------------------------------------- schedules


def _check_schedule(start, end, steps):
    V.finite_scalar(start=start)
    V.finite_scalar(end=end)
    V.positive(start=start)
    V.positive(end=end)
    _static_int(steps, "steps", 1)


def exponential_schedule(
    start: RealScalarLike, end: RealScalarLike, steps: int
) -> Callable[[ArrayLike], Array]:
    """Geometric temperature annealing: ``step -> start * (end / start) ** (step / steps)``.

    The step is clipped to ``[0, steps]`` (constant ``end`` afterwards). The returned
    callable is pure and jittable (``step`` may be traced), like an optax schedule, e.g.
    ``softness = sched(step)`` inside a training step with Gumbel-Sinkhorn or Gumbel-softmax.

    Args:
      start: softness at step 0 (> 0).
      end: softness at ``steps`` and later (> 0).
      steps: static int >= 1.

    Returns:
      ``schedule(step) -> softness`` (a float scalar of the default float dtype).

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144> (annealed temperature);
      Mena et al. 2018 <https://arxiv.org/abs/1802.08665>.
    """
    _check_schedule(start, end, steps)

    def schedule(step: ArrayLike) -> Array:
        dt = jnp.result_type(float)
        t = jnp.clip(jnp.asarray(step).astype(dt) / jnp.asarray(steps, dt), 0.0, 1.0)
        s0, s1 = jnp.asarray(start).astype(dt), jnp.asarray(end).astype(dt)
        return s0 * jnp.exp(t * (jnp.log(s1) - jnp.log(s0)))

    return schedule


def linear_schedule(
    start: RealScalarLike, end: RealScalarLike, steps: int
) -> Callable[[ArrayLike], Array]:
    """Linear temperature annealing from ``start`` to ``end`` over ``steps`` (then ``end``).

    Jittable like :func:`exponential_schedule`.

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>.
    """
    _check_schedule(start, end, steps)

    def schedule(step: ArrayLike) -> Array:
        dt = jnp.result_type(float)
        t = jnp.clip(jnp.asarray(step).astype(dt) / jnp.asarray(steps, dt), 0.0, 1.0)
        s0, s1 = jnp.asarray(start).astype(dt), jnp.asarray(end).astype(dt)
        return s0 + t * (s1 - s0)

    return schedule


def temperature_schedule(
    start: RealScalarLike, end: RealScalarLike, steps: int, *, kind: str = "exponential"
) -> Callable[[ArrayLike], Array]:
    """Softness schedule ``step -> softness`` (``kind``: ``"exponential"`` or ``"linear"``).

    See :func:`exponential_schedule` and :func:`linear_schedule`.

    References:
      Mena et al. 2018 <https://arxiv.org/abs/1802.08665>.
    """
    V.one_of(("exponential", "linear"), kind=kind)
    f = exponential_schedule if kind == "exponential" else linear_schedule
    return f(start, end, steps)


# ----------------------------------------------------------------------------- straight-through


def _st_random(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Straight-through sampler: the ``"_hard"`` sample, gradient of the soft ``mode``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        mode = kwargs.pop("mode", "smooth")
        if mode in ("hard", "_hard"):
            return fn(*args, mode=mode, **kwargs)
        hard = fn(*args, mode="_hard", **kwargs)
        soft = fn(*args, mode=mode, **kwargs)
        return _st._combine(hard, soft)

    wrapped.__doc__ = (
        f"Straight-through :func:`{fn.__name__}`: the ``mode='_hard'`` "
        "sample forward, the gradient of ``mode`` (default smooth) backward."
    )
    return wrapped


categorical_st = _st_random(categorical)
choice_st = _st_random(choice)
permutation_st = _st_random(permutation)
multinomial_st = _st_random(multinomial)
bernoulli_st = _st_random(bernoulli)
rademacher_st = _st_random(rademacher)
binomial_st = _st_random(binomial)
gumbel_sinkhorn_st = _st_random(gumbel_sinkhorn)
