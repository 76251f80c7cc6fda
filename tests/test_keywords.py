"""The keyword sweep (``tests/keywords.py``): coverage by default, the sweep in the slow tier.

Default tier, no call: every public function with a numeric, option or flag keyword has a recipe
or an exemption in its area's ``tests/<area>/keywords.py``, and no recipe or exemption is
stale. The machinery's own test: a function that converts its keyword without a check,
names the wrong argument, truncates a float given for an int, lets an unknown option fall
through to a default, calls an option of the wrong type a wrong value, reads a string
flag as true or rejects NumPy's bool fails the sweep; one that validates passes.

Slow tier: one test per recipe (the id is the public path, so ``tests/conftest.py`` counts
it in the function's area): the string and the NaN (or 1.5) of every numeric keyword, an
unknown option and a float for every option keyword, a string and NumPy's bool for every flag
keyword.
"""

import functools
import inspect
import re
import sys
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest

from jaxkit import _validate
from tests import arrays as A
from tests import keywords as K

AREAS = K.all_areas()


@functools.cache
def _all_recipes():
    out = {}
    for area in AREAS:
        out.update(K.recipes_of(area)[0])
    return out


@functools.cache
def _declared(name):
    """An array-sweep declaration (``ANY_RANK``, ...) of every area, merged."""
    out = {}
    for area in AREAS:
        out.update(A.declared_of(area, name))
    return out


@functools.cache
def _exempt():
    out = {}
    for area in AREAS:
        out.update(K.recipes_of(area)[1])
    return out


@pytest.mark.parametrize("area", AREAS)
def test_every_swept_keyword_has_a_recipe(area):
    recipes, exempt = K.recipes_of(area)
    public = K.public_functions(area)
    missing = []
    for fn, paths in K.swept_functions(area).items():
        if any(p in recipes for p in paths):
            continue
        kws = K.swept_keywords(fn)
        if all(any(f"{p}:{k}" in exempt for p in paths) for k in kws):
            continue
        missing.append(f"{paths[0]} {kws}")
    assert not missing, (
        f"public functions or classes of `{area}` with numeric, option, flag or key keywords and "
        f"no recipe in tests/{area}/keywords.py (see tests/keywords.py): {missing}"
    )
    for path in recipes:
        owner = path.rpartition(".")[0]  # a class's method (tests/arrays.py)
        ok = path in public or (owner in public and inspect.isclass(public[owner]))
        assert ok, f"tests/{area}/keywords.py: {path} is not a public function or method"
    for entry, reason in exempt.items():
        path, _, kw = entry.partition(":")
        assert path in public, f"tests/{area}/keywords.py EXEMPT: {path} is not public"
        names = K.swept_keywords(public[path])
        assert kw in names, f"tests/{area}/keywords.py EXEMPT: {entry}: no swept keyword {kw}"
        assert reason.strip(), f"tests/{area}/keywords.py EXEMPT: {entry} gives no reason"


@pytest.mark.parametrize("area", AREAS)
def test_every_array_function_has_a_recipe(area):
    recipes, no_recipe = K.recipes_of(area)[0], A.no_recipe_of(area)
    missing = [
        paths[0]
        for paths in A.array_functions(area).values()
        if not any(p in recipes or p in no_recipe for p in paths)
    ]
    assert not missing, (
        f"public functions of `{area}` with an array parameter and no recipe in "
        f"tests/{area}/keywords.py (the array sweep, tests/arrays.py): {missing}"
    )
    public = K.public_functions(area)
    for path, reason in no_recipe.items():
        owner = path.rpartition(".")[0]
        ok = path in public or (owner in public and inspect.isclass(public[owner]))
        assert ok, f"tests/{area}/keywords.py NO_RECIPE: {path} is not public"
        assert reason.strip(), f"tests/{area}/keywords.py NO_RECIPE: {path} gives no reason"
        assert path not in recipes, f"tests/{area}/keywords.py: {path} has a recipe too"
    for table in A.DECLARATIONS:
        entries = A.declared_of(area, table)
        for entry, reason in entries.items():
            path, _, arg = entry.partition(":")
            where = f"tests/{area}/keywords.py {table}: {entry}"
            assert path in recipes, f"{where}: {path} has no recipe"
            params = inspect.signature(K.resolve(path)).parameters
            # "arg.field": a field of a record argument (not resolved: a record's type is
            # the recipe's, checked when the sweep reads the field)
            assert re.split(r"[.\[]", arg)[0] in params, f"{where}: no argument {arg}"
            assert reason.strip(), f"{where} gives no reason"


