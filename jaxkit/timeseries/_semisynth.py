"""Semi-synthetic events with rendered text, sliding windows and statsmodels series.

``inject_event`` adds to a real future window an event consistent with sampled primitive
labels (a mean shift and a shape template under an onset/decay envelope, in history-std
units, and a variance scaling); ``render_text`` writes template sentences for the labels
plus irrelevant sentences; ``make_semisynthetic`` does both over sliding windows of a
series. Label noise is rendered as conflicting reports (two wrong phrases) or, for a
fraction, one wrong phrase. [R: the spec fixes the ingredients, not the constants.]
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate
from jaxkit.timeseries._gate import check_labels
from jaxkit.timeseries._schema import V2, Schema, check_schema

# ------------------------------------------------------------------ windows and data


@functools.partial(jax.jit, static_argnames=("context_len", "horizon", "stride"))
def _windows(series, *, context_len, horizon, stride):
    t = series.shape[0]
    starts = jnp.arange(0, t - context_len - horizon + 1, stride)
    hi = starts[:, None] + jnp.arange(context_len)[None]
    fi = starts[:, None] + context_len + jnp.arange(horizon)[None]
    return series[hi], series[fi]


def sliding_windows(
    series: Float[ArrayLike, "T ..."], context_len: int, horizon: int, *, stride: int = 1
) -> tuple[Array, Array]:
    """All (history, future) window pairs of ``series [T, ...]`` (jitted, sizes static).

    Returns ``hist [W, L, ...]`` and ``fut [W, H, ...]`` with
    ``W = (T - L - H) // stride + 1``.

    Raises:
      TypeError: ``series`` not a floating array of rank >= 1.
      ValueError: ``series`` shorter than ``L + H``; NaN/inf in ``series``.
    """
    _validate.floating(series, name="series")  # before jnp.asarray (a string names none)
    series = jnp.asarray(series)
    _validate.min_ndim(series, 1, name="series")
    L = _validate.python_int(context_len, name="context_len", minimum=1)
    H = _validate.python_int(horizon, name="horizon", minimum=1)
    stride = _validate.python_int(stride, name="stride", minimum=1)
    if series.shape[0] < L + H:
        raise ValueError(
            f"`series` (length {series.shape[0]}) is shorter than the window "
            f"context_len + horizon = {L + H}."
        )
    series = _validate.all_finite(series, name="series")
    return _windows(series, context_len=L, horizon=H, stride=stride)


STATSMODELS = ("co2", "sunspots", "nile", "macrodata", "elnino")


def load_statsmodels(name: str) -> np.ndarray:
    """A series shipped with ``statsmodels`` as ``float32[T, C]`` (host-side, offline).

    ``co2``: weekly CO2 (2284 weeks; gaps linearly interpolated); ``sunspots``: yearly
    activity; ``nile``: yearly volume; ``macrodata``: quarterly real-GDP growth (%) and
    unemployment; ``elnino``: monthly sea-surface temperature, 1950-2010, flattened.
    """
    _validate.one_of(STATSMODELS, name=name)
    import importlib

    class _Datasets:  # import only the one dataset module (statsmodels.api is slow to import)
        def __getattr__(self, mod):
            return importlib.import_module(f"statsmodels.datasets.{mod}")

    ds = _Datasets()
    if name == "co2":
        s = ds.co2.load_pandas().data["co2"].interpolate().bfill().to_numpy()[:, None]
    elif name == "sunspots":
        s = ds.sunspots.load_pandas().data["SUNACTIVITY"].to_numpy()[:, None]
    elif name == "nile":
        s = ds.nile.load_pandas().data["volume"].to_numpy()[:, None]
    elif name == "macrodata":
        d = ds.macrodata.load_pandas().data
        g = 100 * np.diff(np.log(d["realgdp"].to_numpy()))
        s = np.stack([g, d["unemp"].to_numpy()[1:]], 1)
    else:
        s = ds.elnino.load_pandas().data.iloc[:, 1:].to_numpy().reshape(-1, 1)
    return np.asarray(s, np.float32)


# ------------------------------------------------------------------ event injection

_SHIFT = (2.5, 1.0, 0.0, -1.0, -2.5)  # STRONG-RISE .. STRONG-DROP, history-std units
_VOL5 = (2.5, 1.6, 1.0, 0.6, 0.3)
_VOL3 = (2.0, 1.0, 0.4)  # High, Medium, Low


def _template(shape_id, t):
    """Shape templates on ``t`` in [0, 1]: ASCEND, DESCEND, PEAK, TROUGH, OSCILLATE."""
    tri = 1.0 - jnp.abs(2.0 * t - 1.0)
    temps = jnp.stack([t, -t, tri, -tri, jnp.sin(6.0 * jnp.pi * t)])
    return temps[shape_id]


def _envelope(lag_id, t):
    """Onset/decay envelopes (EARLY/MID/LATE x FADE/PERSIST, DIFFUSE) on ``t`` in [0, 1]."""

    def env(on, fade):
        after = (t >= on).astype(t.dtype)
        return after * (jnp.exp(-(t - on) / 0.15) if fade else jnp.ones_like(t))

    envs = jnp.stack(
        [
            env(0.0, True),
            env(0.0, False),
            env(1 / 3, True),
            env(1 / 3, False),
            env(2 / 3, False),
            jnp.full_like(t, 0.6),
        ]
    )
    return envs[lag_id]


def _inject(hist, fut, labels, strength, schema):
    dt = fut.dtype
    h = fut.shape[0]
    t = jnp.linspace(0.0, 1.0, h).astype(dt)
    sd = jnp.std(hist) + 1e-5
    ks = {p.kind: i for i, p in enumerate(schema.primitives)}
    shift = jnp.asarray(_SHIFT, dt)[labels[ks["shift"]]]
    nvol = len(schema.primitives[ks["volatility"]].labels)
    vol = jnp.asarray(_VOL3 if nvol == 3 else _VOL5, dt)[labels[ks["volatility"]]]
    lag = labels[ks["lag"]]
    nlag = len(schema.primitives[ks["lag"]].labels)
    if nlag == 3:  # legacy Immediate / Delayed / Sustained -> EARLY-FADE / LATE / EARLY-PERSIST
        lag = jnp.asarray((0, 4, 1), jnp.int32)[lag]
    env = _envelope(lag, t)
    shape = _template(labels[ks["shape"]], t)
    mf = jnp.mean(fut)
    scaled = mf + (1.0 + (vol - 1.0) * strength) * (fut - mf)
    return scaled + strength * sd * env * (shift + 1.5 * shape)


_inject_jit = jax.jit(jax.vmap(_inject, in_axes=(0, 0, 0, None, None)), static_argnums=4)


def inject_event(
    hist: Float[ArrayLike, "W L"],
    fut: Float[ArrayLike, "W H"],
    labels: Int[ArrayLike, "W K"],
    *,
    schema: Schema = V2,
    strength: float | Array = 1.0,
) -> Float[Array, "W H"]:
    """Future windows with an event consistent with ``labels`` injected (jitted).

    ``f' = m + (1 + (v - 1) s)(f - m) + s · std(h) · env(t) · (shift + 1.5 · shape(t))``
    with ``m = mean f``, the volatility factor ``v``, the signed shift level, the shape
    template and the onset/decay envelope of the labels, and ``s = strength`` (0: f
    unchanged).

    Raises:
      TypeError: wrong shapes/dtypes; ``hist`` and ``fut`` with different numbers of
        windows, or ``hist`` with no time step (its std would be NaN).
      ValueError: an unknown label id, NaN/inf windows, a non-finite or negative
        ``strength``.
    """
    schema = check_schema(schema)
    _validate.real(hist, name="hist")  # before jnp.asarray (a string names none)
    _validate.floating(fut, name="fut")
    hist, fut = jnp.asarray(hist), jnp.asarray(fut)
    _validate.ndim(hist, 2, name="hist")
    _validate.ndim(fut, 2, name="fut")
    if hist.shape[0] != fut.shape[0]:
        raise TypeError(
            "`hist` and `fut` must hold the same number of windows W, got shapes "
            f"{hist.shape} and {fut.shape}."
        )
    _validate.nonempty(hist, name="hist", axis=-1, what="time step")  # its std scales the event
    labels = check_labels(labels, schema.sizes, name="labels")
    _validate.shape(labels, (fut.shape[0], len(schema.sizes)), name="labels")
    hist = _validate.all_finite(hist, name="hist").astype(fut.dtype)
    fut = _validate.all_finite(fut, name="fut")
    fut = _validate.guard_non_negative(fut, strength, name="strength")
    return _inject_jit(hist, fut, labels, jnp.asarray(strength, fut.dtype), schema)


# ------------------------------------------------------------------ text

PHRASES_V2 = {
    "distribution_shift": {
        "STRONG-RISE": "demand is set to surge sharply",
        "MILD-RISE": "a modest uptick is expected",
        "STABLE": "levels should hold steady",
        "MILD-DROP": "a slight decline is expected",
        "STRONG-DROP": "a steep collapse is feared",
    },
    "volatility_shift": {
        "STRONG-RISE": "conditions will turn extremely turbulent",
        "MILD-RISE": "somewhat choppier trading is likely",
        "STABLE": "variability should stay as usual",
        "MILD-DROP": "conditions should calm slightly",
        "STRONG-DROP": "conditions will become very calm",
    },
    "shape": {
        "ASCEND": "a steady climb",
        "DESCEND": "a gradual slide",
        "PEAK": "a spike that then reverses",
        "TROUGH": "a dip followed by a rebound",
        "OSCILLATE": "repeated swings up and down",
    },
    "lag_decay": {
        "EARLY-FADE": "right away but fading quickly",
        "EARLY-PERSIST": "right away and for good",
        "MID-FADE": "midway through, only briefly",
        "MID-PERSIST": "midway through and then lasting",
        "LATE": "only toward the very end",
        "DIFFUSE": "spread evenly over the period",
    },
}
"""One rendered phrase per (primitive, label) of :data:`V2`, used by ``render_text``."""
LEXICON_V2 = {p: {lab: (ph,) for lab, ph in d.items()} for p, d in PHRASES_V2.items()}
"""The rule extractor's lexicon for :data:`V2`: the phrases of :data:`PHRASES_V2` by label."""
_FRAMES = {
    "shift": ("Analysts say {}.", "According to the bulletin, {}.", "Officials note that {}."),
    "volatility": ("Traders warn that {}.", "The outlook says {}."),
    "shape": ("The path should show {}.", "Forecasters describe {}."),
    "lag": ("The effect should arrive {}.", "Impact is expected {}."),
}
DISTRACTORS = (
    "The committee met on Tuesday.",
    "A new office opened downtown.",
    "Weather was mild across the region.",
    "The quarterly report was filed on time.",
    "Staff attended a training session.",
    "The website was redesigned.",
    "A local team won its match.",
    "The library extended its hours.",
)
"""Event-free sentences mixed into rendered text (the extractor must ignore them)."""
NEUTRAL = "No notable events were reported."


