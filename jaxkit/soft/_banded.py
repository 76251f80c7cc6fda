"""Banded SoftSort / NeuralSort with a run-time certified tail bound.

In sorted coordinates (``a = sort(x~)``) both score matrices peak on the diagonal and
decay monotonically away from it: SoftSort ``s_im = -|a_i - a_m| / tau`` (linear in
the gap sum) and NeuralSort ``s_im = -(c_i a_m + A_m) / tau`` with
``s_ii - s_im = sum_j gap_j (2 |j - i| + 1) / tau`` (quadratic in ``|m - i|``). Each
row is therefore truncated to the ``2w + 1`` columns ``m in [i - w, i + w]`` and
renormalised; because the decay is monotone, every dropped entry is at most the
first dropped one, so the dropped mass of row ``i`` is certified at run time by

    T_i <= (n - #window_i) * exp(max(s_{i,i-w-1}, s_{i,i+w+1}) - lse(window_i))

(the spec's ``(n - 2w - 1) exp(-Delta_w / tau)`` with ``Delta_w`` from the actual
gaps). Time and memory are O(n log n + n w) per row instead of O(n^2).

Certified deviations from the dense path (``||p - q||_1 = 2 T`` for a renormalised
truncation of a probability row): sort / top-k / quantile values
``<= T_i * (max x - min x)``; SoftSort ranks ``<= T_m * (n - 1)``; NeuralSort ranks
(column-normalised) ``<= (n - 1) * (E / C'_m + max_i T_i)`` with
``E = sum_i exp(edge_i - lse_i)`` and ``C'_m`` the banded column sum. These bounds are
returned by :func:`banded_error_bound`.

References:
  Prillo & Eisenschlos, SoftSort <https://arxiv.org/abs/2006.16038>, 2020.
  Grover et al., Stochastic optimization of sorting networks via continuous
  relaxations (NeuralSort) <https://arxiv.org/abs/1903.08850>, 2019.
  Paulus et al., SoftJAX & SoftTorch <https://arxiv.org/abs/2603.08824>, 2026.
"""

import jax
import jax.numpy as jnp
from jax import lax

from jaxkit._numerics import inverse_permutation
from jaxkit.soft._common import scal, standardize_and_squash
from jaxkit.soft._sorting import cumsum, stable_argsort

METHODS = ("softsort", "neuralsort")
OPS = ("sort", "rank", "top_k", "quantile")


def _sorted(xl, standardize, method):
    """Sorted squashed values ``a``, NeuralSort row sums ``A`` (sorted), perm, sorted x."""
    n = xl.shape[-1]
    xs = standardize_and_squash(xl, axis=-1)[0] if standardize else xl
    perm = stable_argsort(xs)
    a = jnp.take_along_axis(xs, perm, axis=-1)
    xsorted = jnp.take_along_axis(xl, perm, axis=-1)
    A = None
    if method == "neuralsort":
        S = cumsum(a)
        m = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=a.dtype), a.shape)
        A = (2 * m - n - 1) * a + S[..., -1:] - S - (S - a)
    return a, A, perm, xsorted


def _score(a, A, rows, cols, method, tau):
    """Scores ``s[..., r, c]`` of rows ``rows (R,)`` at sorted columns ``cols (R, C)``."""
    am = a[..., cols]
    if method == "softsort":
        return -jnp.abs(a[..., rows][..., None] - am) / tau
    n = a.shape[-1]
    c = jnp.broadcast_to((n - 1 - 2 * rows).astype(a.dtype)[:, None], am.shape)
    return -(c * am + A[..., cols]) / tau


