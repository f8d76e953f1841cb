"""The statistics of exact k-means with bounds: kept sums moved by the rows that changed cluster, and far rows,
against plain NumPy references and against a full recount, to the last bit."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from daskmeans.algorithms.lloyd import lloyd, lloyd_plan
from daskmeans.algorithms.result import RunContext
from daskmeans.engine.slabs import with_stored_form
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.kernels.stats import cluster_sse, cluster_stats, largest_positions, move_rows
from daskmeans.passes.bounded_assign import _revisit_state, _start_block, keeps_sums
from tests.conftest import shared_dataset


@pytest.mark.parametrize("n,keep", [(0, 3), (5, 0), (5, 10), (200, 7), (5000, 32)])
@pytest.mark.parametrize("order", ["random", "tied", "ascending"])
def test_largest_positions_are_numpys_order_largest_first_ties_in_position_order(n, keep, order):
    rng = np.random.default_rng(n + keep)
    values = rng.integers(0, 4, n).astype(np.float64) if order == "tied" else rng.random(n)
    values = np.sort(values) if order == "ascending" else values  # every value enters the heap
    expected = np.lexsort((np.arange(n), -values))[:keep]
    np.testing.assert_array_equal(largest_positions(values, keep), expected)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16])
def test_moved_rows_and_sse_match_numpy(dtype):
    rng = np.random.default_rng(2)
    X = rng.integers(0, 200, (3000, 9)).astype(dtype)
    old, new = rng.integers(0, 6, 3000).astype(np.int32), rng.integers(0, 6, 3000).astype(np.int32)
    new[::3] = old[::3]
    dist2 = rng.random(3000)
    sums, counts = np.zeros((6, 9)), np.zeros(6)
    np.add.at(sums, old, X.astype(np.float64))
    np.add.at(counts, old, 1.0)
    move_rows(X, old, new, sums, counts)
    expected_sums, expected_counts, expected_sse = np.zeros((6, 9)), np.zeros(6), np.zeros(6)
    np.add.at(expected_sums, new, X.astype(np.float64))
    np.add.at(expected_counts, new, 1.0)
    np.add.at(expected_sse, new, dist2)
    np.testing.assert_array_equal(sums, expected_sums)  # integers in float64: exact in any order
    np.testing.assert_array_equal(counts, expected_counts)
    np.testing.assert_allclose(cluster_sse(new, dist2, np.zeros(6)), expected_sse, rtol=1e-13)


def test_only_unweighted_integer_blocks_with_room_for_the_sums_keep_them():
    rows = np.zeros((1290, 128), dtype=np.uint8)
    assert keeps_sums(rows, None, 10)
    assert not keeps_sums(rows, None, 11), "k (d + 1) sums for 1,290 rows: at most 10 centers"
    assert not keeps_sums(rows, np.ones(1290), 10), "weighted sums are not exact"
    assert not keeps_sums(rows.astype(np.float32), None, 10), "float sums are not exact"


def _descriptors(n, k):
    X = np.ascontiguousarray(shared_dataset("cifar_dsift")["X"][:n])
    return X, X[np.random.default_rng(4).choice(n, k, replace=False)].astype(np.float32)


@pytest.mark.parametrize("weighted", [False, True])
def test_revisits_report_the_statistics_of_a_full_recount_to_the_last_bit(weighted):
    X, centers = _descriptors(3000, 12)
    weights = np.random.default_rng(0).random(len(X)) if weighted else None
    groups = make_groups(centers, "yinyang", 4)
    state, (report, _) = _start_block(X, 0, weights, centers, groups, 8)
    rng = np.random.default_rng(5)
    moved_rows = 0
    for _ in range(6):
        moved = (centers + rng.normal(0, 2.0, centers.shape)).astype(np.float32)
        shift = np.sqrt(((moved.astype(np.float64) - centers) ** 2).sum(1)) * (1 + 1e-12)
        revisited, (report, _) = _revisit_state(state, moved, shift, groups, 8)
        moved_rows += int(np.count_nonzero(revisited.labels != state.labels))
        full = cluster_stats(X, revisited.labels, revisited.dist2, len(centers), weights)
        for reported, counted in zip(report[:3], full):
            np.testing.assert_array_equal(reported, counted)
        assert (revisited.kept_sums is None) == weighted
        state, centers = revisited, moved
    assert moved_rows > 0, "rows changed cluster: the kept sums were moved"


@pytest.mark.slow
def test_kmeans_on_uint8_rows_keeping_sums_has_the_iterates_of_the_same_rows_in_float32(cluster_client):
    X8, centers = _descriptors(4000, 10)
    X = X8.astype(np.float32)
    stored = cluster_client.persist(da.from_array(X8, chunks=(2000, X8.shape[1])))
    assert keeps_sums(X8[:2000], None, len(centers))

    def fit(array):
        history = []
        context = RunContext(client=cluster_client, total_weight=len(X), callback=history.append)
        plan = lloyd_plan(array, len(centers), "yinyang", max_iter=10, client=cluster_client)
        return lloyd(array, centers, plan, context), history

    kept, kept_history = fit(with_stored_form(stored.astype(np.float32), stored))
    recounted, recounted_history = fit(da.from_array(X, chunks=(2000, X.shape[1])))
    np.testing.assert_array_equal(kept.centers, recounted.centers)
    assert [h["inertia"] for h in kept_history] == [h["inertia"] for h in recounted_history]
