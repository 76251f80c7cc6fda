"""Uniform argument checks and messages.

Static problems (shape, rank, dtype, concrete hyperparameter values, static
options) raise at trace time: ``TypeError`` for shape/rank/dtype and an option of the
wrong type, ``ValueError`` for values and unknown options, each message naming the
argument in backticks, the requirement and what was received. Problems inside traced
values go through :func:`error_if`, a thin wrapper of ``eqx.error_if`` whose result must
be used. Checks on hyperparameters are skipped for tracers (they cannot be inspected at
trace time); use :func:`error_if` when a traced bad value would silently give a wrong
result.

The traced-value guards (:func:`error_if`, :func:`any_outside`, :func:`ids_in`,
:func:`any_nonfinite`, :func:`any_nonfinite_where`, :func:`all_finite`, ``guard_*``),
:func:`real` / :func:`real_array` and the private helpers both modules use (``_concrete``,
``_dtype``, ``_show``) live in :mod:`jaxkit._guards`; they are re-exported here, so callers
keep ``_validate.error_if`` etc. This module holds the static (trace-time) checks.
"""

from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit._guards import _concrete as _concrete
from jaxkit._guards import _dtype as _dtype
from jaxkit._guards import _show as _show
from jaxkit._guards import all_finite as all_finite
from jaxkit._guards import any_nonfinite as any_nonfinite
from jaxkit._guards import any_nonfinite_where as any_nonfinite_where
from jaxkit._guards import any_outside as any_outside
from jaxkit._guards import error_if as error_if
from jaxkit._guards import guard_finite as guard_finite
from jaxkit._guards import guard_interval as guard_interval
from jaxkit._guards import guard_non_negative as guard_non_negative
from jaxkit._guards import guard_positive as guard_positive
from jaxkit._guards import ids_in as ids_in
from jaxkit._guards import real as real
from jaxkit._guards import real_array as real_array


def _one(kwargs: dict[str, Any]) -> tuple[str, Any]:
    if len(kwargs) != 1:
        raise AssertionError("pass exactly one name=value pair")  # jaxkit bug
    return next(iter(kwargs.items()))


def _real(name: str, value: Any) -> np.ndarray | None:
    """:func:`_concrete` of a real (integer or floating) value; other dtypes name ``name``.

    NumPy compares a string such as ``"0.1"`` with a number by a ufunc error that names no
    argument, and a bool passes ``> 0``; both are a ``TypeError`` here.
    """
    v = _concrete(value)
    if v is not None and v.dtype.kind not in "iuf":
        raise TypeError(
            f"`{name}` must be a real number or array, got {type(value).__name__} {value!r:.80}."
        )
    return v


def positive(**kwargs: Any) -> None:
    """Check ``name=value`` is > 0 when concrete (e.g. ``positive(softness=s)``)."""
    name, value = _one(kwargs)
    v = _real(name, value)
    if v is not None and (v.size == 0 or not np.all(v > 0)):
        raise ValueError(f"`{name}` must be > 0, got {name}={_show(value)}.")


def non_negative(**kwargs: Any) -> None:
    """Check ``name=value`` is >= 0 when concrete."""
    name, value = _one(kwargs)
    v = _real(name, value)
    if v is not None and (v.size == 0 or not np.all(v >= 0)):
        raise ValueError(f"`{name}` must be >= 0, got {name}={_show(value)}.")


def in_interval(
    *, low: float | int, high: float | int, closed: str = "both", **kwargs: Any
) -> None:
    """Check ``low <= value <= high`` (``closed`` in 'both', 'left', 'right', 'neither')."""
    name, value = _one(kwargs)
    v = _real(name, value)
    if v is None:
        return
    lo_ok = v >= low if closed in ("both", "left") else v > low
    hi_ok = v <= high if closed in ("both", "right") else v < high
    if v.size == 0 or not (np.all(lo_ok) and np.all(hi_ok)):
        lb = "[" if closed in ("both", "left") else "("
        rb = "]" if closed in ("both", "right") else ")"
        raise ValueError(f"`{name}` must lie in {lb}{low}, {high}{rb}, got {name}={_show(value)}.")


def finite_scalar(**kwargs: Any) -> None:
    """Check a concrete hyperparameter is a finite scalar."""
    name, value = _one(kwargs)
    real(value, name=name)
    if jnp.ndim(value) != 0:
        raise TypeError(f"`{name}` must be a scalar, got shape {jnp.shape(value)}.")
    v = _concrete(value)
    if v is not None and not np.isfinite(v):
        raise ValueError(f"`{name}` must be finite, got {name}={_show(value)}.")


def _option_kind(value: Any) -> type:
    """The kind :func:`one_of` compares types by: str, bool, int (NumPy's too) or the type."""
    if isinstance(value, bool | np.bool_):
        return bool
    if isinstance(value, int | np.integer):
        return int
    return str if isinstance(value, str) else type(value)


