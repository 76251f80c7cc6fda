"""The keyword sweep (``tests/keywords.py``): coverage by default, the sweep in the slow tier.

Default tier, no call: every public function with a numeric, option or flag keyword has a recipe
or an exemption in its area's ``tests/<area>/keywords.py``, and no recipe or exemption is
stale. The machinery's own test: a function that converts its keyword without a check,
names the wrong argument, truncates a float given for an int, lets an unknown option fall
through to a default, calls an option of the wrong type a wrong value or reads a string
flag as true fails the sweep; one that validates passes.

Slow tier: one test per recipe (the id is the public path, so ``tests/conftest.py`` counts
it in the function's area): the string and the NaN (or 1.5) of every numeric keyword, an
unknown option and a float for every option keyword, a string for every flag keyword.
"""

import functools
from typing import Literal

import jax.numpy as jnp
import pytest

from jaxkit import _validate
from tests import keywords as K

AREAS = K.all_areas()


@functools.cache
def _all_recipes():
    out = {}
    for area in AREAS:
        out.update(K.recipes_of(area)[0])
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
        f"public functions or classes of `{area}` with numeric, option or flag keywords and no "
        f"recipe in tests/{area}/keywords.py (see tests/keywords.py): {missing}"
    )
    for path in recipes:
        assert path in public, f"tests/{area}/keywords.py: {path} is not a public function"
    for entry, reason in exempt.items():
        path, _, kw = entry.partition(":")
        assert path in public, f"tests/{area}/keywords.py EXEMPT: {path} is not public"
        names = K.swept_keywords(public[path])
        assert kw in names, f"tests/{area}/keywords.py EXEMPT: {entry}: no swept keyword {kw}"
        assert reason.strip(), f"tests/{area}/keywords.py EXEMPT: {entry} gives no reason"


# The machinery's own test: functions it must fail and one it must pass.
def converts(x, *, alpha: float = 0.5):
    return x * jnp.asarray(alpha, jnp.float32)


def wrong_name(x, *, alpha: float = 0.5):
    _validate.real_scalar(alpha, name="beta")
    return x * alpha


def truncates(x, *, n: int = 2):
    _validate.real_scalar(n, name="n")
    return x[: int(n)]


def falls_through(x, *, mode: str = "a"):
    return x * 2 if mode == "b" else x


def value_for_type(x, *, mode: Literal["a", "b"] = "a"):
    if mode not in ("a", "b"):
        raise ValueError(f"`mode` must be 'a' or 'b', got {mode!r}.")
    return x


def truthy_string(x, *, negate: bool = False):
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
    _validate.real_scalar(alpha, name="alpha")
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


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_all_recipes()))
def test_keywords_reject_bad_values(path):
    failures = K.sweep(path, _all_recipes()[path], _exempt())
    assert not failures, "\n".join(failures)
