"""The array sweep: every array argument a public function's recipe passes it.

The keyword sweep (``tests/keywords.py``) probes keyword arguments with Python values. This
one probes the *array arguments* (positional or keyword) of the same recipes: for every
argument that the recipe's valid call binds to an array of rank >= 1 (a NumPy or JAX array;
a pytree of parameters is not one),

* the string ``"abc"`` in its place must raise a ``TypeError`` naming the argument in
  backticks (JAX's own error for a string names no argument, and under ``jit`` it names a
  private function);
* the array with one more axis (``a[None]``), with a trailing unit axis (``a[..., None]``:
  ``[B, 1]`` for ``[B]``, which broadcasts against a ``[B]`` partner to ``[B, B]``) and
  with one fewer (``a[0]``) must raise a ``TypeError`` or ``ValueError`` naming, in
  backticks, the argument or another argument of the function (a mismatch between two
  arguments may name either side), or be accepted where the area's ``ANY_RANK`` lists
  ``"path:argument"`` with the reason (leading batch axes, any rank by design); a listed
  argument's rank probes are not run (the conformance suite's ``vmap`` checks are the
  batch axes' test);
* an argument of fixed rank (not in ``ANY_RANK``) whose leading size ``n > 1`` another
  array argument's leading axis shares, given one row (``a[:1]``) and one row fewer
  (``a[:-1]``), and likewise for the last axis of rank >= 2 (one column, ``a[..., :1]``,
  against a partner's last size: a ``[K, 1]`` set of centres against ``[N, d]`` points; one
  column fewer; the last axis also where a weight of an equinox-module or parameter-dict
  argument has an axis of that size: ``[N, d - 1]`` data against a model built for ``d``
  features), must
  raise as above or change the shape of the result: a size 1 that
  broadcasts silently against the partner's ``n``, or a mismatch read as valid (a slice, a
  clamped index), gives a result shaped as the valid call's; JAX's own shape error names no
  argument (the area's ``BROADCAST_OK`` lists ``"path:argument"`` where the sizes are
  equal by chance and the result is a scalar or has its own size, or the broadcast is
  documented);
* an integer array (token ids, labels, indices) given as floats off the integers
  (``a + 0.5``), and a bool mask given as floats (``True`` as ``0.5``), must raise a
  ``TypeError`` naming, in backticks, the argument or another argument of the function
  (``jnp.take`` would truncate the ids, ``jnp.where`` read 0.5 as true, ``x * mask`` halve
  the kept entries), or be accepted where the area's ``ANY_DTYPE`` lists
  ``"path:argument"`` with the reason (a soft mask by design, an integer array that is
  plain data). A floating argument is not probed with integers: integers promote to
  floats, as in ``jax.numpy``;
* an integer array with its first entry far above its range (``2**20``) and, for a signed
  dtype, far below it (``-2**20``) must raise naming an argument (``ValueError`` eagerly,
  the ``RuntimeError`` of ``eqx.error_if`` under ``jit``), unless the area's ``ANY_INT``
  lists ``"path:argument"`` with the reason (labels compared only for equality, logical
  positions): ``jnp.take`` clamps or fills, ``one_hot`` gives zeros, a scatter drops the
  write, so an id out of range is a wrong result returned silently;
* the array with an empty leading axis (``a[:0]``) and, for rank >= 2, an empty last axis
  (``a[..., :0]``) must raise a ``TypeError`` or ``ValueError`` naming an argument, or
  return a result without NaN (an empty batch may give an empty result; the mean of no
  items is NaN, never returned silently), unless the area's ``EMPTY_EXEMPT`` lists
  ``"path:argument"`` with the reason (an array only the user's function reads).

A record argument (a NamedTuple: a batch, a cache, a state; nested ones too, and records
inside a dict, list or tuple argument, and a record's dicts, lists and tuples of arrays) is
not an array, but its array fields are swept under the display name (``"batch.labels"``,
``"layers['fc'].w"``, ``"data.probs[0]"``; a dict of plain arrays with no record on the
path, a parameter pytree, is not walked): every
field of rank >= 1 with the rank probes, an integer or bool field with the dtype and range
probes above. The error may name the argument, the field, the dotted path or another field
of the same argument (a mismatch between two fields may name either), and the declarations
(``ANY_RANK``, ``ANY_DTYPE``, ``ANY_INT``) list ``"path:argument.field"``; a declared field
the call does not have is reported as stale.

A public class's ``__call__`` and public methods are swept like functions through recipes
under the paths ``"<class path>.__call__"`` and ``"<class path>.<method>"`` (the recipe
builds the object and calls it, forwarding its keyword arguments): the probe patches the
class's method for the call.

The probe reaches the function through its recipe: a ``functools.partial`` recipe's bound
arguments are replaced directly; any other recipe runs with the public function patched in
its module for the call (so a recipe must call it through its module, as ``soft.sort(...)``
does). ``tests/test_keywords.py`` runs :func:`sweep_arrays` on every recipe in the slow tier,
with the keyword sweep (one test per recipe, so the recipe's plain call is shared), and
checks in the default tier that every public function with an array parameter (an annotation
naming ``Array``) has a recipe, or a reason in the area's ``NO_RECIPE``.
"""

