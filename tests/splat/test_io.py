"""Loaders (host side, tested directly): 3DGS .ply, COLMAP text, transforms.json."""

import json

import numpy as np
import pytest

from jaxkit.splat import io

PROPS = (
    ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    + [f"f_rest_{i}" for i in range(6)]
    + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
)


def _write_standard_ply(path, values, fmt="binary_little_endian"):
    """A .ply written the way 3DGS's save_ply does (float32 properties, standard names)."""
    header = ["ply", f"format {fmt} 1.0", "comment made by a test", f"element vertex {len(values)}"]
    header += [f"property float {p}" for p in PROPS] + ["end_header"]
    with open(path, "wb") as f:
        f.write(("\n".join(header) + "\n").encode())
        if fmt == "ascii":
            f.write("\n".join(" ".join(repr(float(v)) for v in row) for row in values).encode())
        else:
            f.write(np.asarray(values, "<f4").tobytes())


@pytest.mark.parametrize("fmt", ["binary_little_endian", "ascii"])
def test_read_standard_ply(tmp_path, fmt):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(4, len(PROPS))).astype(np.float32)
    path = tmp_path / "point_cloud.ply"
    _write_standard_ply(path, values, fmt)
    a = io.read_ply(path)
    col = {p: values[:, i] for i, p in enumerate(PROPS)}
    np.testing.assert_allclose(a.means, np.stack([col["x"], col["y"], col["z"]], -1), rtol=1e-6)
    np.testing.assert_allclose(a.log_scales[:, 2], col["scale_2"], rtol=1e-6)
    np.testing.assert_allclose(a.quaternions[:, 0], col["rot_0"], rtol=1e-6)
    np.testing.assert_allclose(a.opacity_logits, col["opacity"], rtol=1e-6)
    np.testing.assert_allclose(a.sh_rest[:, 5], col["f_rest_5"], rtol=1e-6)
    g = a.to_gaussians()
    want = np.maximum(
        0.5 + 0.28209479177387814 * np.stack([col[f"f_dc_{i}"] for i in range(3)], -1), 0
    )
    np.testing.assert_allclose(g.colors, want, rtol=1e-6)
    # covariance = R diag(s^2) R^T: its eigenvalues are exp(2 * scale)
    ev = np.sort(np.linalg.eigvalsh(np.asarray(g.covariances[0], np.float64)))
    np.testing.assert_allclose(ev, np.sort(np.exp(2 * values[0, 16:19])), rtol=1e-4)
    # round trip through write_ply
    io.write_ply(tmp_path / "copy.ply", a)
    b = io.read_ply(tmp_path / "copy.ply")
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_read_ply_errors(tmp_path):
    bad = tmp_path / "bad.ply"
    bad.write_bytes(b"not a ply\n")
    with pytest.raises(ValueError, match="PLY"):
        io.read_ply(bad)
    short = tmp_path / "short.ply"
    short.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n0\n")
    with pytest.raises(ValueError, match="lacks"):
        io.read_ply(short)


def _project(cams, i, point):
    r, c = np.asarray(cams.rotation[i]), np.asarray(cams.center[i])
    x, y, z = r @ (np.asarray(point) - c)
    f, p = np.asarray(cams.focal[i]), np.asarray(cams.principal[i])
    return np.array([f[0] * x / z + p[0], f[1] * y / z + p[1]])


def test_colmap_text(tmp_path):
    (tmp_path / "cameras.txt").write_text(
        "# Camera list\n1 PINHOLE 64 48 50 60 32 24\n2 SIMPLE_PINHOLE 32 32 40 16 16\n"
    )
    s = np.sqrt(0.5)  # 90 degrees about the camera's y axis
    (tmp_path / "images.txt").write_text(
        f"# Image list\n1 1 0 0 0 0 0 5 1 a.png\n\n2 {s} 0 {s} 0 0 0 4 2 b 1.png\n1.0 2.0 -1\n"
    )
    cs = io.read_colmap_text(tmp_path)
    assert cs.names == ["a.png", "b 1.png"] and cs.hw == [(48, 64), (32, 32)]
    # camera 1: identity pose, t = (0, 0, 5): centre (0, 0, -5); the origin hits (cx, cy)
    np.testing.assert_allclose(cs.cameras.center[0], [0, 0, -5], atol=1e-6)
    np.testing.assert_allclose(_project(cs.cameras, 0, [0, 0, 0]), [32, 24], atol=1e-5)
    np.testing.assert_allclose(_project(cs.cameras, 0, [1, 0, 0]), [32 + 50 / 5, 24], atol=1e-4)
    # camera 2: R maps world +x to camera -z... world point at distance 4 in front
    r = np.asarray(cs.cameras.rotation[1])
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-6)
    np.testing.assert_allclose(r @ np.array([1.0, 0, 0]), [0, 0, -1], atol=1e-6)
    np.testing.assert_allclose(
        r @ (np.zeros(3) - np.asarray(cs.cameras.center[1])), [0, 0, 4], atol=1e-5
    )


def test_colmap_errors(tmp_path):
    (tmp_path / "cameras.txt").write_text("1 FISHEYE 8 8 1 2 3 4\n")
    (tmp_path / "images.txt").write_text("1 1 0 0 0 0 0 5 1 a.png\n\n")
    with pytest.raises(ValueError, match="FISHEYE"):
        io.read_colmap_text(tmp_path)
    (tmp_path / "cameras.txt").write_text("1 SIMPLE_RADIAL 8 8 10 4 4 0.1\n")
    with pytest.raises(ValueError, match="distortion"):
        io.read_colmap_text(tmp_path)


def test_transforms_json_matches_colmap(tmp_path):
    # OpenGL camera at (0, 0, 4) looking down -z at the origin (identity rotation)
    c2w = np.eye(4)
    c2w[2, 3] = 4.0
    fov = 2 * np.arctan(0.5 * 32 / 40.0)  # focal 40 px at width 32
    meta = {"camera_angle_x": fov, "w": 32, "h": 24,
            "frames": [{"file_path": "./r_0", "transform_matrix": c2w.tolist()}]}  # fmt: skip
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    cs = io.read_transforms_json(tmp_path / "transforms.json")
    cams = cs.cameras
    np.testing.assert_allclose(cams.focal[0], [40, 40], rtol=1e-5)
    np.testing.assert_allclose(_project(cams, 0, [0, 0, 0]), [16, 12], atol=1e-5)
    right, up = _project(cams, 0, [1, 0, 0]), _project(cams, 0, [0, 1, 0])
    assert right[0] > 16 and abs(right[1] - 12) < 1e-5  # world +x is image right
    assert up[1] < 12 and abs(up[0] - 16) < 1e-5  # world +y (GL up) is image up
    # the same camera in COLMAP: R = diag(1, -1, -1) (w=0, x=1), t = -R c = (0, 0, 4)
    (tmp_path / "cameras.txt").write_text("1 PINHOLE 32 24 40 40 16 12\n")
    (tmp_path / "images.txt").write_text("1 0 1 0 0 0 0 4 1 r_0\n\n")
    col = io.read_colmap_text(tmp_path).cameras
    for a, b in zip(cams, col, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    meta2 = {k: v for k, v in meta.items() if k not in ("w", "h")}
    (tmp_path / "t2.json").write_text(json.dumps(meta2))
    with pytest.raises(ValueError, match="hw"):
        io.read_transforms_json(tmp_path / "t2.json")
    assert io.read_transforms_json(tmp_path / "t2.json", hw=(24, 32)).hw == [(24, 32)]
