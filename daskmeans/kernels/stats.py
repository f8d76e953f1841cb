"""Per-cluster statistics of a block: float64 sums, weights (counts) and SSE."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _cluster_stats(X, labels, dist2, weights, k, use_weights):
    n, d = X.shape
    sums = np.zeros((k, d), dtype=np.float64)
    counts = np.zeros(k, dtype=np.float64)
    sse = np.zeros(k, dtype=np.float64)
    for i in range(n):
        j = labels[i]
        w = weights[i] if use_weights else 1.0
        counts[j] += w
        sse[j] += w * dist2[i]
        for f in range(d):
            sums[j, f] += w * np.float64(X[i, f])
    return sums, counts, sse


def cluster_stats(X, labels, dist2, k, weights=None):
    """Sum of the (weighted) rows, total weight and weighted SSE of each of the ``k`` clusters.

    Parameters
    ----------
    X : ndarray (n, d)
    labels : int array (n,)
    dist2 : float64 array (n,)
        Squared distance of each row to its center.
    k : int
    weights : ndarray (n,), optional

    Returns
    -------
    sums : float64 (k, d)
    counts : float64 (k,)
    sse : float64 (k,)
    """
    use_weights = weights is not None
    w = np.asarray(weights, dtype=np.float64) if use_weights else np.empty(0, dtype=np.float64)
    return _cluster_stats(np.ascontiguousarray(X), labels, dist2, w, int(k), use_weights)
