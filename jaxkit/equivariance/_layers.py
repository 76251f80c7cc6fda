"""Relaxed equivariant layers (equinox): an equivariant branch plus a theta-scaled branch.

Every layer computes ``y = P(A) x + theta * U(B) x (+ invariant bias)`` with
``U(B) = Q(B) / (|Q(B)|_F + eps)``: the free branch is orthogonalised against the
equivariant subspace and normalised, so ``theta >= 0`` *is* the Frobenius norm of the
non-equivariant part of the effective weight, ``|Q(W_eff)|_F = theta``. Both branches
are fused into one effective weight, so ``theta = 0`` gives exactly the equivariant
branch (``P(A) + 0 = P(A)`` bitwise) and ``relax=False`` drops the free branch.

The layer form (orthogonalised, normalised free branch scaled by a per-layer level) is
jaxkit's **reconstruction** of RECM (no public code); its predecessor CR
(``StefanosPert/Equivariant_Optimization_CR``, NeurIPS 2024) uses ``f_eq(x) + theta(t) W x``
with a raw dense ``W`` and a scheduled global ``theta(t)``.

References:
  Pertigkiozoglou, Petrache, Trivedi, Daniilidis, "Recurrent Equivariant Constraint
  Modulation", ICML 2026, arXiv:2602.02853 (reconstructed layer form).
  Pertigkiozoglou et al., "Improving Equivariant Model Training via Constraint
  Relaxation", NeurIPS 2024 (the CR layer and schedule).
"""

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype as acc_dtype
from jaxkit.equivariance._c4 import c4_conv_reynolds
from jaxkit.equivariance._groups import Group
from jaxkit.equivariance._project import _check_weight, complement, reynolds


@functools.partial(jax.jit, static_argnames=("shape", "scale", "bias_size", "dtype"))
def _branch_init(key, *, shape, scale, bias_size, dtype):
    """The branches' initial weights and the zero bias, as one program.

    ``(scale N(0, 1), N(0, 1), zeros)`` from ``split(key)``; an eager constructor compiled
    the split, both draws, the scaling and the zeros op by op.
    """
    ka, kb = jax.random.split(key)
    eq = scale * jax.random.normal(ka, shape, dtype)
    free = jax.random.normal(kb, shape, dtype)
    return eq, free, None if bias_size is None else jnp.zeros((bias_size,), dtype)


def _check_theta_init(theta_init: Any) -> None:
    _validate.finite_scalar(theta_init=theta_init)
    _validate.non_negative(theta_init=theta_init)


def _check_eps(eps) -> float:
    """A layer's ``eps``: a finite real > 0 (NaN / negative gave NaN or blown-up weights)."""
    _validate.real(eps, name="eps")
    _validate.finite_scalar(eps=eps)
    _validate.positive(eps=eps)
    return float(eps)


def normalized_complement(
    b: Float[ArrayLike, "d_out d_in"], group: Group, *, eps: float = 1e-8
) -> Float[Array, "d_out d_in"]:
    """``U(B) = Q(B) / (|Q(B)|_F + eps)``: the unit-norm non-equivariant direction.

    ``b`` is one ``[d_out, d_in]`` matrix (the Frobenius norm runs over all of it; use
    ``jax.vmap`` for a batch).

    Raises:
      TypeError: If ``b`` is not a floating array of shape ``(group.d_out, group.d_in)``
        or ``group`` is not a Group.
      ValueError: If ``eps`` is not finite and > 0.
    """
    _validate.real(eps, name="eps")
    _validate.finite_scalar(eps=eps)  # NaN / negative: a NaN or blown-up direction
    _validate.positive(eps=eps)
    _check_weight(b, group, name="b")  # the public name (complement's messages say `w`)
    _validate.ndim(b, 2, name="b")  # one matrix: a batch would share one norm
    q = complement(b, group)
    acc = acc_dtype(q.dtype)
    qa = q.astype(acc)
    return (qa / (jnp.sqrt(jnp.sum(qa * qa)) + eps)).astype(q.dtype)


