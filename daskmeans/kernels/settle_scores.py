"""Settling rows from their GEMM scores: the exact nearest center where the scores leave no doubt, exact
distances among the near ties, and the group lower bounds (the Numba kernels of
:mod:`daskmeans.kernels.exact_assign`).

Each score carries an error bound proven from the float format (:mod:`daskmeans.kernels.score_error`): a row whose
best score is ahead of every other by more than the errors is settled by its best score; the others (near ties)
are settled by exact float64 distances, ties to the lowest center index.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .distance import pair_dist2
from .packed_bounds import store_lower
from .score_error import norm_and_allowance, score_error
from .stats import add_to_cluster


@numba.njit(cache=True, nogil=True)
def _is_near_tie(i, best, col, second_own, group_min, n_groups, x_norm, x_sq, column_norm, group_norm, gamma):
    """Whether some center other than column ``col``'s could be as near to row ``i`` as it, given each score's
    proven error from its own norm (the best center's) or its group's largest (the others'); and ``limit``, the
    best score plus its error. Rows are only asked when their two best scores are within twice the error for the
    largest norm of all centers, which decides most rows at once.

    Parameters
    ----------
    i, best, col, second_own : IN
        The row, its best score, that score's column and the second smallest score of its group.
    group_min : IN (rows, n_groups)
        Each row's smallest score in each group.
    n_groups, x_norm, x_sq, gamma : IN
        Groups, the row's norm and squared norm, the unit rounding error of the scores.
    column_norm, group_norm : IN float64 (columns,), (n_groups,)
        Norm of each column's center, the largest in each group.
    """
    limit = np.float64(best) + score_error(x_norm, x_sq, column_norm[col], gamma)
    best_group = col % n_groups
    if np.float64(second_own) - score_error(x_norm, x_sq, group_norm[best_group], gamma) <= limit:
        return True, limit
    for g in range(n_groups):
        if g != best_group and np.float64(group_min[i, g]) - score_error(x_norm, x_sq, group_norm[g], gamma) <= limit:
            return True, limit
    return False, limit


@numba.njit(cache=True, nogil=True)
def _finish_slab(
    X,
    centers,
    scores_t,
    best_col,
    group_min,
    own_second,
    other_second,
    slot_center,
    n_groups,
    x_sq,
    allowance,
    labels,
    dist2,
    lower,
    norms_here,
    gamma,
    center_norm,
    column_norm,
    group_norm,
    weights,
    sums,
    counts,
    sse,
):
    """Settle each row's exact nearest center from its scores and turn the group minima into lower bounds.

    ``scores_t[col, i]`` is ``||c||^2 - 2 x.c`` of row ``i`` for the center in slot ``col // n_groups`` of group
    ``col % n_groups`` (``inf`` for padding); ``best_col`` its argmin, ``group_min[i, g]`` the minimum in group
    ``g``, ``own_second`` the second smallest in the best group and ``other_second`` the smallest outside it
    (:func:`daskmeans.kernels.group_scan.scan_groups`). ``allowance`` is each row's score error
    for the largest center norm ``center_norm``; ``column_norm`` and ``group_norm`` are the norm of each column's
    center and the largest in each group. Rows whose best two scores are within twice the allowance are checked
    with each score's own error (:func:`_is_near_tie`), and the near ties settled by exact distances (lowest center
    index among equals). Group bounds subtract the group's own error.

    With ``norms_here``, each row's ``x_sq`` and ``allowance`` are computed here (the row is then read once, for
    them and its winner's distance) instead of read. With ``sums`` not empty, each row is added to its cluster's
    statistics as it is settled, in row order: the same float64 sums as
    :func:`daskmeans.kernels.stats.cluster_stats` (``weights`` empty: weight 1).

    Parameters
    ----------
    X, centers : IN (rows, d), (k, d)
        The tile's rows, the centers.
    scores_t : IN (columns, rows)
        The scores, center by center.
    best_col, group_min, own_second, other_second : IN
        The scan's summary of each row's scores.
    slot_center : IN int (columns,)
        The center in each column (-1: padding).
    n_groups, norms_here, gamma, center_norm, column_norm, group_norm : IN
        The layout, whether to compute the rows' norms here, the unit rounding error, the centers' norms.
    x_sq, allowance : IN-OUT float64 (rows,)
        The rows' squared norms and score errors: read, or written with ``norms_here``.
    labels, dist2 : OUT int32 (rows,), float64 (rows,)
        Exact nearest center, squared distance to it.
    lower : OUT uint16 (rows, n_groups) or (rows, 0)
        Group lower bounds, as stored (:mod:`daskmeans.kernels.packed_bounds`).
    weights : IN float64 (rows,) or (0,)
    sums, counts, sse : IN-OUT float64 (k, d), (k,), (k,) or empty
        Cluster statistics the rows are added to.
    """
    columns, rows = scores_t.shape
    width = columns // n_groups
    with_bounds = lower.shape[1] > 0
    with_stats = sums.shape[0] > 0
    zero = np.zeros(X.shape[1], dtype=X.dtype)
    rechecked = 0
    for i in range(rows):
        if norms_here:
            x_sq[i], allowance[i] = norm_and_allowance(X[i], zero, center_norm, gamma)
        x_norm = math.sqrt(x_sq[i])
        col = best_col[i]
        best = scores_t[col, i]
        best_group = col % n_groups
        second_own = own_second[i]
        second = min(second_own, other_second[i])
        label = slot_center[col]
        label_group = best_group
        near, limit = False, 0.0
        if second - best <= 2.0 * allowance[i]:
            near, limit = _is_near_tie(
                i, best, col, second_own, group_min, n_groups, x_norm, x_sq[i], column_norm, group_norm, gamma
            )
        if near:
            # only exact distances decide, among the centers whose score less its error is within the limit
            rechecked += 1
            best_exact = np.inf
            for c in range(columns):
                j = slot_center[c]
                if j < 0 or np.float64(scores_t[c, i]) - score_error(x_norm, x_sq[i], column_norm[c], gamma) > limit:
                    continue
                value = pair_dist2(X[i], centers[j])
                if value < best_exact or (value == best_exact and j < label):
                    best_exact = value
                    label = j
                    label_group = c % n_groups
            dist2[i] = best_exact
            if label != slot_center[col]:
                second_own = np.inf
                for t in range(width):
                    c = t * n_groups + label_group
                    if slot_center[c] != label and scores_t[c, i] < second_own:
                        second_own = scores_t[c, i]
        else:
            dist2[i] = pair_dist2(X[i], centers[label])
        labels[i] = label
        if with_stats:
            add_to_cluster(sums, counts, sse, label, weights[i] if weights.shape[0] > 0 else 1.0, dist2[i], X[i])
        if not with_bounds:
            continue
        _group_bounds(lower, i, group_min, second_own, label_group, n_groups, x_norm, x_sq[i], group_norm, gamma)
    return rechecked


@numba.njit(cache=True, nogil=True, inline="always")
def _group_bounds(lower, i, group_min, second_own, label_group, n_groups, x_norm, x_sq, group_norm, gamma):
    """Row ``i``'s lower bound on its distance to every center of each group but its own center: the group's
    smallest score less the group's error (an infinite score, no other center, gives an infinite bound).

    Parameters
    ----------
    lower : OUT uint16 (rows, n_groups)
        Row ``i`` is written.
    i, group_min, second_own, label_group, n_groups, x_norm, x_sq, group_norm, gamma : IN
        The row, its smallest score in each group, the second smallest in its center's group, that group, the
        number of groups, its norm and squared norm, each group's largest center norm, the unit rounding error.
    """
    for g in range(n_groups):
        low = np.float64(group_min[i, g]) + x_sq - score_error(x_norm, x_sq, group_norm[g], gamma)
        lower[i, g] = store_lower(math.sqrt(max(low, 0.0)))
    low = np.float64(second_own) + x_sq - score_error(x_norm, x_sq, group_norm[label_group], gamma)
    lower[i, label_group] = store_lower(math.sqrt(max(low, 0.0)))


@numba.njit(cache=True, nogil=True)
def _finish_best_of_groups(
    X,
    centers,
    best_col,
    best,
    group_min,
    own_second,
    other_second,
    slot_center,
    n_groups,
    x_sq,
    allowance,
    gamma,
    column_norm,
    group_norm,
    labels,
    dist2,
    lower,
    near_ties,
):
    """:func:`_finish_slab` from each row's best score and its column, the minimum score per group, the second
    smallest score of the best group (``own_second``) and the smallest score outside it (``other_second``).

    Near ties (:func:`_is_near_tie`) are not settled here: their positions go to ``near_ties`` (the count is
    returned), for the caller to settle from all their scores.

    Parameters
    ----------
    X, centers, best_col, best, group_min, own_second, other_second, slot_center : IN
        As :func:`_finish_slab` (``best``: each row's best score).
    n_groups, x_sq, allowance, gamma, column_norm, group_norm : IN
        As :func:`_finish_slab`.
    labels, dist2, lower : OUT
        As :func:`_finish_slab`, for the rows settled here (near ties are left as they are).
    near_ties : OUT int64 (rows,)
        The near ties' positions, first the returned count.
    """
    with_bounds = lower.shape[1] > 0
    n_ties = 0
    for i in range(best_col.shape[0]):
        col = best_col[i]
        x_norm = math.sqrt(x_sq[i])
        if (
            min(own_second[i], other_second[i]) - best[i] <= 2.0 * allowance[i]
            and _is_near_tie(
                i, best[i], col, own_second[i], group_min, n_groups, x_norm, x_sq[i], column_norm, group_norm, gamma
            )[0]
        ):
            near_ties[n_ties] = i
            n_ties += 1
            continue
        label = slot_center[col]
        labels[i] = label
        dist2[i] = pair_dist2(X[i], centers[label])
        if with_bounds:
            _group_bounds(
                lower, i, group_min, own_second[i], col % n_groups, n_groups, x_norm, x_sq[i], group_norm, gamma
            )
    return n_ties
