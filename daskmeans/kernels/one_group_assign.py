"""Exact nearest center against one group of centers (no group bounds): the plain assignment, and Hamerly's single
bound per row.

Tiles of rows are scored center by center (``-2 C X_tile^T``, one GEMM), and one Numba pass per tile finds every
row's best score and a lower bound on the others, each score less its own center's proven error (vectorized over
the rows), and settles the rows while the tile is in cache: the exact nearest center (near ties by exact
distances), its exact distance, the cluster's float64 sums and the bound. Labels and distances are those of every
other assignment kernel (:mod:`daskmeans.kernels.exact_assign`).

In float32 with at most ``PANEL_MAX_FEATURES`` features the scores are not written at all: the GEMM and the scan
are one register-blocked loop (:mod:`daskmeans.kernels.panel_scan`, :func:`_assign_by_panels`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .. import config
from .distance import pair_dist2
from .packed_bounds import store_lower
from .panel_scan import PANEL_ROWS, best_and_lowest_other_by_panels, padded
from .score_error import _gamma
from .stats import _cluster_stats, add_to_cluster


@numba.njit(cache=True, nogil=True, inline="always")
def _take_score(value, low, column, best, best_col, best_low, other_low):
    """One score ``value`` of column ``column`` (``low``: the score less its error) folded into a row's running
    summary ``(best, best_col, best_low, other_low)`` of :func:`_best_and_lowest_other`; the new summary.

    Parameters
    ----------
    value, low, column, best, best_col, best_low, other_low : IN
        Scalars; the new summary is returned.
    """
    new = value < best
    other_low = min(other_low, best_low if new else low)
    best_low = low if new else best_low
    best_col = column if new else best_col
    return min(best, value), best_col, best_low, other_low


@numba.njit(cache=True, nogil=True)
def _best_and_lowest_other(scores_t, column_add, err_sq, err_x, x_norm, best, best_col, best_low, other_low):
    """For every row ``i`` of the scores ``v[c, i] = scores_t[c, i] + column_add[c]`` (laid out center by
    center): the position of the smallest (the first among equals, as ``argmin``) and its value, written to
    ``best_col`` and ``best``, and the smallest of ``v[c, i] - err_sq[c] - x_norm[i] * err_x[c]`` over the other
    columns, written to ``other_low`` (``best_low`` is scratch: that value at the best column so far).

    With ``err_sq[c] + x_norm[i] * err_x[c]`` the proven error of score ``c`` of row ``i``, ``other_low`` is a
    lower bound on every other center's score. The loop over the rows is innermost and branch-free, so that it
    runs on vectors of rows: every operand is in the data's precision (``x_norm`` too, and ``best_col`` int32),
    which for float32 doubles the lanes against float64 or int64 ones. Rounding ``x_norm`` and its product with
    ``err_x[c]`` to float32 makes the error term smaller by a relative ``2 * 2**-24`` at most, far inside the
    ``1.0001`` margin of :func:`center_errors`.

    Four columns are taken per sweep over the rows, in column order (the same values as one column per sweep):
    a row's summary is then loaded and stored once per four scores instead of once per score, which makes the
    scan faster.

    Parameters
    ----------
    scores_t, column_add, err_sq, err_x, x_norm : IN (columns, rows), (columns,) x 3, (rows,)
        The scores, what each column adds, each column's error terms, the rows' norms.
    best, best_col, other_low : OUT (rows,)
        The summary described above.
    best_low : OUT (rows,)
        Scratch.
    """
    columns, rows = scores_t.shape
    for i in range(rows):
        best[i] = np.inf
        best_low[i] = np.inf
        other_low[i] = np.inf
        best_col[i] = 0
    swept = columns - columns % 4
    for c in range(0, swept, 4):
        add0, add1, add2, add3 = column_add[c], column_add[c + 1], column_add[c + 2], column_add[c + 3]
        sq0, sq1, sq2, sq3 = err_sq[c], err_sq[c + 1], err_sq[c + 2], err_sq[c + 3]
        x0, x1, x2, x3 = err_x[c], err_x[c + 1], err_x[c + 2], err_x[c + 3]
        col0, col1, col2, col3 = np.int32(c), np.int32(c + 1), np.int32(c + 2), np.int32(c + 3)
        for i in range(rows):
            norm = x_norm[i]
            top, top_col, top_low, low = best[i], best_col[i], best_low[i], other_low[i]
            value = scores_t[c, i] + add0
            top, top_col, top_low, low = _take_score(value, value - sq0 - norm * x0, col0, top, top_col, top_low, low)
            value = scores_t[c + 1, i] + add1
            top, top_col, top_low, low = _take_score(value, value - sq1 - norm * x1, col1, top, top_col, top_low, low)
            value = scores_t[c + 2, i] + add2
            top, top_col, top_low, low = _take_score(value, value - sq2 - norm * x2, col2, top, top_col, top_low, low)
            value = scores_t[c + 3, i] + add3
            best[i], best_col[i], best_low[i], other_low[i] = _take_score(
                value, value - sq3 - norm * x3, col3, top, top_col, top_low, low
            )
    for c in range(swept, columns):
        add = column_add[c]
        sq_part = err_sq[c]
        x_part = err_x[c]
        for i in range(rows):
            value = scores_t[c, i] + add
            best[i], best_col[i], best_low[i], other_low[i] = _take_score(
                value,
                value - sq_part - x_norm[i] * x_part,
                np.int32(c),
                best[i],
                best_col[i],
                best_low[i],
                other_low[i],
            )


@numba.njit(cache=True, nogil=True, inline="always")
def _take_plain_score(value, column, best, best_col, second):
    """One score folded into a row's running ``(best, best_col, second)`` of :func:`_best_and_second`."""
    new = value < best
    second = min(second, best if new else value)
    best_col = column if new else best_col
    return min(best, value), best_col, second


