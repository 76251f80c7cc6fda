"""The FeatJND estimator: a small same-resolution conv net giving a tolerance map.

Spec ``vision.md`` section 3.2 (Zhao, Li, Zhu, Zheng, Lin, "FeatJND: just noticeable
difference for deep visual features", arXiv 2601.21933). ``G_theta(f) = s >= 0`` has
the shape of the feature ``f``: 3x3 conv -> ReLU -> 3x3 conv -> ReLU -> 1x1 conv ->
``softplus(. - 1)``. The architecture is the spec's reconstruction **[R]**: the
authors' code (``ruizhao26/FeatJND``) is unpublished.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate as V
from jaxkit._typing import accumulation_dtype


def _conv(x: Array, w: Array, b: Array) -> Array:
    """'SAME' convolution of one feature map ``x [C, H, W]`` with ``w [O, C, k, k]``."""
    y = jax.lax.conv_general_dilated(
        x[None],
        w.astype(x.dtype),
        window_strides=(1, 1),
        padding="SAME",
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        preferred_element_type=accumulation_dtype(x.dtype),
    )[0]
    return y + b[:, None, None].astype(y.dtype)


class FeatJNDEstimator(eqx.Module):
    """Per-element tolerance map ``s = G(f) >= 0`` of one feature map ``f [C, H, W]``.

    Unbatched like the ``jaxkit.nn`` layers (use :func:`tolerance_map` or ``jax.vmap``
    for a batch). Weights are cast to ``f.dtype``; convolutions accumulate in f32
    (f64 for f64 input). The last layer starts at zero, so an untrained estimator
    returns ``softplus(-1) ~ 0.31`` everywhere. **[R]**: reconstructed architecture.

    Example:
      >>> est = FeatJNDEstimator(32, key=jax.random.key(0))
      >>> est(jnp.ones((32, 8, 8))).shape
      (32, 8, 8)
    """

    w1: Array
    b1: Array
    w2: Array
    b2: Array
    w3: Array
    b3: Array

    def __init__(
        self, channels: int, *, hidden: int = 32, key: jax.Array, dtype=jnp.float32
    ) -> None:
        """Build the three convolutions.

        Args:
          channels: Feature channels C (input and output).
          hidden: Channels of the two hidden 3x3 convolutions.
          key: A typed key from ``jax.random.key``.
          dtype: Parameter dtype.
        """
        channels = V.python_int(channels, name="channels", minimum=1)
        hidden = V.python_int(hidden, name="hidden", minimum=1)
        V.is_key(key)
        k1, k2 = jax.random.split(key)
        he = lambda k, shape, fan: jax.random.normal(k, shape, dtype) * (2.0 / fan) ** 0.5  # noqa: E731
        self.w1 = he(k1, (hidden, channels, 3, 3), 9 * channels)
        self.b1 = jnp.zeros((hidden,), dtype)
        self.w2 = he(k2, (hidden, hidden, 3, 3), 9 * hidden)
        self.b2 = jnp.zeros((hidden,), dtype)
        self.w3 = jnp.zeros((channels, hidden, 1, 1), dtype)
        self.b3 = jnp.zeros((channels,), dtype)

    def __call__(self, f: Float[ArrayLike, "C H W"]) -> Float[Array, "C H W"]:
        """The tolerance map of one feature map (same shape and dtype, >= 0)."""
        V.floating(f, name="f")  # before jnp.asarray: a string names `f`
        f = jnp.asarray(f)
        V.ndim(f, 3, name="f")
        if f.shape[0] != self.w1.shape[1]:
            raise TypeError(f"`f` must have {self.w1.shape[1]} channels, got shape {f.shape}.")
        h = jax.nn.relu(_conv(f, self.w1, self.b1)).astype(f.dtype)
        h = jax.nn.relu(_conv(h, self.w2, self.b2)).astype(f.dtype)
        return jax.nn.softplus(_conv(h, self.w3, self.b3) - 1.0).astype(f.dtype)


def _tolerance_map(estimator, f):
    return jax.vmap(estimator)(f)


_tolerance_map_jit = jax.jit(_tolerance_map)


def tolerance_map(estimator: eqx.Module, f: Float[ArrayLike, "b ..."]) -> Float[Array, "b ..."]:
    """The tolerance map ``s = G(f)`` of a batch of features (``vmap`` of the estimator).

    Args:
      estimator: An unbatched module ``G(f_i) -> s_i`` (e.g. :class:`FeatJNDEstimator`);
        a pytree of arrays (it is a traced argument).
      f: Features ``[B, ...]`` at the split point, floating.

    Returns:
      ``s``, the same shape and dtype as ``f``. Jitted.
    """
    f = _check_features(f, name="f")
    return _tolerance_map_jit(estimator, f)


def _check_pair(a, b, *, names, min_ndim):
    """Two floating arrays of one shape and dtype (``names``: theirs, for the errors)."""
    V.floating(a, name=names[0])  # before jnp.asarray: a string names the argument
    V.floating(b, name=names[1])
    a, b = jnp.asarray(a), jnp.asarray(b)
    V.min_ndim(a, min_ndim, name=names[0])
    V.same_shape(**{names[0]: a, names[1]: b})
    if a.dtype != b.dtype:
        raise TypeError(f"`{names[1]}` must have dtype {a.dtype}, got {b.dtype}.")
    return a, b


def _check_features(f, *, name):
    V.floating(f, name=name)  # before jnp.asarray: a string names the argument
    f = jnp.asarray(f)
    V.min_ndim(f, 2, name=name)
    V.nonempty(f, name=name)  # per-sample statistics (and batch means) of no sample
    return V.all_finite(f, name=name)
