"""Pallas kernel of the fused categorical sampler (row-resident variant).

One program takes ``block_r`` whole rows (vocabulary padded to a power of two with
``-inf``). It computes the tempered logits, the top-k and top-p thresholds by an
exact bisection over the order-preserving integer image of the float bit patterns
(32 counting passes for f32, 64 for f64; no sort), the min-p mask, the Gumbel-max
token over the kept set and the probability/entropy, and writes three numbers per
row. For threefry keys (the default) the Gumbel noise is hashed in the kernel from
the key and the flat element index, bit-identical to ``jax.random.gumbel`` (see
``_hash``), so the logits are the only (R, V) array read; otherwise (f64, other PRNG
implementations) the noise is generated outside and read as a second input.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from jaxkit._typing import accumulation_dtype
from jaxkit.kernels import _dispatch
from jaxkit.kernels.sampling import _fused, _hash
from jaxkit.kernels.sampling import _reference as ref

MAX_BLOCK_ELEMENTS = 1 << 16
"""Largest ``block_r * padded_vocab`` per program (else NotImplementedError)."""
GPU_ROW_ELEMENTS = 1 << 12
"""On GPU the default block is ``max(1, GPU_ROW_ELEMENTS // padded_vocab)`` rows: Triton
keeps a block in registers and unrolls each op over a thread's share of it (an H200 had
not compiled a 16 x 4096 block after 50 s), so a program takes one row from V = 4096 up."""


def _triton_params(block_elements: int, num_warps: int | None) -> pltriton.CompilerParams:
    """Explicit Triton parameters (whatever ``jax_pallas_use_mosaic_gpu`` says).

    Mosaic GPU refuses this kernel. By default about 16 elements of the block per thread,
    4 to 32 warps (8 at V = 4096, 32 at V = 32000). On an H200 the warp count moved the time
    less than run-to-run spread (256 x 32000: 0.43-0.60 ms at 32 warps, 0.61-0.65 at 16);
    the loops load nothing, so one stage.
    """
    if num_warps is None:
        num_warps = pl.next_power_of_2(min(32, max(4, block_elements // (32 * 16))))
    return pltriton.CompilerParams(num_warps=num_warps, num_stages=1)


def _kernel(
    x_ref,
    g_ref,
    t_ref,
    k_ref,
    p_ref,
    mp_ref,
    tok_ref,
    prob_ref,
    ent_ref,
    *,
    stats,
    hash_noise,
    vocab,
    plain,
):
    x = x_ref[...]
    if hash_noise:  # g_ref holds the threefry key words; noise of flat element r*V + c
        rows = jax.lax.broadcasted_iota(jnp.int32, x.shape, 0) + pl.program_id(0) * x.shape[0]
        flat = rows.astype(jnp.uint32) * np.uint32(vocab) + ref.column_index(x).astype(jnp.uint32)
        g = _hash.gumbel_f32(g_ref[0], g_ref[1], flat)
    else:
        g = g_ref[...]
    tok, prob, ent = _fused.sample_block(
        x, g, t_ref[...], k_ref[...], p_ref[...], mp_ref[...], stats=stats, vocab=vocab, plain=plain
    )
    tok_ref[...] = tok
    prob_ref[...] = prob.astype(prob_ref.dtype)
    ent_ref[...] = ent.astype(ent_ref.dtype)


def _pad_to(a: jax.Array, n: int, axis: int, value) -> jax.Array:
    extra = n - a.shape[axis]
    if extra == 0:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return jnp.pad(a, widths, constant_values=value)


def hash_noise_supported(key: jax.Array, dtype, size: int) -> bool:
    """Whether the kernel can make ``jax.random.gumbel(key, ...)``'s noise itself."""
    return (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        and str(jax.random.key_impl(key)) == "threefry2x32"
        and bool(jax.config.jax_threefry_partitionable)
        and accumulation_dtype(dtype) == jnp.float32
        and size < 2**32
    )


