"""Gaussian splatting in JAX: a differentiable rasterizer, 3DGS asset and camera loaders.

* :func:`render`: projection of anisotropic 3D Gaussians through a pinhole camera (EWA 2D
  covariance), depth sort, front-to-back alpha compositing; a dense exact path and a tiled
  path with fixed-capacity per-tile lists (overflow is an error).
* :func:`tile_counts`: per-tile list lengths, to size the tiled path's ``capacity``.
* :class:`Gaussians`, :class:`Camera` and their constructors.
* :mod:`jaxkit.splat.io`: host-side loaders (3DGS ``.ply``, COLMAP text, ``transforms.json``).
* :mod:`jaxkit.splat.adlift`: AdLift safeguard Gaussians (Lifted PGD).
"""

from jaxkit.splat import adlift, io
from jaxkit.splat._raster import render, tile_counts
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
    "adlift",
    "covariance_from_scale_rotation",
    "from_scale_rotation",
    "io",
    "look_at",
    "orbit_cameras",
    "quaternion_to_rotation",
    "render",
    "stack_cameras",
    "tile_counts",
]
