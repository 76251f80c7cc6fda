"""Conformance cases of the kernels area: one module per kernel, merged here."""

from tests.kernels.cases_wbmm import CASES as _WBMM

CASES = [*_WBMM]