# The machinery's own test: functions it must fail and one it must pass.
def converts(x, *, alpha: float = 0.5):
    return x * jnp.asarray(alpha, jnp.float32)


def wrong_name(x, *, alpha: float = 0.5):
    _validate.real(alpha, name="beta")
    return x * alpha


def truncates(x, *, n: int = 2):
    _validate.real(n, name="n")
    return x[: int(n)]


def falls_through(x, *, mode: str = "a"):
    return x * 2 if mode == "b" else x


def value_for_type(x, *, mode: Literal["a", "b"] = "a"):
    if mode not in ("a", "b"):
        raise ValueError(f"`mode` must be 'a' or 'b', got {mode!r}.")
    return x


def truthy_string(x, *, negate: bool = False):
    return -x if negate else x


def python_bool_only(x, *, negate: bool = False):
    if not isinstance(negate, bool):
        raise TypeError(f"`negate` must be a bool, got {negate!r}.")
    return -x if negate else x


def good(
    x,
    *,
    alpha: float = 0.5,
    window: int | None = None,
    mode: Literal["a", "b"] = "a",
    negate: bool = False,
):
    _validate.flags(negate=negate)
    _validate.real(alpha, name="alpha")
    _validate.finite_scalar(alpha=alpha)
    _validate.one_of(("a", "b"), mode=mode)
    if window is not None:
        _validate.python_int(window, name="window")
    return x * alpha


@pytest.mark.parametrize(
    ("fn", "want"),
    [
        (converts, "alpha='0.1'"),
        (wrong_name, "without naming `alpha`"),
        (truncates, "n=1.5 raised nothing"),
        (falls_through, "mode='no-such-option' raised nothing"),
        (value_for_type, "mode=2.5 raised ValueError, not a TypeError"),
        (truthy_string, "negate='no' raised nothing"),
        (python_bool_only, "negate=np.False_ (NumPy's bool) raised TypeError"),
        (good, None),
    ],
)
def test_sweep_fails_a_broken_function(monkeypatch, fn, want):
    monkeypatch.setattr(K, "resolve", lambda path: fn)
    failures = K.sweep("f", lambda **kw: fn(jnp.ones(3), **kw), {})
    if want is None:
        assert failures == []
    else:
        assert failures and want in failures[0], failures
    assert K.numeric_keywords(good) == [
        K.Keyword("alpha", floating=True, admits_str=False),
        K.Keyword("window", floating=False, admits_str=False),
    ]
    assert K.option_keywords(good) == [K.Keyword("mode", floating=False, admits_str=True)]
    assert K.flag_keywords(good) == ["negate"]


# The array sweep's own test (tests/arrays.py): functions it must fail and one it must pass.
def array_unchecked(x, y):
    return jnp.asarray(x) + jnp.asarray(y)  # JAX's error for a string names no argument


def array_any_rank(x, y):
    _validate.floating(x, name="x")
    _validate.floating(y, name="y")
    return x * jnp.sum(y)  # any rank: not declared in ANY_RANK


def array_good(x, y):
    _validate.floating(x, name="x")
    _validate.floating(y, name="y")
    _validate.ndim(x, 2, name="x")
    _validate.shape(y, x.shape, name="y")
    return x + y


def array_rows_only(x, y):
    _validate.floating(x, name="x")
    _validate.floating(y, name="y")
    _validate.min_ndim(x, 2, name="x")
    _validate.min_ndim(y, 2, name="y")
    if x.shape[0] != y.shape[0] or jnp.ndim(x) > 3 or jnp.ndim(y) > 3:  # [2, 3, 1] passes
        raise TypeError(f"`y` must have `x`'s rows, got {jnp.shape(y)} and {jnp.shape(x)}.")
    return jnp.sum(x) + jnp.sum(y)


