"""jaxkit.soft.calibrate: softness whose rank error on fresh normal data hits the target."""

import jax
import jax.numpy as jnp
import pytest

import jaxkit.soft as S

N = 64


def _rank_mae(method, s, n=N, **kw):
    x = jax.random.normal(jax.random.key(11), (512, n))  # fresh data, not the probe
    hard = (jnp.argsort(jnp.argsort(x, axis=-1), axis=-1) + 1).astype(x.dtype)
    return float(jnp.mean(jnp.abs(S.rank(x, softness=s, method=method, **kw) - hard)))


@pytest.mark.parametrize(
    "method,kw",
    [
        ("pav", {}),
        ("softsort", {}),
        ("neuralsort", {}),
        pytest.param("network", {}, marks=pytest.mark.slow),
        pytest.param("neuralsort", {"window": 8}, marks=pytest.mark.slow),
    ],
)
def test_calibrated_softness_hits_target(method, kw):
    s = S.calibrate(method, N, 0.5, **kw)
    assert isinstance(s, float) and s > 0
    assert abs(_rank_mae(method, s, **kw) - 0.5) <= 0.05  # within 10 % of the target


def test_monotone_in_target_and_cached():
    s1 = S.calibrate("neuralsort", N, 0.2)
    s2 = S.calibrate("neuralsort", N, 0.5)
    s3 = S.calibrate("neuralsort", N, 1.5)
    assert s1 < s2 < s3
    assert S.calibrate("neuralsort", N, 0.5) == s2  # deterministic (and cached)


@pytest.mark.slow
def test_sort_error_target():
    s = S.calibrate("softsort", N, 0.05, op="sort")
    x = jax.random.normal(jax.random.key(12), (96, N))
    mae = float(jnp.mean(jnp.abs(S.sort(x, softness=s, method="softsort") - jnp.sort(x))))
    assert abs(mae - 0.05) <= 0.005


def test_calibrate_bad_arguments():
    with pytest.raises(ValueError, match="target_rank_error"):
        S.calibrate("pav", N, 0.0)
    with pytest.raises(ValueError, match="target_rank_error"):
        S.calibrate("pav", N, -1.0)
    with pytest.raises(ValueError, match="method"):
        S.calibrate("bogus", N)
    with pytest.raises(ValueError, match="op"):
        S.calibrate("pav", N, op="median")
    with pytest.raises(ValueError, match="`n`"):
        S.calibrate("pav", 1)
    with pytest.raises(ValueError, match="reachable"):
        S.calibrate("softsort", N, 10.0 * N)  # beyond the fully blurred error ~ n / 4
