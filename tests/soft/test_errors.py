"""Bad arguments of the axiswise soft operators, eagerly and under jit (issue 13, items 2/12).

Python-level types raise ``TypeError``, bad values ``ValueError``, naming the argument;
traced hyperparameters (``softness``, ``q``/``p``) reach a guard, NaN included, instead of
giving a silent wrong result (a wrapped quantile index, a NaN sort).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.soft as S

X = jnp.array([[0.3, -1.2, 2.0, 0.9, -0.4], [1.0, 0.2, -0.7, -2.0, 0.6]])
BAD_SOFTNESS = [0.0, -0.5, float("nan")]


@pytest.mark.parametrize("s", BAD_SOFTNESS)
def test_bad_softness_eager(s):
    for f in (S.sort, S.rank, lambda x, **k: S.top_k(x, 2, **k), S.argmax):
        with pytest.raises(ValueError, match="softness"):
            f(X, softness=s)


def test_bad_softness_traced():
    f = jax.jit(lambda x, s: S.sort(x, softness=s))
    g = jax.jit(lambda x, s: S.argsort(x, softness=s, method="softsort"))
    np.testing.assert_allclose(f(X, 0.3), S.sort(X, softness=0.3), rtol=1e-5)  # a good one runs
    for s in BAD_SOFTNESS:
        with pytest.raises(Exception, match="softness"):
            jax.block_until_ready(f(X, s))
        with pytest.raises(Exception, match="softness"):
            jax.block_until_ready(g(X, s))


def test_softness_wrong_type():
    for s in ("0.1", None, True):
        with pytest.raises(TypeError, match="softness"):
            S.sort(X, softness=s)
        with pytest.raises(TypeError, match="softness"):
            S.argtop_k(X, 2, softness=s)


@pytest.mark.parametrize("q", [-0.5, 1.5, float("nan")])
def test_bad_q_eager(q):
    with pytest.raises(ValueError, match="`q`"):
        S.quantile(X, q, axis=-1)
    with pytest.raises(ValueError, match="`q`"):
        S.argquantile(X, jnp.array([0.2, q]), axis=-1)
    with pytest.raises(ValueError, match="`p`"):
        S.percentile(X, 100 * q, axis=-1)


def test_bad_q_traced():
    f = jax.jit(lambda x, q: S.quantile(x, q, axis=-1, method="softsort"))
    g = jax.jit(lambda x, p: S.argpercentile(x, p, axis=-1))
    np.testing.assert_allclose(f(X, 0.5), S.quantile(X, 0.5, axis=-1, method="softsort"), rtol=1e-6)
    for q in (-0.5, 1.5, float("nan")):  # -0.5 used to wrap to an index
        with pytest.raises(Exception, match="`q`"):
            jax.block_until_ready(f(X, q))
        with pytest.raises(Exception, match="`p`"):
            jax.block_until_ready(g(X, 100 * q))


def test_static_ints_are_python_ints():
    # (under the test suite's jaxtyping hook the annotation check names 'k' first)
    with pytest.raises(TypeError, match="`k`|'k'"):
        S.top_k(X, 2.0)
    with pytest.raises(TypeError, match="`k`"):
        S.argtop_k(X, True)
    with pytest.raises(ValueError, match="`k`"):
        S.top_k(X, 0)
    with pytest.raises(ValueError, match="`k`"):
        S.top_k(X, 6)
    with pytest.raises(TypeError, match="`window`|'window'"):
        S.sort(X, method="neuralsort", window=1.5)
    with pytest.raises(ValueError, match="`window`"):
        S.rank(X, method="neuralsort", window=-1)
    with pytest.raises(TypeError, match="`axis`|'axis'"):
        S.sort(X, axis=1.0)
    with pytest.raises(TypeError, match="`descending`|'descending'"):
        S.sort(X, descending=1)


def test_unknown_options_list_choices():
    for kw, name in [
        (dict(solver="fast"), "solver"),
        (dict(method="bogo"), "method"),
        (dict(mode="c3"), "mode"),
        (dict(network="shell"), "network"),
        (dict(abs_mode="fuzzy", method="neuralsort"), "abs_mode"),
    ]:
        with pytest.raises(ValueError, match=name) as e:
            S.sort(X, **kw)
        assert "hybrid" in str(e.value) or name != "solver"
    with pytest.raises(ValueError, match="reg"):
        S.project_permutahedron(X, X, reg="l1")
    with pytest.raises(ValueError, match="solver"):
        S.isotonic(X, solver="pool")
    with pytest.raises(TypeError, match="impl"):
        S.sort(X, impl="hybrid")  # renamed to `solver`


def test_ot_kwargs():
    kw = dict(method="ot", softness=0.01)
    with pytest.raises(ValueError, match="ot_kwargs"):
        S.rank(X, ot_kwargs={"tol": 1e-3}, **kw)
    with pytest.raises(TypeError, match="ot_kwargs"):
        S.rank(X, ot_kwargs={"sinkhorn_max_iter": 2.5}, **kw)
    full = S.rank(X, **kw)
    # one Sinkhorn iteration is far from converged: the limit reaches the solver
    short = S.rank(X, ot_kwargs={"sinkhorn_max_iter": 1}, **kw)
    assert np.max(np.abs(np.asarray(short) - np.asarray(full))) > 1e-3  # NumPy: no glue programs


@pytest.mark.slow
def test_ot_kwargs_defaults_and_pnorm_keys():
    kw = dict(method="ot", softness=0.01)
    same = S.rank(X, ot_kwargs={"sinkhorn_tol": 1e-6, "sinkhorn_max_iter": 5000}, **kw)
    np.testing.assert_allclose(same, S.rank(X, **kw), rtol=1e-6)
    # the p-norm modes take softjax's lbfgs_* pair
    c0 = S.rank(X, ot_kwargs={"lbfgs_tol": 1e-5, "lbfgs_max_iter": 50}, mode="c0", **kw)
    np.testing.assert_allclose(c0, S.rank(X, mode="c0", **kw), atol=1e-3)
    # one iteration cannot converge: the limit takes effect, and the unconverged rows come
    # back NaN (documented), never as a silently wrong ranking
    c0_short = S.rank(X, ot_kwargs={"lbfgs_max_iter": 1}, mode="c0", **kw)
    assert bool(jnp.any(jnp.isnan(c0_short)))
    assert bool(jnp.all(jnp.isfinite(c0)))


def test_eager_calls_do_not_recompile_across_softness():
    jax.block_until_ready(S.rank(X, softness=0.3))
    with jax.log_compiles(False):
        before = S._axis_sort._rank_jit._cache_size()
        for s in (0.1, 0.2, 0.7):
            jax.block_until_ready(S.rank(X, softness=s))
        assert S._axis_sort._rank_jit._cache_size() == before


def _maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_eager_calls_leave_no_compiled_code_behind():
    # issue 13: each eager soft.sort used to map ~100 new pages of compiled code, until the
    # process hit the kernel's map limit (segfault after ~650 calls)
    jax.block_until_ready(S.sort(X))
    before = _maps()
    for _ in range(30):
        jax.block_until_ready(S.sort(X))
    assert _maps() - before < 30


def test_shapes_that_do_not_broadcast_name_the_arguments():
    # were JAX's "sub got incompatible shapes" without the argument names
    x, y = np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)
    for op in (S.greater, S.less_equal, S.equal, S.isclose):
        with pytest.raises(TypeError, match="`y`"):
            op(x, y)
    for op in (S.logical_and, S.logical_or, S.logical_xor):  # "mul got incompatible shapes"
        with pytest.raises(TypeError, match="`y`"):
            op(x * 0.5, y * 0.5)
    with pytest.raises(TypeError, match="`soft_index`.*`x`"):  # einsum's "Size of label"
        S.take_along_axis(x, np.full((5, 2, 3), 1 / 3, np.float32), axis=1)
    with pytest.raises(TypeError, match="`condition`"):
        S.where(np.ones((2, 4), np.float32), x, x)
    with pytest.raises(TypeError, match="fn"):
        S.st(3)


def test_logic_and_comparison_offsets():
    """``all``'s ``epsilon``, the comparisons' ``epsilon`` and isclose's ``rtol``/``atol``.

    Before wave 25 a NaN one gave a silent NaN (isclose in hard mode: False) and a traced
    one was not checked at all.
    """
    a = np.array([0.2, 0.9, 1.0], np.float32)
    for e in (0.0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="`epsilon`"):
            S.all(a, epsilon=e, tnorm="geometric")
    geo = jax.jit(lambda x, e: S.all(x, epsilon=e, use_geometric_mean=True))
    np.testing.assert_allclose(geo(a, 1e-10), np.prod(a) ** (1 / 3), rtol=1e-6)
    with pytest.raises(Exception, match="`epsilon`"):
        jax.block_until_ready(geo(a, np.float32(np.nan)))
    x, y = X[0], X[1]
    for e in (-1e-3, float("nan")):
        with pytest.raises(ValueError, match="`epsilon`"):
            S.greater(x, y, epsilon=e)
    for name in ("rtol", "atol"):
        with pytest.raises(ValueError, match=f"`{name}`"):
            S.isclose(x, y, mode="hard", **{name: float("nan")})
    cmp = jax.jit(lambda e, r: (S.less_equal(x, y, epsilon=e), S.isclose(x, y, rtol=r)))
    jax.block_until_ready(cmp(1e-10, 1e-5))  # good values run
    for e, r, name in ((np.nan, 1e-5, "epsilon"), (1e-10, -1.0, "rtol")):
        with pytest.raises(Exception, match=f"`{name}`"):
            jax.block_until_ready(cmp(np.float32(e), np.float32(r)))
    for f in (S.all, S.any):  # a non-bool flag chose a t-norm by truthiness
        with pytest.raises(TypeError, match="[`']use_geometric_mean[`']"):
            f(a, use_geometric_mean="no")
    with pytest.raises(TypeError, match="[`']use_geometric_mean[`']"):
        S.logical_and(a, a, use_geometric_mean=1)


def test_project_permutahedron_nonfinite_w():
    """A NaN in the generating vector gave NaN, -inf (kl) or a silent 0 (p3) (wave 25)."""
    z = np.array([0.3, 1.0, -0.5], np.float32)
    w = np.array([np.nan, 1.0, 2.0], np.float32)
    with pytest.raises(ValueError, match="`w`"):
        S.project_permutahedron(z, w, reg="p3")
    f = jax.jit(lambda w: S.project_permutahedron(z, w))
    with pytest.raises(Exception, match="`w`"):
        jax.block_until_ready(f(w))


def test_project_permutahedron_row_pairing():
    """A shared ``z`` (n,) under rows of ``w`` failed in ``take_along_axis``; rows that do
    not pair up gave JAX's vmap error, naming neither argument."""
    z = np.array([0.3, 1.0, -0.5], np.float32)
    w = np.array([[1.0, 2.0, 3.0], [0.0, 4.0, -1.0]], np.float32)
    rows = [S.project_permutahedron(z, r) for r in w]
    np.testing.assert_allclose(S.project_permutahedron(z, w), np.stack(rows), rtol=1e-6)
    with pytest.raises(TypeError, match="`z`.*`w`"):
        S.project_permutahedron(np.stack([z, z, z]), w)
