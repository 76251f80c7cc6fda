"""Reynolds projection onto equivariant maps, its complement, bases and errors.

For ``W`` in ``R^{d_out x d_in}`` the Reynolds operator is
``P(W) = E_{g ~ Haar}[rho_out(g)^T W rho_in(g)]``. With orthogonal representations it
is the orthogonal projector (Frobenius inner product) onto the equivariant maps
``{W : rho_out(g) W = W rho_in(g) for all g}``; ``Q = I - P`` projects onto the
non-equivariant complement. Paths (chosen statically from ``group.kind``):

- finite groups: exact mean over all elements;
- SO(2) on R^2 blocks: each 2x2 block ``B -> (tr B / 2) I + (tr(J^T B) / 2) J``;
- O(3)/SO(3) irreps (Schur): between blocks of the same irrep the
  ``(mul_out (2l+1)) x (mul_in (2l+1))`` block maps to ``M (x) I_{2l+1}`` with
  ``M_uv = tr(W_uv) / (2l+1)``; between different irreps to 0.

References:
  Pertigkiozoglou et al., "Recurrent Equivariant Constraint Modulation", ICML 2026,
  arXiv:2602.02853. Finzi, Welling, Wilson, "A Practical Method for Constructing
  Equivariant Multilayer Perceptrons for Arbitrary Matrix Groups", ICML 2021.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxkit import _validate
from jaxkit._jit import checked_jit
from jaxkit._typing import accumulation_dtype as acc_dtype
from jaxkit.equivariance._groups import Group


def _check_weight(w: Any, group: Group, *, name: str = "w") -> Array:
    if not isinstance(group, Group):
        raise TypeError(f"`group` must be a jaxkit.equivariance.Group, got {type(group).__name__}.")
    _validate.floating(w, name=name)  # before jnp.asarray: a str names the argument
    _validate.min_ndim(w, 2, name=name)
    w = jnp.asarray(w)
    if w.shape[-2:] != (group.d_out, group.d_in):
        raise TypeError(
            f"`{name}` must have trailing shape (d_out, d_in) = ({group.d_out}, "
            f"{group.d_in}) for {group!r}, got shape {w.shape}."
        )
    return w


def _same_irrep(a: Any, b: Any, parity: bool) -> bool:
    return a.l == b.l and (a.p == b.p or not parity)


def _reynolds_o3(w: Array, group: Group) -> Array:
    batch = w.shape[:-2]
    rows = []
    for sl_o, (mo, iro) in zip(group.irreps_out.slices(), group.irreps_out, strict=True):
        cols = []
        for sl_i, (mi, iri) in zip(group.irreps_in.slices(), group.irreps_in, strict=True):
            blk = w[..., sl_o, sl_i]
            if mo == 0 or mi == 0 or not _same_irrep(iro, iri, group.parity):
                cols.append(jnp.zeros_like(blk))  # *_like keeps the batch sharding
                continue
            d = iro.dim
            eye = jnp.eye(d, dtype=w.dtype)
            m = jnp.einsum("...uivj,ij->...uv", blk.reshape(*batch, mo, d, mi, d), eye) / d
            cols.append(jnp.einsum("...uv,ij->...uivj", m, eye).reshape(*batch, mo * d, mi * d))
        rows.append(jnp.concatenate(cols, axis=-1))
    return jnp.concatenate(rows, axis=-2)


def _reynolds_so2(w: Array, group: Group) -> Array:
    batch = w.shape[:-2]
    b = w.reshape(*batch, group.mult_out, 2, group.mult_in, 2)
    a = 0.5 * (b[..., :, 0, :, 0] + b[..., :, 1, :, 1])
    c = 0.5 * (b[..., :, 1, :, 0] - b[..., :, 0, :, 1])
    out = jnp.stack([jnp.stack([a, -c], -1), jnp.stack([c, a], -1)], -3)  # [.., mo, 2, mi, 2]
    return out.reshape(*batch, group.d_out, group.d_in)


def _reynolds_finite(w: Array, group: Group) -> Array:
    rin, rout = group.elements(w.dtype)
    return jnp.einsum("gji,...jk,gkl->...il", rout, w, rin) / group.order


def _check_args(given) -> None:
    """On the host, before the jit: a string names `w`, not a private function."""
    _check_weight(given["w"], given["group"])
    if "n_samples" in given:
        _validate.python_int(given["n_samples"], name="n_samples", minimum=1)
        _validate.is_key(given["key"])


@checked_jit(static_argnames=("group",), check=_check_args)
def reynolds(
    w: Float[ArrayLike, "*batch d_out d_in"], group: Group
) -> Float[Array, "*batch d_out d_in"]:
    """Project ``w`` onto the maps that commute with ``group``: ``P(w)``.

    Args:
      w: Weight matrices, trailing shape ``(group.d_out, group.d_in)``, any leading
        batch axes.
      group: The :class:`Group` (static); its kind selects the exact path.

    Returns:
      ``P(w)``, same shape and dtype as ``w`` (accumulated in f32, f64 for f64).

    Raises:
      TypeError: If ``w`` has the wrong shape or is not floating.

    References:
      Pertigkiozoglou et al., ICML 2026 (arXiv:2602.02853), the equivariant branch.
    """
    w = _check_weight(w, group)
    acc = acc_dtype(w.dtype)
    wa = w.astype(acc)
    if group.kind == "finite":
        out = _reynolds_finite(wa, group)
    elif group.kind == "so2":
        out = _reynolds_so2(wa, group)
    else:
        out = _reynolds_o3(wa, group)
    return out.astype(w.dtype)


@checked_jit(static_argnames=("group",), check=_check_args)
def complement(
    w: Float[ArrayLike, "*batch d_out d_in"], group: Group
) -> Float[Array, "*batch d_out d_in"]:
    """The non-equivariant part ``Q(w) = w - P(w)`` (orthogonal complement of ``P``).

    ``w`` as in :func:`reynolds` (trailing ``(d_out, d_in)``, any leading batch axes).
    """
    w = _check_weight(w, group)
    acc = acc_dtype(w.dtype)
    wa = w.astype(acc)
    return (wa - reynolds(wa, group)).astype(w.dtype)


@checked_jit(static_argnames=("group", "n_samples"), check=_check_args)
def reynolds_mc(
    w: Float[ArrayLike, "*batch d_out d_in"],
    group: Group,
    *,
    key: PRNGKeyArray,
    n_samples: int = 256,
) -> Float[Array, "*batch d_out d_in"]:
    """Monte-Carlo Reynolds average over ``n_samples`` Haar samples (fallback).

    ``w`` takes leading batch axes (trailing shape ``(group.d_out, group.d_in)``). Jitted
    like jax.numpy (``group`` and ``n_samples`` static); the checks run first, on the host.
    """
    w = _check_weight(w, group)
    acc = acc_dtype(w.dtype)
    rin, rout = group.sample(n_samples, acc, key=key)
    out = jnp.einsum("gji,...jk,gkl->...il", rout, w.astype(acc), rin) / n_samples
    return out.astype(w.dtype)


@functools.lru_cache(maxsize=64)
def _basis_cached(group: Group, tol: float) -> np.ndarray:
    if group.kind == "so2":
        eye2, j = np.eye(2), np.array([[0.0, -1.0], [1.0, 0.0]])
        out = []
        for u in range(group.mult_out):
            for v in range(group.mult_in):
                for blk in (eye2, j):
                    e = np.zeros((group.mult_out, 2, group.mult_in, 2))
                    e[u, :, v, :] = blk / np.sqrt(2.0)
                    out.append(e.reshape(group.d_out, group.d_in))
        return np.stack(out) if out else np.zeros((0, group.d_out, group.d_in))
    if group.kind == "o3":
        out = []
        for sl_o, (mo, iro) in zip(group.irreps_out.slices(), group.irreps_out, strict=True):
            for sl_i, (mi, iri) in zip(group.irreps_in.slices(), group.irreps_in, strict=True):
                if not _same_irrep(iro, iri, group.parity):
                    continue
                d = iro.dim
                for u in range(mo):
                    for v in range(mi):
                        e = np.zeros((group.d_out, group.d_in))
                        blk = np.zeros((mo, d, mi, d))
                        blk[u, :, v, :] = np.eye(d) / np.sqrt(d)
                        e[sl_o, sl_i] = blk.reshape(mo * d, mi * d)
                        out.append(e)
        return np.stack(out) if out else np.zeros((0, group.d_out, group.d_in))
    # finite: eigenvectors (eigenvalue 1) of the averaged kron(rho_out^T, rho_in^T).
    rin, rout = group.elements_in, group.elements_out
    p = np.mean([np.kron(ro.T, ri.T) for ri, ro in zip(rin, rout, strict=True)], axis=0)
    p = 0.5 * (p + p.T)
    evals, evecs = np.linalg.eigh(p)
    if np.any((evals > tol) & (evals < 1.0 - tol)):
        raise ValueError(
            f"`group` {group.name}: the averaged operator is not a projector "
            f"within tol={tol}; is the representation orthogonal?"
        )
    keep = evals > 0.5  # a projector: eigenvalues are 0 or 1 (up to ~tol)
    vecs = evecs[:, keep].T
    return vecs.reshape(-1, group.d_out, group.d_in)


def equivariant_basis(group: Group, *, tol: float = 1e-6) -> np.ndarray:
    """Orthonormal (Frobenius) basis of equivariant maps, ``[n_basis, d_out, d_in]``.

    Host-side NumPy (float64), cached per group. Closed form for SO(2) and O(3);
    eigen-decomposition of the (exact) Reynolds operator for finite groups.
    """
    if not isinstance(group, Group):
        raise TypeError(f"`group` must be a jaxkit.equivariance.Group, got {type(group).__name__}.")
    _validate.positive(tol=tol)
    return _basis_cached(group, float(tol))


Action = tuple[Callable[[Array], Array], Callable[[Array], Array]]


def matrix_actions(rin: Array, rout: Array) -> list[Action]:
    """Turn element matrices into ``(act_in, act_out)`` pairs acting on a last axis."""
    return [
        (
            lambda v, m=rin[i]: v @ m.T.astype(v.dtype),
            lambda v, m=rout[i]: v @ m.T.astype(v.dtype),
        )
        for i in range(rin.shape[0])
    ]


def equivariance_error(
    fn: Callable[[Array], Array],
    x: Float[ArrayLike, "batch ..."],
    group: Group | Sequence[Action],
    *,
    key: PRNGKeyArray | None = None,
    n_samples: int = 64,
) -> Float[Array, ""]:
    """Largest relative equivariance error ``max_g |f(g x) - g f(x)| / |f(x)|``.

    Args:
      fn: Batched map (the leading axis of ``x`` is the batch).
      x: Inputs, ``[batch, d_in]`` for a :class:`Group` (acting on the last axis).
      group: A :class:`Group` (all elements of a finite group, ``n_samples`` Haar
        samples otherwise), or a sequence of ``(act_in, act_out)`` callables acting
        on a batch (e.g. :func:`jaxkit.equivariance.c4_image_actions`).
      key: Needed for continuous groups.
      n_samples: Haar samples for continuous groups.

    Returns:
      Scalar (f32, f64 for f64 inputs): the worst relative error over the elements,
      ``|f(gx) - g f(x)|_F / (|f(x)|_F + tiny)`` over the batch.
    """
    if key is not None:
        _validate.is_key(key)
    _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
    x = jnp.asarray(x)
    _validate.python_int(n_samples, name="n_samples", minimum=1)
    if isinstance(group, Group):
        _validate.shape(x, (None, group.d_in), name="x")
        rin, rout = group.representatives(key=key, n=n_samples, dtype=acc_dtype(x.dtype))
        actions = matrix_actions(rin, rout)
    else:
        actions = list(group)
    fx = fn(x)
    acc = acc_dtype(fx.dtype)
    errs = []
    for act_in, act_out in actions:
        lhs = fn(act_in(x)).astype(acc)
        rhs = act_out(fx).astype(acc)
        num = jnp.sqrt(jnp.sum((lhs - rhs) ** 2))
        den = jnp.sqrt(jnp.sum(rhs**2)) + jnp.finfo(acc).tiny
        errs.append(num / den)
    return jnp.max(jnp.stack(errs))
