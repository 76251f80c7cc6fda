"""jaxkit.soft elementwise operators: softness guards (eager and jit), softjax p-norm modes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.soft as S

X = jnp.array([-0.9, -0.21, 0.0, 0.13, 0.7])
Y = jnp.array([0.1, -0.3, 0.0, 0.4, 0.2])

# every elementwise op with a softness, as f(softness, mode)
OPS = {
    "sigmoidal": lambda s, m="smooth": S.sigmoidal(X, s, m),
    "softrelu": lambda s, m="smooth": S.softrelu(X, s, m),
    "heaviside": lambda s, m="smooth": S.heaviside(X, s, m),
    "sign": lambda s, m="smooth": S.sign(X, s, m),
    "abs": lambda s, m="smooth": S.abs(X, s, m),
    "relu": lambda s, m="smooth": S.relu(X, s, m),
    "clip": lambda s, m="smooth": S.clip(X, -0.5, 0.5, s, m),
    "round": lambda s, m="smooth": S.round(X, s, m),
    "greater": lambda s, m="smooth": S.greater(X, Y, s, m),
    "greater_equal": lambda s, m="smooth": S.greater_equal(X, Y, s, m),
    "less": lambda s, m="smooth": S.less(X, Y, s, m),
    "less_equal": lambda s, m="smooth": S.less_equal(X, Y, s, m),
    "equal": lambda s, m="smooth": S.equal(X, Y, s, m),
    "not_equal": lambda s, m="smooth": S.not_equal(X, Y, s, m),
    "isclose": lambda s, m="smooth": S.isclose(X, Y, s, mode=m),
}
BAD = [0.0, -0.1, float("nan"), float("inf")]


@pytest.mark.parametrize("name", sorted(OPS))
def test_softness_guard_eager_and_jit(name):
    f = OPS[name]
    for bad in BAD:
        with pytest.raises(ValueError, match="softness"):
            f(bad)
    with pytest.raises(TypeError, match="softness"):
        f("0.1")
    with pytest.raises(ValueError, match="mode"):
        f(0.1, "soft")
    g = jax.jit(f)  # traced softness: a run-time error, never a silent NaN
    assert bool(jnp.all(jnp.isfinite(g(0.3))))
    for bad in BAD:
        with pytest.raises(Exception, match="softness"):  # noqa: B017 (JaxRuntimeError)
            jax.block_until_ready(g(bad))


def test_other_static_and_traced_arguments():
    with pytest.raises(TypeError, match="neighbor_radius"):
        S.round(X, 0.1, neighbor_radius=2.0)
    with pytest.raises(ValueError, match="neighbor_radius"):
        S.round(X, 0.1, neighbor_radius=-1)
    with pytest.raises(TypeError, match="gated"):
        S.relu(X, 0.1, gated="yes")
    with pytest.raises(TypeError, match="epsilon"):
        S.greater(X, Y, 0.1, epsilon="1e-10")
    with pytest.raises(TypeError, match="rtol"):
        S.isclose(X, Y, 0.1, rtol=None)
    with pytest.raises(ValueError, match="'hard'"):  # the modes are listed
        S.relu(X, 0.1, mode="cauchy")
    # continuous hyperparameters are traced: one compilation across values
    traces = []

    @jax.jit
    def f(s, eps):
        traces.append(None)
        return S.greater(X, Y, s, "c1", eps)

    f(0.2, 1e-3), f(0.4, 1e-2)
    assert len(traces) == 1


# ----------------------------------------------------------------------------- softjax p-norm


def _entmax_np(z, power):
    """argmax_{y in simplex} of the p-norm regularised problem, by bisection on theta:
    y = max(z - theta, 0)^power / normaliser with sum(max(z - theta, 0)^power) = 1."""
    lo, hi = np.max(z) - 1.0 - 1e-9, np.max(z)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.sum(np.maximum(z - mid, 0.0) ** power) > 1.0:
            lo = mid
        else:
            hi = mid
    t = np.maximum(z - 0.5 * (lo + hi), 0.0) ** power
    return t / t.sum()


@pytest.mark.parametrize("mode,power", [("_c1_pnorm", 2), ("_c2_pnorm", 3)])
def test_pnorm_sigmoidal_is_entmax_of_zero_and_x(mode, power):
    # softjax: sigmoidal(x, s, "_c{1,2}_pnorm") = argmax([0, x], softness=5 s, mode="c{1,2}")[1]
    s = 0.1
    xs = np.linspace(-0.7, 0.7, 57)
    with jax.enable_x64(True):
        got = np.asarray(S.sigmoidal(jnp.asarray(xs), s, mode))
    want = np.array([_entmax_np(np.array([0.0, x / (5 * s)]), power)[1] for x in xs])
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert got[0] == 0.0 and got[-1] == 1.0  # flat beyond |x| = 5 s


@pytest.mark.parametrize("mode", ["_c1_pnorm", "_c2_pnorm"])
def test_pnorm_softrelu_is_integral_of_sigmoidal(mode):
    s = 0.2
    with jax.enable_x64(True):
        xs = np.linspace(-1.5, 1.5, 3001)
        sig = np.asarray(S.sigmoidal(jnp.asarray(xs), s, mode))
        relu = np.asarray(S.softrelu(jnp.asarray(xs), s, mode))
        # trapezoid integral of the step from -1.5 (where softrelu is 0)
        integral = np.concatenate([[0.0], np.cumsum((sig[1:] + sig[:-1]) / 2 * np.diff(xs))])
        np.testing.assert_allclose(relu, integral, atol=1e-6)
        # gradients: finite everywhere (incl. the kinks at |x| = 5 s and x = 0)
        # both derivatives in one program (eagerly: one program per op of each pass)
        g, g2 = jax.jit(
            lambda v, z: (
                jax.vmap(jax.grad(lambda v: S.softrelu(v, s, mode)))(v),
                jax.grad(lambda v: S.sigmoidal(v, s, mode))(z),
            )
        )(np.array([-1.0, 0.0, 1.0]), np.float64(0.0))
        np.testing.assert_allclose(g, [0.0, 0.5, 1.0], atol=1e-12)
        assert np.isfinite(float(g2)) and float(g2) > 0
    # the modes pass through the step-based operators, and the hard limit holds
    xn = np.array([-2.0, -0.5, 0.3, 1.7], np.float32)
    x = jnp.asarray(xn)
    np.testing.assert_allclose(S.heaviside(x, 1e-4, mode), xn > 0, atol=1e-6)
    np.testing.assert_allclose(S.relu(x, 1e-4, mode), np.maximum(xn, 0), atol=1e-3)
