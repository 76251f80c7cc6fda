"""The keyword sweep: every public function's numeric, option, flag and key keywords.

The conformance suite (``tests/conformance.py``) checks the hyperparameters each case
registers. This sweep covers the rest of every public signature: each keyword argument
whose default is an ``int`` or ``float`` (not a ``bool``), or ``None`` with an annotation
naming ``int`` or ``float``, is a *numeric keyword*, and

* ``"0.1"`` (a string) must raise a ``TypeError`` whose message names the keyword in
  backticks (``ValueError`` is accepted too where the annotation admits a string, e.g.
  ``window: int | Literal["auto"]``);
* NaN, for a keyword whose default is a ``float`` or whose annotation names ``float``, must
  raise an error naming it (any class: an ``eqx.error_if`` guard raises a runtime error);
* ``1.5``, for the other (integer) keywords, must raise a ``TypeError`` naming it (``int()``
  would truncate it to 1 without a word).

An *option keyword* is one whose default is a string or whose annotation is a ``Literal``
(and that is not numeric, as ``window: int | Literal["auto"]`` is): a choice among named
options (``mode="smooth"``, ``solver="hybrid"``). ``"no-such-option"`` must raise a
``ValueError`` naming it (an unknown option never falls through to a default path), and
``2.5`` (no option's kind; not swept where the annotation names ``float``) a ``TypeError``
naming it. A free-text keyword (a label, a mesh axis name, a prompt's role) is exempt with
that reason.

A *flag keyword* is one whose default is a ``bool``: the string ``"no"`` (which ``if flag:``
would read as true) must raise a ``TypeError`` naming it (``jaxkit._validate.flags``), and
NumPy's bool of the default's value (``np.bool_(False)``, what a comparison of NumPy arrays
gives) must be accepted as the bool it is.

A *key keyword* is the PRNG key ``key`` (issue 13 item 1: keyword-only, typed keys, legacy
``uint32[2]`` keys accepted as ``jax.random`` accepts them): a legacy key,
``jax.random.PRNGKey(0)``, must be accepted, and the integer ``0`` (a seed where a key
belongs) must raise a ``TypeError`` naming it (``jaxkit._validate.is_key``). A recipe of such
a function forwards ``key`` like any other keyword (``**{"key": jax.random.key(0), **kw}``).

Each area lists, in ``tests/<area>/keywords.py``, a ``RECIPES`` dict from a public path
(``"jaxkit.soft.sort"``; any public path of the function) to a callable that calls the
function on small valid inputs and forwards its keyword arguments (``functools.partial(
soft.sort, X)`` is one), and an ``EXEMPT`` dict from ``"path:keyword"`` to the reason a
keyword is not swept (e.g. NaN is a meaningful value there). The recipe called with no
keyword must succeed, so that an error in the sweep is the keyword's. Public classes
(equinox modules, frozen-dataclass configs) are swept through their constructors, as
functions are; a record the library returns rather than takes (a counter, a result) is
exempt with that reason.

``tests/test_keywords.py`` checks in the default tier (no call) that every public function
with a numeric, option or flag keyword has a recipe or an exemption and that no entry is
stale, and runs :func:`sweep` over every recipe in the slow tier.
"""

import dataclasses
import importlib
import inspect
import math
import pathlib
import re
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import jaxkit
from scripts.docs import jaxkit_docs as D
from tests.conformance import without_jaxtyping

STRING = "0.1"
NOT_INT = 1.5
NO_OPTION = "no-such-option"
NOT_OPTION = 2.5
NOT_FLAG = "no"
NOT_KEY = 0


@dataclasses.dataclass(frozen=True)
class Keyword:
    """One numeric keyword: its name, whether NaN is swept, whether a string may be a value."""

    name: str
    floating: bool
    admits_str: bool


def numeric_keywords(fn: Callable[..., Any]) -> list[Keyword]:
    """The numeric keywords of ``fn``'s signature, in order (see the module docstring)."""
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty or isinstance(p.default, bool):
            continue
        ann = str(p.annotation)
        numeric_none = p.default is None and re.search(r"\b(int|float)\b", ann)
        if not (isinstance(p.default, int | float) or numeric_none):
            continue
        floating = isinstance(p.default, float) or bool(re.search(r"\bfloat\b", ann))
        admits_str = bool(re.search(r"\bstr\b|Literal", ann))
        out.append(Keyword(p.name, floating, admits_str))
    return out


