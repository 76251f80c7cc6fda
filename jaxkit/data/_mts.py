"""MTS building blocks: globally normalised example weights and the GSNR estimator.

MTS (Du, Zhao & Li, ICML 2026; code ZILIN003/MTS) learns per-example weights with a
meta-network; spec ``training.md`` section 2. The meta-step and hypergradient are in
``_mts_step``, the features in ``_features`` / ``_forgetting``, the baselines in
``_mts_baselines``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate as V
from jaxkit._typing import accumulation_dtype


def _normalize(raw, class_w, *, axis_name):
    acc = accumulation_dtype(raw.dtype)
    s = raw.astype(acc)
    if class_w is not None:
        s = s * class_w.astype(acc)
    top = jnp.max(s)
    if axis_name is not None:
        top = jax.lax.pmax(top, axis_name)
    s = s / top  # exact 1.0 for equal scores, so identical examples get w == 1 exactly
    total, count = jnp.sum(s), jnp.asarray(s.shape[0], acc)
    if axis_name is not None:  # global batch: every device's weights share one mean
        total, count = jax.lax.psum(total, axis_name), jax.lax.psum(count, axis_name)
    return (s * (count / total)).astype(raw.dtype)


_normalize_jit = jax.jit(_normalize, static_argnames=("axis_name",))


def normalize_weights(
    raw: Float[ArrayLike, " b"],
    class_w: Float[ArrayLike, " b"] | None = None,
    *,
    axis_name: str | None = None,
) -> Float[Array, " b"]:
    """MTS weight normalisation ``w_i = B s_i / sum_j s_j`` (``s = raw * class_w``).

    The weights have mean 1 over the *global* batch: with ``axis_name`` (inside
    ``shard_map``, batch split over that mesh axis) the sum and the count are
    ``psum``-ed, as the authors' code all-reduces them (normalising per device would
    change the meta-gradient, spec 2.7). Invariant to scaling ``raw`` by a constant.
    ``raw`` must be > 0 (a meta-network's sigmoid output); a non-positive, NaN or
    infinite entry raises (so does one of ``class_w``). Jitted (``axis_name`` static).
    """
    V.numeric(raw=raw)  # before jnp.asarray: a str names the argument
    raw = jnp.asarray(raw)
    V.ndim(raw, 1, name="raw")
    V.floating(raw, name="raw")
    V.nonempty(raw, name="raw")  # weights of mean 1 over no example
    if class_w is not None:
        V.numeric(class_w=class_w)
        class_w = jnp.asarray(class_w)
        V.ndim(class_w, 1, name="class_w")
        V.floating(class_w, name="class_w")
        if class_w.shape != raw.shape:
            raise TypeError(f"`class_w` must have shape {raw.shape}, got {class_w.shape}.")
        ok = jnp.all((class_w > 0) & jnp.isfinite(class_w))
        class_w = V.error_if(class_w, ~ok, "`class_w` must be finite and > 0.")
    ok = jnp.all((raw > 0) & jnp.isfinite(raw))  # an inf entry made every weight NaN
    raw = V.error_if(raw, ~ok, "`raw` must be finite and > 0 (and not NaN).")
    return _normalize_jit(raw, class_w, axis_name=axis_name)


class GSNR(NamedTuple):
    """Gradient signal-to-noise ratios of ``K`` gradient samples (spec 2.2)."""

    per_param: Float[Array, " p"]  # mu_p^2 / v_p
    per_param_median: Float[Array, ""]
    per_param_mean: Float[Array, ""]
    aggregate: Float[Array, ""]  # ||mu||^2 / sum_p v_p


def _gsnr(samples):
    x = samples.astype(accumulation_dtype(samples.dtype))
    mu = jnp.mean(x, axis=0)
    var = jnp.mean((x - mu[None, :]) ** 2, axis=0)  # population variance over the K draws
    r = mu**2 / var
    agg = jnp.sum(mu**2) / jnp.sum(var)
    out = GSNR(r, jnp.median(r), jnp.mean(r), agg)
    return jax.tree.map(lambda a: a.astype(samples.dtype), out)


_gsnr_jit = jax.jit(_gsnr)


def gsnr(samples: Float[ArrayLike, "k p"]) -> GSNR:
    """GSNR of ``K`` independent gradient draws ``samples[k]`` (Liu et al., ICLR 2020).

    Per parameter ``r_p = mu_p^2 / v_p`` (``mu``, ``v``: mean and population variance
    over the draws) with its median and mean, and the aggregate ``||mu||^2 / sum_p v_p``.
    Draws are minibatch hypergradients at a fixed ``(theta, phi)``, so the values grow
    with the batch size (the per-example GSNR is ``aggregate / B`` for a fixed
    validation batch). A zero-variance parameter gives ``inf``. Jitted; ``K >= 2``.

    Raises:
      TypeError: ``samples`` not a floating ``[K, P]`` array, or with no parameter
        (``P = 0``: the aggregate would be 0 / 0).
      ValueError: fewer than 2 draws.
    """
    V.numeric(samples=samples)  # before jnp.asarray: a str names the argument
    samples = jnp.asarray(samples)
    V.ndim(samples, 2, name="samples")
    V.floating(samples, name="samples")
    V.nonempty(samples, name="samples", axis=-1, what="parameter")
    if samples.shape[0] < 2:
        raise ValueError(f"`samples` needs K >= 2 draws, got K={samples.shape[0]}.")
    return _gsnr_jit(samples)


__all__ = ["GSNR", "gsnr", "normalize_weights"]
