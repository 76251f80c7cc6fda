"""Type aliases and the dtype policy shared across jaxkit (jaxtyping-based)."""

from typing import Any, Literal, TypeAlias

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PRNGKeyArray, PyTree, Real

RealScalarLike: TypeAlias = Real[ArrayLike, ""]
"""A continuous hyperparameter: Python number, NumPy scalar, 0-d array or tracer."""

KeyArray: TypeAlias = PRNGKeyArray
"""A typed key from ``jax.random.key`` (legacy ``PRNGKey`` arrays are accepted too)."""

Implementation: TypeAlias = Literal["auto", "xla", "pallas", "pallas_interpret"]
"""Kernel dispatch choice; see :mod:`jaxkit.kernels._dispatch`."""

Params: TypeAlias = PyTree[Array]


def accumulation_dtype(dtype: Any) -> Any:
    """The one accumulation dtype policy: f64 for an f64 ``dtype``, f32 otherwise.

    Sums, matmuls and softmaxes accumulate in this dtype and cast back, so bf16/f16
    inputs accumulate in f32 and f64 inputs are never downcast.
    """
    return jnp.float64 if jnp.dtype(dtype) == jnp.dtype(jnp.float64) else jnp.float32


__all__ = [
    "Any",
    "Array",
    "ArrayLike",
    "Implementation",
    "KeyArray",
    "Params",
    "PyTree",
    "RealScalarLike",
    "accumulation_dtype",
]
