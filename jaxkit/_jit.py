"""``checked_jit``: a public function jitted like ``jax.numpy``, its arguments checked first.

A function that is itself a ``jax.jit`` object meets a bad argument in JAX's own argument
check, whose message names no argument (a string) or a private function; checks written
inside the function run at trace time, on tracers. :func:`checked_jit` keeps both: the
function is jitted once, at module level (static choices static, arrays and continuous
hyperparameters traced), and a thin host wrapper with the function's own signature and
docstring checks the arguments that need a concrete Python value before the call.
"""

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from jaxkit import _validate as V


def checked_jit(
    *,
    arrays: Sequence[str] = (),
    flags: Sequence[str] = (),
    static_argnames: Sequence[str] = (),
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``jax.jit(fn, static_argnames=...)``, called after host checks.

    Before each call the wrapper binds the arguments to ``fn``'s signature (defaults
    applied) and

    * checks each argument named in ``arrays`` is a numeric or bool array
      (:func:`jaxkit._validate.numeric`: a ``TypeError`` naming it, for a string too);
    * turns each argument named in ``flags`` into the Python ``bool`` it stands for
      (:func:`jaxkit._validate.flag`: ``"no"`` is a ``TypeError``; NumPy's bool is taken
      and hashes as the static argument ``True``/``False`` does, so it compiles nothing new);
    * calls ``check(arguments)`` (the bound arguments by name) for anything else.

    The returned function keeps ``fn``'s name, signature and docstring, and the jitted
    function's ``lower``. Calls inside a trace check tracers (dtype and static values only).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        jitted = jax.jit(fn, static_argnames=tuple(static_argnames))
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def public(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            V.numeric(**{n: given[n] for n in arrays})
            for n in flags:
                given[n] = V.flag(given[n], name=n)
            if check is not None:
                check(given)
            return jitted(*bound.args, **bound.kwargs)

        public.lower = jitted.lower
        return public

    return decorate
