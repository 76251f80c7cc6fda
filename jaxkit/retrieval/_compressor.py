"""PST's token compressor as an equinox layer: local context, DPC-KNN, merge, attention.

``TokenCompressor`` is the segment stage of the spec's pyramid (§3): a temporal
depth-wise convolution adds local context (residual), a linear score gives each token's
log importance, :func:`dpc_knn` clusters the tokens into ``ceil(ratio * N)`` slots,
:func:`merge_tokens` forms each slot's importance-weighted mean, and one pre-norm
transformer block (self-attention among the merged tokens, then an MLP) mixes them.
Reconstructed [R]: the spec names the four parts; their sizes, the residual form and the
self-attention among merged tokens (TCFormer attends from merged tokens to the original
ones) are ours.
"""

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray
from jaxkit.retrieval._compress import _dpc_knn, _merge


class Compressed(NamedTuple):
    """Output of :class:`TokenCompressor` for one sequence.

    Attributes:
      tokens: ``[C, D]`` compressed tokens in centre order (empty slots 0).
      mask: ``bool [C]`` slots that hold a cluster.
      assign: ``int32 [N]`` slot of each input token (``-1`` for padding).
    """

    tokens: Array
    mask: Array
    assign: Array


class TokenCompressor(eqx.Module):
    """Compress ``N`` tokens of width ``dim`` into ``ceil(ratio * N)`` (one sequence).

    Attributes:
      conv: Depth-wise temporal convolution (``groups = dim``, same padding).
      score: Linear log-importance of each token (the merge weights ``exp(score)``).
      norm_attn, norm_mlp: Pre-norms of the block.
      attn: Self-attention among the merged tokens.
      mlp: The block's MLP (hidden ``2 * dim``, GELU).
      ratio: Kept fraction of tokens (static).
      k: DPC-KNN neighbours (static).
    """

    conv: eqx.nn.Conv1d
    score: eqx.nn.Linear
    norm_attn: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    norm_mlp: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP
    ratio: float = eqx.field(static=True)
    k: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        *,
        ratio: float = 0.5,
        k: int = 3,
        kernel: int = 3,
        n_heads: int = 4,
        key: KeyArray,
        dtype=jnp.float32,
    ):
        """Initialise the layers (equinox's default initialisations).

        Args:
          dim: Token width ``D`` (divisible by ``n_heads``).
          ratio: Kept fraction in ``(0, 1]`` (the spec's ``p``; 0.5 by default).
          k: DPC-KNN neighbours, self included (the lineage's 3).
          kernel: Width of the depth-wise convolution (odd).
          n_heads: Attention heads.
          key: PRNG key.
          dtype: Parameter dtype.

        Raises:
          TypeError: a non-int size, a non-float ``ratio`` or a ``key`` that is not a
            PRNG key.
          ValueError: ``ratio`` outside ``(0, 1]``, ``k``, ``dim``, ``n_heads`` or
            ``kernel`` below 1, an even ``kernel``, or ``dim % n_heads != 0``.
        """
        _validate.is_key(key)
        dim = _validate.python_int(dim, name="dim", minimum=1)
        k = _validate.python_int(k, name="k", minimum=1)
        kernel = _validate.python_int(kernel, name="kernel", minimum=1)
        n_heads = _validate.python_int(n_heads, name="n_heads", minimum=1)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
            raise TypeError(f"`ratio` must be a Python float, got {type(ratio).__name__}.")
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"`ratio` must lie in (0, 1], got {ratio!r}.")
        if kernel % 2 == 0:
            raise ValueError(f"`kernel` must be odd (same padding), got {kernel}.")
        if dim % n_heads:
            raise ValueError(f"`dim` ({dim}) must be divisible by `n_heads` ({n_heads}).")
        kc, ks, ka, km = jax.random.split(key, 4)
        self.conv = eqx.nn.Conv1d(dim, dim, kernel, padding="SAME", groups=dim, dtype=dtype, key=kc)
        self.score = eqx.nn.Linear(dim, 1, dtype=dtype, key=ks)
        self.norm_attn = eqx.nn.LayerNorm(dim, dtype=dtype)
        self.attn = eqx.nn.MultiheadAttention(n_heads, dim, dtype=dtype, key=ka)
        self.norm_mlp = eqx.nn.LayerNorm(dim, dtype=dtype)
        self.mlp = eqx.nn.MLP(dim, dim, 2 * dim, 1, activation=jax.nn.gelu, dtype=dtype, key=km)
        self.ratio = float(ratio)
        self.k = k

    def n_centers(self, n: int) -> int:
        """Slots for ``n`` input tokens: ``max(1, ceil(ratio * n))``."""
        return max(1, math.ceil(self.ratio * n))

    def __call__(
        self,
        x: Float[Array, "n d"],
        mask: Bool[Array, " n"] | None = None,
        *,
        n_centers: int | None = None,
    ) -> Compressed:
        """Compress one sequence (``jax.vmap`` over a batch); padding is never merged.

        Args:
          x: ``[N, dim]`` tokens.
          mask: ``bool [N]`` valid tokens (default all).
          n_centers: Slots ``C`` in ``[1, N]`` (static); default
            :meth:`n_centers` of ``N`` (``ceil(ratio * N)``). A fixed count, as a model
            with a set number of segment or phrase tokens needs, without a float ratio.

        Raises:
          TypeError: ``x`` not a floating ``[N, dim]`` array, a bad ``mask`` or a
            non-int ``n_centers``.
          ValueError: ``n_centers`` outside ``[1, N]``.
        """
        _validate.floating(x, name="x")
        _validate.ndim(x, 2, name="x")
        d = self.score.in_features
        if x.shape[-1] != d or x.shape[0] < 1:
            raise TypeError(f"`x` must be [N >= 1, {d}], got shape {x.shape}.")
        if mask is None:
            mask = jnp.ones(x.shape[:1], bool)
        _validate.boolean(mask, name="mask")
        _validate.shape(mask, x.shape[:1], name="mask")
        if n_centers is None:
            c = self.n_centers(x.shape[0])
        else:
            c = _validate.python_int(n_centers, name="n_centers", minimum=1)
            if c > x.shape[0]:
                raise ValueError(f"`n_centers` must be <= N = {x.shape[0]}, got {c}.")
        x = jnp.where(mask[:, None], x, 0)
        h = x + self.conv(x.T).T
        h = jnp.where(mask[:, None], h, 0)
        log_w = jax.vmap(self.score)(h)[:, 0]
        cl = _dpc_knn(h, mask, c, self.k)
        merged = _merge(h, cl.assign, log_w, c)
        keys = cl.valid | ~jnp.any(cl.valid)  # no valid slot: attend anywhere, zeroed below
        q = jax.vmap(self.norm_attn)(merged)
        y = merged + self.attn(q, q, q, mask=jnp.broadcast_to(keys[None, :], (c, c)))
        y = y + jax.vmap(self.mlp)(jax.vmap(self.norm_mlp)(y))
        return Compressed(jnp.where(cl.valid[:, None], y, 0), cl.valid, cl.assign)
