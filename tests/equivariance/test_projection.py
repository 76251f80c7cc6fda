"""Oracles for groups, Reynolds projections, bases and the equivariance metric (spec 1.4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.equivariance as E

GROUPS = {
    "C5": lambda: E.cyclic_rot2d(5, mult_in=3, mult_out=2),
    "C2": lambda: E.cyclic_rot2d(2, mult_in=2, mult_out=3),
    "C8": lambda: E.cyclic_rot2d(8, mult_in=4, mult_out=3),
    "SO2": lambda: E.so2_rot2d(mult_in=3, mult_out=2),
    "C4reg": lambda: E.c4_regular(channels_in=2, channels_out=3),
    "C4lift": lambda: E.c4_regular(channels_in=3, channels_out=2, trivial_in=True),
    "O3": lambda: E.o3_irreps("2x0e+1x1o+1x2e+1x1e", "1x0e+2x1o+1x2e"),
    "SO3": lambda: E.o3_irreps("1x0e+1x1o+1x1e", "2x1o+1x0o", parity=False),
}


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)  # NumPy: nothing compiles
    return float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-30))


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in ("SO3", "O3") else n for n in sorted(GROUPS)],
)
def test_projector_idempotent_self_adjoint_commutes(name, key):
    g = GROUPS[name]()

    @jax.jit  # one program per group (eager, every op compiled alone: 16-20 compiles)
    def quantities(key):
        kw, kv, kg = jax.random.split(key, 3)
        w = jax.random.normal(kw, (g.d_out, g.d_in))
        v = jax.random.normal(kv, (g.d_out, g.d_in))
        p = E.reynolds(w, g)
        rin, rout = g.representatives(key=kg, n=64)
        return w, v, p, E.reynolds(p, g), E.reynolds(v, g), rin, rout, E.complement(w, g)

    # the checks' arithmetic in NumPy: no eager jax op compiles
    w, v, p, pp, pv, rin, rout, q = (np.asarray(a, np.float64) for a in quantities(key))
    assert _rel(pp, p) <= 1e-5
    lhs, rhs = np.sum(p * v), np.sum(w * pv)
    assert abs(float(lhs - rhs)) <= 1e-5 * float(np.linalg.norm(w) * np.linalg.norm(v))
    comm = np.einsum("gij,jk->gik", rout, p) - np.einsum("ij,gjk->gik", p, rin)
    assert float(np.max(np.abs(comm))) <= 1e-5 * float(np.max(np.abs(p)))
    assert abs(float(np.sum(q * p))) <= 1e-5 * float(np.sum(w * w))
    np.testing.assert_allclose(q + p, w, rtol=1e-6, atol=1e-6)
    # a non-equivariant matrix really is changed (C_2 = {I, -I} on R^2: P = identity)
    if name != "C2":
        assert _rel(p, w) > 1e-2


# continuous groups only: a finite group's Reynolds operator is already the exact mean over
# its elements (the C5 case returned before any check; the commutation test covers it)
@pytest.mark.parametrize("name", ["O3", "SO2"])
def test_closed_form_equals_monte_carlo(name, key):
    g = GROUPS[name]()
    w = jax.random.normal(key, (g.d_out, g.d_in))
    mc = jax.jit(lambda a, k: E.reynolds_mc(a, g, key=k, n_samples=4096))(w, jax.random.key(7))
    # Monte-Carlo error ~ |w| / sqrt(4096): the spec's 2e-2 on the relative norm.
    assert _rel(mc, E.reynolds(w, g)) <= 2e-2 * np.sqrt(g.d_in * g.d_out) / 4


def test_o3_parity_matters():
    o3 = E.o3_irreps("1x1o", "1x1e")
    so3 = E.o3_irreps("1x1o", "1x1e", parity=False)
    w = jnp.eye(3)
    assert float(jnp.abs(E.reynolds(w, o3)).max()) == 0.0
    np.testing.assert_allclose(E.reynolds(w, so3), w, atol=1e-6)


@pytest.mark.parametrize("n", [3, 4, 7])
@pytest.mark.parametrize("k,m", [(1, 1), (2, 3)])
def test_basis_dims_rotations(n, k, m):
    assert E.equivariant_basis(E.cyclic_rot2d(n, mult_in=k, mult_out=m)).shape[0] == 2 * k * m
    assert E.equivariant_basis(E.so2_rot2d(mult_in=k, mult_out=m)).shape[0] == 2 * k * m
    assert E.equivariant_basis(E.cyclic_rot2d(2, mult_in=k, mult_out=m)).shape[0] == 4 * k * m


def test_basis_dims_e3nn_and_orthonormal(key):
    import e3nn_jax as e3nn  # imported here: ~2 s per xdist worker at collection

    irr_in, irr_out = "3x0e+2x1o+1x2e", "2x0e+1x1o+2x2e+1x1e"
    g = E.o3_irreps(irr_in, irr_out)
    basis = E.equivariant_basis(g)
    lin = e3nn.equinox.Linear(irreps_out=irr_out, irreps_in=irr_in, force_irreps_out=True, key=key)
    n_params = sum(int(np.prod(w.shape)) for w in lin._weights.values())
    assert basis.shape[0] == 3 * 2 + 2 * 1 + 1 * 2 == n_params
    gram = np.einsum("aij,bij->ab", basis, basis)
    np.testing.assert_allclose(gram, np.eye(basis.shape[0]), atol=1e-10)
    for b in basis[:4]:
        np.testing.assert_allclose(E.reynolds(jnp.asarray(b, jnp.float32), g), b, atol=1e-6)


def test_basis_finite_spans_projection(key):
    g = GROUPS["C4reg"]()
    basis = E.equivariant_basis(g)
    assert basis.shape[0] == 4 * 2 * 3  # Hom of regular reps: |G| * c_in * c_out
    w = np.asarray(jax.random.normal(key, (g.d_out, g.d_in)), np.float64)
    coef = np.einsum("aij,ij->a", basis, w)
    np.testing.assert_allclose(
        np.einsum("a,aij->ij", coef, basis),
        E.reynolds(jnp.asarray(w, jnp.float32), g),
        atol=1e-5,
    )


def test_equivariance_error_metric(key):
    g = GROUPS["C8"]()
    x = jax.random.normal(key, (16, g.d_in))
    w = jax.random.normal(jax.random.key(1), (g.d_out, g.d_in))
    assert float(E.equivariance_error(lambda v: v @ E.reynolds(w, g).T, x, g)) <= 1e-6
    assert float(E.equivariance_error(lambda v: v @ w.T, x, g)) > 0.1
    so2 = GROUPS["SO2"]()
    x2 = jax.random.normal(key, (16, so2.d_in))
    err = jax.jit(
        lambda a, k: E.equivariance_error(
            lambda v: v @ E.reynolds(jnp.ones((so2.d_out, so2.d_in)), so2).T,
            a,
            so2,
            key=k,
            n_samples=16,
        )
    )(x2, jax.random.key(3))
    assert float(err) <= 1e-5
    with pytest.raises(ValueError, match="key"):
        E.equivariance_error(lambda v: v, x2, so2)


def test_bad_inputs():
    r = np.stack([np.eye(2), np.array([[2.0, 0.0], [0.0, 1.0]])])
    with pytest.raises(ValueError, match="orthogonal"):
        E.finite_group(r, np.stack([np.eye(1), np.eye(1)]))
    with pytest.raises(TypeError, match="rep_in"):
        E.finite_group(np.eye(2), np.eye(2))
    g = GROUPS["C5"]()
    with pytest.raises(TypeError, match="`w`"):
        E.reynolds(jnp.zeros((3, 3)), g)
    with pytest.raises(TypeError, match="[`']w[`']"):
        E.reynolds(jnp.zeros((g.d_out, g.d_in), jnp.int32), g)
    with pytest.raises(ValueError, match="mult_in"):
        E.cyclic_rot2d(4, mult_in=0)
    with pytest.raises(ValueError, match="irreps"):
        E.o3_irreps("3xfoo")


def test_finite_group_custom_permutation():
    # S_3 permuting 3 coordinates; Hom(perm, perm) has dimension 2.
    import itertools

    perms = [np.eye(3)[list(p)] for p in itertools.permutations(range(3))]
    g = E.finite_group(np.stack(perms), np.stack(perms), name="S3")
    assert E.equivariant_basis(g).shape[0] == 2
    assert g == E.finite_group(np.stack(perms), np.stack(perms), name="S3")
    assert hash(g) == hash(E.finite_group(np.stack(perms), np.stack(perms), name="S3"))


def test_dtype_preserved_and_jit(key):
    g = GROUPS["O3"]()
    w = jax.random.normal(key, (2, g.d_out, g.d_in))
    for dt in (jnp.float32, jnp.bfloat16):
        assert E.reynolds(w.astype(dt), g).dtype == dt
    np.testing.assert_allclose(
        jax.jit(lambda a: E.reynolds(a, g))(w), E.reynolds(w, g), rtol=1e-6, atol=1e-6
    )
