"""The internal sorting primitives behind the PAV path (stable argsort, inverse, cumsum)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit._numerics import inverse_permutation
from jaxkit.soft import _sorting
from jaxkit.soft._sorting import cumsum


def _ref_argsort(x, descending):
    x = np.asarray(x, np.float64)
    return np.argsort(-x if descending else x, axis=-1, kind="stable")


@pytest.mark.parametrize(
    "rows,n",
    [
        pytest.param(64, 2, marks=pytest.mark.slow),
        pytest.param(33, 3, marks=pytest.mark.slow),
        (64, 100),
        (4, 100),
        pytest.param(40, 512, marks=pytest.mark.slow),
        pytest.param(64, 600, marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("descending", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_stable_argsort_matches_numpy_with_ties(rows, n, descending):
    # (64, 100) and (40, 512) take the bitonic network, (4, 100) and (64, 600) the radix path
    rng = np.random.default_rng(n + rows)
    x = rng.integers(-4, 5, (rows, n)).astype(np.float32) / 2  # many ties
    x[:, : n // 2] = rng.standard_normal((rows, n // 2)).astype(np.float32)
    x[0, :2] = [0.0, -0.0]  # equal keys: must stay in index order
    got = np.asarray(jax.jit(lambda v: _sorting.stable_argsort(v, descending))(x))
    np.testing.assert_array_equal(got, _ref_argsort(x, descending))


def test_inverse_permutation_rows():
    # permutations drawn in NumPy (the eager jax.random draw compiled 9 programs of glue)
    perm = np.argsort(np.random.default_rng(0).random((64, 100)), axis=-1).astype(np.int32)
    inv = np.asarray(jax.jit(inverse_permutation)(perm))  # one program (eagerly: one per op)
    np.testing.assert_array_equal(
        np.take_along_axis(perm, inv, -1), np.broadcast_to(np.arange(100), (64, 100))
    )


@pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.slow) for n in (1, 7)] + [33])
def test_cumsum_scan_matches_numpy(n):
    cumsum_ = jax.jit(cumsum, static_argnames="reverse")  # one compile per variant, not per op
    x = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(cumsum_(jnp.asarray(x))), np.cumsum(x, -1), rtol=1e-5, atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(cumsum_(jnp.asarray(x), reverse=True)),
        np.cumsum(x[:, ::-1], -1)[:, ::-1],
        rtol=1e-5,
        atol=1e-4,
    )
    ints = (x > 0).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(cumsum_(jnp.asarray(ints))), np.cumsum(ints, -1))


def _dense_softsort(x, softness, descending, kind):
    """The n x n SoftSort definition (Prillo & Eisenschlos 2020) on squashed inputs."""
    from jaxkit.soft._common import standardize_and_squash

    xs, _, _ = standardize_and_squash(x)
    anc = jnp.sort(xs, axis=-1, descending=descending)
    if kind == "sort":
        P = jax.nn.softmax(-jnp.abs(anc[..., :, None] - xs[..., None, :]) / softness, -1)
        return P, jnp.einsum("...kn,...n->...k", P, x)
    P = jax.nn.softmax(-jnp.abs(xs[..., :, None] - anc[..., None, :]) / softness, -1)
    return P, P @ jnp.arange(1.0, x.shape[-1] + 1.0, dtype=x.dtype)


@pytest.mark.parametrize("descending", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    "softness",
    [pytest.param(1.0, marks=pytest.mark.slow), 0.05, pytest.param(0.002, marks=pytest.mark.slow)],
)
def test_fast_smooth_softsort_equals_dense_definition(descending, softness):
    import jaxkit.soft as S

    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(3), (3, 40), dtype=jnp.float64)

        @jax.jit  # the two dense references in one program (eagerly: one per op)
        def dense(x):
            return [_dense_softsort(x, softness, descending, kind)[1] for kind in ("sort", "rank")]

        for fn, want in zip((S.sort, S.rank), dense(x), strict=True):
            got = fn(x, softness=softness, method="softsort", descending=descending)
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.slow
def test_fast_softsort_ungated_gradient_is_transposed_kernel():
    import jaxkit.soft as S

    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(4), (2, 30), dtype=jnp.float64)
        w = jax.random.normal(jax.random.key(5), (2, 30), dtype=jnp.float64)
        g = jax.grad(
            lambda v: jnp.sum(w * S.sort(v, softness=0.1, method="softsort", gated_grad=False))
        )(x)
        P, _ = _dense_softsort(x, 0.1, False, "sort")
        np.testing.assert_allclose(g, jnp.einsum("bkn,bk->bn", P, w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["bitonic", "odd_even"])
def test_network_sort_values_match_scanned_sweep(kind):
    # the unrolled values path against the scanned forward sweep (values and gradients)
    from jaxkit.soft import _network as NW

    # n = 7: odd, and not a power of two (bitonic pads to 8); the unrolled program's compile
    # grows with n (13 cost ~1.4x the compile of 7)
    x = np.random.default_rng(3).normal(size=(3, 7)).astype(np.float32)
    x = jnp.asarray(1 / (1 + np.exp(-x)))

    @jax.jit  # both modes' values and gradients in one program (eagerly: ~60 op programs)
    def run(x):
        out = []
        for mode in ("smooth", "c1"):
            fwd = lambda v: NW.forward(v, 0.1, mode, kind, True)[0]  # noqa: B023, E731
            vals = lambda v: NW.sort_values(v, 0.1, mode, kind, True)  # noqa: B023, E731
            ga = jax.grad(lambda v: jnp.sum(jnp.sin(fwd(v))))(x)  # noqa: B023
            gb = jax.grad(lambda v: jnp.sum(jnp.sin(vals(v))))(x)  # noqa: B023
            out.append((fwd(x), vals(x), ga, gb))
        return out

    for a, b, ga, gb in run(x):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
        np.testing.assert_allclose(gb, ga, rtol=1e-5, atol=1e-5)
