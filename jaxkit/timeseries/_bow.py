"""The bag-of-words raw-text fusion baseline of TESS's demonstration (spec §4.5).

The text of a window, as a normalised bag-of-words vector ``b ∈ R^V`` (a vocabulary fitted
on the train texts), is projected to ``n_tokens`` prefix tokens
``e = reshape(b W, (n_tokens, D)) + T`` that are prepended, ungated, to the same PatchTST
backbone. Every word of the text, distractors included, reaches the forecaster; this is
the "raw-text fusion" baseline against which TESS's interpretable primitive bottleneck is
compared at the same budget (the same backbone, prefix length and training).
"""

import functools
import re
from collections import Counter
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit.timeseries._model import PatchTST, check_series, check_x

_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bag_of_words(
    texts: Sequence[str], *, vocab: Sequence[str] | None = None
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Normalised word counts ``float32[N, V]`` and the vocabulary (host-side, not jitted).

    Words are lower-cased runs of letters (hyphenated words kept whole). Without
    ``vocab``, the vocabulary is every word of ``texts`` in sorted order (fit it on the
    train texts, then pass it for the test texts: unknown words are dropped). Row ``i``
    is the word-count vector of ``texts[i]`` divided by its number of in-vocabulary words
    (all zeros for a text with none).

    Raises:
      TypeError: ``texts`` not a sequence of strings.
      ValueError: an empty ``texts`` or an empty vocabulary.
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("`texts` must be a sequence of strings.")
    if len(texts) == 0:
        raise ValueError("`texts` must hold >= 1 text.")
    toks = [_tokens(t) for t in texts]
    if vocab is None:
        vocab = sorted({w for ts in toks for w in ts})
    vocab = tuple(vocab)
    if len(vocab) == 0:
        raise ValueError("`vocab` is empty (no words in `texts`).")
    index = {w: i for i, w in enumerate(vocab)}
    out = np.zeros((len(texts), len(vocab)), np.float32)
    for i, ts in enumerate(toks):
        c = Counter(w for w in ts if w in index)
        n = sum(c.values())
        for w, m in c.items():
            out[i, index[w]] = m / n
    return out, vocab


@functools.partial(jax.jit, static_argnames=("v", "t", "d", "dtype"))
def _init_bow(key, *, v, t, d, dtype):
    k1, k2 = jax.random.split(key)
    return (
        (jax.random.normal(k1, (v, t * d)) / v**0.5).astype(dtype),
        (0.02 * jax.random.normal(k2, (t, d))).astype(dtype),
    )


class BoWForecaster(eqx.Module):
    """PatchTST plus ``n_tokens`` ungated prefix tokens from a bag-of-words vector.

    Unbatched: ``model(x [L, C], bow [V]) -> [H, C]``.
    """

    backbone: PatchTST
    w_text: Array  # [V, n_tokens * D]
    type_emb: Array  # [n_tokens, D]
    n_tokens: int = eqx.field(static=True)

    def __init__(self, backbone: PatchTST, vocab_size: int, *, key: jax.Array, n_tokens: int = 4):
        """Wrap ``backbone`` (weights shared) for texts over a ``vocab_size`` vocabulary.

        ``n_tokens`` defaults to 4, TESS's prefix length for its four primitives.
        """
        if not isinstance(backbone, PatchTST):
            raise TypeError(f"`backbone` must be a PatchTST, got {type(backbone).__name__}.")
        v = _validate.python_int(vocab_size, name="vocab_size", minimum=1)
        t = _validate.python_int(n_tokens, name="n_tokens", minimum=1)
        _validate.is_key(key)
        d, dt = backbone.pos.shape[-1], backbone.pos.dtype
        self.backbone = backbone
        self.w_text, self.type_emb = _init_bow(key, v=v, t=t, d=d, dtype=dt)
        self.n_tokens = t

    def __call__(self, x: Array, bow: Array) -> Array:
        """Forecast ``[H, C]`` from one history ``x [L, C]`` and its text's ``bow [V]``.

        Unbatched (``jax.vmap`` it, or use :func:`bow_forecast`).

        Raises:
          TypeError: ``x`` not a floating ``[L, C]`` array for the backbone; ``bow`` not a
            floating ``[V]`` array of the model's vocabulary size.
        """
        bb = self.backbone
        check_series(bb, x)
        _validate.floating(bow, name="bow")  # before any jnp op: a str names the argument
        _validate.shape(bow, (self.w_text.shape[0],), name="bow")
        z, stats = bb.embed(x)
        prefix = jnp.reshape(bow.astype(self.w_text.dtype) @ self.w_text, self.type_emb.shape)
        prefix = prefix + self.type_emb
        ones = jnp.ones((self.n_tokens,), z.dtype)
        z = jax.vmap(lambda zc: bb.encode(zc, prefix, ones))(z)
        return bb.head(z, stats)


@jax.jit
def _bow_jit(model, x, bow):
    return jax.vmap(model)(x, bow)


def check_bow(model: BoWForecaster, bow, n: int, name: str = "bow") -> Array:
    """``bow [n, V]`` floating and finite for ``model``'s vocabulary."""
    _validate.floating(bow, name=name)  # before jnp.asarray: a str names the argument
    bow = jnp.asarray(bow)
    _validate.shape(bow, (n, model.w_text.shape[0]), name=name)
    return _validate.all_finite(bow, name=name)


def bow_forecast(
    model: BoWForecaster, x: Float[ArrayLike, "B L C"], bow: Float[ArrayLike, "B V"]
) -> Float[Array, "B H C"]:
    """Forecasts ``[B, H, C]`` of the bag-of-words fusion baseline (jitted like jax.numpy).

    Args:
      model: A :class:`BoWForecaster`.
      x: ``[B, L, C]`` histories.
      bow: ``[B, V]`` bag-of-words vectors (:func:`bag_of_words` with the model's vocabulary).

    Raises:
      TypeError: wrong types or shapes.
      ValueError: NaN or inf in ``x`` or ``bow``.
    """
    if not isinstance(model, BoWForecaster):
        raise TypeError(f"`model` must be a BoWForecaster, got {type(model).__name__}.")
    x = check_x(model.backbone, x)
    return _bow_jit(model, x, check_bow(model, bow, x.shape[0]))
