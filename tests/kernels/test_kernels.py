"""Numba kernels against plain NumPy references, in float32 and float64."""

import numba
import numpy as np
import pytest

from daskmeans.engine.random import row_uniforms, stage_key
from daskmeans.kernels.assign import all_dist2, nearest_centers, nearest_direct, nearest_gemm
from daskmeans.kernels.distance import dist2_to_point, exact_dist2, pair_dist2, sq_norm
from daskmeans.kernels.stats import cluster_stats, column_moments


def reference_nearest(X, C):
    d2 = ((X[:, None, :].astype(np.float64) - C[None, :, :].astype(np.float64)) ** 2).sum(-1)
    return d2.argmin(axis=1), d2.min(axis=1), d2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,d", [(3, 2), (7, 30), (300, 16)])
def test_nearest_centers_matches_numpy(dtype, k, d):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, d)).astype(dtype)
    C = rng.normal(size=(k, d)).astype(dtype)
    labels, dist2 = nearest_centers(X, C)
    ref_labels, ref_min, ref_all = reference_nearest(X, C)
    # ties or float32 cancellation may pick an equally near center; its distance must be the minimum
    chosen = ref_all[np.arange(len(X)), labels]
    np.testing.assert_allclose(chosen, ref_min, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-6)
    assert (labels == ref_labels).mean() > 0.99
    np.testing.assert_allclose(dist2, chosen, rtol=1e-6, atol=1e-8)
    assert labels.dtype == np.int32 and dist2.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_and_gemm_agree_with_slabs_smaller_than_the_data(dtype):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1000, 8)).astype(dtype)
    C = rng.normal(size=(50, 8)).astype(dtype)
    direct = nearest_direct(X, C)
    blocked = nearest_gemm(X, C, slab_bytes=50 * 64 * X.itemsize)  # 64 rows per slab
    assert (direct[0] == blocked[0]).mean() > 0.99
    np.testing.assert_allclose(direct[1], blocked[1], rtol=1e-5)


def test_gemm_handles_more_centers_than_one_slab():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    C = rng.normal(size=(5000, 4))
    labels, dist2 = nearest_gemm(X, C)
    ref_labels, ref_min, _ = reference_nearest(X, C)
    np.testing.assert_array_equal(labels, ref_labels)
    np.testing.assert_allclose(dist2, ref_min, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_dist2_and_all_dist2(dtype):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(100, 5)).astype(dtype)
    C = rng.normal(size=(6, 5)).astype(dtype)
    labels = rng.integers(0, 6, size=100).astype(np.int32)
    _, _, ref = reference_nearest(X, C)
    np.testing.assert_allclose(exact_dist2(X, C, labels), ref[np.arange(100), labels], rtol=1e-6)
    np.testing.assert_allclose(all_dist2(X, C), ref, rtol=1e-4, atol=1e-4)


def reference_pair_dist2(x, c):
    """The documented order of :func:`pair_dist2` in plain Python: eight running sums of the float64 squares (feature
    f to sum f % 8) over the first d - d % 8 features, combined pairwise, plus the plain sum of the rest."""
    terms = [float(t) for t in (x.astype(np.float64) - c.astype(np.float64)) ** 2]
    body = len(terms) - len(terms) % 8
    sums = [0.0] * 8
    for f in range(body):
        sums[f % 8] += terms[f]
    tail = 0.0
    for term in terms[body:]:
        tail += term
    return (((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))) + tail


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 5, 8, 13, 64, 67])
def test_exact_distance_is_the_documented_float64_sum_bitwise(dtype, d):
    rng = np.random.default_rng(6)
    X = (rng.normal(size=(50, d)) * 10).astype(dtype)
    C = (rng.normal(size=(4, d)) * 10).astype(dtype)
    labels = rng.integers(0, 4, size=50).astype(np.int32)
    expected = np.array([reference_pair_dist2(X[i], C[labels[i]]) for i in range(50)])
    np.testing.assert_array_equal(exact_dist2(X, C, labels), expected)
    # mixed dtypes (a float32 row against float64 centers) take the same path
    np.testing.assert_array_equal(exact_dist2(X, C.astype(np.float64), labels), expected)
    assert exact_dist2(X[:0], C, labels[:0]).shape == (0,)


