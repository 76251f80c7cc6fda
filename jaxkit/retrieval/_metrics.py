"""Text-motion retrieval metrics and TMR's four evaluation protocols (host-side NumPy).

R@1/2/3/5/10 and median rank, text->motion and motion->text, ties averaged (TMR's
``break_ties="averaging"``); protocols ``normal`` (all pairs), ``threshold`` (a retrieved
item counts when its caption is near-identical to the query's), ``nsim`` (a dissimilar
subset) and ``guo`` (random batches of 32, averaged). Following TMR's metric code
(Petrovich et al., ICCV 2023); not jitted (evaluation runs once on the host).
"""

from typing import Literal

import jax
import numpy as np

from jaxkit import _validate

KS = (1, 2, 3, 5, 10)
Protocol = Literal["normal", "threshold", "nsim", "guo"]


def _as_sims(sims, name="sims"):
    a = np.asarray(sims)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise TypeError(f"`{name}` must be a non-empty square matrix, got shape {a.shape}.")
    if not np.issubdtype(a.dtype, np.floating) and a.dtype.name != "bfloat16":
        raise TypeError(f"`{name}` must be floating, got dtype {a.dtype}.")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"`{name}` must be finite (NaN or inf found).")
    return a


def _ranks(sims, correct, break_ties):
    """0-based rank of the best-scoring correct item of each query row."""
    gt = np.max(np.where(correct, sims, -np.inf), axis=1, keepdims=True)
    above = np.sum(sims > gt, axis=1)
    ties = np.sum(sims == gt, axis=1)
    if break_ties == "average":
        return above + (ties - 1) / 2.0
    return above.astype(np.float64)


def _summary(cols, prefix):
    out = {f"{prefix}/R{k:02d}": 100.0 * float(np.mean(cols < k)) for k in KS}
    out[f"{prefix}/MedR"] = float(np.median(cols) + 1.0)
    out[f"{prefix}/len"] = float(len(cols))
    return out


def retrieval_metrics(
    sims,
    *,
    text_selfsim=None,
    threshold: float | None = None,
    break_ties: str = "average",
) -> dict[str, float]:
    """R@k (k in 1, 2, 3, 5, 10) and median rank in both directions.

    ``sims[k, l]`` scores caption ``k`` against motion ``l``; the pair ``(k, k)`` is the
    ground truth. Each query's rank is the 0-based position of its correct item among
    all items sorted by decreasing score; tied scores share the average of their
    positions (``"optimistic"``: the best one). ``R@k = 100 * mean(rank < k)``,
    ``MedR = median(rank) + 1``. With ``text_selfsim`` and ``threshold`` (TMR's
    ``threshold`` protocol), every item whose caption has ``text_selfsim >= 2 threshold
    - 1`` with the query's caption counts as correct and the best-scoring one is ranked.
    Host-side NumPy in float64, not jitted.

    Args:
      sims: ``[n, n]`` caption-by-motion similarities.
      text_selfsim: ``[n, n]`` caption-caption cosine similarities, or ``None``.
      threshold: In ``[0, 1]`` (TMR uses 0.95), required with ``text_selfsim``.
      break_ties: ``"average"`` (TMR's default) or ``"optimistic"``.

    Returns:
      A dict ``{"t2m/R01", ..., "t2m/R10", "t2m/MedR", "t2m/len", "m2t/..."}``.

    Raises:
      TypeError: If ``sims`` is not a floating square matrix or ``text_selfsim`` does not
        match it.
      ValueError: For non-finite ``sims``, an unknown ``break_ties``, a ``threshold``
        outside [0, 1] or given without ``text_selfsim`` (or vice versa).

    Example:
      >>> import numpy as np
      >>> m = retrieval_metrics(np.eye(4))
      >>> m["t2m/R01"], m["m2t/MedR"]
      (100.0, 1.0)

    References:
      Petrovich, Black, Varol, "TMR: Text-to-Motion Retrieval Using Contrastive 3D Human
      Motion Synthesis", ICCV 2023, arXiv:2305.00976.
    """
    s = _as_sims(sims)
    _validate.one_of(("average", "optimistic"), break_ties=break_ties)
    n = s.shape[0]
    if (text_selfsim is None) != (threshold is None):
        raise ValueError("`threshold` and `text_selfsim` must be given together (or neither).")
    if text_selfsim is None:
        correct = np.eye(n, dtype=bool)
    else:
        ts = _as_sims(text_selfsim, "text_selfsim")
        if ts.shape != s.shape:
            raise TypeError(f"`text_selfsim` must have shape {s.shape}, got {ts.shape}.")
        _validate.in_interval(low=0, high=1, threshold=threshold)
        correct = (ts >= 2 * threshold - 1) | np.eye(n, dtype=bool)
    out = _summary(_ranks(s, correct, break_ties), "t2m")
    out.update(_summary(_ranks(s.T, correct.T, break_ties), "m2t"))
    return out


