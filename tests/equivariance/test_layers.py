"""Oracles for the relaxed layers (spec 1.4 item 3) and their bad inputs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.equivariance as E


def test_recm_linear_theta_zero_is_equivariant_branch(key):
    g = E.cyclic_rot2d(8, mult_in=4, mult_out=3)
    layer = E.RECMLinear(g, key=key, theta_init=0.0)
    x = jax.random.normal(jax.random.key(1), (16, g.d_in))
    y_relaxed = layer(x)
    y_strict = layer(x, relax=False)
    np.testing.assert_array_equal(np.asarray(y_relaxed), np.asarray(y_strict))
    assert float(E.equivariance_error(layer, x, g)) <= 1e-6
    # theta > 0: a real non-equivariant part of norm theta
    layer2 = E.RECMLinear(g, key=key, theta_init=0.3)
    q = E.complement(layer2.effective_weight(), g)
    np.testing.assert_allclose(float(jnp.linalg.norm(q)), 0.3, rtol=1e-5)
    assert float(E.equivariance_error(layer2, x, g)) > 1e-2
    assert float(E.equivariance_error(lambda v: layer2(v, relax=False), x, g)) <= 1e-6


def test_recm_linear_bias_invariant_and_batching(key):
    g = E.c4_regular(channels_in=2, channels_out=2)
    layer = E.RECMLinear(g, key=key, use_bias=True, theta_init=0.0)
    layer = eqx.tree_at(lambda m: m.bias, layer, jnp.arange(8.0))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((5, g.d_in), np.float32))
    # one program (eager, the metric and the call compiled op by op)
    err, y_vmap, y = eqx.filter_jit(
        lambda m, v: (E.equivariance_error(m, v, g), jax.vmap(m)(v), m(v))
    )(layer, x)
    assert float(err) <= 1e-6
    np.testing.assert_allclose(y_vmap, y, rtol=1e-6, atol=1e-6)
    grads = jax.jit(jax.grad(lambda m: jnp.sum(m(x) ** 2)))(layer)  # eager: ~40 compiles
    assert jax.tree.structure(grads) == jax.tree.structure(layer)
    with pytest.raises(TypeError, match="`x`"):
        layer(jnp.ones((3, 5)))


def test_theta_bounds_errors(key):
    g = E.so2_rot2d()
    with pytest.raises(ValueError, match="theta_init"):
        E.RECMLinear(g, key=key, theta_init=-0.1)
    with pytest.raises(ValueError, match="theta_init"):
        E.RECMe3nnLinear("1x0e", "1x0e", key=key, theta_init=float("nan"))
    with pytest.raises(ValueError, match="theta_max"):
        E.recm_modulation(0.1, theta_max=0.0)
    with pytest.raises(ValueError, match="theta"):
        E.recm_modulation(0.1, theta_max=0.4).init({"theta": jnp.asarray(0.5)})


@pytest.mark.parametrize("lifting", [pytest.param(True, marks=pytest.mark.slow), False])
def test_c4_group_conv_equivariance(lifting, key):
    cin = 2
    conv = E.RECMGroupConvC4(cin, 3, 3, key=key, lifting=lifting, theta_init=0.0)
    shape = (cin, 9, 9) if lifting else (cin, 4, 9, 9)
    x = jax.random.normal(jax.random.key(1), (2, *shape))
    acts = E.c4_image_actions(regular_in=not lifting, regular_out=True)
    err = jax.jit(lambda m, v: E.equivariance_error(jax.vmap(m), v, acts))
    assert float(err(conv, x)) <= 1e-5
    both = jax.jit(lambda m, v: (jax.vmap(m)(v), jax.vmap(lambda u: m(u, relax=False))(v)))
    y_relaxed, y_strict = both(conv, x)
    np.testing.assert_array_equal(np.asarray(y_relaxed), np.asarray(y_strict))
    relaxed = E.RECMGroupConvC4(cin, 3, 3, key=key, lifting=lifting, theta_init=0.5)
    assert float(err(relaxed, x)) > 1e-2

    @jax.jit  # one program (eager, each op compiled alone)
    def kernel_parts(m):
        k = m.effective_kernel()
        pk = E.c4_conv_reynolds(k, lifting=lifting)
        return jnp.linalg.norm(k - pk), pk, E.c4_conv_reynolds(pk, lifting=lifting)

    q_norm, pk, ppk = kernel_parts(relaxed)
    np.testing.assert_allclose(float(q_norm), 0.5, rtol=1e-5)
    np.testing.assert_allclose(ppk, pk, atol=1e-6)


@pytest.mark.parametrize("lifting", [pytest.param(True, marks=pytest.mark.slow), False])
def test_c4_kernel_transform_intertwines(lifting, key):
    """conv(T_r K, g_r f) = g_r conv(K, f): the identity behind CR's conv penalty."""
    gi = 1 if lifting else 4
    kern = jax.random.normal(key, (2, 4, 3, gi, 3, 3))
    f = jax.random.normal(jax.random.key(1), (3, 7, 7) if lifting else (3, 4, 7, 7))

    def conv(k, v):
        y = jax.lax.conv_general_dilated(
            v.reshape(1, 3 * gi, 7, 7), k.reshape(8, 3 * gi, 3, 3), (1, 1), "SAME"
        )
        return y.reshape(2, 4, 7, 7)

    @jax.jit
    def gap(k, v):  # max |conv(T_r K, g_r f) - g_r conv(K, f)| over r = 1, 2, 3
        diffs = [
            conv(
                E.c4_kernel_transform(k, r, lifting=lifting),
                E.c4_image_act(v, r, regular=not lifting),
            )
            - E.c4_image_act(conv(k, v), r, regular=True)
            for r in range(1, 4)
        ]
        return jnp.max(jnp.abs(jnp.stack(diffs)))

    assert float(gap(kern, f)) <= 1e-4
    # not an identity map: a generic kernel changes under a quarter turn
    turned = E.c4_kernel_transform(kern, 1, lifting=lifting)
    assert np.max(np.abs(np.asarray(turned) - np.asarray(kern))) > 0.1  # NumPy: no compile


