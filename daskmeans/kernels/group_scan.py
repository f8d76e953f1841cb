"""One pass over a tile of GEMM scores for yinyang's full assignment: each row's best score and its column, the
smallest score in every group of centers, the second smallest in the best score's group and the smallest outside
it.

The scores are laid out center by center (``scores_t[column, row]``), the columns slot by slot (column
``t * n_groups + g`` holds slot ``t`` of group ``g``), so that the loop over the rows is innermost and
branch-free and runs on vectors of rows, as the plain assignment's scan does
(:func:`daskmeans.kernels.tile_scan._best_and_lowest_other`). It replaces NumPy's ``argmin``, a minimum per
slot over strided views and a second-smallest reduction, which read the tile four times and can cost as much as
the GEMM itself.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def scan_groups(
    scores_t, column_add, n_groups, best, best_col, best_group, group_min, group_second, own_second, other_min
):
    """Add ``column_add[c]`` to every score of column ``c`` (in place: the centers' squared norms, ``inf`` for
    padding slots) and summarize each row ``i`` of the scores.

    Parameters
    ----------
    scores_t : IN-OUT ndarray (columns, rows)
        float32 or float64; ``columns`` a multiple of ``n_groups``. Holds the full scores on return.
    column_add : IN ndarray (columns,)
        The scores' dtype.
    n_groups : IN int
    best : OUT ndarray (rows,)
        The smallest score of the row (the scores' dtype).
    best_col : OUT int32 ndarray (rows,)
        Its column, the first among equals (as ``argmin``).
    best_group : OUT int32 ndarray (rows,)
        That column's group, ``best_col % n_groups``.
    group_min : OUT ndarray (n_groups, rows)
        The smallest score in each group (the scores' dtype).
    group_second : OUT ndarray (n_groups, rows)
        The second smallest in each group (equal to the smallest when it occurs twice; ``inf`` in a group of
        one column).
    own_second : OUT ndarray (rows,)
        ``group_second`` of the best column's group: the smallest score but the best column's in that group.
    other_min : OUT ndarray (rows,)
        The smallest score in the groups other than ``best_col``'s (``inf`` with one group).
    """
    columns, rows = scores_t.shape
    for i in range(rows):
        best[i] = np.inf
        best_col[i] = 0
        other_min[i] = np.inf
    for g in range(n_groups):
        for i in range(rows):
            group_min[g, i] = np.inf
            group_second[g, i] = np.inf
    for c in range(columns):
        add = column_add[c]
        minima = group_min[c % n_groups]
        seconds = group_second[c % n_groups]
        for i in range(rows):
            value = scores_t[c, i] + add
            scores_t[c, i] = value
            seconds[i] = min(seconds[i], max(minima[i], value))
            minima[i] = min(minima[i], value)
            new = value < best[i]
            best_col[i] = c if new else best_col[i]
            best[i] = min(best[i], value)
    for i in range(rows):
        best_group[i] = best_col[i] % n_groups
    for g in range(n_groups):
        minima = group_min[g]
        seconds = group_second[g]
        for i in range(rows):
            own = best_group[i] == g
            other_min[i] = min(other_min[i], np.inf if own else minima[i])
            own_second[i] = seconds[i] if own else own_second[i]
