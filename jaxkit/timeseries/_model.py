"""A JAX PatchTST with RevIN (equinox modules) and its gated-prefix encoder.

PatchTST (Nie et al., ICLR 2023): RevIN instance normalisation, channel independence,
patches of length P with stride S (the series is end-padded by repeating its last value S
times, ``n_patches = (L - P) // S + 2``), a linear patch embedding plus a learnable
positional embedding, a Transformer encoder, and a flatten head over the patch tokens to
H values, then RevIN de-normalisation. The encoder here is pre-LayerNorm with a GELU MLP
and no dropout (the reference uses BatchNorm and dropout 0.2).

Prefix tokens (TESS) enter attention with a gate: patch query ``n`` attends to prefix key
``k`` with weight ``g_k · exp(s_nk - m)``, i.e. logit ``s_nk + log g_k``; ``g_k = 0``
removes the key exactly. Patch and prefix tokens run through the same weights in separate
calls, so with every gate 0 the patch stream is computed by the very operations of the
unconditioned PatchTST (plus exact zeros): the forecasts agree bit for bit.

All modules are unbatched (``x [L, C]``); use ``jax.vmap`` or the batched functions in
:mod:`jaxkit.timeseries` (``patchtst_forecast``, ``tess_forecast``).

References:
  Nie et al., "A Time Series is Worth 64 Words: Long-term Forecasting with Transformers",
  ICLR 2023. Kim et al., "Reversible Instance Normalization for Accurate Time-Series
  Forecasting against Distribution Shift", ICLR 2022.
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from jaxkit import _validate


class RevINStats(NamedTuple):
    """Per-channel statistics of one instance: ``mean [C]``, ``std [C]``."""

    mean: Array
    std: Array


class RevIN(eqx.Module):
    """Reversible instance normalisation over time, per channel (optional affine)."""

    weight: Array
    bias: Array
    eps: float = eqx.field(static=True)
    affine: bool = eqx.field(static=True)

    def __init__(self, channels: int, *, eps: float = 1e-5, affine: bool = True, dtype=jnp.float32):
        channels = _validate.python_int(channels, name="channels", minimum=1)
        _validate.positive(eps=eps)
        affine = _validate.flag(affine, name="affine")
        self.weight = jnp.ones((channels,), dtype)
        self.bias = jnp.zeros((channels,), dtype)
        self.eps, self.affine = float(eps), affine

    def normalize(self, x: Array) -> tuple[Array, RevINStats]:
        """``x [L, C]`` -> normalised ``[L, C]`` and the statistics to invert it.

        Unbatched (``jax.vmap`` it over a batch).

        Raises:
          TypeError: ``x`` not a floating ``[L, C]`` array of this module's ``C`` channels,
            or with no time step (``L = 0``: the statistics of no values are NaN).
        """
        _check_rows(x, self.weight.shape[0], name="x", axes="(L, C)")
        _validate.nonempty(x, name="x")
        mean = jnp.mean(x, 0)
        std = jnp.sqrt(jnp.var(x, 0) + self.eps).astype(x.dtype)
        y = (x - mean[None]) / std[None]
        if self.affine:
            y = y * self.weight.astype(x.dtype)[None] + self.bias.astype(x.dtype)[None]
        return y, RevINStats(mean, std)

    def denormalize(self, y: Array, stats: RevINStats) -> Array:
        """Invert :meth:`normalize` on ``y [H, C]`` with its ``stats`` (unbatched).

        Raises:
          TypeError: ``y`` not a floating ``[H, C]`` array of this module's ``C`` channels,
            or ``stats`` not a :class:`RevINStats` of floating ``[C]`` arrays.
        """
        c = self.weight.shape[0]
        _check_rows(y, c, name="y", axes="(H, C)")
        _check_stats(stats, c)
        if self.affine:
            y = (y - self.bias.astype(y.dtype)[None]) / self.weight.astype(y.dtype)[None]
        return y * stats.std[None] + stats.mean[None]


def _check_rows(x, c, *, name, axes):
    """``x`` floating of shape ``(rows, c)`` (dtype and shape only, so tracers pass)."""
    _validate.floating(x, name=name)  # before any jnp op: a str names the argument
    shp = tuple(jnp.shape(x))
    if len(shp) != 2 or shp[1] != c:
        raise TypeError(
            f"`{name}` must have shape {axes} with C = {c} channels (unbatched: jax.vmap "
            f"over a batch), got shape {shp}."
        )


def _check_stats(stats, c):
    """``stats`` a :class:`RevINStats` of floating ``[c]`` arrays (dtype and shape only)."""
    for field in ("mean", "std"):
        a = getattr(stats, field, None)
        try:  # jnp.result_type reads None as float32 and a str as a dtype name
            dt = None if a is None or isinstance(a, str | bytes) else jnp.result_type(a)
        except TypeError:
            dt = None
        if dt is None or not jnp.issubdtype(dt, jnp.floating) or jnp.shape(a) != (c,):
            got = (
                f"{type(stats).__name__} with {field} of {type(a).__name__}"
                if dt is None
                else f"{field} of shape {jnp.shape(a)} and dtype {dt}"
            )
            raise TypeError(
                "`stats` must be the RevINStats that normalize returned (floating mean and "
                f"std of shape ({c},)), got {got}."
            )


def _ln(x, w, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    lead = (1,) * (x.ndim - 1)
    return (x - mu) / jnp.sqrt(var + eps) * jnp.reshape(w, lead + w.shape) + jnp.reshape(
        b, lead + b.shape
    )


def init_layer(key, d, f, dtype):
    """Arrays of one :class:`EncoderLayer` (traced: call inside a jitted initialiser)."""
    k = jax.random.split(key, 4)
    ln = jnp.stack([jnp.ones((d,)), jnp.zeros((d,))]).astype(dtype)
    return {
        "ln1": ln,
        "ln2": ln,
        "wqkv": (jax.random.normal(k[0], (3, d, d)) / d**0.5).astype(dtype),
        "wo": (jax.random.normal(k[1], (d, d)) / d**0.5).astype(dtype),
        "w1": (jax.random.normal(k[2], (d, f)) / d**0.5).astype(dtype),
        "b1": jnp.zeros((f,), dtype),
        "w2": (jax.random.normal(k[3], (f, d)) / f**0.5).astype(dtype),
        "b2": jnp.zeros((d,), dtype),
    }


@functools.partial(jax.jit, static_argnames=("p", "n", "d", "f", "h", "nl", "dtype"))
def _init_patchtst(key, *, p, n, d, f, h, nl, dtype):
    ks = jax.random.split(key, nl + 3)
    return {
        "w_embed": (jax.random.normal(ks[0], (p, d)) / p**0.5).astype(dtype),
        "b_embed": jnp.zeros((d,), dtype),
        "pos": (0.02 * jax.random.normal(ks[1], (n, d))).astype(dtype),
        "layers": [init_layer(ks[3 + i], d, f, dtype) for i in range(nl)],
        "ln_f": jnp.stack([jnp.ones((d,)), jnp.zeros((d,))]).astype(dtype),
        "w_head": (jax.random.normal(ks[2], (n * d, h)) / (n * d) ** 0.5).astype(dtype),
        "b_head": jnp.zeros((h,), dtype),
    }


class EncoderLayer(eqx.Module):
    """One pre-LayerNorm encoder block (multi-head attention + GELU MLP)."""

    ln1: Array  # [2, D] (scale, shift)
    ln2: Array  # [2, D]
    wqkv: Array  # [3, D, D]
    wo: Array  # [D, D]
    w1: Array  # [D, F]
    b1: Array  # [F]
    w2: Array  # [F, D]
    b2: Array  # [D]
    n_heads: int = eqx.field(static=True)

    def __init__(self, arrays: dict, n_heads: int):
        """From :func:`init_layer`'s arrays (one jitted draw for all of a model's layers)."""
        for name, a in arrays.items():
            setattr(self, name, a)
        self.n_heads = n_heads

    def _check(self, z, prefix, gate):
        """Host-side checks of :meth:`__call__`'s arguments (dtypes and shapes only)."""
        d = self.wo.shape[0]
        _validate.floating(z, name="z")
        _validate.shape(z, (None, d), name="z")
        _validate.nonempty(z, name="z")  # no patch key: the softmax has nothing to weigh
        if (prefix is None) != (gate is None):
            raise TypeError(
                "`prefix` and `gate` must be given together, got "
                f"prefix={type(prefix).__name__} and gate={type(gate).__name__}."
            )
        if prefix is not None:
            _validate.floating(prefix, name="prefix")
            _validate.shape(prefix, (None, d), name="prefix")
            _validate.floating(gate, name="gate")
            _validate.shape(gate, (jnp.shape(prefix)[0],), name="gate")

    def _qkv(self, x):
        xn = _ln(x, self.ln1[0], self.ln1[1])
        t, d = x.shape
        h = self.n_heads
        q, k, v = (jnp.reshape(xn @ self.wqkv[i], (t, h, d // h)) for i in range(3))
        return q, k, v

    def _mlp(self, x):
        xn = _ln(x, self.ln2[0], self.ln2[1])
        return x + jax.nn.gelu(xn @ self.w1 + self.b1[None]) @ self.w2 + self.b2[None]

    def __call__(self, z: Array, prefix: Array | None = None, gate: Array | None = None):
        """Patch tokens ``z [N, D]``; optional prefix tokens ``[K, D]`` with gates ``[K]``.

        Unbatched (``jax.vmap`` it over a batch): returns ``(z_out [N, D], prefix_out)``,
        ``prefix_out [K, D]`` or ``None`` without a prefix.

        Raises:
          TypeError: ``z`` or ``prefix`` not a floating ``[*, D]`` array (``D`` the layer's
            width), ``z`` with no token (``N = 0``), ``gate`` not a floating ``[K]`` array,
            or only one of ``prefix`` and ``gate`` given.
        """
        self._check(z, prefix, gate)
        n, d = z.shape
        scale = jnp.asarray((d // self.n_heads) ** -0.5, z.dtype)
        q, k, v = self._qkv(z)
        s = jnp.einsum("nhd,mhd->hnm", q, k) * scale
        m = jnp.max(s, -1, keepdims=True)
        if prefix is not None:
            qp, kp, vp = self._qkv(prefix)
            sp = jnp.einsum("nhd,khd->hnk", q, kp) * scale
            on = jnp.broadcast_to(gate[None, None, :] > 0, sp.shape)
            sp = jnp.where(on, sp, -jnp.inf)
            m = jnp.maximum(m, jnp.max(sp, -1, keepdims=True))
        e = jnp.exp(s - m)
        num = jnp.einsum("hnm,mhd->nhd", e, v)
        den = jnp.sum(e, -1)
        if prefix is not None:
            ep = jnp.broadcast_to(gate[None, None, :], sp.shape) * jnp.exp(sp - m)
            num = num + jnp.einsum("hnk,khd->nhd", ep, vp)
            den = den + jnp.sum(ep, -1)
        att = num / jnp.transpose(den)[:, :, None]
        z_out = self._mlp(z + jnp.reshape(att, (n, d)) @ self.wo)
        if prefix is None:
            return z_out, None
        # prefix queries attend to patch and prefix keys (plain softmax); their outputs
        # only reach the patch stream through the gated keys of the next layer
        keys = jnp.concatenate([k, kp], 0)
        vals = jnp.concatenate([v, vp], 0)
        a = jax.nn.softmax(jnp.einsum("khd,mhd->hkm", qp, keys) * scale, -1)
        p_att = jnp.reshape(jnp.einsum("hkm,mhd->khd", a, vals), prefix.shape)
        return z_out, self._mlp(prefix + p_att @ self.wo)


def check_x(backbone, x, name: str = "x") -> Array:
    """``x [B, L, C]`` floating, finite and shaped for ``backbone`` (a :class:`PatchTST`)."""
    _validate.floating(x, name=name)  # before jnp.asarray: a str names the argument
    x = jnp.asarray(x)
    _validate.ndim(x, 3, name=name)
    c = backbone.revin.weight.shape[0]
    if x.shape[1] != backbone.context_len or x.shape[2] != c:
        raise TypeError(
            f"`{name}` must have shape (B, {backbone.context_len}, {c}) for this model, "
            f"got {x.shape}."
        )
    return _validate.all_finite(x, name=name)


def check_series(backbone, x, name: str = "x") -> None:
    """One history ``x [L, C]`` floating and shaped for ``backbone`` (a :class:`PatchTST`).

    The modules' unbatched ``__call__`` check (dtype and shape only, so tracers pass);
    :func:`check_x` is the batched functions'.
    """
    _validate.floating(x, name=name)  # before any jnp op: a str names the argument
    want = (backbone.context_len, backbone.revin.weight.shape[0])
    if tuple(jnp.shape(x)) != want:
        raise TypeError(
            f"`{name}` must have shape (L, C) = {want} for this model (one history: "
            f"jax.vmap the model over a batch), got shape {jnp.shape(x)}."
        )


class PatchTST(eqx.Module):
    """PatchTST with RevIN: ``model(x [L, C]) -> [H, C]`` (channel independent)."""

    revin: RevIN
    w_embed: Array  # [P, D]
    b_embed: Array  # [D]
    pos: Array  # [N, D]
    layers: tuple[EncoderLayer, ...]
    ln_f: Array  # [2, D]
    w_head: Array  # [N * D, H]
    b_head: Array  # [H]
    context_len: int = eqx.field(static=True)
    horizon: int = eqx.field(static=True)
    patch_len: int = eqx.field(static=True)
    stride: int = eqx.field(static=True)

    def __init__(
        self,
        context_len: int,
        horizon: int,
        *,
        channels: int = 1,
        patch_len: int = 16,
        stride: int = 8,
        d_model: int = 128,
        n_heads: int = 8,
        n_layers: int = 3,
        d_ff: int = 256,
        revin_affine: bool = True,
        key: jax.Array,
        dtype=jnp.float32,
    ):
        """Build the model (defaults: the authors' PatchTST settings, spec §4.2).

        Args:
          context_len: L, the history length.
          horizon: H, the forecast length.
          channels: C (RevIN's affine parameters are per channel).
          patch_len: P (``1 <= P <= L``).
          stride: S (``>= 1``).
          d_model: Token width D (a multiple of ``n_heads``).
          n_heads: Attention heads.
          n_layers: Encoder blocks.
          d_ff: MLP hidden width.
          revin_affine: learnable RevIN scale/shift.
          key: A typed key from ``jax.random.key``.
          dtype: Parameter dtype.
        """
        L = _validate.python_int(context_len, name="context_len", minimum=2)
        H = _validate.python_int(horizon, name="horizon", minimum=1)
        P = _validate.python_int(patch_len, name="patch_len", minimum=1)
        S = _validate.python_int(stride, name="stride", minimum=1)
        d = _validate.python_int(d_model, name="d_model", minimum=1)
        nh = _validate.python_int(n_heads, name="n_heads", minimum=1)
        nl = _validate.python_int(n_layers, name="n_layers", minimum=1)
        f = _validate.python_int(d_ff, name="d_ff", minimum=1)
        _validate.flags(revin_affine=revin_affine)
        if P > L:
            raise ValueError(f"`patch_len` must be <= context_len={L}, got patch_len={P}.")
        if d % nh:
            raise ValueError(f"`d_model` must be a multiple of n_heads={nh}, got d_model={d}.")
        _validate.is_key(key)
        n = (L - P) // S + 2
        a = _init_patchtst(key, p=P, n=n, d=d, f=f, h=H, nl=nl, dtype=jnp.dtype(dtype))
        self.revin = RevIN(channels, affine=revin_affine, dtype=dtype)
        self.w_embed, self.b_embed, self.pos = a["w_embed"], a["b_embed"], a["pos"]
        self.layers = tuple(EncoderLayer(la, nh) for la in a["layers"])
        self.ln_f, self.w_head, self.b_head = a["ln_f"], a["w_head"], a["b_head"]
        self.context_len, self.horizon, self.patch_len, self.stride = L, H, P, S

    @property
    def n_patches(self) -> int:
        return (self.context_len - self.patch_len) // self.stride + 2

    def embed(self, x: Array) -> tuple[Array, RevINStats]:
        """``x [L, C]`` -> patch embeddings ``[C, N, D]`` (RevIN, patching, + positions).

        Unbatched (``jax.vmap`` it over a batch); also returns the RevIN statistics.

        Raises:
          TypeError: ``x`` not a floating ``[L, C]`` array of this model's ``L`` and ``C``.
        """
        check_series(self, x)
        xn, stats = self.revin.normalize(x)
        series = jnp.transpose(xn)  # [C, L]
        pad = jnp.broadcast_to(series[:, -1:], (series.shape[0], self.stride))
        series = jnp.concatenate([series, pad], 1)
        idx = jnp.arange(self.n_patches)[:, None] * self.stride + jnp.arange(self.patch_len)[None]
        patches = series[:, idx]  # [C, N, P]
        z = patches @ self.w_embed.astype(x.dtype) + self.b_embed[None, None] + self.pos[None]
        return z, stats

    def head(self, z: Array, stats: RevINStats) -> Array:
        """Encoded patch tokens ``[C, N, D]`` -> de-normalised forecast ``[H, C]``.

        ``stats`` are :meth:`embed`'s RevIN statistics of the same history (unbatched).

        Raises:
          TypeError: ``z`` not a floating ``[C, N, D]`` array of this model's sizes, or
            ``stats`` not a :class:`RevINStats` of floating ``[C]`` arrays.
        """
        want = (self.revin.weight.shape[0], self.n_patches, self.ln_f.shape[1])
        _validate.floating(z, name="z")  # before any jnp op: a str names the argument
        if tuple(jnp.shape(z)) != want:
            raise TypeError(
                f"`z` must have shape (C, N, D) = {want} for this model (one history's "
                f"encoded patch tokens), got shape {jnp.shape(z)}."
            )
        _check_stats(stats, want[0])
        z = _ln(z, self.ln_f[0], self.ln_f[1])
        y = jnp.reshape(z, (z.shape[0], -1)) @ self.w_head + self.b_head[None]  # [C, H]
        return self.revin.denormalize(jnp.transpose(y), stats)

    def encode(self, z: Array, prefix: Array | None = None, gate: Array | None = None) -> Array:
        """Run the encoder on one channel's tokens ``[N, D]`` (optional gated prefix).

        Unbatched: ``prefix [K, D]`` and ``gate [K]`` as :class:`EncoderLayer`'s.

        Raises:
          TypeError: ``z`` or ``prefix`` not a floating ``[*, D]`` array (``D`` the model's
            width), ``z`` with no token (``N = 0``), ``gate`` not a floating ``[K]`` array,
            or only one of ``prefix`` and ``gate`` given.
        """
        for layer in self.layers:  # each checks its arguments (the first names a bad one)
            z, prefix = layer(z, prefix, gate)
        return z

    def __call__(self, x: Array) -> Array:
        """Forecast ``[H, C]`` from one history ``x [L, C]`` (unbatched: ``jax.vmap`` it).

        Raises:
          TypeError: ``x`` not a floating ``[L, C]`` array of this model's ``L`` and ``C``.
        """
        check_series(self, x)
        z, stats = self.embed(x)
        z = jax.vmap(self.encode)(z)
        return self.head(z, stats)