@numba.njit(cache=True, nogil=True)
def _best_and_second(scores_t, column_add, best, best_col, second):
    """For every row ``i`` of the scores ``v[c, i] = scores_t[c, i] + column_add[c]``: the smallest and its column
    (the first among equals), and the smallest of the other columns, ``second`` (equal to ``best`` on a tie).

    The scan of an assignment without bounds: a third fewer operations per score than
    :func:`_best_and_lowest_other`, whose ``other_low`` the near-tie test then needs only for rows close to a tie
    (:func:`_lowest_other_where_near`). Four columns per sweep over the rows, in column order.
    """
    columns, rows = scores_t.shape
    for i in range(rows):
        best[i] = np.inf
        second[i] = np.inf
        best_col[i] = 0
    swept = columns - columns % 4
    for c in range(0, swept, 4):
        add0, add1, add2, add3 = column_add[c], column_add[c + 1], column_add[c + 2], column_add[c + 3]
        col0, col1, col2, col3 = np.int32(c), np.int32(c + 1), np.int32(c + 2), np.int32(c + 3)
        for i in range(rows):
            top, top_col, low = best[i], best_col[i], second[i]
            top, top_col, low = _take_plain_score(scores_t[c, i] + add0, col0, top, top_col, low)
            top, top_col, low = _take_plain_score(scores_t[c + 1, i] + add1, col1, top, top_col, low)
            top, top_col, low = _take_plain_score(scores_t[c + 2, i] + add2, col2, top, top_col, low)
            best[i], best_col[i], second[i] = _take_plain_score(scores_t[c + 3, i] + add3, col3, top, top_col, low)
    for c in range(swept, columns):
        add = column_add[c]
        for i in range(rows):
            best[i], best_col[i], second[i] = _take_plain_score(
                scores_t[c, i] + add, np.int32(c), best[i], best_col[i], second[i]
            )


