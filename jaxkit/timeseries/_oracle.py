"""Oracle primitive labels of forecast windows, with thresholds fitted on train windows only.

For a history ``h [L]`` and its future ``f [H]`` (spec §4.2): the shift score
``Δμ = (mean f − mean h) / (std h + 1e-5)``, the volatility score
``r = log((std f + 1e-5) / (std h + 1e-5))``, a rule-based shape of ``f`` and an impact
profile (onset, tail mass, prominence) for lag & decay. Labels come from train-fitted
quantile thresholds. The labels use the future window: they are training targets, gate
targets and the source of semi-synthetic text, never a model input.

Marked reconstructions [R] (the authors' exact rules are not public): the shift
normaliser, the volatility log-ratio, the "strong peak/recover" cut ``2/H``, the whole
lag & decay rule and its map to the legacy ``temporal_influence`` labels.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxkit import _validate
from jaxkit._numerics import iota_like
from jaxkit.timeseries._schema import Schema, check_schema

EPS = 1e-5
PR_THRESHOLD = 0.002  # Peak/Recover score threshold of the 48-step rules [C]
# v2 lag id -> legacy temporal_influence id [R]: EARLY-FADE -> Immediate, *-PERSIST and
# DIFFUSE -> Sustained, MID-FADE and LATE -> Delayed.
_LAG_TO_LEGACY = (0, 2, 1, 2, 1, 2)


class Scores(NamedTuple):
    """Continuous primitive scores of each window (all ``[W]``).

    Attributes:
      shift: ``Δμ`` in history-std units.
      volatility: ``log`` ratio of future to history std.
      onset: Impact-profile centroid ``c`` in [0, 1].
      tail: Impact mass in the last third ``d``.
      prominence: Largest impact weight ``q``.
    """

    shift: Array
    volatility: Array
    onset: Array
    tail: Array
    prominence: Array


class Thresholds(NamedTuple):
    """Train-fitted cut points.

    ``shift`` ``[2]`` on ``|Δμ|``; ``volatility`` ``[2]`` (on ``r`` for 3 levels, on
    ``|r|`` for 5 levels).
    """

    shift: Array
    volatility: Array


def _check_windows(hist, fut):
    _validate.floating(hist, name="hist")  # before jnp.asarray (a string names none)
    _validate.floating(fut, name="fut")
    hist, fut = jnp.asarray(hist), jnp.asarray(fut)
    _validate.ndim(hist, 2, name="hist")
    _validate.ndim(fut, 2, name="fut")
    if hist.shape[0] != fut.shape[0]:
        raise TypeError(
            f"`hist` and `fut` must hold the same number of windows, got shapes {hist.shape} "
            f"and {fut.shape}."
        )
    if hist.shape[1] < 2 or fut.shape[1] < 2:
        raise ValueError(
            f"`hist` and `fut` windows must have >= 2 steps, got shapes {hist.shape} and "
            f"{fut.shape}."
        )
    if hist.dtype != fut.dtype:
        raise TypeError(f"`hist` and `fut` dtypes differ: {hist.dtype} and {fut.dtype}.")
    hist = _validate.all_finite(hist, name="hist")
    fut = _validate.all_finite(fut, name="fut")
    return hist, fut


def _scores(hist, fut):
    mh, sh = jnp.mean(hist, -1), jnp.std(hist, -1)
    mf, sf = jnp.mean(fut, -1), jnp.std(fut, -1)
    shift = (mf - mh) / (sh + EPS)
    vol = jnp.log((sf + EPS) / (sh + EPS))
    n = fut.shape[-1]
    dev = jnp.abs(fut - mh[..., None])
    tot = jnp.sum(dev, -1, keepdims=True)
    w = jnp.where(tot > 0, dev / jnp.where(tot > 0, tot, 1), 1.0 / n).astype(fut.dtype)
    onset = (w @ jnp.arange(n, dtype=fut.dtype)) / (n - 1)
    tail = jnp.sum(w[..., -(-2 * n // 3) :], -1)  # steps t >= 2H/3
    return Scores(shift, vol, onset, tail, jnp.max(w, -1))


@jax.jit
def _scores_jit(hist, fut):
    return _scores(hist, fut)


def primitive_scores(hist: Float[ArrayLike, "W L"], fut: Float[ArrayLike, "W H"]) -> Scores:
    """The continuous scores behind the oracle labels (jitted like jax.numpy).

    Args:
      hist: ``[W, L]`` history windows (finite).
      fut: ``[W, H]`` future windows (finite).

    Returns:
      :class:`Scores`, each ``[W]`` in the input dtype.

    Raises:
      TypeError: wrong ranks, dtypes or window counts.
      ValueError: a window shorter than 2 steps; a NaN or inf in ``hist``/``fut``.
    """
    hist, fut = _check_windows(hist, fut)
    return _scores_jit(hist, fut)


def _sign_changes(s):
    """Changes between consecutive nonzero signs of ``s [n]``.

    Returns their count, the CV of their gaps and the first nonzero sign (cumulative
    maxima, no gather or scan: sharding-friendly).
    """
    n = s.shape[0]
    i = iota_like(s)
    si = s.astype(jnp.int32)
    nz = si != 0
    last = jax.lax.cummax(jnp.where(nz, i * 4 + si + 1, -1), axis=0)  # last nonzero (idx, sign)
    prev = jnp.where(i == 0, -1, jnp.roll(last, 1))
    prev_sign = jnp.where(prev >= 0, prev % 4 - 1, 0)
    change = nz & (prev_sign != 0) & (si != prev_sign)
    cpos = jax.lax.cummax(jnp.where(change, i, -1), axis=0)
    prev_c = jnp.where(i == 0, -1, jnp.roll(cpos, 1))
    has_gap = change & (prev_c >= 0)
    gap = (i - prev_c).astype(jnp.float32)
    nch = jnp.sum(change.astype(jnp.int32))
    ng = jnp.maximum(nch - 1, 1).astype(jnp.float32)
    mean = jnp.sum(jnp.where(has_gap, gap, 0.0)) / ng
    var = jnp.maximum(jnp.sum(jnp.where(has_gap, gap * gap, 0.0)) / ng - mean * mean, 0.0)
    cv = jnp.where(nch >= 2, jnp.sqrt(var) / jnp.maximum(mean, 1e-6), jnp.inf)
    first = jnp.max(jnp.where(nz, (n - i) * 4 + si + 1, -1))
    return nch, cv, jnp.where(first >= 0, first % 4 - 1, 0)


def _slope(z):
    t = jnp.arange(z.shape[0], dtype=jnp.float32)
    t = t - jnp.mean(t)
    return jnp.sum(t * (z - jnp.mean(z))) / jnp.sum(t * t)


def _shape_one(f):
    """Shape id (Rise 0, Fall 1, Peak 2, Recover 3, Oscillate 4) of one window ``f [H]``."""
    f = f.astype(jnp.float32)
    n = f.shape[0]
    d = jnp.diff(f)
    slope = _slope(f)
    if n < 8:  # very short windows: the prompt's turning-point definition
        nch, _, first = _sign_changes(jnp.sign(d))
        mono = jnp.where(slope > 0, 0, jnp.where(slope < 0, 1, 4))
        one = jnp.where(first > 0, 2, 3)
        return jnp.where(nch == 0, mono, jnp.where(nch == 1, one, 4)).astype(jnp.int32)
    amax = jnp.max(jnp.abs(d))
    s = jnp.where(jnp.abs(d) > 0.15 * amax, jnp.sign(d), 0.0)
    nch, cv, _ = _sign_changes(s)
    osc = (nch >= 5) | ((nch >= 4) & (cv < 0.4))
    fp = jnp.mean((d > 0).astype(jnp.float32))
    fn = jnp.mean((d < 0).astype(jnp.float32))
    lo, hi = jnp.min(f), jnp.max(f)
    z = (f - lo) / jnp.maximum(hi - lo, 1e-12)
    splits = sorted({round(n / 4 + i * n / 12) for i in range(7)} & set(range(2, n - 2)))
    splits = [s_ for s_ in splits if s_ <= round(3 * n / 4)]
    pk, rc = jnp.float32(0), jnp.float32(0)
    floor = 0.2 * PR_THRESHOLD
    for sp in splits:
        s1, s2 = _slope(z[: sp + 1]), _slope(z[sp:])
        score = jnp.abs(s1) + jnp.abs(s2)
        pk = jnp.maximum(pk, jnp.where((s1 > floor) & (s2 < -floor), score, 0.0))
        rc = jnp.maximum(rc, jnp.where((s1 < -floor) & (s2 > floor), score, 0.0))
    pr_score = jnp.maximum(pk, rc)
    pr_id = jnp.where(pk >= rc, 2, 3)
    strong = pr_score >= 2.0 / n  # [R]

    def rf(frac):
        return jnp.where(
            (fp >= frac) & (slope > 0), 0, jnp.where((fn >= frac) & (slope < 0), 1, -1)
        )

    out = jnp.int32(4)
    for frac in (0.40, 0.42):
        r = rf(frac)
        out = jnp.where(r >= 0, r, out)
    out = jnp.where(pr_score > PR_THRESHOLD, pr_id, out)
    r = rf(0.45)
    out = jnp.where((r >= 0) & ~strong, r, out)
    return jnp.where(osc, 4, out).astype(jnp.int32)


def _lag_id(sc: Scores, n: int):
    diffuse = sc.prominence < 1.5 / n
    persist = sc.tail >= 1.0 / 3.0
    early = sc.onset < 1.0 / 3.0
    mid = sc.onset < 2.0 / 3.0
    lag = jnp.where(early, jnp.where(persist, 1, 0), jnp.where(mid, jnp.where(persist, 3, 2), 4))
    return jnp.where(diffuse, 5, lag).astype(jnp.int32)


def _levels(x, cuts):
    """5-level signed id (STRONG-RISE 0 ... STRONG-DROP 4) of ``x`` with cuts on ``|x|``."""
    a = jnp.abs(x)
    up = x >= 0
    return jnp.where(
        a < cuts[0], 2, jnp.where(a < cuts[1], jnp.where(up, 1, 3), jnp.where(up, 0, 4))
    ).astype(jnp.int32)


def _labels(hist, fut, shift_cuts, vol_cuts, schema):
    sc = _scores(hist, fut)
    n = fut.shape[-1]
    cols = []
    for p in schema.primitives:
        k = len(p.labels)
        if p.kind == "shift":
            cols.append(_levels(sc.shift, shift_cuts))
        elif p.kind == "volatility" and k == 3:  # High 0, Medium 1, Low 2
            v = sc.volatility
            cols.append(jnp.where(v < vol_cuts[0], 2, jnp.where(v < vol_cuts[1], 1, 0)))
        elif p.kind == "volatility":
            cols.append(_levels(sc.volatility, vol_cuts))
        elif p.kind == "shape":
            cols.append(jax.vmap(_shape_one)(fut))
        elif k == 6:
            cols.append(_lag_id(sc, n))
        else:
            cols.append(jnp.asarray(_LAG_TO_LEGACY, jnp.int32)[_lag_id(sc, n)])
    return jnp.stack([c.astype(jnp.int32) for c in cols], -1)


_labels_jit = jax.jit(_labels, static_argnames=("schema",))


def _check_kinds(schema: Schema) -> None:
    for p in schema.primitives:
        k = len(p.labels)
        ok = {"shift": (5,), "volatility": (3, 5), "shape": (5,), "lag": (3, 6)}[p.kind]
        if k not in ok:
            raise ValueError(
                f"primitive `{p.name}` ({p.kind}) has {k} labels; the oracle knows "
                f"{' or '.join(map(str, ok))}."
            )


def oracle_labels(
    hist: Float[ArrayLike, "W L"],
    fut: Float[ArrayLike, "W H"],
    thresholds: Thresholds,
    *,
    schema: Schema,
) -> Int[Array, "W K"]:
    """Oracle label ids ``[W, K]`` of each window (columns in ``schema`` order).

    Jitted like jax.numpy (``schema`` static; arrays and thresholds traced). Shape uses the
    48-step rule set of the authors' classification standards (Oscillate, then Rise/Fall,
    Peak/Recover, relaxed Rise/Fall, default Oscillate); windows shorter than 8 steps use
    the turning-point definition.

    Args:
      hist: ``[W, L]`` history windows.
      fut: ``[W, H]`` future windows.
      thresholds: From :func:`fit_thresholds` on train windows.
      schema: ``LEGACY_V1`` or ``V2`` (or a schema with the same label counts).

    Returns:
      ``int32[W, K]`` label ids.

    Raises:
      TypeError: wrong ranks, dtypes, window counts or threshold shapes.
      ValueError: a window shorter than 2 steps; NaN/inf in the windows or thresholds;
        decreasing thresholds.
    """
    schema = check_schema(schema)
    _check_kinds(schema)
    hist, fut = _check_windows(hist, fut)
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"`thresholds` must be a Thresholds, got {type(thresholds).__name__}.")
    s = jnp.asarray(thresholds.shift, hist.dtype)
    v = jnp.asarray(thresholds.volatility, hist.dtype)
    _validate.shape(s, (2,), name="thresholds.shift")
    _validate.shape(v, (2,), name="thresholds.volatility")
    s = _validate.all_finite(s, name="thresholds.shift")
    v = _validate.all_finite(v, name="thresholds.volatility")
    s = _validate.error_if(s, s[0] > s[1], "`thresholds.shift` must be increasing.")
    v = _validate.error_if(v, v[0] > v[1], "`thresholds.volatility` must be increasing.")
    return _labels_jit(hist, fut, s, v, schema=schema)


@functools.partial(jax.jit, static_argnames=("three_level",))
def _fit(hist, fut, train, sq, vq, *, three_level):
    sc = _scores(hist, fut)
    a = jnp.where(train, jnp.abs(sc.shift), jnp.nan)
    v = sc.volatility if three_level else jnp.abs(sc.volatility)
    v = jnp.where(train, v, jnp.nan)
    return Thresholds(
        jnp.nanquantile(a, sq.astype(a.dtype)), jnp.nanquantile(v, vq.astype(v.dtype))
    )


def fit_thresholds(
    hist: Float[ArrayLike, "W L"],
    fut: Float[ArrayLike, "W H"],
    *,
    schema: Schema,
    train: Bool[ArrayLike, " W"] | None = None,
    shift_quantiles: Float[ArrayLike, "2"] | tuple[float, float] = (0.25, 0.75),
    vol_quantiles: Float[ArrayLike, "2"] | tuple[float, float] | None = None,
) -> Thresholds:
    """Quantile thresholds from the train windows only (jitted like jax.numpy).

    Shift: quantiles of ``|Δμ|`` (default 0.25/0.75 [C]). Volatility: with 3 levels
    (legacy High/Medium/Low) quantiles of ``r`` (default 0.33/0.66 [C]); with 5 levels
    quantiles of ``|r|`` (default 0.25/0.75 [R]). Windows outside ``train`` never enter.

    Args:
      hist: ``[W, L]`` history windows.
      fut: ``[W, H]`` future windows.
      schema: The schema (decides 3- or 5-level volatility).
      train: Optional ``bool[W]``: the train windows (default all); at least one True.
      shift_quantiles: Two increasing fractions in [0, 1] (traced).
      vol_quantiles: Two fractions (default by schema, see above; traced).

    Returns:
      :class:`Thresholds`.

    Raises:
      TypeError: wrong ranks, dtypes or sizes.
      ValueError: NaN/inf in the windows, no train window, quantiles outside [0, 1] or
        not increasing.
    """
    schema = check_schema(schema)
    _check_kinds(schema)
    hist, fut = _check_windows(hist, fut)
    three = len(schema.primitives[schema.index("volatility")].labels) == 3
    if vol_quantiles is None:
        vol_quantiles = (0.33, 0.66) if three else (0.25, 0.75)
    w = hist.shape[0]
    if train is not None:
        _validate.boolean(train, name="train")
    train = jnp.ones((w,), bool) if train is None else jnp.asarray(train)
    _validate.shape(train, (w,), name="train")
    train = _validate.error_if(train, ~jnp.any(train), "`train` must select >= 1 window.")
    qs = []
    for name, q in (("shift_quantiles", shift_quantiles), ("vol_quantiles", vol_quantiles)):
        q = q if isinstance(q, jax.Array) else np.asarray(q)
        _validate.real(q, name=name)
        q = jnp.asarray(q, jnp.float32)
        _validate.shape(q, (2,), name=name)
        q = _validate.guard_interval(q, q, name=name, low=0.0, high=1.0)
        q = _validate.error_if(q, ~(q[0] <= q[1]), f"`{name}` must be increasing.")
        qs.append(q)
    return _fit(hist, fut, train, qs[0], qs[1], three_level=three)
