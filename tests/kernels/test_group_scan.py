"""The group scan of yinyang's full assignment against NumPy's argmin and minima, in float32 and float64."""

import numpy as np
import pytest

from daskmeans.kernels.group_scan import scan_groups


def reference_scan(scores, n_groups):
    """The summary from NumPy, row by row in the scores' usual layout ``(rows, columns)``."""
    rows = np.arange(scores.shape[0])
    best_col = scores.argmin(axis=1)
    by_group = scores.reshape(scores.shape[0], -1, n_groups)  # [row, slot, group]
    group_min = by_group.min(axis=1)
    group_second = np.sort(by_group, axis=1)[:, 1, :] if by_group.shape[1] > 1 else np.full_like(group_min, np.inf)
    best_group = best_col % n_groups
    others = group_min.copy()
    others[rows, best_group] = np.inf
    return best_col, scores[rows, best_col], group_min, group_second, group_second[rows, best_group], others.min(1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_groups,width", [(20, 10), (32, 32), (3, 1), (1, 7)])
def test_scan_groups_matches_numpy(dtype, n_groups, width):
    rng = np.random.default_rng(4)
    rows, columns = 333, n_groups * width
    raw = rng.standard_normal((columns, rows)).astype(dtype)
    raw[rng.random(raw.shape) < 0.2] = 0.5  # ties within and across groups
    column_add = rng.random(columns).astype(dtype)
    column_add[-1] = np.inf  # a padding slot
    column_add[1] = column_add[n_groups % columns] = column_add[0]
    raw[:2, :50] = -10.0  # equal best scores in two columns: the first wins, as with argmin
    raw[[0, n_groups % columns], 50:100] = -10.0  # ... and in one group: its second equals its minimum
    if width > 1 and n_groups > 1:  # a tie whose first column is in a later group (slot 0 of group 1 beats slot 1
        raw[[n_groups, 1], 100:150] = -20.0  # of group 0): argmin's column, not the first group's
        column_add[n_groups] = column_add[1]
    expected = reference_scan((raw + column_add[:, None]).T, n_groups)

    scores_t = raw.copy()
    best, other_min, own_second = (np.empty(rows, dtype=dtype) for _ in range(3))
    best_col, best_group = np.empty(rows, dtype=np.int32), np.empty(rows, dtype=np.int32)
    group_min, group_second = np.empty((n_groups, rows), dtype=dtype), np.empty((n_groups, rows), dtype=dtype)
    scan_groups(
        scores_t, column_add, n_groups, best, best_col, best_group, group_min, group_second, own_second, other_min
    )

    np.testing.assert_array_equal(scores_t, raw + column_add[:, None])
    np.testing.assert_array_equal(best_col, expected[0])
    np.testing.assert_array_equal(best, expected[1])
    np.testing.assert_array_equal(best_group, expected[0] % n_groups)
    np.testing.assert_array_equal(group_min, expected[2].T)
    np.testing.assert_array_equal(group_second, expected[3].T)
    np.testing.assert_array_equal(own_second, expected[4])
    np.testing.assert_array_equal(other_min, expected[5])
    assert np.isinf(other_min).all() == (n_groups == 1)
