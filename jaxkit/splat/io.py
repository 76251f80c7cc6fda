"""Host-side loaders: 3DGS ``.ply`` assets, COLMAP text cameras, ``transforms.json``.

These functions read files with NumPy on the host; they are not jitted and never download.
Their results are JAX arrays ready for :func:`jaxkit.splat.render`.
"""

import json
import os
import re
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxkit import _validate
from jaxkit.splat._types import (
    Camera,
    Gaussians,
    _hw,
    from_scale_rotation,
    quaternion_to_rotation,
)

SH_C0 = 0.28209479177387814  # degree-0 real spherical harmonic
"""Degree-0 real spherical harmonic constant (3DGS colour = ``0.5 + SH_C0 * f_dc``)."""
_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}  # fmt: skip
_REQUIRED = ("x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
             "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")  # fmt: skip


class GaussianAsset(NamedTuple):
    """A 3DGS asset in its stored parametrisation (float32 arrays).

    Attributes:
      means: ``(N, 3)`` positions (``x, y, z``).
      log_scales: ``(N, 3)`` log standard deviations (``scale_*``).
      quaternions: ``(N, 4)`` rotations ``(w, x, y, z)`` (``rot_*``, not normalised).
      opacity_logits: ``(N,)`` opacity before the sigmoid (``opacity``).
      sh_dc: ``(N, 3)`` degree-0 SH coefficients (``f_dc_*``).
      sh_rest: ``(N, K)`` higher-degree SH coefficients (``f_rest_*``; K may be 0). The
        renderer uses degree 0 only.
    """

    means: Any
    log_scales: Any
    quaternions: Any
    opacity_logits: Any
    sh_dc: Any
    sh_rest: Any

    def to_gaussians(self) -> Gaussians:
        """Renderable :class:`Gaussians`; colour ``max(0.5 + C0 sh_dc, 0)`` as in 3DGS."""
        colors = jnp.maximum(0.5 + SH_C0 * jnp.asarray(self.sh_dc), 0.0)
        return from_scale_rotation(
            self.means, self.log_scales, self.quaternions, self.opacity_logits, colors
        )


def read_ply(path: str | os.PathLike) -> GaussianAsset:
    """Read a standard 3DGS ``.ply`` (binary little/big endian or ASCII vertex element).

    Required vertex properties: ``x y z f_dc_0..2 opacity scale_0..2 rot_0..3``; optional
    ``f_rest_*`` (kept in order of their index), others (``nx ny nz``) are ignored.

    Raises:
      ValueError: not a PLY file, no vertex element, an unknown format or property type,
        a missing required property, or a truncated body.
    """
    with open(path, "rb") as f:
        if f.readline().strip() != b"ply":
            raise ValueError(f"`path` is not a PLY file: {path}.")
        fmt, props, count, current = None, [], None, None
        while True:
            line = f.readline()
            if not line:
                raise ValueError(f"PLY header of {path} has no end_header.")
            words = line.decode("ascii", "replace").split()
            if not words or words[0] in ("comment", "obj_info"):
                continue
            if words[0] == "end_header":
                break
            if words[0] == "format":
                fmt = words[1]
            elif words[0] == "element":
                current = words[1]
                if current == "vertex":
                    count = int(words[2])
            elif words[0] == "property" and current == "vertex":
                if words[1] == "list":
                    raise ValueError("list properties in the vertex element are not supported.")
                if words[1] not in _PLY_TYPES:
                    raise ValueError(f"unknown PLY property type {words[1]!r}.")
                props.append((words[2], _PLY_TYPES[words[1]]))
        if count is None:
            raise ValueError(f"PLY file {path} has no vertex element.")
        names = [p[0] for p in props]
        missing = [r for r in _REQUIRED if r not in names]
        if missing:
            raise ValueError(f"PLY file {path} lacks the 3DGS properties {missing}.")
        if fmt in ("binary_little_endian", "binary_big_endian"):
            end = "<" if fmt == "binary_little_endian" else ">"
            dt = np.dtype([(n, end + t) for n, t in props])
            buf = f.read(dt.itemsize * count)
            if len(buf) < dt.itemsize * count:
                raise ValueError(f"PLY body of {path} is truncated.")
            data = np.frombuffer(buf, dtype=dt, count=count)
            col = {n: np.asarray(data[n], np.float64) for n in names}
        elif fmt == "ascii":
            rows = np.loadtxt(f, dtype=np.float64, max_rows=count, ndmin=2)
            if rows.shape != (count, len(props)):
                raise ValueError(f"PLY body of {path} has shape {rows.shape}.")
            col = {n: rows[:, i] for i, n in enumerate(names)}
        else:
            raise ValueError(f"unknown PLY format {fmt!r}.")
    rest = sorted((n for n in names if re.fullmatch(r"f_rest_\d+", n)), key=lambda n: int(n[7:]))

    def stack(keys):
        a = np.stack([col[k] for k in keys], -1) if keys else np.zeros((count, 0))
        return jnp.asarray(a, jnp.float32)

    return GaussianAsset(
        stack(["x", "y", "z"]),
        stack([f"scale_{i}" for i in range(3)]),
        stack([f"rot_{i}" for i in range(4)]),
        jnp.asarray(col["opacity"], jnp.float32),
        stack([f"f_dc_{i}" for i in range(3)]),
        stack(rest),
    )


