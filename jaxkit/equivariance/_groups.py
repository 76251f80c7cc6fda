"""Groups and their orthogonal representations on the input and output spaces.

A :class:`Group` describes how a compact group acts on a layer's input space
(``rho_in(g)``, ``d_in x d_in``) and output space (``rho_out(g)``, ``d_out x d_out``),
both orthogonal. It is a static (hashable) description, held by layers as a static
field; its arrays are NumPy (float64) and converted to the caller's accumulation dtype
at use. Four families are provided:

- ``cyclic_rot2d(n)``: C_n rotating ``mult_in`` / ``mult_out`` vectors of R^2;
- ``so2_rot2d()``: SO(2) on the same spaces (closed-form projection);
- ``c4_regular()``: C_4 by cyclic shifts of a group axis of size 4 (regular
  representation; the fibre representation of a p4 group convolution);
- ``o3_irreps(irreps_in, irreps_out)``: O(3) (or SO(3)) through ``e3nn-jax`` irreps;
- ``finite_group(rep_in, rep_out)``: any finite group given by its matrices.

References:
  Pertigkiozoglou, Petrache, Trivedi, Daniilidis, "Recurrent Equivariant Constraint
  Modulation", ICML 2026, arXiv:2602.02853.
"""

import dataclasses
import functools
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from jaxkit import _validate
from jaxkit._extras import require

Kind = Literal["finite", "so2", "o3"]


class GroupSample(NamedTuple):
    """Group elements as matrices: ``rho_in [n, d_in, d_in]`` and ``rho_out [n, d_out, d_out]``."""

    rho_in: Array
    rho_out: Array


