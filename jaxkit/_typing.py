"""Type aliases shared across jaxkit (jaxtyping-based)."""

from typing import Any, Literal, TypeAlias

from jaxtyping import Array, ArrayLike, PRNGKeyArray, PyTree, Real

RealScalarLike: TypeAlias = Real[ArrayLike, ""]
"""A continuous hyperparameter: Python number, NumPy scalar, 0-d array or tracer."""

KeyArray: TypeAlias = PRNGKeyArray
"""A typed key from ``jax.random.key`` (legacy ``PRNGKey`` arrays are accepted too)."""

Implementation: TypeAlias = Literal["auto", "xla", "pallas", "pallas_interpret"]
"""Kernel dispatch choice; see :mod:`jaxkit.kernels._dispatch`."""

Params: TypeAlias = PyTree[Array]

__all__ = [
    "Any",
    "Array",
    "ArrayLike",
    "Implementation",
    "KeyArray",
    "Params",
    "PyTree",
    "RealScalarLike",
]
