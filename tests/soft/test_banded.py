"""Banded SoftSort / NeuralSort: equal to the dense path within the certified bound.

The band (and its certificate) uses the exact ``|.|``: the dense reference is called with
``abs_mode="hard"`` (the default NeuralSort uses softjax's soft ``|.|``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxkit.soft as S

OPS = [
    ("sort", (), {}),
    ("sort", (), {"descending": True}),
    ("rank", (), {}),
    ("rank", (), {"descending": True}),
    ("top_k", (4,), {}),
    ("quantile", (jnp.array([0.3, 0.75]),), {"axis": -1}),
]
SLOW = pytest.mark.slow
# default run: ascending sort and rank; the rest in `make test-slow`
OPS_P = [p if i in (0, 2) else pytest.param(*p, marks=SLOW) for i, p in enumerate(OPS)]


def _val(op, *args, **kw):
    out = getattr(S, op)(*args, **kw)
    return out[0] if op == "top_k" else out


@pytest.mark.parametrize(
    "method,op,args,kw",
    [
        p if (m, i) == ("softsort", 0) else pytest.param(*p, marks=SLOW)
        for i, o in enumerate(OPS)
        for m in ("softsort", "neuralsort")
        for p in [(m, *o)]
    ],
)
def test_banded_within_certified_bound(method, op, args, kw):
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(0), (3, 40), jnp.float64)
        hits = 0
        settings = [(0.01, 3), (0.05, 12), (0.3, 1)]

        @jax.jit  # the three settings' dense, banded and bound calls in one program
        def run(x):
            return [
                (
                    _val(op, x, *args, softness=s, method=method, abs_mode="hard", **kw),
                    _val(op, x, *args, softness=s, method=method, window=w, **kw),
                    S.banded_error_bound(op, x, *args, window=w, softness=s, method=method, **kw),
                )
                for s, w in settings
            ]

        for dense, band, bound in run(x):
            assert bound.shape == band.shape == dense.shape
            dev = np.abs(np.asarray(band) - np.asarray(dense))
            # certified in exact arithmetic; 1e-9 covers the f64 rounding of both paths
            np.testing.assert_array_less(dev, np.asarray(bound) + 1e-9)
            hits += bool(np.max(dev) > 1e-6)  # the bound is exercised, not vacuous
        assert hits >= 1


@SLOW
@pytest.mark.parametrize("method", ["softsort", "neuralsort"])
def test_banded_tight_when_bound_small(method):
    x = jax.random.normal(jax.random.key(1), (4, 64))
    s, w = (0.01, 12) if method == "neuralsort" else (0.002, 24)
    bound = S.banded_error_bound("sort", x, window=w, softness=s, method=method)
    assert float(jnp.max(bound)) < 1e-6
    np.testing.assert_allclose(
        S.sort(x, softness=s, method=method, window=w),
        S.sort(x, softness=s, method=method, abs_mode="hard"),
        rtol=1e-5,  # f32 round-off of the two compiled paths, amplified by the logit unsquash
        atol=2e-5,
    )
    np.testing.assert_allclose(
        S.rank(x, softness=s, method=method, window=w),
        S.rank(x, softness=s, method=method, abs_mode="hard"),
        rtol=1e-5,
        atol=2e-4,
    )


@SLOW
@pytest.mark.parametrize("method", ["softsort", "neuralsort"])
def test_full_window_is_dense(method):
    x = jax.random.normal(jax.random.key(2), (2, 9))
    for op, args, kw in OPS:
        np.testing.assert_allclose(
            _val(op, x, *args, softness=0.2, method=method, window=8, **kw),
            _val(op, x, *args, softness=0.2, method=method, abs_mode="hard", **kw),
            rtol=1e-5,
            atol=1e-5,
        )
        b = S.banded_error_bound(op, x, *args, window=8, softness=0.2, method=method, **kw)
        assert float(jnp.max(b)) == 0.0


@pytest.mark.parametrize(
    "method", [pytest.param("neuralsort", marks=SLOW), pytest.param("softsort", marks=SLOW)]
)
def test_banded_hard_limit(method):
    x = jnp.array([[0.3, -1.2, 2.0, 0.9, -0.4, 1.5], [1.0, 0.2, -0.7, -2.0, 0.6, 0.1]])
    kw = dict(softness=1e-4, method=method, window=1)
    np.testing.assert_allclose(S.sort(x, **kw), jnp.sort(x), atol=1e-4)
    hard_rank = jnp.argsort(jnp.argsort(x)) + 1
    np.testing.assert_allclose(S.rank(x, **kw), hard_rank, atol=1e-3)
    v, idx = S.top_k(x, 2, **kw)
    np.testing.assert_allclose(v, jax.lax.top_k(x, 2)[0], atol=1e-4)
    np.testing.assert_array_equal(idx, jax.lax.top_k(x, 2)[1])
    P = S.argtop_k(x, 2, **kw)
    np.testing.assert_allclose(P, jax.nn.one_hot(jax.lax.top_k(x, 2)[1], 6), atol=1e-4)
    np.testing.assert_allclose(S.median(x, axis=-1, **kw), jnp.median(x, axis=-1), atol=1e-4)


@SLOW
@pytest.mark.parametrize("method", ["softsort", "neuralsort"])
def test_banded_top_k_index_matches_dense(method):
    x = jax.random.normal(jax.random.key(3), (2, 12))
    kw = dict(softness=0.05, method=method)
    vb, Pb = S.top_k(x, 3, **kw, window=11)[0], S.argtop_k(x, 3, **kw, window=11)
    vd, Pd = S.top_k(x, 3, **kw, abs_mode="hard")[0], S.argtop_k(x, 3, **kw, abs_mode="hard")
    np.testing.assert_allclose(Pb, Pd, atol=1e-5)
    np.testing.assert_allclose(vb, vd, atol=1e-5)


@pytest.mark.parametrize(
    "method,op",
    [
        *[
            pytest.param(m, o, marks=SLOW)
            for m, o in [
                ("neuralsort", "rank"),
                ("softsort", "sort"),
                ("softsort", "rank"),
                ("neuralsort", "sort"),
                ("softsort", "top_k"),
                ("neuralsort", "top_k"),
                ("softsort", "quantile"),
                ("neuralsort", "quantile"),
            ]
        ]
    ],
)
def test_banded_check_grads(method, op):
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(4), (2, 7), jnp.float64)
        args = {"top_k": (3,), "quantile": (0.4,)}.get(op, ())
        kw = {"quantile": {"axis": -1}}.get(op, {})
        f = lambda x: _val(op, x, *args, softness=0.3, method=method, window=2, **kw)  # noqa: E731
        check_grads(f, (x,), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_banded_bad_arguments():
    x = jnp.ones((2, 5))
    with pytest.raises(ValueError, match="window"):
        S.sort(x, method="neuralsort", window=-1)
    with pytest.raises(TypeError, match="window"):
        S.sort(x, method="neuralsort", window=2.0)
    with pytest.raises(ValueError, match="method"):
        S.sort(x, method="pav", window=2)
    with pytest.raises(ValueError, match="abs_mode"):
        S.rank(x, method="neuralsort", window=2, abs_mode="soft")
    with pytest.raises(NotImplementedError, match="mode"):
        S.sort(x, method="softsort", mode="c0", window=2)
    with pytest.raises(ValueError, match="op"):
        S.banded_error_bound("argsort", x, window=2)


@pytest.mark.slow
def test_banded_memory_is_linear_in_n():
    """The compiled fwd+bwd never holds an n x n array (peak grows ~linearly in n)."""

    def peak(n):
        x = jnp.zeros((1, n))
        f = jax.jit(jax.grad(lambda x: jnp.sum(S.rank(x, method="neuralsort", window=4))))
        m = f.lower(x).compile().memory_analysis()
        return m.temp_size_in_bytes

    p1, p2 = peak(2048), peak(8192)
    assert p2 < 8 * p1  # quadratic would be 16x
    assert p2 < 8192 * 8192 * 4 / 8
