"""Keyword-sweep recipes for sharding (see tests/keywords.py)."""

from jaxkit import sharding

RECIPES = {
    "jaxkit.sharding.make_mesh": lambda **kw: sharding.make_mesh(**kw),
}

EXEMPT: dict[str, str] = {}
