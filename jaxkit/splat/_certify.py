"""A view-independent certificate of the safeguards' image bound (AdLift, spec vision.md 5).

Alpha compositing is a convex combination per pixel. Take a ray's composite with one
safeguard ``s`` in it: the Gaussians in front leave transmittance ``T <= 1``, and everything
behind ``s`` composites to ``B``, itself a convex combination of Gaussian colours and the
background. Removing ``s`` changes the pixel by ``T alpha_s (c_s - B)``, so by at most
``alpha_s |c_s - B|``, with ``alpha_s <= min(0.99, sigmoid(o_s))`` at every pixel of every
view and ``B`` inside ``[lo, hi]``, the per-channel range of all colours and the background.
Removing the safeguards one by one (telescoping) bounds the change of every pixel of every
view (any pose, focal length, image size, dense or tiled path) by

    ``max_channel sum_s min(0.99, sigmoid(o_s)) max(c_s - lo, hi - c_s)``.

It holds for the renderer as written (the EWA approximation, the low pass and the cutoff
only change ``alpha_s`` below its bound). It is a worst case: every safeguard stacked on one
ray, so keeping it under ``eta`` costs most of the opacity a perturbation could use.
"""

import jax
import jax.numpy as jnp

from jaxkit.splat._raster import ALPHA_MAX


def _alpha_cap(opacity_logits):
    """The largest alpha a safeguard reaches at any pixel: the renderer's own cap."""
    return jnp.minimum(ALPHA_MAX, jax.nn.sigmoid(opacity_logits))


def certified_linf(opacity_logits, color_logits, raw_colors, background):
    """The certificate ``max_channel sum_s a_s max(c_s - lo, hi - c_s)`` (module docstring)."""
    sg = jax.nn.sigmoid(color_logits)
    bg = jnp.broadcast_to(jnp.asarray(background, sg.dtype), (1, 3))
    every = jnp.concatenate([raw_colors, sg, bg])
    lo, hi = jnp.min(every, axis=0), jnp.max(every, axis=0)
    w = jnp.maximum(sg - lo[None, :], hi[None, :] - sg)  # (S, 3): worst colour offset
    a = _alpha_cap(opacity_logits)
    return jnp.max(a @ w)


def scale_to_budget(opacity_logits, color_logits, raw_colors, background, budget):
    """Opacity logits scaled so that :func:`certified_linf` ``<= budget``.

    Every safeguard's opacity is multiplied by one factor ``k <= 1`` (nothing changes when
    the bound already holds); the colour range does not depend on opacity, so the
    certificate scales by exactly ``k``.
    """
    cert = certified_linf(opacity_logits, color_logits, raw_colors, background)
    k = jnp.minimum(1.0, budget / jnp.maximum(cert, jnp.finfo(cert.dtype).tiny))
    a = k * _alpha_cap(opacity_logits)
    scaled = jnp.log(a) - jnp.log1p(-a)
    return jnp.where(k < 1, scaled, opacity_logits)
