"""Gaussian splatting in JAX: a differentiable rasterizer, 3DGS asset and camera loaders.

* :func:`render`: projection of anisotropic 3D Gaussians through a pinhole camera (EWA 2D
  covariance), depth sort, front-to-back alpha compositing; a dense exact path and a tiled
  path with fixed-capacity per-tile lists (overflow is an error).
* :class:`Gaussians`, :class:`Camera` and their constructors.
"""

from jaxkit.splat import io
from jaxkit.splat._raster import render
from jaxkit.splat._types import (
    Camera,
    Gaussians,
    covariance_from_scale_rotation,
    from_scale_rotation,
    look_at,
    orbit_cameras,
    quaternion_to_rotation,
    stack_cameras,
)

__all__ = [
    "Camera",
    "Gaussians",
    "covariance_from_scale_rotation",
    "from_scale_rotation",
    "io",
    "look_at",
    "orbit_cameras",
    "quaternion_to_rotation",
    "render",
    "stack_cameras",
]
