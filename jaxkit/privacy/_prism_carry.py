"""PRISM's frame carried from one step's retraction to the next step.

The retraction returns ``(u sqrt(S) q, v sqrt(S) q)`` with ``u``, ``v`` orthonormal
and ``S`` the singular values of the new ``Z``: the frame of the next step
(:func:`~jaxkit.privacy.lowrank.gram_cache` of the new factors and the balancing
rotation ``q``) is known without a QR, an SVD or a polar decomposition. :func:`prism`
keeps it in its state and uses it when the ``params`` it is given are the factors it
returned (to round-off: ``optax.apply_updates`` adds ``new - params`` back); else
(the first step, or ``params`` changed outside) the frame is recomputed as before.
The frame depends on the released (public) factors only, so the privacy argument is
unchanged: the norms, the clipping and the noise use the frame of the current ``Z``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array

from jaxkit.privacy import _common as C
from jaxkit.privacy._lowrank_retract import _balance_from_cache
from jaxkit.privacy._lowrank_tangent import _sign_fix
from jaxkit.privacy.lowrank import GramCache, LoraFactors, gram_cache

# the carried frame is used when ``params`` differ from the factors it belongs to by at
# most this many ulps of the factors' largest entry (``apply_updates`` rounds twice)
_ULPS = 16


class Carry(NamedTuple):
    """Per LoRA module: the factors ``(a, b) = (u sqrt(S) q, v sqrt(S) q)`` and their frame.

    ``valid`` is ``False`` until a retraction has filled it (a scalar per module).
    """

    valid: Array
    a: Array
    b: Array
    u: Array
    v: Array
    s: Array
    q: Array


def init_carry(params):
    """An empty (``valid=False``) carry mirroring ``params`` (``None`` at non-LoRA leaves)."""

    def one(p):
        if not C.is_lora(p):
            return None
        acc = C.acc_dtype(p.a)
        st, r = p.a.shape[:-2], p.a.shape[-1]
        a, b = jnp.zeros_like(p.a, dtype=acc), jnp.zeros_like(p.b, dtype=acc)
        z = jnp.zeros((*st, r), acc)
        return Carry(jnp.zeros([], bool), a, b, a, b, z, jnp.zeros((*st, r, r), acc))

    return jax.tree.map(one, params, is_leaf=C.is_lora)


def _carried(c: Carry, rcond: float):
    """``(gram_cache(a, b), q)`` of one slice, in closed form from ``(u, v, s, q)``."""
    rs = jnp.sqrt(jnp.maximum(c.s, 0.0))
    keep = rs > rcond * jnp.maximum(jnp.max(rs), jnp.finfo(rs.dtype).tiny)
    irs = jnp.where(keep, 1.0 / jnp.where(keep, rs, 1.0), 0.0)
    t = c.q.T * irs[None, :]  # a @ t = u (pseudo-inverse cut as gram_cache's)
    gram = (c.q.T * c.s[None, :]) @ c.q
    inv = t @ t.T
    return GramCache(gram, gram, inv, inv, t, t, c.u, c.v, c.s), c.q


def _computed(p: LoraFactors, rcond: float):
    """``(gram_cache(p), q)`` of one slice, ``q`` the balancing rotation (LAPACK)."""
    cache = gram_cache(p, rcond=rcond)
    return cache, _balance_from_cache(p, cache)[3]


def frame(p: LoraFactors, c: Carry, rcond: float):
    """The frame ``(cache, q)`` of a (stacked) module: carried if ``p`` matches, else computed."""
    acc = c.a.dtype
    tol = _ULPS * jnp.finfo(acc).eps

    def close(x, ref):
        return jnp.max(jnp.abs(x.astype(acc) - ref)) <= tol * jnp.max(jnp.abs(ref))

    ok = c.valid & close(p.a, c.a) & close(p.b, c.b)
    ns = C.n_stack(p)
    return jax.lax.cond(
        ok,
        lambda: C.stackmap(lambda c_: _carried(c_, rcond), ns)(c._replace(valid=None)),
        lambda: C.stackloop(lambda p_: _computed(p_, rcond), ns)(p),  # LAPACK: no vmap
    )


def _signs(u: Array, ref: Array) -> Array:
    """Column signs keeping ``u`` on the side of ``ref`` (1 where they overlap little)."""
    dots = jnp.sum(ref.astype(u.dtype) * u, axis=0)
    return jnp.where(jnp.abs(dots) > 0.5, jnp.sign(dots), 1.0).astype(u.dtype)


def follow(cache: GramCache, q, ref: Array):
    """Flip frame columns so that ``u`` keeps the sign of ``ref`` (rows of ``q`` alike).

    Where a column's overlap with the reference is small (first step, a
    singular-value crossing) the stateless rule of :func:`gram_cache` stays.
    """
    sg = _signs(cache.u, ref)
    row = sg[None, :]
    cache = cache._replace(ta=cache.ta * row, tb=cache.tb * row, u=cache.u * row, v=cache.v * row)
    return cache, None if q is None else q * sg[:, None]


def next_carry(new: LoraFactors, parts, ref: Array) -> Carry:
    """The carry of retracted factors ``new`` with ``parts = (u, v, s, q)`` (one module).

    Signs as :func:`gram_cache` gives them for ``new``, then :func:`follow` of ``ref``
    (the frame used at this step), as the next step would choose them.
    """
    u, v, s, q = parts

    def one(u, v, q, ref):
        sg = _sign_fix(u)
        u, v, q = u * sg[None, :], v * sg[None, :], q * sg[:, None]
        sg = _signs(u, ref)
        return u * sg[None, :], v * sg[None, :], q * sg[:, None]

    u, v, q = C.stackmap(one, u.ndim - 2)(u, v, q, ref)
    return Carry(jnp.ones([], bool), new.a, new.b, u, v, s, q)
