"""Public entry point of the fused categorical sampler: checks, noise, dispatch, VJP."""

import functools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Integer, Real

from jaxkit import _validate
from jaxkit._typing import Implementation, KeyArray, accumulation_dtype
from jaxkit.kernels import _dispatch
from jaxkit.kernels.sampling import _fused, _hash, _pallas
from jaxkit.kernels.sampling import _reference as ref

Stats = Literal["sampled", "logits"]


class SampleOutput(NamedTuple):
    """Result of :func:`sample_tokens`.

    Attributes:
      token: Sampled token index per row (int32).
      probability: Probability of ``token`` (dtype of the logits).
      entropy: Entropy in nats of the distribution (dtype of the logits).
    """

    token: Int[Array, "*batch"]
    probability: Float[Array, "*batch"]
    entropy: Float[Array, "*batch"]


# ----------------------------------------------------------------- kernel + VJP


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _kernel_with_vjp(x, noise, t, k, p, mp, stats, plain, interpret):
    return _pallas.sample_rows_pallas(
        x, noise, t, k, p, mp, stats=stats, plain=plain, interpret=interpret
    )


def _fwd(x, noise, t, k, p, mp, stats, plain, interpret):
    return _kernel_with_vjp(x, noise, t, k, p, mp, stats, plain, interpret), (
        x,
        noise,
        t,
        k,
        p,
        mp,
    )


def _bwd(stats, plain, interpret, res, g):
    # The backward pass is the VJP of the reference (which draws the same token from
    # the same noise): gradients flow to the logits and the temperature through the
    # probability and the entropy; the token, the thresholds and the noise have none.
    del interpret
    x, noise, t, k, p, mp = res
    if noise.ndim == 1:  # key data: the kernel made the noise itself, bit-identical to
        key = jax.random.wrap_key_data(noise, impl="threefry2x32")
        noise = jax.random.gumbel(key, x.shape, jnp.float32)

    def f(x, t):
        out = _fused.sample_block(
            x, noise, t, k, p, mp, stats=stats, vocab=x.shape[-1], plain=plain
        )
        return out.probability, out.entropy

    _, vjp = jax.vjp(f, x, t)
    gx, gt = vjp((g.probability, g.entropy))
    return gx, None, gt, None, None, None


_kernel_with_vjp.defvjp(_fwd, _bwd)


# ----------------------------------------------------------------- argument handling


def _per_row(value, like: Array, *, name: str, dtype) -> Array:
    """Broadcast a scalar or per-row hyperparameter to the rows of ``like`` (flat).

    ``like`` is ``logits[..., 0]``; building on it with ``zeros_like`` keeps the
    batch sharding, so per-row values line up with sharded rows.
    """
    batch = like.shape
    a = jnp.asarray(value)
    if a.ndim > len(batch) or a.shape != batch[len(batch) - a.ndim :]:
        raise TypeError(
            f"`{name}` must be a scalar or have the batch shape {batch} (or a trailing "
            f"part of it), got shape {a.shape}."
        )
    return (jnp.zeros_like(like, dtype=dtype) + a.astype(dtype)).reshape(-1)


def _guard(x: Array, pred: Array, msg: str) -> Array:
    """``_validate.error_if`` that also works inside ``jax.shard_map``.

    There the predicate varies across devices and ``eqx.error_if``'s ``cond``
    rejects varying operands, so reduce the predicate over the manual axes and
    guard an invariant zero that is then added to ``x``.
    """
    mat = getattr(jax.typeof(pred), "manual_axis_type", None)
    vma = tuple(sorted(getattr(mat, "varying", ()) or ()))
    if not vma:
        return _validate.error_if(x, pred, msg)
    bad = jax.lax.pmax(pred.astype(jnp.int32), vma) > 0
    zero = _validate.error_if(jnp.zeros((), x.dtype), bad, msg)
    return x + zero


def _is_plain(top_k, top_p, min_p) -> bool:
    """Whether every filter is surely off (a static decision).

    ``top_k is None`` and concrete ``top_p == 1``, ``min_p == 0``; traced values take
    the filtered path, whose bisections then run zero passes.
    """
    if top_k is not None:
        return False
    for value, off in ((top_p, 1), (min_p, 0)):
        if isinstance(value, jax.core.Tracer) or not np.all(np.asarray(value) == off):
            return False
    return True


