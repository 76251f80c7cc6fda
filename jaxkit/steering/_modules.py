"""The SVGT value side: value encoder, discriminator, bridge generator (equinox modules).

All modules are batched (leading ``B``), f32, and isolated from the backbone: they
read backbone hidden states and never hold or edit backbone parameters. Dropout
runs only when a ``key`` is given (training); generation passes none.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxkit import _validate
from jaxkit._adapter_layers import LayerNorm, Linear


class Attention(eqx.Module):
    """Multi-head attention ``q [B,Tq,d]`` over ``kv [B,Tk,dk]`` with ``mask [B,Tq,Tk]``."""

    wq: Linear
    wk: Linear
    wv: Linear
    wo: Linear
    heads: int = eqx.field(static=True)

    def __init__(self, d, heads, *, key, d_kv=None, gain=1.0):
        ks = jax.random.split(key, 4)
        d_kv = d if d_kv is None else d_kv
        self.wq, self.wk = Linear(d, d, key=ks[0], gain=gain), Linear(d_kv, d, key=ks[1], gain=gain)
        self.wv, self.wo = Linear(d_kv, d, key=ks[2], gain=gain), Linear(d, d, key=ks[3], gain=gain)
        self.heads = int(heads)

    def __call__(self, q, kv, mask=None):
        b, tq, d = q.shape
        h, dh = self.heads, d // self.heads
        qq = self.wq(q).reshape(b, tq, h, dh)
        kk = self.wk(kv).reshape(b, kv.shape[1], h, dh)
        vv = self.wv(kv).reshape(b, kv.shape[1], h, dh)
        s = jnp.einsum("bqhd,bkhd->bhqk", qq, kk) / math.sqrt(dh)
        if mask is not None:
            s = jnp.where(mask[:, None], s, -1e30)
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), vv).reshape(b, tq, d)
        return self.wo(o)


def _dropout(x, rate, key):
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _split(key, n):
    """``n`` dropout keys from ``key`` (``None``: no dropout), a key already checked."""
    return [None] * n if key is None else list(jax.random.split(key, n))


def _keys(key, n):
    """:func:`_split` of a public method's key, checked: an int is a TypeError naming it."""
    if key is not None:
        _validate.is_key(key)
    return _split(key, n)


class EncoderLayer(eqx.Module):
    """Post-LN transformer encoder layer (self-attention, GELU FF of width 4d)."""

    attn: Attention
    ff1: Linear
    ff2: Linear
    ln1: LayerNorm
    ln2: LayerNorm
    dropout: float = eqx.field(static=True)

    def __init__(self, d, heads, dropout, *, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.attn = Attention(d, heads, key=k1)
        self.ff1, self.ff2 = Linear(d, 4 * d, key=k2), Linear(4 * d, d, key=k3)
        self.ln1, self.ln2 = LayerNorm(d), LayerNorm(d)
        self.dropout = float(dropout)

    def __call__(self, x, mask, key=None):
        k1, k2 = _split(key, 2)
        att = self.attn(
            x, x, mask[:, None, :] & mask[:, :, None] | jnp.eye(x.shape[1], dtype=bool)[None]
        )
        x = self.ln1(x + _dropout(att, self.dropout, k1))
        ff = self.ff2(jax.nn.gelu(self.ff1(x)))
        return self.ln2(x + _dropout(ff, self.dropout, k2))


def pool_last(x: Float[Array, "B T d"], mask: Bool[Array, "B T"]) -> Float[Array, "B d"]:
    """The last valid position of each row (``mask`` True on valid positions)."""
    t = x.shape[1]
    last = jnp.max(jnp.where(mask, jnp.arange(t)[None, :], 0), axis=1)
    return jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]