@pytest.mark.slow
@pytest.mark.parametrize("d", [3, 8, 16, 67, 128])
def test_exact_distance_is_the_same_sum_for_bytes_and_strided_vectors(d):
    """Stored descriptors (uint8) and vectors whose elements are not adjacent (a column view) give the documented
    sum to the last bit, on the vector path and the scalar one alike."""
    rng = np.random.default_rng(8)
    X = rng.integers(0, 256, size=(30, d), dtype=np.uint8)
    C = rng.normal(loc=100, scale=40, size=(3, d))
    labels = rng.integers(0, 3, size=30)
    expected = np.array([reference_pair_dist2(X[i], C[labels[i]]) for i in range(30)])
    np.testing.assert_array_equal(exact_dist2(X, C, labels), expected)
    np.testing.assert_array_equal(
        exact_dist2(X, C.astype(np.float32), labels),
        [reference_pair_dist2(X[i], C.astype(np.float32)[labels[i]]) for i in range(30)],
    )
    np.testing.assert_array_equal(
        dist2_to_point(np.asfortranarray(X), C[2]), [reference_pair_dist2(row, C[2]) for row in X]
    )
    strided_X, strided_C = np.asfortranarray(X), np.asfortranarray(C)
    assert pair_dist2(strided_X[4], strided_C[1]) == reference_pair_dist2(X[4], C[1])
    assert pair_dist2(X[4], strided_C[1]) == pair_dist2(X[4], C[1])


@numba.njit
def _sq_norms_in_numba(X):
    zero = np.zeros(X.shape[1], dtype=X.dtype)
    return np.array([sq_norm(X[i], zero) for i in range(X.shape[0])])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 7, 128, 131])
def test_squared_norm_is_the_documented_sum_for_every_dtype(dtype, d):
    """Numba's integer path for values of up to 16 bits gives the exact integer sum, which is the documented float64
    sum of :func:`pair_dist2` against zero to the last bit, extremes of the dtype included; other dtypes take that
    sum itself."""
    rng = np.random.default_rng(9)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        X = rng.integers(info.min, info.max, size=(20, d), endpoint=True, dtype=dtype)
        X[0], X[1] = info.max, info.min
    else:
        X = (rng.normal(size=(20, d)) * 1e3).astype(dtype)
    zero = np.zeros(d, dtype=dtype)
    expected = [reference_pair_dist2(row, zero) for row in X]
    np.testing.assert_array_equal(_sq_norms_in_numba(X), expected)
    np.testing.assert_array_equal([sq_norm(row, zero) for row in X], expected)
    if np.dtype(dtype).itemsize <= 2:
        assert _sq_norms_in_numba(X).tolist() == [float(sum(int(v) ** 2 for v in row)) for row in X]


def test_exact_distance_of_one_pair_is_symmetric_and_zero_on_itself():
    rng = np.random.default_rng(7)
    x, c = rng.normal(size=(2, 21))
    assert pair_dist2(x, c) == pair_dist2(c, x) == reference_pair_dist2(x, c)
    assert pair_dist2(x, x) == 0.0