def _levels(theta: Array, w: Array) -> tuple[Array, Array]:
    """``(theta, theta / |w|_F)``, the norm accumulated in the wide dtype."""
    acc = acc_dtype(w.dtype)
    return theta, theta.astype(acc) / jnp.sqrt(jnp.sum(w.astype(acc) ** 2))


def _invariant_bias(b: Array, group: Group) -> Array:
    """Project a bias vector onto the output's trivial isotypic part."""
    acc = acc_dtype(b.dtype)
    ba = b.astype(acc)
    if group.kind == "finite":
        _, rout = group.elements(acc)
        out = jnp.mean(rout @ ba, axis=0)
    elif group.kind == "so2":
        out = jnp.zeros_like(ba)
    else:
        mask = (
            np.concatenate(
                [
                    np.full(mul * ir.dim, ir.l == 0 and (ir.p == 1 or not group.parity))
                    for mul, ir in group.irreps_out
                ]
            )
            if group.d_out
            else np.zeros(0, bool)
        )
        out = jnp.where(jnp.asarray(mask), ba, jnp.zeros_like(ba))
    return out.astype(b.dtype)


class RECMLinear(eqx.Module):
    """Relaxed equivariant linear map ``R^{d_in} -> R^{d_out}`` for a :class:`Group`.

    ``y = P(A) x + theta * U(B) x + b_inv``. Acts on ``[..., d_in]`` (one example or a
    batch). ``theta`` is a 0-d array leaf named ``theta``; train it with
    :func:`jaxkit.equivariance.recm_modulation` (through :func:`recm_optimizer`).
    """

    weight_eq: Array
    weight_free: Array
    theta: Array
    bias: Array | None
    group: Group = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def __init__(
        self,
        group: Group,
        *,
        key: PRNGKeyArray,
        theta_init: Any = 0.5,
        use_bias: bool = False,
        eps: float = 1e-8,
        dtype: Any = jnp.float32,
    ):
        """Initialise.

        Args:
          group: The :class:`Group` (gives ``d_in``, ``d_out`` and the projection).
          key: PRNG key for ``A`` (``N(0, 1/d_in)``) and ``B`` (``N(0, 1)``).
          theta_init: Initial relaxation level, >= 0 (default 0.5: at 0 a random
            ``B`` can stall because ``dL/dtheta`` may be >= 0 there).
          use_bias: Add a bias restricted to the output's invariant part.
          eps: Normaliser guard in ``U(B)``.
          dtype: Parameter dtype.
        """
        if not isinstance(group, Group):
            raise TypeError(f"`group` must be a Group, got {type(group).__name__}.")
        _validate.is_key(key)
        _check_theta_init(theta_init)
        _validate.flags(use_bias=use_bias)
        self.group = group
        self.eps = _check_eps(eps)
        scale = float(1.0 / np.sqrt(max(group.d_in, 1)))  # weak: no f64 promotion under x64
        self.weight_eq, self.weight_free, self.bias = _branch_init(
            key,
            shape=(group.d_out, group.d_in),
            scale=scale,
            bias_size=group.d_out if use_bias else None,
            dtype=jnp.dtype(dtype),
        )
        self.theta = jnp.asarray(theta_init, dtype)

    def effective_weight(self, *, relax: bool = True) -> Float[Array, "d_out d_in"]:
        """``P(A) + theta U(B)`` (or ``P(A)`` when ``relax=False``)."""
        w = reynolds(self.weight_eq, self.group)
        if not relax:
            return w
        u = normalized_complement(self.weight_free, self.group, eps=self.eps)
        return w + self.theta.astype(w.dtype) * u

    def __call__(
        self, x: Float[ArrayLike, "*batch d_in"], *, relax: bool = True
    ) -> Float[Array, "*batch d_out"]:
        """Apply the layer to ``x`` of shape ``[..., d_in]``; same dtype out.

        ``x`` may carry leading batch axes (one example ``[d_in]`` or a batch).

        Raises:
          TypeError: If ``x`` is not a floating array with trailing dimension ``d_in``,
            or ``relax`` is not a bool.
        """
        _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
        relax = _validate.flag(relax, name="relax")
        x = jnp.asarray(x)
        if x.ndim < 1 or x.shape[-1] != self.group.d_in:
            raise TypeError(
                f"`x` must have trailing dimension d_in={self.group.d_in}, got shape {x.shape}."
            )
        acc = acc_dtype(x.dtype)
        w = self.effective_weight(relax=relax).astype(acc)
        y = x.astype(acc) @ w.T
        if self.bias is not None:
            b = _invariant_bias(self.bias, self.group).astype(acc)
            y = y + b.reshape((1,) * (y.ndim - 1) + (-1,))
        return y.astype(x.dtype)

    def relaxation_level(self) -> tuple[Array, Array]:
        """``(theta, theta / |W_eff|_F)``: absolute and relative relaxation levels."""
        return _levels(self.theta, self.effective_weight())


