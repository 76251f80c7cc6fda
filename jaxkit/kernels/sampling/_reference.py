"""jnp reference of the fused categorical sampler: the specification of the kernel.

Rows are flattened to ``(R, V)``; every per-row hyperparameter is an ``(R,)`` array.
The filters follow the order used by Hugging Face ``transformers`` and vLLM:
temperature, then top-k, then top-p on the top-k-renormalised distribution, then
min-p (relative to the most likely token, so it commutes with the others). Each
filter is a threshold on the tempered logits ``s``; ties at a threshold are all
kept, so the kept set is ``{i : s_i >= tau}`` and always contains the arg-max.
The reference finds the top-k and top-p thresholds by a full sort (obviously
correct); ``_fused`` (run by the kernel and by ``implementation="xla"``) finds the
same values by a bisection over the bit patterns, and tests check they agree.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxkit import _validate
from jaxkit._typing import accumulation_dtype


class RowStats(NamedTuple):
    """Per-row result of the flattened sampler (compute dtype)."""

    token: Int[Array, " R"]
    probability: Float[Array, " R"]
    entropy: Float[Array, " R"]


def column_index(s: Array) -> Array:
    """int32 column index of a 2-D array, with the sharding of ``s``."""
    return jax.lax.broadcasted_iota(jnp.int32, s.shape, 1, out_sharding=jax.typeof(s).sharding)


def tempered(logits: Float[Array, "R V"], temperature: Float[Array, " R"]) -> Array:
    """``s = logits / T`` in the compute dtype (``T == 0`` rows use ``T = 1``)."""
    cd = jnp.dtype(accumulation_dtype(logits.dtype))
    t = temperature.astype(cd)
    safe_t = jnp.where(t > 0, t, jnp.ones_like(t))
    s = logits.astype(cd) / safe_t[:, None]
    return jnp.where(s == 0, jnp.zeros_like(s), s)  # -0.0 -> +0.0 (one key per value)


def _sorted_thresholds(s, m, e, k, p):
    """Top-k then top-p kept set from a descending sort of each row."""
    desc = -jnp.sort(-s, axis=-1)  # descending, ties adjacent
    tau_k = jnp.take_along_axis(desc, (k - 1)[:, None], axis=-1)
    keep_k = s >= tau_k
    # top-p on the top-k-renormalised distribution: keep the smallest prefix (in
    # descending order) whose mass reaches p * Z_k, plus all ties of its last value.
    e_desc = jnp.exp(desc - m)
    e_desc = jnp.where(desc >= tau_k, e_desc, jnp.zeros_like(e_desc))
    z_k = jnp.sum(jnp.where(keep_k, e, jnp.zeros_like(e)), axis=-1, keepdims=True)
    cum = jnp.cumsum(e_desc, axis=-1)
    first = jnp.argmax(cum >= p * z_k, axis=-1)
    reached = jnp.any(cum >= p * z_k, axis=-1)  # fails only by rounding when p ~ 1
    first = jnp.where(reached, first, jnp.sum(keep_k, axis=-1) - 1)
    tau_p = jnp.take_along_axis(desc, first[:, None], axis=-1)
    tau_p = jnp.where(p >= 1, jnp.full_like(tau_p, -jnp.inf), tau_p)
    return keep_k & (s >= tau_p)


def _all_kept(s, m, e, k, p):
    del m, e, k, p
    return jnp.ones_like(s, dtype=bool)


def kept_mask(
    s: Float[Array, "R V"],
    top_k: Int[Array, " R"],
    top_p: Float[Array, " R"],
    min_p: Float[Array, " R"],
) -> Bool[Array, "R V"]:
    """The kept set of each row, found with a full sort (no gradient flows here).

    The sort runs under ``lax.cond`` only when some row has an active top-k or
    top-p filter (a traced test, no Python branch), so plain sampling costs no sort.
    """
    s = jax.lax.stop_gradient(s)
    cd = s.dtype
    v = s.shape[-1]
    m = jnp.max(s, axis=-1, keepdims=True)
    e = jnp.exp(s - m)
    k = jnp.clip(top_k, 1, v).astype(jnp.int32)
    p = top_p.astype(cd)[:, None]

    active = jnp.any(k < v) | jnp.any(p < 1)
    # module-level branches (not closures), so eager calls hit jax's trace cache
    keep_kp = jax.lax.cond(active, _sorted_thresholds, _all_kept, s, m, e, k, p)
    return keep_kp & (e >= min_p.astype(cd)[:, None])


def row_stats(
    s: Float[Array, "R V"], keep: Bool[Array, "R V"], token: Int[Array, " R"]
) -> tuple[Array, Array]:
    """Probability of ``token`` and entropy of softmax(s) restricted to ``keep``.

    Written with elementwise ops and row reductions only, so the Pallas kernel
    calls this very function on its block.
    """
    keep = keep & (s > -jnp.inf)
    neg = jnp.full_like(s, -jnp.inf)
    m = jax.lax.stop_gradient(jnp.max(jnp.where(keep, s, neg), axis=-1, keepdims=True))
    zero = jnp.zeros_like(s)
    d = jnp.where(keep, s - m, zero)
    e = jnp.where(keep, jnp.exp(d), zero)
    z = jnp.sum(e, axis=-1)
    cols = column_index(s)
    e_tok = jnp.sum(jnp.where(cols == token[:, None], e, zero), axis=-1)
    prob = e_tok / z
    ent = jnp.log(z) - jnp.sum(e * d, axis=-1) / z
    return prob, ent


def _check_rows(logits, noise, temperature, top_k, top_p, min_p) -> None:
    """Named dtype/shape checks of :func:`sample_rows_reference`'s flat rows (TypeError)."""
    _validate.floating(logits, name="logits")
    _validate.ndim(logits, 2, name="logits")
    _validate.floating(noise, name="noise")
    _validate.shape(noise, jnp.shape(logits), name="noise")
    rows = (jnp.shape(logits)[0],)
    _validate.integer(top_k, name="top_k")
    _validate.shape(top_k, rows, name="top_k")
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
        _validate.real(value, name=name)
        _validate.shape(value, rows, name=name)