def pool_attention(
    x: Float[Array, "B T d"], mask: Bool[Array, "B T"], query: Float[Array, " d"], wk: Linear
) -> Float[Array, "B d"]:
    """Attention pooling: ``sum_t softmax_t(<wk(x_t), query> / sqrt(d)) x_t`` over valid t.

    The query is learned (the reference's attention-pooling variant); masked
    positions get weight exactly 0.
    """
    s = wk(x) @ query / math.sqrt(x.shape[-1])
    a = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
    return jnp.einsum("bt,btd->bd", jnp.where(mask, a, 0.0), x)


class ValueEncoder(eqx.Module):
    """Maps layer-l hidden states into the value space (d_v).

    ``unconditional`` (stage 1, a prompt alone), ``conditional`` (stage 2, a response
    read against its prompt through a cross-attention whose projections start at gain
    0.1 with ``cross_scale`` 3.0 so stage 2 starts near stage 1), ``trigger``
    (stage 3 and generation, a prompt through ``prompt_proj``). Pooling: the last
    valid token (``pooling="last"``) or a learned attention-pooling query
    (``"attention"``, :func:`pool_attention`); aggregate: MLP + GELU + LayerNorm.
    """

    response_proj: Linear
    prompt_proj: Linear
    layers: tuple
    cross: Attention
    ln_p: LayerNorm
    ln_r: LayerNorm
    ln_c: LayerNorm
    cross_scale: Array
    agg: Linear
    agg_ln: LayerNorm
    pool_query: Array | None
    pool_key: Linear | None
    dropout: float = eqx.field(static=True)

    def __init__(self, d_model, value_dim, *, n_heads, n_layers, dropout, key, pooling="last"):
        _validate.is_key(key)
        _validate.one_of(("last", "attention"), pooling=pooling)
        ks = jax.random.split(key, n_layers + 4)
        if pooling == "attention":  # its own keys: "last" keeps its initialisation
            kq, kk = jax.random.split(jax.random.fold_in(key, 1_000_003))
            self.pool_query = 0.02 * jax.random.normal(kq, (value_dim,), jnp.float32)
            self.pool_key = Linear(value_dim, value_dim, key=kk)
        else:  # "last"
            self.pool_query, self.pool_key = None, None
        self.response_proj = Linear(d_model, value_dim, key=ks[0])
        self.prompt_proj = Linear(d_model, value_dim, key=ks[1], gain=0.1)
        self.layers = tuple(
            EncoderLayer(value_dim, n_heads, dropout, key=k) for k in ks[4 : 4 + n_layers]
        )
        self.cross = Attention(value_dim, n_heads, key=ks[2], gain=0.1)
        self.ln_p, self.ln_r, self.ln_c = (LayerNorm(value_dim) for _ in range(3))
        self.cross_scale = jnp.asarray(3.0, jnp.float32)
        self.agg = Linear(value_dim, value_dim, key=ks[3])
        self.agg_ln = LayerNorm(value_dim)
        self.dropout = float(dropout)

    def _proj(self, lin, h, key):
        return _dropout(jax.nn.gelu(lin(h)), self.dropout, key)

    def _encode(self, u, mask, key):
        ks = _split(key, len(self.layers) + 1)  # checked by the caller
        for layer, k in zip(self.layers, ks[1:], strict=True):
            u = layer(u, mask, k)
        if self.pool_query is None:
            pooled = pool_last(u, mask)
        else:
            pooled = pool_attention(u, mask, self.pool_query, self.pool_key)
        z = jax.nn.gelu(self.agg(pooled))
        return self.agg_ln(_dropout(z, self.dropout, ks[0]))

    def unconditional(self, h, mask, *, key=None) -> Float[Array, "B dv"]:
        k1, k2 = _keys(key, 2)
        return self._encode(self._proj(self.response_proj, h, k1), mask, k2)

    def conditional(self, hp, mp, hr, mr, *, key=None) -> Float[Array, "B dv"]:
        k1, k2, k3 = _keys(key, 3)
        up = self.ln_p(self._proj(self.prompt_proj, hp, k1))
        ur = self.ln_r(self._proj(self.response_proj, hr, k2))
        c = self.ln_c(self.cross(ur, up, jnp.broadcast_to(mp[:, None, :], mr.shape + mp.shape[1:])))
        return self._encode(ur + self.cross_scale * c, mr, k3)

    def trigger(self, h, mask, *, key=None) -> Float[Array, "B dv"]:
        k1, k2 = _keys(key, 2)
        return self._encode(self._proj(self.prompt_proj, h, k1), mask, k2)