def array_broadcast(x, y):
    for name, a in (("x", x), ("y", y)):
        _validate.floating(a, name=name)
        _validate.ndim(a, 2, name=name)
        _validate.nonempty(a, name=name)
        _validate.nonempty(a, name=name, axis=-1)
    if x.shape[1] != y.shape[1]:  # the rows are not tied: one row broadcasts silently
        raise TypeError(f"`y` must have `x`'s columns, got {jnp.shape(y)} and {jnp.shape(x)}.")
    return x * y


def array_distances(x, y):
    for name, a in (("x", x), ("y", y)):
        _validate.floating(a, name=name)
        _validate.ndim(a, 2, name=name)
        _validate.nonempty(a, name=name, axis=-1, what="feature")
    return jnp.sum((x[:, None, :] - y[None]) ** 2, axis=-1)  # features unchecked: [K, 1]


def array_truncates(x, y):
    for name, a in (("x", x), ("y", y)):
        _validate.floating(a, name=name)
        _validate.ndim(a, 2, name=name)
        _validate.nonempty(a, name=name, axis=-1, what="feature")
    if x.shape[0] != y.shape[0]:
        raise TypeError(f"`y` must have `x`'s rows, got {jnp.shape(y)} and {jnp.shape(x)}.")
    k = min(x.shape[1], y.shape[1])  # a mismatch read as valid: the shorter axis wins
    return jnp.sum(x[:, :k] * y[:, :k], axis=1)


def test_array_sweep_fails_a_mismatch_read_as_valid():
    recipe = functools.partial(array_truncates, jnp.ones((2, 3)), jnp.ones((2, 3)))
    failures = A.sweep_arrays("tests.test_keywords.array_truncates", recipe, {})
    want = "`x` with one column fewer ((2, 2)) against `y`'s 3 was accepted"
    assert any(want in f for f in failures), failures
    declared = {f"tests.test_keywords.array_truncates:{a}": "free sizes" for a in "xy"}
    failures = A.sweep_arrays(
        "tests.test_keywords.array_truncates", recipe, {}, None, None, declared
    )
    assert failures == [], failures


class _Linear(eqx.Module):
    w: jax.Array


def module_truncates(model, x):
    _validate.floating(x, name="x")
    _validate.ndim(x, 2, name="x")
    _validate.nonempty(x, name="x", axis=-1, what="feature")
    return jnp.sum(x @ model.w[: x.shape[1]])  # features not checked against the model


def module_checked(model, x):
    _validate.floating(x, name="x")
    _validate.shape(x, (None, model.w.shape[0]), name="x")
    return jnp.sum(x @ model.w)


@pytest.mark.parametrize("name", ["module_truncates", "module_checked"])
def test_array_sweep_checks_data_against_a_module(name):
    # wave 47: a data array's last size shared by a weight of an equinox-module argument (a
    # model built for d features) is probed with one column and one column fewer
    recipe = functools.partial(globals()[name], _Linear(jnp.ones((3, 2))), jnp.ones((4, 3)))
    failures = A.sweep_arrays(f"tests.test_keywords.{name}", recipe, {})
    if name == "module_checked":
        assert failures == [], failures
    else:
        want = "`x` with one column fewer ((4, 2)) against `model`'s 3 was accepted"
        assert any(want in f for f in failures), failures