def _check_asset(asset, name: str = "asset") -> None:
    """Static checks of a :class:`GaussianAsset` (a ``TypeError`` naming the field).

    Real fields ``[N, 3]``, ``[N, 3]``, ``[N, 4]``, ``[N]``, ``[N, 3]``, ``[N, K]``.
    """
    if not isinstance(asset, GaussianAsset):
        raise TypeError(f"`{name}` must be a GaussianAsset, got {type(asset).__name__}.")
    _validate.real(asset.means, name=f"{name}.means")
    _validate.ndim(asset.means, 2, name=f"{name}.means")
    n = np.shape(asset.means)[0]
    tails = ((3,), (3,), (4,), (), (3,), (None,))
    for field, tail in zip(GaussianAsset._fields, tails, strict=True):
        _validate.real(getattr(asset, field), name=f"{name}.{field}")
        _validate.shape(getattr(asset, field), (n, *tail), name=f"{name}.{field}")


def write_ply(path: str | os.PathLike, asset: GaussianAsset) -> None:
    """Write ``asset`` as a binary little-endian 3DGS ``.ply`` (normals written as zeros).

    Raises:
      TypeError: ``asset`` not a :class:`GaussianAsset` of real arrays of the shapes its
        attributes list (``[N, 3]``, ..., ``sh_rest [N, K]``), the field named.
    """
    _check_asset(asset)
    n = np.shape(asset.means)[0]
    cols = {"x": 0, "y": 1, "z": 2}
    fields = [(k, np.asarray(asset.means)[:, i]) for k, i in cols.items()]
    fields += [(f"n{a}", np.zeros(n)) for a in "xyz"]
    fields += [(f"f_dc_{i}", np.asarray(asset.sh_dc)[:, i]) for i in range(3)]
    rest = np.asarray(asset.sh_rest).reshape(n, -1)
    fields += [(f"f_rest_{i}", rest[:, i]) for i in range(rest.shape[1])]
    fields += [("opacity", np.asarray(asset.opacity_logits))]
    fields += [(f"scale_{i}", np.asarray(asset.log_scales)[:, i]) for i in range(3)]
    fields += [(f"rot_{i}", np.asarray(asset.quaternions)[:, i]) for i in range(4)]
    dt = np.dtype([(k, "<f4") for k, _ in fields])
    data = np.empty(n, dt)
    for k, v in fields:
        data[k] = v
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {n}"]
    header += [f"property float {k}" for k, _ in fields] + ["end_header"]
    with open(path, "wb") as f:
        f.write(("\n".join(header) + "\n").encode("ascii"))
        f.write(data.tobytes())


class CameraSet(NamedTuple):
    """Cameras read from disk.

    Attributes:
      cameras: One :class:`Camera` with a leading view axis (float32).
      names: Image file name (COLMAP ``NAME``, ``transforms.json`` ``file_path``) per view.
      hw: ``(height, width)`` per view.
    """

    cameras: Camera
    names: list[str]
    hw: list[tuple[int, int]]


def _camera(rot, center, fx, fy, cx, cy) -> Camera:
    return Camera(
        jnp.asarray(rot, jnp.float32),
        jnp.asarray(center, jnp.float32),
        jnp.asarray([fx, fy], jnp.float32),
        jnp.asarray([cx, cy], jnp.float32),
    )


def _stack(cams: list[Camera]) -> Camera:
    return Camera(*(jnp.stack(xs) for xs in zip(*cams, strict=True)))


def _data_lines(path) -> list[str]:
    with open(path) as f:
        return [ln.rstrip("\n") for ln in f if not ln.startswith("#")]