class Discriminator(eqx.Module):
    """``s(z) = Linear(GELU(Linear(z)))``; ``s > 0`` means harmful."""

    l1: Linear
    l2: Linear

    def __init__(self, value_dim, *, key):
        _validate.is_key(key)
        k1, k2 = jax.random.split(key)
        self.l1, self.l2 = (
            Linear(value_dim, value_dim // 2, key=k1),
            Linear(value_dim // 2, 1, key=k2),
        )

    def __call__(self, z: Float[Array, "*B dv"]) -> Float[Array, "*B"]:
        """Scores ``[...]`` of value vectors ``z [..., d_v]``.

        ``z`` may carry leading batch axes (one ``z [d_v]`` gives a scalar score).

        Raises:
          TypeError: ``z`` not a floating array of rank >= 1 with last axis ``d_v``.
        """
        _validate.floating(z, name="z")  # before any jnp op: a str names the argument
        _validate.min_ndim(z, 1, name="z")
        dv = self.l1.w.shape[0]
        if jnp.shape(z)[-1] != dv:
            raise TypeError(
                f"`z` must have shape [..., d_v] with d_v = {dv}, got shape {jnp.shape(z)}."
            )
        return self.l2(jax.nn.gelu(self.l1(z)))[..., 0]


class BridgeVLP(eqx.Module):
    """K bridge tokens from the trigger hidden and the value correction.

    ``v = W2 GELU(W1 dz)``; ``a = MHA(q=seeds, k=v=[h_trig; v])``;
    ``bridge = LayerNorm(h_trig + softplus(gamma) a)`` with ``gamma`` init -2.
    """

    seeds: Array
    w1: Linear
    w2: Linear
    attn: Attention
    ln: LayerNorm
    gamma: Array

    def __init__(self, d_model, value_dim, n_bridge, heads, *, key):
        _validate.is_key(key)
        ks = jax.random.split(key, 4)
        self.seeds = 0.02 * jax.random.normal(ks[0], (n_bridge, d_model), jnp.float32)
        self.w1, self.w2 = (
            Linear(value_dim, d_model, key=ks[1]),
            Linear(d_model, d_model, key=ks[2]),
        )
        self.attn = Attention(d_model, heads, key=ks[3])
        self.ln = LayerNorm(d_model)
        self.gamma = jnp.asarray(-2.0, jnp.float32)

    def __call__(self, h_trig: Float[Array, "B 1 D"], dz: Float[Array, "B dv"]) -> Array:
        """Bridge tokens ``[B, K, D]`` from triggers ``h_trig [B, 1, D]`` and ``dz [B, d_v]``.

        Raises:
          TypeError: ``h_trig`` not a floating ``[B, 1, D]`` array (``D`` the model width),
            ``dz`` not a floating ``[B, d_v]`` array.
        """
        _validate.floating(h_trig, name="h_trig")  # before any jnp op: a str names it
        _validate.shape(h_trig, (None, 1, self.seeds.shape[1]), name="h_trig")
        _validate.floating(dz, name="dz")
        _validate.shape(dz, (jnp.shape(h_trig)[0], self.w1.w.shape[0]), name="dz")
        b = h_trig.shape[0]
        h_trig = h_trig.astype(jnp.float32)
        v = self.w2(jax.nn.gelu(self.w1(dz)))[:, None, :]
        q = jnp.broadcast_to(self.seeds[None], (b, *self.seeds.shape))
        a = self.attn(q, jnp.concatenate([h_trig, v], axis=1))
        return self.ln(h_trig + jax.nn.softplus(self.gamma) * a)
