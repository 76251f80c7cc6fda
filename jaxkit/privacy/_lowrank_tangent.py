"""Fixed-rank (LoRA) tangent geometry: the frame, coordinates, lifts, norms and noise.

The part of :mod:`jaxkit.privacy.lowrank` that works on the tangent space ``T_Z`` at
``Z = a @ b.T``: the gauge-invariant frame (:class:`GramCache`), orthonormal tangent
coordinates, factor lifts, intrinsic norms, dense test oracles and isotropic tangent
noise. Retraction, balancing and initialisation are in ``_lowrank_retract``; the public
names are re-exported by ``lowrank`` (see its docstring).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, Real

from jaxkit import _validate
from jaxkit._jit import checked_jit
from jaxkit._typing import accumulation_dtype as _acc


class LoraFactors(NamedTuple):
    """LoRA factors ``Z = a @ b.T``; ``a: [*stack, m, r]`` (out), ``b: [*stack, n, r]`` (in)."""

    a: Array
    b: Array


class GramCache(NamedTuple):
    """Per-step geometry of ``Z = a b^T`` (all ``r x r`` except ``u``, ``v``).

    Attributes:
      m_gram, n_gram: ``a^T a`` and ``b^T b``.
      m_inv, n_inv: their pseudo-inverses (relative cut-off ``rcond``).
      ta, tb: ``u = a @ ta``, ``v = b @ tb``.
      u, v: orthonormal singular bases of ``col(a)``, ``col(b)`` (``[m, r]``, ``[n, r]``).
      s: singular values of ``Z`` (descending).
    """

    m_gram: Array
    n_gram: Array
    m_inv: Array
    n_inv: Array
    ta: Array
    tb: Array
    u: Array
    v: Array
    s: Array


class TangentCoords(NamedTuple):
    """Orthonormal coordinates of a tangent vector ``u core v^T + up v^T + u vp^T``."""

    core: Array  # [r, r]
    up: Array  # [m, r], columns orthogonal to col(a)
    vp: Array  # [n, r], columns orthogonal to col(b)


def check_factor_shapes(a, b, *, name: str) -> None:
    """Static: ``a [*stack, m, r]``, ``b [*stack, n, r]`` (TypeError naming ``name.a``/``.b``)."""
    sa, sb = jnp.shape(a), jnp.shape(b)
    if len(sa) < 2 or len(sb) < 2:
        raise TypeError(
            f"`{name}` factors must have rank >= 2, got shapes `{name}.a` {sa}, `{name}.b` {sb}."
        )
    if sa[-1] != sb[-1] or sa[:-2] != sb[:-2]:
        raise TypeError(
            f"`{name}` factors have mismatched shapes: `{name}.a` {sa} and `{name}.b` "
            f"{sb} (need a: [*stack, m, r], b: [*stack, n, r])."
        )


def check_factors(f: LoraFactors, *, name: str = "factors") -> LoraFactors:
    """Validate a factor pair (rank, shapes, dtype); return it as arrays."""
    if not isinstance(f, tuple) or len(f) != 2:
        raise TypeError(f"`{name}` must be a LoraFactors(a, b) pair, got {type(f).__name__}.")
    a, b = jnp.asarray(f[0]), jnp.asarray(f[1])
    check_factor_shapes(a, b, name=name)
    r = a.shape[-1]
    if r > min(a.shape[-2], b.shape[-2]):
        raise ValueError(f"`{name}` rank r={r} exceeds min(m, n)={min(a.shape[-2], b.shape[-2])}.")
    _validate.floating(a, name=f"{name}.a")
    _validate.floating(b, name=f"{name}.b")
    if a.dtype != b.dtype:
        raise TypeError(f"`{name}` factors have different dtypes {a.dtype} and {b.dtype}.")
    return LoraFactors(a, b)


def check_tangent(f: LoraFactors, d: LoraFactors, *, name: str) -> LoraFactors:
    """Validate a factor-shaped pair ``d`` (gradients, a tangent) against checked factors ``f``."""
    if not isinstance(d, tuple) or len(d) != 2:
        raise TypeError(f"`{name}` must be a LoraFactors(a, b) pair, got {type(d).__name__}.")
    da, db = jnp.asarray(d[0]), jnp.asarray(d[1])
    _validate.floating(da, name=f"{name}.a")
    _validate.floating(db, name=f"{name}.b")
    if da.shape != f.a.shape or db.shape != f.b.shape:
        raise TypeError(
            f"`{name}` must have the factors' shapes a {f.a.shape}, b {f.b.shape}; got "
            f"a {da.shape}, b {db.shape}."
        )
    return LoraFactors(da, db)


def _check_unbatched(f: LoraFactors, name: str = "f") -> LoraFactors:
    """:func:`check_factors` for one pair (``a: [m, r]``, ``b: [n, r]``)."""
    f = check_factors(f, name=name)
    if f.a.ndim != 2:
        raise TypeError(
            f"`{name}` must be one pair a: [m, r], b: [n, r] (use jax.vmap for a stack), got "
            f"shapes {f.a.shape}, {f.b.shape}."
        )
    return f


def _check_cache(cache: GramCache, f: LoraFactors | None = None, *, name: str = "cache") -> None:
    """Static shape checks of a :class:`GramCache` (of the checked unbatched pair ``f``, if given).

    Shapes only (free under ``jit``): ``u: [m, r]``, ``v: [n, r]``, ``s: [r]``, the rest ``[r, r]``.
    """
    if not isinstance(cache, tuple) or len(cache) != len(GramCache._fields):
        raise TypeError(f"`{name}` must be a GramCache (gram_cache), got {type(cache).__name__}.")
    cache = GramCache(*cache)
    if f is None:
        _validate.ndim(cache.u, 2, name=f"{name}.u")
        _validate.ndim(cache.v, 2, name=f"{name}.v")
        (m, r), n = jnp.shape(cache.u), jnp.shape(cache.v)[0]
    else:
        (m, r), n = f.a.shape, f.b.shape[0]
    sq = (r, r)
    want = dict(m_gram=sq, n_gram=sq, m_inv=sq, n_inv=sq, ta=sq, tb=sq, u=(m, r), v=(n, r), s=(r,))
    for field, shape in want.items():
        _validate.shape(getattr(cache, field), shape, name=f"{name}.{field}")


def _check_coords(c: TangentCoords, f: LoraFactors | None = None, *, name: str = "c") -> None:
    """Static checks of :class:`TangentCoords` (of the checked unbatched pair ``f``, if given).

    Floating fields of shapes ``core: [r, r]``, ``up: [m, r]``, ``vp: [n, r]`` (free under jit).
    """
    if not isinstance(c, tuple) or len(c) != len(TangentCoords._fields):
        raise TypeError(f"`{name}` must be TangentCoords(core, up, vp), got {type(c).__name__}.")
    c = TangentCoords(*c)
    if f is None:
        _validate.ndim(c.core, 2, name=f"{name}.core")
        m = n = None
        r = jnp.shape(c.core)[-1]
    else:
        (m, r), n = f.a.shape, f.b.shape[0]
    for field, shape in dict(core=(r, r), up=(m, r), vp=(n, r)).items():
        _validate.floating(getattr(c, field), name=f"{name}.{field}")
        _validate.shape(getattr(c, field), shape, name=f"{name}.{field}")


def _sign_fix(u: Array) -> Array:
    """Signs making the largest-|.| entry of each column of ``u`` positive."""
    idx = jnp.argmax(jnp.abs(u), axis=0)
    pick = jnp.take_along_axis(u, idx[None, :], axis=0)[0]
    return jnp.where(pick < 0, -1.0, 1.0).astype(u.dtype)


def _pinv_small(x: Array, rcond: float) -> Array:
    """Pseudo-inverse of a small square matrix with a relative singular-value cut-off."""
    u, s, vt = jnp.linalg.svd(x)
    cut = rcond * jnp.maximum(s[0], jnp.finfo(s.dtype).tiny)
    keep = s > cut
    inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    return (vt.T * inv[None, :]) @ u.T


@functools.partial(jax.jit, static_argnames=("rcond",))
def gram_cache(f: LoraFactors, *, rcond: float = 1e-6) -> GramCache:
    """Geometry of ``Z = a b^T`` from the factors (gauge-invariant frame).

    Thin QR ``a = Q_a R_a``, ``b = Q_b R_b`` and the SVD ``R_a R_b^T = U_c S V_c^T``
    give ``u = Q_a U_c``, ``v = Q_b V_c`` (the singular vectors of ``Z``), with
    signs fixed so that ``u``, ``v`` are the same for every gauge
    ``(a G, b G^{-T})``. QR (not the Gram matrices) keeps the frame accurate for
    factors with condition number up to about ``1/rcond``.

    Args:
      f: Factors ``a: [m, r]``, ``b: [n, r]`` (unbatched).
      rcond: Relative singular-value cut-off of the factors' pseudo-inverses
        (directions below it are treated as rank-deficient).

    Returns:
      A :class:`GramCache` in the accumulation dtype (f32, or f64 for f64 input).

    Raises:
      TypeError: If ``f`` is not one pair of floating factors (a stack: use ``jax.vmap``).

    References:
      Wang & Zhang, PRISM, ICML 2026, arXiv:2606.00944 (Sec. 3).
    """
    f = _check_unbatched(f)
    if not isinstance(rcond, jax.core.Tracer):  # a static cut-off: finite and >= 0
        _validate.real(rcond, name="rcond")
        _validate.finite_scalar(rcond=rcond)
        _validate.non_negative(rcond=rcond)
    acc = _acc(f.a.dtype)
    a, b = f.a.astype(acc), f.b.astype(acc)
    qa, ra = jnp.linalg.qr(a)
    qb, rb = jnp.linalg.qr(b)
    uc, s, vct = jnp.linalg.svd(ra @ rb.T)
    ra_i, rb_i = _pinv_small(ra, rcond), _pinv_small(rb, rcond)
    ta, tb = ra_i @ uc, rb_i @ vct.T
    u, v = qa @ uc, qb @ vct.T
    sg = _sign_fix(u)[None, :]
    ta, tb, u, v = ta * sg, tb * sg, u * sg, v * sg
    return GramCache(a.T @ a, b.T @ b, ra_i @ ra_i.T, rb_i @ rb_i.T, ta, tb, u, v, s)


@jax.jit
def tangent_coords(f: LoraFactors, g: LoraFactors, cache: GramCache) -> TangentCoords:
    """Orthonormal coordinates of ``P_T(G)`` from factor gradients ``(G b, G^T a)``.

    ``core = u^T G v``, ``up = (I - uu^T) G v``, ``vp = (I - vv^T) G^T u``, using
    ``G v = g_a tb`` and ``G^T u = g_b ta``. The Euclidean norm of the coordinates
    equals the Frobenius norm of ``P_T(G)`` (the intrinsic norm).

    Args:
      f: Factors at which the tangent space is taken.
      g: Gradients of a loss with respect to ``(a, b)``.
      cache: ``gram_cache(f)``.

    Returns:
      :class:`TangentCoords` in the dtype of ``g``.
    """
    f = _check_unbatched(f)
    g = check_tangent(f, g, name="g")
    _check_cache(cache, f)
    acc = cache.u.dtype
    ga, gb = g.a.astype(acc), g.b.astype(acc)
    gv, gu = ga @ cache.tb, gb @ cache.ta
    core = cache.u.T @ gv
    up = gv - cache.u @ core
    vp = gu - cache.v @ core.T
    dt = g.a.dtype
    return TangentCoords(core.astype(dt), up.astype(dt), vp.astype(dt))


@jax.jit
def from_coords(f: LoraFactors, c: TangentCoords, cache: GramCache) -> LoraFactors:
    """Factor representative ``(dA, dB)`` of a tangent vector given in coordinates.

    ``dA = (up + u core / 2) tb^T``, ``dB = (vp + v core^T / 2) ta^T`` so that
    ``dA b^T + a dB^T = u core v^T + up v^T + u vp^T``. Composed with
    :func:`tangent_coords` this is the PRISM lift ``g_a N^{-1} - P_U g_a N^{-1}/2``.
    ``c`` must be floating of shapes ``core: [r, r]``, ``up: [m, r]``, ``vp: [n, r]``
    (a ``TypeError`` naming the field).
    """
    f = _check_unbatched(f)
    _check_coords(c, f)
    _check_cache(cache, f)
    acc = cache.u.dtype
    core, up, vp = (x.astype(acc) for x in c)
    da = (up + 0.5 * cache.u @ core) @ cache.tb.T
    db = (vp + 0.5 * cache.v @ core.T) @ cache.ta.T
    dt = c.up.dtype
    return LoraFactors(da.astype(dt), db.astype(dt))


@jax.jit
def tangent_lift(f: LoraFactors, g: LoraFactors, cache: GramCache) -> LoraFactors:
    """Lift factor gradients to the factor form of ``P_T(G)`` (no ``m x n`` matrix).

    Returns ``(dA, dB)`` with ``dA b^T + a dB^T = P_T(G)``, where
    ``dA = g_a N^{-1} - P_U g_a N^{-1}/2`` and ``dB = g_b M^{-1} - P_V g_b M^{-1}/2``.

    Example:
      >>> k1, k2 = jax.random.split(jax.random.key(0))
      >>> f = LoraFactors(jax.random.normal(k1, (5, 2)), jax.random.normal(k2, (4, 2)))
      >>> g = LoraFactors(jnp.ones((5, 2)), jnp.ones((4, 2)))
      >>> tangent_lift(f, g, gram_cache(f)).a.shape
      (5, 2)

    References:
      Wang & Zhang, PRISM, ICML 2026, arXiv:2606.00944.
    """
    return from_coords(f, tangent_coords(f, g, cache), cache)


@jax.jit
def coords_norm_sq(c: TangentCoords) -> Array:
    """Squared Euclidean norm of coordinates (= intrinsic Frobenius norm squared).

    ``c`` must be floating of shapes ``core: [r, r]``, ``up: [m, r]``, ``vp: [n, r]``
    (a ``TypeError`` naming the field).
    """
    _check_coords(c)
    acc = _acc(c.core.dtype)
    return sum(jnp.sum(jnp.square(x.astype(acc))) for x in c)


@jax.jit
def tangent_norm_sq(f: LoraFactors, d: LoraFactors) -> Array:
    """``||dA b^T + a dB^T||_F^2`` from small matrices.

    ``<dA^T dA, N> + <dB^T dB, M> + 2 tr(a^T dA b^T dB)``, cost ``O((m + n) r^2)``.
    """
    f = _check_unbatched(f)
    d = check_tangent(f, d, name="d")
    acc = _acc(f.a.dtype)
    a, b, da, db = (x.astype(acc) for x in (*f, *d))
    mg, ng = a.T @ a, b.T @ b
    t1 = jnp.sum((da.T @ da) * ng)
    t2 = jnp.sum((db.T @ db) * mg)
    t3 = 2.0 * jnp.trace((a.T @ da) @ (b.T @ db))
    return t1 + t2 + t3


@jax.jit
def to_dense(f: LoraFactors) -> Array:
    """``a @ b.T`` (for tests and small sizes; stacked factors give ``[*stack, m, n]``)."""
    f = check_factors(f, name="f")
    return f.a @ jnp.swapaxes(f.b, -1, -2)


@jax.jit
def tangent_dense(f: LoraFactors, d: LoraFactors) -> Array:
    """Dense tangent vector ``dA b^T + a dB^T`` (test oracle)."""
    f = _check_unbatched(f)
    d = check_tangent(f, d, name="d")
    return d.a @ f.b.T + f.a @ d.b.T


def _check_g(given) -> None:
    _validate.floating(given["g"], name="g")  # before the jit (a string names a private function)


@checked_jit(check=_check_g)
def project_tangent_dense(f: LoraFactors, g: Float[ArrayLike, "m n"]) -> Array:
    """Dense projector ``P_U G + G P_V - P_U G P_V`` onto ``T_Z`` (test oracle). Jitted.

    Raises:
      TypeError: If ``f`` is not one pair of floating factors or ``g`` is not a floating
        ``[m, n]`` matrix of the factors' dtype (a string too).
    """
    f = _check_unbatched(f)
    g = jnp.asarray(g)
    _validate.floating(g, name="g")
    _validate.shape(g, (f.a.shape[0], f.b.shape[0]), name="g")
    if g.dtype != f.a.dtype:
        raise TypeError(f"`g` must have the factors' dtype {f.a.dtype}, got dtype {g.dtype}.")
    qa, _ = jnp.linalg.qr(f.a)
    qb, _ = jnp.linalg.qr(f.b)
    pu_g = qa @ (qa.T @ g)
    return pu_g + (g @ qb) @ qb.T - (pu_g @ qb) @ qb.T


@jax.jit
def horizontal_lift(f: LoraFactors, d: LoraFactors, cache: GramCache) -> LoraFactors:
    """Minimum-factor-norm representative of the same tangent vector.

    Solves ``M Om + Om N = dB^T b - a^T dA`` by eigendecompositions of ``M`` and
    ``N`` and returns ``(dA + a Om, dB - b Om^T)``, which is orthogonal to the
    vertical space ``{(a W, -b W^T)}`` and leaves ``dA b^T + a dB^T`` unchanged.
    """
    f = _check_unbatched(f)
    d = check_tangent(f, d, name="d")
    _check_cache(cache, f)
    return _horizontal(f, d, jnp.linalg.eigh(cache.m_gram), jnp.linalg.eigh(cache.n_gram))


def _horizontal(f, d, m_eig, n_eig):
    """:func:`horizontal_lift` given ``eigh(a^T a)``, ``eigh(b^T b)`` (balanced: ``(s, Q^T)``)."""
    (lm, um), (ln, vn) = m_eig, n_eig
    acc = um.dtype
    a, b, da, db = (x.astype(acc) for x in (*f, *d))
    rhs = db.T @ b - a.T @ da
    den = lm[:, None] + ln[None, :]
    tiny = jnp.finfo(acc).tiny
    x = jnp.where(den > tiny, (um.T @ rhs @ vn) / jnp.where(den > tiny, den, 1.0), 0.0)
    om = um @ x @ vn.T
    dt = d.a.dtype
    return LoraFactors((da + a @ om).astype(dt), (db - b @ om.T).astype(dt))


@functools.partial(jax.jit, static_argnames=("dtype",))
def sample_tangent_coords(
    cache: GramCache, *, std: Real[ArrayLike, ""], key: PRNGKeyArray, dtype=None
) -> TangentCoords:
    """Isotropic Gaussian noise on ``T_Z`` in coordinates, from ``(m + n) r`` normals.

    Draws ``U ~ N(0, I_{m x r})``, ``V ~ N(0, I_{n x r})`` and returns the
    coordinates of ``std * [(I - P_U) U v^T + u V^T]``, which is distributed as
    ``std * P_T(Xi)`` with ``Xi`` an iid ``m x n`` Gaussian: covariance ``std^2 P_T``,
    energy ``std^2 r (m + n - r)``. The frame is gauge-invariant, so the same key
    gives the same noise on ``Z`` for every gauge.
    """
    _validate.is_key(key)
    if not isinstance(std, jax.core.Tracer):  # traced: guarded by the public callers
        _check_std(std, "std")
    _check_cache(cache)
    acc = cache.u.dtype
    dtype = acc if dtype is None else dtype
    ku, kv = jax.random.split(key)
    uu = jax.random.normal(ku, cache.u.shape, acc)
    vv = jax.random.normal(kv, cache.v.shape, acc)
    std = jnp.asarray(std).astype(acc)
    up = uu - cache.u @ (cache.u.T @ uu)
    core = (cache.v.T @ vv).T
    vp = vv - cache.v @ (cache.v.T @ vv)
    return TangentCoords(
        (std * core).astype(dtype), (std * up).astype(dtype), (std * vp).astype(dtype)
    )


def _check_std(std, name: str) -> None:
    """Concrete checks of a noise scale: a finite real >= 0 (traced: :func:`_guard_std`)."""
    _validate.real(std, name=name)
    _validate.finite_scalar(**{name: std})
    _validate.non_negative(**{name: std})


def _guard_std(x, std, name: str):
    """``x`` guarded so that a traced NaN, infinite or negative noise scale raises."""
    if not isinstance(std, jax.core.Tracer):
        return x
    return _validate.guard_non_negative(x, std, name=name)


def sample_tangent_noise(
    f: LoraFactors, cache: GramCache, *, std: Real[ArrayLike, ""], key: PRNGKeyArray
) -> LoraFactors:
    """Factor form ``(xi_a, xi_b)`` of :func:`sample_tangent_coords` noise.

    ``xi_a b^T + a xi_b^T ~ N(0, std^2 P_T)``; the energy on ``Z`` is
    ``std^2 r (m + n - r)`` in expectation. ``std`` must be finite and >= 0 (a
    traced bad value raises under ``jit``). Jitted like jax.numpy (module level).
    ``f`` must be one pair and ``cache`` its :func:`gram_cache` shapes (a ``TypeError``).
    """
    _validate.is_key(key)
    _check_std(std, "std")
    return _sample_tangent_noise(f, cache, _guard_std(std, std, "std"), key)


@jax.jit
def _sample_tangent_noise(f, cache, std, key) -> LoraFactors:
    f = _check_unbatched(f)  # static (trace-time) checks, as the cache's
    _check_cache(cache, f)
    c = sample_tangent_coords(cache, std=std, key=key, dtype=f.a.dtype)
    return from_coords(f, c, cache)


def naive_noise_energy(f: LoraFactors, *, tau: Real[ArrayLike, ""]) -> Array:
    """First-order noise energy on ``Z`` of naive factor DP-SGD.

    ``tau^2 (m ||b||^2 + n ||a||^2)`` (``tau`` finite, >= 0; ``f`` as :func:`check_factors`).
    """
    _check_std(tau, "tau")
    return _naive_noise_energy(f, _guard_std(jnp.asarray(tau), tau, "tau"))


@jax.jit
def _naive_noise_energy(f: LoraFactors, tau) -> Array:
    f = check_factors(f, name="f")  # static: at trace time
    acc = _acc(f.a.dtype)
    a, b = f.a.astype(acc), f.b.astype(acc)
    m, n = a.shape[-2], b.shape[-2]
    tau = tau.astype(acc)
    return tau**2 * (m * jnp.sum(b * b) + n * jnp.sum(a * a))


def prism_noise_energy(f: LoraFactors, *, std: Real[ArrayLike, ""]) -> Array:
    """Closed-form PRISM noise energy on ``Z``: ``std^2 r (m + n - r)`` (``std`` finite, >= 0).

    ``f`` is checked as by :func:`check_factors` (a ``TypeError`` / ``ValueError``).
    """
    _check_std(std, "std")
    return _prism_noise_energy(f, _guard_std(jnp.asarray(std), std, "std"))


@jax.jit
def _prism_noise_energy(f: LoraFactors, std) -> Array:
    f = check_factors(f, name="f")  # static: at trace time
    m, r = f.a.shape[-2:]
    n = f.b.shape[-2]
    return jnp.asarray(std, jnp.float32) ** 2 * float(r * (m + n - r))
