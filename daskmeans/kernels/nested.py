"""Nested mini-batch k-means (Newling & Fleuret 2016): one sample, one vote.

The assignment kernels it uses are shared with exact k-means: :mod:`daskmeans.kernels.exact_assign` (new samples)
and :mod:`daskmeans.kernels.revisit` (samples already in the batch, after the centers moved). This module keeps the
running per-cluster sums exact under reassignment.
"""

from __future__ import annotations

import numba
import numpy as np

from .stats import add_scaled_row


# -- one sample, one vote --------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _batch_deltas(X, old_labels, old_dist2, new_labels, new_dist2, weights, n_reused, k):
    """The body of :func:`batch_deltas`.

    Parameters
    ----------
    X, weights : IN (m, d), float64 (m,)
    old_labels, old_dist2 : IN (n_reused,)
        The first ``n_reused`` rows' assignment before.
    new_labels, new_dist2 : IN (m,)
        Every row's assignment now.
    n_reused, k : IN int

    Returns
    -------
    sums, counts, sse, members, changed
        New arrays (see :func:`batch_deltas`).
    """
    d = X.shape[1]
    sums = np.zeros((k, d), dtype=np.float64)
    counts = np.zeros(k, dtype=np.float64)
    sse = np.zeros(k, dtype=np.float64)
    members = np.zeros(k, dtype=np.int64)
    changed = 0
    for i in range(X.shape[0]):
        b = new_labels[i]
        w = weights[i]
        sse[b] += w * new_dist2[i]
        if i < n_reused:
            a = old_labels[i]
            sse[a] -= w * old_dist2[i]
            if a == b:
                continue
            changed += 1
            counts[a] -= w
            members[a] -= 1
            add_scaled_row(sums[a], -w, X[i])
        counts[b] += w
        members[b] += 1
        add_scaled_row(sums[b], w, X[i])
    return sums, counts, sse, members, changed


def batch_deltas(X, old_labels, old_dist2, new_labels, new_dist2, k, weights=None):
    """Per-cluster changes of the sums S, counts v and SSE when samples are (re)assigned.

    The first ``len(old_labels)`` rows of ``X`` were in the batch already: their old contribution
    (``old_labels``, ``old_dist2``) is removed and the new one added, so each sample counts exactly once.
    The other rows are new and only added. A sample that keeps its label leaves S and v untouched. With
    ``weights`` a sample contributes ``w x`` to S, ``w`` to v and ``w d^2`` to the SSE (unit weights give the
    same values as none).

    Returns
    -------
    sums : float64 (k, d)
    counts : float64 (k,)
        Changes of v (the weight of each cluster).
    sse : float64 (k,)
    members : int64 (k,)
        Changes of the number of samples in each cluster.
    changed : int
        Reused samples whose label changed.
    """
    old_labels = np.asarray(old_labels, dtype=np.int32)
    old_dist2 = np.asarray(old_dist2, dtype=np.float64)
    weights = np.ones(X.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    return _batch_deltas(
        np.ascontiguousarray(X),
        old_labels,
        old_dist2,
        np.asarray(new_labels, dtype=np.int32),
        np.asarray(new_dist2, dtype=np.float64),
        weights,
        old_labels.shape[0],
        int(k),
    )