def test_empty_block():
    labels, dist2 = nearest_centers(np.empty((0, 3), np.float32), np.ones((2, 3), np.float32))
    assert labels.shape == (0,) and dist2.shape == (0,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_cluster_stats_matches_numpy(dtype, weighted):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 6)).astype(dtype)
    labels = rng.integers(0, 4, size=300).astype(np.int32)
    dist2 = rng.random(300)
    w = rng.random(300) if weighted else None
    sums, counts, sse = cluster_stats(X, labels, dist2, 5, w)
    ww = w if weighted else np.ones(300)
    for j in range(5):
        mask = labels == j
        np.testing.assert_allclose(
            sums[j], (ww[mask, None] * X[mask].astype(np.float64)).sum(0), rtol=1e-12, atol=1e-12
        )
        np.testing.assert_allclose(counts[j], ww[mask].sum())
        np.testing.assert_allclose(sse[j], (ww[mask] * dist2[mask]).sum())
    assert counts[4] == 0 and sums.dtype == np.float64


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_best_and_lowest_other_match_argmin_and_the_smallest_other_score_less_its_error(dtype):
    from daskmeans.kernels.tile_scan import _best_and_lowest_other

    rng = np.random.default_rng(8)
    scores = rng.integers(0, 6, size=(400, 7)).astype(dtype)  # many ties, within and across rows
    scores[5] = np.inf
    scores[6, 3:] = -np.inf
    scores[7] = [3, 1, 1, 2, 5, 1, 9]
    single = rng.random((10, 1)).astype(dtype)
    for values in (scores, single):
        n, columns = values.shape
        column_add = rng.integers(-2, 3, size=columns).astype(dtype)
        err_sq = rng.integers(0, 3, size=columns).astype(dtype) / 4
        err_x = rng.integers(0, 3, size=columns).astype(dtype) / 8
        x_norm = rng.integers(0, 4, size=n).astype(np.float64)
        # the NumPy reference: scores with the column's term added; each less its error
        expected_scores = values + column_add
        lows = expected_scores - err_sq - x_norm[:, None] * err_x
        best, best_low, other_low = (np.empty(n, dtype=dtype) for _ in range(3))
        best_col = np.empty(n, dtype=np.int64)
        _best_and_lowest_other(
            np.ascontiguousarray(values.T), column_add, err_sq, err_x, x_norm, best, best_col, best_low, other_low
        )
        expected_col = expected_scores.argmin(axis=1)
        np.testing.assert_array_equal(best_col, expected_col)
        np.testing.assert_array_equal(best, expected_scores[np.arange(n), expected_col])
        others = lows.copy()
        others[np.arange(n), expected_col] = np.inf
        np.testing.assert_array_equal(other_low, others.min(axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_best_and_second_and_the_lowest_other_where_near_match_numpy(dtype):
    """The unbounded pass's scan: the best score, its column and the smallest other score (NumPy's argmin and
    min); then ``other_low`` is exact wherever the near-tie test could pass with it, and elsewhere a lower bound
    that keeps the test failing, so every row is decided as with the exact value."""
    from daskmeans.kernels.tile_scan import _best_and_lowest_other, _best_and_second, _lowest_other_where_near

    rng = np.random.default_rng(9)
    for n, columns, spread in ((600, 7, 6), (500, 9, 3), (10, 1, 6)):
        values = rng.integers(0, spread, size=(n, columns)).astype(dtype)  # many ties, within and across rows
        if columns > 1:
            values[5] = np.inf
            values[7, 3:] = 2
        column_add = rng.integers(-2, 3, size=columns).astype(dtype)
        err_sq = (rng.integers(0, 3, size=columns) / 4).astype(dtype)
        err_x = (rng.integers(0, 3, size=columns) / 8).astype(dtype)
        x_sq = rng.integers(0, 9, size=n).astype(np.float64)
        x_norm = np.sqrt(x_sq)
        x_norm_scan = x_norm.astype(dtype)
        scores_t = np.ascontiguousarray(values.T)
        best, second, best_low, other_low, low_near = (np.empty(n, dtype=dtype) for _ in range(5))
        best_col, reference_col = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
        _best_and_second(scores_t, column_add, best, best_col, second)
        expected_scores = values + column_add
        expected_col = expected_scores.argmin(axis=1)
        np.testing.assert_array_equal(best_col, expected_col)
        np.testing.assert_array_equal(best, expected_scores[np.arange(n), expected_col])
        others = expected_scores.copy()
        others[np.arange(n), expected_col] = np.inf
        np.testing.assert_array_equal(second, others.min(axis=1))

        reference_best = np.empty(n, dtype=dtype)
        _best_and_lowest_other(
            scores_t, column_add, err_sq, err_x, x_norm_scan, reference_best, reference_col, best_low, other_low
        )
        _lowest_other_where_near(
            scores_t, column_add, err_sq, err_x, x_norm, x_norm_scan, x_sq, best, best_col, second, low_near
        )
        row_err = 1e-12 * x_sq
        limit = best.astype(np.float64) + err_sq[best_col] + x_norm * err_x[best_col] + row_err
        near = other_low.astype(np.float64) - row_err <= limit
        assert columns == 1 or (near.any() and not near.all())
        np.testing.assert_array_equal(low_near[near], other_low[near])
        assert (low_near[~near] <= other_low[~near]).all()
        assert (low_near[~near].astype(np.float64) - row_err[~near] > limit[~near]).all()


def test_one_far_center_no_longer_makes_every_row_a_near_tie():
    """The near-tie test takes each center's own score error: a far center (kdd's largest is 22 times the median
    norm) widens only its own scores' test. Labels and distances stay the exact ones."""
    from daskmeans.kernels.exact_assign import assign_with_bounds
    from daskmeans.kernels.nested_groups import make_groups

    rng = np.random.default_rng(3)
    X = (rng.normal(size=(6000, 20)) * 3 + 10).astype(np.float32)
    centers = X[rng.choice(6000, 30, replace=False)].copy()
    centers[0] = 5_000  # far from every row: never the nearest
    labels, dist2, _, rechecked = assign_with_bounds(X, centers, make_groups(centers, "none", 1), with_bounds=False)
    exact = ((X.astype(np.float64)[:, None, :] - centers.astype(np.float64)[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(labels, exact.argmin(axis=1))
    np.testing.assert_allclose(dist2, exact.min(axis=1), rtol=1e-12)
    # with the largest center norm in every row's allowance, most rows were near ties here
    assert rechecked < 0.05 * len(X), rechecked


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k, d", [(3, 4), (40, 24)])  # the direct loop and the GEMM path
@pytest.mark.parametrize("weighted", [False, True])
def test_statistics_gathered_while_assigning_equal_cluster_stats_bitwise(dtype, k, d, weighted):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(3000, d)).astype(dtype)
    centers = X[rng.choice(3000, k, replace=False)]
    w = rng.random(3000) if weighted else None
    stats = (np.zeros((k, d)), np.zeros(k), np.zeros(k))
    halves = [slice(0, 1700), slice(1700, 3000)]  # carried over two calls, as a pass carries them over slabs
    parts = [nearest_centers(X[h], centers, stats=stats, weights=None if w is None else w[h]) for h in halves]
    labels = np.concatenate([p[0] for p in parts])
    dist2 = np.concatenate([p[1] for p in parts])
    plain_labels, plain_dist2 = nearest_centers(X, centers)
    np.testing.assert_array_equal(labels, plain_labels)
    np.testing.assert_array_equal(dist2, plain_dist2)
    expected = cluster_stats(X, labels, dist2, k, w)
    for got, want in zip(stats, expected):
        np.testing.assert_array_equal(got, want)


def _moments_reference(rows):
    """NumPy transcription of :func:`column_moments`."""
    finite_rows = np.isfinite(rows).all(axis=1)
    n_nonfinite = int(rows.size - np.count_nonzero(np.isfinite(rows)))
    good = rows[finite_rows].astype(np.float64)
    if good.shape[0] == 0:
        return 0, np.zeros(rows.shape[1]), np.zeros(rows.shape[1]), n_nonfinite, int(np.argmin(finite_rows)), 0.0
    mean = good.mean(axis=0)
    first = int(np.argmin(finite_rows)) if n_nonfinite else -1
    return good.shape[0], mean, ((good - mean) ** 2).sum(axis=0), n_nonfinite, first, float(np.abs(good).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("poison", ["none", "nan", "inf", "all"])
def test_column_moments_matches_numpy(dtype, poison):
    rng = np.random.default_rng(6)
    rows = (rng.normal(size=(500, 9)) * 40 + 1000).astype(dtype)
    if poison == "nan":
        rows[[17, 200], [3, 8]] = np.nan
        rows[200, 0] = np.nan
    elif poison == "inf":
        rows[[5, 499], [0, 2]] = [np.inf, -np.inf]
    elif poison == "all":
        rows[:, 4] = np.nan
    n, mean, m2, n_bad, first, max_abs = column_moments(rows)
    e_n, e_mean, e_m2, e_bad, e_first, e_max = _moments_reference(rows)
    assert (n, n_bad, first, max_abs) == (e_n, e_bad, e_first, e_max)
    np.testing.assert_allclose(mean, e_mean, rtol=1e-13)
    np.testing.assert_allclose(m2, e_m2, rtol=1e-10)


def test_row_uniforms_depend_only_on_key_and_row():
    key = stage_key(7, "test", 1)
    whole = row_uniforms(key, 0, 1000)
    parts = np.concatenate([row_uniforms(key, 0, 300), row_uniforms(key, 300, 700)])
    np.testing.assert_array_equal(whole, parts)
    assert 0 < whole.min() and whole.max() < 1
    assert abs(whole.mean() - 0.5) < 0.05
    assert not np.array_equal(whole, row_uniforms(stage_key(7, "test", 2), 0, 1000))
    assert not np.array_equal(whole, row_uniforms(stage_key(8, "test", 1), 0, 1000))
