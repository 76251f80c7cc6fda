"""AdLift's safeguard Gaussians and the checks :mod:`jaxkit.splat.adlift` shares.

Their parameters, constructors, and the view-independent certificate of their image
change (:func:`certified_linf`).
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxkit import _validate
from jaxkit.splat import _certify
from jaxkit.splat._raster import _concrete_psd_check, check_camera, check_scene, guard_psd
from jaxkit.splat._types import Camera, Gaussians, _hw, covariance_from_scale_rotation


class Safeguards(NamedTuple):
    """Trainable safeguard Gaussians ``theta`` (colours through a sigmoid).

    Attributes:
      means: ``(S, 3)``. log_scales: ``(S, 3)``. quaternions: ``(S, 4)`` ``(w, x, y, z)``.
      opacity_logits: ``(S,)``. color_logits: ``(S, 3)`` (colour = sigmoid).
    """

    means: Any
    log_scales: Any
    quaternions: Any
    opacity_logits: Any
    color_logits: Any


def safeguard_gaussians(theta: Safeguards) -> Gaussians:
    """The renderable :class:`Gaussians` of ``theta``.

    Raises:
      TypeError: ``theta``'s fields not ``[S, ...]`` of one floating dtype.
    """
    _check_safeguards(theta)
    return Gaussians(
        theta.means,
        covariance_from_scale_rotation(theta.log_scales, theta.quaternions),
        theta.opacity_logits,
        jax.nn.sigmoid(theta.color_logits),
    )


def protected_scene(raw: Gaussians, theta: Safeguards) -> Gaussians:
    """``G_raw U G_s(theta)`` (raw Gaussians first).

    Raises:
      TypeError: ``raw`` or ``theta`` malformed (shapes, or ``theta`` not of ``raw``'s dtype).
    """
    check_scene(raw, name="raw")
    _check_safeguards(theta, raw.means.dtype)
    sg = safeguard_gaussians(theta)
    return Gaussians(*(jnp.concatenate([a, b]) for a, b in zip(raw, sg, strict=True)))


def init_safeguards(
    raw: Gaussians,
    n: int,
    *,
    key: jax.Array,
    opacity_logit: float = -3.0,
    log_scale_range: tuple[float, float] = (-3.5, -2.5),
) -> Safeguards:
    """``n`` safeguards uniform in the raw asset's bounding box, nearly invisible.

    Random rotations, log-scales uniform in ``log_scale_range``, opacity logit
    ``opacity_logit`` (-3: sigmoid 0.047), colour logits standard normal.
    """
    n = _validate.python_int(n, name="n", minimum=1)
    _validate.is_key(key)
    _validate.finite_scalar(opacity_logit=opacity_logit)
    lo, hi = log_scale_range
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"`log_scale_range` must be finite with low <= high, got {(lo, hi)}.")
    check_scene(raw, name="raw")
    dt = raw.means.dtype
    lo, hi = jnp.min(raw.means, axis=0), jnp.max(raw.means, axis=0)
    ks = jax.random.split(key, 4)
    u = jax.random.uniform(ks[0], (n, 3), dt)
    ls = jax.random.uniform(ks[1], (n, 3), dt, log_scale_range[0], log_scale_range[1])
    return Safeguards(
        lo[None, :] + u * (hi - lo)[None, :],
        ls,
        jax.random.normal(ks[2], (n, 4), dt),
        jnp.full((n,), opacity_logit, dt),
        jax.random.normal(ks[3], (n, 3), dt),
    )


def certified_linf(raw: Gaussians, theta: Safeguards, *, background=0.0) -> jax.Array:
    """A bound on ``max |R(G_raw U G_s) - R(G_raw)|`` over every pixel of every view.

    ``max_channel sum_s min(0.99, sigmoid(o_s)) max(c_s - lo, hi - c_s)``, ``[lo, hi]``
    the per-channel range of all colours (raw, safeguard) and the background: alpha
    compositing is a convex combination per pixel, so a safeguard changes a ray's colour
    by at most its alpha times its colour's distance to what lies behind it. Holds for any
    camera and image size, dense or tiled (``jaxkit.splat._certify`` has the argument).
    """
    check_scene(raw, name="raw")
    _check_safeguards(theta, raw.means.dtype)
    _validate.real(background, name="background")
    out = _cert_jit(theta.opacity_logits, theta.color_logits, raw.colors, background)
    return _validate.guard_finite(out, background, name="background")


_cert_jit = jax.jit(_certify.certified_linf)


def _checked(raw, theta, cameras, adv_loss, hw):
    """The checks ``lifted_pgd`` and ``evaluate_protection`` share.

    Returns ``(hw, raw)`` with ``raw``'s covariances checked PSD (at once when concrete,
    else at run time).
    """
    hw = _hw(hw)
    if not callable(adv_loss):
        raise TypeError(f"`adv_loss` must be callable, got {type(adv_loss).__name__}.")
    check_scene(raw, name="raw")
    _check_safeguards(theta, raw.means.dtype)
    _check_cameras(cameras, raw.means.dtype)
    return hw, _check_psd(raw)


def _check_psd(raw: Gaussians) -> Gaussians:
    """``raw`` with its covariances checked PSD: at once when concrete, else at run time."""
    if _concrete_psd_check(raw.covariances):
        return raw
    return raw._replace(covariances=guard_psd(raw.covariances, "raw.covariances"))


def _check_safeguards(theta, dtype=None) -> None:
    """Static checks of ``theta`` (a ``TypeError`` naming the field, ``theta.means``).

    Fields ``[S, ...]`` of the dtype ``dtype`` (the scene's; ``None``: ``theta.means``'s,
    floating).
    """
    if not isinstance(theta, Safeguards):
        raise TypeError(f"`theta` must be a Safeguards, got {type(theta).__name__}.")
    if dtype is None:
        _validate.floating(theta.means, name="theta.means")
        dtype = jnp.result_type(theta.means)
    _validate.ndim(theta.means, 2, name="theta.means")
    s = jnp.shape(theta.means)[0]
    for name, shp in zip(Safeguards._fields, ((s, 3), (s, 3), (s, 4), (s,), (s, 3)), strict=True):
        a = getattr(theta, name)
        _validate.shape(a, shp, name=f"theta.{name}")
        if jnp.result_type(a) != dtype:
            raise TypeError(f"`theta.{name}` must have the scene's dtype {dtype}.")


def _check_cameras(cams, dtype, name="cameras") -> None:
    if not isinstance(cams, Camera):
        raise TypeError(f"`{name}` must be a jaxkit.splat.Camera, got {type(cams).__name__}.")
    _validate.ndim(cams.rotation, 3, name=f"{name}.rotation")
    one = jax.tree.map(lambda a: a[0], cams)
    check_camera(one, dtype=dtype)
    v = cams.rotation.shape[0]
    for field in Camera._fields:
        if jnp.shape(getattr(cams, field))[0] != v:
            raise TypeError(f"`{name}.{field}` must have {v} views on its leading axis.")
