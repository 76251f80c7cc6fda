"""Oracles for jaxkit.soft's PAV (isotonic regression): closed forms, the solvers against a
NumPy reference, the custom JVP against an unrolled min-max formula, Jacobian structure."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.soft as S
from jaxkit.soft import _pav


def test_blondel_closed_forms():
    # inputs scaled in NumPy (eager jax.numpy glue compiles a program per op)
    rho = np.arange(1.0, 4.0, dtype=np.float32)
    x = np.array([5.0, 1, 2], np.float32)

    def P(z, w, **kw):
        return _pav.project_permutahedron(jnp.asarray(z), jnp.asarray(w), **kw)

    np.testing.assert_allclose(P(rho / 1.0, x), [5 / 3, 8 / 3, 11 / 3], rtol=1e-5)
    np.testing.assert_allclose(P(rho / 0.1, x), [1, 2, 5], rtol=1e-6)
    np.testing.assert_allclose(P(x / 2.0, rho), [3, 1.25, 1.75], rtol=1e-6)
    np.testing.assert_allclose(P(x / 1.0, rho), [3, 1, 2], rtol=1e-6)
    np.testing.assert_allclose(P(x / 1.0, rho, reg="kl"), [3, 1, 2], rtol=1e-5)
    x9 = jnp.array([8.0, 0, 5, 3, 2, 1, 6, 7, 9])
    r9 = jnp.asarray(np.arange(1.0, 10.0, dtype=np.float32))
    np.testing.assert_allclose(P(x9, r9), [8, 1, 5, 4, 3, 2, 6, 7, 9], rtol=1e-6)
    np.testing.assert_allclose(P(r9, x9), np.arange(9) + 5 / 9, rtol=1e-5)
    g = jax.grad(lambda v: P(r9, v)[0])(x9)
    np.testing.assert_allclose(g, np.full(9, 1 / 9), rtol=1e-5)


def _pav_np(y):
    out = []
    for v in y:
        out.append([v, 1])
        while len(out) > 1 and out[-2][0] / out[-2][1] < out[-1][0] / out[-1][1]:
            a = out.pop()
            out[-1][0] += a[0]
            out[-1][1] += a[1]
    return np.concatenate([[s / c] * c for s, c in out])


@pytest.mark.parametrize(
    "solver",
    [i if i == "hybrid" else pytest.param(i, marks=pytest.mark.slow) for i in _pav.SOLVERS],
)
def test_pav_solvers_match_reference(solver):
    rng = np.random.default_rng(0)
    # one length for the four rows: one compiled program serves every unbatched call
    cases = [
        rng.normal(size=31),
        np.round(rng.normal(size=31)),  # ties
        np.r_[np.arange(30.0), 1e3],  # adversarial: n rounds for the parallel PAV
        np.arange(31.0)[::-1],
    ]
    for y in cases:
        got = S.isotonic(jnp.asarray(y, jnp.float32), solver=solver)
        np.testing.assert_allclose(got, _pav_np(y), rtol=1e-5, atol=1e-4)
    yb = jnp.asarray(rng.normal(size=(3, 17)), jnp.float32)
    np.testing.assert_allclose(
        jax.vmap(lambda r: S.isotonic(r, solver=solver))(yb),
        np.stack([_pav_np(r) for r in np.asarray(yb)]),
        rtol=1e-5,
        atol=1e-5,
    )


def test_pav_hybrid_stack_phase_matches_reference():
    # rows longer than SMALL_N whose parallel rounds do not converge within the hybrid's
    # round cap (one more block pools per round), so its stack phase runs (and
    # "sequential" itself)
    n = _pav.SMALL_N + 72
    y = np.r_[-np.arange(n - 1.0), 1e4]
    for solver in ("hybrid", "sequential"):
        got = S.isotonic(jnp.asarray(y, jnp.float32), solver=solver)
        np.testing.assert_allclose(got, _pav_np(y), rtol=1e-5, atol=1e-3)


def test_pav_hybrid_mixed_batch_stack_phase_per_row():
    # under vmap the stack phase runs when some row needs it; rows that converged in the
    # rounds keep their partition, the others get the stack's (both against the reference)
    n = _pav.SMALL_N + 72
    rng = np.random.default_rng(3)
    # decreasing, then a large last value: the rounds pool one more block per round
    cascade = np.r_[-np.arange(n - 1.0), 1e4]
    rows = np.stack([cascade, -np.sort(rng.normal(size=n)), rng.normal(size=n), cascade[::-1]])
    _, done = jax.jit(
        jax.vmap(lambda r: _pav._rounds(r, jnp.zeros_like(r), "l2", _pav.hybrid_rounds(n)))
    )(jnp.asarray(rows, jnp.float32))
    assert not done[0] and bool(done[1]) and bool(done[3])  # a mixed batch
    got = S.isotonic(jnp.asarray(rows, jnp.float32), solver="hybrid")
    want = np.stack([_pav_np(r) for r in rows])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


def _pav_blocks_np(z, w, reg):
    """Stack PAV in float64 (decreasing; l2: mean of z - w, kl: lse z - lse w per block)."""
    blocks = []  # [size, a, b]
    for zi, wi in zip(z.astype(np.float64), w.astype(np.float64), strict=True):
        blocks.append([1, zi - wi, 1.0] if reg == "l2" else [1, zi, wi])
        while len(blocks) > 1:
            (c0, a0, b0), (c1, a1, b1) = blocks[-2], blocks[-1]
            if (a0 / b0 < a1 / b1) if reg == "l2" else (a0 - b0 < a1 - b1):
                merged = (
                    (a0 + a1, b0 + b1)
                    if reg == "l2"
                    else (np.logaddexp(a0, a1), np.logaddexp(b0, b1))
                )
                blocks[-2:] = [[c0 + c1, *merged]]
            else:
                break
    vals = [a / b if reg == "l2" else a - b for _, a, b in blocks]
    return np.repeat(vals, [c for c, _, _ in blocks])


def test_pav_heavy_pooling_matches_reference():
    # the soft sort's PAV at matched softness (n=2000, kl): ~15% of the elements pool, in
    # cascades far deeper than a few rounds; the hybrid's local phase (growing slots)
    # finishes them (rounds capped at 8: done with it, not without), and its values match
    # a float64 stack PAV
    n, s, cap = 2000, 0.48, 8
    rng = np.random.default_rng(5)
    w = -np.sort(-1 / (1 + np.exp(-rng.standard_normal((3, n)))), axis=-1).astype(np.float32)
    z = (np.arange(n)[::-1] / (n - 1) / s).astype(np.float32)

    @jax.jit
    def run(z, w):
        one = lambda r: (  # noqa: E731
            _pav.isotonic_pair(z, r, "kl", "hybrid"),
            _pav._rounds(z, r, "kl", cap)[1],
            _pav._rounds(z, r, "kl", cap, local=True)[1],
        )
        return jax.vmap(one)(w)

    kl, done_rounds, done_local = run(z, w)
    assert not np.all(done_rounds) and np.all(done_local)
    for r in range(3):
        np.testing.assert_allclose(kl[r], _pav_blocks_np(z, w[r], "kl"), rtol=1e-5, atol=1e-5)


def _unrolled(z, w, reg):
    """Min-max formula of decreasing isotonic regression, O(n^3), plain autodiff."""
    n = z.shape[0]
    rows = []
    for i in range(n):
        cands = []
        for k in range(i + 1):
            vals = []
            for j in range(i, n):
                if reg == "l2":
                    vals.append(jnp.mean(z[k : j + 1] - w[k : j + 1]))
                else:
                    vals.append(jax.nn.logsumexp(z[k : j + 1]) - jax.nn.logsumexp(w[k : j + 1]))
            cands.append(jnp.max(jnp.stack(vals)))
        rows.append(jnp.min(jnp.stack(cands)))
    return jnp.stack(rows)


@pytest.mark.slow
@pytest.mark.parametrize("reg", ["l2", "kl"])
def test_pav_custom_jvp_equals_unrolled_reference(reg):
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        z = jnp.asarray(np.sort(rng.normal(size=6))[::-1] * 3)
        w = jnp.asarray(np.sort(rng.normal(size=6))[::-1])
        f = lambda z, w: _pav.isotonic_pair(z, w, reg, "hybrid")  # noqa: E731
        g = lambda z, w: _unrolled(z, w, reg)  # noqa: E731
        np.testing.assert_allclose(f(z, w), g(z, w), rtol=1e-10)
        for argn in (0, 1):
            np.testing.assert_allclose(
                jax.jacfwd(f, argn)(z, w), jax.jacfwd(g, argn)(z, w), rtol=1e-9, atol=1e-12
            )
            np.testing.assert_allclose(
                jax.jacrev(f, argn)(z, w), jax.jacrev(g, argn)(z, w), rtol=1e-9, atol=1e-12
            )


def test_pav_jacobian_structure():
    with jax.enable_x64(True):
        x = jnp.array([0.3, -1.2, 2.0, 0.9, -0.4, 1.5, 0.25])
        # both Jacobians in one program (eagerly, the jacobians' glue compiled ~20 programs)
        J, Jr = jax.jit(
            lambda x: (
                jax.jacfwd(lambda v: S.sort(v, softness=1.0, mode="c0", standardize=False))(x),
                jax.jacrev(lambda v: S.rank(v, softness=2.0, mode="c0", standardize=False))(x),
            )
        )(x)
        J, Jr = np.asarray(J), np.asarray(Jr)
        np.testing.assert_allclose(J.sum(1), 1.0, atol=1e-12)  # rows sum to 1
        np.testing.assert_allclose(Jr.sum(1), 0.0, atol=1e-12)  # shift invariance
        np.testing.assert_allclose(Jr, Jr.T, atol=1e-12)