@functools.partial(
    jax.jit,
    static_argnames=("stats", "plain", "block_r", "interpret", "platform", "num_warps"),
)
def sample_rows_pallas(
    logits,
    noise,
    temperature,
    top_k,
    top_p,
    min_p,
    *,
    stats="sampled",
    plain=False,
    block_r=None,
    interpret=False,
    platform=None,
    num_warps=None,
):
    """Pallas twin of :func:`sample_rows_reference` (same arguments, same outputs).

    ``noise`` is either the ``(R, V)`` Gumbel noise, or the ``(2,)`` uint32 key data
    of a threefry key, in which case the kernel generates ``jax.random.gumbel(key,
    (R, V), f32)`` itself (bit-identical, see ``_hash``) and reads only the logits.
    ``plain``: every filter is off (see ``_fused.sample_block``). ``platform``: the
    backend compiled for (default ``jax.default_backend()``); on ``"gpu"`` / ``"cuda"``
    / ``"rocm"`` the kernel passes Triton compiler parameters and takes small blocks
    (:data:`GPU_ROW_ELEMENTS`). Tests set it to export the Triton lowering from a CPU.
    ``num_warps``: Triton's warps per program (default from the block size; tuning).
    """
    r, v = logits.shape
    mesh = jax.typeof(logits).sharding.mesh
    if any(a != jax.sharding.AxisType.Manual for a in mesh.axis_types):
        raise NotImplementedError(
            "The Pallas sampler is a per-device program; under a mesh with "
            f"{mesh.axis_types} axes call `sample_tokens` inside `jax.shard_map` "
            "(rows are independent), or use implementation='xla'."
        )
    vp = pl.next_power_of_2(v)
    backend = jax.default_backend() if platform is None else platform
    gpu = backend in _dispatch.GPU_PLATFORMS and not interpret
    if block_r is None:
        cap = max(1, GPU_ROW_ELEMENTS // vp) if gpu else 16
        block_r = max(1, min(pl.next_power_of_2(r), MAX_BLOCK_ELEMENTS // vp, cap))
    if block_r & (block_r - 1):
        raise NotImplementedError(f"`block_r` must be a power of two, got {block_r}.")
    if block_r * vp > MAX_BLOCK_ELEMENTS:
        raise NotImplementedError(
            f"Pallas sampler keeps whole rows on chip: block_r * padded vocab = "
            f"{block_r} * {vp} exceeds {MAX_BLOCK_ELEMENTS}; use implementation='xla'."
        )
    rp = pl.cdiv(r, block_r) * block_r
    cd = jnp.dtype(accumulation_dtype(logits.dtype))
    x = _pad_to(_pad_to(logits, vp, 1, -jnp.inf), rp, 0, 0)
    hash_noise = noise.ndim == 1
    if hash_noise:
        if noise.shape != (2,) or noise.dtype != jnp.uint32 or cd != jnp.float32:
            raise NotImplementedError("in-kernel noise needs threefry key data and f32.")
        g = noise
        g_spec = pl.BlockSpec((2,), lambda i: (0,))
    else:
        g = _pad_to(_pad_to(noise.astype(cd), vp, 1, 0), rp, 0, 0)
        g_spec = pl.BlockSpec((block_r, vp), lambda i: (i, 0))
    t = _pad_to(temperature.astype(cd), rp, 0, 1)
    k = _pad_to(top_k.astype(jnp.int32), rp, 0, 1)
    p = _pad_to(top_p.astype(cd), rp, 0, 1)
    mp = _pad_to(min_p.astype(cd), rp, 0, 0)
    # inside jax.shard_map the outputs vary over the same manual axes as the logits
    mat = getattr(jax.typeof(x), "manual_axis_type", None)
    row = pl.BlockSpec((block_r, vp), lambda i: (i, 0))
    vec = pl.BlockSpec((block_r,), lambda i: (i,))
    tok, prob, ent = pl.pallas_call(
        functools.partial(_kernel, stats=stats, hash_noise=hash_noise, vocab=v, plain=plain),
        out_shape=(
            jax.ShapeDtypeStruct((rp,), jnp.int32, manual_axis_type=mat),
            jax.ShapeDtypeStruct((rp,), cd, manual_axis_type=mat),
            jax.ShapeDtypeStruct((rp,), cd, manual_axis_type=mat),
        ),
        grid=(rp // block_r,),
        in_specs=[row, g_spec, vec, vec, vec, vec],
        out_specs=(vec, vec, vec),
        compiler_params=_triton_params(block_r * vp, num_warps) if gpu else None,
        interpret=interpret,
    )(x, g, t, k, p, mp)
    return ref.RowStats(tok[:r], prob[:r], ent[:r])