def band(a, A, rows, w, softness, method):
    """Renormalised window rows ``q (..., R, 2w+1)``, columns, validity, tail terms.

    Returns ``(q, cols, valid, T, e)`` with ``T`` the certified dropped mass per row and
    ``e = exp(edge - lse)`` (the per-entry bound outside the window).
    """
    n = a.shape[-1]
    tau = scal(softness, a.dtype)
    offs = jnp.arange(-w, w + 1, dtype=jnp.int32)
    m = rows[:, None] + offs[None, :]
    valid = (m >= 0) & (m < n)
    cols = jnp.clip(m, 0, n - 1)
    if method == "neuralsort":
        return _band_neuralsort(a, rows, w, tau, offs, valid, cols)
    q, valid, lse = _masked_softmax(_score(a, A, rows, cols, method, tau), valid)
    # certificate: first dropped column on each side bounds every dropped entry
    sg = lax.stop_gradient
    edges = jnp.stack([rows - w - 1, rows + w + 1], -1)
    evalid = (edges >= 0) & (edges < n)
    se = _score(
        sg(a), None if A is None else sg(A), rows, jnp.clip(edges, 0, n - 1), method, sg(tau)
    )
    se = jnp.where(jnp.broadcast_to(evalid, se.shape), se, -jnp.inf)
    e = jnp.exp(jnp.max(se, -1) - sg(lse[..., 0]))
    cnt = (n - jnp.sum(valid, -1)).astype(a.dtype)
    T = jnp.minimum(cnt * e, 1.0)
    return q, cols, valid, T, e


def _masked_softmax(s, valid):
    """Softmax of the band scores ``s`` over ``valid`` columns; ``(q, valid, lse)``.

    Normalised as softmax does (max-shift then divide): an explicit lse of |s| ~ n / tau
    would carry an ulp(s) error into every probability.
    """
    valid = jnp.broadcast_to(valid, s.shape)
    s = jnp.where(valid, s, -jnp.inf)
    mx = lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    ex = jnp.where(valid, jnp.exp(s - mx), 0.0)
    tot = jnp.sum(ex, axis=-1, keepdims=True)
    return ex / tot, valid, mx + jnp.log(tot)


def _band_neuralsort(a, rows, w, tau, offs, valid, cols):
    """NeuralSort band from local gaps: ``s_ii - s_im = sum_j g_j (2 |j - i| + 1) / tau``.

    Equal to the dense scores up to the row constant ``s_ii`` (which softmax ignores)
    in exact arithmetic, but computed from the gaps ``g = diff(a)`` instead of the
    O(n)-sized ``c_i a_m + A_m``, so float32 resolves neighbours at any ``n``.
    """
    n = a.shape[-1]
    g = jnp.diff(a, axis=-1)  # >= 0: a is sorted
    wt = jnp.broadcast_to((2 * jnp.arange(w + 1) + 1).astype(a.dtype), (rows.shape[0], w + 1))
    t = jnp.arange(w + 1, dtype=jnp.int32)[None, :]
    up = rows[:, None] + t  # gap index for offsets +1 .. +(w+1)
    dn = rows[:, None] - 1 - t  # gap index for offsets -1 .. -(w+1)
    gu = jnp.where(jnp.broadcast_to((up >= 0) & (up < n - 1), wt.shape), up, 0)
    gd = jnp.where(jnp.broadcast_to((dn >= 0) & (dn < n - 1), wt.shape), dn, 0)
    wtb = jnp.broadcast_to(wt, (*a.shape[:-1], *wt.shape))
    Du = cumsum(g[..., gu] * wtb)  # drop at offsets +1 .. +(w+1)
    Dd = cumsum(g[..., gd] * wtb)
    zero = jnp.zeros_like(Du[..., :1])
    D = jnp.concatenate([jnp.flip(Dd[..., :w], -1), zero, Du[..., :w]], -1)
    q, valid, lse = _masked_softmax(-D / tau, valid)
    lse = lax.stop_gradient(lse)
    sg = lax.stop_gradient
    edges = jnp.stack([rows - w - 1, rows + w + 1], -1)
    evalid = jnp.broadcast_to((edges >= 0) & (edges < n), (*a.shape[:-1], rows.shape[0], 2))
    se = -sg(jnp.stack([Dd[..., w], Du[..., w]], -1)) / sg(tau)
    se = jnp.where(evalid, se, -jnp.inf)
    e = jnp.exp(jnp.max(se, -1) - lse[..., 0])
    cnt = (n - jnp.sum(valid, -1)).astype(a.dtype)
    T = jnp.minimum(cnt * e, 1.0)
    return q, cols, valid, T, e


def _range(xl):
    return lax.stop_gradient(jnp.max(xl, -1, keepdims=True) - jnp.min(xl, -1, keepdims=True))


