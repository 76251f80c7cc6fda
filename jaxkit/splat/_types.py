"""Scene and camera containers of the Gaussian rasterizer, and their constructors.

Conventions (OpenCV): the camera looks down its +z axis, x points right, y down. A world
point ``p`` maps to camera coordinates ``R (p - c)`` (``R`` = :attr:`Camera.rotation`, the
world-to-camera rotation; ``c`` = :attr:`Camera.center`) and to the pixel coordinates
``(fx x / z + cx, fy y / z + cy)``. Pixel ``(i, j)`` (row ``i``, column ``j``) has its centre
at ``(j + 0.5, i + 0.5)``, so the principal point of a centred camera is ``(W / 2, H / 2)``.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate


class Gaussians(NamedTuple):
    """A scene of N anisotropic 3D Gaussians (a pytree; every field is differentiable).

    Attributes:
      means: ``(N, 3)`` world-space centres.
      covariances: ``(N, 3, 3)`` symmetric positive semi-definite world covariances
        (build them from log-scales and quaternions with :func:`from_scale_rotation`).
      opacity_logits: ``(N,)`` opacity before the sigmoid.
      colors: ``(N, 3)`` RGB colours (degree-0 colour; the renderer composites them as given).
    """

    means: Float[Array, "N 3"]
    covariances: Float[Array, "N 3 3"]
    opacity_logits: Float[Array, " N"]
    colors: Float[Array, "N 3"]


class Camera(NamedTuple):
    """A pinhole camera (a pytree: stack fields along a leading axis for a batch of views).

    Attributes:
      rotation: ``(3, 3)`` world-to-camera rotation ``R``.
      center: ``(3,)`` camera centre ``c`` in world coordinates.
      focal: ``(2,)`` focal lengths ``(fx, fy)`` in pixels.
      principal: ``(2,)`` principal point ``(cx, cy)`` in pixels.
    """

    rotation: Float[Array, "3 3"]
    center: Float[Array, " 3"]
    focal: Float[Array, " 2"]
    principal: Float[Array, " 2"]


def quaternion_to_rotation(q: Float[ArrayLike, "*n 4"]) -> Float[Array, "*n 3 3"]:
    """Rotation matrices of quaternions ``(w, x, y, z)`` (normalised here; 3DGS order).

    ``q`` is ``[..., 4]``: any leading batch axes (one quaternion ``[4]`` included).

    Example:
      >>> quaternion_to_rotation(jnp.array([1.0, 0.0, 0.0, 0.0])).tolist()
      [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    return _rotation(_check_quaternions(q, name="q"), name="q")


def _check_quaternions(q: Any, *, name: str) -> Array:
    """``q`` floating ``[..., 4]`` (a ``TypeError`` naming ``name``)."""
    _validate.floating(q, name=name)  # before jnp.asarray: a string names the argument
    q = jnp.asarray(q)
    if q.ndim < 1 or q.shape[-1] != 4:
        raise TypeError(
            f"`{name}` must have a last axis of size 4 (w, x, y, z), got shape {q.shape}."
        )
    return q


def _rotation(q: Array, *, name: str) -> Array:
    """Rotation matrices of checked quaternions ``[..., 4]`` (``name``: for the errors)."""
    norm = jnp.linalg.norm(q, axis=-1, keepdims=True)
    q = _validate.error_if(q, jnp.any(norm == 0), f"`{name}` must not be the zero quaternion.")
    q = q / norm
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def covariance_from_scale_rotation(
    log_scales: Float[ArrayLike, "*n 3"], quaternions: Float[ArrayLike, "*n 4"]
) -> Float[Array, "*n 3 3"]:
    """``Sigma = R(q) diag(exp(2 log_s)) R(q)^T`` (always symmetric PSD).

    ``log_scales`` ``[..., 3]`` and ``quaternions`` ``[..., 4]``: any leading batch axes
    (broadcast together; empty batch axes give an empty result).

    Raises:
      TypeError: ``log_scales`` not floating ``[..., 3]``, ``quaternions`` not floating
        ``[..., 4]``, or batch axes that do not broadcast together.
      ValueError: A zero quaternion (under ``jit``, an ``eqx.error_if`` error).
    """
    _validate.floating(log_scales, name="log_scales")  # before jnp.asarray: names it
    _validate.floating(quaternions, name="quaternions")
    log_scales = jnp.asarray(log_scales)
    if log_scales.ndim < 1 or log_scales.shape[-1] != 3:
        raise TypeError(f"`log_scales` must have a last axis of size 3, got {log_scales.shape}.")
    quaternions = _check_quaternions(quaternions, name="quaternions")
    try:
        jnp.broadcast_shapes(log_scales.shape[:-1], quaternions.shape[:-1])
    except ValueError:
        raise TypeError(
            "`log_scales` and `quaternions` must have batch axes that broadcast together, got "
            f"shapes {log_scales.shape} and {quaternions.shape}."
        ) from None
    rot = _rotation(quaternions, name="quaternions")
    m = rot * jnp.exp(log_scales)[..., None, :]
    return m @ jnp.swapaxes(m, -1, -2)


def from_scale_rotation(
    means: Float[ArrayLike, "N 3"],
    log_scales: Float[ArrayLike, "N 3"],
    quaternions: Float[ArrayLike, "N 4"],
    opacity_logits: Float[ArrayLike, " N"],
    colors: Float[ArrayLike, "N 3"],
) -> Gaussians:
    """Build :class:`Gaussians` from the 3DGS parametrisation (log-scales, quaternions).

    Example:
      >>> g = from_scale_rotation(jnp.zeros((2, 3)), jnp.zeros((2, 3)),
      ...                         jnp.array([[1.0, 0, 0, 0]] * 2), jnp.zeros(2), jnp.ones((2, 3)))
      >>> g.covariances.shape
      (2, 3, 3)
    """
    _validate.floating(means, name="means")  # before jnp.asarray: a string names `means`
    means = jnp.asarray(means)
    _validate.ndim(means, 2, name="means")
    n = means.shape[0]
    for name, a, tail in (
        ("log_scales", log_scales, (3,)),
        ("quaternions", quaternions, (4,)),
        ("opacity_logits", opacity_logits, ()),
        ("colors", colors, (3,)),
    ):
        _validate.shape(a, (n, *tail), name=name)
    return Gaussians(
        means,
        covariance_from_scale_rotation(log_scales, quaternions),
        jnp.asarray(opacity_logits),
        jnp.asarray(colors),
    )


def look_at(
    eye: Any,
    target: Any,
    *,
    focal: Any,
    hw: tuple[int, int],
    up: Any = (0.0, 0.0, 1.0),
) -> Camera:
    """A centred pinhole camera at ``eye`` looking at ``target`` (world ``up`` maps to -y).

    Host-side constructor (NumPy; not jitted). ``eye``, ``target``, ``up``: 3-vectors;
    ``focal`` is in pixels for both axes; the principal point is ``(W / 2, H / 2)``.
    """
    h, w = _hw(hw)
    _validate.finite_scalar(focal=focal)
    _validate.positive(focal=focal)
    eye_, tgt, up_ = (np.asarray(v, np.float64) for v in (eye, target, up))
    for name, v in (("eye", eye_), ("target", tgt), ("up", up_)):
        if v.shape != (3,) or not np.all(np.isfinite(v)):
            raise ValueError(f"`{name}` must be a finite 3-vector, got {v.tolist()}.")
    fwd = tgt - eye_
    if np.linalg.norm(fwd) == 0:
        raise ValueError("`eye` and `target` must differ.")
    fwd = fwd / np.linalg.norm(fwd)
    right = np.cross(fwd, up_)
    if np.linalg.norm(right) < 1e-9:
        raise ValueError("`up` must not be parallel to the viewing direction.")
    right = right / np.linalg.norm(right)
    down = np.cross(fwd, right)
    rot = np.stack([right, down, fwd])
    dt = jnp.result_type(float)
    return Camera(
        jnp.asarray(rot, dt),
        jnp.asarray(eye_, dt),
        jnp.full((2,), focal, dt),
        jnp.asarray([w / 2.0, h / 2.0], dt),
    )


def orbit_cameras(
    n: int,
    *,
    radius: Any,
    height: Any,
    focal: Any,
    hw: tuple[int, int],
    target: Any = (0.0, 0.0, 0.0),
) -> Camera:
    """``n`` cameras evenly spaced on a horizontal circle, all looking at ``target``.

    Host-side (not jitted). Returns one :class:`Camera` whose fields carry a leading axis
    of size ``n`` (``jax.vmap`` over it renders every view).
    """
    n = _validate.python_int(n, name="n", minimum=1)
    _validate.finite_scalar(radius=radius)
    _validate.finite_scalar(height=height)
    cams = []
    for k in range(n):
        a = 2 * np.pi * k / n
        eye = np.asarray(target, np.float64) + [radius * np.cos(a), radius * np.sin(a), height]
        cams.append(look_at(eye, target, focal=focal, hw=hw))
    return stack_cameras(cams)


def stack_cameras(cameras: list[Camera]) -> Camera:
    """Stack single cameras into one batched :class:`Camera` (leading axis = view).

    Raises:
      TypeError: an item not a single :class:`Camera` (fields ``(3, 3)``, ``(3,)``,
        ``(2,)``, ``(2,)`` of the floating dtype of ``cameras[0].rotation``), naming it
        (``cameras[1].focal``).
      ValueError: no camera.
    """
    if not cameras:
        raise ValueError("`cameras` must hold at least one camera.")
    dtype, source = None, "the dtype of `cameras[0].rotation`"
    for i, cam in enumerate(cameras):
        check_camera(cam, dtype=dtype, name=f"cameras[{i}]", source=source)
        dtype, source = jnp.result_type(cam.rotation), "the dtype of `cameras[0]`"
    return jax.tree.map(lambda *xs: jnp.stack(xs), *cameras)


def check_camera(cam, *, dtype, name: str = "camera", source: str = "the scene's dtype") -> None:
    """Static checks of one :class:`Camera` (TypeError naming the field, ``camera.focal``).

    ``dtype``: the dtype every field must have (``None``: ``cam.rotation``'s); ``source``
    says where it comes from in the message.
    """
    if not isinstance(cam, Camera):
        raise TypeError(f"`{name}` must be a jaxkit.splat.Camera, got {type(cam).__name__}.")
    want = dtype
    for field, shp in zip(Camera._fields, ((3, 3), (3,), (2,), (2,)), strict=True):
        a = getattr(cam, field)
        _validate.shape(a, shp, name=f"{name}.{field}")
        _validate.floating(a, name=f"{name}.{field}")
        want = jnp.result_type(a) if want is None else want  # the first field: rotation
        if jnp.result_type(a) != want:
            raise TypeError(
                f"`{name}.{field}` must have {source} {want}, got {jnp.result_type(a)}."
            )


def _hw(hw) -> tuple[int, int]:
    if not isinstance(hw, tuple | list) or len(hw) != 2:
        raise TypeError(f"`hw` must be a (height, width) pair of ints, got {hw!r}.")
    h = _validate.python_int(hw[0], name="hw[0]", minimum=1)
    w = _validate.python_int(hw[1], name="hw[1]", minimum=1)
    return h, w