def one_of(options: Iterable[Any], **kwargs: Any) -> None:
    """Check a static option is one of ``options``.

    A value of a kind no option has (``3`` for a string option, a string for an integer
    one, an array) raises ``TypeError``; a value of the right kind that is not listed,
    ``ValueError``. Both name the argument and list the options.
    """
    name, value = _one(kwargs)
    options = tuple(options)
    listed = ", ".join(repr(o) for o in options)
    if _option_kind(value) not in {_option_kind(o) for o in options}:
        raise TypeError(
            f"`{name}` must be one of {listed}; got {type(value).__name__} {value!r:.80}."
        )
    if value not in options:
        shown = value.item() if isinstance(value, np.generic) else value
        raise ValueError(f"`{name}` must be one of {listed}; got {shown!r}.")


def ndim(x: Any, expected: int | Sequence[int], *, name: str) -> None:
    """Check the rank of ``x`` (an int or a collection of allowed ranks)."""
    allowed = (expected,) if isinstance(expected, int) else tuple(expected)
    if jnp.ndim(x) not in allowed:
        want = allowed[0] if len(allowed) == 1 else f"one of {allowed}"
        raise TypeError(f"`{name}` must have rank {want}, got shape {jnp.shape(x)}.")


def min_ndim(x: Any, expected: int, *, name: str) -> None:
    """Check ``x`` has at least ``expected`` dimensions."""
    if jnp.ndim(x) < expected:
        raise TypeError(
            f"`{name}` must have at least {expected} dimension(s), got shape {jnp.shape(x)}."
        )


def shape(x: Any, expected: Sequence[int | None], *, name: str) -> None:
    """Check ``x.shape`` against ``expected`` (``None`` matches any size)."""
    got = tuple(jnp.shape(x))
    ok = len(got) == len(expected) and all(
        e is None or e == g for e, g in zip(expected, got, strict=True)
    )
    if not ok:
        want = "(" + ", ".join("*" if e is None else str(e) for e in expected) + ")"
        raise TypeError(f"`{name}` must have shape {want}, got shape {got}.")


def nonempty(x: Any, *, name: str, axis: int = 0, what: str = "sample") -> None:
    """Check ``x`` holds at least one ``what`` along ``axis``: a shape error naming ``name``.

    A mean over an empty batch (``axis=0``) or over no feature (``axis=-1``) is NaN.
    """
    shape = jnp.shape(x)
    if len(shape) == 0 or shape[axis] == 0:
        where = {0: "leading axis", -1: "last axis"}.get(axis, f"axis {axis}")
        raise TypeError(
            f"`{name}` must hold at least one {what} on its {where}, got shape {shape}."
        )


def same_shape(**kwargs: Any) -> None:
    """Check every ``name=array`` has the same shape."""
    items = list(kwargs.items())
    (n0, a0), rest = items[0], items[1:]
    for n, a in rest:
        if jnp.shape(a) != jnp.shape(a0):
            raise TypeError(
                f"`{n}` and `{n0}` must have the same shape, got {jnp.shape(a)} and "
                f"{jnp.shape(a0)}."
            )


def broadcastable(**arrays: Any) -> None:
    """Check the ``name=array`` shapes broadcast together: else a ``TypeError`` naming each.

    JAX's own error (``Incompatible shapes for broadcasting``) names no argument.
    """
    shapes = {n: jnp.shape(a) for n, a in arrays.items()}
    try:
        jnp.broadcast_shapes(*shapes.values())
    except ValueError:
        got = ", ".join(f"`{n}` {s}" for n, s in shapes.items())
        raise TypeError(f"The shapes must broadcast together, got {got}.") from None


def floating(x: Any, *, name: str) -> None:
    """Check ``x`` has a floating dtype."""
    dt = _dtype(x, name=name, what="a floating array")
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"`{name}` must be a floating array, got dtype {dt}.")


def floating_pair(a: Any, b: Any, *, names: tuple[str, str], rank: int) -> None:
    """Check two floating arrays: ``a`` of rank >= ``rank`` and ``b`` of ``a``'s shape."""
    floating(a, name=names[0])
    floating(b, name=names[1])
    min_ndim(a, rank, name=names[0])
    same_shape(**{names[1]: b, names[0]: a})


def boolean(x: Any, *, name: str) -> None:
    """Check ``x`` has a bool dtype (a mask)."""
    dt = _dtype(x, name=name, what="a bool array")
    if dt != jnp.bool_:
        raise TypeError(f"`{name}` must be a bool array, got dtype {dt}.")


def integer(x: Any, *, name: str) -> None:
    """Check ``x`` has an integer dtype."""
    dt = _dtype(x, name=name, what="an integer array")
    if not jnp.issubdtype(dt, jnp.integer):
        raise TypeError(f"`{name}` must be an integer array, got dtype {dt}.")