# ---------------------------------------------------------------- C4 convolutions
# (the kernel and image actions and the kernel projector: jaxkit.equivariance._c4)


class RECMGroupConvC4(eqx.Module):
    """Relaxed p4 group convolution (or lifting convolution) on square images.

    Input ``[C_in, H, W]`` (``lifting=True``) or ``[C_in, 4, H, W]`` (regular features);
    output ``[C_out, 4, H, W]``; ``'SAME'`` padding with an odd kernel keeps exact
    rot90 equivariance. Equivariant branch: ``P(A)`` (the rotated-kernel weight
    sharing); free branch: an ordinary convolution on the flattened group axis with
    kernel ``U(B)``, projected by averaging over the four rotations. One convolution
    with the fused kernel ``P(A) + theta U(B)``. Unbatched: ``jax.vmap`` for batches.
    """

    weight_eq: Array
    weight_free: Array
    theta: Array
    bias: Array | None
    lifting: bool = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def __init__(
        self,
        channels_in: int,
        channels_out: int,
        kernel_size: int = 3,
        *,
        key: PRNGKeyArray,
        lifting: bool = False,
        theta_init: Any = 0.5,
        use_bias: bool = True,
        eps: float = 1e-8,
        dtype: Any = jnp.float32,
    ):
        """Initialise (``P(A)`` He-normal over the fan-in, ``B ~ N(0, 1)``)."""
        for nm, v in (("channels_in", channels_in), ("channels_out", channels_out)):
            _validate.python_int(v, name=nm, minimum=1)
        _validate.python_int(kernel_size, name="kernel_size", minimum=1)
        if kernel_size % 2 == 0:
            raise ValueError(
                f"`kernel_size` must be a positive odd int (exact rot90 equivariance), "
                f"got kernel_size={kernel_size!r}."
            )
        _validate.is_key(key)
        _check_theta_init(theta_init)
        lifting = _validate.flag(lifting, name="lifting")  # a static field takes no array
        _validate.flags(use_bias=use_bias)
        gi = 1 if lifting else 4
        shape = (channels_out, 4, channels_in, gi, kernel_size, kernel_size)
        fan_in = channels_in * gi * kernel_size**2
        # x2: the projection averages 4 nearly independent copies (norm / 2), so P(A)
        # starts with He variance.
        self.weight_eq, self.weight_free, self.bias = _branch_init(
            key,
            shape=shape,
            scale=float(2.0 * np.sqrt(2.0 / fan_in)),
            bias_size=channels_out if use_bias else None,
            dtype=jnp.dtype(dtype),
        )
        self.theta = jnp.asarray(theta_init, dtype)
        self.lifting = lifting
        self.eps = _check_eps(eps)

    def effective_kernel(self, *, relax: bool = True) -> Array:
        """The fused kernel ``P(A) + theta U(B)``, ``[C_out, 4, C_in, G_in, k, k]``."""
        w = c4_conv_reynolds(self.weight_eq, lifting=self.lifting)
        if not relax:
            return w
        acc = acc_dtype(w.dtype)
        b = self.weight_free.astype(acc)
        q = b - c4_conv_reynolds(b, lifting=self.lifting)
        u = q / (jnp.sqrt(jnp.sum(q * q)) + self.eps)
        return w + self.theta.astype(w.dtype) * u.astype(w.dtype)

    def __call__(self, x: Float[ArrayLike, "..."], *, relax: bool = True) -> Array:
        """Apply to one example ``[C_in, H, W]`` or ``[C_in, 4, H, W]`` (``jax.vmap`` a batch).

        Raises:
          TypeError: If ``x`` is not a floating ``[C_in, H, W]`` (lifting) or
            ``[C_in, 4, H, W]`` array with square ``H x W``, or ``relax`` is not a bool.
        """
        _validate.floating(x, name="x")  # before jnp.asarray: a str names `x`
        relax = _validate.flag(relax, name="relax")
        x = jnp.asarray(x)
        co, _, ci, gi, k, _ = self.weight_eq.shape
        want = 3 if self.lifting else 4
        if x.ndim != want or x.shape[0] != ci or (not self.lifting and x.shape[1] != 4):
            lay = "[C_in, H, W]" if self.lifting else "[C_in, 4, H, W]"
            raise TypeError(f"`x` must have shape {lay} with C_in={ci}, got {x.shape}.")
        h, w_ = x.shape[-2:]
        if h != w_:
            raise TypeError(f"`x` must be square (exact C_4 symmetry), got {h}x{w_}.")
        acc = acc_dtype(x.dtype)
        kern = self.effective_kernel(relax=relax).astype(acc).reshape(co * 4, ci * gi, k, k)
        inp = x.astype(acc).reshape(1, ci * gi, h, w_)
        y = jax.lax.conv_general_dilated(inp, kern, (1, 1), "SAME")[0]
        y = y.reshape(co, 4, h, w_)
        if self.bias is not None:
            y = y + self.bias.astype(acc)[:, None, None, None]
        return y.astype(x.dtype)

    def relaxation_level(self) -> tuple[Array, Array]:
        """``(theta, theta / |K_eff|_F)``."""
        return _levels(self.theta, self.effective_kernel())


