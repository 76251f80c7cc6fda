"""Small shared builders for the privacy tests.

Each is jitted (sizes and dtypes static): called eagerly, every jax.numpy op in it would
compile on its own, once per test module shape; jitted, a builder compiles once per shape.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit.privacy.lowrank import LoraFactors


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def factors(key, m, n, r, dtype=jnp.float32):
    ka, kb = jax.random.split(key)
    return LoraFactors(jax.random.normal(ka, (m, r), dtype), jax.random.normal(kb, (n, r), dtype))


@jax.jit
def factor_grads(f, gs):
    """Factor gradients (G b, G^T a) of dense per-example gradients gs [b, m, n] (or [m, n])."""
    if gs.ndim == 2:
        return LoraFactors(gs @ f.b, gs.T @ f.a)
    return LoraFactors(jnp.einsum("bmn,nr->bmr", gs, f.b), jnp.einsum("bmn,mr->bnr", gs, f.a))


@jax.jit
def gauge(f, g):
    g = jnp.asarray(g, f.a.dtype)
    return LoraFactors(f.a @ g, f.b @ jnp.linalg.inv(g).T)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def random_gl(key, r, cond=100.0, dtype=jnp.float32):
    """Random G in GL(r) with condition number `cond`."""
    k1, k2 = jax.random.split(key)
    q1, _ = jnp.linalg.qr(
        jax.random.normal(k1, (r, r), jnp.float64 if dtype == jnp.float64 else jnp.float32)
    )
    q2, _ = jnp.linalg.qr(jax.random.normal(k2, (r, r), q1.dtype))
    s = jnp.asarray(np.geomspace(1.0, cond, r), q1.dtype)
    return ((q1 * s[None, :]) @ q2.T).astype(dtype)


def truncated(z, r):
    u, s, vt = np.linalg.svd(np.asarray(z, np.float64))
    return (u[:, :r] * s[:r]) @ vt[:r]