@numba.njit(cache=True, nogil=True)
def _lowest_other_where_near(
    scores_t, column_add, err_sq, err_x, x_norm, x_norm_scan, x_sq, best, best_col, second, other_low
):
    """``other_low`` of :func:`_best_and_lowest_other` (the other scores less their own errors, in the data's
    precision), computed exactly only for the rows it could make near ties in :func:`_settle_one_group`.

    Elsewhere ``second`` less the largest error of all centers stands in for it, computed in the same precision and
    order: every rounding is monotone, so it is at most the exact ``other_low``, and it is already above the tie
    limit, so the near-tie test decides as it would with the exact value.

    Parameters
    ----------
    scores_t, column_add, err_sq, err_x : IN
        As :func:`_best_and_lowest_other`.
    x_norm, x_norm_scan, x_sq : IN (rows,)
        The rows' norms in float64 and in the data's precision, their squared norms.
    best, best_col, second : IN (rows,)
        The summary of :func:`_best_and_second`.
    other_low : OUT (rows,)
    """
    columns, rows = scores_t.shape
    largest_sq = err_sq.max()
    largest_x = err_x.max()
    for i in range(rows):
        col = best_col[i]
        row_err = 1e-12 * x_sq[i]
        limit = np.float64(best[i]) + np.float64(err_sq[col]) + x_norm[i] * np.float64(err_x[col]) + row_err
        low = second[i] - largest_sq - x_norm_scan[i] * largest_x
        if np.float64(low) - row_err > limit:
            other_low[i] = low
            continue
        low = np.inf
        for c in range(columns):
            if c != col:
                value = scores_t[c, i] + column_add[c]
                low = min(low, value - err_sq[c] - x_norm_scan[i] * err_x[c])
        other_low[i] = low


@numba.njit(cache=True, nogil=True)
def _settle_one_group(
    X,
    centers,
    scores_t,
    column_sq,
    slot_center,
    err_sq,
    err_x,
    best,
    best_col,
    best_low,
    other_low,
    x_sq,
    x_norm,
    x_norm_scan,
    labels,
    dist2,
    lower,
    norms_here,
    weights,
    sums,
    counts,
    sse,
):
    """Settle every row of a tile from the raw GEMM products ``scores_t[c, i] = -2 x_i.c`` (center by center, the
    center of column ``c`` being ``slot_center[c]``; ``column_sq[c]`` its squared norm is added here, in the data's
    precision): each row's norm (``norms_here``; else ``x_sq`` is given; ``x_norm`` float64 and ``x_norm_scan`` in
    the data's precision are filled), its best score and a lower bound on the others
    (:func:`_best_and_lowest_other`; without bounds :func:`_best_and_second`, then
    :func:`_lowest_other_where_near`), then each row settled while the tile is in cache: the exact nearest
    center (near ties by exact distances, lowest center index among equals), its exact distance, its cluster's
    float64 sums and (``lower`` not ``(n, 0)``) the lower bound on its distance to every other center.

    The score of column ``c`` is within ``err_sq[c] + ||x|| err_x[c] + 1e-12 ||x||^2`` of its exact value
    (:func:`center_errors`): a row is a near tie when some other center's score, less its own error, is not above
    the best score plus the best's error.

    Parameters
    ----------
    X, centers, scores_t, column_sq, slot_center, err_sq, err_x, norms_here, weights : IN
        The tile's rows, the centers, the GEMM products, the layout and error terms described above, the rows'
        weights (empty: 1).
    best, best_col, best_low, other_low, x_norm, x_norm_scan : OUT (rows,)
        Scratch of the scan (each row's summary and norms).
    x_sq : IN-OUT float64 (rows,)
        Read, or written with ``norms_here``.
    labels, dist2 : OUT int32 (rows,), float64 (rows,)
        Exact nearest center, squared distance to it.
    lower : OUT uint16 (rows, 1) or (rows, 0)
        The bound, as stored (:mod:`daskmeans.kernels.packed_bounds`).
    sums, counts, sse : IN-OUT float64 (k, d), (k,), (k,) or empty
        Cluster statistics the rows are added to.
    """
    rows = X.shape[0]
    columns = scores_t.shape[0]
    zero = np.zeros(X.shape[1], dtype=X.dtype)
    for i in range(rows):
        if norms_here:
            x_sq[i] = pair_dist2(X[i], zero)
        x_norm[i] = math.sqrt(x_sq[i])
        x_norm_scan[i] = x_norm[i]
    with_bounds = lower.shape[1] > 0
    if with_bounds:
        _best_and_lowest_other(scores_t, column_sq, err_sq, err_x, x_norm_scan, best, best_col, best_low, other_low)
    else:
        _best_and_second(scores_t, column_sq, best, best_col, best_low)
        _lowest_other_where_near(
            scores_t, column_sq, err_sq, err_x, x_norm, x_norm_scan, x_sq, best, best_col, best_low, other_low
        )
    with_stats = sums.shape[0] > 0
    rechecked = 0
    for i in range(rows):
        col = best_col[i]
        label = slot_center[col]
        row_err = 1e-12 * x_sq[i]
        limit = np.float64(best[i]) + np.float64(err_sq[col]) + x_norm[i] * np.float64(err_x[col]) + row_err
        others = np.float64(other_low[i]) - row_err
        if others <= limit:
            # a near tie: only exact distances decide
            rechecked += 1
            best_exact = np.inf
            label_col = col
            for c in range(columns):
                low = np.float64(scores_t[c, i]) + column_sq[c] - err_sq[c] - x_norm[i] * np.float64(err_x[c]) - row_err
                if low > limit:
                    continue
                j = slot_center[c]
                value = pair_dist2(X[i], centers[j])
                if value < best_exact or (value == best_exact and j < label):
                    best_exact = value
                    label = j
                    label_col = c
            dist2[i] = best_exact
            if label_col != col:
                others = np.inf
                for c in range(columns):
                    if c != label_col:
                        others = min(
                            others,
                            np.float64(scores_t[c, i])
                            + column_sq[c]
                            - err_sq[c]
                            - x_norm[i] * np.float64(err_x[c])
                            - row_err,
                        )
        else:
            dist2[i] = pair_dist2(X[i], centers[label])
        labels[i] = label
        if with_stats:
            add_to_cluster(sums, counts, sse, label, weights[i] if weights.shape[0] > 0 else 1.0, dist2[i], X[i])
        if with_bounds:
            lower[i, 0] = store_lower(math.sqrt(max(others + x_sq[i], 0.0)))
    return rechecked


