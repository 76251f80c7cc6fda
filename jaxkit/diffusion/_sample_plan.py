"""Static planning of the MDLM sampler (host-side, before its compiled program runs).

The sizes of the ancestral sampler's compacted forwards and draw (:func:`_compact_sizes`),
the per-step masked fractions they come from (:func:`_still_masked`, cached per schedule
and T; :func:`_max_unmask_probability`) and whether the first row's forward may serve the
others (:func:`_shared`). Used by :mod:`jaxkit.diffusion._sample`, which re-exports them.
"""

import functools
import math

import jax


def _compact_sizes(schedule, order, num_steps, tokens) -> tuple[tuple[int, ...], int]:
    """Static sizes of the ancestral sampler's compacted forwards and draw (empty / 0: off).

    The sampler decides which slots a step unmasks before the forward (independently of
    the tokens), and only those slots' tokens are used. From an all-``[MASK]`` row of
    length ``L`` a slot is still masked at step ``k`` w.p. ``m_k`` and unmasked at it
    w.p. ``q_k = m_k - m_{k+1}`` (the last step takes the rest; less for infilling), so
    a row is needed w.p. ``f_k = 1 - (1 - q_k)^L``. When every row starts alike
    (:func:`_shared`), a row with nothing unmasked yet reads the first row's output, and
    only ``g_k = f_k - (m_k^L - m_{k+1}^L)`` of the rows need a forward.

    * ``rows``: block sizes for the forward, ascending: ``ceil(g_k B + 2 sd)`` per step,
      sizes within one ``sd`` of a larger one merged, at most three; each step runs the
      smallest block that holds its rows (more: all rows). Used when the largest,
      ``ceil(f B + 2 sd)`` (``f = max_k f_k``), is at most 0.8 B; below
      ``_MIN_LADDER_BATCH`` rows that one alone.
    * ``slots``: the tokens are drawn at ``ceil(q N + 3 sd)`` slots (``q = max_k q_k``,
      ``N = B L``); a step unmasking more draws at every slot. Used when that is at most
      N / 2.

    Both off outside the ancestral order and under explicit meshes.
    """
    b, length = tokens.shape
    if order != "ancestral" or not jax.typeof(tokens).sharding.mesh.empty:
        return (), 0
    m = _still_masked(schedule, num_steps)
    qs = [m[k] - m[k + 1] for k in range(num_steps)]
    q = max(qs)
    n = b * length
    slots = math.ceil(q * n + 3.0 * math.sqrt(n * q * (1.0 - q)))
    slots = slots if slots <= 0.5 * n else 0

    def bound(p):
        return math.ceil(p * b + 2.0 * math.sqrt(b * p * (1.0 - p))) if p > 0 else 0

    f = 1.0 - (1.0 - q) ** length
    rows = bound(f)
    if rows > 0.8 * b:
        return (), slots
    if b < _MIN_LADDER_BATCH:
        return (rows,), slots
    shared = _shared(tokens)
    per_step = set()
    for k in range(num_steps):
        g = 1.0 - (1.0 - qs[k]) ** length
        if shared:
            g -= m[k] ** length - m[k + 1] ** length
        per_step.add(min(bound(min(max(g, 0.0), 1.0)), rows))
    gap = max(1.0, math.sqrt(b * f * (1.0 - f)))
    sizes = [rows]
    for size in sorted(per_step - {0}, reverse=True):
        if sizes[-1] - size >= gap:
            sizes.append(size)
    sizes = sizes[::-1]
    if len(sizes) > _MAX_BLOCKS:  # the smallest, the largest and evenly between
        pick = (round(i * (len(sizes) - 1) / (_MAX_BLOCKS - 1)) for i in range(_MAX_BLOCKS))
        sizes = [sizes[i] for i in pick]
    return tuple(sizes), slots


_MAX_BLOCKS = 3  # compacted forward sizes per sampler (each one a compiled forward)
# Smaller batches keep one block: the extra blocks' compiles cost more than they save there
# (the TD3B example's quick mode, 64 rows: about 3 s more CPU for ~1 ms saved per call).
_MIN_LADDER_BATCH = 128


@functools.lru_cache(maxsize=64)
def _still_masked(schedule, num_steps: int) -> tuple[float, ...]:
    """``m_0 .. m_T`` of :func:`_compact_sizes` (host floats, cached per schedule and T).

    ``m_k = (1 - alpha(t_k)) / (1 - alpha(1))`` (``m_0 = 1``, ``m_T = 0``: the last step
    unmasks all), kept non-increasing. Evaluating the schedule takes a few dozen eager
    dispatches, a millisecond of host time that every :func:`sample` call paid before its
    compiled program ran.
    """
    with jax.ensure_compile_time_eval():  # host numbers, also under an outer jit
        a = [float(schedule.alpha(1.0 - k / num_steps)) for k in range(num_steps)]
        a1 = float(schedule.alpha(1.0))
    m = [1.0]
    for k in range(1, num_steps):
        m.append(min(max((1.0 - a[k]) / (1.0 - a1), 0.0), m[-1]))
    return (*m, 0.0)


def _max_unmask_probability(schedule, num_steps: int) -> float:
    """``max_k q_k`` of :func:`_compact_sizes`."""
    m = _still_masked(schedule, num_steps)
    return max(m[k] - m[k + 1] for k in range(num_steps))


def _shared(tokens) -> bool:
    """Whether one row's forward may serve the rows still at their common input.

    Unconditional sampling starts every row from the same all-``[MASK]`` input, so the
    first row's output serves every row at step 0 and each row with nothing unmasked yet
    later (the denoiser is a function of its input; a one-row forward may round
    differently from the batched one in the last bit). Off under explicit meshes and for
    one row.
    """
    return tokens.shape[0] > 1 and jax.typeof(tokens).sharding.mesh.empty