def _check_top_k(top_k, vocab: int) -> None:
    if top_k is None:
        return
    _validate.integer(top_k, name="top_k")  # a string or an object: named, as a float dtype
    a = np.asarray(top_k) if not isinstance(top_k, jax.core.Tracer) else None
    if a is not None and (np.any(a < 1) or np.any(a > vocab)):
        raise ValueError(
            f"`top_k` must lie in [1, vocab size {vocab}] (None disables it), got "
            f"top_k={a.tolist()}."
        )


def sample_tokens(
    logits: Float[ArrayLike, "*batch vocab"],
    *,
    key: KeyArray,
    temperature: Real[ArrayLike, "*#batch"] = 1.0,
    top_k: Integer[ArrayLike, "*#batch"] | None = None,
    top_p: Real[ArrayLike, "*#batch"] = 1.0,
    min_p: Real[ArrayLike, "*#batch"] = 0.0,
    stats: Stats = "sampled",
    implementation: Implementation = "auto",
) -> SampleOutput:
    """Sample one token per row with temperature, top-k, top-p, min-p and Gumbel-max.

    With ``s = logits / temperature`` (computed in f32, f64 for f64 logits) the
    kept set of a row is ``{i : s_i >= max(tau_k, tau_p, tau_min)}``, where
    ``tau_k`` is the k-th largest ``s``, ``tau_p`` the smallest value whose
    descending prefix holds a fraction ``top_p`` of the top-k-renormalised mass
    (the Hugging Face / vLLM order), and ``tau_min`` keeps tokens with
    ``p_i >= min_p * max_j p_j``. Ties at a threshold are all kept; the arg-max
    is always kept. The token is ``argmax_{i kept}(s_i + g_i)`` with Gumbel noise
    ``g = jax.random.gumbel(key, logits.shape, f32)``, an exact sample from the
    renormalised truncated softmax. With no filter and f32 logits this is
    ``jax.random.categorical(key, logits / temperature)`` token for token; for
    bf16 logits we compute in f32 (``categorical`` adds bf16 noise in bf16), so
    tokens equal ``categorical(key, logits.astype(f32) / temperature)``.
    ``temperature == 0`` gives the arg-max (ties to the lowest index), chosen with
    ``jnp.where`` so a traced temperature may be 0 under ``jit``. With ``top_k=None``
    and ``top_p``, ``min_p`` at their defaults (concrete values 1 and 0) the
    threshold machinery is skipped at trace time: one arg-max of ``s + g``, the
    same token, probability and entropy as the filtered path with the filters off.
    Jitted like
    jax.numpy (module level, ``stats`` and ``implementation`` static,
    hyperparameters traced): eager calls after the first compile nothing.

    Args:
      logits: Unnormalised log-probabilities ``[*batch, vocab]``: the last axis is the
        vocabulary, any leading batch axes (one row ``[vocab]`` included).
        ``-inf`` entries are masked tokens; NaN or ``+inf`` raise.
      key: A typed PRNG key from ``jax.random.key``.
      temperature: >= 0 and finite; a scalar or one value per row (traced, no recompile).
      top_k: Keep the ``top_k`` most likely tokens (1 <= top_k <= vocab), or
        ``None`` for no top-k. A Python int, a traced int scalar or one per row:
        the threshold is found by an exact bisection (sorting in the spec), so
        a traced ``top_k`` never recompiles.
      top_p: Nucleus mass in (0, 1]; 1 disables it. Scalar or per row, traced.
      min_p: In [0, 1]; 0 disables it. Scalar or per row, traced.
      stats: ``"sampled"``: ``probability`` and ``entropy`` describe the
        distribution the token was drawn from (temperature and filters applied;
        a point mass, probability 1 and entropy 0, when ``temperature == 0``).
        ``"logits"``: they describe ``softmax(logits)`` (no temperature, no
        filter), the confidence used by low-confidence remasking.
      implementation: ``"auto"`` (Pallas on TPU and GPU, jnp elsewhere, see
        :data:`AUTO_PALLAS_PLATFORMS`),
        ``"xla"``, ``"pallas"`` or ``"pallas_interpret"``. The kernel holds whole rows
        (padded vocab <= 65536) and is a per-device program: beyond that size, or
        under an explicit mesh, ``"auto"`` uses the jnp path. To run it sharded,
        call this inside ``jax.shard_map`` (``check_vma=False``) with
        ``key = jax.random.fold_in(key, jax.lax.axis_index(axis))`` so shards
        draw independent noise.

    Returns:
      A :class:`SampleOutput` ``(token, probability, entropy)`` of batch shape.
      ``probability`` and ``entropy`` are differentiable with respect to
      ``logits`` and ``temperature`` (the token and the kept set held fixed);
      the token has no derivative. The Pallas path has a ``custom_vjp`` whose
      backward pass is the reference's VJP, so it supports reverse mode only.

    Raises:
      TypeError: If ``logits`` is not floating, has rank 0 or no row, a hyperparameter's
        shape does not fit the batch shape, or ``top_k`` is not an integer.
      ValueError: For a concrete ``temperature < 0`` or infinite, ``top_p`` outside (0, 1],
        ``min_p`` outside [0, 1] (NaN fails each of these), ``top_k`` outside
        [1, vocab], an unknown ``stats`` or ``implementation``, or concrete
        NaN/``+inf`` logits (under ``jit`` these value checks become runtime
        errors naming the argument).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> out = sample_tokens(jnp.array([[0.0, 3.0, 1.0]]), key=jax.random.key(0),
      ...                     temperature=0.0)
      >>> out.token, out.probability
      (Array([1], dtype=int32), Array([1.], dtype=float32))

    References:
      Gumbel-max: Maddison, Tarlow, Minka, "A* Sampling", NeurIPS 2014. Top-p:
      Holtzman et al., "The Curious Case of Neural Text Degeneration", ICLR 2020.
      Min-p: Nguyen et al., "Turning Up the Heat: Min-p Sampling", ICLR 2025.
      Low-confidence remasking: Nie et al., "Large Language Diffusion Models"
      (LLaDA), 2025, arXiv:2502.09992.
    """
    _validate.is_key(key)
    plain = _is_plain(top_k, top_p, min_p)
    logits, top_k = _check(logits, temperature, top_k, top_p, min_p)
    _validate.one_of(("sampled", "logits"), stats=stats)
    _validate.one_of(_dispatch.IMPLEMENTATIONS, implementation=implementation)
    return _sample_tokens(
        logits,
        key,
        temperature,
        top_k,
        top_p,
        min_p,
        stats=stats,
        plain=plain,
        implementation=implementation,
    )