def center_errors(column_sq, n_features, dtype):
    """Each center's share of the proven error of its score ``||c||^2 - 2 x.c`` for a row ``x``:
    ``err_sq[c] + ||x|| err_x[c]`` (plus ``1e-12 ||x||^2`` for the float64 terms), in the data's precision.

    The per-center form of :func:`daskmeans.kernels.score_error.score_error_allowance` (there with the largest
    center norm for every center): ``2 gamma (||x|| ||c|| + ||c||^2)``, with ``gamma`` for two more terms, which
    covers rounding the score less its error to the data's precision (:func:`_best_and_lowest_other`). One far
    center (kdd has a center 22 times the median norm) then no longer widens every row's near-tie test.
    """
    norm = np.sqrt(np.asarray(column_sq, dtype=np.float64))
    factor = 2.0 * _gamma(n_features + 2, dtype) * 1.0001
    err_sq = (factor + 1e-12) * norm * norm
    err_x = factor * norm
    return err_sq.astype(dtype), err_x.astype(dtype)


class RowTiles:
    """Tiles of rows in the compute dtype: views of ``X`` when it has that dtype, else each tile converted
    (exactly: integers as stored) into one small buffer just before it is scored, so that the GEMM and the settling
    read it from the cache. Converting a larger slab first (8 MiB) left them to read it from memory."""

    def __init__(self, X, tile_rows, dtype):
        self.X = X
        self.buffer = None if X.dtype == dtype else np.empty((min(tile_rows, X.shape[0]), X.shape[1]), dtype=dtype)

    def rows(self, start, stop):
        """Rows ``start:stop`` (at most ``tile_rows``), valid until the next call."""
        if self.buffer is None:
            return self.X[start:stop]
        rows = self.buffer[: stop - start]
        rows[...] = self.X[start:stop]
        return rows