def render_text(
    labels: Int[ArrayLike, " K"],
    *,
    rng: np.random.Generator,
    schema: Schema = V2,
    phrases: dict | None = None,
    n_distractors: int = 3,
    noisy: np.ndarray | None = None,
    conflict: float = 0.75,
) -> str:
    """One text describing ``labels`` (host-side), sentences shuffled with distractors.

    ``noisy[k]`` True describes primitive k wrongly: with probability ``conflict`` as two
    distinct wrong phrases (conflicting reports), else as one wrong phrase.

    Raises:
      TypeError: ``labels`` not ``int[K]`` or ``noisy`` not ``bool[K]`` (one per primitive).
      ValueError: an unknown label id, a primitive missing from ``phrases``, a negative
        ``n_distractors`` or a ``conflict`` outside ``[0, 1]``.
    """
    schema = check_schema(schema)
    phrases = PHRASES_V2 if phrases is None else phrases
    labels = np.asarray(labels)
    if labels.shape != (len(schema.primitives),) or not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(
            f"`labels` must be int[{len(schema.primitives)}] (one per primitive), got "
            f"{labels.dtype} {labels.shape}."
        )
    if noisy is not None:
        noisy = np.asarray(noisy)
        if noisy.shape != labels.shape or noisy.dtype != np.bool_:
            raise TypeError(
                f"`noisy` must be bool[{len(schema.primitives)}] (one per primitive), got "
                f"{noisy.dtype} {noisy.shape}."
            )
    n_distractors = _validate.python_int(n_distractors, name="n_distractors", minimum=0)
    _validate.in_interval(low=0, high=1, conflict=conflict)
    sents = []
    for k, p in enumerate(schema.primitives):
        if p.name not in phrases:
            raise ValueError(f"`phrases` has no entry for primitive `{p.name}`.")
        lab = int(labels[k])
        if not 0 <= lab < len(p.labels):
            raise ValueError(
                f"`labels` holds an unknown label id {lab} for primitive `{p.name}` (ids "
                f"must lie in [0, {len(p.labels) - 1}])."
            )
        chosen = [lab]
        if noisy is not None and noisy[k]:
            wrong = [i for i in range(len(p.labels)) if i != lab]
            n = 2 if rng.random() < conflict else 1
            chosen = list(rng.choice(wrong, n, replace=False))
        for c in chosen:
            frame = _FRAMES[p.kind][rng.integers(len(_FRAMES[p.kind]))]
            sents.append(frame.format(phrases[p.name][p.labels[int(c)]]))
    sents += list(rng.choice(DISTRACTORS, min(n_distractors, len(DISTRACTORS)), replace=False))
    rng.shuffle(sents)
    return " ".join(sents)


