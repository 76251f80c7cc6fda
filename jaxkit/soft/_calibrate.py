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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import _validate as V
from jaxkit._typing import KeyArray

OPS = ("rank", "sort")
PROBE_ELEMENTS = 32768  # probe rows x n (at least 4 rows)
MAX_BISECTIONS = 60


def _probe(n: int, key: Any) -> np.ndarray:
    """The standard-normal probe ``(max(4, 32768 // n), n)`` (float32) drawn from ``key``."""
    rows = max(4, -(-PROBE_ELEMENTS // n))
    return np.asarray(jax.random.normal(key, (rows, n), jnp.float32))


@functools.partial(jax.jit, static_argnames=("method", "mode", "op", "options"))
def _error(x, hard, s, *, method, mode, op, options):
    from jaxkit import soft as S  # circular at import time

    fn = S.rank if op == "rank" else S.sort
    return jnp.mean(jnp.abs(fn(x, softness=s, mode=mode, method=method, **dict(options)) - hard))


def error_fn(method: str, n: int, *, key: Any, mode: str = "smooth", op: str = "rank", **options):
    """``softness -> mean |op(probe) - hard op(probe)|`` on the probe of ``key`` (jitted)."""
    x = jnp.asarray(_probe(n, key))
    if op == "rank":
        hard = (jnp.argsort(jnp.argsort(x, axis=-1), axis=-1) + 1).astype(x.dtype)
    else:
        hard = jnp.sort(x, axis=-1)
    opts = tuple(sorted(options.items()))

    def f(s: float) -> float:
        e = _error(
            x, hard, jnp.asarray(s, jnp.float32), method=method, mode=mode, op=op, options=opts
        )
        return float(e)

    return f


class _Key:
    """A PRNG key (typed or legacy) hashed by its bits, for the result cache."""

    def __init__(self, key: Any):
        V.is_key(key)
        typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        bits = np.asarray(jax.random.key_data(key) if typed else key).ravel()
        self.key = key
        self.id = (str(jax.random.key_impl(key)) if typed else "legacy", tuple(bits.tolist()))

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and other.id == self.id


@functools.lru_cache(maxsize=256)
def _calibrate(method, n, target, mode, op, key, rtol, options):
    f = error_fn(method, n, key=key.key, mode=mode, op=op, **dict(options))
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
    key: KeyArray | None = None,
    rtol: float = 0.005,
    **options,
) -> float:
    """Softness at which ``method`` has mean absolute error ``target_rank_error``.

    Bisection in log softness on a fixed standard-normal probe (``max(4, 32768 // n)``
    rows of length ``n``, drawn from ``key``): the mean absolute
    error of the soft rank against the hard rank (``op="rank"``, in ranks) or of the soft
    sort against the hard sort (``op="sort"``, in value units of unit-variance data)
    is brought within ``rtol`` (relative) of the target. The error is assumed to
    increase with softness (true for every method here up to float32 noise).

    This is a host utility, not a traced operator: it runs one module-level jitted error
    function a few dozen times on the host (bisection in Python) and returns a Python
    float; it is deterministic and cached per argument set (``functools.lru_cache``), and
    it is meant to be called once outside ``jit`` (its result is then a constant softness
    for the traced operator). It cannot be called under ``jit``.

    Args:
      method: any ``method`` of :func:`jaxkit.soft.rank` (``"pav"``, ``"softsort"``,
        ``"neuralsort"``, ``"network"``, ``"ot"`` and aliases).
      n: length of the sorted axis (static int >= 2).
      target_rank_error: target mean absolute error (> 0).
      mode: the operator's ``mode``.
      op: ``"rank"`` (default) or ``"sort"``.
      key: keyword-only PRNG key of the probe (typed ``jax.random.key`` or legacy);
        ``None`` means ``jax.random.key(0)``.
      rtol: relative tolerance on the error at the returned softness.
      **options: further static keyword arguments of the operator (``window``,
        ``abs_mode``, ``network``, ``standardize``, ``solver``).

    Returns:
      The softness (a Python float).

    Raises:
      ValueError: for ``target_rank_error <= 0``, an unknown method/mode/op, ``n < 2``, or
        a target not reached for softness in [1e-25, 1e24].

    References:
      Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
    """
    from jaxkit.soft import _axis_front as AF

    V.one_of(OPS, op=op)
    n = V.python_int(n, name="n", minimum=2)
    V.real(target_rank_error, name="target_rank_error")
    V.real(rtol, name="rtol")
    V.finite_scalar(target_rank_error=target_rank_error)
    V.positive(target_rank_error=target_rank_error)
    V.positive(rtol=rtol)
    known = ("standardize", "gated_grad", "abs_mode", "network", "solver", "window", "ot_kwargs")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(
            f"calibrate() got unexpected keyword argument(s) {unknown}; the operator options "
            f"are {list(known)}."
        )
    AF.options(AF.VALUE_METHODS, method=method, mode=mode, **options)
    if mode == "hard":
        raise ValueError("`mode` must be a soft mode for calibration; got mode='hard'.")
    opts = tuple(sorted(options.items()))
    key = jax.random.key(0) if key is None else key
    if isinstance(key, jax.core.Tracer):
        raise TypeError("`key` must be concrete: `calibrate` is a host utility (not for jit).")
    s = _calibrate(method, n, float(target_rank_error), mode, op, _Key(key), float(rtol), opts)
    if not math.isfinite(s):
        raise ValueError("calibration failed to produce a finite softness.")
    return s