def option_keywords(fn: Callable[..., Any]) -> list[Keyword]:
    """The option keywords of ``fn``'s signature, in order (see the module docstring).

    ``floating``: the annotation names ``float`` too (``shrinkage: str | float``), so 2.5 may
    be a value and is not swept.
    """
    numeric = {k.name for k in numeric_keywords(fn)}
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty or p.name in numeric:
            continue
        ann = str(p.annotation)
        if isinstance(p.default, str) or "Literal" in ann:
            out.append(Keyword(p.name, bool(re.search(r"\bfloat\b", ann)), admits_str=True))
    return out


def flag_keywords(fn: Callable[..., Any]) -> list[str]:
    """The flag keywords of ``fn``'s signature (a ``bool`` default), in order."""
    params = inspect.signature(fn).parameters.values()
    return [p.name for p in params if isinstance(p.default, bool)]


def key_keywords(fn: Callable[..., Any]) -> list[str]:
    """``["key"]`` where ``fn`` takes a PRNG key ``key``, else ``[]``."""
    return ["key"] if "key" in inspect.signature(fn).parameters else []


def swept_keywords(fn: Callable[..., Any]) -> list[str]:
    """The names of ``fn``'s numeric, option, flag and key keywords."""
    numeric_or_option = [k.name for k in numeric_keywords(fn) + option_keywords(fn)]
    return numeric_or_option + flag_keywords(fn) + key_keywords(fn)


def public_functions(area: str) -> dict[str, Callable[..., Any]]:
    """Every public path of the area that names a function or a class: path -> object.

    A wrapped function (``jax.jit``, ``functools.cache``) counts: its signature is the
    wrapped one's, and the sweep calls it through the wrapper, as a user does.
    """
    out = {}
    for mod in D.public_modules(area):
        runtime = importlib.import_module(mod)
        for n in D.public_names(mod):
            obj = getattr(runtime, n.name, None)
            cls = inspect.isclass(obj) and not issubclass(obj, BaseException)  # not a warning
            fn = callable(obj) and inspect.isfunction(inspect.unwrap(obj))
            if not n.is_module and (fn or cls):
                out[n.path] = obj
    return out


def swept_functions(area: str) -> dict[Callable[..., Any], list[str]]:
    """The area's functions with a numeric, option or flag keyword -> their public paths."""
    out: dict[Callable[..., Any], list[str]] = {}
    for path, fn in public_functions(area).items():
        if swept_keywords(fn):
            out.setdefault(fn, []).append(path)
    return out


def recipes_of(area: str) -> tuple[dict[str, Callable[..., Any]], dict[str, str]]:
    """``(RECIPES, EXEMPT)`` of ``tests/<area>/keywords.py`` (empty where it has none)."""
    try:
        mod = importlib.import_module(f"tests.{area}.keywords")
    except ModuleNotFoundError as e:
        if e.name not in (f"tests.{area}", f"tests.{area}.keywords"):
            raise
        return {}, {}
    return dict(mod.RECIPES), dict(getattr(mod, "EXEMPT", {}))


