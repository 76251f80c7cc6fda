"""PRISM's frame carried from the retraction to the next step (``_prism_carry``).

The carried frame must equal the recomputed one (same steps), be read only when the
``params`` are the factors it belongs to, and give the exact per-example intrinsic
norms at the current ``Z`` (the clipping bound of the privacy argument).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import privacy
from jaxkit.privacy import _prism_carry as K
from jaxkit.privacy import lowrank as L
from jaxkit.privacy._prism import _lora_norm_sq
from tests.privacy._helpers import factor_grads, factors

M, N, R, B = 10, 8, 3, 8


def _params(key):
    """One stacked LoRA module (two slices).

    An unstacked module runs the same per-slice code (``stackmap`` / ``stackloop`` over
    zero axes call it directly) and takes the carried frame in the default run through
    ``test_prism.py::test_full_step_gauge_invariant``; a Euclidean leaf gets no carry
    (checked on ``init`` below). Each extra module or leaf made both compiled updates
    larger (measured: 2.7 + 2.2 s of compile CPU with an unstacked module and a
    Euclidean leaf as well, 1.7 + 0.9 s without) and checked no carry path of its own.
    """
    stack = jax.tree.map(lambda x: jnp.stack([x, 0.5 * x]), factors(key, M, N, R, jnp.float64))
    return {"stack": stack}


def _grads(key, p):
    return jax.tree.map(lambda x: jax.random.normal(key, (B, *x.shape), x.dtype), p)


_TRANSFORMS: dict = {}


def _transform(key):
    """One prism transform and one jitted update per key for the whole module: the tests
    that run the same state structure (carry or not) share one compiled step instead of
    compiling a fresh ``jax.jit(tx.update)`` in every ``_run``."""
    k = tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())
    if k not in _TRANSFORMS:
        tx = privacy.prism(0.05, clip_norm=1.0, noise_multiplier=0.7, denom=B, key=key)
        _TRANSFORMS[k] = (tx, jax.jit(tx.update))
    return _TRANSFORMS[k]


def _run(key, steps, *, carry=True, edit=None):
    """``steps`` prism steps; ``carry=False`` drops the carry (frames recomputed)."""
    p = _params(key)
    tx, update = _transform(key)
    s = tx.init(p)
    if not carry:
        s = (s[0], s[1]._replace(carry=None))
    for t in range(steps):
        if edit is not None and t == steps - 1:
            p, s = edit(p, s)
        u, s = update(_grads(jax.random.fold_in(key, t), p), s, p)
        p = optax.apply_updates(p, u)
    return p, s


def _close(x, y, atol):
    for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=atol)


def test_carried_frame_gives_the_recomputed_steps(key):
    with jax.enable_x64(True):
        p_carry, s = _run(key, 4)
        p_plain, _ = _run(key, 4, carry=False)
        _close(p_carry, p_plain, 1e-11)
        assert bool(s[1].carry["stack"].valid)
        tx, _ = _transform(key)
        # a Euclidean leaf gets no carry (traced only: nothing compiles)
        with_head = jax.eval_shape(tx.init, {**p_carry, "head": jnp.ones((3,), jnp.float64)})
        assert with_head[1].carry["head"] is None


@pytest.mark.slow  # default run: time budget (tests/README.md)
def test_carry_read_only_for_its_own_factors(key):
    """A wrong carried frame changes the step (it is read); moved params ignore it."""

    def spoil(p, s):  # same factors, wrong singular values: a wrong frame if read
        c = s[1].carry
        c = {**c, "stack": c["stack"]._replace(s=2.0 * c["stack"].s)}
        return p, (s[0], s[1]._replace(carry=c))

    def spoil_and_move(p, s):
        p, s = spoil(p, s)
        q = p["stack"]
        return {**p, "stack": L.LoraFactors(q.a * (1 + 1e-9), q.b)}, s

    def move(p, s):
        q = p["stack"]
        return {**p, "stack": L.LoraFactors(q.a * (1 + 1e-9), q.b)}, s

    with jax.enable_x64(True):
        good, _ = _run(key, 3)
        bad, _ = _run(key, 3, edit=spoil)
        assert float(jnp.max(jnp.abs(good["stack"].a - bad["stack"].a))) > 1e-6
        moved, _ = _run(key, 3, edit=spoil_and_move)
        plain, _ = _run(key, 3, carry=False, edit=move)
        _close(moved, plain, 1e-11)


@jax.jit  # one program for the oracle's glue (eager, each op would compile alone)
def _frame_and_norms(c, f, key):
    cache, q = K._carried(c, 1e-6)
    ref = L.gram_cache(L.LoraFactors(c.a, c.b))
    gs = jax.random.normal(key, (B, M, N), jnp.float64)
    sq, _ = _lora_norm_sq(f, factor_grads(f, gs), 1e-6, cache)
    dense = jax.vmap(lambda x: jnp.sum(L.project_tangent_dense(f, x) ** 2))(gs)
    return cache, q, ref, sq, dense


def test_carried_frame_matches_gram_cache_and_exact_norms(key):
    """The closed-form frame equals ``gram_cache`` of the carried factors (up to column
    signs), and the per-example norms it gives are the dense ``||P_T(G_i)||^2`` at the
    current params (what the clipping bound needs). One slice of the stacked module."""
    with jax.enable_x64(True):
        p, s = _run(key, 2)
        c = jax.tree.map(lambda x: x[1], s[1].carry["stack"]._replace(valid=None))
        f = jax.tree.map(lambda x: x[1], p["stack"])
        out = _frame_and_norms(c, f, jax.random.fold_in(key, 9))
        # the comparisons in NumPy (f64): no eager jax op compiles
        cache, q, ref, sq, dense = jax.tree.map(np.asarray, out)
        sg = np.sign(np.sum(cache.u * ref.u, axis=0))[None, :]
        np.testing.assert_allclose(cache.s, ref.s, rtol=1e-10)
        np.testing.assert_allclose(cache.u, ref.u * sg, atol=1e-10)
        np.testing.assert_allclose(cache.v, ref.v * sg, atol=1e-10)
        np.testing.assert_allclose(cache.ta, ref.ta * sg, atol=1e-8)
        np.testing.assert_allclose(cache.m_inv, ref.m_inv, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(cache.n_gram, ref.n_gram, rtol=1e-10, atol=1e-12)
        cu, cs, ca = (np.asarray(x) for x in (c.u, c.s, c.a))
        np.testing.assert_allclose(ca, (cu * np.sqrt(cs)[None, :]) @ q, atol=1e-12)
        np.testing.assert_allclose(sq, dense, rtol=1e-9)