def _check(logits, temperature, top_k, top_p, min_p):
    """Python-level checks (types, shapes, concrete values); ``(logits, top_k or V)``."""
    _validate.floating(logits, name="logits")
    _validate.min_ndim(logits, 1, name="logits")
    logits = jnp.asarray(logits)
    vocab = logits.shape[-1]
    if vocab == 0:
        raise TypeError(
            f"`logits` must have a non-empty vocabulary axis, got shape {logits.shape}."
        )
    if logits.size == 0:  # a batch axis of 0 (the kernel's row reductions have no identity)
        raise TypeError(f"`logits` must hold at least one row, got shape {logits.shape}.")
    _validate.real(temperature, name="temperature")
    _validate.real(top_p, name="top_p")
    _validate.real(min_p, name="min_p")
    _validate.non_negative(temperature=temperature)
    t = _validate._concrete(temperature)
    if t is not None and not np.all(np.isfinite(t)):  # inf: s = 0, a uniform draw
        raise ValueError(f"`temperature` must be finite, got temperature={t.tolist()}.")
    _validate.in_interval(low=0, high=1, closed="right", top_p=top_p)
    _validate.in_interval(low=0, high=1, closed="both", min_p=min_p)
    _check_top_k(top_k, vocab)
    if not isinstance(logits, jax.core.Tracer):  # concrete logits: ValueError at once
        nan_or_inf, empty_row = _bad_logits(logits)
        if not isinstance(nan_or_inf, jax.core.Tracer):  # (not inside someone's trace)
            if nan_or_inf:
                raise ValueError(_NAN_LOGITS)
            if empty_row:
                raise ValueError(_EMPTY_ROW)
    return logits, vocab if top_k is None else top_k