def _assign_one_group(
    X, centers, slots, slot_center, x_sq, slab_bytes, labels, dist2, lower, norms_here, weights, sums, counts, sse
):
    """:func:`_assign_tiles` for one group of centers (no padding slots): tiles of ``ONE_GROUP_TILE_ROWS`` rows
    (fewer when their scores would pass ``slab_bytes``), each one GEMM of the centers scaled by -2 against the
    tile's rows, laid out center by center, then :func:`_settle_one_group`. Rows of another dtype than the slots'
    (integers as stored) are converted a tile at a time (:class:`RowTiles`). In float32 with at most
    ``PANEL_MAX_FEATURES`` features, the scores are never written: :func:`_assign_by_panels`."""
    n, d = X.shape
    dtype = slots.dtype
    columns = slots.shape[1]
    scaled_centers = np.ascontiguousarray(slots[:d].T)
    column_sq = np.ascontiguousarray(slots[d])
    err_sq, err_x = center_errors(column_sq, d, dtype)
    if dtype == np.float32 and d <= config.PANEL_MAX_FEATURES:
        return _assign_by_panels(
            X,
            centers,
            scaled_centers,
            column_sq,
            slot_center,
            err_sq,
            err_x,
            x_sq,
            labels,
            dist2,
            lower,
            weights,
            sums,
            counts,
            sse,
        )
    row_step = max(1, min(n, config.ONE_GROUP_TILE_ROWS, int(slab_bytes) // max(1, columns * dtype.itemsize)))
    buffer = np.empty(columns * row_step, dtype=dtype)
    best, best_low, other_low = (np.empty(row_step, dtype=dtype) for _ in range(3))
    best_col = np.empty(row_step, dtype=np.int32)
    x_norm = np.empty(row_step)
    x_norm_scan = np.empty(row_step, dtype=dtype)
    tiles = RowTiles(X, row_step, dtype)
    rechecked = 0
    for r0 in range(0, n, row_step):
        r1 = min(n, r0 + row_step)
        rows = tiles.rows(r0, r1)
        scores_t = buffer[: columns * (r1 - r0)].reshape(columns, r1 - r0)
        np.matmul(scaled_centers, rows.T, out=scores_t)
        rechecked += _settle_one_group(
            rows,
            centers,
            scores_t,
            column_sq,
            slot_center,
            err_sq,
            err_x,
            best,
            best_col,
            best_low,
            other_low,
            x_sq[r0:r1],
            x_norm,
            x_norm_scan,
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            norms_here,
            weights[r0:r1] if weights.shape[0] else weights,
            sums,
            counts,
            sse,
        )
    return rechecked


@numba.njit(cache=True, nogil=True)
def _settle_clear_rows(
    X, centers, slot_center, err_sq, err_x, best, best_col, other_low, x_sq, labels, dist2, lower, near
):
    """Settle the rows of a tile that are not near ties, from the summary of their float32 scores
    (:func:`~daskmeans.kernels.panel_scan.best_and_lowest_other_by_panels`): the label, the exact distance and
    (``lower`` not ``(n, 0)``) the lower bound on the distance to every other center, as
    :func:`_settle_one_group` settles them. The near ties' positions go to ``near``; their number is returned.

    Parameters
    ----------
    X, centers, slot_center, err_sq, err_x, x_sq : IN
        As :func:`_settle_one_group`.
    best, best_col, other_low : IN (rows,)
        The scan's summary.
    labels, dist2, lower : OUT
        As :func:`_settle_one_group`, for the rows settled here.
    near : OUT int64 (rows,)
        The near ties' positions, first the returned count.
    """
    with_bounds = lower.shape[1] > 0
    n_near = 0
    for i in range(X.shape[0]):
        x_norm = math.sqrt(x_sq[i])
        col = best_col[i]
        row_err = 1e-12 * x_sq[i]
        limit = np.float64(best[i]) + np.float64(err_sq[col]) + x_norm * np.float64(err_x[col]) + row_err
        others = np.float64(other_low[i]) - row_err
        if others <= limit:
            near[n_near] = i
            n_near += 1
            continue
        label = slot_center[col]
        labels[i] = label
        dist2[i] = pair_dist2(X[i], centers[label])
        if with_bounds:
            lower[i, 0] = store_lower(math.sqrt(max(others + x_sq[i], 0.0)))
    return n_near


def _assign_by_panels(
    X,
    centers,
    scaled_centers,
    column_sq,
    slot_center,
    err_sq,
    err_x,
    x_sq,
    labels,
    dist2,
    lower,
    weights,
    sums,
    counts,
    sse,
):
    """:func:`_assign_one_group` in float32, a tile of ``PANEL_TILE_BYTES`` of rows at a time: the summary of
    every row's scores without writing them
    (:func:`~daskmeans.kernels.panel_scan.best_and_lowest_other_by_panels`, rows of any dtype converted a panel at
    a time), the rows it decides settled at once (:func:`_settle_clear_rows`), the near ties scored again by one
    GEMM and settled as any tile (:func:`_settle_one_group`: by exact distances), then every row added to its
    cluster's sums in row order (the same sums as :func:`_settle_one_group` adds as it goes)."""
    n, d = X.shape
    padded_centers = padded(scaled_centers, column_sq, err_sq, err_x)
    tile = min(n, max(PANEL_ROWS, config.PANEL_TILE_BYTES // (d * X.itemsize)))
    best, other_low = np.empty(tile, dtype=np.float32), np.empty(tile, dtype=np.float32)
    best_col = np.empty(tile, dtype=np.int32)
    near = np.empty(tile, dtype=np.int64)
    rechecked = 0
    for r0 in range(0, n, tile):
        r1 = min(n, r0 + tile)
        rows = X[r0:r1]
        best_and_lowest_other_by_panels(rows, *padded_centers, x_sq[r0:r1], best, best_col, other_low)
        n_near = _settle_clear_rows(
            rows,
            centers,
            slot_center,
            err_sq,
            err_x,
            best,
            best_col,
            other_low,
            x_sq[r0:r1],
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            near,
        )
        if n_near:
            rechecked += _settle_near_ties(
                X,
                r0 + near[:n_near],
                centers,
                scaled_centers,
                column_sq,
                slot_center,
                err_sq,
                err_x,
                labels,
                dist2,
                lower,
            )
        if sums.shape[0] > 0:
            _cluster_stats(
                rows,
                labels[r0:r1],
                dist2[r0:r1],
                weights[r0:r1] if weights.shape[0] else weights,
                weights.shape[0] > 0,
                sums,
                counts,
                sse,
            )
    return rechecked


def _settle_near_ties(X, at, centers, scaled_centers, column_sq, slot_center, err_sq, err_x, labels, dist2, lower):
    """Rows ``at`` of ``X`` scored by one GEMM and settled by :func:`_settle_one_group` (without statistics);
    their labels, distances and bounds written at ``at``. Returns the rows it settled by exact distances."""
    m = len(at)
    rows = np.asarray(X[at], dtype=np.float32)
    scores_t = np.matmul(scaled_centers, rows.T)
    row_labels, row_dist2 = np.empty(m, dtype=np.int32), np.empty(m)
    row_lower = np.empty((m, lower.shape[1]), dtype=lower.dtype)
    scratch = [np.empty(m, dtype=np.float32) for _ in range(4)]
    no_stats = (np.empty((0, X.shape[1])), np.empty(0), np.empty(0))
    rechecked = _settle_one_group(
        rows,
        centers,
        scores_t,
        column_sq,
        slot_center,
        err_sq,
        err_x,
        scratch[0],
        np.empty(m, dtype=np.int32),
        scratch[1],
        scratch[2],
        np.empty(m),
        np.empty(m),
        scratch[3],
        row_labels,
        row_dist2,
        row_lower,
        True,
        np.empty(0),
        *no_stats,
    )
    labels[at] = row_labels
    dist2[at] = row_dist2
    lower[at] = row_lower
    return rechecked
