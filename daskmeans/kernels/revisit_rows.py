"""One row's revisit after the centers moved (the Numba helpers of :mod:`daskmeans.kernels.revisit`): its group
bounds dropped by the groups' moves, the groups that fail listed, its own center's distance, and the row settled
from its candidates' scores with exact distances where the scores cannot decide.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .distance import pair_dist2
from .packed_bounds import load_lower, store_lower


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def _fast_dot(x, c):
    """``x . c`` in the data's precision, vectorized (any summation order: the GEMM error bound holds)."""
    total = x[0] - x[0]
    for f in range(x.shape[0]):
        total += x[f] * c[f]
    return np.float64(total)


@numba.njit(cache=True, nogil=True, inline="always")
def _drop_bounds(lower, group_shift, new_lower):
    """Each group's bound of one row dropped by its group's largest move, stored (rounded down) into ``new_lower``;
    returns the smallest stored code. The loop is a map and the minimum one over integers, so both run on vectors
    (a float minimum carried through the map would keep it scalar); codes order as their values do, so the
    smallest code is the smallest stored bound."""
    for g in range(lower.shape[0]):
        new_lower[g] = store_lower(load_lower(lower[g]) - group_shift[g])
    smallest = new_lower[0]
    for g in range(1, new_lower.shape[0]):
        smallest = min(smallest, new_lower[g])
    return smallest


@numba.njit(cache=True, nogil=True, inline="always")
def _own_distance(X, i, a, centers, shift, old_dist2):
    """The exact squared distance of row ``i`` to its center ``a``, and whether it was computed (not reused)."""
    if shift[a] == 0.0 and old_dist2.shape[0] > 0:
        return old_dist2[i], 0  # the same center: the same exact distance
    return pair_dist2(X[i], centers[a]), 1


@numba.njit(cache=True, nogil=True, inline="always")
def _list_failing(new_lower_i, threshold_code, group_ptr, failing):
    """The groups whose dropped bound fails, listed without a branch per group (which groups fail is
    unpredictable); returns their number and how many centers they hold."""
    n_failing = 0
    held = 0
    for g in range(new_lower_i.shape[0]):
        failing[n_failing] = g
        fails = new_lower_i[g] <= threshold_code
        held += (group_ptr[g + 1] - group_ptr[g]) * fails
        n_failing += fails
    return n_failing, held


@numba.njit(cache=True, nogil=True, inline="always")
def _settle(
    row,
    centers,
    a,
    d2,
    dist,
    candidates,
    n_candidates,
    low,
    high,
    values,
    low_of,
    failing,
    n_failing,
    group_ptr,
    members,
    new_lower_i,
    own_group,
    own_group_holds,
):
    """The row's nearest center from its candidates' scores (``low`` and ``high``, within their errors) and exact
    distances only where the scores cannot decide; the failing groups bounded anew in ``new_lower_i`` (which holds
    the dropped bounds). ``values`` holds the exact distance of each center of the failing groups that is no
    candidate. Returns the center, its exact squared distance and the exact distances computed.

    Parameters
    ----------
    row, centers, a, d2, dist : IN
        The row (in the compute dtype), the centers, its old center and its exact squared distance and distance
        to it.
    candidates, n_candidates, low, high : IN
        The candidates and their scores less and plus their errors.
    values, low_of : IN-OUT float64 (k,)
        Per center: the exact distances known (-1: a candidate not measured), and each candidate's low score.
    failing, n_failing, group_ptr, members, own_group, own_group_holds : IN
        The failing groups, the groups' members, the old center's group and whether its bound held.
    new_lower_i : IN-OUT uint16 (n_groups,)
        The row's bounds after the move: the failing groups' are written.
    """
    best_high = d2
    for c in range(n_candidates):
        best_high = min(best_high, high[c])
    computed = 0
    survivors = 1 if d2 <= best_high else 0
    last = -1
    for c in range(n_candidates):
        # the candidate's bound is the square root of its low score: taken once per group, of the group's
        # smallest (the square root is monotonic and correctly rounded: the same bound); -1 marks it, as every
        # distance kept in values is non-negative
        values[candidates[c]] = -1.0
        low_of[candidates[c]] = low[c]
        if low[c] <= best_high:
            survivors += 1
            last = c
    best = a
    best_d2 = d2
    if survivors == 1 and last >= 0:
        best = candidates[last]
        best_d2 = pair_dist2(row, centers[best])
        computed += 1
        values[best] = math.sqrt(best_d2)
    elif survivors > 1:
        if d2 > best_high:
            best_d2 = np.inf
        for c in range(n_candidates):
            if low[c] > best_high:
                continue
            j = candidates[c]
            value = pair_dist2(row, centers[j])
            computed += 1
            values[j] = math.sqrt(value)
            if value < best_d2 or (value == best_d2 and j < best):
                best = j
                best_d2 = value
    # the failing groups are bounded anew, and the old center's group by its distance when the row left it
    for q in range(n_failing):
        g = failing[q]
        bound = np.inf
        smallest_low = np.inf
        for t in range(group_ptr[g], group_ptr[g + 1]):
            j = members[t]
            if j == best:
                continue
            if values[j] < 0.0:
                smallest_low = min(smallest_low, low_of[j])
            else:
                bound = min(bound, values[j])
        if smallest_low < np.inf:
            bound = min(bound, math.sqrt(max(smallest_low, 0.0)))
        new_lower_i[g] = store_lower(bound)
    if best != a and own_group_holds:
        # the old center joins its group's bound (the dropped bound, above the threshold, was larger)
        new_lower_i[own_group] = store_lower(dist)
    return best, best_d2, computed
