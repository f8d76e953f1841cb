"""Reassign rows after the centers moved, computing only the distances their bounds cannot rule out.

A row keeps one lower bound per group of centers (:mod:`daskmeans.kernels.nested_groups`). After the centers move,
each bound drops by the largest move in its group; a group whose dropped bound still exceeds the distance to the
row's own center cannot hold a closer center. Every center of a failing group is a candidate, scored in the
data's precision; rows with many candidates are reassigned against all centers by one GEMM
(:func:`daskmeans.kernels.exact_assign.assign_with_bounds`).

In float32 with groups (:func:`_revisit_by_groups`), rows are revisited a block at a time: their (row, failing
group) pairs are sorted by group and every group scores all its rows at once, its centers side by side in vector
lanes and read once for the block (:func:`daskmeans.kernels.group_dots.rows_dots`). That costs less per distance
than one dot product at a time, whose latency (not the read of its center) bounds it. Each row is then settled,
and in the common case, where no candidate's low score reaches the own center's distance, its failing groups are
bounded by their candidates' smallest low scores without further work. In float64, with Hamerly's single bound
and with Elkan's single-center groups (:func:`scores_by_groups`), each candidate is scored by one vectorized dot
product (:func:`_revisit`).

Yinyang's local filter (a center whose own drop, the group's old bound less its own move, still exceeds the
distance is skipped) is kept only for Hamerly's single bound, whose one group is every center. For groups, most of
a failing group's centers pass it anyway and its branches cost more than the dot products it saves, while scoring
the whole group gives the group a tight new bound.

Most rows fail some group once the centers move, so the cost is per failing row and per candidate. The dropped
bounds of every group are stored in one pass (vectorized), only the failing groups are bounded anew, and a failing
group's bound takes one square root, of its candidates' smallest low score. The tests against a row's threshold
are made on the stored 16-bit codes (a code exceeds the threshold's code exactly when its value exceeds the
threshold), so that the drop, the row's smallest bound and the list of failing groups run on integer vectors, for
slightly more distances (a group fails once its rounded bound does).

Labels are exact, as everywhere in daskmeans: scores only propose candidates, within the proven error of
:func:`daskmeans.kernels.score_error.score_error_allowance` (with each candidate's own norm); the own center's
distance and every candidate the scores cannot rule out are computed exactly
(:func:`daskmeans.kernels.distance.pair_dist2`), ties to the lowest center index. So labels are the same with any
bounds or none.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .. import config
from .distance import pair_dist2
from .exact_assign import assign_with_bounds
from .group_dots import LANES, rows_dots, transposed_groups
from .packed_bounds import LOWER_DTYPE, load_lower, store_lower
from .revisit_rows import _drop_bounds, _fast_dot, _list_failing, _own_distance, _settle
from .score_error import TEST_MARGIN, _gamma, row_sq_norms, score_error


@numba.njit(cache=True, nogil=True)
def _revisit(
    X,
    centers,
    labels,
    old_dist2,
    lower,
    shift,
    group_shift,
    group_ptr,
    members,
    group_of,
    scalar_limit,
    centers_sq,
    gamma,
    center_norms,
    new_labels,
    new_dist2,
    new_lower,
    needs_full,
    row,
):
    """The revisit one row at a time, each candidate scored by one dot product (where :func:`scores_by_groups` is
    False).

    Parameters
    ----------
    X, centers, labels, old_dist2, lower : IN
        The rows, the new centers, the rows' centers before the move, their exact squared distances to them (empty:
        recomputed) and their group bounds (as stored).
    shift, group_shift, group_ptr, members, group_of : IN
        How far each center and each group moved; the groups' members and each center's group.
    scalar_limit, centers_sq, gamma, center_norms : IN
        Most candidates scored here; the centers' squared norms and norms, the unit rounding error.
    new_labels, new_dist2 : OUT int32 (n,), float64 (n,)
        Each row's nearest center and exact squared distance (not for the rows marked in ``needs_full``).
    new_lower : OUT uint16 (n, n_groups)
        The bounds for the new centers.
    needs_full : IN-OUT bool (n,)
        Set for the rows with too many candidates, to be reassigned against all centers.
    row : OUT (d,)
        Scratch: a row in the compute dtype.
    """
    n = X.shape[0]
    k = centers.shape[0]
    n_groups = lower.shape[1]
    values = np.empty(k, dtype=np.float64)
    candidates = np.empty(k, dtype=np.int64)
    low = np.empty(k, dtype=np.float64)
    low_of = np.empty(k, dtype=np.float64)
    high = np.empty(k, dtype=np.float64)
    failing = np.empty(n_groups, dtype=np.int64)
    local_filter = n_groups == 1
    zero = np.zeros_like(row)
    computed = 0
    for i in range(n):
        a = labels[i]
        d2, own_computed = _own_distance(X, i, a, centers, shift, old_dist2)
        computed += own_computed
        dist = math.sqrt(d2)
        threshold = dist * (1.0 + TEST_MARGIN)
        # a stored bound exceeds the threshold exactly when its code exceeds the threshold's (rounded down) code
        threshold_code = store_lower(threshold)
        if _drop_bounds(lower[i], group_shift, new_lower[i]) > threshold_code:
            # every group is ruled out: the common case once the centers settle
            new_labels[i] = a
            new_dist2[i] = d2
            continue
        n_failing, _ = _list_failing(new_lower[i], threshold_code, group_ptr, failing)
        own_group = group_of[a]
        own_group_holds = new_lower[i, own_group] > threshold_code
        # every center of the failing groups (with one group of all centers, those its own drop cannot rule out)
        n_candidates = 0
        for q in range(n_failing):
            g = failing[q]
            old_bound = load_lower(lower[i, g])
            for t in range(group_ptr[g], group_ptr[g + 1]):
                j = members[t]
                if j == a:
                    values[j] = dist
                    continue
                if local_filter and old_bound - shift[j] > threshold:
                    values[j] = old_bound - shift[j]
                    continue
                candidates[n_candidates] = j
                n_candidates += 1
        if n_candidates > scalar_limit:
            needs_full[i] = True
            continue
        # distances from vectorized dot products, within a proven error; exact ones only where they cannot decide;
        # the row in the compute dtype (rows kept as stored, e.g. uint8, convert exactly)
        for f in range(row.shape[0]):
            row[f] = X[i, f]
        x_sq = pair_dist2(row, zero)
        x_norm = math.sqrt(x_sq)
        for c in range(n_candidates):
            j = candidates[c]
            value = centers_sq[j] - 2.0 * _fast_dot(row, centers[j]) + x_sq
            allowance = score_error(x_norm, x_sq, center_norms[j], gamma)  # this center's own error
            low[c] = value - allowance
            high[c] = value + allowance
        best, best_d2, exact = _settle(
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
            new_lower[i],
            own_group,
            own_group_holds,
        )
        computed += n_candidates + exact
        new_labels[i] = best
        new_dist2[i] = best_d2
    return computed


@numba.njit(cache=True, nogil=True)
def _revisit_by_groups(
    X,
    centers,
    labels,
    old_dist2,
    lower,
    shift,
    group_shift,
    group_ptr,
    members,
    group_of,
    scalar_limit,
    centers_sq,
    gamma,
    center_norms,
    new_labels,
    new_dist2,
    new_lower,
    needs_full,
    transposed,
    slot_center,
    chunks_per_group,
    block_rows,
):
    """The revisit ``block_rows`` rows at a time, in float32 with groups: the rows' failing (row, group) pairs are
    sorted by group and each group's candidates scored for all its rows at once
    (:func:`~daskmeans.kernels.group_dots.rows_dots`); then each row is settled as by :func:`_revisit`, its
    candidates in the same order (failing groups in increasing order, members in order).

    Parameters
    ----------
    X, centers, labels, old_dist2, lower, shift, group_shift, group_ptr, members, group_of : IN
        As :func:`_revisit`.
    scalar_limit, centers_sq, gamma, center_norms : IN
        As :func:`_revisit`.
    new_labels, new_dist2, new_lower : OUT
        As :func:`_revisit`.
    needs_full : IN-OUT bool (n,)
        As :func:`_revisit`.
    transposed, slot_center, chunks_per_group, block_rows : IN
        The centers as :func:`~daskmeans.kernels.group_dots.transposed_groups` gives them, the center of each
        lane, the chunks of each group, the rows revisited together.
    """
    n, d = X.shape
    k = centers.shape[0]
    n_groups = lower.shape[1]
    n_chunks = n_groups * chunks_per_group
    values = np.empty(k, dtype=np.float64)
    candidates = np.empty(k, dtype=np.int64)
    low = np.empty(k, dtype=np.float64)
    low_of = np.empty(k, dtype=np.float64)
    high = np.empty(k, dtype=np.float64)
    rows = np.empty((block_rows, d), dtype=np.float32)
    zero = np.zeros(d, dtype=np.float32)
    # per row of a block: its label, exact squared distance, squared norm, failing groups
    row_label = np.empty(block_rows, dtype=np.int64)
    row_d2 = np.empty(block_rows, dtype=np.float64)
    row_sq = np.empty(block_rows, dtype=np.float64)
    failing = np.empty(block_rows * n_groups, dtype=np.int64)
    group_lows = np.empty(block_rows * n_groups, dtype=np.float64)
    failing_end = np.empty(block_rows + 1, dtype=np.int64)
    # per (row, chunk of a group) pair: the row, and where its scores are once the pairs are sorted by chunk
    pair_row = np.empty(block_rows * n_chunks, dtype=np.int64)
    sorted_row = np.empty(block_rows * n_chunks, dtype=np.int64)
    sorted_at = np.empty(block_rows * n_chunks, dtype=np.int64)
    chunk_start = np.empty(n_chunks + 1, dtype=np.int64)
    scores = np.empty(block_rows * n_chunks * LANES, dtype=np.float32)
    computed = 0
    for b0 in range(0, n, block_rows):
        m = min(block_rows, n - b0)
        failing_end[0] = 0
        n_pairs = 0
        chunk_start[:] = 0
        for r in range(m):
            i = b0 + r
            a = labels[i]
            d2, own_computed = _own_distance(X, i, a, centers, shift, old_dist2)
            computed += own_computed
            row_label[r] = -1  # settled here
            failing_end[r + 1] = failing_end[r]
            threshold_code = store_lower(math.sqrt(d2) * (1.0 + TEST_MARGIN))
            if _drop_bounds(lower[i], group_shift, new_lower[i]) > threshold_code:
                new_labels[i] = a
                new_dist2[i] = d2
                continue
            first = failing_end[r]
            n_failing, held = _list_failing(new_lower[i], threshold_code, group_ptr, failing[first:])
            if held - (new_lower[i, group_of[a]] <= threshold_code) > scalar_limit:
                needs_full[i] = True
                continue
            row_label[r] = a
            row_d2[r] = d2
            failing_end[r + 1] = first + n_failing
            for q in range(first, first + n_failing):
                for c in range(chunks_per_group):
                    chunk = failing[q] * chunks_per_group + c
                    pair_row[n_pairs] = r
                    sorted_at[n_pairs] = chunk  # the pair's chunk until the sort
                    chunk_start[chunk + 1] += 1
                    n_pairs += 1
            for f in range(d):
                rows[r, f] = X[i, f]
            row_sq[r] = pair_dist2(rows[r], zero)
        for c in range(n_chunks):
            chunk_start[c + 1] += chunk_start[c]
        for p in range(n_pairs):
            chunk = sorted_at[p]
            at = chunk_start[chunk]
            chunk_start[chunk] = at + 1
            sorted_row[at] = pair_row[p]
            sorted_at[p] = at
        # chunk_start[c] now holds the end of chunk c's pairs, the start of chunk c + 1's
        start = 0
        for c in range(n_chunks):
            rows_dots(rows, sorted_row, start, chunk_start[c], transposed, c, scores)
            start = chunk_start[c]
        p = 0
        for r in range(m):
            a = row_label[r]
            if a < 0:
                continue
            i = b0 + r
            d2 = row_d2[r]
            dist = math.sqrt(d2)
            x_sq = row_sq[r]
            x_norm = math.sqrt(x_sq)
            n_candidates = 0
            lowest = np.inf
            for q in range(failing_end[r], failing_end[r + 1]):
                group_low = np.inf
                for c in range(chunks_per_group):
                    slots = (failing[q] * chunks_per_group + c) * LANES
                    at = sorted_at[p] * LANES
                    p += 1
                    for lane in range(LANES):
                        j = slot_center[slots + lane]
                        if j < 0:
                            continue
                        if j == a:
                            values[j] = dist
                            continue
                        value = centers_sq[j] - 2.0 * np.float64(scores[at + lane]) + x_sq
                        allowance = score_error(x_norm, x_sq, center_norms[j], gamma)  # this center's own error
                        candidates[n_candidates] = j
                        low[n_candidates] = value - allowance
                        high[n_candidates] = value + allowance
                        group_low = min(group_low, value - allowance)
                        n_candidates += 1
                group_lows[q] = group_low
                lowest = min(lowest, group_low)
            if lowest > d2:
                # no candidate can be nearer than the own center (the common case): each failing group is bounded
                # by its candidates' smallest low score, as _settle bounds it then
                for q in range(failing_end[r], failing_end[r + 1]):
                    bound = np.inf if group_lows[q] == np.inf else math.sqrt(max(group_lows[q], 0.0))
                    new_lower[i, failing[q]] = store_lower(bound)
                computed += n_candidates
                new_labels[i] = a
                new_dist2[i] = d2
                continue
            own_group = group_of[a]
            best, best_d2, exact = _settle(
                rows[r],
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
                failing[failing_end[r] :],
                failing_end[r + 1] - failing_end[r],
                group_ptr,
                members,
                new_lower[i],
                own_group,
                new_lower[i, own_group] > store_lower(dist * (1.0 + TEST_MARGIN)),
            )
            computed += n_candidates + exact
            new_labels[i] = best
            new_dist2[i] = best_d2
    return computed


def scores_by_groups(dtype, groups) -> bool:
    """Whether a revisit scores its candidates group by group for blocks of rows (:func:`_revisit_by_groups`):
    float32 with groups that fill at least half of a vector's lanes on average (yinyang's groups of about 10; not
    Elkan's single centers, which would score ``LANES`` lanes for one); else one dot product at a time
    (:func:`_revisit`)."""
    return (
        np.dtype(dtype) == np.float32 and groups.n_groups > 1 and len(groups.group_of) >= groups.n_groups * LANES // 2
    )


def revisit_with_bounds(
    X, centers, labels, lower, shift, groups, scalar_limit=None, dist2=None, probe_rows=None, give_up=None, out=None
):
    """Reassign samples already in the batch after the centers moved, skipping centers the bounds rule out.

    The first ``probe_rows`` rows are revisited first: when they needed more than ``give_up`` of all their
    distances (the centers moved far, as in the first iterations), the other rows are reassigned against all
    centers at once, with fresh bounds, which costs less than a revisit then. Labels are exact either way.

    Parameters
    ----------
    X : ndarray (m, d)
        Floating, or integers kept as stored (computed exactly in the centers' dtype).
    centers : ndarray (k, d)
        The new centers.
    labels : int32 (m,)
        Assignment before the move.
    lower : uint16 (m, n_groups)
        Group lower bounds valid for the centers before the move, as stored
        (:mod:`daskmeans.kernels.packed_bounds`).
    shift : float64 (k,)
        Distance each center moved (an upper bound of it).
    groups : CenterGroups
    scalar_limit : int, optional
        A sample whose failing groups hold more centers than this is reassigned by GEMM against all centers
        (cheaper than many single distances); default ``k // 16``.
    dist2 : float64 (m,), optional
        The exact squared distances to the old assignment: reused for rows whose center did not move
        (``shift == 0``), which is most rows once the centers settle.
    probe_rows : int, optional
        None: :data:`~daskmeans.config.REVISIT_PROBE_ROWS`, read at call time.
    give_up : float, optional
        None: :data:`~daskmeans.config.REVISIT_GIVE_UP_FRACTION`, read at call time.
    out : tuple of ndarray, optional
        ``(labels, dist2, lower)`` to fill and return instead of new arrays (shapes and dtypes of the results;
        distinct from the inputs).

    Returns
    -------
    labels : int32 (m,)
    dist2 : float64 (m,)
        Exact squared distance to the new assignment.
    lower : uint16 (m, n_groups)
        Bounds valid for the new centers, as stored.
    computed : int
        Distances computed (the own center's unless reused, the candidates', and all ``k`` for a sample
        reassigned by GEMM).
    """
    X = np.ascontiguousarray(X)
    # rows may be kept as stored (integers): they are computed in the centers' floating dtype
    dtype = X.dtype if X.dtype.kind == "f" else np.asarray(centers).dtype
    centers = np.ascontiguousarray(centers, dtype=dtype)
    m = X.shape[0]
    k = centers.shape[0]
    if scalar_limit is None:
        scalar_limit = max(1, k // 16)
    probe_rows = config.REVISIT_PROBE_ROWS if probe_rows is None else probe_rows
    give_up = config.REVISIT_GIVE_UP_FRACTION if give_up is None else give_up
    if out is None:
        out = (np.empty(m, dtype=np.int32), np.empty(m, dtype=np.float64), np.empty_like(lower))
    new_labels, new_dist2, new_lower = out
    if lower.dtype != LOWER_DTYPE or new_lower.dtype != LOWER_DTYPE:
        raise TypeError(
            f"bounds are stored as {LOWER_DTYPE} (daskmeans.kernels.packed_bounds), not "
            f"{lower.dtype} and {new_lower.dtype}"
        )
    needs_full = np.zeros(m, dtype=np.bool_)
    group_shift = groups.group_shift(shift)
    centers_sq = row_sq_norms(centers)
    old_dist2 = np.empty(0) if dist2 is None else np.asarray(dist2, dtype=np.float64)
    shift = np.asarray(shift, dtype=np.float64)
    by_groups = scores_by_groups(dtype, groups)
    if by_groups:
        transposed, slot_center, chunks_per_group = transposed_groups(centers, groups)
        block_rows = max(32, min(config.REVISIT_BLOCK_ROWS, config.REVISIT_BLOCK_PAIRS // transposed.shape[0]))
    computed = 0
    start = 0
    tail = m  # rows from here on are reassigned against all centers (after a give-up)
    while start < m:
        stop = m if start else min(m, int(probe_rows))
        part = slice(start, stop)
        args = (
            X[part],
            centers,
            labels[part],
            old_dist2[part] if old_dist2.size else old_dist2,
            lower[part],
            shift,
            group_shift,
            groups.ptr,
            groups.members,
            groups.group_of,
            int(scalar_limit),
            centers_sq,
            _gamma(X.shape[1], dtype),
            np.sqrt(centers_sq),
            new_labels[part],
            new_dist2[part],
            new_lower[part],
            needs_full[part],
        )
        if by_groups:
            computed += _revisit_by_groups(*args, transposed, slot_center, chunks_per_group, block_rows)
        else:
            computed += _revisit(*args, np.empty(X.shape[1], dtype=dtype))
        if not start and stop < m and computed + np.count_nonzero(needs_full[:stop]) * k > give_up * stop * k:
            tail = stop
            break
        start = stop
    # the rows after a give-up are assigned in place (no copy of them; rows kept as integers are converted a slab
    # at a time); the probe's own rows are gathered
    full = np.flatnonzero(needs_full[:tail])
    if full.size:
        f_labels, f_dist2, f_lower, _ = assign_with_bounds(X[full], centers, groups)
        new_labels[full] = f_labels
        new_dist2[full] = f_dist2
        new_lower[full] = f_lower
    if tail < m:
        assign_with_bounds(X[tail:], centers, groups, out=(new_labels[tail:], new_dist2[tail:], new_lower[tail:]))
    computed += (full.size + m - tail) * k
    return new_labels, new_dist2, new_lower, int(computed)
