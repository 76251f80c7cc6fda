"""Run every conformance check over every registered case (see tests/conformance.py)."""

import pytest

from tests import conformance

CASES = conformance.registry()
IDS = [c.name for c in CASES]


@pytest.mark.parametrize("check", sorted(conformance.CHECKS))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conformance(case, check, key):
    conformance.CHECKS[check](case, key)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sharding_preserved(case, key, mesh8):
    conformance.check_sharding(case, key, mesh8)
