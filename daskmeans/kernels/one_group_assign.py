"""Exact nearest center against one group of centers (no group bounds): the plain assignment, and Hamerly's single
bound per row.

Tiles of rows are scored center by center (``-2 C X_tile^T``, one GEMM), and one Numba pass per tile finds every
row's best two scores (vectorized over the rows) and settles the rows while the tile is in cache: the exact nearest
center (near ties by exact distances), its exact distance, the cluster's float64 sums and the bound. Labels and
distances are those of every other assignment kernel (:mod:`daskmeans.kernels.exact_assign`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..config import ONE_GROUP_TILE_ROWS
from .distance import pair_dist2
from .score_error import _store_lower, norm_and_allowance
from .stats import add_to_cluster


@numba.njit(cache=True, nogil=True)
def _best_two_by_column(scores_t, column_add, best, second, best_col):
    """For every row ``i`` of the scores ``scores_t[c, i] + column_add[c]`` (laid out center by center): the
    position of its smallest (the first among equals, as ``argmin``), that score, and the smallest of the others
    (equal to it when the minimum occurs twice), written to ``best_col``, ``best`` and ``second``.

    The loop over the rows is innermost and branch-free, so that it runs on vectors of rows.
    """
    columns, rows = scores_t.shape
    for i in range(rows):
        best[i] = np.inf
        second[i] = np.inf
        best_col[i] = 0
    for c in range(columns):
        add = column_add[c]
        for i in range(rows):
            value = scores_t[c, i] + add
            low = best[i]
            second[i] = min(second[i], max(low, value))
            best_col[i] = c if value < low else best_col[i]
            best[i] = min(low, value)


@numba.njit(cache=True, nogil=True)
def _settle_one_group(X, centers, scores_t, column_sq, slot_center, best, second, best_col, x_sq, allowance,
                      labels, dist2, lower, norms_here, gamma, center_norm, weights, sums, counts, sse):
    """:func:`_finish_slab` for one group of centers from the raw GEMM products ``scores_t[c, i] = -2 x_i.c``
    (center by center, the center of column ``c`` being ``slot_center[c]``; ``column_sq[c]`` its squared norm is
    added here, in the data's precision): each row's best two scores (:func:`_best_two_by_column`), then each row
    settled while the tile is in cache: its norm and allowance (``norms_here``), the exact nearest center (near
    ties by exact distances, lowest center index among equals), its exact distance, its cluster's float64 sums and
    (``lower`` not ``(n, 0)``) the lower bound on its distance to every other center.
    """
    _best_two_by_column(scores_t, column_sq, best, second, best_col)
    rows = X.shape[0]
    columns = scores_t.shape[0]
    with_bounds = lower.shape[1] > 0
    with_stats = sums.shape[0] > 0
    zero = np.zeros(X.shape[1], dtype=X.dtype)
    rechecked = 0
    for i in range(rows):
        if norms_here:
            x_sq[i], allowance[i] = norm_and_allowance(X[i], zero, center_norm, gamma)
        col = best_col[i]
        label = slot_center[col]
        runner_up = second[i]
        if runner_up - best[i] <= 2.0 * allowance[i]:
            # a near tie: only exact distances decide
            rechecked += 1
            limit = best[i] + 2.0 * allowance[i]
            best_exact = np.inf
            label_col = col
            for c in range(columns):
                if scores_t[c, i] + column_sq[c] > limit:
                    continue
                j = slot_center[c]
                value = pair_dist2(X[i], centers[j])
                if value < best_exact or (value == best_exact and j < label):
                    best_exact = value
                    label = j
                    label_col = c
            dist2[i] = best_exact
            if label_col != col:
                runner_up = np.inf
                for c in range(columns):
                    if c != label_col:
                        runner_up = min(runner_up, scores_t[c, i] + column_sq[c])
        else:
            dist2[i] = pair_dist2(X[i], centers[label])
        labels[i] = label
        if with_stats:
            add_to_cluster(sums, counts, sse, label, weights[i] if weights.shape[0] > 0 else 1.0, dist2[i], X[i])
        if with_bounds:
            lower[i, 0] = _store_lower(math.sqrt(max(np.float64(runner_up) + x_sq[i] - allowance[i], 0.0)))
    return rechecked


def _assign_one_group(X, centers, slots, slot_center, x_sq, allowance, slab_bytes, labels, dist2, lower,
                      norms_here, gamma, center_norm, weights, sums, counts, sse):
    """:func:`_assign_tiles` for one group of centers (no padding slots): tiles of ``ONE_GROUP_TILE_ROWS`` rows
    (fewer when their scores would pass ``slab_bytes``), each one GEMM of the centers scaled by -2 against the
    tile's rows, laid out center by center, then :func:`_settle_one_group`."""
    n, d = X.shape
    columns = slots.shape[1]
    row_step = max(1, min(n, ONE_GROUP_TILE_ROWS, int(slab_bytes) // max(1, columns * X.dtype.itemsize)))
    scaled_centers = np.ascontiguousarray(slots[:d].T)
    column_sq = np.ascontiguousarray(slots[d])
    buffer = np.empty(columns * row_step, dtype=X.dtype)
    best = np.empty(row_step, dtype=X.dtype)
    second = np.empty(row_step, dtype=X.dtype)
    best_col = np.empty(row_step, dtype=np.int64)
    rechecked = 0
    for r0 in range(0, n, row_step):
        r1 = min(n, r0 + row_step)
        scores_t = buffer[: columns * (r1 - r0)].reshape(columns, r1 - r0)
        np.matmul(scaled_centers, X[r0:r1].T, out=scores_t)
        rechecked += _settle_one_group(X[r0:r1], centers, scores_t, column_sq, slot_center, best, second, best_col,
                                       x_sq[r0:r1], allowance[r0:r1], labels[r0:r1], dist2[r0:r1], lower[r0:r1],
                                       norms_here, gamma, center_norm, weights[r0:r1] if weights.shape[0] else weights,
                                       sums, counts, sse)
    return rechecked