@dataclasses.dataclass(frozen=True, eq=False)
class Group:
    """A compact group acting orthogonally on an input and an output space.

    Build it with :func:`cyclic_rot2d`, :func:`so2_rot2d`, :func:`c4_regular`,
    :func:`o3_irreps` or :func:`finite_group`. Equality and hashing use ``signature``,
    so a group can be a static field of an ``eqx.Module`` and a ``jit`` static value.

    Attributes:
      name: Human-readable name.
      kind: ``"finite"`` (exact mean over ``elements``), ``"so2"`` (2x2 rotation
        blocks, closed-form projection) or ``"o3"`` (e3nn irreps, Schur projection).
      d_in: Dimension of the input space.
      d_out: Dimension of the output space.
      signature: Hashable tuple identifying the group and its representations.
      elements_in: ``[n, d_in, d_in]`` matrices (finite groups) or ``None``.
      elements_out: ``[n, d_out, d_out]`` matrices (finite groups) or ``None``.
      generator_index: For finite groups, the index of a generating element (used by
        the Lie-derivative penalty's discrete analogue).
      mult_in: Number of R^2 vectors in the input (``so2`` and rotation groups).
      mult_out: Number of R^2 vectors in the output.
      irreps_in: ``e3nn_jax.Irreps`` of the input (``o3``) or ``None``.
      irreps_out: ``e3nn_jax.Irreps`` of the output (``o3``) or ``None``.
      parity: For ``o3``: True for O(3) (improper elements sampled), False for SO(3).
    """

    name: str
    kind: Kind
    d_in: int
    d_out: int
    signature: tuple
    elements_in: np.ndarray | None = None
    elements_out: np.ndarray | None = None
    generator_index: int = 1
    mult_in: int = 0
    mult_out: int = 0
    irreps_in: Any = None
    irreps_out: Any = None
    parity: bool = True

    def __post_init__(self):
        for name in ("generator_index", "mult_in", "mult_out"):
            _validate.python_int(getattr(self, name), name=name, minimum=0)
        parity = _validate.flag(self.parity, name="parity")  # NumPy's bool: a plain bool
        object.__setattr__(self, "parity", parity)

    def __hash__(self) -> int:
        return hash(self.signature)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and self.signature == other.signature

    def __repr__(self) -> str:
        return f"Group({self.name}, d_in={self.d_in}, d_out={self.d_out})"

    @property
    def order(self) -> int | None:
        """Number of elements for a finite group, ``None`` for a continuous one."""
        return None if self.elements_in is None else int(self.elements_in.shape[0])

    def elements(self, dtype: Any = jnp.float32) -> tuple[Array, Array]:
        """All elements ``(rho_in [n, d_in, d_in], rho_out [n, d_out, d_out])`` (finite)."""
        if self.elements_in is None:
            raise ValueError(
                f"`group` {self.name} is continuous; use `sample(n, key=key)` instead of "
                "`elements()`."
            )
        return (
            jnp.asarray(self.elements_in, dtype),
            jnp.asarray(self.elements_out, dtype),
        )

    def sample(self, n: int, dtype: Any = jnp.float32, *, key: PRNGKeyArray) -> "GroupSample":
        """``n`` Haar-random elements ``(rho_in [n, d_in, d_in], rho_out [n, ...])``."""
        _validate.is_key(key)
        n = _validate.python_int(n, name="n", minimum=1)
        if self.kind == "finite":
            idx = jax.random.randint(key, (n,), 0, self.order)
            rin, rout = self.elements(dtype)
            return GroupSample(rin[idx], rout[idx])
        if self.kind == "so2":
            ang = jax.random.uniform(key, (n,), dtype, 0.0, 2 * np.pi)
            return GroupSample(_rot_blocks(ang, self.mult_in), _rot_blocks(ang, self.mult_out))
        # o3: Haar on SO(3), times -I with probability 1/2 for O(3).
        e3nn = e3nn_jax()

        k1, k2 = jax.random.split(key)
        rot = e3nn.rand_matrix(k1, (n,), dtype=jnp.float32)
        if self.parity:
            sign = jnp.where(jax.random.bernoulli(k2, 0.5, (n,)), 1.0, -1.0)
            rot = rot * sign[:, None, None]
        rin = jax.vmap(self.irreps_in.D_from_matrix)(rot)
        rout = jax.vmap(self.irreps_out.D_from_matrix)(rot)
        return GroupSample(rin.astype(dtype), rout.astype(dtype))

    def representatives(
        self, *, key: PRNGKeyArray | None = None, n: int = 64, dtype: Any = jnp.float32
    ) -> tuple[Array, Array]:
        """All elements of a finite group, else ``n`` Haar samples drawn with ``key``.

        ``key`` (keyword-only, as everywhere) and ``n`` are checked when given, for a finite
        group too.

        Raises:
          TypeError: If ``key`` is given and is not a PRNG key, or ``n`` is not a Python int.
          ValueError: If ``n < 1``, or no ``key`` is given for a continuous group.
        """
        if key is not None:
            _validate.is_key(key)
        n = _validate.python_int(n, name="n", minimum=1)
        if self.kind == "finite":
            return self.elements(dtype)
        if key is None:
            raise ValueError(
                f"`key` is required for the continuous group {self.name} (Haar samples)."
            )
        return self.sample(n, dtype, key=key)

    def lie_algebra(self, dtype: Any = jnp.float32) -> tuple[Array, Array] | None:
        """Lie-algebra generators ``(A_in [k, d_in, d_in], A_out [k, ...])`` or ``None``."""
        if self.kind == "so2":
            j = np.array([[0.0, -1.0], [1.0, 0.0]])
            a_in = np.kron(np.eye(self.mult_in), j)[None]
            a_out = np.kron(np.eye(self.mult_out), j)[None]
            return jnp.asarray(a_in, dtype), jnp.asarray(a_out, dtype)
        if self.kind == "o3":
            return (
                jnp.asarray(self.irreps_in.generators(), dtype),
                jnp.asarray(self.irreps_out.generators(), dtype),
            )
        return None


