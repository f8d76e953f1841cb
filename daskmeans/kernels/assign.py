"""Nearest center of every row of a block.

Two strategies with one result: a direct Numba loop when ``k * d`` is small, and blocked GEMM
(``||x||^2 - 2 x.c + ||c||^2`` on a slab of rows against a slab of centers) when it is large, so that the
distance matrix in memory is never bigger than one slab, whatever ``n`` and ``k``.
"""

from __future__ import annotations

import numba
import numpy as np

from ..config import ASSIGN_DIRECT_LIMIT, ASSIGN_SLAB_BYTES
from .distance import exact_dist2


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


def nearest_gemm(X, centers, centers_sq=None, slab_bytes=ASSIGN_SLAB_BYTES):
    """Nearest center by blocked GEMM; the distance of the winner is then recomputed exactly.

    For each slab, ``||c||^2 - 2 x.c`` is one GEMM against the centers scaled by -2, one vectorized addition
    and NumPy's SIMD argmin (``||x||^2`` is the same for every center and is left out).

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64
    centers : ndarray (k, d), same dtype as X
    centers_sq : ndarray (k,), optional
        Squared norms of the centers (computed when not given).
    slab_bytes : int
        Size of the largest distance slab held at once.

    Returns
    -------
    labels : int32 array (n,)
    dist2 : float64 array (n,)
    """
    n = X.shape[0]
    k = centers.shape[0]
    if centers_sq is None:
        centers_sq = np.einsum("ij,ij->i", centers, centers)
    centers_sq = centers_sq.astype(X.dtype, copy=False)
    scaled = (-2.0 * centers).astype(X.dtype)
    itemsize = X.dtype.itemsize
    center_step = max(1, min(k, 4096))
    row_step = max(1, min(n, slab_bytes // (center_step * itemsize)))
    labels = np.zeros(n, dtype=np.int32)
    best = np.full(n, np.inf, dtype=X.dtype)
    buffer = np.empty((row_step, center_step), dtype=X.dtype)
    for c0 in range(0, k, center_step):
        c1 = min(k, c0 + center_step)
        for r0 in range(0, n, row_step):
            r1 = min(n, r0 + row_step)
            scores = buffer[: r1 - r0, : c1 - c0]
            np.matmul(X[r0:r1], scaled[c0:c1].T, out=scores)
            scores += centers_sq[c0:c1]
            winner = np.argmin(scores, axis=1)
            value = scores[np.arange(r1 - r0), winner]
            if c0 == 0:
                labels[r0:r1] = winner
                best[r0:r1] = value
            else:
                closer = value < best[r0:r1]
                labels[r0:r1][closer] = winner[closer] + c0
                best[r0:r1][closer] = value[closer]
    return labels, exact_dist2(X, centers, labels)


def nearest_centers(X, centers, centers_sq=None):
    """Label of the nearest center and the squared distance to it, for every row of ``X``.

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64, C-contiguous
    centers : ndarray (k, d)
        Cast to the dtype of ``X``.
    centers_sq : ndarray (k,), optional

    Returns
    -------
    labels : int32 array (n,)
    dist2 : float64 array (n,)
    """
    X = np.ascontiguousarray(X)
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    if X.shape[0] == 0:
        return np.empty(0, dtype=np.int32), np.empty(0, dtype=np.float64)
    if centers.shape[0] * centers.shape[1] <= ASSIGN_DIRECT_LIMIT:
        return nearest_direct(X, centers)
    return nearest_gemm(X, centers, centers_sq)


def all_dist2(X, centers):
    """The full ``(n, k)`` matrix of squared distances (for ``transform``; one block at a time)."""
    X = np.asarray(X)
    centers = np.asarray(centers, dtype=X.dtype)
    sq = np.einsum("ij,ij->i", X, X)[:, None] - 2.0 * (X @ centers.T) + np.einsum("ij,ij->i", centers, centers)
    return np.maximum(sq, 0, out=sq)