import functools
import importlib
import inspect
import typing
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np

from tests.conformance import without_jaxtyping
from tests.keywords import _run

STRING = "abc"


def _is_array(v: Any) -> bool:
    return isinstance(v, np.ndarray | jax.Array) and np.ndim(v) >= 1


def _call_with(
    path: str,
    call: Callable[..., Any],
    change: Callable[[dict[str, Any]], None],
    out: list[Any] | None = None,
) -> tuple[BaseException | None, dict[str, Any] | None]:
    """Run the recipe with ``change`` applied to the function's bound arguments.

    Returns ``(error, arguments)``: ``arguments`` the bound arguments seen (before the
    change), or ``None`` where the recipe never reached the function. ``out``: the recipe's
    result is appended to it.
    """
    owner, name = _owner(path)
    fn = getattr(owner, name)
    sig = inspect.signature(fn)
    seen: dict[str, Any] = {}
    entered = [False]

    def bound_call(target: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if entered[0]:  # only the recipe's first call: not the library's calls inside it
            return target(*args, **kwargs)
        entered[0] = True
        try:
            b = sig.bind(*args, **kwargs)
        except TypeError:  # the function's own error for a bad call
            return target(*args, **kwargs)
        seen.update(b.arguments)
        change(b.arguments)
        return target(*b.args, **b.kwargs)

    def capture(recipe: Callable[..., Any]) -> Callable[..., Any]:
        def run(**kwargs: Any) -> Any:
            result = recipe(**kwargs)
            if out is not None:
                out.append(result)
            return result

        return run

    if isinstance(call, functools.partial) and call.func is fn:
        recipe = functools.partial(bound_call, fn, *call.args, **call.keywords)
        with without_jaxtyping():
            return _run(capture(recipe)), (dict(seen) or None)

    def patched(*args: Any, **kwargs: Any) -> Any:  # a function: a method binds `self`
        return bound_call(fn, *args, **kwargs)

    raw = vars(owner).get(name) if inspect.isclass(owner) else None
    setattr(owner, name, staticmethod(patched) if isinstance(raw, staticmethod) else patched)
    try:
        with without_jaxtyping():
            err = _run(capture(call))
    finally:
        setattr(owner, name, raw if raw is not None else fn)
    return err, (dict(seen) or None)


def _owner(path: str) -> tuple[Any, str]:
    """``(module or class, attribute name)`` of a public path (``Class.method`` too)."""
    parent, _, name = path.rpartition(".")
    try:
        return importlib.import_module(parent), name
    except ModuleNotFoundError:  # a class's method: "<class path>.<method>"
        module, _, cls = parent.rpartition(".")
        return getattr(importlib.import_module(module), cls), name


def _plain_call(path: str, call: Callable[..., Any]) -> tuple[dict[str, Any] | None, Any]:
    """``(bound arguments or None where unreached, the recipe's result)``."""
    out: list[Any] = []
    err, seen = _call_with(path, call, lambda _: None, out)
    if err is not None:
        raise AssertionError(f"{path}: the recipe raised {type(err).__name__}: {err}")
    return seen, (out[-1] if out else None)


def _is_record(v: Any) -> bool:
    """A NamedTuple of jaxkit's (or the tests'): a third-party state (optax's
    ``TraceState``) is its own library's business, not walked."""
    owner = type(v).__module__.partition(".")[0]
    return isinstance(v, tuple) and hasattr(v, "_fields") and owner in ("jaxkit", "tests")


Step = tuple[str, Any]  # ("attr", field) of a record, ("key", k) of a dict, ("index", i)


def record_fields(value: Any, prefix: str) -> dict[str, tuple[tuple[Step, ...], Any]]:
    """The array leaves below a record (a NamedTuple) in ``value``, by display name.

    Records, dicts, lists and tuples are walked (a dict of records, a record's tuple of
    arrays); an array counts where a record lies on its path: ``"batch.labels"``,
    ``"layers['fc'].w"``, ``"data.probs[0]"``. Name -> ``(path of steps, the array)``.
    """
    out: dict[str, tuple[tuple[Step, ...], Any]] = {}

    def walk(v: Any, name: str, steps: tuple[Step, ...], in_record: bool) -> None:
        if _is_record(v):
            for field, x in zip(v._fields, v, strict=True):
                walk(x, f"{name}.{field}", (*steps, ("attr", field)), True)
        elif hasattr(v, "_fields"):  # a third-party record (an optax state): not walked
            return
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{name}[{k!r}]", (*steps, ("key", k)), in_record)
        elif isinstance(v, list | tuple):
            for i, x in enumerate(v):
                walk(x, f"{name}[{i}]", (*steps, ("index", i)), in_record)
        elif in_record and isinstance(v, np.ndarray | jax.Array):
            out[name] = (steps, v)

    walk(value, prefix, (), False)
    return out


def _replaced(value: Any, steps: tuple[Step, ...], bad: Any) -> Any:
    """``value`` with the leaf at ``steps`` (:func:`record_fields`) set to ``bad``."""
    if not steps:
        return bad
    (kind, k), rest = steps[0], steps[1:]
    if kind == "attr":
        return value._replace(**{k: _replaced(getattr(value, k), rest, bad)})
    new = dict(value) if kind == "key" else list(value)
    new[k] = _replaced(value[k], rest, bad)
    return new if kind == "key" or isinstance(value, list) else type(value)(new)


def _shapes(result: Any) -> tuple[Any, list[tuple[int, ...]]]:
    """The result's tree structure and its array leaves' shapes."""
    arrays = np.ndarray | np.generic | jax.Array | float
    leaves, tree = jax.tree.flatten(result)
    return tree, [np.shape(x) for x in leaves if isinstance(x, arrays)]


def _try(
    path: str, call: Callable[..., Any], name: str, bad: Any, at: Any = None
) -> tuple[BaseException | None, str, list[Any]]:
    """The recipe with argument ``name`` replaced by ``bad``: ``(error, message, [result])``.

    ``at = (argument, steps)`` replaces the leaf of a record argument at ``steps``
    instead (``name`` is then its display name, ``"batch.labels"``).
    """
    out: list[Any] = []

    def change(args: dict[str, Any]) -> None:
        if at is None:
            args[name] = bad
        else:
            args[at[0]] = _replaced(args[at[0]], at[1], bad)

    e, _ = _call_with(path, call, change, out)
    return e, ("" if e is None else str(e)), out


def _names_one(msg: str, params: list[str]) -> bool:
    """Whether ``msg`` names one of ``params`` in backticks (``"`batch.labels`"`` names the
    field ``labels`` of a record, under whatever name the function gives it, and the
    argument ``batch``, as ``"`layers['a'].b`"`` names ``layers``: a mismatch between two
    fields may name either)."""
    return any(
        f"`{p}`" in msg or f".{p}`" in msg or f"`{p}." in msg or f"`{p}[" in msg for p in params
    )


def _unnamed(
    where: str, e: BaseException | None, msg: str, params: list[str], kinds: Any
) -> list[str]:
    """A failure line where ``e`` is not one of ``kinds`` naming an argument in backticks."""
    if e is None or (isinstance(e, kinds) and _names_one(msg, params)):
        return []
    return [f"{where} raised {type(e).__name__} naming no argument: {msg[:160]}"]


def module_sizes(seen: dict[str, Any]) -> dict[int, str]:
    """Axis sizes of the array leaves of the equinox-module and parameter-dict arguments (a
    model, an adapter, a bulk set, ``nn`` parameters): size -> the argument's name (the
    first that has it)."""
    out: dict[int, str] = {}
    for name, v in seen.items():
        if isinstance(v, eqx.Module) or (isinstance(v, dict) and v):
            for leaf in jax.tree.leaves(eqx.filter(v, eqx.is_array)):
                for n in np.shape(leaf):
                    out.setdefault(int(n), name)
    return out


def _sweep_broadcast(
    path: str,
    call: Callable[..., Any],
    name: str,
    arrays: dict[str, Any],
    params: list[str],
    plain: Any,
    modules: dict[int, str] | None = None,
) -> list[str]:
    """One row (column), and one row (column) fewer, of ``name`` where another array shares
    its leading (last) size; for the last axis, also where a weight of a module argument
    has an axis of that size (``modules``: data of ``d - 1`` features against a model built
    for ``d``)."""
    a, failures = arrays[name], []
    sides = []
    for unit, axis in [("row", 0)] + ([("column", -1)] if a.ndim >= 2 else []):
        sides.append((f"one {unit}", axis, 1))
        if a.shape[axis] > 2:  # for 2, one fewer is one
            sides.append((f"one {unit} fewer", axis, a.shape[axis] - 1))
    for what, axis, cut in sides:
        n = a.shape[axis]
        partners = [m for m, b in arrays.items() if m != name and b.shape[axis] == n]
        if axis == -1 and n in (modules or {}) and modules[n] != name:
            partners.append(modules[n])
        if n < 2 or not partners:
            continue
        bad = a[:cut] if axis == 0 else a[..., :cut]
        e, msg, out = _try(path, call, name, bad)
        if e is None and out and _shapes(out[-1]) == _shapes(plain):
            failures.append(
                f"{path}: `{name}` with {what} ({np.shape(bad)}) against `{partners[0]}`'s "
                f"{n} was accepted, giving the valid call's shapes (a silent broadcast or a "
                f"mismatch read as valid); raise naming it (`jaxkit._validate.shape`), or list "
                f"`{path}:{name}` in BROADCAST_OK with the reason"
            )
        where = f"{path}: `{name}` with {what} ({np.shape(bad)})"
        failures += _unnamed(where, e, msg, params, TypeError | ValueError)
    return failures


def _dtype_probe(a: Any) -> tuple[str, Any] | None:
    """Floats off the integers for an integer array, 0.5 for ``True`` in a bool mask."""
    kind = np.asarray(a).dtype.kind if isinstance(a, np.ndarray) else np.dtype(a.dtype).kind
    if kind in "iu":
        return "floats for integers", np.asarray(a, np.float32) + np.float32(0.5)
    if kind == "b":
        return "floats for a bool mask", np.where(np.asarray(a), 0.5, 0.0).astype(np.float32)
    return None


def _sweep_rank(
    path: str, call: Callable[..., Any], name: str, a: Any, params: list[str], at: Any = None
) -> list[str]:
    """One more axis, a trailing unit axis and one fewer: each raises naming an argument."""
    failures = []
    for what, bad in [
        ("one more axis", a[None]),
        ("a trailing unit axis", a[..., None]),
        ("one fewer axis", a[0]),
    ]:
        e, msg, _ = _try(path, call, name, bad, at)
        where = f"{path}: `{name}` with {what} ({np.shape(bad)})"
        if e is None:
            failures.append(
                f"{where} was accepted; raise a TypeError naming it, or list "
                f"`{path}:{name}` in ANY_RANK with the reason"
            )
        failures += _unnamed(where, e, msg, params, TypeError | ValueError)
    return failures


def _sweep_dtype(
    path: str, call: Callable[..., Any], name: str, a: Any, params: list[str], at: Any = None
) -> list[str]:
    probe = _dtype_probe(a)
    if probe is None:
        return []
    what, bad = probe
    e, msg, _ = _try(path, call, name, bad, at)
    if isinstance(e, TypeError) and _names_one(msg, params):
        return []
    got = "nothing" if e is None else f"{type(e).__name__}: {msg[:160]}"
    return [
        f"{path}: `{name}` given {what}: not a TypeError naming an argument "
        f"({got}); or list `{path}:{name}` in ANY_DTYPE with the reason"
    ]


def _range_probes(a: Any) -> list[tuple[str, Any]]:
    """An integer array with its first entry far above (and, signed, below) any range."""
    x = np.asarray(a)
    if x.dtype.kind not in "iu" or x.size == 0:
        return []
    info, probes = np.iinfo(x.dtype), []
    for what, v in (("an id far above its range", 2**20), ("an id far below it", -(2**20))):
        if info.min <= v <= info.max:
            bad = x.copy()
            bad.flat[0] = v
            probes.append((what, bad))
    return probes


def _sweep_range(
    path: str, call: Callable[..., Any], name: str, a: Any, params: list[str], at: Any = None
) -> list[str]:
    failures = []
    for what, bad in _range_probes(a):
        e, msg, _ = _try(path, call, name, bad, at)
        if e is None:
            failures.append(
                f"{path}: `{name}` with {what} ({int(bad.flat[0])}) was accepted (`jnp.take` "
                "clamps, `one_hot` gives zeros); raise a ValueError naming it "
                f"(`jaxkit._validate.error_if` under jit), or list `{path}:{name}` in ANY_INT "
                "with the reason"
            )
        kinds = TypeError | ValueError | RuntimeError  # eqx.error_if's, under jit
        failures += _unnamed(f"{path}: `{name}` with {what}", e, msg, params, kinds)
    return failures


def _empty_probes(a: Any) -> list[tuple[str, Any]]:
    """An empty leading axis and, for rank >= 2, an empty last axis (where not empty)."""
    probes = [("an empty leading axis", a[:0])] if a.shape[0] else []
    if a.ndim >= 2 and a.shape[-1]:
        probes.append(("an empty last axis", a[..., :0]))
    return probes


def _has_nan(result: Any) -> bool:
    arrays = np.ndarray | np.generic | jax.Array | float  # a Python float score too
    leaves = [np.asarray(x) for x in jax.tree.leaves(result) if isinstance(x, arrays)]
    return any(x.dtype.kind in "fc" and bool(np.isnan(x).any()) for x in leaves)


def _sweep_empty(
    path: str, call: Callable[..., Any], name: str, a: Any, params: list[str]
) -> list[str]:
    failures = []
    for what, bad in _empty_probes(a):
        e, msg, out = _try(path, call, name, bad)
        where = f"{path}: `{name}` with {what} ({np.shape(bad)})"
        if e is None and out and _has_nan(out[-1]):
            failures.append(
                f"{where} gave NaN; raise a ValueError naming it "
                f"(`jaxkit._validate.nonempty`), or list `{path}:{name}` in EMPTY_EXEMPT"
            )
        failures += _unnamed(where, e, msg, params, TypeError | ValueError)
    return failures


def sweep_arrays(
    path: str,
    call: Callable[..., Any],
    any_rank: dict[str, str],
    any_dtype: dict[str, str] | None = None,
    empty_exempt: dict[str, str] | None = None,
    broadcast_ok: dict[str, str] | None = None,
    any_int: dict[str, str] | None = None,
) -> list[str]:
    """Sweep one recipe's array arguments, and the array fields of its record arguments
    (rank probes; dtype and range probes of integer and bool fields); the failures, one
    line each."""
    seen, plain = _plain_call(path, call)
    if seen is None:
        return [f"{path}: the recipe does not call the function through its module"]
    arrays = {n: v for n, v in seen.items() if _is_array(v)}
    modules = module_sizes(seen)
    owner, attr = _owner(path)
    params = list(inspect.signature(getattr(owner, attr)).parameters)
    failures = []
    for name, a in arrays.items():
        e, msg, _ = _try(path, call, name, STRING)
        if not isinstance(e, TypeError) or f"`{name}`" not in msg:
            got = "nothing" if e is None else f"{type(e).__name__}: {msg[:160]}"
            failures.append(f"{path}: `{name}` a string: not a TypeError naming it ({got})")
        if f"{path}:{name}" not in any_rank:
            failures += _sweep_rank(path, call, name, a, params)
        if f"{path}:{name}" not in (any_dtype or {}):
            failures += _sweep_dtype(path, call, name, a, params)
        if f"{path}:{name}" not in (empty_exempt or {}):
            failures += _sweep_empty(path, call, name, a, params)
        if f"{path}:{name}" not in (any_int or {}):
            failures += _sweep_range(path, call, name, a, params)
        if f"{path}:{name}" not in any_rank and f"{path}:{name}" not in (broadcast_ok or {}):
            failures += _sweep_broadcast(path, call, name, arrays, params, plain, modules)
    fields = {}
    for name, v in seen.items():
        if not _is_array(v):
            fields.update({d: (name, *sa) for d, sa in record_fields(v, name).items()})
    for dotted, (arg, steps, a) in fields.items():
        # the error may name the argument, the field, the display name or another field
        field = next(k for kind, k in reversed(steps) if kind == "attr")
        names = [*params, dotted, field]
        at = (arg, steps)
        if np.ndim(a) >= 1 and f"{path}:{dotted}" not in any_rank:
            failures += _sweep_rank(path, call, dotted, a, names, at)
        if f"{path}:{dotted}" not in (any_dtype or {}):
            failures += _sweep_dtype(path, call, dotted, a, names, at)
        if f"{path}:{dotted}" not in (any_int or {}):
            failures += _sweep_range(path, call, dotted, a, names, at)
    for table in any_rank, (any_dtype or {}), (any_int or {}):  # a field the call never had
        for entry in table:
            where, _, dotted = entry.partition(":")
            if where == path and "." in dotted and dotted not in fields:
                failures.append(f"{path}: declared `{dotted}` is no array field of the call")
    return failures


# The areas' declarations (``tests/<area>/keywords.py``), in :func:`sweep_arrays`'s order.
DECLARATIONS = ("ANY_RANK", "ANY_DTYPE", "EMPTY_EXEMPT", "BROADCAST_OK", "ANY_INT")


def declared_of(area: str, name: str) -> dict[str, str]:
    """The dict ``name`` of ``tests/<area>/keywords.py`` (empty where it has none)."""
    try:
        mod = importlib.import_module(f"tests.{area}.keywords")
    except ModuleNotFoundError as e:
        if e.name not in (f"tests.{area}", f"tests.{area}.keywords"):
            raise
        return {}
    return dict(getattr(mod, name, {}))


def no_recipe_of(area: str) -> dict[str, str]:
    """``NO_RECIPE`` of ``tests/<area>/keywords.py``: public path -> why it has no recipe."""
    return declared_of(area, "NO_RECIPE")


def array_functions(area: str) -> dict[Callable[..., Any], list[str]]:
    """The area's public functions and methods with an array parameter -> their paths.

    An array parameter is one whose annotation names ``Array`` (``Float[Array, "n"]``,
    ``ArrayLike``) or a NamedTuple record type (a batch, a cache: the sweep probes its
    fields): each such function needs a recipe (or a ``NO_RECIPE`` reason), so that
    the sweep reaches its array arguments. A class's are the ``__call__`` and the public
    methods it defines, under ``"<class path>.<method>"``.
    """
    from tests.keywords import public_functions

    out: dict[Callable[..., Any], list[str]] = {}
    for path, obj in public_functions(area).items():
        if inspect.isclass(obj):
            methods = [
                (m, f"{path}.{n}")
                for n, m in vars(obj).items()
                if (n == "__call__" or not n.startswith("_")) and inspect.isfunction(m)
            ]
        else:
            methods = [(obj, path)]
        for fn, p in methods:
            params = inspect.signature(fn).parameters.values()
            if any("Array" in str(a.annotation) or _record_type(fn, a.name) for a in params):
                out.setdefault(fn, []).append(p)
    return out


def _record_type(fn: Callable[..., Any], name: str) -> bool:
    """Whether parameter ``name`` of ``fn`` is annotated with a NamedTuple type (a record
    whose fields the sweep probes), alone or in a union (``KVCache | None``)."""
    try:
        hint = typing.get_type_hints(fn).get(name)
    except Exception:  # an annotation that does not resolve: not a record
        return False
    kinds = typing.get_args(hint) if typing.get_args(hint) else (hint,)
    return any(
        isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields") for t in kinds
    )