def numeric(**kwargs: Any) -> None:
    """Check each ``name=value`` is a numeric or bool array (or scalar): else a ``TypeError``.

    JAX's own error for a string, ``None`` or an object names no argument (under ``jit``, a
    private function). Reads only the dtype, so tracers pass.
    """
    for name, x in kwargs.items():
        dt = _dtype(x, name=name, what="a numeric array")
        if not (jnp.issubdtype(dt, jnp.number) or jnp.issubdtype(dt, jnp.bool_)):
            raise TypeError(f"`{name}` must be a numeric array, got dtype {dt}.")


def host_real(x: Any, *, name: str, what: str = "a real array") -> np.ndarray:
    """``x`` as a NumPy float64 array on the host; a ``TypeError`` naming ``name`` otherwise.

    NumPy's own error for a string (``could not convert string to float``) is a ValueError
    naming nothing. A list of numbers is taken (host data, as NumPy takes it).
    """
    a = np.asarray(x) if not isinstance(x, str | bytes) else None
    if a is None or a.dtype.kind not in "biuf":
        raise TypeError(f"`{name}` must be {what}, got {type(x).__name__} {x!r:.80}.")
    return a.astype(np.float64)


def leaves(
    tree: Any, *, name: str, inexact: bool = False, batch: bool = False, keys: bool = False
) -> list:
    """The leaves of a pytree argument, each checked; a ``TypeError`` naming ``name``.

    Every leaf must be a numeric or bool array (``inexact``: floating or complex, what
    ``jax.grad`` differentiates; ``keys``: a typed PRNG key is taken too); with ``batch``,
    at least one leaf and every leaf of rank >= 1 with one leading (batch) size. Other axes
    are the user's function's business. Reads only dtypes and shapes, so tracers pass.
    """
    out = jax.tree.leaves(tree)
    what = "floating arrays" if inexact else "numeric arrays"
    if batch and not out:
        raise TypeError(f"`{name}` must hold at least one array, got {tree!r:.80}.")
    for leaf in out:
        dt = _dtype(leaf, name=name, what=f"a pytree of {what}")
        ok = (
            jnp.issubdtype(dt, jnp.inexact)
            if inexact
            else (jnp.issubdtype(dt, jnp.number) or jnp.issubdtype(dt, jnp.bool_))
        )
        if not ok and not (keys and jnp.issubdtype(dt, jax.dtypes.extended)):
            raise TypeError(f"`{name}` leaves must be {what}, got dtype {dt}.")
        if batch and (jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != jnp.shape(out[0])[0]):
            raise TypeError(
                f"`{name}` leaves must share a leading batch axis, got shapes "
                f"{[jnp.shape(x) for x in out]}."
            )
    return out


def token_rows(
    tokens: Any, lengths: Any, *, name: str = "tokens", lengths_name: str = "prompt_len"
) -> None:
    """Check integer token rows ``[B, T]`` and an integer length per row ``[B]`` (TypeError)."""
    integer(tokens, name=name)
    ndim(tokens, 2, name=name)
    integer(lengths, name=lengths_name)
    shape(lengths, (tokens.shape[0],), name=lengths_name)


def axis(ax: int, nd: int, *, name: str = "axis") -> int:
    """Normalise a static axis against rank ``nd`` (raises ``ValueError`` if out of range)."""
    if not isinstance(ax, int | np.integer) or isinstance(ax, bool):
        raise TypeError(f"`{name}` must be a Python int, got {type(ax).__name__}.")
    if not -nd <= ax < max(nd, 1):
        raise ValueError(f"`{name}`={ax} is out of range for an array of rank {nd}.")
    return int(ax) % max(nd, 1)


def is_key(key: Any, *, name: str = "key") -> None:
    """Check ``key`` is a PRNG key (typed, or a legacy uint32[2])."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return
    if (
        isinstance(key, jax.Array | np.ndarray)
        and key.dtype == jnp.uint32
        and key.shape[-1:] == (2,)
    ):
        return
    raise TypeError(
        f"`{name}` must be a PRNG key from `jax.random.key(seed)`, got {type(key).__name__}."
    )


def python_int(value: Any, *, name: str, minimum: int | None = None) -> int:
    """Check a static size is a Python int (not bool) and, optionally, ``>= minimum``.

    A value of the wrong type raises ``TypeError``; one below ``minimum`` raises
    ``ValueError``. Returns the value as an ``int``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be a Python int, got {type(value).__name__} {value!r}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {name}={int(value)}.")
    return int(value)


def flag(value: Any, *, name: str) -> bool:
    """A static flag as Python's ``bool``: Python's or NumPy's bool, else a ``TypeError``.

    A string such as ``"False"`` would otherwise read as true without a word. The result is
    Python's ``bool`` (``np.True_`` becomes ``True``), what a config that must stay JSON-able
    or an equinox static field (which warns on an array) stores; a jit static argument
    takes either.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be a bool, got {type(value).__name__} {value!r:.80}.")
    return bool(value)


def flags(**kwargs: Any) -> None:
    """:func:`flag` on each keyword, for flags read only by ``if`` (their value unused)."""
    for name, value in kwargs.items():
        flag(value, name=name)
