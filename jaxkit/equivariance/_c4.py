"""The C_4 (quarter-turn) action on p4 kernels and feature maps, and its Reynolds projector.

Helpers of :class:`jaxkit.equivariance.RECMGroupConvC4` (and of its equivariance tests).
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype as acc_dtype


def c4_kernel_transform(kernel: Array, r: int, *, lifting: bool) -> Array:
    """The action of rotation ``r`` on a p4 kernel ``[C_out, 4, C_in, G_in, k, k]``.

    ``T_r(K)[o, s, i, s'] = rot90(K[o, s-r, i, s'-r], r)`` (no shift of ``s'`` for a
    lifting kernel, ``G_in = 1``). It satisfies ``conv(T_r K, g_r f) = g_r conv(K, f)``
    for the image action :func:`c4_image_act`, so ``mean_r T_r`` is the Reynolds
    projector (a permutation average, hence orthogonal).
    """
    _validate.numeric(kernel=kernel)
    _validate.ndim(kernel, 6, name="kernel")
    k = jnp.roll(kernel, r, axis=1)
    if not lifting:
        k = jnp.roll(k, r, axis=3)
    return jnp.rot90(k, r, axes=(-2, -1))


def c4_conv_reynolds(
    kernel: Float[ArrayLike, "co 4 ci gi k k"], *, lifting: bool
) -> Float[Array, "co 4 ci gi k k"]:
    """Project a p4 (or lifting) kernel onto the C_4-equivariant kernels."""
    _validate.floating(kernel, name="kernel")  # before jnp.asarray: a str names it
    kernel = jnp.asarray(kernel)
    _validate.ndim(kernel, 6, name="kernel")
    if kernel.shape[1] != 4 or kernel.shape[-1] != kernel.shape[-2]:
        raise TypeError(f"`kernel` must have shape (co, 4, ci, gi, k, k), got {kernel.shape}.")
    acc = acc_dtype(kernel.dtype)
    ka = kernel.astype(acc)
    out = sum(c4_kernel_transform(ka, r, lifting=lifting) for r in range(4)) / 4.0
    return out.astype(kernel.dtype)


def c4_image_act(x: Array, r: int, *, regular: bool) -> Array:
    """Rotate feature maps by ``r`` quarter turns: ``[..., C, (4,) H, W]``.

    Regular features (``[..., C, 4, H, W]``) also shift the group axis by ``r``. Any
    leading axes.
    """
    _validate.numeric(x=x)
    r = _validate.python_int(r, name="r")
    y = jnp.rot90(x, r, axes=(-2, -1))
    return jnp.roll(y, r, axis=-3) if regular else y


def c4_image_actions(*, regular_in: bool, regular_out: bool) -> list:
    """The four ``(act_in, act_out)`` pairs of C_4 on feature maps (for metrics)."""
    return [
        (
            lambda v, r=r: c4_image_act(v, r, regular=regular_in),
            lambda v, r=r: c4_image_act(v, r, regular=regular_out),
        )
        for r in range(4)
    ]