def array_mean(x, y):
    _validate.floating(x, name="x")
    _validate.floating(y, name="y")
    _validate.ndim(x, 2, name="x")
    _validate.ndim(y, 2, name="y")
    return jnp.mean(x, axis=0) + jnp.sum(y)  # no rows: NaN (no `nonempty` check)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("array_unchecked", "`x` a string: not a TypeError naming it"),
        ("array_any_rank", "`x` with one more axis ((1, 2, 3)) was accepted"),
        ("array_mean", "`x` with an empty leading axis ((0, 3)) gave NaN"),
        ("array_rows_only", "`x` with a trailing unit axis ((2, 3, 1)) was accepted"),
        ("array_broadcast", "`x` with one row ((1, 3)) against `y`'s 2 was accepted"),
        ("array_distances", "`x` with one column ((2, 1)) against `y`'s 3 was accepted"),
        ("array_good", None),
    ],
)
def test_array_sweep_fails_a_broken_function(name, want):
    x, y = jnp.ones((2, 3)), jnp.ones((2, 3))
    recipe = functools.partial(globals()[name], x, y)
    failures = A.sweep_arrays(f"tests.test_keywords.{name}", recipe, {})
    if want is None:
        assert failures == []
    else:
        assert failures and want in failures[0], failures
    # declared any-rank (and exempt of the empty probes): only the string probe stays
    declared = {f"tests.test_keywords.{name}:{a}": "broadcasts" for a in "xy"}
    failures = A.sweep_arrays(f"tests.test_keywords.{name}", recipe, declared, None, declared)
    assert (failures == []) == (name != "array_unchecked"), failures


def ids_unchecked(ids, mask):
    _validate.ndim(ids, 1, name="ids")
    _validate.shape(mask, ids.shape, name="mask")
    kept = jnp.asarray(mask).astype(jnp.float32)  # reads 0.5 as half
    return jnp.take(jnp.arange(5.0), jnp.asarray(ids).astype(int)) * kept  # truncates 2.5


def ids_clamped(ids, mask):
    _validate.integer(ids, name="ids")
    _validate.ndim(ids, 1, name="ids")
    _validate.shape(mask, ids.shape, name="mask")
    return jnp.where(mask, jnp.take(jnp.arange(5.0), ids, mode="clip"), 0.0)  # 7 reads 4


def ids_good(ids, mask):
    _validate.integer(ids, name="ids")
    _validate.boolean(mask, name="mask")
    _validate.ndim(ids, 1, name="ids")
    _validate.shape(mask, ids.shape, name="mask")
    ids = _validate.error_if(ids, jnp.any((ids < 0) | (ids >= 5)), "`ids` must lie in [0, 5).")
    return jnp.where(mask, jnp.take(jnp.arange(5.0), ids), 0.0)


class Scaled:
    """A class whose ``__call__`` takes the arrays (swept as ``<path>.__call__``)."""

    def __call__(self, ids, mask):
        return ids_good(ids, mask)

    def unchecked(self, ids, mask):  # a public method, swept as "Scaled.unchecked"
        return ids_unchecked(ids, mask)


class ScaledUnchecked:
    def __call__(self, ids, mask):
        return ids_unchecked(ids, mask)


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("ids_unchecked", "`ids` given floats for integers"),
        ("ids_good", None),
        ("ids_clamped", "`ids` with an id far above its range (1048576) was accepted"),
        ("Scaled.__call__", None),
        ("ScaledUnchecked.__call__", "`ids` given floats for integers"),
        ("Scaled.unchecked", "`ids` given floats for integers"),
    ],
)
def test_array_sweep_probes_dtypes_and_calls(path, want):
    ids, mask = jnp.array([0, 2, 4]), jnp.array([True, False, True])
    this, (name, _, method) = sys.modules[__name__], path.partition(".")
    if method:  # a class's method, patched on the class for the call
        call = lambda: getattr(getattr(this, name)(), method)(ids, mask)  # noqa: E731
    else:  # reached through this module, as a recipe reaches a public function
        call = lambda: getattr(this, name)(ids, mask)  # noqa: E731
    failures = A.sweep_arrays(f"tests.test_keywords.{path}", call, {})
    if want is None:
        assert failures == [], failures
    else:
        assert failures and want in failures[0], failures
        assert any("`mask` given floats for a bool mask" in f for f in failures), failures
    # declared: the dtype and range probes are skipped
    declared = {f"tests.test_keywords.{path}:{a}": "plain data" for a in ("ids", "mask")}
    assert A.sweep_arrays(f"tests.test_keywords.{path}", call, {}, declared, any_int=declared) == []


class Pair(NamedTuple):
    ids: Any
    mask: Any


class Batch(NamedTuple):  # a record with a nested one, and a float field
    pair: Pair
    weight: Any


