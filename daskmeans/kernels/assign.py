"""Nearest center of every row of a block.

Two strategies: a direct Numba loop when ``k * d`` is small, and blocked GEMM scores (``||c||^2 - 2 x.c`` on a
slab of rows against all centers) settled exactly when it is large, so that the score matrix in memory is never
bigger than one slab, whatever ``n`` (and one row's scores at most, whatever ``k``).
"""

from __future__ import annotations

import numba
import numpy as np

from .. import config
from .exact_assign import assign_with_bounds, stored_rows_dtype
from .nested_groups import make_groups
from .stats import cluster_stats


@numba.njit(cache=True, nogil=True)
def nearest_direct(X, centers):
    """Nearest center by explicit squared distances: differences and their squares in the data's precision (no
    cancellation), summed in float64.

    Returns
    -------
    labels : int32 array (n,)
    dist2 : float64 array (n,)
    """
    n, d = X.shape
    k = centers.shape[0]
    labels = np.empty(n, dtype=np.int32)
    dist2 = np.empty(n, dtype=np.float64)
    for i in range(n):
        best = np.inf
        best_j = 0
        for j in range(k):
            s = 0.0
            for f in range(d):
                diff = X[i, f] - centers[j, f]
                s += diff * diff
            if s < best:
                best = s
                best_j = j
        labels[i] = best_j
        dist2[i] = best
    return labels, dist2


def nearest_gemm(X, centers, slab_bytes=None, stats=None, weights=None):
    """Exact nearest center by blocked GEMM scores settled by exact distances where they cannot decide.

    For each slab of rows, ``||c||^2 - 2 x.c`` is one GEMM against the centers scaled by -2 and a vectorized
    argmin (in float32 with at most ``PANEL_MAX_FEATURES`` features both in one register-blocked loop that never
    stores the scores, :mod:`daskmeans.kernels.panel_scan`); rows whose two best scores are within the proven GEMM
    error are settled by exact distances, and the winner's distance is exact
    (:func:`daskmeans.kernels.exact_assign.assign_with_bounds` without bounds). The
    labels are therefore the exact nearest centers, ties to the lowest index, the same as any bounded assignment.

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64
    centers : ndarray (k, d), same dtype as X
    slab_bytes : int, optional
        Size of the largest score slab held at once; None: :data:`~daskmeans.config.ASSIGN_SLAB_BYTES`, read at
        call time.
    stats, weights :
        Per-cluster accumulators the rows are added to as they are settled, and the rows' weights (see
        :func:`daskmeans.kernels.exact_assign.assign_with_bounds`).

    Returns
    -------
    labels : int32 array (n,)
    dist2 : float64 array (n,)
    """
    labels, dist2, _, _ = assign_with_bounds(
        X,
        centers,
        make_groups(centers, "none", 1),
        slab_bytes=slab_bytes,
        with_bounds=False,
        stats=stats,
        weights=weights,
    )
    return labels, dist2


def nearest_centers(X, centers, stats=None, weights=None):
    """Label of the nearest center and the squared distance to it, for every row of ``X``.

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64, or integers as stored (uint8 descriptors)
        Integer rows are computed exactly in the centers' dtype, converted a tile (or, with few centers, a slab)
        at a time: the same labels, distances and sums as converting them first.
    centers : ndarray (k, d)
        Cast to the dtype of floating ``X``; with integer ``X``, floating centers keep their dtype (float64 for
        integer centers).
    stats : tuple (sums, counts, sse), optional
        float64 accumulators that the rows are added to (in place, in row order): the numbers of
        :func:`daskmeans.kernels.stats.cluster_stats` with ``out=stats``, computed while each row is at hand.
    weights : ndarray (n,), optional
        The rows' sample weights, for ``stats``.

    Returns
    -------
    labels : int32 array (n,)
    dist2 : float64 array (n,)
    """
    X = np.ascontiguousarray(X)
    dtype = X.dtype if X.dtype.kind == "f" else stored_rows_dtype(centers)
    centers = np.ascontiguousarray(centers, dtype=dtype)
    if X.shape[0] == 0:
        return np.empty(0, dtype=np.int32), np.empty(0, dtype=np.float64)
    if centers.shape[0] * centers.shape[1] > config.ASSIGN_DIRECT_LIMIT:
        return nearest_gemm(X, centers, stats=stats, weights=weights)
    if X.dtype == dtype:
        labels, dist2 = nearest_direct(X, centers)
        if stats is not None:
            cluster_stats(X, labels, dist2, centers.shape[0], weights, out=stats)
        return labels, dist2
    labels, dist2 = np.empty(X.shape[0], dtype=np.int32), np.empty(X.shape[0], dtype=np.float64)
    step = max(1, config.ASSIGN_SLAB_BYTES // (X.shape[1] * dtype.itemsize))
    for start in range(0, X.shape[0], step):
        part = slice(start, start + step)
        labels[part], dist2[part] = nearest_centers(
            X[part].astype(dtype), centers, stats, None if weights is None else weights[part]
        )
    return labels, dist2


def all_dist2(X, centers):
    """The full ``(n, k)`` matrix of squared distances (for ``transform``; one block at a time)."""
    X = np.asarray(X)
    centers = np.asarray(centers, dtype=X.dtype)
    sq = np.einsum("ij,ij->i", X, X)[:, None] - 2.0 * (X @ centers.T) + np.einsum("ij,ij->i", centers, centers)
    return np.maximum(sq, 0, out=sq)