def _values(xl, rows, w, softness, method, standardize, gated_grad):
    a, A, _, xsorted = _sorted(xl, standardize, method)
    q, cols, _, T, _ = band(a, A, rows, w, softness, method)
    q = q if gated_grad else lax.stop_gradient(q)
    v = jnp.sum(q * xsorted[..., cols], -1)
    return v, T * _range(xl)


def sort_last(xl, descending, softness, method, standardize, gated_grad, w):
    """Banded soft sort along the last axis: ``(values, certified bound)``."""
    n = xl.shape[-1]
    v, b = _values(xl, jnp.arange(n, dtype=jnp.int32), w, softness, method, standardize, gated_grad)
    if descending:
        v, b = jnp.flip(v, -1), jnp.flip(b, -1)
    return v, b


def _unsort(perm, v):
    """``out[..., perm[m]] = v[..., m]``."""
    return jnp.take_along_axis(v, inverse_permutation(perm), axis=-1)


def rank_last(xl, descending, softness, method, standardize, w):
    """Banded soft 1-based ranks along the last axis: ``(ranks, certified bound)``."""
    n = xl.shape[-1]
    a, A, perm, _ = _sorted(xl, standardize, method)
    rows = jnp.arange(n, dtype=jnp.int32)
    q, cols, valid, T, e = band(a, A, rows, w, softness, method)
    if method == "softsort":  # element m's distribution over anchors: the same band
        r = jnp.sum(q * jnp.broadcast_to((cols + 1).astype(q.dtype), q.shape), -1)
        b = T * (n - 1)
    else:  # column renormalisation: column m gathers q[m - o, o]
        offs = jnp.arange(-w, w + 1, dtype=jnp.int32)
        src = rows[:, None] - offs[None, :]
        ok = (src >= 0) & (src < n)
        srcc = jnp.clip(src, 0, n - 1)
        g = q[..., srcc, jnp.arange(2 * w + 1)[None, :]]
        g = jnp.where(jnp.broadcast_to(ok, g.shape), g, 0.0)
        C = jnp.sum(g, -1)
        N = jnp.sum(g * jnp.broadcast_to((srcc + 1).astype(g.dtype), g.shape), -1)
        r = N / jnp.clip(C, min=jnp.finfo(C.dtype).tiny)
        E = jnp.sum(e, -1, keepdims=True)
        Tm = jnp.max(T, -1, keepdims=True)
        b = (n - 1) * jnp.minimum(E / lax.stop_gradient(C) + Tm, 1.0)
    if descending:
        r = (n + 1) - r
    return _unsort(perm, r), _unsort(perm, b)


def top_k_last(xl, k, softness, method, standardize, gated_grad, w):
    """Banded soft top-k: ``(values (..., k), soft index (..., k, n), bound (..., k))``."""
    n = xl.shape[-1]
    rows = jnp.arange(n - 1, n - 1 - k, -1, dtype=jnp.int32)
    a, A, perm, xsorted = _sorted(xl, standardize, method)
    q, cols, _, T, _ = band(a, A, rows, w, softness, method)
    qv = q if gated_grad else lax.stop_gradient(q)
    v = jnp.sum(qv * xsorted[..., cols], -1)
    idx = perm[..., cols]
    lead = q.shape[:-2]
    qf = q.reshape(-1, k, 2 * w + 1)
    idf = idx.reshape(-1, k, 2 * w + 1)

    def scatter(qq, ii):
        return jnp.zeros((k, n), q.dtype).at[jnp.arange(k)[:, None], ii].add(qq)

    P = jax.vmap(scatter)(qf, idf).reshape(*lead, k, n)
    return v, P, T * _range(xl)


def quantile_last(xl, k, kp1, alpha, two, softness, method, standardize, gated_grad, w):
    """Banded soft quantile from rows ``k``/``kp1`` of the ascending sort."""
    rows = jnp.stack([k, kp1]).reshape(2).astype(jnp.int32)
    v, b = _values(xl, rows, w, softness, method, standardize, gated_grad)
    if two:
        return (1.0 - alpha) * v[..., 0] + alpha * v[..., 1], (1.0 - alpha) * b[..., 0] + alpha * b[
            ..., 1
        ]
    return v[..., 0], b[..., 0]
