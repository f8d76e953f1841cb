"""The register-blocked scan of the float32 assignment (daskmeans.kernels.panel_scan) against NumPy, the
assignment built on it against the BLAS path, and the measured choice between the two."""

import numpy as np
import pytest

from daskmeans import config
from daskmeans.exceptions import InvalidParameterError
from daskmeans.kernels import one_group_assign, panel_scan
from daskmeans.kernels.assign import nearest_centers
from daskmeans.kernels.exact_assign import assign_with_bounds
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.kernels.one_group_assign import center_errors
from daskmeans.kernels.packed_bounds import unpack_bounds


@pytest.fixture(autouse=True)
def _panels_on():
    """The assignments here take the panels wherever they can (``"auto"`` may measure BLAS tiles faster here)."""
    with config.set(PANEL_SCAN="panels"):
        yield


def _reference_summary(X, scaled, column_add, err_sq, err_x):
    """NumPy transcription: scores in float32 (exact here: small integers), the first smallest, and the smallest
    of the other scores less their errors, each rounded to float32 in the kernel's order."""
    x_sq = (X.astype(np.float64) ** 2).sum(axis=1)
    x_norm = np.sqrt(x_sq).astype(np.float32)
    scores = (X.astype(np.float64) @ scaled.astype(np.float64).T).astype(np.float32) + column_add
    col = scores.argmin(axis=1)
    low = (scores - err_sq) - x_norm[:, None] * err_x
    low[np.arange(len(X)), col] = np.inf
    return x_sq, scores[np.arange(len(X)), col], col, low.min(axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
@pytest.mark.parametrize(
    "k",
    [
        1,
        3,
        panel_scan.TAIL_CENTERS,
        panel_scan.CENTERS_PER_STEP,
        panel_scan.CENTERS_PER_STEP + 1,
        2 * panel_scan.CENTERS_PER_STEP + 5,
        50,
    ],
)
def test_best_and_lowest_other_by_panels_match_numpy(dtype, k):
    """Every row's squared norm, best score, its column (the first among equals: the data has many ties) and the
    smallest other score less its error, as NumPy computes them, for any number of centers (whole steps, the
    tail, padding) and rows (a last panel not full)."""
    rng = np.random.default_rng(k)
    n, d = 2 * panel_scan.PANEL_ROWS + 7, 21
    X = rng.integers(0, 4, size=(n, d)).astype(dtype)
    centers = rng.integers(0, 4, size=(k, d)).astype(np.float32)
    centers[k // 2] = centers[0]  # equal centers: ties in every row
    scaled = -2 * centers
    column_add = (centers.astype(np.float64) ** 2).sum(axis=1).astype(np.float32)
    err_sq = (rng.integers(0, 3, size=k) / 4).astype(np.float32)
    err_x = (rng.integers(0, 3, size=k) / 8).astype(np.float32)
    x_sq, best, other_low = np.empty(n), np.empty(n, dtype=np.float32), np.empty(n, dtype=np.float32)
    best_col = np.empty(n, dtype=np.int32)
    panel_scan.best_and_lowest_other_by_panels(
        X, *panel_scan.padded(scaled, column_add, err_sq, err_x), x_sq, best, best_col, other_low
    )
    expected = _reference_summary(X, scaled, column_add, err_sq, err_x)
    np.testing.assert_array_equal(x_sq, expected[0])
    np.testing.assert_array_equal(best, expected[1])
    np.testing.assert_array_equal(best_col, expected[2])
    np.testing.assert_array_equal(other_low, expected[3])


def test_padding_centers_never_win_nor_lower_a_bound():
    centers = np.ones((5, 3), dtype=np.float32)
    scaled, column_add, err_sq, err_x = panel_scan.padded(
        -2 * centers, np.full(5, 3, np.float32), np.ones(5, np.float32), np.ones(5, np.float32)
    )
    assert len(scaled) % panel_scan.TAIL_CENTERS == 0 and len(scaled) >= 5
    assert (scaled[5:] == 0).all() and np.isinf(column_add[5:]).all()
    assert (err_sq[5:] == 0).all() and (err_x[5:] == 0).all()


def _descriptors_like(n, d, k, seed):
    """uint8 rows in clusters, with duplicate rows, two equal centers (exact ties) and two centers closer than
    float32 scores can tell apart: near ties that only exact distances settle."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 200, size=(k, d))
    X = np.clip(base[rng.integers(0, k, n)] + rng.integers(-20, 21, size=(n, d)), 0, 255).astype(np.uint8)
    X[1::97] = X[0]
    centers = X[rng.choice(n, k, replace=False)].astype(np.float32)
    centers[1] = centers[0]
    centers[2] = centers[3]
    centers[2, 0] += np.float32(1e-3)
    return X, centers


@pytest.mark.parametrize("stored", ["uint8", "float32"])
def test_panel_assignment_equals_the_blas_assignment_to_the_last_bit(stored):
    """Labels, exact distances and float64 sums from the panels (float32 rows, or uint8 rows converted a panel at a
    time) are those of the BLAS tiles on the same values in float64: exact nearest centers, ties to the lowest
    index, sums added in row order. Equal centers make near ties that only exact distances settle."""
    X, centers = _descriptors_like(3000, 40, 120, 0)
    rows = X if stored == "uint8" else X.astype(np.float32)
    k, d = centers.shape
    stats = (np.zeros((k, d)), np.zeros(k), np.zeros(k))
    labels, dist2 = nearest_centers(rows, centers, stats=stats)
    reference_stats = (np.zeros((k, d)), np.zeros(k), np.zeros(k))
    reference = nearest_centers(X.astype(np.float64), centers.astype(np.float64), stats=reference_stats)
    np.testing.assert_array_equal(labels, reference[0])
    np.testing.assert_array_equal(dist2, reference[1])
    for ours, theirs in zip(stats, reference_stats):
        np.testing.assert_array_equal(ours, theirs)
    assert (labels != 1).all()  # center 1 equals center 0: the lower index wins every tie


def test_panel_assignment_with_one_bound_per_row():
    """Hamerly's single bound from the panels: the same labels and distances as without bounds, the near ties
    settled (``rechecked``), and every bound at most the distance to the nearest other center."""
    X, centers = _descriptors_like(2000, 32, 60, 1)
    groups = make_groups(centers, "none", 1)
    labels, dist2, lower, rechecked = assign_with_bounds(X, centers, groups, slab_bytes=2**20, with_bounds=True)
    plain = nearest_centers(X, centers)
    np.testing.assert_array_equal(labels, plain[0])
    np.testing.assert_array_equal(dist2, plain[1])
    assert rechecked > 0
    all_dist2 = ((X.astype(np.float64)[:, None, :] - centers.astype(np.float64)[None]) ** 2).sum(axis=2)
    all_dist2[np.arange(len(X)), labels] = np.inf
    assert (unpack_bounds(lower[:, 0]) <= np.sqrt(all_dist2.min(axis=1))).all()
    assert (unpack_bounds(lower[:, 0]) > 0).mean() > 0.5


def test_center_errors_are_what_the_panels_are_given():
    column_sq = np.array([1.0, 4.0, 0.0], dtype=np.float32)
    err_sq, err_x = center_errors(column_sq, 8, np.float32)
    assert err_sq.dtype == err_x.dtype == np.float32 and err_sq[2] == err_x[2] == 0


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("n_groups, columns", [(2, 2), (3, 7), (5, 40), (4, 53), (13, 60)])
def test_best_of_groups_by_panels_match_numpy(dtype, n_groups, columns):
    """Yinyang's summary (best score and column, every group's smallest, the best group's second smallest and the
    smallest outside it, each row's squared norm and allowance) as NumPy computes it, with ties and padding
    slots (``inf``), for columns in whole steps, a tail and padding."""
    from daskmeans.kernels.score_error import _gamma, score_error

    rng = np.random.default_rng(columns)
    n, d = 2 * panel_scan.PANEL_ROWS + 9, 17
    X = rng.integers(0, 4, size=(n, d)).astype(dtype)
    slots = rng.integers(0, 4, size=(columns, d)).astype(np.float32)
    slots[columns // 2] = slots[0]
    column_add = (slots.astype(np.float64) ** 2).sum(axis=1).astype(np.float32)
    column_add[-1] = np.inf  # a padding slot
    gamma, center_norm = _gamma(d, np.float32), 6.0
    scaled, padded_add, _, _ = panel_scan.padded(-2 * slots, column_add)
    x_sq, allowance, best, own_second, other_second = (
        np.empty(n),
        np.empty(n),
        *(np.empty(n, np.float32) for _ in range(3)),
    )
    best_col, group_min = np.empty(n, dtype=np.int32), np.empty((n, n_groups), dtype=np.float32)
    panel_scan.best_of_groups_by_panels(
        X,
        scaled,
        padded_add,
        n_groups,
        center_norm,
        gamma,
        x_sq,
        allowance,
        best,
        best_col,
        group_min,
        own_second,
        other_second,
    )
    scores = (X.astype(np.float64) @ (-2 * slots.astype(np.float64)).T).astype(np.float32) + column_add
    expected_col = scores.argmin(axis=1)
    rows = np.arange(n)
    np.testing.assert_array_equal(best_col, expected_col)
    np.testing.assert_array_equal(best, scores[rows, expected_col])
    group_of = np.arange(columns) % n_groups
    expected_min = np.stack([scores[:, group_of == g].min(axis=1) for g in range(n_groups)], axis=1)
    np.testing.assert_array_equal(group_min, expected_min)
    own = expected_col % n_groups
    others = np.where(group_of[None, :] == own[:, None], scores, np.inf)
    others[rows, expected_col] = np.inf
    np.testing.assert_array_equal(own_second, others.min(axis=1))
    np.testing.assert_array_equal(
        other_second, np.where(np.arange(n_groups)[None] == own[:, None], np.inf, expected_min).min(axis=1)
    )
    expected_sq = (X.astype(np.float64) ** 2).sum(axis=1)
    np.testing.assert_array_equal(x_sq, expected_sq)
    np.testing.assert_array_equal(allowance, [score_error(np.sqrt(v), v, center_norm, gamma) for v in expected_sq])


@pytest.mark.parametrize("k, n_groups", [(60, 7), (121, 12)])
def test_grouped_panel_assignment_equals_the_gemm_tiles(k, n_groups, monkeypatch):
    """Yinyang's full assignment from the panels gives the labels, exact distances, group bounds, near ties
    settled and float64 sums (weighted) of the GEMM tiles, to the last bit (groups of unequal sizes: padding
    slots; equal and nearly equal centers: near ties)."""
    from daskmeans.kernels import exact_assign

    X, centers = _descriptors_like(2500, 40, k, 2)
    groups = make_groups(centers, "yinyang", n_groups)
    weights = np.random.default_rng(3).random(len(X))

    def assign(panels):
        tiles = exact_assign._assign_tiles
        if not panels:
            monkeypatch.setattr(
                exact_assign, "_assign_tiles", lambda *args, **kwargs: tiles(*args, **{**kwargs, "panels": False})
            )
        stats = (np.zeros((k, X.shape[1])), np.zeros(k), np.zeros(k))
        result = assign_with_bounds(X, centers, groups, slab_bytes=2**20, stats=stats, weights=weights)
        monkeypatch.setattr(exact_assign, "_assign_tiles", tiles)
        return result, stats

    (labels, dist2, lower, rechecked), stats = assign(True)
    (ref_labels, ref_dist2, ref_lower, ref_rechecked), ref_stats = assign(False)
    assert (groups.slot_center < 0).any() and rechecked == ref_rechecked > 0
    np.testing.assert_array_equal(labels, ref_labels)
    np.testing.assert_array_equal(dist2, ref_dist2)
    np.testing.assert_array_equal(lower, ref_lower)
    for ours, theirs in zip(stats, ref_stats):
        np.testing.assert_array_equal(ours, theirs)


def test_the_vector_width_is_chosen_without_failing_where_llvm_cannot_read_the_host(monkeypatch):
    """LLVM raises where it cannot read the host CPU's features; importing daskmeans must not."""
    from llvmlite import binding

    assert panel_scan._has_wide_vectors() == panel_scan.WIDE_VECTORS

    def unreadable():
        raise RuntimeError("failed to get host cpu features")

    monkeypatch.setattr(binding, "get_host_cpu_features", unreadable)
    assert panel_scan._has_wide_vectors() is False


def test_the_panel_scan_is_taken_as_set_and_measured_once_per_process_and_width(monkeypatch):
    """``"panels"`` and ``"blas"`` decide; ``"auto"`` takes the faster of the two as :func:`panel_seconds` measured
    them, once per number of features; wider rows than ``PANEL_MAX_FEATURES`` never take the panels."""
    measured = []

    def seconds(n_features):
        measured.append(n_features)
        return (1.0, 2.0) if n_features == 8 else (2.0, 1.0)

    monkeypatch.setattr(one_group_assign, "_PANELS_MEASURED", {})
    monkeypatch.setattr(one_group_assign, "panel_seconds", seconds)
    with config.set(PANEL_SCAN="blas"):
        assert not one_group_assign.panels_pay(8)
    with config.set(PANEL_SCAN="auto"):
        assert [one_group_assign.panels_pay(d) for d in (8, 16, 8, 16)] == [True, False, True, False]
        assert measured == [8, 16]
        with config.set(PANEL_MAX_FEATURES=4):
            assert not one_group_assign.panels_pay(8)
    assert one_group_assign.panels_pay(8)
    with config.set(PANEL_MAX_FEATURES=4):
        assert not one_group_assign.panels_pay(8)


def test_threads_that_ask_at_once_wait_for_one_measurement(monkeypatch):
    """A worker's threads that meet the same width at once measure it once, one thread at a time."""
    import threading
    import time

    measured = []

    def seconds(n_features):
        measured.append(n_features)
        time.sleep(0.05)
        return 1.0, 2.0

    monkeypatch.setattr(one_group_assign, "_PANELS_MEASURED", {})
    monkeypatch.setattr(one_group_assign, "panel_seconds", seconds)
    answers = []
    with config.set(PANEL_SCAN="auto"):
        threads = [threading.Thread(target=lambda: answers.append(one_group_assign.panels_pay(8))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert answers == [True] * 4 and measured == [8]


def test_the_measurement_times_both_ways_and_an_unknown_setting_is_refused():
    with config.set(PANEL_CALIBRATION_ROWS=300, PANEL_CALIBRATION_CENTERS=40):
        panels, tiles = one_group_assign.panel_seconds(16, repeats=1)
    assert 0 < panels < np.inf and 0 < tiles < np.inf
    with config.set(PANEL_SCAN="fastest"), pytest.raises(InvalidParameterError, match="'auto', 'panels' or 'blas'"):
        one_group_assign.panels_pay(16)


def test_the_measurement_runs_blas_on_one_thread_as_the_passes_do(monkeypatch):
    """The driver's main thread may run BLAS on every core; the tiles are measured on one BLAS thread anyway, as
    every pass runs them, so the choice holds for the passes (the panel scan runs on one thread)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    seen = []
    measure = one_group_assign._assign_one_group

    def recording(*args):
        seen.extend(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")
        return measure(*args)

    monkeypatch.setattr(one_group_assign, "_assign_one_group", recording)
    with (
        threadpool_limits(limits=2, user_api="blas"),
        config.set(PANEL_CALIBRATION_ROWS=300, PANEL_CALIBRATION_CENTERS=40),
    ):
        one_group_assign.panel_seconds(16, repeats=1)
        after = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert seen and set(seen) == {1}
    assert set(after) == {2}  # the caller's setting is back


def test_either_choice_gives_the_same_assignment_to_the_last_bit():
    """The choice changes only the time: the labels, distances, group bounds and sums of the panels and of the BLAS
    tiles are equal, and labels, distances and sums are those of the float64 reference."""
    X, centers = _descriptors_like(1500, 40, 50, 4)
    k, d = centers.shape
    groups = make_groups(centers, "yinyang", 6)

    def assign(dtype, setting):
        stats = (np.zeros((k, d)), np.zeros(k), np.zeros(k))
        with config.set(PANEL_SCAN=setting):
            return assign_with_bounds(X.astype(dtype), centers.astype(dtype), groups, stats=stats), stats

    panels, blas, reference = assign(np.float32, "panels"), assign(np.float32, "blas"), assign(np.float64, "blas")
    for ours, theirs in zip((*panels[0], *panels[1]), (*blas[0], *blas[1])):
        np.testing.assert_array_equal(ours, theirs)
    for ours, theirs in zip((*panels[0][:2], *panels[1]), (*reference[0][:2], *reference[1])):
        np.testing.assert_array_equal(ours, theirs)
