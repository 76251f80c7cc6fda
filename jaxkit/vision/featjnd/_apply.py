"""Uses of a FeatJND map: shaped distortion at matched strength, token-wise quantization.

Spec ``vision.md`` section 3.2 ("Applications"; the quantization details are **[R]**).

* Matched strength: ``delta_J = alpha * s * z`` (:func:`jnd_perturbation`) against a
  Gaussian ``delta_G`` rescaled **per sample** to the same l2 norm
  (:func:`matched_gaussian`), i.e. the same feature SNR (:func:`feature_snr_db`).
* Token-wise quantization: tokens are the positions along ``token_axes`` (spatial
  positions of ``[B, C, H, W]`` features by default); token ``t`` gets a uniform
  quantiser of step ``Delta_t`` proportional to the mean of ``s`` over its other axes.
  The budget ``(1/n) sum_t Delta_t^2 = budget_rms^2`` (nominal noise power
  ``Delta^2 / 12``) is the same, per sample, for the three modes of
  :func:`token_steps`: ``"featjnd"``, ``"permute"`` (the same multiset of steps
  shuffled across tokens) and ``"uniform"`` (``Delta_t = budget_rms``).
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate as V
from jaxkit._typing import accumulation_dtype
from jaxkit.sharding import gather_sharded
from jaxkit.vision.featjnd._estimator import _check_features, _check_pair

_MODES = ("featjnd", "uniform", "permute")


def _like(x):
    """The sharding of ``x`` (random draws of its shape get its layout)."""
    return jax.typeof(x).sharding


def _check_map(s, name="s"):
    s = _check_features(s, name=name)
    return V.error_if(s, ~jnp.all(s >= 0), f"`{name}` must be >= 0 (a tolerance map).")


def _perturb(s, key, alpha):
    z = jax.random.normal(key, s.shape, accumulation_dtype(s.dtype), out_sharding=_like(s))
    return (jnp.asarray(alpha, z.dtype) * s.astype(z.dtype) * z).astype(s.dtype)


_perturb_jit = jax.jit(_perturb)


def jnd_perturbation(
    s: Float[ArrayLike, "b ..."], *, key: jax.Array, alpha: float | ArrayLike = 1.0
) -> Float[Array, "b ..."]:
    """FeatJND-shaped noise ``delta_J = alpha * s * z``, ``z ~ N(0, I)``.

    Args:
      s: Tolerance map ``[B, ...]`` of any rank >= 2 (>= 0, finite).
      key: Typed key for ``z``.
      alpha: Strength, traced, >= 0.

    Returns:
      ``delta_J`` in the shape and dtype of ``s``. Jitted.
    """
    s = _check_map(s)
    V.is_key(key)
    s = V.guard_non_negative(s, alpha, name="alpha")
    return _perturb_jit(s, key, alpha)


def _sq_norms(x):
    acc = accumulation_dtype(x.dtype)
    return jnp.sum(jnp.square(x.astype(acc)).reshape(x.shape[0], -1), axis=1)


def _matched(delta, key):
    acc = accumulation_dtype(delta.dtype)
    g = jax.random.normal(key, delta.shape, acc, out_sharding=_like(delta))
    scale = jnp.sqrt(_sq_norms(delta) / _sq_norms(g))
    return (g * scale.reshape((-1,) + (1,) * (delta.ndim - 1))).astype(delta.dtype)


_matched_jit = jax.jit(_matched)


def matched_gaussian(delta: Float[ArrayLike, "b ..."], *, key: jax.Array) -> Float[Array, "b ..."]:
    """Isotropic Gaussian noise with the l2 norm of ``delta``, sample by sample.

    ``delta_G[b] = g[b] * ||delta[b]|| / ||g[b]||`` with ``g ~ N(0, I)``: the same
    energy (and feature SNR) per sample, not merely per batch. ``delta`` is ``[B, ...]``
    of any rank >= 2 (floating, finite). Jitted.
    """
    delta = _check_features(delta, name="delta")
    V.is_key(key)
    return _matched_jit(delta, key)


def _snr(f, delta):
    return (10.0 * jnp.log10(_sq_norms(f) / _sq_norms(delta))).astype(f.dtype)


_snr_jit = jax.jit(_snr)


def feature_snr_db(
    f: Float[ArrayLike, "b ..."], delta: Float[ArrayLike, "b ..."]
) -> Float[Array, " b"]:
    """Per-sample feature SNR ``10 log10(||f||^2 / ||delta||^2)`` in dB. Jitted."""
    f, delta = _check_pair(f, delta, names=("f", "delta"), min_ndim=2)
    return _snr_jit(f, delta)


def _steps(s, key, budget_rms, *, mode, token_axes):
    acc = accumulation_dtype(s.dtype)
    other = tuple(a for a in range(1, s.ndim) if a not in token_axes)
    m = jnp.mean(s.astype(acc), axis=other, keepdims=True)  # per-token mean tolerance
    b = jnp.asarray(budget_rms, acc)
    flat = m.reshape(m.shape[0], -1)
    if mode == "uniform":
        steps = jnp.full_like(m, 1.0) * b
    else:
        rms = jnp.sqrt(jnp.mean(flat * flat, axis=1))
        steps = b * m / rms.reshape((-1,) + (1,) * (m.ndim - 1))
        if mode == "permute":  # a uniformly random permutation per sample: argsort of noise
            flat = steps.reshape(m.shape[0], -1)
            u = jax.random.uniform(key, flat.shape, acc, out_sharding=_like(flat))
            perm = jnp.argsort(u, axis=1)
            steps = jnp.take_along_axis(flat, perm, axis=1).reshape(m.shape)
    return steps.astype(s.dtype)


_steps_jit = jax.jit(_steps, static_argnames=("mode", "token_axes"))


def token_steps(
    s: Float[ArrayLike, "b ..."],
    *,
    budget_rms: float | ArrayLike,
    mode: str = "featjnd",
    key: jax.Array | None = None,
    token_axes: Sequence[int] = (2, 3),
) -> Float[Array, "b ..."]:
    """Quantiser step sizes per token at a fixed budget ``mean_t Delta_t^2 = budget_rms^2``.

    Args:
      s: Tolerance map ``[B, ...]`` of any rank >= 2 that has the ``token_axes`` (>= 0;
        in ``"featjnd"``/``"permute"`` each sample needs a positive mean on some token).
      budget_rms: RMS step ``sqrt(mean_t Delta_t^2)`` of every sample, traced, > 0.
      mode: ``"featjnd"`` (``Delta_t`` proportional to the mean of ``s`` over the
        token's other axes), ``"permute"`` (those steps randomly permuted across the
        tokens of each sample; needs ``key``) or ``"uniform"`` (``Delta_t = budget_rms``).
      key: Typed key (``"permute"`` only; ignored otherwise).
      token_axes: Static axes of ``s`` (not 0) that index tokens; the default is the
        spatial positions of ``[B, C, H, W]`` features. ``(1, 2, 3)`` gives every
        feature its own step; the nominal budget then mostly buys large steps on
        features that are (near) zero, which quantise for free, so compare such steps
        with others at equal true MSE, not at equal ``budget_rms`` (docs: vision).

    Returns:
      Steps of the rank of ``s`` with size 1 on the non-token axes (they broadcast
      against the features), dtype of ``s``. The budget is the same in all modes (the
      permutation keeps the multiset exactly). Jitted.
    """
    s = _check_map(s)
    V.one_of(_MODES, mode=mode)
    axes = tuple(V.axis(V.python_int(a, name="token_axes"), s.ndim, name="token_axes")
                 for a in token_axes)  # fmt: skip
    if not axes or 0 in axes or len(set(axes)) != len(axes):
        raise ValueError(f"`token_axes` must be distinct non-batch axes, got {tuple(token_axes)}.")
    if key is not None:  # checked in every mode: a seed here is a mistake in any mode
        V.is_key(key)
    if mode == "permute":
        if key is None:
            raise ValueError("`key` is required for mode='permute'.")
    else:
        key = jax.random.key(0)  # unused: one traced signature for every mode
    if mode != "uniform":
        pos = jnp.any(s.reshape(s.shape[0], -1) > 0, axis=1)
        s = V.error_if(s, ~jnp.all(pos), "`s` must have a positive entry in every sample.")
    s = V.guard_positive(s, budget_rms, name="budget_rms")
    return _steps_jit(s, key, budget_rms, mode=mode, token_axes=tuple(sorted(axes)))


def _quantize(f, steps, key, *, dither, ste):
    acc = accumulation_dtype(f.dtype)
    x, d = f.astype(acc), steps.astype(acc)
    u = (
        jax.random.uniform(key, f.shape, acc, -0.5, 0.5, out_sharding=_like(f))
        if dither
        else jnp.zeros((), acc)
    )
    q = d * (jnp.round(x / d + u) - u)
    if ste:
        q = x + jax.lax.stop_gradient(q - x)
    return q.astype(f.dtype)


_quantize_jit = jax.jit(_quantize, static_argnames=("dither", "ste"))


def quantize(
    f: Float[ArrayLike, "b ..."],
    steps: Float[ArrayLike, "b ..."],
    *,
    key: jax.Array | None = None,
    ste: bool = False,
) -> Float[Array, "b ..."]:
    """Uniform mid-tread quantisation ``steps * round(f / steps)``.

    Args:
      f: Features.
      steps: Step sizes (> 0, finite) of the rank of ``f``, broadcasting against it
        (e.g. from :func:`token_steps`).
      key: Optional typed key for subtractive dither
        ``steps * (round(f / steps + u) - u)``, ``u ~ U(-1/2, 1/2)``.
      ste: Straight-through estimator: the gradient w.r.t. ``f`` is the identity
        (otherwise it is 0 almost everywhere).

    Returns:
      The quantised features, shape and dtype of ``f``. Jitted.
    """
    ste = V.flag(ste, name="ste")
    V.floating(f, name="f")  # before jnp.asarray: a string names the argument
    V.floating(steps, name="steps")
    f, steps = jnp.asarray(f), jnp.asarray(steps)
    if steps.ndim != f.ndim:
        raise TypeError(f"`steps` must have rank {f.ndim} (as `f`), got shape {steps.shape}.")
    try:
        if jnp.broadcast_shapes(f.shape, steps.shape) != f.shape:
            raise ValueError
    except ValueError:
        raise TypeError(
            f"`steps` of shape {steps.shape} must broadcast to `f` of shape {f.shape}."
        ) from None
    if steps.dtype != f.dtype:
        raise TypeError(f"`steps` must have dtype {f.dtype}, got {steps.dtype}.")
    f = V.all_finite(f, name="f")
    steps = V.error_if(
        steps, ~jnp.all((steps > 0) & jnp.isfinite(steps)), "`steps` must be finite and > 0."
    )
    if key is not None:
        V.is_key(key)
    dither = key is not None
    key = jax.random.key(0) if key is None else key
    return _quantize_jit(f, steps, key, dither=dither, ste=ste)


class StrengthCurve(NamedTuple):
    """Result of :func:`matched_strength_curve`, one entry per strength ``alpha``.

    Attributes:
      alphas: ``[A]`` the strengths.
      acc_featjnd: ``[A]`` metric under ``delta_J = alpha * s * z``.
      acc_gaussian: ``[A]`` metric under isotropic Gaussian noise of the same per-sample
        l2 norm.
      snr_db: ``[A]`` median per-sample feature SNR (dB) of ``delta_J`` (equal for both).
    """

    alphas: Any
    acc_featjnd: Any
    acc_gaussian: Any
    snr_db: Any


def _accuracy(logits, y):
    return jnp.mean((jnp.argmax(logits, axis=-1) == y).astype(logits.dtype))


def _curve(head_params, f, y, s, alphas, key, *, head_static, metric):
    head = eqx.combine(head_params, head_static)
    acc = accumulation_dtype(f.dtype)
    k1, k2 = jax.random.split(key)
    base = _perturb(s, k1, jnp.ones((), acc))  # s * z: one draw, scaled by alpha
    gauss = _matched(base, k2)  # its per-sample l2 match (scales with alpha too)
    snr0 = _snr(f, base).astype(acc)
    snr0 = gather_sharded(snr0)  # the median sorts the batch axis
    score = _accuracy if metric is None else metric

    def one(a):
        a = a.astype(f.dtype)
        m_j = score(jax.vmap(head)(f + a * base), y)
        m_g = score(jax.vmap(head)(f + a * gauss), y)
        snr = jnp.median(snr0 - 20.0 * jnp.log10(a.astype(acc)))
        return m_j.astype(f.dtype), m_g.astype(f.dtype), snr.astype(f.dtype)

    mj, mg, snr = jax.lax.map(one, alphas)
    return StrengthCurve(alphas, mj, mg, snr)


_curve_jit = jax.jit(_curve, static_argnames=("head_static", "metric"))


def _logits(head_params, f, *, head_static):
    return jax.vmap(eqx.combine(head_params, head_static))(f)


# only its ``eval_shape`` is used (the head's K for the default metric's label check)
_logits_jit = jax.jit(_logits, static_argnames=("head_static",))


def matched_strength_curve(
    head: Callable[[Array], Array],
    f: Float[ArrayLike, "b ..."],
    y: ArrayLike,
    s: Float[ArrayLike, "b ..."],
    alphas: Float[ArrayLike, " a"],
    *,
    key: jax.Array,
    metric: Callable[[Array, Array], Array] | None = None,
) -> StrengthCurve:
    """Metric of the frozen head under FeatJND-shaped vs matched Gaussian noise, per alpha.

    One jitted sweep (``lax.map`` over ``alphas``) with common random numbers: a single
    draw ``z`` gives ``delta_J(alpha) = alpha * s * z`` and a single Gaussian draw,
    rescaled per sample to ``||s * z||`` (:func:`matched_gaussian`), gives ``delta_G(alpha)
    = alpha * delta_G(1)``; both have the same per-sample l2 norm at every alpha.

    Args:
      head: The frozen head, applied per sample (``jax.vmap(head)(f)`` gives logits): an
        equinox module or any callable; its arrays are traced, the rest is static.
      f: Clean features ``[B, ...]``.
      y: Labels ``[B]`` (what ``metric`` compares against): integer class ids in
        ``[0, K)`` (``K`` the head's logits) for the default metric, any real array for a
        given ``metric``.
      s: Tolerance map, the shape and dtype of ``f`` (>= 0).
      alphas: Strengths ``[A]`` (> 0), traced.
      key: Typed key for the two draws.
      metric: Static ``metric(logits [B, K], y) -> scalar``; default top-1 accuracy.
        Pass a module-level function (a fresh closure recompiles).

    Returns:
      :class:`StrengthCurve`.

    Raises:
      TypeError: ``f`` or ``s`` not a floating array (a string included), ``s`` not the
        shape/dtype of ``f``, ``alphas`` not 1-D floating, ``y`` not integer (default
        metric) or not real (a given ``metric``) or without the batch size (not ``[B]``
        for the default metric), ``key`` not a PRNG key.
      ValueError: negative or non-finite ``s``, ``alphas`` not > 0, a ``y`` outside
        ``[0, K)`` for the default metric (traced: under ``jit``).
    """
    V.floating(f, name="f")  # before jnp.asarray: a string names the argument
    if metric is None:  # top-1 accuracy: 2.5 would silently never equal an argmax
        V.integer(y, name="y")
    else:  # whatever the user's metric compares against
        V.real(y, name="y")
    V.floating(alphas, name="alphas")
    f, y, alphas = (jnp.asarray(a) for a in (f, y, alphas))
    V.min_ndim(f, 2, name="f")
    s = _check_map(s)
    V.same_shape(f=f, s=s)
    if s.dtype != f.dtype:
        raise TypeError(f"`s` must have dtype {f.dtype}, got {s.dtype}.")
    V.ndim(alphas, 1, name="alphas")
    if y.shape[:1] != f.shape[:1]:
        raise TypeError(f"`y` must have the batch size {f.shape[0]} first, got {y.shape}.")
    if metric is None:  # [B, 1] would broadcast against the argmax [B] to [B, B]
        V.shape(y, f.shape[:1], name="y")
    V.is_key(key)
    if metric is not None and not callable(metric):
        raise TypeError(f"`metric` must be callable, got {type(metric).__name__}.")
    alphas = V.error_if(
        alphas, ~jnp.all((alphas > 0) & jnp.isfinite(alphas)), "`alphas` must be finite and > 0."
    )
    if not callable(head):
        raise TypeError(f"`head` must be callable, got {type(head).__name__}.")
    params, static = eqx.partition(head, eqx.is_array)  # arrays traced, the rest static
    if metric is None:  # top-1 accuracy: a label outside [0, K) never matches an argmax
        k = _logits_jit.eval_shape(params, f, head_static=static).shape[-1]  # trace cached
        y = V.ids_in(y, k, name="y")
    return _curve_jit(
        params, f, y, s, alphas.astype(f.dtype), key, head_static=static, metric=metric
    )