def record_unchecked(batch):  # `weight` [1, 3] broadcasts against the [3] ids silently
    return ids_unchecked(batch.pair.ids, batch.pair.mask) * batch.weight


def record_clamped(batch):
    _validate.shape(batch.weight, jnp.shape(batch.pair.ids), name="batch.weight")
    return ids_clamped(batch.pair.ids, batch.pair.mask) * batch.weight


def record_good(batch):  # its errors name the fields
    _validate.shape(batch.weight, jnp.shape(batch.pair.ids), name="batch.weight")
    return ids_good(batch.pair.ids, batch.pair.mask) * batch.weight


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("record_unchecked", "`batch.pair.ids` given floats for integers"),
        ("record_clamped", "`batch.pair.ids` with an id far above its range (1048576)"),
        ("record_good", None),
    ],
)
def test_array_sweep_probes_the_fields_of_records(name, want):
    pair = Pair(jnp.array([0, 2, 4]), jnp.array([True, False, True]))
    batch = Batch(pair, jnp.ones(3))
    call = lambda: getattr(sys.modules[__name__], name)(batch)  # noqa: E731
    path = f"tests.test_keywords.{name}"
    failures = A.sweep_arrays(path, call, {})
    if want is None:
        assert failures == [], failures
    else:
        assert any(want in f for f in failures), failures
        assert any("`batch.pair.mask` given floats for a bool mask" in f for f in failures)
    weight = f"{path}: `batch.weight` with one more axis ((1, 3))"  # accepted or unnamed
    assert any(f.startswith(weight) for f in failures) == (name == "record_unchecked"), failures
    declared = {f"{path}:batch.pair.{a}": "plain" for a in ("ids", "mask")}
    rank = {f"{path}:batch.weight": "broadcast by design"}
    assert A.sweep_arrays(path, call, rank, declared, any_int=declared) == []
    stale = {**rank, f"{path}:batch.pair.nope": "no such field"}
    failures = A.sweep_arrays(path, call, stale, declared, any_int=declared)
    assert f"{path}: declared `batch.pair.nope` is no array field of the call" in failures


class Bank(NamedTuple):  # a record holding a tuple of arrays
    rows: Any


def in_dict_unchecked(layers):  # a dict of records: `layers['a'].ids` read unchecked
    return ids_unchecked(layers["a"].ids, layers["a"].mask)


def in_dict_good(layers):
    return ids_good(layers["a"].ids, layers["a"].mask)


def bank_unchecked(bank):
    return bank.rows[0] + bank.rows[1]


def bank_good(bank):
    for i, row in enumerate(bank.rows):
        _validate.shape(row, (3,), name=f"bank.rows[{i}]")
    return bank.rows[0] + bank.rows[1]


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("in_dict_unchecked", "`layers['a'].ids` given floats for integers"),
        ("in_dict_good", None),
        ("bank_unchecked", "`bank.rows[1]` with one more axis ((1, 3))"),
        ("bank_good", None),
    ],
)
def test_array_sweep_walks_dicts_and_tuples_around_records(name, want):
    pair = Pair(jnp.array([0, 2, 4]), jnp.array([True, False, True]))
    arg = {"a": pair} if name.startswith("in_dict") else Bank((jnp.ones(3), jnp.ones(3)))
    call = lambda: getattr(sys.modules[__name__], name)(arg)  # noqa: E731
    failures = A.sweep_arrays(f"tests.test_keywords.{name}", call, {})
    if want is None:
        assert failures == [], failures
    else:
        assert any(want in f for f in failures), failures
    # a dict of plain arrays (no record on the path) is not walked, nor a third-party record
    assert A.record_fields({"w": jnp.ones(3)}, "params") == {}
    state = optax.sgd(0.1, momentum=0.9).init({"w": jnp.ones(3)})  # optax's TraceState
    assert A.record_fields(state, "opt_state") == {}
    assert list(A.record_fields([pair], "pairs")) == ["pairs[0].ids", "pairs[0].mask"]


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_all_recipes()))
def test_keywords_reject_bad_values(path):
    """The array sweep (functions, not classes), then the keyword sweep of the same recipe.

    The array sweep's first, plain call of the recipe is the keyword sweep's too.
    """
    call, function = _all_recipes()[path], not inspect.isclass(K.resolve(path))
    failures = A.sweep_arrays(path, call, *map(_declared, A.DECLARATIONS)) if function else []
    failures += K.sweep(path, call, _exempt(), ran=function)
    assert not failures, "\n".join(failures)


