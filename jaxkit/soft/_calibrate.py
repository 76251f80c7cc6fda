"""Softness calibration: the softness whose expected rank error is a given target.

A single nominal ``softness`` means very different blur per method (at 0.1 and
n = 1000 the rank MAE of PAV is 0.065 ranks, of NeuralSort 1 rank, of SoftSort 50),
and pairwise methods' error grows with n at fixed softness. :func:`calibrate` turns
"expected absolute rank error 0.5" into a method-specific softness.

References:
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
  Blondel et al., Fast differentiable sorting and ranking
  <https://arxiv.org/abs/2002.08871>, 2020.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import _validate as V

OPS = ("rank", "sort")
PROBE_ELEMENTS = 32768  # probe rows x n (at least 4 rows)
MAX_BISECTIONS = 60


def _probe(n: int, seed: int) -> np.ndarray:
    rows = max(4, -(-PROBE_ELEMENTS // n))
    return np.random.default_rng(seed).standard_normal((rows, n)).astype(np.float32)


def error_fn(
    method: str, n: int, *, mode: str = "smooth", op: str = "rank", seed: int = 0, **options
):
    """``softness -> mean |op(probe) - hard op(probe)|`` on the fixed probe (jitted)."""
    from jaxkit import soft as S  # circular at import time

    x = jnp.asarray(_probe(n, seed))
    if op == "rank":
        hard = (jnp.argsort(jnp.argsort(x, axis=-1), axis=-1) + 1).astype(x.dtype)
    else:
        hard = jnp.sort(x, axis=-1)

    @jax.jit
    def err(s):
        fn = S.rank if op == "rank" else S.sort
        return jnp.mean(jnp.abs(fn(x, softness=s, mode=mode, method=method, **options) - hard))

    def f(s: float) -> float:
        return float(err(jnp.asarray(s, jnp.float32)))

    return f


@functools.lru_cache(maxsize=256)
def _calibrate(method, n, target, mode, op, seed, rtol, options):
    f = error_fn(method, n, mode=mode, op=op, seed=seed, **dict(options))
    lo = -3.0  # log10 softness; lowered until the error is below the target
    flo = f(10.0**lo)
    while flo > target and lo > -24.0:
        lo -= 2.0
        flo = f(10.0**lo)
    hi, fhi = lo, flo  # then raised one decade at a time: the first crossing (banded
    while fhi < target and hi < 24.0:  # rows' error falls again at huge softness)
        lo, flo = hi, fhi
        hi += 1.0
        fhi = f(10.0**hi)
    if not (flo <= target <= fhi):
        raise ValueError(
            f"`target_rank_error`={target} is not reachable for method={method!r}, "
            f"mode={mode!r}, n={n}: the error at softness 1e{lo:g} is {flo:.3g}, "
            f"at 1e{hi:g} {fhi:.3g}."
        )
    for _ in range(MAX_BISECTIONS):
        mid = 0.5 * (lo + hi)
        fm = f(10.0**mid)
        if abs(fm - target) <= rtol * target or hi - lo < 1e-7:
            return 10.0**mid
        if fm < target:
            lo = mid
        else:
            hi = mid
    return 10.0 ** (0.5 * (lo + hi))


def calibrate(
    method: str,
    n: int,
    target_rank_error: float = 0.5,
    *,
    mode: str = "smooth",
    op: str = "rank",
    seed: int = 0,
    rtol: float = 0.005,
    **options,
) -> float:
    """Softness at which ``method`` has mean absolute error ``target_rank_error``.

    Bisection in log softness on a fixed standard-normal probe (``max(4, 32768 // n)``
    rows of length ``n``, from ``numpy.random.default_rng(seed)``): the mean absolute
    error of the soft rank against the hard rank (``op="rank"``, in ranks) or of the soft
    sort against the hard sort (``op="sort"``, in value units of unit-variance data)
    is brought within ``rtol`` (relative) of the target. The error is assumed to
    increase with softness (true for every method here up to float32 noise).

    This runs a small jitted computation *eagerly* (a few dozen evaluations of the
    operator on the probe) and returns a Python float; it is deterministic and cached
    per argument set (``functools.lru_cache``), and it is meant to be called once
    outside ``jit`` (its result is then a constant softness for the traced operator).

    Args:
      method: any ``method`` of :func:`jaxkit.soft.rank` (``"pav"``, ``"softsort"``,
        ``"neuralsort"``, ``"network"``, ``"ot"`` and aliases).
      n: length of the sorted axis (static int >= 2).
      target_rank_error: target mean absolute error (> 0).
      mode: the operator's ``mode``.
      op: ``"rank"`` (default) or ``"sort"``.
      seed: probe seed.
      rtol: relative tolerance on the error at the returned softness.
      **options: further static keyword arguments of the operator (``window``,
        ``abs_mode``, ``network``, ``standardize``, ``impl``).

    Returns:
      The softness (a Python float).

    Raises:
      ValueError: for ``target_rank_error <= 0``, an unknown method/mode/op, ``n < 2``, or
        a target not reached for softness in [1e-25, 1e24].

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    from jaxkit.soft import _axiswise as AX

    AX._method(method, AX.VALUE_METHODS)
    V.one_of(OPS, op=op)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"`n` must be an int >= 2, got n={n!r}.")
    V.finite_scalar(target_rank_error=target_rank_error)
    V.positive(target_rank_error=target_rank_error)
    V.positive(rtol=rtol)
    AX._check_common(
        mode,
        AX._method(method, AX.VALUE_METHODS),
        0.1,
        options.get("network", "bitonic"),
        options.get("abs_mode", "hard"),
        options.get("impl", "hybrid"),
    )
    if mode == "hard":
        raise ValueError("`mode` must be a soft mode for calibration; got mode='hard'.")
    opts = tuple(sorted(options.items()))
    s = _calibrate(method, n, float(target_rank_error), mode, op, int(seed), float(rtol), opts)
    if not math.isfinite(s):
        raise ValueError("calibration failed to produce a finite softness.")
    return s
