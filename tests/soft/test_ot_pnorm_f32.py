"""float32 p-norm OT solve (modes c0/c1/c2) reaches its tolerance and the float64 optimum.

Regression test for the float32 stall (tests/README.md): near the optimum the Newton
step's predicted gain in the semi-dual is below the float32 round-off of its value, and
the old line search stopped there at a column-marginal L1 error of ~3e-5 (tol 1e-6).
Oracles: the column marginal ``nu`` itself, and the float64 solve of the same rows.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit.soft._transport_pnorm import transport_pnorm as _transport_pnorm

# jitted once per (mode, tol, max_iter), as the public operators call it (eager, the solver
# would dispatch op by op and compile every primitive and loop on its own)
transport_pnorm = jax.jit(_transport_pnorm, static_argnames=("mode", "tol", "max_iter"))

ROWS, N, M, SOFTNESS = 128, 6, 4, 0.2


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, N))
    a = np.linspace(0.0, 1.0, M)
    mu = np.ones(N) / N
    nu = rng.dirichlet(np.ones(M))
    return x, a, mu, nu


# c1 (the mode that stalled at back-end O0) runs by default; c0 and c2 in the slow tier
@pytest.mark.parametrize(
    "mode,seed",
    [
        pytest.param("c0", 0, marks=pytest.mark.slow),
        ("c1", 1),
        pytest.param("c2", 2, marks=pytest.mark.slow),
    ],
)
def test_float32_solve_reaches_tol_and_float64_optimum(mode, seed):
    x, a, mu, nu = _inputs(seed)
    p32 = np.asarray(
        transport_pnorm(*(jnp.asarray(v, jnp.float32) for v in (x, a, mu, nu)), SOFTNESS, mode)
    )
    with jax.enable_x64(True):
        p64 = np.asarray(
            transport_pnorm(*(jnp.asarray(v, jnp.float64) for v in (x, a, mu, nu)), SOFTNESS, mode)
        )
    assert p32.dtype == np.float32 and np.isfinite(p32).all()
    # transport_pnorm returns n * Gamma: column sums are n * nu, row sums 1
    col = np.abs(p32.astype(np.float64).sum(axis=1) / N - nu).sum(axis=-1)
    row = np.abs(p32.astype(np.float64).sum(axis=2) - 1.0).max(axis=-1)
    assert col.max() <= 2e-6, (col.max(), int((col > 2e-6).sum()))
    assert row.max() <= 1e-5, row.max()
    col64 = np.abs(p64.sum(axis=1) / N - nu).sum(axis=-1)
    assert col64.max() <= 1e-10, col64.max()
    assert np.abs(p32 - p64).max() <= 1e-4, np.abs(p32 - p64).max()


def test_unconverged_rows_are_nan_not_wrong():
    # max_iter=2 stops most rows early: those must come back NaN, the others within the bound
    x, a, mu, nu = _inputs(3)
    p = np.asarray(
        transport_pnorm(
            *(jnp.asarray(v, jnp.float32) for v in (x, a, mu, nu)), SOFTNESS, "c1", max_iter=2
        ),
        np.float64,
    )
    bad = np.isnan(p).any(axis=(1, 2))
    assert bad.any() and np.isnan(p[bad]).all()
    col = np.abs(p.sum(axis=1) / N - nu).sum(axis=-1)
    C = (x[:, :, None] - a[None, None, :]) ** 2
    C = C - C.min(axis=2, keepdims=True)
    bound = 10 * 1e-6 + N * np.finfo(np.float32).eps * (1 + C.max(axis=(1, 2)) / SOFTNESS)
    assert (col[~bad] <= bound[~bad]).all()