def read_colmap_text(folder: str | os.PathLike) -> CameraSet:
    """Cameras from a COLMAP text model: ``cameras.txt`` and ``images.txt`` in ``folder``.

    COLMAP stores world-to-camera poses (``QW QX QY QZ TX TY TZ``) in the OpenCV convention
    and puts the centre of the top-left pixel at (0.5, 0.5), both as this renderer does:
    ``rotation = R(q)``, ``center = -R^T t``. Supported camera models: ``SIMPLE_PINHOLE``,
    ``PINHOLE``, and the distortion models ``SIMPLE_RADIAL``/``RADIAL``/``OPENCV`` only when
    their distortion parameters are all zero (the renderer is a pure pinhole).

    Raises:
      FileNotFoundError: a missing file.
      ValueError: an unsupported model, non-zero distortion, a malformed line, or an image
        naming an unknown camera.
    """
    folder = os.fspath(folder)
    intr: dict[int, tuple[float, float, float, float, int, int]] = {}
    for ln in _data_lines(os.path.join(folder, "cameras.txt")):
        w = ln.split()
        if not w:
            continue
        if len(w) < 5:
            raise ValueError(f"malformed cameras.txt line: {ln!r}.")
        cid, model, width, height = int(w[0]), w[1], int(w[2]), int(w[3])
        p = [float(v) for v in w[4:]]
        if model == "SIMPLE_PINHOLE":
            f, cx, cy = p[:3]
            intr[cid] = (f, f, cx, cy, height, width)
        elif model == "PINHOLE":
            intr[cid] = (p[0], p[1], p[2], p[3], height, width)
        elif model in ("SIMPLE_RADIAL", "RADIAL", "OPENCV"):
            fx, fy, cx, cy, dist = (
                (p[0], p[0], p[1], p[2], p[3:]) if model != "OPENCV" else (*p[:4], p[4:])
            )
            if any(d != 0 for d in dist):
                raise ValueError(f"camera {cid}: model {model} with non-zero distortion.")
            intr[cid] = (fx, fy, cx, cy, height, width)
        else:
            raise ValueError(f"camera {cid}: unsupported COLMAP camera model {model!r}.")
    lines = _data_lines(os.path.join(folder, "images.txt"))
    cams, names, hws = [], [], []
    i = 0
    while i < len(lines):
        w = lines[i].split()
        if not w:
            i += 1
            continue
        if len(w) < 10:
            raise ValueError(f"malformed images.txt line: {lines[i]!r}.")
        q = np.asarray([float(v) for v in w[1:5]])
        t = np.asarray([float(v) for v in w[5:8]])
        cid = int(w[8])
        if cid not in intr:
            raise ValueError(f"image {w[0]} names unknown camera {cid}.")
        rot = np.asarray(quaternion_to_rotation(jnp.asarray(q, jnp.float32)), np.float64)
        fx, fy, cx, cy, h, wd = intr[cid]
        cams.append(_camera(rot, -rot.T @ t, fx, fy, cx, cy))
        names.append(" ".join(w[9:]))
        hws.append((h, wd))
        i += 2  # the next line lists the image's 2D points
    if not cams:
        raise ValueError(f"images.txt in {folder} lists no image.")
    return CameraSet(_stack(cams), names, hws)


_GL_TO_CV = np.diag([1.0, -1.0, -1.0])


def _focal(m, axis, size):
    """Focal length along ``axis`` ("x"/"y"), or None when the frame gives neither key.

    From ``fl_<axis>``, else from ``camera_angle_<axis>`` over ``size`` pixels.
    """
    if f"fl_{axis}" in m:
        return float(m[f"fl_{axis}"])
    if f"camera_angle_{axis}" in m:
        return 0.5 * size / np.tan(0.5 * float(m[f"camera_angle_{axis}"]))
    return None


def read_transforms_json(
    path: str | os.PathLike, *, hw: tuple[int, int] | None = None
) -> CameraSet:
    """Cameras from a NeRF / instant-ngp ``transforms.json``.

    Each frame's ``transform_matrix`` is camera-to-world in the OpenGL convention (x right,
    y up, the camera looking down -z); it is converted to OpenCV: ``rotation =
    (C2W[:3, :3] diag(1, -1, -1))^T``, ``center = C2W[:3, 3]``. Focal: ``fl_x``/``fl_y``
    when present, else ``0.5 w / tan(camera_angle_x / 2)`` (and ``camera_angle_y`` for y
    when given); principal point ``cx``/``cy`` when present, else the image centre.
    Per-frame keys override the file's. Image size: ``w``/``h`` in the file, else ``hw``.

    Raises:
      TypeError: ``hw`` not a pair of ints.
      ValueError: no frames, no focal information, no image size, or a malformed matrix.
    """
    if hw is not None:
        hw = _hw(hw)  # a (height, width) pair of ints >= 1: checked before the file is read
    with open(path) as f:
        meta = json.load(f)
    frames = meta.get("frames") or []
    if not frames:
        raise ValueError(f"{path} has no frames.")
    cams, names, hws = [], [], []
    for fr in frames:
        m = {**meta, **fr}
        if "w" in m and "h" in m:
            h, w = int(m["h"]), int(m["w"])
        elif hw is not None:
            h, w = int(hw[0]), int(hw[1])
        else:
            raise ValueError(f"{path} gives no image size (w, h); pass `hw`.")
        fx = _focal(m, "x", w)
        if fx is None:
            raise ValueError(f"{path} gives neither fl_x nor camera_angle_x.")
        fy = _focal(m, "y", h)
        fy = fx if fy is None else fy
        c2w = np.asarray(fr.get("transform_matrix"), np.float64)
        if c2w.shape not in ((4, 4), (3, 4)):
            raise ValueError(f"frame {fr.get('file_path')!r}: transform_matrix is {c2w.shape}.")
        rot = (c2w[:3, :3] @ _GL_TO_CV).T
        cx, cy = float(m.get("cx", w / 2.0)), float(m.get("cy", h / 2.0))
        cams.append(_camera(rot, c2w[:3, 3], fx, fy, cx, cy))
        names.append(str(fr.get("file_path", "")))
        hws.append((h, w))
    return CameraSet(_stack(cams), names, hws)
