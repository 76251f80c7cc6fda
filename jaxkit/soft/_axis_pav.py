"""Permutahedron backends of the axiswise operators (values only, last axis).

``"pav"`` (= softjax ``fast_soft_sort``): the projection of anchors / softness onto
the permutahedron of ``x`` (or of ``x / softness`` onto that of ``1..n`` for ranks),
solved by PAV with a regulariser per mode (``smooth``: KL, ``c0``: L2, ``c1``/``c2``:
p-norms); ``o.solver`` picks the PAV algorithm. ``"smooth_sort"``: the smooth
(C-infinity) projection of :mod:`jaxkit.soft._smooth_sort`, without standardisation
(as softjax: the logit would amplify its errors).

References:
  Blondel et al., Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
"""

import builtins

import jax.numpy as jnp

from jaxkit.soft import _pav
from jaxkit.soft import _smooth_sort as SM
from jaxkit.soft._common import scal, standardize_and_squash, unsquash

PAV_REG = {"smooth": "kl", "c0": "l2", "c1": "p3", "c2": "p4"}  # c1: p=3/2, c2: p=4/3


def sort(xl, descending, softness, o):
    n = xl.shape[-1]
    scale = builtins.max(n - 1, 1)
    if o.method == "smooth_sort":
        anchors = jnp.arange(n, dtype=xl.dtype) / scale
        out = SM.project(anchors / scal(softness, xl.dtype), xl, softness)
        return jnp.flip(out, -1) if descending else out
    if o.standardize:
        xs, mean, std = standardize_and_squash(xl, axis=-1)
    else:
        xs = xl
    z = (jnp.arange(n, dtype=xs.dtype) / scale) / scal(softness, xs.dtype)
    out = _pav.project(z, xs, reg=PAV_REG[o.mode], solver=o.solver, z_order="asc")
    if descending:
        out = jnp.flip(out, -1)
    return unsquash(out, mean, std) if o.standardize else out


def rank(xl, xs, descending, softness, o):
    """Soft 1-based ranks (``xs``: the squashed ``xl``; smooth_sort ranks ``xl`` itself)."""
    n = xl.shape[-1]
    scale = builtins.max(n - 1, 1)
    w = jnp.arange(1, n + 1, dtype=xl.dtype) / scale
    if o.method == "smooth_sort":
        z = (-xl if descending else xl) / scal(softness, xl.dtype)
        return SM.project(z, w, softness) * scale
    z = (-xs if descending else xs) / scal(softness, xs.dtype)
    return _pav.project(z, w, reg=PAV_REG[o.mode], solver=o.solver, w_order="asc") * scale