# Issue 13 item 1: randomness comes in as a keyword-only `key`. `jaxkit.soft.random` mirrors
# `jax.random`, whose key is positional (its module docstring says so); a record the library
# returns may hold a key as a field. A host-side function that takes a seed or a NumPy
# generator instead says why here.
POSITIONAL_KEY = {
    "jaxkit.soft.random.": "mirrors jax.random's positional key (module docstring)",
    "jaxkit.privacy.PrivatizeState": "a record (NamedTuple state) holding the noise key",
}
SEEDED = {
    "jaxkit.diffusion.toy_nature:seed": "the toy task's Markov chain, a NumPy draw named by seed",
    "jaxkit.diffusion.toy_nature_sample:seed": "host-side NumPy data generator of the toy task",
    "jaxkit.hypospace.sample_sets:seed": "upstream's random.seed(33550336) stream, reproduced",
    "jaxkit.neuro.ica_baseline:seed": "scikit-learn FastICA's random_state (host-side baseline)",
    "jaxkit.timeseries.render_text:rng": "host-side text rendering with the caller's generator",
}
RANDOM_NAMES = ("key", "rng", "seed", "prng_key", "rng_key", "random_state")


def _signatures(area):
    """Public functions and classes of ``area``, and the public methods (and ``__call__``)
    the classes define: ``(path, signature)``."""
    for path, fn in K.public_functions(area).items():
        yield path, inspect.signature(fn)
        if inspect.isclass(fn):
            for name, m in vars(fn).items():
                if callable(m) and (name == "__call__" or not name.startswith("_")):
                    yield f"{path}.{name}", inspect.signature(m)


def test_randomness_is_a_keyword_only_key():
    bad, seen = [], set()
    for area in AREAS:
        for path, sig in _signatures(area):
            for p in sig.parameters.values():
                if p.name not in RANDOM_NAMES:
                    continue
                if p.name != "key":
                    seen.add(f"{path}:{p.name}")
                    if f"{path}:{p.name}" not in SEEDED:
                        bad.append(f"{path}: `{p.name}` (randomness is a keyword-only `key`)")
                elif p.kind is not inspect.Parameter.KEYWORD_ONLY and not any(
                    path.startswith(prefix) for prefix in POSITIONAL_KEY
                ):
                    bad.append(f"{path}: `key` is {p.kind.description}, not keyword-only")
    assert not bad, bad
    assert seen == set(SEEDED), f"stale SEEDED entries: {set(SEEDED) - seen}"


def test_methods_check_their_key():
    # The sweep calls constructors; these public methods take a key of their own (optional:
    # None means no randomness). An int given for it is a TypeError naming `key`.
    import jax
    import numpy as np

    from jaxkit import equivariance, steering, timeseries

    enc = steering.ValueEncoder(8, 4, n_heads=1, n_layers=1, dropout=0.1, key=jax.random.key(0))
    h, mask = jnp.ones((1, 3, 8)), jnp.ones((1, 3), bool)
    lexicon = {p.name: {} for p in timeseries.LEGACY_V1.primitives}
    calls = {
        "Group.representatives": lambda k: equivariance.cyclic_rot2d(4).representatives(key=k),
        "ValueEncoder.unconditional": lambda k: enc.unconditional(h, mask, key=k),
        "ValueEncoder.trigger": lambda k: enc.trigger(h, mask, key=k),
        "RuleExtractor.__call__": lambda k: timeseries.RuleExtractor(lexicon)(
            "flat", np.zeros(3), timeseries.LEGACY_V1, key=k
        ),
    }
    with K.without_jaxtyping():  # what a user meets: jaxkit's own checks
        for call in calls.values():
            call(jax.random.key(1))  # a key, typed or legacy, is taken
            call(jax.random.PRNGKey(1))
            with pytest.raises(TypeError, match="`key`"):
                call(0)
