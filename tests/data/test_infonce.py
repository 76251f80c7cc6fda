"""In-batch InfoNCE: numpy reference, false-negative mask, global batch over 8 devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import data


def _ref(q, d, tau, dup=None):
    """float64 numpy InfoNCE over the whole batch."""
    s = q.astype(np.float64) @ d.T.astype(np.float64) / tau
    if dup is not None:
        mask = (dup[:, None] == dup[None, :]) & ~np.eye(len(q), dtype=bool)
        s = np.where(mask, -np.inf, s)
    m = s.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(s - m).sum(axis=1))
    return float(np.mean(lse - np.diag(s)))


def _pairs(n, dim, seed):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, dim))
    d = q + 0.7 * rng.normal(size=(n, dim))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return q.astype(np.float32), d.astype(np.float32)


def test_infonce_matches_reference_and_masks_duplicates():
    q, d = _pairs(16, 6, 0)
    dup = np.arange(16) // 2
    got = float(data.infonce(jnp.asarray(q), jnp.asarray(d), tau=0.1))
    np.testing.assert_allclose(got, _ref(q, d, 0.1), rtol=1e-5)
    got = float(data.infonce(jnp.asarray(q), jnp.asarray(d), tau=0.1, dup_ids=jnp.asarray(dup)))
    np.testing.assert_allclose(got, _ref(q, d, 0.1, dup), rtol=1e-5)
    assert got < _ref(q, d, 0.1)  # removing negatives lowers the loss


@pytest.mark.slow
def test_infonce_global_batch_over_mesh(mesh8):
    q, d = _pairs(32, 6, 1)
    dup = (np.arange(32) // 2).astype(np.int32)

    def local(qs, ds, ids):
        return data.infonce(qs, ds, tau=0.1, dup_ids=ids, axis_name="data")

    # check_vma=False: eqx.error_if's cond mixes varying and invariant values
    f = jax.shard_map(local, mesh=mesh8, in_specs=(jax.P("data"),) * 3, out_specs=jax.P(),
                      check_vma=False)  # fmt: skip
    with jax.set_mesh(mesh8):
        put = [jax.device_put(a, jax.NamedSharding(mesh8, jax.P("data"))) for a in (q, d, dup)]
        val, grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(*put)
    np.testing.assert_allclose(float(val), _ref(q, d, 0.1, dup), rtol=1e-5)

    def plain(qq, dd):  # independent jnp reference of the whole-batch loss
        s = qq @ dd.T / 0.1
        mask = (dup[:, None] == dup[None, :]) & ~np.eye(32, dtype=bool)
        s = jnp.where(mask, -jnp.inf, s)
        return jnp.mean(jax.nn.logsumexp(s, axis=1) - jnp.diag(s))

    want = jax.grad(plain, argnums=(0, 1))(jnp.asarray(q), jnp.asarray(d))
    for g, w in zip(grads, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)


def test_infonce_bad_inputs():
    q, d = _pairs(4, 3, 2)
    with pytest.raises(ValueError, match="`tau`"):
        data.infonce(jnp.asarray(q), jnp.asarray(d), tau=0.0)
    with pytest.raises(TypeError, match="d"):
        data.infonce(jnp.asarray(q), jnp.asarray(d[:, :2]))
    with pytest.raises(TypeError, match="dup_ids"):
        data.infonce(jnp.asarray(q), jnp.asarray(d), dup_ids=jnp.arange(3))
