"""jaxkit.soft.calibrate: softness whose rank error on fresh normal data hits the target."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.soft as S
from jaxkit.soft import _calibrate

N = 64


@functools.partial(jax.jit, static_argnames=("method", "window"))
def _rank_mae(s, method, window=None):
    x = jax.random.normal(jax.random.key(11), (512, N))  # fresh data, not the probe
    hard = (jnp.argsort(jnp.argsort(x, axis=-1), axis=-1) + 1).astype(x.dtype)
    kw = {} if window is None else {"window": window}
    return jnp.mean(jnp.abs(S.rank(x, softness=s, method=method, **kw) - hard))


@pytest.mark.parametrize(
    "method,kw",
    [
        ("neuralsort", {}),
        pytest.param("pav", {}, marks=pytest.mark.slow),
        pytest.param("softsort", {}, marks=pytest.mark.slow),
        pytest.param("network", {}, marks=pytest.mark.slow),
        pytest.param("neuralsort", {"window": 8}, marks=pytest.mark.slow),
    ],
)
def test_calibrated_softness_hits_target(method, kw):
    s = S.calibrate(method, N, 0.5, **kw)
    assert isinstance(s, float) and s > 0
    assert abs(float(_rank_mae(s, method, **kw)) - 0.5) <= 0.05  # within 10 % of the target


def test_monotone_in_target_cached_and_keyed():
    s1 = S.calibrate("neuralsort", N, 0.2)
    s2 = S.calibrate("neuralsort", N, 0.5)
    s3 = S.calibrate("neuralsort", N, 1.5)
    assert s1 < s2 < s3
    assert S.calibrate("neuralsort", N, 0.5) == s2  # deterministic (and cached)
    assert S.calibrate("neuralsort", N, 0.5, key=jax.random.key(0)) == s2  # the default key
    # another probe: another (close) softness; a legacy uint32 key is accepted
    s4 = S.calibrate("neuralsort", N, 0.5, key=jax.random.key(7))
    assert abs(np.log(s4 / s2)) < 0.1
    # the key really chooses the probe: the error curves of two keys differ
    e0 = _calibrate.error_fn("neuralsort", N, key=jax.random.key(0))(s2)
    e7 = _calibrate.error_fn("neuralsort", N, key=jax.random.key(7))(s2)
    assert e0 != e7 and abs(e0 - e7) < 0.05
    assert S.calibrate("neuralsort", N, 0.5, key=jax.random.PRNGKey(7)) > 0
    # the probe is the standard normal draw of the key
    np.testing.assert_array_equal(
        _calibrate._probe(N, jax.random.key(7)),
        jax.random.normal(jax.random.key(7), (512, N)),
    )


@pytest.mark.slow
def test_sort_error_target():
    s = S.calibrate("softsort", N, 0.05, op="sort")
    x = jax.random.normal(jax.random.key(12), (96, N))
    sort = jax.jit(lambda x, s: S.sort(x, softness=s, method="softsort"))
    mae = float(jnp.mean(jnp.abs(sort(x, s) - jnp.sort(x))))
    assert abs(mae - 0.05) <= 0.005


def test_calibrate_bad_arguments():
    with pytest.raises(ValueError, match="target_rank_error"):
        S.calibrate("pav", N, 0.0)
    with pytest.raises(ValueError, match="target_rank_error"):
        S.calibrate("pav", N, -1.0)
    with pytest.raises(ValueError, match="target_rank_error"):
        S.calibrate("pav", N, float("nan"))
    with pytest.raises(TypeError, match="target_rank_error"):
        S.calibrate("pav", N, "0.5")
    with pytest.raises(ValueError, match="method"):
        S.calibrate("bogus", N)
    with pytest.raises(ValueError, match="op"):
        S.calibrate("pav", N, op="median")
    with pytest.raises(ValueError, match="`n`"):
        S.calibrate("pav", 1)
    with pytest.raises(TypeError, match="`n`|'n'"):
        S.calibrate("pav", 64.0)  # (jaxtyping's hook names it 'n')
    with pytest.raises(TypeError, match="key"):
        S.calibrate("pav", N, key=0)
    with pytest.raises(TypeError, match="seed"):
        S.calibrate("pav", N, seed=0)  # the numpy seed is gone: key= only
    with pytest.raises(ValueError, match="reachable"):
        S.calibrate("neuralsort", N, 10.0 * N)  # beyond the fully blurred error ~ n / 4
