"""The c2 (q = 4) block solver: real root of ``d^3 + p d + r = 0``, ``p >= 0``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit.soft import _pav_pnorm as PN


def _cases(rng, m):
    # roots over 24 decades, p / root^2 over 16 decades, plus p = 0 and r = 0
    t = 10.0 ** rng.uniform(-6, 6, m) * rng.choice([-1.0, 1.0], m)
    q = 10.0 ** rng.uniform(-8, 8, m)
    p = np.concatenate([q * t * t, np.zeros(50), [1.0, 0.0]])
    root = np.concatenate([t, 10.0 ** rng.uniform(-6, 6, 50), [0.0, 0.0]])
    r = -(root**3 + p * root)
    return p, r


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_depressed_cubic_root(dtype):
    rng = np.random.default_rng(0)
    p, r = _cases(rng, 2000)
    with jax.enable_x64(dtype == "float64"):
        pd, rd = jnp.asarray(p.astype(dtype)), jnp.asarray(r.astype(dtype))
        # jitted: one program per dtype instead of one per op of the eager solver
        d = np.asarray(jax.jit(PN._depressed_cubic_root)(pd, rd), np.float64)
        # exact root of the rounded coefficients (float64 bisection on D^3 + pD = |r|)
        pp, rr = np.asarray(pd, np.float64), np.asarray(rd, np.float64)
    ar = np.abs(rr)
    lo, hi = np.zeros_like(ar), np.maximum(np.cbrt(ar), 1e-300)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        big = mid**3 + pp * mid > ar
        hi, lo = np.where(big, mid, hi), np.where(big, lo, mid)
    ref = -np.sign(rr) * 0.5 * (lo + hi)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(d, ref, rtol=8 * eps, atol=0)
    assert np.all(d[ar == 0] == 0)
