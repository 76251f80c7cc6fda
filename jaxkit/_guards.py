"""Traced-value guards: checks whose result must be used, eagerly and under ``jit``.

:func:`error_if` (a thin wrapper of ``eqx.error_if``), the jitted predicates it is fed
(:func:`any_outside`, :func:`any_nonfinite`, :func:`any_nonfinite_where`), the guards built
on them (:func:`ids_in`, :func:`all_finite`, ``guard_positive``, ``guard_finite``,
``guard_non_negative``, ``guard_interval``), and what they share with the static checks of
:mod:`jaxkit._validate`: :func:`real` / :func:`real_array` (a value's type check) and the
private helpers ``_concrete``, ``_dtype``, ``_show``. This module imports nothing from
jaxkit; :mod:`jaxkit._validate` re-exports every name here, and callers use them from there
(``_validate.error_if(...)``, ``_validate.guard_positive(...)``).
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def _concrete(value: Any) -> np.ndarray | None:
    """Return ``value`` as a NumPy array if it is concrete, else ``None``."""
    if isinstance(value, jax.core.Tracer):
        return None
    try:
        return np.asarray(value)
    except (TypeError, jax.errors.ConcretizationTypeError):
        return None


def _dtype(x: Any, *, name: str, what: str) -> Any:
    """``x``'s dtype, or a ``TypeError`` naming ``name`` for what JAX cannot type.

    ``jnp.result_type`` parses ``"0.1"`` as a dtype name (its error names no argument), takes
    ``"float32"`` for a dtype and ``None`` for float32; a list or an object gives JAX's own
    message, which names no argument either.
    """
    hint = " (pass an array: jax.numpy functions take no lists)" if isinstance(x, list) else ""
    bad = TypeError(f"`{name}` must be {what}, got {type(x).__name__} {x!r:.80}{hint}.")
    if x is None or isinstance(x, str | bytes):
        raise bad
    try:
        return jnp.result_type(x)
    except TypeError:
        raise bad from None


def _show(value: Any) -> str:
    if isinstance(value, jax.core.Tracer):
        return "(traced)"
    v = _concrete(value)
    if v is None:
        return repr(value)
    if v.ndim == 0:
        return repr(v.item())
    return f"array of shape {v.shape}"


def error_if(x: Any, pred: Any, msg: str) -> Any:
    """Return ``x`` with a runtime check that raises ``msg`` where ``pred`` is True.

    Concrete predicates raise ``ValueError`` right away; traced ones use
    ``eqx.error_if`` (a runtime error under ``jit``). Always use the result.
    """
    p = _concrete(pred)
    if p is not None and not isinstance(x, jax.core.Tracer):
        if np.any(p):
            raise ValueError(msg)
        return x
    return eqx.error_if(x, pred, msg)


# Range predicates are jitted like jax.numpy (bounds traced): eagerly, a check is one
# program per shape and dtype instead of one per comparison, ``|`` and ``any``.
@jax.jit
def any_outside(x: Any, lo: Any, hi: Any) -> Any:
    """Whether any entry of ``x`` lies outside ``[lo, hi]`` (NaN entries do not count)."""
    return jnp.any((x < lo) | (x > hi))


def ids_in(x: Any, n: Any, *, name: str, lo: int = 0) -> Any:
    """``x`` with a check that its integers lie in ``[lo, n)`` (:func:`error_if`; use it)."""
    return error_if(x, any_outside(x, lo, n - 1), f"`{name}` must lie in [{lo}, {n}).")


@jax.jit
def any_nonfinite(x: Any) -> Any:
    """Whether any entry of ``x`` is NaN or infinite (jitted as :func:`any_outside` is)."""
    return ~jnp.all(jnp.isfinite(x))


@jax.jit
def any_nonfinite_where(x: Any, where: Any) -> Any:
    """Whether any entry of ``x`` where ``where`` (broadcast) is NaN or infinite."""
    return jnp.any(~jnp.isfinite(x) & where)


def all_finite(x: Any, *, name: str) -> Any:
    """Return ``x`` guarded so that a NaN or inf in it raises, naming ``name``."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return error_if(x, any_nonfinite(x), f"`{name}` must be finite (no NaN or inf).")


