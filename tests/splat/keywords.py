"""Keyword-sweep recipes for splat (see tests/keywords.py)."""

import functools
import json
import pathlib
import tempfile

import jax
import numpy as np

from jaxkit import splat
from jaxkit.splat import adlift
from jaxkit.splat import io as sio
from tests.splat._scenes import HW, camera, grey_loss, scene

AD_HW = (6, 6)
_rng = np.random.default_rng(0)
W = _rng.normal(size=(3, 3)).astype(np.float32)
PARAMS = (W, np.float32(1.0))
_C2W = np.eye(4)
_C2W[2, 3] = 4.0
META = {
    "camera_angle_x": float(2 * np.arctan(0.5 * 32 / 40.0)),
    "frames": [{"file_path": "./r_0", "transform_matrix": _C2W.tolist()}],
}  # no w, h: `hw` gives the size


def _adlift_setup():
    raw = scene(jax.random.key(0), 3)
    cams = splat.orbit_cameras(2, radius=3.0, height=0.5, focal=7.0, hw=AD_HW)
    theta = adlift.init_safeguards(raw, 2, key=jax.random.key(7), opacity_logit=-1.0)
    return raw, cams, theta


def _render(**kw):
    return splat.render(scene(jax.random.key(0), 3), camera(), hw=HW, **kw)


def _tile_counts(**kw):
    return splat.tile_counts(scene(jax.random.key(0), 3), camera(), hw=HW, **kw)


def _certified(**kw):
    raw, _, theta = _adlift_setup()
    return adlift.certified_linf(raw, theta, **kw)


def _init(**kw):
    return adlift.init_safeguards(
        scene(jax.random.key(0), 3), 2, **{"key": jax.random.key(7), **kw}
    )


def _lifted(**kw):
    raw, cams, theta = _adlift_setup()
    kw = {"n_outer": 1, "n_fit": 1, **kw}
    return adlift.lifted_pgd(raw, theta, cams, grey_loss, PARAMS, hw=AD_HW, **kw).safeguards


def _evaluate(**kw):
    raw, cams, theta = _adlift_setup()
    return tuple(adlift.evaluate_protection(raw, theta, cams, grey_loss, PARAMS, hw=AD_HW, **kw))


def _read(**kw):
    kw = {"hw": (24, 32), **kw}
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "transforms.json"
        path.write_text(json.dumps(META))
        return sio.read_transforms_json(path, **kw).cameras


def _write_ply(**kw):
    """Write a 3-Gaussian asset into a temporary folder (removed after the call)."""
    with tempfile.TemporaryDirectory(prefix="jaxkit-kw-") as d:
        return sio.write_ply(pathlib.Path(d) / "a.ply", _ASSET, **kw)


_N3 = _rng.normal(size=(2, 3)).astype(np.float32)
_QUATS = _rng.normal(size=(2, 4)).astype(np.float32)

_ASSET = sio.GaussianAsset(
    _rng.normal(size=(3, 3)).astype(np.float32),
    _rng.uniform(-2, -1, size=(3, 3)).astype(np.float32),
    _rng.normal(size=(3, 4)).astype(np.float32),
    _rng.normal(size=3).astype(np.float32),
    _rng.normal(size=(3, 3)).astype(np.float32),
    _rng.normal(size=(3, 9)).astype(np.float32),
)

RECIPES = {
    "jaxkit.splat.quaternion_to_rotation": functools.partial(splat.quaternion_to_rotation, _QUATS),
    "jaxkit.splat.covariance_from_scale_rotation": functools.partial(
        splat.covariance_from_scale_rotation, _N3, _QUATS
    ),
    "jaxkit.splat.from_scale_rotation": functools.partial(
        splat.from_scale_rotation, _N3, 0.1 * _N3, _QUATS, _N3[:, 0], np.abs(_N3)
    ),
    "jaxkit.splat.render": _render,
    "jaxkit.splat.tile_counts": _tile_counts,
    "jaxkit.splat.adlift.certified_linf": _certified,
    "jaxkit.splat.adlift.init_safeguards": _init,
    "jaxkit.splat.adlift.lifted_pgd": _lifted,
    "jaxkit.splat.adlift.evaluate_protection": _evaluate,
    "jaxkit.splat.io.read_transforms_json": _read,
    "jaxkit.splat.io.write_ply": _write_ply,
    "jaxkit.splat.stack_cameras": lambda **kw: splat.stack_cameras([camera(), camera()], **kw),
    "jaxkit.splat.adlift.safeguard_gaussians": lambda **kw: adlift.safeguard_gaussians(
        _adlift_setup()[2], **kw
    ),
    "jaxkit.splat.adlift.protected_scene": lambda **kw: adlift.protected_scene(
        *_adlift_setup()[::2], **kw
    ),
}

EXEMPT: dict[str, str] = {}

ANY_RANK = {
    "jaxkit.splat.quaternion_to_rotation:q": "[..., 4]: any leading batch axes (documented)",
    "jaxkit.splat.covariance_from_scale_rotation:log_scales": (
        "[..., 3]: any leading batch axes, broadcast with `quaternions` (documented)"
    ),
    "jaxkit.splat.covariance_from_scale_rotation:quaternions": (
        "[..., 4]: any leading batch axes, broadcast with `log_scales` (documented)"
    ),
}