def test_c4_conv_bad_inputs(key):
    with pytest.raises(ValueError, match="kernel_size"):
        E.RECMGroupConvC4(1, 1, 4, key=key)
    conv = E.RECMGroupConvC4(1, 1, 3, key=key, lifting=True)
    with pytest.raises(TypeError, match="`x`"):
        conv(jnp.ones((1, 8, 7)))
    with pytest.raises(TypeError, match="`x`"):
        conv(jnp.ones((2, 8, 8)))


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_e3nn_layer_matches_e3nn_linear(key):
    import e3nn_jax as e3nn  # imported here: ~2 s per xdist worker at collection

    irr_in, irr_out = "4x0e+3x1o+2x2e", "3x0e+2x1o+2x2e"
    layer = E.RECMe3nnLinear(irr_in, irr_out, key=key, theta_init=0.0)
    x = e3nn.normal(irr_in, jax.random.key(2), (6,))
    ref = e3nn.equinox.Linear(
        irreps_out=irr_out,
        irreps_in=irr_in,
        force_irreps_out=True,
        key=jax.random.key(3),
    )
    ref = eqx.tree_at(lambda m: m._weights, ref, layer.linear._weights)
    y_ref = ref(x)
    np.testing.assert_allclose(layer(x).array, y_ref.array, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(layer(x, relax=False).array), np.asarray(y_ref.array))
    assert layer(x).irreps == y_ref.irreps
    # theta = 0 is the equivariant branch exactly; O(3) equivariance of the output
    g = layer.group
    err = jax.jit(
        lambda m, v, k: E.equivariance_error(lambda u: m(u).array, v, g, key=k, n_samples=8)
    )
    assert float(err(layer, x.array, jax.random.key(4))) <= 1e-5
    relaxed = E.RECMe3nnLinear(irr_in, irr_out, key=key, theta_init=0.4)
    q = E.complement(relaxed.effective_weight(), g)
    np.testing.assert_allclose(float(jnp.linalg.norm(q)), 0.4, rtol=1e-5)


def test_e3nn_irreps_mismatch(key):
    import e3nn_jax as e3nn

    layer = E.RECMe3nnLinear("2x0e+1x1o", "1x1o", key=key)
    with pytest.raises(ValueError, match="irreps mismatch"):
        layer(e3nn.normal("2x0e+1x1e", key))
    with pytest.raises(TypeError, match="`x`"):
        layer(jnp.ones((4,)))
    with pytest.raises(ValueError, match="irreps"):
        E.RECMe3nnLinear("2xq", "1x1o", key=key)


def test_relaxation_levels_and_set_theta(key):
    g = E.cyclic_rot2d(4)
    model = [
        E.RECMLinear(g, key=key, theta_init=0.2),
        E.RECMLinear(g, key=jax.random.key(1), theta_init=0.7),
    ]
    levels = E.relaxation_levels(model)
    assert sorted(levels) == ["[0]", "[1]"]
    np.testing.assert_allclose([float(levels[k][0]) for k in ("[0]", "[1]")], [0.2, 0.7])
    zero = E.set_theta(model, 0.0)
    assert all(float(m.theta) == 0.0 for m in zero)


def test_layer_inits_are_the_documented_draws(key):
    """The jitted initialiser draws what the constructors document: ``split(key)``, ``A``
    scaled (``1/sqrt(d_in)``; He x2 for the conv), ``B ~ N(0, 1)``, zero bias (bitwise)."""
    g = E.cyclic_rot2d(4, mult_in=2, mult_out=3)
    lin = E.RECMLinear(g, key=key, use_bias=True)
    conv = E.RECMGroupConvC4(2, 3, 3, key=key)

    @jax.jit
    def documented(key):
        ka, kb = jax.random.split(key)
        shape = (3, 4, 2, 4, 3, 3)
        return (
            float(1.0 / np.sqrt(g.d_in)) * jax.random.normal(ka, (g.d_out, g.d_in)),
            jax.random.normal(kb, (g.d_out, g.d_in)),
            float(2.0 * np.sqrt(2.0 / (2 * 4 * 9))) * jax.random.normal(ka, shape),
            jax.random.normal(kb, shape),
        )

    want = documented(key)
    got = (lin.weight_eq, lin.weight_free, conv.weight_eq, conv.weight_free)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.any(np.asarray(lin.bias)) and not np.any(np.asarray(conv.bias))
    assert lin.weight_eq.dtype == conv.bias.dtype == jnp.float32