def real(value: Any, *, name: str) -> None:
    """Check ``value`` is a real (integer or floating) number or array: not a str/None/bool.

    A continuous hyperparameter's type check (its value: :func:`positive`,
    :func:`finite_scalar`, the ``guard_*`` helpers) and a data array's (weights, a
    histogram) alike; :func:`floating` where integers are not meant.
    """
    what = "a real number or array"
    if isinstance(value, bool):  # jnp.result_type would take it for a bool dtype
        raise TypeError(f"`{name}` must be {what}, got {type(value).__name__} {value!r}.")
    dt = _dtype(value, name=name, what=what)  # str, None, a list, an object: named
    if not (jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.integer)):
        raise TypeError(f"`{name}` must be a real number or array, got dtype {dt}.")


def real_array(value: Any, *, name: str, dtype: Any = None) -> Any:
    """``jnp.asarray(value, dtype)`` after :func:`real`, so a bad type names ``name``.

    JAX's own error for a string, ``None`` or a list would not name the argument. The usual
    first argument of the ``guard_*`` helpers below:
    ``guard_positive(real_array(tau, name="tau"), tau, name="tau")``.
    """
    real(value, name=name)
    return jnp.asarray(value, dtype)


def guard_positive(x: Any, value: Any, *, name: str) -> Any:
    """Return ``x`` guarded so that ``value`` must be finite and > 0, eagerly or traced.

    The concrete case raises ``ValueError`` at once; a traced ``value`` gets an
    ``eqx.error_if`` (NaN fails too: the predicate is ``~(value > 0)``, not
    ``value <= 0``, because NaN compares False). Always use the result.
    """
    real(value, name=name)
    v = jnp.asarray(value)
    bad = ~jnp.all((v > 0) & jnp.isfinite(v))
    return error_if(x, bad, f"`{name}` must be finite and > 0, got {name}={_show(value)}.")


def guard_finite(x: Any, value: Any, *, name: str) -> Any:
    """Return ``x`` guarded so that ``value`` (a scalar or array) must be finite (no NaN/inf).

    Eagerly a ``ValueError``; traced, an ``eqx.error_if`` under ``jit``. Always use the result.
    A concrete ``value`` is checked on the host and adds nothing to a traced program (``x``
    may then be a Python number, e.g. under ``eval_shape``).
    """
    real(value, name=name)
    msg = f"`{name}` must be finite, got {name}={_show(value)}."
    v = _concrete(value)
    if v is not None:
        if not np.all(np.isfinite(v)):
            raise ValueError(msg)
        return x
    return error_if(x, any_nonfinite(value), msg)


def guard_non_negative(x: Any, value: Any, *, name: str, allow_inf: bool = False) -> Any:
    """Return ``x`` guarded so that ``value`` must be >= 0 (and finite unless ``allow_inf``)."""
    real(value, name=name)
    v = jnp.asarray(value)
    ok = v >= 0
    if not allow_inf:
        ok = ok & jnp.isfinite(v)
    req = ">= 0" if allow_inf else "finite and >= 0"
    return error_if(x, ~jnp.all(ok), f"`{name}` must be {req}, got {name}={_show(value)}.")


def guard_interval(
    x: Any, value: Any, *, name: str, low: float, high: float, closed: str = "both"
) -> Any:
    """Return ``x`` guarded so that ``low <= value <= high`` (``closed`` as :func:`in_interval`).

    NaN fails the check; works eagerly (``ValueError``) and under ``jit`` (``eqx.error_if``).
    """
    real(value, name=name)
    v = jnp.asarray(value)
    lo = v >= low if closed in ("both", "left") else v > low
    hi = v <= high if closed in ("both", "right") else v < high
    lb = "[" if closed in ("both", "left") else "("
    rb = "]" if closed in ("both", "right") else ")"
    return error_if(
        x,
        ~jnp.all(lo & hi),
        f"`{name}` must lie in {lb}{low}, {high}{rb}, got {name}={_show(value)}.",
    )
