"""Soft Gumbel samplers: categorical, choice, permutation, multinomial.

Each public function validates its static arguments and concrete values, then calls a
module-level ``jax.jit`` core (static choices static, ``softness``, probabilities and
``log_prob_eps`` traced). See :mod:`jaxkit.soft.random` for the modes and conventions.

References:
  Jang, Gu & Poole <https://arxiv.org/abs/1611.01144>, 2017; Maddison, Mnih & Teh
  <https://arxiv.org/abs/1611.00712>, 2017; Kool, van Hoof & Welling
  <https://arxiv.org/abs/1903.06059>, 2019; Grover et al. <https://arxiv.org/abs/1903.08850>,
  2019.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from jaxkit import _validate as V
from jaxkit._typing import KeyArray, RealScalarLike
from jaxkit.soft import _random_common as RC
from jaxkit.soft._axis_front import check_lp as _check_lp
from jaxkit.soft._axis_front import finish as _finish
from jaxkit.soft._axis_select import argmax as _argmax
from jaxkit.soft._axis_select import argtop_k as _argtop_k
from jaxkit.soft._axis_sort import argsort as _argsort
from jaxkit.soft._common import as_float
from jaxkit.soft._gumbel_sinkhorn import GS_MODES, gumbel_sinkhorn_core

_STATIC = ("mode", "method", "standardize", "rng_mode")


def _categorical_core(
    key, logits, softness, log_prob_eps, *, axis, shape, replace, return_log_probs, **st
):
    mode, method, standardize, rng_mode = (st[k] for k in _STATIC)
    n = logits.shape[axis]
    batch = tuple(s for i, s in enumerate(logits.shape) if i != axis)
    prefix = shape[: len(shape) - len(batch)]
    dt = logits.dtype
    if log_prob_eps is not None:
        logits = V.guard_interval(
            logits, log_prob_eps, name="log_prob_eps", low=0.0, high=1.0, closed="neither"
        )
    lp = {"return_log_probs": return_log_probs, "log_prob_eps": log_prob_eps}
    if mode == "hard":
        idx = jax.random.categorical(
            key, logits, axis=axis, shape=shape, replace=replace, mode=rng_mode
        )
        return _finish(jax.nn.one_hot(idx, n, dtype=dt), False, return_log_probs, log_prob_eps)
    logits = RC.guard_soft(RC.finite_floor(logits), softness, mode)
    kw = {"softness": softness, "mode": RC.soft_mode(mode), "method": method}
    kw.update(standardize=standardize, **lp)
    if replace:
        # same noise layout as jax.random.categorical, so "_hard" == "hard"
        lg = jnp.moveaxis(logits, axis, -1)  # (*batch, n)
        neg = axis - logits.ndim
        full = list(shape[len(shape) - len(batch) :])
        full.insert(neg % logits.ndim, n)
        g = jax.random.gumbel(key, (*prefix, *full), dt, mode=rng_mode)
        g = jnp.moveaxis(g, len(prefix) + neg % logits.ndim, -1)
        return _argmax(g + jnp.broadcast_to(lg, g.shape), -1, **kw)
    k = math.prod(prefix)
    pert = logits + jax.random.gumbel(key, logits.shape, dt, mode=rng_mode)
    pert = jnp.broadcast_to(jnp.moveaxis(pert, axis, -1), (*shape[len(prefix) :], n))
    if k == 0:
        return jnp.zeros((*shape, n), dt)
    P = jnp.moveaxis(_argtop_k(pert, k, -1, **kw), -2, 0)  # (k, *batch, n)
    return P.reshape(*prefix, *P.shape[1:]).astype(dt)


_categorical = jax.jit(
    _categorical_core, static_argnames=("axis", "shape", "replace", "return_log_probs", *_STATIC)
)


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
        probabilities (any rank >= 1; the other axes are batch axes). ``-inf`` entries are
        floored at ``-1e30``.
      axis: the category axis.
      shape: sample shape, broadcast-compatible with ``logits.shape`` without ``axis``.
      replace: sample with (``True``) or without replacement.
      rng_mode: ``mode`` of the Gumbel draw (``None``, ``"low"``, ``"high"``; static), as
        ``jax.random.categorical``'s ``mode``.
      softness: temperature (finite, > 0), traced.
      mode: ``"hard"``, ``"_hard"``, ``"smooth"``, ``"c0"``, ``"c1"``, ``"c2"``.
      method: soft argmax method (``"softsort"``, ``"neuralsort"``, ``"ot"``, ``"network"``).
      noise: ``"gumbel"``.
      standardize: standardize the perturbed logits before the soft argmax.
      return_log_probs: static bool; return the log of the relaxed sample weights (not a
        log-likelihood under ``logits``): exact ``-inf`` at the zeros of sparse/hard modes,
        ``log_softmax`` directly for ``mode="smooth"``, ``method="softsort"``.
      log_prob_eps: with ``return_log_probs``: floor the weights at this value in (0, 1)
        and renormalise before the log (finite values and gradients); traced.

    Returns:
      Soft index with the dtype of ``logits`` (one-hot in the hard modes), or its log.

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>; Maddison et al. 2017
      <https://arxiv.org/abs/1611.00712>; Kool et al. 2019
      <https://arxiv.org/abs/1903.06059>.
    """
    RC.check_sampler(key, mode, softness, noise, ("gumbel",))
    RC.check_rng_mode(rng_mode)
    replace = V.flag(replace, name="replace")
    return_log_probs = _check_lp(return_log_probs, log_prob_eps)
    logits = as_float(logits, name="logits")
    if logits.ndim == 0:
        raise TypeError("`logits` must have at least one dimension.")
    ax = V.axis(axis, logits.ndim)
    n = logits.shape[ax]
    batch = tuple(s for i, s in enumerate(logits.shape) if i != ax)
    shape = batch if shape is None else RC.sample_shape(shape)
    RC.check_broadcast(shape, batch, "logits")
    k = math.prod(shape[: len(shape) - len(batch)])
    if not replace and k > n:
        raise ValueError(
            f"Number of samples without replacement (k={k}) cannot exceed the "
            f"number of categories ({n}); see `shape`."
        )
    if mode != "hard" and RC.is_concrete(logits):
        RC.no_nan(logits, "logits")
    standardize = V.flag(standardize, name="standardize")  # a static argument
    st = {"mode": mode, "method": method, "standardize": standardize, "rng_mode": rng_mode}
    return _categorical(
        key, logits, softness, log_prob_eps, axis=ax, shape=shape, replace=replace,
        return_log_probs=return_log_probs, **st,
    )  # fmt: skip


