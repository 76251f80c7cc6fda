"""Keyword-sweep recipes for soft (see tests/keywords.py)."""

import functools

import jax
import numpy as np

from jaxkit import soft
from jaxkit.soft import random as srandom

_rng = np.random.default_rng(0)
X = _rng.normal(size=(4, 6)).astype(np.float32)
Y = _rng.normal(size=(4, 6)).astype(np.float32)
UNIT = _rng.uniform(size=(4, 6)).astype(np.float32)  # truth values in [0, 1] for soft.all
LOGITS = _rng.normal(size=(3, 5)).astype(np.float32)
PROBS = np.full((5,), 0.2, np.float32)


def _on(fn, *args):
    """A recipe: ``fn(*args, **kw)``."""
    return functools.partial(fn, *args)


def _keyed(name, **args):
    """A recipe for ``soft.random.<name>``: a fresh key and ``args``, all by keyword.

    The key is positional first in ``soft.random`` (as in ``jax.random``) but is passed by
    keyword here, so that the sweep's ``key=`` replaces it. The function is looked up in
    the module at call time (the array sweep patches it there).
    """
    return lambda **kw: getattr(srandom, name)(**{"key": jax.random.key(0), **args, **kw})


# Functions of ``x`` alone (elementwise, reductions, sorting), with their straight-through twins.
_POINTWISE = ["abs", "heaviside", "relu", "round", "sign"]
_ALONG = ["sort", "rank", "argsort", "max", "min", "argmax", "argmin", "median", "argmedian"]
_UNARY = _POINTWISE + _ALONG
# Functions of ``x`` and ``y`` (comparisons).
_BINARY = ["equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "isclose"]

RECIPES = {}
for _name in _UNARY:
    for _suffix in ("", "_st"):
        RECIPES[f"jaxkit.soft.{_name}{_suffix}"] = _on(getattr(soft, _name + _suffix), X)
for _name in _BINARY:
    for _suffix in ("", "_st"):
        RECIPES[f"jaxkit.soft.{_name}{_suffix}"] = _on(getattr(soft, _name + _suffix), X, Y)
for _suffix in ("", "_st"):
    RECIPES[f"jaxkit.soft.clip{_suffix}"] = _on(getattr(soft, "clip" + _suffix), X, -0.5, 0.5)
    for _name in ("percentile", "argpercentile"):
        RECIPES[f"jaxkit.soft.{_name}{_suffix}"] = _on(getattr(soft, _name + _suffix), X, 30.0)
    for _name in ("quantile", "argquantile"):
        RECIPES[f"jaxkit.soft.{_name}{_suffix}"] = _on(getattr(soft, _name + _suffix), X, 0.3)
    for _name in ("top_k", "argtop_k"):
        RECIPES[f"jaxkit.soft.{_name}{_suffix}"] = _on(getattr(soft, _name + _suffix), X, 2)

RECIPES["jaxkit.soft.sigmoidal"] = _on(soft.sigmoidal, X)  # no straight-through twin
RECIPES["jaxkit.soft.softrelu"] = _on(soft.softrelu, X)
RECIPES["jaxkit.soft.all"] = _on(soft.all, UNIT)
RECIPES["jaxkit.soft.any"] = _on(soft.any, UNIT)
for _name in ("logical_and", "logical_or", "logical_xor"):
    RECIPES[f"jaxkit.soft.{_name}"] = _on(getattr(soft, _name), UNIT, UNIT[::-1])
RECIPES["jaxkit.soft.norm"] = _on(soft.norm, X)
RECIPES["jaxkit.soft.calibrate"] = _on(soft.calibrate, "softsort", 64)
RECIPES["jaxkit.soft.isotonic"] = _on(soft.isotonic, X)
RECIPES["jaxkit.soft.project_permutahedron"] = _on(soft.project_permutahedron, X, Y)
_STARTS = [np.full((4,), 0.25, np.float32), np.full((6,), 1 / 6, np.float32)]  # one per axis
RECIPES["jaxkit.soft.dynamic_slice"] = _on(soft.dynamic_slice, X, _STARTS, [2, 3])
RECIPES["jaxkit.soft.dynamic_index_in_dim"] = _on(soft.dynamic_index_in_dim, X, _STARTS[0])
RECIPES["jaxkit.soft.dynamic_slice_in_dim"] = _on(soft.dynamic_slice_in_dim, X, _STARTS[0], 2)
_SOFT_INDEX = np.full((2, 6), 1 / 6, np.float32)  # two soft positions over the last axis
RECIPES["jaxkit.soft.take"] = lambda **kw: soft.take(X, _SOFT_INDEX, **{"axis": 1, **kw})
RECIPES["jaxkit.soft.take_along_axis"] = _on(
    soft.take_along_axis, X, np.broadcast_to(_SOFT_INDEX, (4, 2, 6))
)
RECIPES["jaxkit.soft.random.temperature_schedule"] = lambda **kw: srandom.temperature_schedule(
    1.0, 0.1, 10, **kw
)(3)
RECIPES["jaxkit.soft.banded_error_bound"] = lambda **kw: soft.banded_error_bound(
    "sort", X, window=2, **kw
)

# soft.random mirrors jax.random: the key, then the distribution's arguments (by keyword).
# gumbel_sinkhorn's softness has no default: the recipe passes one.
SQUARE = LOGITS[:, :3]
_RANDOM = {
    "bernoulli": {},
    "binomial": {"n": 5, "p": 0.3},
    "categorical": {"logits": LOGITS},
    "choice": {"a": 5},
    "multinomial": {"n": 5, "p": PROBS},
    "permutation": {"x": X},
    "rademacher": {},
    "gumbel_sinkhorn": {"log_alpha": SQUARE, "softness": 0.5},
}
for _name, _args in _RANDOM.items():
    for _suffix in ("", "_st"):
        RECIPES[f"jaxkit.soft.random.{_name}{_suffix}"] = _keyed(_name + _suffix, **_args)

for _name in ("logical_not", "arccos", "arcsin", "log", "sqrt"):
    RECIPES[f"jaxkit.soft.{_name}"] = _on(getattr(soft, _name), UNIT)
RECIPES["jaxkit.soft.div"] = _on(soft.div, X, Y)
RECIPES["jaxkit.soft.where"] = _on(soft.where, UNIT, X, Y)
RECIPES["jaxkit.soft.choose"] = _on(soft.choose, np.full((6, 2), 0.5, np.float32), X[:2])
RECIPES["jaxkit.soft.random.linear_schedule"] = lambda **kw: srandom.linear_schedule(
    1.0, 0.1, 10, **kw
)(np.arange(3))
RECIPES["jaxkit.soft.random.exponential_schedule"] = lambda **kw: srandom.exponential_schedule(
    1.0, 0.1, 10, **kw
)(np.arange(3))

EXEMPT: dict[str, str] = {}

# The array arguments whose rank is free by design (tests/arrays.py skips their rank probes).
_ELEMENTWISE = "elementwise: any shape"
_ALONG_AXIS = "along `axis`: any rank, the other axes are batch axes"
ANY_RANK: dict[str, str] = {}
for _name in (*_POINTWISE, "clip"):
    for _suffix in ("", "_st"):
        ANY_RANK[f"jaxkit.soft.{_name}{_suffix}:x"] = _ELEMENTWISE
ANY_RANK["jaxkit.soft.sigmoidal:x"] = _ELEMENTWISE
ANY_RANK["jaxkit.soft.softrelu:x"] = _ELEMENTWISE
for _name in _BINARY:
    for _suffix in ("", "_st"):
        for _arg in ("x", "y"):
            ANY_RANK[f"jaxkit.soft.{_name}{_suffix}:{_arg}"] = "elementwise, `x` and `y` broadcast"
for _name in ("logical_and", "logical_or", "logical_xor"):
    for _arg in ("x", "y"):
        ANY_RANK[f"jaxkit.soft.{_name}:{_arg}"] = "elementwise, `x` and `y` broadcast"
_QUANTILES = ["percentile", "argpercentile", "quantile", "argquantile", "top_k", "argtop_k"]
for _name in _ALONG + _QUANTILES:
    for _suffix in ("", "_st"):
        ANY_RANK[f"jaxkit.soft.{_name}{_suffix}:x"] = _ALONG_AXIS
ANY_RANK["jaxkit.soft.banded_error_bound:x"] = _ALONG_AXIS + " (as the bounded operator)"
for _name in ("take", "dynamic_index_in_dim", "dynamic_slice_in_dim"):
    ANY_RANK[f"jaxkit.soft.{_name}:x"] = "indexed along `axis` (as in `jnp` / `lax`): any rank"
BROADCAST_OK = {  # NumPy's rule for take_along_axis: the axes other than `axis` broadcast
    f"jaxkit.soft.take_along_axis:{_arg}": "the axes but `axis` broadcast (documented, as NumPy)"
    for _arg in ("x", "soft_index")
}
ANY_RANK["jaxkit.soft.all:x"] = "a reduction along `axis` (or all axes): any rank"
ANY_RANK["jaxkit.soft.any:x"] = "a reduction along `axis` (or all axes): any rank"
ANY_RANK["jaxkit.soft.norm:x"] = "a norm over `axis` (or all axes): any rank"
ANY_RANK["jaxkit.soft.isotonic:y"] = "(..., n): along the last axis, leading batch axes"
for _arg in ("z", "w"):  # the pair is checked: equal shapes up to leading 1s, or one (n,)
    ANY_RANK[f"jaxkit.soft.project_permutahedron:{_arg}"] = (
        "(..., n): leading batch axes, or (n,) shared by every row of the other"
    )
for _suffix in ("", "_st"):
    _r = f"jaxkit.soft.random.{{}}{_suffix}:{{}}"
    ANY_RANK[_r.format("categorical", "logits")] = (
        "categories along `axis`, the other axes are batch axes"
    )
    ANY_RANK[_r.format("multinomial", "p")] = "(..., k): categories last, leading batch axes"
    ANY_RANK[_r.format("permutation", "x")] = "mixed along `axis`: any rank >= 1"
    ANY_RANK[_r.format("gumbel_sinkhorn", "log_alpha")] = "(..., n, n): leading batch axes"
for _name in ("logical_not", "arccos", "arcsin", "log", "sqrt"):
    ANY_RANK[f"jaxkit.soft.{_name}:x"] = _ELEMENTWISE
for _arg in ("x", "y"):
    ANY_RANK[f"jaxkit.soft.div:{_arg}"] = "elementwise, `x` and `y` broadcast"
for _arg in ("condition", "x", "y"):
    ANY_RANK[f"jaxkit.soft.where:{_arg}"] = "elementwise, `condition`, `x` and `y` broadcast"