# ------------------------------------------------------------------------------- e3nn


class RECMe3nnLinear(eqx.Module):
    """Relaxed O(3)-equivariant linear layer on ``e3nn_jax`` irreps.

    Equivariant branch: ``e3nn_jax.equinox.Linear`` (field ``linear``; its weights
    are the equivariant parameters ``A``). Free branch: a dense ``B`` on ``x.array``,
    projected by the exact Schur complement and normalised. With ``relax=True`` the
    two are fused into one ``d_out x d_in`` matrix; ``relax=False`` calls the e3nn
    layer itself. Acts on ``IrrepsArray`` (or plain arrays) of shape ``[..., dim]``.
    """

    linear: Any
    weight_free: Array
    theta: Array
    group: Group = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def __init__(
        self,
        irreps_in: Any,
        irreps_out: Any,
        *,
        key: PRNGKeyArray,
        theta_init: Any = 0.5,
        parity: bool = True,
        eps: float = 1e-8,
        dtype: Any = jnp.float32,
    ):
        """Initialise.

        Args:
          irreps_in: Input irreps (``e3nn_jax.Irreps`` or string); regrouped.
          irreps_out: Output irreps (kept as given; unreachable irreps get only the
            free branch).
          key: PRNG key.
          theta_init: Initial relaxation level, >= 0.
          parity: O(3) (True) or SO(3) (False) for the free branch's projection.
          eps: Normaliser guard in ``U(B)``.
          dtype: Parameter dtype.
        """
        from jaxkit.equivariance._groups import e3nn_jax, o3_irreps

        e3nn = e3nn_jax()

        _validate.is_key(key)
        _check_theta_init(theta_init)
        _validate.flags(parity=parity)
        try:
            ir_in = e3nn.Irreps(irreps_in).regroup()
            ir_out = e3nn.Irreps(irreps_out)
        except (ValueError, AssertionError) as e:
            raise ValueError(f"`irreps_in`/`irreps_out` are not valid irreps: {e}") from e
        ka, kb = jax.random.split(key)
        self.linear = e3nn.equinox.Linear(
            irreps_out=ir_out,
            irreps_in=ir_in,
            force_irreps_out=True,
            input_dtype=dtype,
            key=ka,
        )
        self.group = o3_irreps(str(ir_in), str(ir_out), parity=parity)
        self.weight_free = jax.random.normal(kb, (ir_out.dim, ir_in.dim), dtype)
        self.theta = jnp.asarray(theta_init, dtype)
        self.eps = _check_eps(eps)

    def equivariant_matrix(self) -> Array:
        """The e3nn layer's map as a ``d_out x d_in`` matrix (``y = W x``)."""
        return _e3nn_matrix(self.linear._linear, self.linear._weights).T

    def effective_weight(self, *, relax: bool = True) -> Array:
        """``W_e3nn + theta U(B)`` as a ``d_out x d_in`` matrix."""
        w = self.equivariant_matrix()
        if not relax:
            return w
        u = normalized_complement(self.weight_free, self.group, eps=self.eps)
        return w + self.theta.astype(w.dtype) * u.astype(w.dtype)

    def __call__(self, x: Any, *, relax: bool = True) -> Any:
        """Apply to an ``IrrepsArray`` (or array) ``[..., irreps_in.dim]``."""
        import e3nn_jax as e3nn

        g = self.group
        if isinstance(x, e3nn.IrrepsArray):
            if x.irreps.regroup() != g.irreps_in:
                raise ValueError(
                    f"`x` has irreps {x.irreps}, but the layer expects {g.irreps_in} "
                    "(irreps mismatch)."
                )
            if x.irreps != g.irreps_in:  # regroup() splits and re-concatenates the array
                x = x.regroup()
        else:
            x = jnp.asarray(x)
            if x.ndim < 1 or x.shape[-1] != g.d_in:
                raise TypeError(
                    f"`x` must have trailing dimension {g.d_in} ({g.irreps_in}), got "
                    f"shape {x.shape}."
                )
            x = e3nn.IrrepsArray(g.irreps_in, x)
        _validate.floating(x.array, name="x")
        if not relax:
            return self.linear(x)
        acc = acc_dtype(x.dtype)
        w = self.effective_weight().astype(acc)
        y = x.array.astype(acc) @ w.T
        return e3nn.IrrepsArray(g.irreps_out, y.astype(x.dtype))

    def relaxation_level(self) -> tuple[Array, Array]:
        """``(theta, theta / |W_eff|_F)``."""
        return _levels(self.theta, self.effective_weight())


