"""Scans of a tile of GEMM scores written by BLAS: every row's best score, its column and a bound on the others.

The scores of a tile are laid out center by center (``scores_t[c, i]``, rows innermost), so that each scan runs on
vectors of rows; :mod:`daskmeans.kernels.one_group_assign` settles the rows from these summaries. The same summary
without writing the scores is :mod:`daskmeans.kernels.panel_scan`'s.
"""

from __future__ import annotations

import numba
import numpy as np


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
    precision), computed exactly only for the rows it could make near ties in
    :func:`~daskmeans.kernels.one_group_assign._settle_one_group`.

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