def protocol_metrics(
    sims,
    protocol: str = "normal",
    *,
    text_selfsim=None,
    nsim_indices=None,
    key=None,
    batch_size: int = 32,
    threshold: float = 0.95,
) -> dict[str, float]:
    """Retrieval metrics under one of TMR's four protocols.

    ``normal``: all test pairs. ``threshold``: :func:`retrieval_metrics` with
    ``text_selfsim`` and ``threshold`` (0.95). ``nsim``: the pairs listed in
    ``nsim_indices`` (a dissimilar-caption subset, e.g. TMR's ``nsim_test.txt`` or
    :func:`dissimilar_subset`). ``guo``: the pairs shuffled with ``key``, cut into batches
    of ``batch_size`` (the incomplete last batch dropped) and the metrics averaged over
    batches (Guo et al.'s protocol). Host-side, not jitted.

    Args:
      sims: ``[n, n]`` caption-by-motion similarities (positives on the diagonal).
      protocol: ``"normal"``, ``"threshold"``, ``"nsim"`` or ``"guo"``.
      text_selfsim: Caption-caption cosine similarities (``threshold`` only).
      nsim_indices: Integer indices of the subset (``nsim`` only).
      key: PRNG key for the shuffle (``guo`` only).
      batch_size: Batch size of ``guo`` (>= 1, <= n).
      threshold: Text-similarity threshold of ``threshold`` in [0, 1].

    Returns:
      The dict of :func:`retrieval_metrics`.

    Raises:
      TypeError: If ``sims`` is malformed or ``key`` is not a key.
      ValueError: For an unknown protocol or a missing/invalid protocol input.

    Example:
      >>> import jax, numpy as np
      >>> m = protocol_metrics(np.eye(64), "guo", key=jax.random.key(0))
      >>> m["t2m/R01"], m["t2m/len"]
      (100.0, 32.0)
    """
    _validate.one_of(("normal", "threshold", "nsim", "guo"), protocol=protocol)
    # checked whatever the protocol, so that a bad value never passes unnoticed
    _validate.in_interval(low=0, high=1, threshold=threshold)
    _validate.python_int(batch_size, name="batch_size", minimum=1)
    s = _as_sims(sims)
    if protocol == "normal":
        return retrieval_metrics(s)
    if protocol == "threshold":
        if text_selfsim is None:
            raise ValueError("protocol 'threshold' needs `text_selfsim`.")
        return retrieval_metrics(s, text_selfsim=text_selfsim, threshold=threshold)
    if protocol == "nsim":
        if nsim_indices is None:
            raise ValueError("protocol 'nsim' needs `nsim_indices`.")
        idx = np.asarray(nsim_indices)
        if not np.issubdtype(idx.dtype, np.integer) or idx.ndim != 1 or idx.size == 0:
            raise TypeError("`nsim_indices` must be a non-empty 1-D integer array.")
        if idx.min() < 0 or idx.max() >= s.shape[0] or len(np.unique(idx)) != idx.size:
            raise ValueError("`nsim_indices` must be distinct indices in [0, n).")
        return retrieval_metrics(s[np.ix_(idx, idx)])
    _validate.is_key(key)
    b = _validate.python_int(batch_size, name="batch_size", minimum=1)
    if b > s.shape[0]:
        raise ValueError(f"`batch_size` must be <= n = {s.shape[0]}, got batch_size={b}.")
    perm = np.asarray(jax.random.permutation(key, s.shape[0]))
    rounds = [
        retrieval_metrics(s[np.ix_(c, c)])
        for c in (perm[i : i + b] for i in range(0, s.shape[0] - b + 1, b))
    ]
    return {k: float(np.mean([r[k] for r in rounds])) for k in rounds[0]}


def dissimilar_subset(text_selfsim, *, size: int, threshold: float = 0.95) -> np.ndarray:
    """Greedy subset of captions pairwise below ``2 threshold - 1`` text similarity.

    A stand-in for TMR's ``nsim_test.txt`` when it is not available: scan the captions in
    order and keep one when it is dissimilar to every kept caption, up to ``size``.
    Host-side.

    Args:
      text_selfsim: ``[n, n]`` caption-caption cosine similarities.
      size: Maximum subset size (>= 1).
      threshold: In [0, 1].

    Returns:
      Sorted int64 indices (possibly fewer than ``size``).

    Raises:
      TypeError: If ``text_selfsim`` is malformed or ``size`` is not an int.

    Example:
      >>> import numpy as np
      >>> dissimilar_subset(np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
      ...                   size=3).tolist()
      [0, 2]
    """
    ts = _as_sims(text_selfsim, "text_selfsim")
    k = _validate.python_int(size, name="size", minimum=1)
    _validate.in_interval(low=0, high=1, threshold=threshold)
    kept: list[int] = []
    for i in range(ts.shape[0]):
        if all(ts[i, j] < 2 * threshold - 1 for j in kept):
            kept.append(i)
            if len(kept) == k:
                break
    return np.asarray(kept, np.int64)