AUTO_PALLAS_PLATFORMS = ("tpu", "gpu", "cuda")
"""Backends where ``implementation="auto"`` runs the Pallas sampler (where it fits: padded
vocab <= 65536, no explicit mesh; else the jnp path). GPU since an H200 run (jax 0.11.2,
CUDA 13; ``kernels/README.md``): the Triton build compiles in 1-8 s, draws the same tokens
as the jnp path and the sort spec on every checked shape, and is 2.0-8.3x faster than the
jnp path (bf16 and f32, V = 4096 and 32000, 1 to 4096 rows; at one row the sort spec is
faster still). Checked on CUDA only (ROCm also reports ``"gpu"``: unverified there). The
earlier build did not lower (``reduce_or``; a data-dependent ``fori_loop`` bound that
Triton's ``scf.for`` verifier rejects): the bisections now have a static trip count and a
GPU program takes one row (``_pallas.GPU_ROW_ELEMENTS``)."""

_NAN_LOGITS = "`logits` must not contain NaN or +inf."
_EMPTY_ROW = "`logits` has a row that is entirely -inf (nothing to sample)."


@jax.jit
def _bad_logits(logits):
    """(any NaN or +inf, any row entirely -inf): the checks the traced guards make."""
    return (
        jnp.any(jnp.isnan(logits) | (logits == jnp.inf)),
        jnp.any(jnp.all(logits == -jnp.inf, axis=-1)),
    )


def _rows(logits, temperature, top_k, top_p, min_p, plain=False):
    """Flat per-row hyperparameters ``(t, k, p, mp)``, guarded (NaN fails too).

    ``plain``: the filters are known to be off (their concrete values were checked),
    so only the logits and the temperature are guarded.

    The logits checks guard the small per-row ``t`` (which every path consumes),
    not the (R, V) logits: under a mesh, eqx.error_if's result is computed on one
    device, and replicating R numbers is cheap, R * V is not.
    """
    vocab = logits.shape[-1]
    cd = jnp.dtype(accumulation_dtype(logits.dtype))
    like = logits[..., 0]
    t = _per_row(temperature, like, name="temperature", dtype=cd)
    p = _per_row(top_p, like, name="top_p", dtype=cd)
    mp = _per_row(min_p, like, name="min_p", dtype=cd)
    k = _per_row(top_k, like, name="top_k", dtype=jnp.int32)
    nan_or_inf, empty_row = _bad_logits(logits)
    t = _guard(t, nan_or_inf, _NAN_LOGITS)
    t = _guard(t, empty_row, _EMPTY_ROW)
    # ~(ok) forms: a NaN hyperparameter compares False and must fail the check.
    t = _guard(t, ~jnp.all((t >= 0) & (t < jnp.inf)), "`temperature` must be >= 0 and finite.")
    if plain:
        return t, k, p, mp
    p = _guard(p, ~jnp.all((p > 0) & (p <= 1)), "`top_p` must lie in (0, 1] (not NaN).")
    mp = _guard(mp, ~jnp.all((mp >= 0) & (mp <= 1)), "`min_p` must lie in [0, 1] (not NaN).")
    k = _guard(k, _validate.any_outside(k, 1, vocab), f"`top_k` must lie in [1, {vocab}].")
    return t, k, p, mp