def resolve(path: str) -> Callable[..., Any]:
    """The object at a dotted public path (``"<class path>.<method>"``: the class's method)."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError:
        return getattr(resolve(module), name)


def _run(call: Callable[..., Any], **kwargs: Any) -> BaseException | None:
    """``call(**kwargs)`` to completion; the exception it raised, or None."""
    try:
        jax.block_until_ready(jax.tree.leaves(call(**kwargs)))
    except Exception as e:  # noqa: BLE001 (under jit an eqx.error_if is a runtime error)
        return e
    return None


def sweep(
    path: str, call: Callable[..., Any], exempt: dict[str, str], *, ran: bool = False
) -> list[str]:
    """Sweep one recipe; the failures, one line each (empty: every keyword passed).

    ``exempt``: ``"path:keyword"`` -> reason, for the keywords not swept. ``ran``: the
    recipe's plain call already succeeded (the array sweep ran it), so it is not run again.
    """
    fn = resolve(path)
    with without_jaxtyping():  # as below; beartype samples one item of a container per call
        err = None if ran else _run(call)
    if err is not None:
        return [f"{path}: the recipe itself raised {type(err).__name__}: {str(err)[:200]}"]
    failures = []
    for kw in numeric_keywords(fn):
        if f"{path}:{kw.name}" in exempt:
            continue
        probes = [("a string", STRING), ("NaN", math.nan) if kw.floating else ("a float", NOT_INT)]
        for what, value in probes:
            with without_jaxtyping():  # what a user meets: jaxkit's own checks
                e = _run(call, **{kw.name: value})
            if e is None:
                failures.append(f"{path}: {kw.name}={value!r} raised nothing")
                continue
            msg = str(e)
            if f"`{kw.name}`" not in msg:
                failures.append(
                    f"{path}: {kw.name}={value!r} raised {type(e).__name__} without naming "
                    f"`{kw.name}`: {msg[:200]}"
                )
            elif what != "NaN":
                str_ok = what == "a string" and kw.admits_str
                allowed = (TypeError, ValueError) if str_ok else (TypeError,)
                if not isinstance(e, allowed):
                    failures.append(
                        f"{path}: {kw.name}={value!r} raised {type(e).__name__}, not a "
                        f"TypeError ({what} is the wrong type): {msg[:200]}"
                    )
    failures += _sweep_key(path, fn, call, exempt)
    params = inspect.signature(fn).parameters
    # (keyword, value, the error it must raise naming the keyword; None: accepted)
    typed: list[tuple[str, Any, type[Exception] | None]] = []
    for name in flag_keywords(fn):
        typed += [(name, np.bool_(params[name].default), None), (name, NOT_FLAG, TypeError)]
    for kw in option_keywords(fn):
        typed.append((kw.name, NO_OPTION, ValueError))
        if not kw.floating:  # 2.5 may be a value where the annotation names float
            typed.append((kw.name, NOT_OPTION, TypeError))
    for name, value, want in typed:
        if f"{path}:{name}" in exempt:
            continue
        with without_jaxtyping():
            e = _run(call, **{name: value})
        if want is None:
            if e is not None:
                failures.append(
                    f"{path}: {name}={value!r} (NumPy's bool) raised {type(e).__name__}: "
                    f"{str(e)[:200]}"
                )
        elif e is None:
            failures.append(f"{path}: {name}={value!r} raised nothing")
        elif f"`{name}`" not in str(e) or not isinstance(e, want):
            failures.append(
                f"{path}: {name}={value!r} raised {type(e).__name__}, not a "
                f"{want.__name__} naming `{name}`: {str(e)[:200]}"
            )
    return failures


def _sweep_key(
    path: str, fn: Callable[..., Any], call: Callable[..., Any], exempt: dict[str, str]
) -> list[str]:
    """A legacy key accepted, an integer a ``TypeError`` naming `key` (the module docstring)."""
    if not key_keywords(fn) or f"{path}:key" in exempt:
        return []
    with without_jaxtyping():
        e = _run(call, key=jax.random.PRNGKey(0))
    if e is not None:
        if "multiple values for keyword argument 'key'" in str(e):
            return [f"{path}: the recipe does not forward `key` (pass it in **kw's place)"]
        return [f"{path}: a legacy uint32[2] key raised {type(e).__name__}: {str(e)[:200]}"]
    with without_jaxtyping():
        e = _run(call, key=NOT_KEY)
    if e is None:
        return [f"{path}: key={NOT_KEY!r} raised nothing"]
    if "`key`" not in str(e) or not isinstance(e, TypeError):
        return [
            f"{path}: key={NOT_KEY!r} raised {type(e).__name__}, not a TypeError naming "
            f"`key`: {str(e)[:200]}"
        ]
    return []


def all_areas() -> tuple[str, ...]:
    return tuple(jaxkit._SUBPACKAGES)


def adapter_round_trip(
    module: Any, params: Callable[[], Any], field: str
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Recipes for an area's ``save_adapter`` and ``restore_adapter`` (the restored
    ``field``), in a temporary folder removed after the call; ``params()`` the adapter.

    Both call through ``module`` at call time, so the sweeps' patched function is the one run.
    """

    def save(**kw: Any) -> Any:
        with tempfile.TemporaryDirectory(prefix="jaxkit-kw-") as d:
            return module.save_adapter(pathlib.Path(d) / "adapter", params(), **kw)

    def restore(**kw: Any) -> Any:
        with tempfile.TemporaryDirectory(prefix="jaxkit-kw-") as d:
            module.save_adapter(pathlib.Path(d) / "adapter", params())
            return getattr(
                module.restore_adapter(pathlib.Path(d) / "adapter", params(), **kw), field
            )

    return save, restore
