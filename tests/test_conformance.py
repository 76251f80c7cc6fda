"""Run every conformance check over every registered case (see tests/conformance.py)."""

import pytest

from tests import conformance

CASES = conformance.registry()
LEADS = conformance.family_leads(CASES)


PAIRS = [
    pytest.param(
        case,
        check,
        id=f"{case.name}-{check}",
        marks=[pytest.mark.slow]
        if conformance.is_slow(case, check, lead=case.name in LEADS)
        else [],
    )
    for case in CASES
    for check in sorted(conformance.CHECKS)
]
SHARDING = [
    pytest.param(
        case,
        id=case.name,
        marks=[pytest.mark.slow]
        if conformance.is_slow(case, "sharding", lead=case.name in LEADS)
        else [],
    )
    for case in CASES
]


@pytest.mark.parametrize("case, check", PAIRS)
def test_conformance(case, check, key):
    conformance.CHECKS[check](case, key)


@pytest.mark.parametrize("case", SHARDING)
def test_sharding_preserved(case, key, mesh8):
    conformance.check_sharding(case, key, mesh8)
