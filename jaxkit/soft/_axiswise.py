"""Transition shim for the split of the axiswise operators.

They now live in ``_axis_sort``, ``_axis_select``, ``_axis_quantile`` (front-ends),
``_axis_front`` (shared options and helpers) and one backend module per method. Kept
only for ``random.py`` / ``_calibrate.py``; import from the new modules instead, then
delete this file.
"""

from jaxkit.soft._axis_front import VALUE_METHODS as VALUE_METHODS
from jaxkit.soft._axis_front import check_lp as _check_lp
from jaxkit.soft._axis_front import finish as _finish
from jaxkit.soft._axis_front import options as _options
from jaxkit.soft._axis_select import argmax as argmax
from jaxkit.soft._axis_select import argtop_k as argtop_k
from jaxkit.soft._axis_sort import argsort as argsort

__all__ = ["VALUE_METHODS", "_check_lp", "_finish", "argmax", "argsort", "argtop_k"]


def _method(method, allowed):
    return _options(allowed, method=method).method


def _check_common(mode, method, softness, network, abs_mode, solver="hybrid"):
    _options(
        VALUE_METHODS,
        method=method,
        mode=mode,
        softness=softness,
        network=network,
        abs_mode=abs_mode,
        solver=solver,
    )
