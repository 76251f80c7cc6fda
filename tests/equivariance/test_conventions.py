"""Foundation III conventions in equivariance: named results, errors, extras, bounded caches."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.equivariance as E


def test_haar_sample_named_and_type_errors(key):
    g = E.cyclic_rot2d(4)
    s = E.haar_sample(g, 3, key=key)
    assert isinstance(s, E.GroupSample)
    assert s.rho_in.shape == (3, 2, 2) and s.rho_out.shape == (3, 2, 2)
    with pytest.raises(TypeError, match=r"[`']n[`']"):
        E.haar_sample(g, 3.0, key=key)
    with pytest.raises(TypeError, match=r"[`']mult_in[`']"):
        E.cyclic_rot2d(4, mult_in=1.0)
    with pytest.raises(TypeError, match=r"[`']n_permutations[`']"):
        x = jnp.ones((8, g.d_in))
        E.mmd_gap(x, x, g, key=key, n_permutations=10.0)
    with pytest.raises(TypeError, match=r"[`']kernel_size[`']"):
        E.RECMGroupConvC4(1, 1, 3.0, key=key)


def test_hostile_values_raise(key):
    """NaN / zero / negative scales, int dtypes and misnamed sizes (wave-24 audit)."""
    g = E.cyclic_rot2d(4)
    w = np.eye(2, dtype=np.float32)
    with pytest.raises(ValueError, match="eps"):  # NaN direction before
        E.normalized_complement(w, g, eps=np.nan)
    with pytest.raises(ValueError, match="eps"):
        E.RECMLinear(g, key=key, eps=-1.0)
    with pytest.raises(ValueError, match="n_samples"):  # named `n` before
        E.reynolds_mc(w, g, key=key, n_samples=0)
    with pytest.raises(ValueError, match="n_samples"):  # ran with no sample before
        E.equivariance_error(lambda z: z, np.ones((4, 2), np.float32), g, key=key, n_samples=0)
    with pytest.raises(TypeError, match="dtype"):
        E.haar_sample(g, 3, key=key, dtype=jnp.int32)
    with pytest.raises(TypeError, match="kernel"):
        E.c4_conv_reynolds(np.ones((2, 3, 1, 1, 3, 3), np.float32), lifting=True)
    m = E.RECMLinear(g, key=key)
    with pytest.raises(ValueError, match="value"):
        E.set_theta(m, np.nan)
    with pytest.raises(ValueError, match="eq_weight"):
        E.rpp_penalty(m, eq_weight=np.nan)
    # traced: runtime errors naming the argument (were NaN statistics / penalties)
    x = np.ones((8, 2), np.float32)
    mmd = jax.jit(lambda b: E.mmd_gap(x, x, g, key=key, n_permutations=2, bandwidth=b).mmd2)
    with pytest.raises(Exception, match="bandwidth"):
        jax.block_until_ready(mmd(np.float32(0.0)))
    with pytest.raises(Exception, match="eq_weight"):
        jax.block_until_ready(jax.jit(lambda v: E.rpp_penalty(m, eq_weight=v))(np.nan))


def test_group_caches_are_bounded():
    for ctor in (E.cyclic_rot2d, E.so2_rot2d, E.c4_regular, E.o3_irreps):
        assert ctor.cache_info().maxsize is not None


def test_linear_gap_ridge_zero_on_degenerate_data():
    """ridge=0 on rank-deficient x: the minimum-norm least-squares map, not NaN."""
    g = E.cyclic_rot2d(4, mult_in=2, mult_out=1)
    rng = np.random.default_rng(0)  # inputs in NumPy: no eager op compiles
    z = rng.standard_normal((64, 2)).astype(np.float32)
    x = jnp.asarray(np.concatenate([z, z], axis=1))  # x^T x has rank 2 < d_in = 4
    t = jnp.asarray(rng.standard_normal((64, g.d_out)).astype(np.float32))
    got = E.linear_gap(x, t, g, ridge=0.0)
    w = np.linalg.lstsq(np.asarray(x, np.float64), np.asarray(t, np.float64), rcond=None)[0].T
    q = np.asarray(E.complement(jnp.asarray(w, jnp.float32), g))
    want = np.linalg.norm(q)
    assert np.isfinite(float(got.absolute)) and np.isfinite(float(got.relative))
    np.testing.assert_allclose(float(got.absolute), want, rtol=1e-3)
    np.testing.assert_allclose(float(got.relative), want / np.linalg.norm(w), rtol=1e-3)
    zeros, ones = np.zeros((8, g.d_in), np.float32), np.ones((8, g.d_out), np.float32)
    zero = E.linear_gap(jnp.asarray(zeros), jnp.asarray(ones), g, ridge=0.0)
    assert float(zero.absolute) == 0.0 and float(zero.relative) == 0.0
    with pytest.raises(Exception, match="ridge"):
        jax.block_until_ready(jax.jit(lambda r: E.linear_gap(x, t, g, ridge=r))(-1.0))


def test_missing_e3nn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "e3nn_jax", None)  # as if not installed
    E.o3_irreps.cache_clear()
    with pytest.raises(ImportError, match=r"pip install 'jaxkit\[equivariance\]'"):
        E.o3_irreps("1x0e+1x1o")
    E.o3_irreps.cache_clear()


def test_import_touches_no_optional_dependency():
    code = (
        "import sys; import jaxkit.equivariance; "
        "assert 'e3nn_jax' not in sys.modules, 'e3nn_jax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_recm_optimizer_traced_bad_values_raise(key):
    import equinox as eqx
    import optax

    params = eqx.filter(E.RECMLinear(E.cyclic_rot2d(4), key=key), eqx.is_inexact_array)
    grads = jax.tree.map(jnp.ones_like, params)

    @jax.jit
    def step(decay):
        tx = E.recm_optimizer(optax.sgd(0.1), learning_rate=0.1, decay=decay)
        return tx.update(grads, tx.init(params), params)[0]

    jax.block_until_ready(step(0.1))
    with pytest.raises(Exception, match="decay"):  # a NaN theta update before
        jax.block_until_ready(step(np.nan))
