"""Oracles for jaxkit.soft: hard limits, closed forms, PAV derivatives, invariances, grads."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxkit.soft as S
from jaxkit.soft import _network as NW
from jaxkit.soft import _pav

VALUE_METHODS = ["pav", "softsort", "neuralsort", "ot", "network"]
INDEX_METHODS = ["softsort", "neuralsort", "ot", "network"]
XN = np.array([[0.3, -1.2, 2.0, 0.9, -0.4, 1.5], [1.0, 0.2, -0.7, -2.0, 0.6, 0.1]], np.float32)
X = jnp.asarray(XN)
# References and glue are NumPy: called eagerly, every jax.numpy op compiles a program of its own.


def hard_rank(x):
    return (np.argsort(np.argsort(x, axis=-1), axis=-1) + 1).astype(x.dtype)


def one_hot(i, n):
    return np.eye(n, dtype=np.float32)[np.asarray(i)]


# ----------------------------------------------------------------------------- hard limit


def _default(ms, all_):
    """``all_`` as pytest params, those outside ``ms`` marked slow (one oracle per method
    family stays in the default run)."""
    return [m if m in ms else pytest.param(m, marks=pytest.mark.slow) for m in all_]


@pytest.mark.parametrize("method", _default(("pav",), VALUE_METHODS))
def test_zero_softness_limit_values(method):
    s = 1e-4
    # PAV in f32 has the documented logit-unsquash error floor (~2e-3 with squashing), so
    # the exactness check runs it on raw values; OT's entropic blur decays slowest.
    kw = dict(softness=s, method=method)
    tol = 1e-3
    if method == "pav":
        kw.update(mode="c0", standardize=False, softness=1e-2)  # exact below the gap scale
        tol = 1e-5
    if method == "ot":
        kw.update(softness=1e-3)
        tol = 5e-2
    q = jnp.array([0.25, 0.5, 0.8])

    @jax.jit  # every operator in one program (one compile, not eight)
    def soft(x):
        return [
            S.sort(x, **kw),
            S.sort(x, descending=True, **kw),
            S.rank(x, **kw),
            S.max(x, axis=-1, **kw),
            S.min(x, axis=-1, **kw),
            S.top_k(x, 2, **kw)[0],
            S.quantile(x, q, axis=-1, **kw),
            S.median(x, axis=-1, **kw),
        ]

    hard = [
        np.sort(XN),
        np.sort(XN)[:, ::-1],
        hard_rank(XN),
        XN.max(-1),
        XN.min(-1),
        np.sort(XN)[:, ::-1][:, :2],
        np.quantile(XN, np.asarray(q), axis=-1),
        np.median(XN, axis=-1),
    ]
    for i, (got, want) in enumerate(zip(soft(X), hard, strict=True)):
        np.testing.assert_allclose(got, want, atol=max(tol, 1e-3) if i == 2 else tol)


@pytest.mark.parametrize("method", _default(("softsort", "network"), INDEX_METHODS))
def test_zero_softness_limit_indices(method):
    kw = dict(softness=1e-4, method=method)
    tol = 2e-2 if method == "ot" else 1e-3
    np.testing.assert_allclose(S.argsort(X, **kw), one_hot(np.argsort(XN), 6), atol=tol)
    np.testing.assert_allclose(S.argmax(X, axis=-1, **kw), one_hot(XN.argmax(-1), 6), atol=tol)
    top3 = np.argsort(-XN, axis=-1, kind="stable")[:, :3]
    np.testing.assert_allclose(S.argtop_k(X, 3, **kw), one_hot(top3, 6), atol=tol)


def test_pav_exact_at_finite_softness():
    x = jnp.array([8.0, 0, 5, 3, 2, 1, 6, 7, 9])
    out = S.sort(x, softness=0.01, mode="c0", standardize=False)
    assert np.array_equal(np.asarray(out), np.sort(np.asarray(x)))


@pytest.mark.parametrize("mode", ["smooth", "c0", "c1", "c2"])
def test_elementwise_hard_limit(mode):
    xn = np.array([-2.0, -0.5, 0.3, 1.7], np.float32)
    s = 1e-4

    @jax.jit  # the six operators in one program (eagerly: six programs and their guards)
    def soft(x):
        return (
            S.heaviside(x, s, mode),
            S.relu(x, s, mode),
            S.abs(x, s, mode),
            S.clip(x, -1.0, 1.0, s, mode),
            S.round(x + 0.1, s, mode),
            S.greater(x, 0.0, s, mode),
        )

    step, relu, abs_, clip, round_, greater = soft(xn)
    np.testing.assert_allclose(step, (xn > 0).astype(xn.dtype), atol=1e-6)
    np.testing.assert_allclose(relu, np.maximum(xn, 0), atol=1e-3)
    np.testing.assert_allclose(abs_, np.abs(xn), atol=1e-3)
    np.testing.assert_allclose(clip, np.clip(xn, -1, 1), atol=1e-3)
    np.testing.assert_allclose(round_, np.round(xn + 0.1), atol=1e-3)
    np.testing.assert_allclose(greater, (xn > 0).astype(xn.dtype), atol=1e-6)


# ----------------------------------------------------------------------------- PAV


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


# ----------------------------------------------------------------------------- invariances


@pytest.mark.parametrize(
    "method", _default(("pav", "softsort"), ("pav", "softsort", "neuralsort", "ot"))
)
def test_permutation_invariance_and_equivariance(method):
    # (soft sorting networks are not permutation invariant at finite softness)
    rng = np.random.default_rng(2)
    xn = rng.normal(size=(8,)).astype(np.float32)
    perm = rng.permutation(8)
    x, xp = jnp.asarray(xn), jnp.asarray(xn[perm])
    kw = dict(softness=0.2, method=method)
    np.testing.assert_allclose(S.sort(xp, **kw), S.sort(x, **kw), rtol=1e-4, atol=1e-4)
    want = np.asarray(S.rank(x, **kw))[perm]
    np.testing.assert_allclose(S.rank(xp, **kw), want, rtol=1e-4, atol=1e-4)
    if method == "pav":
        r = S.rank(x, softness=0.2, mode="c0")
        np.testing.assert_allclose(np.sum(np.asarray(r)), 36.0, rtol=1e-5)
        s = S.sort(x, softness=0.2)
        assert np.all(np.diff(np.asarray(s)) >= 0)


@pytest.mark.parametrize("kind", _default(("bitonic",), NW.KINDS))
def test_network_matrix_free_equals_dense(kind):
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(2, 11)), jnp.float32)
    kw = dict(softness=0.3, method="network", network=kind)

    @jax.jit  # the four calls in one program
    def run(x):
        return (
            S.argsort(x, **kw),
            S.rank(x, **kw),
            S.argsort(x, descending=True, **kw),
            S.argtop_k(x, 3, **kw),
        )

    P, rank, Pd, top = (np.asarray(a, np.float64) for a in run(x))
    Pt = np.swapaxes(P, -1, -2)  # the dense reference in NumPy (eagerly: a program per op)
    Pt = Pt / Pt.sum(-1, keepdims=True)
    dense_rank = Pt @ np.arange(1.0, 12.0)
    np.testing.assert_allclose(rank, dense_rank, rtol=1e-4)
    np.testing.assert_allclose(top, Pd[..., :3, :], atol=1e-5)


def test_odd_even_network_sorts():
    for n in (2, 4, 8, 16):
        partner, low = NW.schedule(n, "odd_even")
        for xs in itertools.islice(itertools.permutations(range(n)), 200):
            v = np.array(xs, float)
            for p, lo in zip(partner, low, strict=True):
                w = v.copy()
                for i in range(n):
                    j = p[i]
                    if j != i:
                        w[i] = min(v[i], v[j]) if lo[i] else max(v[i], v[j])
                v = w
            assert np.all(np.diff(v) >= 0)


# ----------------------------------------------------------------------------- gradients


GRAD_OPS = [
    ("sort", lambda x, m: S.sort(x, softness=0.5, method=m)),
    ("rank", lambda x, m: S.rank(x, softness=0.5, method=m)),
    ("quantile", lambda x, m: S.quantile(x, 0.3, axis=-1, softness=0.5, method=m)),
]


@pytest.mark.slow
@pytest.mark.parametrize("method", VALUE_METHODS)
@pytest.mark.parametrize("op", GRAD_OPS, ids=lambda o: o[0])
def test_check_grads_axiswise(op, method):
    with jax.enable_x64(True):
        x = jnp.array([[0.3, -1.2, 2.0, 0.9, -0.4], [1.0, 0.2, -0.7, -2.0, 0.6]])
        modes = ("rev",) if method == "ot" else ("fwd", "rev")
        check_grads(lambda v: op[1](v, method), (x,), order=1, modes=modes, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("method", INDEX_METHODS)
def test_check_grads_index(method):
    with jax.enable_x64(True):
        x = jnp.array([0.3, -1.2, 2.0, 0.9, -0.4])
        modes = ("rev",) if method == "ot" else ("fwd", "rev")
        for f in (
            lambda v: S.argsort(v, softness=0.5, method=method),
            lambda v: S.top_k(v, 2, softness=0.5, method=method)[0],
            lambda v: S.argmax(v, softness=0.5, method=method),
        ):
            check_grads(f, (x,), order=1, modes=modes, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["smooth", "c0", "c1", "c2"])
def test_check_grads_elementwise(mode):
    with jax.enable_x64(True):
        x = jnp.array([-0.9, -0.21, 0.13, 0.7])
        y = jnp.array([0.1, -0.3, 0.4, 0.2])
        for f in (S.sigmoidal, S.sign, S.abs, S.relu, S.round, S.heaviside):
            check_grads(lambda v, f=f: f(v, 0.3, mode), (x,), order=1, modes=("fwd", "rev"))
        for f in (S.greater, S.less_equal, S.equal, S.not_equal, S.isclose):
            check_grads(
                lambda a, b, f=f: f(a, b, 0.3, mode=mode), (x, y), order=1, modes=("fwd", "rev")
            )
        check_grads(lambda v: S.clip(v, -0.5, 0.5, 0.3, mode), (x,), order=1, modes=("fwd", "rev"))


@pytest.mark.slow  # the conformance grads of soft.sort/pav run by default
def test_check_grads_fast():
    with jax.enable_x64(True):
        x = jnp.array([[0.3, -1.2, 2.0, 0.9, -0.4]])
        check_grads(
            lambda v: S.rank(v, softness=0.5), (x,), 1, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4
        )
        check_grads(
            lambda v: S.sort(v, softness=0.5, mode="c0"),
            (x,),
            1,
            modes=("fwd", "rev"),
            atol=1e-4,
            rtol=1e-4,
        )
        check_grads(lambda v: S.sigmoidal(v, 0.3, "c1"), (x,), 1, modes=("fwd", "rev"))


def test_safe_math_gradients_finite_at_boundary():
    fx = (
        (S.sqrt, 0.0),
        (S.log, 0.0),
        (S.arcsin, 1.0),
        (S.arccos, -1.0),
        (lambda v: S.div(1.0, v), 0.0),
        (lambda v: S.norm(jnp.stack([v, v])), 0.0),
    )
    # the six gradients in one program (eagerly: one program per op of each backward pass)
    grads = jax.jit(lambda xs: [jax.grad(f)(x) for (f, _), x in zip(fx, xs, strict=True)])
    for g in grads([jnp.float32(x) for _, x in fx]):
        assert np.isfinite(g)
    np.testing.assert_allclose(S.sqrt(jnp.array([4.0, -1.0])), [2.0, 0.0])


# ------------------------------------------------------------------ logic / selection / st


def test_logic_tnorms():
    @jax.jit  # the six calls in one program (eagerly: one program each)
    def run(a, b, c):
        return (
            S.all(a),
            S.all(a, tnorm="godel"),
            S.all(a, tnorm="lukasiewicz"),
            S.any(a),
            S.logical_xor(b, c),
            S.logical_and(b, c, tnorm="lukasiewicz"),
        )

    a, b, c = (np.array(v, np.float32) for v in ([0.2, 0.9, 1.0], [1.0, 0.0], [0.0, 0.0]))
    prod, godel, luk, any_, xor, and_ = run(a, b, c)
    np.testing.assert_allclose(prod, 0.18, rtol=1e-6)
    np.testing.assert_allclose(godel, 0.2)
    np.testing.assert_allclose(luk, 0.1, atol=1e-6)
    np.testing.assert_allclose(any_, 1.0)
    np.testing.assert_allclose(xor, [1.0, 0.0])
    np.testing.assert_allclose(and_, [0.0, 0.0])


def test_selection_with_one_hot_matches_hard():
    xn = np.arange(12.0, dtype=np.float32).reshape(3, 4)

    @jax.jit  # every call in one program (eagerly: one program per operator and shape)
    def run(x):
        return (
            S.take(x, one_hot([2, 0, 3], 4), axis=1),
            S.dynamic_index_in_dim(x, one_hot(1, 4), axis=1),
            # a start past n - 2 is clamped, as lax.dynamic_slice_in_dim
            [S.dynamic_slice_in_dim(x, one_hot(start, 4), 2, axis=1) for start in range(4)],
            S.dynamic_slice(x, [one_hot(2, 3), one_hot(1, 4)], [1, 2]),
            S.choose(one_hot([1, 0, 2, 1], 3), x),
        )

    take, index, slices, sliced, chosen = run(xn)
    np.testing.assert_allclose(take, xn[:, [2, 0, 3]])
    np.testing.assert_allclose(index, xn[:, 1:2])
    for start, got in enumerate(slices):
        np.testing.assert_allclose(got, xn[:, min(start, 2) : min(start, 2) + 2])
    np.testing.assert_allclose(sliced, xn[2:3, 1:3])
    np.testing.assert_allclose(chosen, np.choose([1, 0, 2, 1], xn))


def test_straight_through():
    x = jnp.array([0.3, -1.2, 2.0, 0.9])
    f = S.grad_replace(lambda v, forward: jnp.round(v) if forward else v)

    @jax.jit  # one program for the values and the three gradients
    def run(x):
        def g(fn):
            return jax.grad(lambda v: jnp.sum(fn(v) * jnp.arange(4.0)))(x)

        return (
            S.sort_st(x),
            g(S.sort_st),
            g(S.sort),
            S.heaviside_st(x),
            jax.grad(lambda v: jnp.sum(f(v)))(x),
        )

    st, g_st, g_soft, heavi, g_f = run(x)
    np.testing.assert_array_equal(st, jnp.sort(x))
    np.testing.assert_allclose(g_st, g_soft, rtol=1e-6)
    np.testing.assert_array_equal(heavi, (x > 0).astype(x.dtype))
    np.testing.assert_allclose(g_f, 1.0)


# ----------------------------------------------------------------------------- bad inputs, empty


def test_bad_inputs():
    with pytest.raises(ValueError, match="softness"):
        S.sort(X, softness=0.0)
    with pytest.raises(ValueError, match="softness"):
        S.sigmoidal(X, softness=-1.0)
    with pytest.raises(ValueError, match="axis"):
        S.rank(X, axis=3)
    with pytest.raises(ValueError, match="method"):
        S.sort(X, method="bogus")
    xnan = XN.copy()
    xnan[0, 0] = np.nan
    with pytest.raises(ValueError, match="x"):
        S.sort(jnp.asarray(xnan))
    with pytest.raises(ValueError, match="k"):
        S.top_k(X, 7)
    with pytest.raises(Exception, match="softness"):
        jax.block_until_ready(jax.jit(lambda s: S.sort(X, softness=s))(-1.0))


def test_empty_like_jnp():
    e = jnp.zeros((2, 0))
    assert S.sort(e).shape == jnp.sort(e).shape
    assert S.rank(e).shape == (2, 0)
    assert S.argsort(e).shape == (2, 0, 0)
    with pytest.raises(ValueError):
        S.argmax(e, axis=-1)
