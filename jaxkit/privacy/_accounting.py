"""Privacy accounting for Poisson-subsampled Gaussian DP-SGD (dp-accounting).

PRISM releases each step through the subsampled Gaussian mechanism in the
``r (m + n - r)`` tangent coordinates with sensitivity ``C`` and noise ``sigma C``,
so the accounting is exactly DP-SGD's (Python-side, not jitted).

References:
  Google dp-accounting (RDP: Mironov 2017; PLD: Koskela et al. 2020; Doroshenko
  et al. 2022).
"""

import math

from jaxkit import _validate
from jaxkit._extras import require

_ACCOUNTANTS = ("rdp", "pld")


def _dp_accounting():
    """Import ``dp_accounting`` (the ``privacy`` extra), or raise an ``ImportError`` naming it."""
    return require("dp_accounting", extra="privacy", what="privacy accounting needs dp-accounting")


def _check(*, q: float, steps: int, delta: float, accountant: str) -> None:
    _validate.one_of(_ACCOUNTANTS, accountant=accountant)
    _validate.in_interval(low=0.0, high=1.0, closed="right", q=q)
    _validate.python_int(steps, name="steps", minimum=1)
    _validate.in_interval(low=0.0, high=1.0, closed="neither", delta=delta)


def _event(q: float, sigma: float, steps: int):
    dp_accounting = _dp_accounting()

    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


def _accountant(name: str):
    dp_accounting = _dp_accounting()

    if name == "rdp":
        return dp_accounting.rdp.RdpAccountant()
    return dp_accounting.pld.PLDAccountant()


def epsilon(
    *,
    q: float,
    noise_multiplier: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
) -> float:
    """``epsilon`` of ``steps`` Poisson-sampled Gaussian steps at the given ``delta``.

    Args:
      q: Sampling rate in ``(0, 1]``.
      noise_multiplier: ``sigma`` (> 0; 0 gives ``inf``).
      steps: Number of steps.
      delta: Target ``delta`` in ``(0, 1)``.
      accountant: ``'rdp'`` or ``'pld'``.

    Returns:
      The (upper bound on) ``epsilon``.

    Raises:
      ImportError: Without dp-accounting (``pip install 'jaxkit[privacy]'``).
      TypeError: If ``steps`` is not a Python int.
      ValueError: For values out of range (naming the argument).

    Example:
      >>> round(epsilon(q=64 / 10000, noise_multiplier=1.0, steps=500, delta=1e-5), 2)
      1.22
    """
    _check(q=q, steps=steps, delta=delta, accountant=accountant)
    _validate.non_negative(noise_multiplier=noise_multiplier)
    if noise_multiplier == 0:
        return math.inf
    acc = _accountant(accountant)
    acc.compose(_event(float(q), float(noise_multiplier), steps))
    return float(acc.get_epsilon(float(delta)))


def calibrate_sigma(
    *,
    epsilon: float,
    delta: float,
    q: float,
    steps: int,
    accountant: str = "rdp",
    max_sigma: float = 500.0,
) -> float:
    """Smallest noise multiplier reaching ``(epsilon, delta)`` after ``steps`` steps.

    Args:
      epsilon: Target ``epsilon`` (> 0).
      delta: Target ``delta`` in ``(0, 1)``.
      q: Sampling rate in ``(0, 1]``.
      steps: Number of steps.
      accountant: ``'rdp'`` (fast; the default) or ``'pld'`` (tighter, slower).
      max_sigma: Upper end of the search bracket.

    Returns:
      ``sigma`` with ``epsilon(sigma) <= epsilon``.

    Raises:
      ImportError: Without dp-accounting (``pip install 'jaxkit[privacy]'``).
      ValueError: For ``epsilon <= 0``, ``delta`` outside ``(0, 1)``, bad ``q`` or
        ``steps``, or a target that ``sigma <= max_sigma`` cannot reach.

    Example:
      >>> round(calibrate_sigma(epsilon=6.0, delta=1e-5, q=64 / 10000, steps=500), 2)
      0.57
    """
    dp_accounting = _dp_accounting()

    _validate.positive(epsilon=epsilon)
    _check(q=q, steps=steps, delta=delta, accountant=accountant)
    _validate.positive(max_sigma=max_sigma)
    eps_hi = _eps_or_inf(max_sigma, q, steps, delta, accountant)
    if not eps_hi <= epsilon:
        raise ValueError(
            f"`epsilon`={epsilon} is not reachable at `delta`={delta} with q={q}, "
            f"steps={steps}: even sigma={max_sigma} gives epsilon={eps_hi:.4g}."
        )
    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: _accountant(accountant),
            lambda s: _event(float(q), float(s), steps),
            float(epsilon),
            float(delta),
            bracket_interval=dp_accounting.ExplicitBracketInterval(1e-3, float(max_sigma)),
            tol=1e-4,
        )
    )


def _eps_or_inf(sigma, q, steps, delta, accountant):
    try:
        return epsilon(q=q, noise_multiplier=sigma, steps=steps, delta=delta, accountant=accountant)
    except (ValueError, OverflowError):
        return math.inf
