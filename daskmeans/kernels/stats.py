"""Per-cluster statistics of a block: float64 sums, weights (counts) and SSE."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def add_scaled_row(total, scale, row):
    """``total += scale * row`` in float64, element by element (written over one row so that it vectorizes: the
    same loop indexing a 2-D ``total`` runs several times slower)."""
    for f in range(row.shape[0]):
        total[f] += scale * np.float64(row[f])


@numba.njit(cache=True, nogil=True, inline="always")
def add_to_cluster(sums, counts, sse, label, weight, dist2, row):
    """One row of weight ``weight`` at squared distance ``dist2`` added to cluster ``label``'s float64 statistics.

    Parameters
    ----------
    sums, counts, sse : IN-OUT float64 (k, d), (k,), (k,)
    label, weight, dist2, row : IN
    """
    counts[label] += weight
    sse[label] += weight * dist2
    add_scaled_row(sums[label], weight, row)


@numba.njit(cache=True, nogil=True)
def _cluster_stats(X, labels, dist2, weights, use_weights, sums, counts, sse):
    """The body of :func:`cluster_stats`: every row added to its cluster, in row order.

    Parameters
    ----------
    X, labels, dist2, weights, use_weights : IN
        The rows, their clusters and squared distances, their weights (read with ``use_weights``, else 1).
    sums, counts, sse : IN-OUT float64 (k, d), (k,), (k,)
    """
    n = X.shape[0]
    for i in range(n):
        j = labels[i]
        add_to_cluster(sums, counts, sse, j, weights[i] if use_weights else 1.0, dist2[i], X[i])
    return sums, counts, sse


@numba.njit(cache=True, nogil=True)
def move_rows(X, old_labels, new_labels, sums, counts):
    """Every row whose cluster changed taken out of its old cluster's sum and count and added to its new one's
    (weight 1 each).

    For rows of integers the float64 sums hold integers below ``2**53`` and every addition is exact, so sums kept
    up to date this way equal, to the last bit, the sums :func:`cluster_stats` adds up anew.

    Parameters
    ----------
    X : ndarray (n, d)
    old_labels, new_labels : int arrays (n,)
    sums, counts : IN-OUT float64 (k, d), (k,)
        The statistics of ``old_labels``, made those of ``new_labels``.
    """
    for i in range(X.shape[0]):
        old = old_labels[i]
        new = new_labels[i]
        if old == new:
            continue
        counts[old] -= 1.0
        counts[new] += 1.0
        add_scaled_row(sums[old], -1.0, X[i])
        add_scaled_row(sums[new], 1.0, X[i])


@numba.njit(cache=True, nogil=True)
def cluster_sse(labels, dist2, sse):
    """``sse[j]`` plus the squared distances of cluster ``j``'s rows, added in row order (as :func:`cluster_stats`
    adds them for rows of weight 1)."""
    for i in range(labels.shape[0]):
        sse[labels[i]] += dist2[i]
    return sse


@numba.njit(cache=True, nogil=True, inline="always")
def _worse(values, positions, a, b):
    """Whether kept entry ``a`` ranks below kept entry ``b``: a smaller value, or an equal one later in order."""
    return values[a] < values[b] or (values[a] == values[b] and positions[a] > positions[b])


@numba.njit(cache=True, nogil=True, inline="always")
def _sift_down(values, positions, at, size):
    """Restore the heap (its worst entry first, :func:`_worse`) below ``at``."""
    while True:
        worst = at
        for child in (2 * at + 1, 2 * at + 2):
            if child < size and _worse(values, positions, child, worst):
                worst = child
        if worst == at:
            return
        values[at], values[worst] = values[worst], values[at]
        positions[at], positions[worst] = positions[worst], positions[at]
        at = worst


@numba.njit(cache=True, nogil=True)
def largest_positions(values, keep):
    """Positions of the ``keep`` largest ``values``, largest first, equal values in position order.

    One read of ``values`` against a heap of the ``keep`` kept so far, its worst first: a value enters only when it
    beats the worst, so a block's few farthest rows cost far less than a selection over the whole block (which
    copies and partitions it), and at most ``n log keep`` steps whatever the order of the values.

    Examples
    --------
    >>> largest_positions(np.array([1.0, 5.0, 3.0, 5.0, 0.5]), 3)
    array([1, 3, 2])
    """
    size = min(max(keep, 0), values.shape[0])
    kept_values = np.empty(size, dtype=np.float64)
    kept = np.empty(size, dtype=np.int64)
    for i in range(size):  # the first ones, then made a heap
        kept_values[i] = values[i]
        kept[i] = i
    for at in range(size // 2 - 1, -1, -1):
        _sift_down(kept_values, kept, at, size)
    for i in range(size, values.shape[0]):
        value = np.float64(values[i])
        if value > kept_values[0]:  # an equal value comes later in order: it ranks below the worst kept
            kept_values[0] = value
            kept[0] = i
            _sift_down(kept_values, kept, 0, size)
    order = np.argsort(-kept_values)
    result = kept[order]
    start = 0
    for stop in range(1, size + 1):  # each run of equal values put in position order
        if stop == size or kept_values[order[stop]] != kept_values[order[start]]:
            result[start:stop] = np.sort(result[start:stop])
            start = stop
    return result


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
        out = (
            np.zeros((int(k), X.shape[1]), dtype=np.float64),
            np.zeros(int(k), dtype=np.float64),
            np.zeros(int(k), dtype=np.float64),
        )
    sums, counts, sse = out
    _cluster_stats(np.ascontiguousarray(X), labels, dist2, w, use_weights, sums, counts, sse)
    return sums, counts, sse


@numba.njit(cache=True, nogil=True)
def column_moments(rows):
    """Per-feature mean and sum of squared deviations of the finite rows of a slab, with the data checks, in two
    reads of the slab (float64 accumulators, no temporaries the size of the slab).

    A row holding any NaN or infinity is left out of the moments and counted.

    Parameters
    ----------
    rows : ndarray (n, d), float32 or float64

    Returns
    -------
    n_finite_rows : int
    mean : float64 (d,)
        Zeros when no row is finite.
    m2 : float64 (d,)
        Sum over the finite rows of ``(x - mean)^2`` per feature.
    n_nonfinite : int
        NaN and infinite values.
    first_nonfinite : int
        Position of the first row holding one (-1 when none).
    max_abs : float
        Largest absolute value of the finite rows (0 when none).
    """
    n, d = rows.shape
    finite = np.ones(n, dtype=np.bool_)
    total = np.zeros(d)
    column_max = np.zeros(d)
    n_nonfinite = 0
    first_nonfinite = -1
    n_finite = 0
    for i in range(n):
        bad = 0
        for f in range(d):
            value = np.float64(rows[i, f])
            bad += (value - value) != 0.0  # NaN for NaN and +-inf, 0 for every finite value
        if bad:
            finite[i] = False
            n_nonfinite += bad
            if first_nonfinite < 0:
                first_nonfinite = i
            continue
        n_finite += 1
        for f in range(d):
            value = np.float64(rows[i, f])
            total[f] += value
            column_max[f] = max(column_max[f], abs(value))
    mean = np.zeros(d)
    m2 = np.zeros(d)
    if n_finite == 0:
        return 0, mean, m2, n_nonfinite, first_nonfinite, 0.0
    for f in range(d):
        mean[f] = total[f] / n_finite
    for i in range(n):
        if finite[i]:
            for f in range(d):
                deviation = np.float64(rows[i, f]) - mean[f]
                m2[f] += deviation * deviation
    return n_finite, mean, m2, n_nonfinite, first_nonfinite, column_max.max()