def _choice_core(key, arr, p, softness, *, shape, replace, axis, **st):
    mode, rng_mode = st["mode"], st["rng_mode"]
    n, dt = arr.shape[axis], arr.dtype
    if p is None:
        logits = jnp.zeros((n,), dt)
    else:
        p = RC.guard_probabilities(p.astype(dt))
        logits = jnp.log(p)
    if mode == "hard":
        out = jax.random.choice(
            key, arr, shape=shape, replace=replace, p=p, axis=axis, mode=rng_mode
        )
        return out.astype(dt)
    common = {"axis": 0, "return_log_probs": False, **st}
    if replace:
        P = _categorical_core(key, logits, softness, None, shape=shape, replace=True, **common)
    else:
        k = math.prod(shape)
        P = _categorical_core(key, logits, softness, None, shape=(k,), replace=False, **common)
        P = P.reshape(*shape, n)
    out = jnp.tensordot(P.astype(dt), jnp.moveaxis(arr, axis, 0), axes=([-1], [0]))
    lead = len(shape)  # jax.random.choice puts the sample axes where `axis` was
    return jnp.moveaxis(out, tuple(range(lead, lead + axis)), tuple(range(axis)))


_choice = jax.jit(_choice_core, static_argnames=("shape", "replace", "axis", *_STATIC))


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
    ``jax.random.choice`` (hard) and to the Gumbel draw (other modes). ``p`` (traced) must
    be non-negative.

    Returns:
      Array of the floating dtype of ``a`` (the default float for integer ``a``).

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>; Kool et al. 2019
      <https://arxiv.org/abs/1903.06059>.
    """
    RC.check_sampler(key, mode, softness, noise, ("gumbel",))
    RC.check_rng_mode(rng_mode)
    replace = V.flag(replace, name="replace")
    shape = RC.sample_shape(shape)
    arr = RC.int_or_array(a, "a", 1)
    ax = V.axis(axis, arr.ndim)
    n = arr.shape[ax]
    if p is not None:
        p = as_float(V.real_array(p, name="p"), name="p")  # a bool `p`: TypeError
        if p.shape != (n,):
            raise TypeError(f"`p` must have shape ({n},), got {p.shape}.")
        if RC.is_concrete(p):
            RC.guard_probabilities(p)
    standardize = V.flag(standardize, name="standardize")  # a static argument
    st = {"mode": mode, "method": method, "standardize": standardize, "rng_mode": rng_mode}
    return _choice(key, arr, p, softness, shape=shape, replace=replace, axis=ax, **st)


def _permutation_core(key, arr, softness, *, axis, independent, n_iters, **st):
    mode, method, standardize, rng_mode = (st[k] for k in _STATIC)
    n, dt = arr.shape[axis], arr.dtype
    xm = jnp.moveaxis(arr, axis, -1)  # (..., n)
    if mode == "hard":
        return jax.random.permutation(key, arr, axis=axis, independent=independent).astype(dt)
    if n == 0:
        return arr
    sub = "...ij,...j->...i" if independent else "ij,...j->...i"
    if method == "gumbel_sinkhorn":
        la = jnp.zeros((*xm.shape[:-1], n, n) if independent else (n, n), dt)
        P = gumbel_sinkhorn_core(
            key,
            la,
            softness,
            n_iters=n_iters,
            noise="gumbel",
            mode=mode,
            rng_mode=rng_mode,
            return_log_probs=False,
        )
    else:
        xm = RC.guard_soft(xm, softness, mode)
        g = jax.random.gumbel(key, xm.shape if independent else (n,), dt, mode=rng_mode)
        sm = RC.soft_mode(mode)
        P = _argsort(g, -1, softness=softness, mode=sm, method=method, standardize=standardize)
    return jnp.moveaxis(jnp.einsum(sub, P.astype(dt), xm), -1, axis)


_permutation = jax.jit(
    _permutation_core, static_argnames=("axis", "independent", "n_iters", *_STATIC)
)


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
    RC.check_sampler(key, mode, softness, noise, ("gumbel",))
    RC.check_rng_mode(rng_mode)
    independent = V.flag(independent, name="independent")
    n_iters = V.python_int(n_iters, name="n_iters", minimum=1)
    if method == "gumbel_sinkhorn" and mode not in GS_MODES:
        raise ValueError(f"`method='gumbel_sinkhorn'` supports mode {GS_MODES}; got mode={mode!r}.")
    arr = RC.int_or_array(x, "x", 0)
    ax = V.axis(axis, arr.ndim)
    standardize = V.flag(standardize, name="standardize")  # a static argument
    st = {"mode": mode, "method": method, "standardize": standardize, "rng_mode": rng_mode}
    return _permutation(key, arr, softness, axis=ax, independent=independent, n_iters=n_iters, **st)


def _multinomial_core(key, p, softness, *, n, shape, dtype, **st):
    k = p.shape[-1]
    if st["mode"] == "hard":
        return jax.random.multinomial(key, n, p, shape=(*shape, k), dtype=dtype)
    p = RC.guard_probabilities(p)
    if n == 0:
        return jnp.zeros((*shape, k), dtype)
    P = _categorical_core(
        key,
        jnp.log(p),
        softness,
        None,
        axis=p.ndim - 1,
        shape=(n, *shape),
        replace=True,
        return_log_probs=False,
        **st,
    )
    return jnp.sum(P, axis=0).astype(dtype)


_multinomial = jax.jit(_multinomial_core, static_argnames=("n", "shape", "dtype", *_STATIC))


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

    ``p`` (..., k) are the category probabilities (last axis; traced, non-negative); the
    result has shape ``(*shape, k)`` (``shape`` defaults to ``p.shape[:-1]``) and sums to
    ``n`` along the last axis.

    Raises:
      TypeError: If ``p`` is not a real array of rank >= 1 with at least one category
        (``k >= 1``), or ``shape`` does not broadcast with ``p.shape[:-1]``.
      ValueError: If ``n < 0``, an option is unknown, or (concrete, soft modes) ``p`` is
        not a probability vector.

    References:
      Jang et al. 2017 <https://arxiv.org/abs/1611.01144>.
    """
    RC.check_sampler(key, mode, softness, noise, ("gumbel",))
    n = V.python_int(n, name="n", minimum=0)
    p = as_float(V.real_array(p, name="p"), name="p")
    if p.ndim == 0:
        raise TypeError("`p` must have at least one dimension (categories last).")
    V.nonempty(p, name="p", axis=-1, what="category")  # no category to draw
    dt = jnp.dtype(dtype) if dtype is not None else p.dtype
    batch = p.shape[:-1]
    shape = batch if shape is None else RC.sample_shape(shape)
    RC.check_broadcast(shape, batch, "p")
    if mode != "hard" and RC.is_concrete(p):
        RC.guard_probabilities(p)
    standardize = V.flag(standardize, name="standardize")  # a static argument
    st = {"mode": mode, "method": method, "standardize": standardize, "rng_mode": None}
    return _multinomial(key, p, softness, n=n, shape=shape, dtype=dt, **st)
