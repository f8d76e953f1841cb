"""Per-cluster statistics of a block: float64 sums, weights (counts) and SSE."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _cluster_stats(X, labels, dist2, weights, use_weights, sums, counts, sse):
    n, d = X.shape
    for i in range(n):
        j = labels[i]
        w = weights[i] if use_weights else 1.0
        counts[j] += w
        sse[j] += w * dist2[i]
        for f in range(d):
            sums[j, f] += w * np.float64(X[i, f])
    return sums, counts, sse


def cluster_stats(X, labels, dist2, k, weights=None, out=None):
    """Sum of the (weighted) rows, total weight and weighted SSE of each of the ``k`` clusters.

    Rows are added one at a time, in order, to float64 accumulators: calls on consecutive slabs of a block that
    pass the previous call's result as ``out`` give exactly the result of one call on the whole block.

    Parameters
    ----------
    X : ndarray (n, d)
    labels : int array (n,)
    dist2 : float64 array (n,)
        Squared distance of each row to its center.
    k : int
    weights : ndarray (n,), optional
    out : (sums, counts, sse), optional
        Accumulators to add to (modified in place and returned); new zeros by default.

    Returns
    -------
    sums : float64 (k, d)
    counts : float64 (k,)
    sse : float64 (k,)
    """
    use_weights = weights is not None
    w = np.asarray(weights, dtype=np.float64) if use_weights else np.empty(0, dtype=np.float64)
    if out is None:
        out = (np.zeros((int(k), X.shape[1]), dtype=np.float64), np.zeros(int(k), dtype=np.float64),
               np.zeros(int(k), dtype=np.float64))
    sums, counts, sse = out
    _cluster_stats(np.ascontiguousarray(X), labels, dist2, w, use_weights, sums, counts, sse)
    return sums, counts, sse
