"""Griffe extension: public functions made by a factory get their runtime signature and docs.

Griffe reads source statically, so ``rank = F.mirror(sort, ...)``,
``greater = _comparison("greater", ...)`` or ``abs_st = _st.st(abs)`` look like attributes
without a docstring, although at runtime they are functions whose ``__doc__`` and signature
the factory set. For every module-level attribute of a ``jaxkit`` module that has no
docstring and whose value is a call or a name (not a literal), this extension imports the
module and, when the runtime object is a function with a docstring, replaces the attribute by
a griffe ``Function`` with that signature and docstring. Constants keep the static reading
(their docs are attribute docstrings in the source). It also shows Sphinx roles
(``:func:`sort` ``) as plain code, since the pages are Markdown.

Used by ``mkdocs.yml`` (mkdocstrings' python handler ``extensions``) and by
``tests/test_docs.py`` (the docstring check), so both see the same objects.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}


# runtime annotations come back expanded (``ArrayLike`` is a Union of eight types): shorten
# them to what the source says
_SHORTEN = (
    (re.compile(r"\b(?:jax\.)?jaxlib\._jax\.Array\b"), "Array"),
    (
        re.compile(
            r"Union\[Array, numpy\.ndarray, numpy\.bool, numpy\.number, bool, int, float, "
            r"complex\]"
        ),
        "ArrayLike",
    ),
    (
        re.compile(
            r"Union\[jaxtyping\.(\w+)\[Array, ('[^']*')\], jaxtyping\.\1\[ndarray, \2\], "
            r"numpy\.number, (?:bool, )?int, float(?:, complex)?\]"
        ),
        r"\1[ArrayLike, \2]",
    ),
    (re.compile(r"\bjaxtyping\."), ""),
    (re.compile(r"\bnumpy\."), "np."),
)


def _annotation(a: Any) -> str | None:
    if a is inspect.Parameter.empty:
        return None
    text = a if isinstance(a, str) else inspect.formatannotation(a)
    for pattern, repl in _SHORTEN:
        text = pattern.sub(repl, text)
    return text


def _function(attr: griffe.Attribute, obj: Any) -> griffe.Function | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = griffe.Parameters(
        *(
            griffe.Parameter(
                p.name,
                annotation=_annotation(p.annotation),
                kind=_KINDS[p.kind],
                default=None if p.default is inspect.Parameter.empty else repr(p.default),
            )
            for p in sig.parameters.values()
        )
    )
    fn = griffe.Function(
        attr.name,
        lineno=attr.lineno,
        endlineno=attr.endlineno,
        parameters=params,
        returns=_annotation(sig.return_annotation),
    )
    fn.docstring = griffe.Docstring(inspect.cleandoc(obj.__doc__), lineno=attr.lineno, parent=fn)
    return fn


# Sphinx roles (``:func:`sort` ``) are not Markdown: show them as plain code (`` `sort` ``)
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|obj|exc|const):(?=`)")


def _strip_roles(obj: griffe.Object) -> None:
    """Drop Sphinx role prefixes from ``obj``'s docstring and its class members' ones."""
    if obj.docstring is not None:
        obj.docstring.value = _ROLE.sub("", obj.docstring.value)
    if obj.is_class:
        for m in obj.members.values():
            if not m.is_alias:
                _strip_roles(m)


class RuntimeFunctions(griffe.Extension):
    """Replace factory-made function attributes of jaxkit modules by runtime functions."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Walk the loaded package once it is complete."""
        if pkg.name == "jaxkit":
            self._walk(pkg)

    def _walk(self, mod: griffe.Module) -> None:
        for name, member in list(mod.members.items()):
            if member.is_alias:
                continue
            _strip_roles(member)
            if member.is_module:
                self._walk(member)
            elif (
                member.is_attribute
                and member.docstring is None
                and member.value is not None
                and not isinstance(member.value, str)  # a literal's source text is a str
            ):
                try:
                    obj = getattr(importlib.import_module(mod.path), name)
                except Exception:  # noqa: BLE001 (an optional dependency missing: keep it static)
                    continue
                if inspect.isfunction(obj) and (obj.__doc__ or "").strip():
                    fn = _function(member, obj)
                    if fn is not None:
                        mod.set_member(name, fn)
                        _strip_roles(fn)
