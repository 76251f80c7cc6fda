"""Independent constructions the engram erase must equal (used by the tests).

Both work from raw input rows, never from covariances or the engram code:

- :func:`natural_gradient_erase`: one unit natural-gradient step on the memory's
  output energy ``L_k(w) = 1/2 ||X_k w||^2`` (gradient by autodiff) with the
  K-FAC / Gauss-Newton Fisher ``F = (X^T X) kron I`` of a unit-variance Gaussian
  output model over the whole reference set, solved as an explicit
  ``(D_in D_out)``-square least-squares system. Small layers only.
- :func:`memit_erase`: the MEMIT/ROME-style closed form with edit keys ``X_k``
  mapped to 0 and preserved keys ``X_{-k}`` kept,
  ``argmin_w' ||X_{-k} w' - X_{-k} w||^2 + ||X_k w'||^2``, by minimum-norm
  least squares on the stacked rows.

With full-rank statistics both equal ``w - E_k`` (the engram erase at
``alpha = 1``, ``scale="count_ratio"``).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype


def _check(w, x_a, x_b, names):
    for name, a in zip(("w", *names), (w, x_a, x_b), strict=True):
        _validate.floating(a, name=name)  # before jnp.asarray: a str names the argument
    w, x_a, x_b = (jnp.asarray(a) for a in (w, x_a, x_b))
    _validate.ndim(w, 2, name="w")
    for name, x in zip(names, (x_a, x_b), strict=True):
        _validate.ndim(x, 2, name=name)
        _validate.shape(x, (None, w.shape[0]), name=name)
    return w, x_a, x_b


def _natgrad(w, x_target, x_all):
    out_dtype = w.dtype
    acc = accumulation_dtype(w.dtype)
    w, x_target, x_all = (a.astype(acc) for a in (w, x_target, x_all))

    def energy(v):
        return 0.5 * jnp.sum((x_target @ v) ** 2)

    g = jax.grad(energy)(w)
    d_out = w.shape[1]
    # vec is row-major: vec(w)[i * d_out + o] = w[i, o]; F = (X^T X) kron I_out
    fisher = jnp.kron(x_all.T @ x_all, jnp.eye(d_out, dtype=acc))
    step = jnp.linalg.lstsq(fisher, g.reshape(-1))[0]
    return (w - step.reshape(w.shape)).astype(out_dtype)


_natgrad_jit = jax.jit(_natgrad)


def natural_gradient_erase(
    w: Float[ArrayLike, "din dout"],
    x_target: Float[ArrayLike, "nk din"],
    x_all: Float[ArrayLike, "n din"],
) -> Float[Array, "din dout"]:
    """``w - F^+ grad L_k(w)``: one unit natural-gradient step (explicit Kronecker Fisher).

    Args:
      w: Weights ``[D_in, D_out]`` (``y = x @ w``).
      x_target: The memory's input rows.
      x_all: All reference rows (including ``x_target``).

    Returns:
      The stepped weights (memory ``O((D_in D_out)^2)``: test sizes only).
    """
    w, x_target, x_all = _check(w, x_target, x_all, ("x_target", "x_all"))
    return _natgrad_jit(w, x_target, x_all)


def _memit(w, x_forget, x_keep):
    out_dtype = w.dtype
    acc = accumulation_dtype(w.dtype)
    w, x_forget, x_keep = (a.astype(acc) for a in (w, x_forget, x_keep))
    a = jnp.concatenate([x_keep, x_forget], axis=0)
    t = jnp.concatenate([x_keep @ w, jnp.zeros((x_forget.shape[0], w.shape[1]), acc)], axis=0)
    return jnp.linalg.lstsq(a, t)[0].astype(out_dtype)


_memit_jit = jax.jit(_memit)


def memit_erase(
    w: Float[ArrayLike, "din dout"],
    x_forget: Float[ArrayLike, "nk din"],
    x_keep: Float[ArrayLike, "m din"],
) -> Float[Array, "din dout"]:
    """Minimum-norm ``argmin_w' ||X_keep w' - X_keep w||^2 + ||X_forget w'||^2``.

    Args:
      w: Weights ``[D_in, D_out]``.
      x_forget: Edit keys (mapped to output 0).
      x_keep: Preserved keys (outputs kept).
    """
    w, x_forget, x_keep = _check(w, x_forget, x_keep, ("x_forget", "x_keep"))
    return _memit_jit(w, x_forget, x_keep)