def sample_rows_reference(
    logits: Float[Array, "R V"],
    noise: Float[Array, "R V"],
    temperature: Float[Array, " R"],
    top_k: Int[Array, " R"],
    top_p: Float[Array, " R"],
    min_p: Float[Array, " R"],
    *,
    stats: str = "sampled",
) -> RowStats:
    """Sample one token per row by Gumbel-max over the kept set; see module docstring.

    ``noise`` is standard Gumbel noise in the compute dtype (``jax.random.gumbel``).
    ``stats="sampled"``: probability/entropy of the distribution sampled from (a
    point mass at the arg-max when ``T == 0``); ``stats="logits"``: of
    ``softmax(logits)`` (no temperature, no filter); another ``stats`` raises.

    The inputs are the flattened rows that :func:`~jaxkit.kernels.sampling.sample_tokens`
    builds: ``logits`` and ``noise`` ``(R, V)`` floating, one ``temperature``, ``top_k``
    (integer), ``top_p`` and ``min_p`` per row, each ``(R,)``.

    Raises:
      TypeError: An argument of another dtype kind (a string included), rank or shape
        than above.
      ValueError: An unknown ``stats``; a ``top_k`` outside ``[1, V]`` (traced: under
        ``jit``).
    """
    _check_rows(logits, noise, temperature, top_k, top_p, min_p)
    _validate.one_of(("sampled", "logits"), stats=stats)
    v = jnp.shape(logits)[-1]
    top_k = _validate.error_if(  # kept_mask clips it: an out-of-range k was silently changed
        top_k, _validate.any_outside(top_k, 1, v), f"`top_k` must lie in [1, {v}]."
    )
    s = tempered(logits, temperature)
    keep = kept_mask(s, top_k, top_p, min_p)
    neg = jnp.full_like(s, -jnp.inf)
    sampled = jnp.argmax(jnp.where(keep, s + noise.astype(s.dtype), neg), axis=-1)
    greedy = jnp.argmax(s, axis=-1)
    t = temperature
    token = jnp.where(t > 0, sampled, greedy).astype(jnp.int32)
    if stats == "logits":
        x = logits.astype(s.dtype)
        prob, ent = row_stats(x, x > -jnp.inf, token)
    else:
        prob, ent = row_stats(s, keep, token)
        prob = jnp.where(t > 0, prob, jnp.ones_like(prob))
        ent = jnp.where(t > 0, ent, jnp.zeros_like(ent))
    return RowStats(token, prob, ent)


def filtered_probabilities_reference(
    logits: Float[Array, "R V"],
    temperature: Float[Array, " R"],
    top_k: Int[Array, " R"],
    top_p: Float[Array, " R"],
    min_p: Float[Array, " R"],
) -> Float[Array, "R V"]:
    """The exact distribution :func:`sample_rows_reference` draws from, per row."""
    s = tempered(logits, temperature)
    keep = kept_mask(s, top_k, top_p, min_p)
    m = jnp.max(s, axis=-1, keepdims=True)
    e = jnp.where(keep, jnp.exp(s - m), jnp.zeros_like(s))
    probs = e / jnp.sum(e, axis=-1, keepdims=True)
    greedy = jax.nn.one_hot(jnp.argmax(s, axis=-1), s.shape[-1], dtype=s.dtype)
    return jnp.where((temperature > 0)[:, None], probs, greedy)
