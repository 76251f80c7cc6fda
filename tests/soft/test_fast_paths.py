"""Fast paths of the axiswise operators against the plain formulas they replace (float64).

Oracles: the top-k SoftSort values contract the dense soft rows of :func:`argtop_k` (the
generic simplex projection); the one-block NeuralSort soft-``|.|`` sums (custom JVP) are
checked against plain autodiff of the elementwise :func:`jaxkit.soft.abs` summed over the
row, in values, reverse and forward mode, the ``softness`` derivative and a second
derivative; so are the one-block smooth NeuralSort rank and sort (custom JVPs through mat-vecs
with the stored blocks) against the dense soft permutation matrix of the plain formula; the traced
input / softness checks still raise under ``jit(grad)``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.soft as S
from jaxkit.soft import _axis_pairwise as PW

TOL = dict(rtol=1e-9, atol=1e-9)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


def _inputs(seed, shape, draw):
    """``x`` (from ``draw``), a cotangent ``g`` and a tangent ``t`` (float64 normal)."""
    x = draw(jax.random.key(seed), shape, jnp.float64)
    g = jax.random.normal(jax.random.key(seed + 1), shape, jnp.float64)
    return x, g, jax.random.normal(jax.random.key(seed + 2), shape, jnp.float64)


def _same_derivatives(fast, ref, x, s, g, t):
    """``fast(x, s)`` equals ``ref(x, s)`` in values, grads (``x``, ``s``), JVP and an HVP.

    Everything is computed in one jitted program (one compile per test instead of one per
    transformation and side, and no op-by-op dispatch of the eager reference).
    """

    @jax.jit
    def both(x, s):
        def one(f):
            jvp = jax.jvp(f, (x, s), (t, jnp.asarray(0.3, s.dtype)))
            grads = jax.grad(lambda *a: jnp.sum(g * f(*a)), (0, 1))(x, s)
            # a second derivative through the rule (forward over reverse)
            hvp = jax.jvp(jax.grad(lambda x: jnp.sum(g * f(x, s))), (x,), (t,))[1]
            return (*jvp, *grads, hvp)

        return one(fast), one(ref)

    for got, want in zip(*both(x, s), strict=True):
        _close(got, want)


@pytest.mark.parametrize(("gated", "standardize"), [(True, True), (False, False)])
def test_top_k_softsort_equals_dense_rows(gated, standardize):
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(0), (3, 50), jnp.float64)
        w = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
        t = jax.random.normal(jax.random.key(2), (3, 50), jnp.float64)
        kw = dict(softness=0.2, method="softsort", standardize=standardize)

        def fast(x):
            return S.top_k(x, 4, gated_grad=gated, **kw)[0]

        def dense(x):
            P = S.argtop_k(x, 4, **kw)
            P = P if gated else jax.lax.stop_gradient(P)
            return jnp.einsum("...kn,...n->...k", P, x)

        @jax.jit  # values, gradient and JVP of both sides in one program
        def both(x):
            return [
                (f(x), jax.grad(lambda x, f=f: jnp.sum(w * f(x)))(x), jax.jvp(f, (x,), (t,))[1])
                for f in (fast, dense)
            ]

        for got, want in zip(*both(x), strict=True):
            _close(got, want)


@pytest.mark.parametrize("mode", ["smooth", "c0"])
def test_one_block_soft_abs_sums_match_autodiff(mode):
    with jax.enable_x64(True):
        xs, g, t = _inputs(3, (2, 30), jax.random.uniform)
        s = jnp.asarray(0.07)

        def ref(xs, s):
            d = xs[..., :, None] - xs[..., None, :]
            return jnp.sum(S.abs(d, softness=s, mode=mode), axis=-1)

        def fast(xs, s):
            return PW.soft_abs_sums(xs, s, mode)

        _same_derivatives(fast, ref, xs, s, g, t)


def _dense_neuralsort_rows(xs, s, descending):
    """The plain smooth NeuralSort rows ``softmax_j(-(c_i x_j + A_j) / s)`` (soft ``|.|``)."""
    n = xs.shape[-1]
    i = jnp.arange(1, n + 1, dtype=xs.dtype)
    c = (n + 1 - 2 * (i[::-1] if descending else i)).astype(xs.dtype)
    A = jnp.sum(S.abs(xs[..., :, None] - xs[..., None, :], softness=s), axis=-1)
    return jax.nn.softmax(-(c[None, :, None] * xs[..., None, :] + A[..., None, :]) / s, axis=-1)


@pytest.mark.parametrize("descending", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_one_block_neuralsort_rank_matches_dense_formula(descending):
    with jax.enable_x64(True):
        x, g, t = _inputs(6, (2, 24), jax.random.normal)
        s = jnp.asarray(0.05)
        i = jnp.arange(1, x.shape[-1] + 1, dtype=x.dtype)

        @jax.jit
        def ref(x, s):  # the dense soft permutation matrix, column-normalised
            P = _dense_neuralsort_rows(x, s, descending)
            return jnp.einsum("...ij,i->...j", P, i) / jnp.sum(P, axis=-2)

        def fast(x, s):
            kw = dict(softness=s, method="neuralsort", standardize=False)
            return S.rank(x, descending=descending, **kw)

        _same_derivatives(fast, ref, x, s, g, t)


@pytest.mark.parametrize(
    ("descending", "gated"),
    [(False, True), pytest.param(True, True, marks=pytest.mark.slow),
     pytest.param(False, False, marks=pytest.mark.slow)],
)  # fmt: skip
def test_one_block_neuralsort_sort_matches_dense_formula(descending, gated):
    with jax.enable_x64(True):
        x, g, t = _inputs(8, (2, 24), jax.random.normal)
        s = jnp.asarray(0.05)

        @jax.jit
        def ref(x, s):  # rows of the squashed copy applied to x itself
            m = jnp.mean(x, axis=-1, keepdims=True)
            xs = jax.nn.sigmoid(
                (x - m) / jnp.sqrt(jnp.mean((x - m) ** 2, -1, keepdims=True) + 1e-6)
            )
            P = _dense_neuralsort_rows(xs, s, descending)
            P = P if gated else jax.lax.stop_gradient(P)
            return jnp.einsum("...ij,...j->...i", P, x)

        def fast(x, s):
            kw = dict(softness=s, method="neuralsort", gated_grad=gated)
            return S.sort(x, descending=descending, **kw)

        _same_derivatives(fast, ref, x, s, g, t)


def test_traced_checks_survive_grad():
    x = np.array([[0.3, -1.0, 2.0, 0.5]], np.float32)  # NumPy glue: no eager op programs
    f = jax.jit(jax.grad(lambda x, s: jnp.sum(S.top_k(x, 2, softness=s, method="softsort")[0])))
    assert np.isfinite(f(x, 0.1)).all()
    xnan = x.copy()
    xnan[0, 1] = np.nan
    with pytest.raises(Exception, match="finite"):
        jax.block_until_ready(f(xnan, 0.1))
    with pytest.raises(Exception, match="softness"):
        jax.block_until_ready(f(x, -1.0))


def test_traced_check_keeps_signed_zeros():
    x = jnp.asarray([-0.0, 1.0, -2.0])
    out = jax.jit(lambda x: S.sort(x, mode="hard"))(x)
    assert np.signbit(np.asarray(out)).tolist() == [True, True, False]