class SemiSynthetic(NamedTuple):
    """Windows with injected events.

    ``hist [W, L]``, ``fut [W, H]`` (after injection), ``clean_fut [W, H]`` (before),
    ``event bool[W]``, ``labels int32[W, K]`` (the injected labels; neutral labels where
    there is no event) and ``texts`` (W strings).
    """

    hist: np.ndarray
    fut: np.ndarray
    clean_fut: np.ndarray
    event: np.ndarray
    labels: np.ndarray
    texts: list[str]


def make_semisynthetic(
    series: np.ndarray,
    *,
    key: jax.Array,
    context_len: int,
    horizon: int,
    stride: int = 1,
    schema: Schema = V2,
    p_event: float = 0.7,
    strength: float = 1.0,
    n_distractors: int = 3,
    noise_rate: float = 0.0,
) -> SemiSynthetic:
    """Sliding windows of a 1-D ``series`` with events injected and texts rendered.

    Each window gets an event with probability ``p_event`` (labels uniform per primitive,
    effect by :func:`inject_event`) and a text from :func:`render_text` (with
    ``noise_rate`` per-primitive label noise); other windows get a neutral sentence and
    the distractors. Host-side driver (the injection itself is jitted).

    Raises:
      TypeError: ``series`` not a numeric array of rank >= 1 (a ``[T, ...]`` series is
        read by its first column), empty, or with no column; a ``key`` that is not a key.
      ValueError: ``p_event`` or ``noise_rate`` outside ``[0, 1]``; the checks of
        :func:`sliding_windows` and :func:`inject_event`.
    """
    schema = check_schema(schema)
    _validate.is_key(key)
    _validate.in_interval(p_event=p_event, low=0.0, high=1.0)
    _validate.in_interval(noise_rate=noise_rate, low=0.0, high=1.0)
    s = np.asarray(series)
    if s.dtype.kind not in "biuf":
        got = f"{type(series).__name__} {series!r:.80}"
        raise TypeError(f"`series` must be a real array, got {got}.")
    _validate.min_ndim(s, 1, name="series")
    _validate.nonempty(s, name="series")
    if s.size == 0:
        raise TypeError(f"`series` must have at least one column, got shape {s.shape}.")
    s = s.astype(np.float32).reshape(len(s), -1)[:, 0]
    hist, fut = (np.asarray(a) for a in sliding_windows(s, context_len, horizon, stride=stride))
    w = hist.shape[0]
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    event = rng.random(w) < p_event
    labels = np.stack([rng.integers(0, len(p.labels), w) for p in schema.primitives], 1)
    neutral = np.asarray([p.labels.index(p.neutral) for p in schema.primitives])
    labels = np.where(event[:, None], labels, neutral[None]).astype(np.int32)
    new = np.asarray(inject_event(hist, fut, labels, schema=schema, strength=strength))
    new = np.where(event[:, None], new, fut)
    texts = []
    for i in range(w):
        if event[i]:
            noisy = rng.random(len(schema.primitives)) < noise_rate
            texts.append(
                render_text(
                    labels[i], rng=rng, schema=schema, n_distractors=n_distractors, noisy=noisy
                )
            )
        else:
            d = list(rng.choice(DISTRACTORS, min(n_distractors, len(DISTRACTORS)), replace=False))
            texts.append(" ".join([NEUTRAL, *d]))
    return SemiSynthetic(hist, new.astype(np.float32), fut, event, labels, texts)