@functools.partial(jax.jit, static_argnames=("stats", "plain", "implementation"))
def _sample_tokens(logits, key, temperature, top_k, top_p, min_p, *, stats, plain, implementation):
    """Jitted core of :func:`sample_tokens` (module level: eager calls hit the cache)."""
    *batch, vocab = logits.shape
    batch = tuple(batch)
    cd = jnp.dtype(accumulation_dtype(logits.dtype))
    t, k, p, mp = _rows(logits, temperature, top_k, top_p, min_p, plain)
    x2 = logits.reshape(-1, vocab)

    def noise():  # flat (R, V) noise equals gumbel over logits.shape (partitionable)
        # threefry keys: the counter hash of ``_hash`` (bit for bit the same noise) is one
        # fused elementwise program, where jax.random's threefry is a rolled loop of small
        # kernels on CPU (wave 23: 64 x 32000 rows 62 -> 33 ms, see docs/areas/decoding.md)
        if _pallas.hash_noise_supported(key, logits.dtype, logits.size):
            kd = jax.random.key_data(key)
            sh = jax.typeof(x2).sharding
            r = jax.lax.broadcasted_iota(jnp.uint32, x2.shape, 0, out_sharding=sh)
            c = jax.lax.broadcasted_iota(jnp.uint32, x2.shape, 1, out_sharding=sh)
            return _hash.gumbel_f32(kd[0], kd[1], r * np.uint32(vocab) + c)
        g = jax.random.gumbel(key, logits.shape, cd, out_sharding=jax.typeof(logits).sharding)
        return g.reshape(-1, vocab)

    def kernel(interpret):
        # threefry keys: the kernel hashes its own noise (reads only the logits)
        g = (
            jax.random.key_data(key)
            if _pallas.hash_noise_supported(key, logits.dtype, logits.size)
            else noise()
        )
        return _kernel_with_vjp(x2, g, t, k, p, mp, stats, plain, interpret)

    rows = _dispatch.dispatch(
        implementation,
        platforms=AUTO_PALLAS_PLATFORMS,
        reference=lambda: _fused.sample_block(
            x2, noise(), t, k, p, mp, stats=stats, vocab=vocab, plain=plain
        ),
        kernel=kernel,
    )
    dt = logits.dtype
    return SampleOutput(
        rows.token.reshape(batch),
        rows.probability.astype(dt).reshape(batch),
        rows.entropy.astype(dt).reshape(batch),
    )


def filtered_probabilities(
    logits: Float[ArrayLike, "*batch vocab"],
    *,
    temperature: Real[ArrayLike, "*#batch"] = 1.0,
    top_k: Integer[ArrayLike, "*#batch"] | None = None,
    top_p: Real[ArrayLike, "*#batch"] = 1.0,
    min_p: Real[ArrayLike, "*#batch"] = 0.0,
) -> Float[Array, "*batch vocab"]:
    """The exact distribution :func:`sample_tokens` draws from (jnp reference).

    Same filters and arguments as :func:`sample_tokens`; a one-hot at the arg-max
    where ``temperature == 0``. Useful as an oracle and for scoring. Jitted like
    jax.numpy (module level, hyperparameters traced).

    Args:
      logits: Unnormalised log-probabilities ``[*batch, vocab]``: the last axis is the
        vocabulary, any leading batch axes (one row ``[vocab]`` included).
      temperature: >= 0 and finite, scalar or per row.
      top_k: In [1, vocab] or None.
      top_p: In (0, 1].
      min_p: In [0, 1].

    Returns:
      Probabilities with the shape and dtype of ``logits``, rows summing to 1.

    Raises:
      TypeError, ValueError: As :func:`sample_tokens`.

    Example:
      >>> import jax.numpy as jnp
      >>> filtered_probabilities(jnp.log(jnp.array([0.5, 0.3, 0.2])), top_k=2)
      Array([0.625, 0.375, 0.   ], dtype=float32)

    References:
      Holtzman et al., ICLR 2020 (top-p); Nguyen et al., ICLR 2025 (min-p).
    """
    logits, top_k = _check(logits, temperature, top_k, top_p, min_p)
    return _filtered_probabilities(logits, temperature, top_k, top_p, min_p)


@jax.jit
def _filtered_probabilities(logits, temperature, top_k, top_p, min_p):
    vocab = logits.shape[-1]
    t, k, p, mp = _rows(logits, temperature, top_k, top_p, min_p)
    probs = ref.filtered_probabilities_reference(logits.reshape(-1, vocab), t, k, p, mp)
    return probs.astype(logits.dtype).reshape(logits.shape)