def _e3nn_matrix(lin: Any, weights: dict) -> Array:
    """``FunctionalLinear.matrix`` over the weight paths: ``[d_in, d_out]``."""
    blocks = {}
    dtype = jnp.float32
    for ins in lin.instructions:
        if ins.i_in == -1:
            continue
        name = f"w[{ins.i_in},{ins.i_out}] {lin.irreps_in[ins.i_in]},{lin.irreps_out[ins.i_out]}"
        w = weights[name]
        dtype = w.dtype
        mul_in, ir_in = lin.irreps_in[ins.i_in]
        mul_out, ir_out = lin.irreps_out[ins.i_out]
        blk = ins.path_weight * jnp.einsum(
            "uw,ij->uiwj", w, jnp.eye(ir_in.dim, dtype=w.dtype)
        ).reshape(mul_in * ir_in.dim, mul_out * ir_out.dim)
        key = (ins.i_in, ins.i_out)
        blocks[key] = blk if key not in blocks else blocks[key] + blk
    rows = []
    for i, mi in enumerate(lin.irreps_in):
        cols = [
            blocks.get((i, o), jnp.zeros((mi.dim, mo.dim), dtype))
            for o, mo in enumerate(lin.irreps_out)
        ]
        rows.append(jnp.concatenate(cols, axis=1) if cols else jnp.zeros((mi.dim, 0), dtype))
    if not rows:
        return jnp.zeros((0, lin.irreps_out.dim), dtype)
    return jnp.concatenate(rows, axis=0).astype(dtype)