def _rot2(angle: np.ndarray) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def _rot_blocks(angle: Array, mult: int) -> Array:
    """Block-diagonal rotation matrices ``[n, 2 mult, 2 mult]`` for angles ``[n]``."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    r = jnp.stack([jnp.stack([c, -s], -1), jnp.stack([s, c], -1)], -2)  # [n, 2, 2]
    eye = jnp.eye(mult, dtype=angle.dtype)
    return jnp.einsum("uv,nij->nuivj", eye, r).reshape(angle.shape[0], 2 * mult, 2 * mult)


def _check_mult(**kw: int) -> None:
    for name, v in kw.items():
        _validate.python_int(v, name=name, minimum=1)


def e3nn_jax() -> Any:
    """Import ``e3nn_jax`` (the ``equivariance`` extra), or raise an ``ImportError`` naming it."""
    return require("e3nn_jax", extra="equivariance", what="O(3) irreps need e3nn-jax")


def _check_orthogonal(mats: np.ndarray, *, name: str, tol: float = 1e-6) -> None:
    eye = np.eye(mats.shape[-1])
    err = np.max(np.abs(np.einsum("nij,nkj->nik", mats, mats) - eye), initial=0.0)
    if err > tol:
        raise ValueError(
            f"`{name}` must be an orthogonal representation (rho(g) rho(g)^T = I); the "
            f"largest deviation is {err:.3g}. Orthonormalise it first (e.g. conjugate by "
            "the inverse square root of the averaged Gram matrix)."
        )


# typed: a cache hit skips the checks, so 2.0 or 1 must not find 2's or True's entry.
@functools.lru_cache(maxsize=64, typed=True)
def cyclic_rot2d(n: int, *, mult_in: int = 1, mult_out: int = 1) -> Group:
    """C_n rotating ``mult_in`` input and ``mult_out`` output vectors of R^2.

    Args:
      n: Order of the group (rotations by ``2 pi k / n``), ``n >= 1``.
      mult_in: Number of input vectors (``d_in = 2 mult_in``).
      mult_out: Number of output vectors.

    Returns:
      A finite :class:`Group`; element 1 (rotation by ``2 pi / n``) generates it.
    """
    _check_mult(n=n, mult_in=mult_in, mult_out=mult_out)
    ang = 2 * np.pi * np.arange(n) / n
    r = _rot2(ang)
    rin = np.stack([np.kron(np.eye(mult_in), r[k]) for k in range(n)])
    rout = np.stack([np.kron(np.eye(mult_out), r[k]) for k in range(n)])
    return Group(
        name=f"C{n}-rot2d",
        kind="finite",
        d_in=2 * mult_in,
        d_out=2 * mult_out,
        signature=("cyclic_rot2d", n, mult_in, mult_out),
        elements_in=rin,
        elements_out=rout,
        generator_index=1 if n > 1 else 0,
        mult_in=mult_in,
        mult_out=mult_out,
    )


@functools.lru_cache(maxsize=64, typed=True)
def so2_rot2d(*, mult_in: int = 1, mult_out: int = 1) -> Group:
    """SO(2) rotating ``mult_in`` input and ``mult_out`` output vectors of R^2.

    The Reynolds projection is exact in closed form: each 2x2 block ``B`` maps to
    ``(tr B / 2) I + (tr(J^T B) / 2) J`` with ``J`` the 90-degree rotation.
    """
    _check_mult(mult_in=mult_in, mult_out=mult_out)
    return Group(
        name="SO(2)-rot2d",
        kind="so2",
        d_in=2 * mult_in,
        d_out=2 * mult_out,
        signature=("so2_rot2d", mult_in, mult_out),
        mult_in=mult_in,
        mult_out=mult_out,
    )


def _shift(n: int, k: int) -> np.ndarray:
    return np.roll(np.eye(n), k, axis=0)  # (P x)_i = x_{i-k}


@functools.lru_cache(maxsize=64, typed=True)
def c4_regular(*, channels_in: int = 1, channels_out: int = 1, trivial_in: bool = False) -> Group:
    """C_4 acting by the regular representation (cyclic shift of a group axis of 4).

    Features are laid out ``[channels, 4]`` (flattened channel-major); the element
    ``r`` maps ``f[c, s]`` to ``f[c, s - r]``. With ``trivial_in=True`` the input is
    ``[channels_in]`` invariant scalars (a lifting layer's fibre).
    """
    _check_mult(channels_in=channels_in, channels_out=channels_out)
    trivial_in = _validate.flag(trivial_in, name="trivial_in")  # a plain bool in the signature
    rin = np.stack(
        [
            np.eye(channels_in) if trivial_in else np.kron(np.eye(channels_in), _shift(4, k))
            for k in range(4)
        ]
    )
    rout = np.stack([np.kron(np.eye(channels_out), _shift(4, k)) for k in range(4)])
    return Group(
        name="C4-regular",
        kind="finite",
        d_in=channels_in * (1 if trivial_in else 4),
        d_out=4 * channels_out,
        signature=("c4_regular", channels_in, channels_out, trivial_in),
        elements_in=rin,
        elements_out=rout,
        generator_index=1,
    )


@functools.lru_cache(maxsize=64, typed=True)
def o3_irreps(irreps_in: str, irreps_out: str | None = None, *, parity: bool = True) -> Group:
    """O(3) (``parity=True``) or SO(3) acting through ``e3nn-jax`` irreps.

    Args:
      irreps_in: Input irreps, e.g. ``"16x0e+16x1o"`` (any ``e3nn_jax.Irreps`` string).
      irreps_out: Output irreps (default: ``irreps_in``).
      parity: Sample improper rotations too (O(3)); ``False`` gives SO(3).

    Returns:
      A :class:`Group` whose Reynolds projection is the exact Schur projection.

    Raises:
      ImportError: Without e3nn-jax (``pip install 'jaxkit[equivariance]'``).
      TypeError: If ``parity`` is not a bool.
      ValueError: If the irreps strings are not valid.
    """
    parity = _validate.flag(parity, name="parity")  # a plain bool in the signature and the name
    e3nn = e3nn_jax()

    try:
        ir_in = e3nn.Irreps(irreps_in)
        ir_out = e3nn.Irreps(irreps_in if irreps_out is None else irreps_out)
    except (ValueError, AssertionError) as e:
        raise ValueError(f"`irreps_in`/`irreps_out` are not valid irreps: {e}") from e
    return Group(
        name=f"{'O' if parity else 'SO'}(3)[{ir_in} -> {ir_out}]",
        kind="o3",
        d_in=ir_in.dim,
        d_out=ir_out.dim,
        signature=("o3_irreps", str(ir_in), str(ir_out), parity),
        irreps_in=ir_in,
        irreps_out=ir_out,
        parity=parity,
    )


def finite_group(
    rep_in: Any, rep_out: Any, *, name: str = "finite", generator_index: int = 1
) -> Group:
    """A finite group given by all its elements' orthogonal matrices.

    Args:
      rep_in: ``[n, d_in, d_in]`` orthogonal matrices, one per group element (the
        identity among them).
      rep_out: ``[n, d_out, d_out]`` orthogonal matrices, in the same element order.
      name: Name for messages.
      generator_index: Index of an element that generates the group (for the
        discrete Lie-derivative penalty).

    Raises:
      TypeError: If the arrays are not real or do not have shape ``[n, d, d]`` with equal
        ``n``.
      ValueError: If a representation is not orthogonal.
    """
    generator_index = _validate.python_int(generator_index, name="generator_index", minimum=0)
    rin = _validate.host_real(rep_in, name="rep_in", what="a real array [n, d, d]")
    rout = _validate.host_real(rep_out, name="rep_out", what="a real array [n, d, d]")
    for nm, r in (("rep_in", rin), ("rep_out", rout)):
        if r.ndim != 3 or r.shape[1] != r.shape[2]:
            raise TypeError(f"`{nm}` must have shape [n, d, d], got shape {r.shape}.")
    if rin.shape[0] != rout.shape[0]:
        raise TypeError(
            f"`rep_in` and `rep_out` must list the same number of elements, got "
            f"{rin.shape[0]} and {rout.shape[0]}."
        )
    _check_orthogonal(rin, name="rep_in")
    _check_orthogonal(rout, name="rep_out")
    sig = ("finite", name, rin.shape, rout.shape, rin.tobytes(), rout.tobytes())
    return Group(
        name=name,
        kind="finite",
        d_in=rin.shape[1],
        d_out=rout.shape[1],
        signature=sig,
        elements_in=rin,
        elements_out=rout,
        generator_index=generator_index,
    )


def haar_sample(
    group: Group, n: int, *, key: PRNGKeyArray, dtype: Any = jnp.float32
) -> GroupSample:
    """``n`` Haar-random elements of ``group`` as :class:`GroupSample` ``(rho_in, rho_out)``.

    Finite groups sample elements uniformly; SO(2) and O(3)/SO(3) from the Haar measure.

    Raises:
      TypeError: If ``key`` is not a PRNG key or ``n`` not a Python int.
      ValueError: If ``n < 1``.
    """
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {jnp.dtype(dtype)}.")
    return group.sample(n, dtype, key=key)
