"""Shared constructions for the engram tests (NumPy brute force, orthogonal memories)."""

import numpy as np


def brute_stats(rows, row_ids, k, absorb_bias=True):
    """Per-memory mean covariances and counts by a NumPy loop (the oracle)."""
    x = np.asarray(rows, np.float64)
    if absorb_bias:
        x = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    ids = np.asarray(row_ids)
    cov = np.zeros((k, x.shape[1], x.shape[1]))
    cnt = np.zeros((k,), np.int64)
    for m in range(k):
        xm = x[ids == m]
        cnt[m] = len(xm)
        if len(xm):
            cov[m] = xm.T @ xm / len(xm)
    return cov, cnt


def block_memories(rng, k, width, per_memory, batches):
    """Memories living in disjoint coordinate blocks of width ``width`` (orthogonal spans)."""
    d = k * width
    x = np.zeros((k * per_memory, d))
    ids = np.repeat(np.arange(k), per_memory)
    for m in range(k):
        x[m * per_memory : (m + 1) * per_memory, m * width : (m + 1) * width] = rng.normal(
            size=(per_memory, width)
        )
    perm = rng.permutation(len(x))
    x, ids = x[perm], ids[perm]
    return x.reshape(batches, -1, d), ids.reshape(batches, -1)
