"""The DLMR adapter's trainable modules: the injector and the router (equinox).

Both are batched (leading ``B``), f32, and isolated from the backbone: they read
backbone hidden states and never hold or edit backbone parameters. [R]: the
authors' code is unavailable; the injector is the spec's ``"tiny"`` variant.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxkit import _validate
from jaxkit._adapter_layers import LayerNorm, Linear, normed
from jaxkit.memory._checks import check_injector, check_router_states


def _gelu(x):
    """``jax.nn.gelu`` (tanh form) taken on the two halves of the last axis: the same values.

    XLA:CPU splits a lone tanh fusion of the injector's size (``[B, k, 2 dim]``) across its
    threads; the hand-off costs more than the fusion, and a fusion reading slices stays on
    one thread (the injector ~15 % cheaper per call in CPU time, on 2 shared cores).
    """
    a, b = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([jax.nn.gelu(a), jax.nn.gelu(b)], axis=-1)


class CrossLayer(eqx.Module):
    """Pre-LN block: the latents attend to ``[context ; latents]``, then a GELU MLP."""

    wq: Linear
    wk: Linear
    wv: Linear
    wo: Linear
    ff1: Linear
    ff2: Linear
    ln_q: LayerNorm
    ln_kv: LayerNorm
    ln_ff: LayerNorm
    heads: int = eqx.field(static=True)

    def __init__(self, d: int, heads: int, *, key):
        ks = jax.random.split(key, 6)
        self.wq, self.wk, self.wv, self.wo = (Linear(d, d, key=k) for k in ks[:4])
        self.ff1, self.ff2 = Linear(d, 2 * d, key=ks[4]), Linear(2 * d, d, key=ks[5])
        self.ln_q, self.ln_kv, self.ln_ff = LayerNorm(d), LayerNorm(d), LayerNorm(d)
        self.heads = int(heads)

    def __call__(self, z, c, c_mask, z_mask=None):
        return self.attend(z, c, c_mask, z_mask)[0]

    def attend(self, z, c, c_mask, z_mask=None):
        """``(z', probs [B, H, k, S + k])``: the block's output and its attention.

        ``z_mask bool[B, k]``: the latents the others may read (default all), so the
        first ``k`` outputs never depend on latents past ``k``.
        """
        return self.attend_normed(z, normed(c), c_mask, z_mask)

    def attend_normed(self, z, c_hat, c_mask, z_mask=None):
        """:meth:`attend` given the context LayerNorm'd without its affine (``c_hat``).

        ``ln_kv`` is row-wise, so the context rows' statistics do not depend on the
        latents nor on the block: the injector takes them once for all its blocks. The
        latents' rows share one statistic between ``ln_q`` and ``ln_kv``.
        """
        b, k, d = z.shape
        h, dh = self.heads, d // self.heads
        if z_mask is None:
            z_mask = c_mask[:, :1] | jnp.ones((1, k), bool)
        mask = jnp.concatenate([c_mask, z_mask], axis=1)
        z_hat = normed(z)
        kv = self.ln_kv.affine(jnp.concatenate([c_hat, z_hat], axis=1))
        q = self.wq(self.ln_q.affine(z_hat)).reshape(b, k, h, dh)
        kk = self.wk(kv).reshape(b, -1, h, dh)
        vv = self.wv(kv).reshape(b, -1, h, dh)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(dh)
        s = jnp.where(mask[:, None, None, :], s, -1e30)
        probs = jax.nn.softmax(s, -1)
        o = jnp.einsum("bhqk,bkhd->bqhd", probs, vv).reshape(b, k, d)
        z = z + self.wo(o)
        return z + self.ff2(_gelu(self.ff1(self.ln_ff(z)))), probs


class Injector(eqx.Module):
    """``g_phi``: k memory tokens from the first k latents of a bank and the context.

    The context is the frozen backbone's block-``l`` hidden states of the valid
    (non-memory) slots before the injection point, each tagged with a learned
    recency embedding of its distance to that point (clipped to ``recency - 1``).
    The latents, plus a projection of ``now`` (the state of the last context slot,
    which says what is being asked), attend to ``[context ; latents]`` through
    ``n_layers`` pre-LN cross blocks; ``M = Z_{1:k} + W_out(LN(z))`` with ``W_out`` zero at init (a
    fresh injector returns the bank's latents). [R] the spec's ``"tiny"`` injector.
    """

    ln_in: LayerNorm
    w_ctx: Linear
    w_lat: Linear
    w_now: Linear
    recency: Array
    layers: tuple
    ln_out: LayerNorm
    w_out: Linear

    def __init__(self, d_model: int, dim: int, *, heads: int, n_layers: int, recency: int, key):
        _validate.is_key(key)
        ks = jax.random.split(key, n_layers + 4)
        self.ln_in = LayerNorm(d_model)
        self.w_ctx, self.w_lat = Linear(d_model, dim, key=ks[0]), Linear(d_model, dim, key=ks[1])
        k_now, k_rec = jax.random.split(ks[2])
        self.w_now = Linear(d_model, dim, key=k_now)
        self.recency = 0.1 * jax.random.normal(k_rec, (recency, dim), jnp.float32)
        self.layers = tuple(CrossLayer(dim, heads, key=k) for k in ks[4:])
        self.ln_out = LayerNorm(dim)
        self.w_out = Linear(dim, d_model, key=ks[3], gain=0.0)

    def __call__(self, *args, **kwargs) -> Float[Array, "B K D"]:
        """The memory of :meth:`forward` (same arguments), without the reads."""
        return self.forward(*args, **kwargs)[0]

    def forward(
        self,
        ctx: Float[Array, "B S D"],
        ctx_valid: Bool[Array, "B S"],
        dist: Int[Array, "B S"],
        latents: Float[Array, "B K D"],
        now: Float[Array, "B D"],
        latents_valid: Bool[Array, "B K"] | None = None,
    ) -> tuple[Float[Array, "B K D"], Float[Array, "B S"]]:
        """``(memory [B, K, D], reads [B, S])``: the memory and where it read.

        ``latents_valid``: the latents ``Z_{1:k}`` of each row (default all); the
        others are hidden as keys, so memory token ``i < k`` depends on ``Z_{1:k}``
        only and a call with more latents gives the same first ``k`` tokens.

        ``reads`` is the first cross block's attention on the context slots, averaged
        over heads and latents (what stage 1's evidence term supervises).

        ``dist`` is any integer, clipped to ``[0, recency - 1]``: far slots share the last
        recency embedding; slots at or past the point (``dist <= 0``, as ``memory.inject`` passes
        them) are meant to be hidden by ``ctx_valid``.

        Raises:
          TypeError: If ``ctx``, ``latents`` or ``now`` is not a floating array, a mask not a
            bool array or ``dist`` not an integer array (a string included), or the shapes
            are not ``ctx [B, S, d_model]``, ``ctx_valid``/``dist [B, S]``, ``latents
            [B, K, d_model]``, ``now [B, d_model]``, ``latents_valid [B, K]``.
        """
        check_injector(ctx, ctx_valid, dist, latents, now, latents_valid, d=self.w_ctx.w.shape[0])
        n_r = self.recency.shape[0]
        # a one-hot product, not a gather: it keeps the batch sharding of ``dist``
        hot = jax.nn.one_hot(jnp.clip(dist, 0, n_r - 1), n_r, dtype=self.recency.dtype)
        r = hot @ self.recency
        c = self.w_ctx(self.ln_in(ctx)) + r
        z = self.w_lat(latents) + self.w_now(self.ln_in(now))[:, None, :]
        c_hat = normed(c)  # the context rows' LayerNorm statistics, shared by the blocks
        reads = None
        for layer in self.layers:
            z, probs = layer.attend_normed(z, c_hat, ctx_valid, latents_valid)
            if reads is None:
                reads = jnp.mean(probs[..., : ctx.shape[1]], axis=(1, 2))
        anchor = now.astype(jnp.float32)[:, None, :] + latents.astype(jnp.float32)
        return anchor + self.w_out(self.ln_out(z)), reads


class Router(eqx.Module):
    """``pi_psi``: action logits from the current hidden state (GELU MLP, last layer 0).

    The input is normalised first (a LayerNorm without parameters): it is the backbone's
    raw last-block residual stream, whose scale (norm ~64 on the toy grid, ~52 of it a
    component every step shares) dwarfs what tells the steps apart, and Adam's first
    router steps on it saturate the policy; HF models' ``hidden_states[-1]`` (what
    VisMem's memory former reads) is normalised too. Then it is standardised per feature
    (``(x - mean) * scale``, constants: no gradient reaches them; identity until
    :meth:`standardize` fits them to sample states): after the LayerNorm the states are
    still mostly one direction every step shares, and the MLP's first layer at its init
    scale hardly sees the rest. [R] (the paper's router input is not published.) A fresh
    router is uniform (all logits 0; its arg-max is action 0, the null).
    """

    norm: eqx.nn.LayerNorm
    mean: Array
    scale: Array
    l1: Linear
    l2: Linear

    def __init__(self, d_model: int, hidden: int, n_actions: int, *, key):
        _validate.is_key(key)
        k1, k2 = jax.random.split(key)
        self.norm = eqx.nn.LayerNorm(d_model, use_weight=False, use_bias=False)
        self.mean = jnp.zeros((d_model,), jnp.float32)
        self.scale = jnp.ones((d_model,), jnp.float32)
        self.l1 = Linear(d_model, hidden, key=k1)
        self.l2 = Linear(hidden, n_actions, key=k2, gain=0.0)

    def features(self, h: Float[Array, "*B D"]) -> Float[Array, "*B D"]:
        """The MLP's input: ``h`` layer-normalised, then standardised per feature.

        ``h`` may carry leading batch axes (one state ``[D]`` or any batch of them).

        Raises:
          TypeError: If ``h`` is not a floating array with trailing dimension ``d_model``.
        """
        check_router_states(h, d=self.mean.shape[0])
        h = h.astype(jnp.float32)
        h = jax.vmap(self.norm)(h.reshape(-1, h.shape[-1])).reshape(h.shape)
        lead = (1,) * (h.ndim - 1)
        mean, scale = (
            jax.lax.stop_gradient(a).reshape(lead + (-1,)) for a in (self.mean, self.scale)
        )
        return (h - mean) * scale

    def standardize(self, h: Float[Array, "N D"], *, eps: float = 1e-4) -> "Router":
        """This router with its per-feature constants fitted to sample states ``h``.

        Afterwards :meth:`features` has mean 0 and standard deviation 1 per feature over
        ``h`` (a feature constant over ``h`` keeps scale ``1 / sqrt(eps)`` at most).
        Fit before training the MLP (e.g. on the states at the delimiters of a batch
        of training streams): refitting changes what the trained layers read.

        Raises:
          TypeError: If ``h`` is not a floating array of shape ``[N, d_model]`` with
            ``N >= 1``, or ``eps`` is not a real scalar.
          ValueError: If ``eps`` is not finite and > 0.
        """
        check_router_states(h, d=self.mean.shape[0], rank=2)
        _validate.nonempty(h, name="h")
        _validate.finite_scalar(eps=eps)
        _validate.positive(eps=eps)
        x = jnp.asarray(h, jnp.float32)
        x = jax.vmap(self.norm)(x.reshape(-1, x.shape[-1]))
        mu, var = jnp.mean(x, 0), jnp.var(x, 0)
        return eqx.tree_at(lambda r: (r.mean, r.scale), self, (mu, jax.lax.rsqrt(var + eps)))

    def __call__(self, h: Float[Array, "*B D"]) -> Float[Array, "*B A"]:
        """Action logits ``[*B, A]`` of hidden states ``h [*B, D]``.

        ``h`` may carry leading batch axes (one state ``[D]`` or any batch of them).

        Raises:
          TypeError: If ``h`` is not a floating array with trailing dimension ``d_model``.
        """
        check_router_states(h, d=self.mean.shape[0])  # before .astype: a str names `h`
        return self.l2(jax.nn.gelu(self.l1(self.features(h))))
