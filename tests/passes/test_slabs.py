"""Passes read each chunk as stored and convert it a slab of rows at a time: the same numbers as one call on the
whole converted block, with memory bounded by the slab (the worker-level check is tests/test_memory_bounds.py)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

from daskmeans import open_input
from daskmeans.config import SLAB_BYTES
from daskmeans.engine.graph import block_args
from daskmeans.engine.slabs import (
    ROW_ALIGNMENT,
    converted_rows,
    is_aligned,
    map_rows,
    row_slabs,
    slab_rows,
    slabs,
    stored_form,
)
from daskmeans.kernels.assign import nearest_centers
from daskmeans.kernels.stats import cluster_stats
from daskmeans.passes.assign import _assign_stats_block, lazy_labels, lazy_min_dist2
from daskmeans.passes.summary import _summarize_block, finish_summary

D = 128
#: rows of a uint8 block that is three and a half slabs as float32
ROWS = 7 * slab_rows(D, 4) // 2


def _uint8_block(rows=ROWS, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(rows, D), dtype=np.uint8)


def test_slabs_cover_the_block_in_order_converted_and_bounded():
    block = _uint8_block()
    weights = np.random.default_rng(1).random(ROWS)
    seen = []
    for start, rows, w in slabs(block, weights):
        assert rows.dtype == np.float32 and rows.flags.c_contiguous and rows.nbytes <= SLAB_BYTES
        np.testing.assert_array_equal(rows, block[start : start + len(rows)].astype(np.float32))
        np.testing.assert_array_equal(w, weights[start : start + len(rows)])
        seen.append((start, len(rows)))
    assert len(seen) == 4 and [s for s, _ in seen] == [0, *np.cumsum([n for _, n in seen])[:-1]]
    assert sum(n for _, n in seen) == ROWS
    assert list(row_slabs(0, 10)) == [(0, 0)], "an empty block is one empty slab (the passes' partials stay typed)"
    floats = block.astype(np.float32)
    (only,) = [rows for _, rows, _ in slabs(floats[:100])]
    assert np.shares_memory(only, floats), "a block already in its compute dtype is not copied"


def test_reused_slabs_are_the_same_values_in_one_buffer():
    block = _uint8_block(seed=2)
    fresh = [(start, rows.copy()) for start, rows, _ in slabs(block)]
    reused = [(start, rows.copy(), rows) for start, rows, _ in slabs(block, reuse=True)]
    assert [s for s, _ in fresh] == [s for s, _, _ in reused]
    for (_, a), (_, b, view) in zip(fresh, reused):
        np.testing.assert_array_equal(a, b)
        assert view.dtype == np.float32 and view.flags.c_contiguous
    assert all(np.shares_memory(reused[0][2], view) for _, _, view in reused), "one buffer for every slab"
    floats = block.astype(np.float32)
    (only,) = [rows for _, rows, _ in slabs(floats[:100], reuse=True)]
    assert np.shares_memory(only, floats), "a block already in its compute dtype is still not copied"


def test_the_reused_buffer_outlives_the_walk_and_nested_walks_get_their_own():
    import threading

    block, other = _uint8_block(seed=3), _uint8_block(seed=4)[:500]
    first = [rows for _, rows, _ in slabs(block, reuse=True)][0]
    second = [rows for _, rows, _ in slabs(block, reuse=True)][0]
    assert np.shares_memory(first, second), "the next walk on this thread reuses the buffer"
    outer, inner = [], []
    for _, rows, _ in slabs(block, reuse=True):
        outer.append(rows.copy())
        for _, nested, _ in slabs(other, reuse=True):
            assert not np.shares_memory(rows, nested)
            inner.append(nested.copy())
        np.testing.assert_array_equal(rows, outer[-1])  # the nested walk did not write into the outer slab
    np.testing.assert_array_equal(np.concatenate(outer), block.astype(np.float32))
    np.testing.assert_array_equal(np.concatenate(inner), np.tile(other.astype(np.float32), (len(outer), 1)))
    elsewhere = []
    thread = threading.Thread(target=lambda: elsewhere.extend(rows for _, rows, _ in slabs(block, reuse=True)))
    thread.start()
    thread.join()
    assert not np.shares_memory(elsewhere[0], first), "each thread has a buffer of its own"


def _misaligned(array, offset=3):
    """``array``'s values in memory that starts ``offset`` bytes past an aligned address (as a block deserialized
    from a Dask message can)."""
    raw = np.empty(array.nbytes + ROW_ALIGNMENT + offset, dtype=np.uint8)
    start = (-raw.ctypes.data) % ROW_ALIGNMENT + offset
    moved = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    moved[...] = array
    return moved


@pytest.mark.parametrize("reuse", [False, True])
def test_misaligned_blocks_are_read_from_an_aligned_copy(reuse):
    floats = _uint8_block(rows=500, seed=4).astype(np.float32)
    block = _misaligned(floats)
    assert not is_aligned(block)
    for start, rows, _ in slabs(block, reuse=reuse):
        assert is_aligned(rows) and rows.flags.c_contiguous and not np.shares_memory(rows, block)
        np.testing.assert_array_equal(rows, floats[start : start + len(rows)])
    chosen = converted_rows(block, slice(10, 90))
    assert is_aligned(chosen)
    np.testing.assert_array_equal(chosen, floats[10:90])


def test_blocks_scattered_to_worker_processes_are_read_aligned(cluster_client):
    """Whatever byte a block received by a worker starts at, what the kernels read there is aligned."""
    floats = _uint8_block(rows=2000, seed=5).astype(np.float32)

    def slab_addresses(block):
        return is_aligned(block), [is_aligned(rows) for _, rows, _ in slabs(block, reuse=True)]

    futures = cluster_client.scatter([floats[i:] for i in range(1, 5)])
    results = cluster_client.gather([cluster_client.submit(slab_addresses, f) for f in futures])
    assert all(all(slab_flags) for _, slab_flags in results)


def test_statistics_carried_over_slabs_equal_one_call_on_the_whole_block_bitwise():
    block = _uint8_block().astype(np.float32)
    centers = block[:20].copy()
    labels, dist2 = nearest_centers(block, centers)
    whole = cluster_stats(block, labels, dist2, 20)
    carried = None
    for start, rows, _ in slabs(block, slab_bytes=1 << 20):
        part = slice(start, start + len(rows))
        carried = cluster_stats(rows, labels[part], dist2[part], 20, out=carried)
    for a, b in zip(whole, carried):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_the_assign_pass_on_a_stored_block_gives_the_whole_block_result():
    block = _uint8_block(seed=2)
    floats = block.astype(np.float32)
    centers = floats[np.random.default_rng(3).choice(ROWS, 16, replace=False)]
    sums, counts, sse, far = _assign_stats_block(block, 0, None, centers, 8, True)
    labels, dist2 = nearest_centers(floats, centers)
    expected = cluster_stats(floats, labels, dist2, 16)
    np.testing.assert_array_equal(sums, expected[0])
    np.testing.assert_array_equal(counts, expected[1])
    np.testing.assert_array_equal(sse, expected[2])
    # brute force in float64: the labels of the pass are the nearest centers
    exact = ((floats[:, None, :].astype(np.float64) - centers[None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_array_equal(counts, np.bincount(exact.argmin(1), minlength=16))
    np.testing.assert_array_equal(far[0], np.sort(exact.min(1))[::-1][:8])
    assert far[1].dtype == np.float32 and far[1].shape == (8, D)


def test_a_stored_block_assigned_whole_gives_the_slab_by_slab_result_bitwise():
    """The assign pass takes a uint8 block (and a C-ordered float one) in one call, its tiles converted as they are
    scored; a block it cannot take so (here Fortran-ordered) goes slab by slab. Statistics, weights and far rows
    (chosen slab by slab either way; duplicate rows make equal distances) are the same to the last bit."""
    from daskmeans.passes.assign import assigned_whole

    block = _uint8_block(seed=8)
    block[100:140] = block[7]  # equal distances among the far rows' candidates
    floats = block.astype(np.float32)
    weights = np.random.default_rng(9).random(ROWS)
    weights[::5] = 0  # weight 0 rows cannot be far rows
    centers = floats[np.random.default_rng(10).choice(ROWS, 40, replace=False)] + 0.5
    by_slabs = np.asfortranarray(floats)
    assert assigned_whole(block, np.dtype(np.float32)) and assigned_whole(floats, np.dtype(np.float32))
    assert not assigned_whole(by_slabs, np.dtype(np.float32))
    expected = _assign_stats_block(by_slabs, 0, weights, centers, 300, True)
    for whole in (block, floats):
        result = _assign_stats_block(whole, 0, weights, centers, 300, True)
        for a, b in zip(result[:3], expected[:3]):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(result[3], expected[3]):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert (expected[3][3] > 0).all() and expected[3][1].dtype == np.float32


@pytest.mark.parametrize("n_clusters, n_features", [(3, 16), (50, 128)])
def test_nearest_centers_of_integer_rows_equal_those_of_the_converted_rows(n_clusters, n_features):
    """Few centers (the direct kernel, converted a slab at a time) and many (GEMM tiles converted one by one)."""
    rng = np.random.default_rng(11)
    rows = rng.integers(0, 256, size=(5000, n_features), dtype=np.uint8)
    centers = rows[:n_clusters].astype(np.float32) + 0.25
    weights = rng.random(5000)
    stats = tuple(np.zeros(shape) for shape in ((n_clusters, n_features), n_clusters, n_clusters))
    expected = tuple(np.zeros(shape) for shape in ((n_clusters, n_features), n_clusters, n_clusters))
    labels, dist2 = nearest_centers(rows, centers, stats=stats, weights=weights)
    expected_labels, expected_dist2 = nearest_centers(rows.astype(np.float32), centers, stats=expected, weights=weights)
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_array_equal(dist2, expected_dist2)
    for a, b in zip(stats, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("grouping, n_groups", [("none", 1), ("yinyang", 7)])
def test_assignment_with_bounds_of_integer_rows_equals_that_of_the_converted_rows(grouping, n_groups):
    """Integer rows converted a tile at a time (C-ordered) or a slab at a time (a column view): the labels, exact
    distances, bounds and statistics of the rows converted first."""
    from daskmeans.kernels.exact_assign import assign_with_bounds
    from daskmeans.kernels.nested_groups import make_groups

    rng = np.random.default_rng(12)
    rows = rng.integers(0, 256, size=(3000, 64), dtype=np.uint8)
    centers = rows[rng.choice(3000, 60, replace=False)].astype(np.float32) + 0.5
    groups = make_groups(centers, grouping, n_groups)

    def assigned(X):
        stats = (np.zeros((60, 64)), np.zeros(60), np.zeros(60))
        return assign_with_bounds(X, centers, groups, stats=stats), stats

    expected = assigned(rows.astype(np.float32))
    wide = np.zeros((3000, 65), dtype=np.uint8)
    wide[:, :64] = rows
    for X in (rows, wide[:, :64]):
        result = assigned(X)
        for a, b in zip(result[0] + result[1], expected[0] + expected[1]):
            np.testing.assert_array_equal(a, b)


def test_the_summary_of_a_stored_block_matches_numpy():
    block = _uint8_block(seed=4)
    result = finish_summary(_summarize_block(block, 0, None, True), ROWS)
    floats = block.astype(np.float64)
    np.testing.assert_allclose(result.mean, floats.mean(0), rtol=1e-12)
    np.testing.assert_allclose(result.variance, floats.var(0), rtol=1e-10)
    assert result.max_abs == block.max() and result.n_nonfinite == 0
    whole = finish_summary(_summarize_block(block.astype(np.float32), 0, None, True), ROWS)
    assert result.row_hash == whole.row_hash != 0, "the hash does not depend on the dtype as stored"


def test_opened_stores_hand_their_chunks_to_the_passes_as_stored(tmp_path):
    path = str(tmp_path / "u8.zarr")
    X = _uint8_block(rows=5000, seed=5)
    zarr.create_array(store=path, data=X, chunks=(1000, D))
    data = open_input(path, chunk_rows=1000)
    assert data.dtype == np.float32 and stored_form(data.array).dtype == np.uint8
    assert stored_form(data.array).chunks == data.array.chunks
    first = block_args(data.array)[0][0].compute()
    assert first.dtype == np.uint8, "a task receives the chunk as stored, never a converted copy"
    np.testing.assert_array_equal(first, X[:1000])
    floats = open_input(X.astype(np.float32), chunk_rows=1000).array
    assert stored_form(floats) is floats


def test_lazy_maps_with_other_centers_never_share_keys():
    """Two label maps of one array with different centers, computed together, give each its own labels
    (the keys were once the fixed name ``daskmeans-labels``: the second overwrote the first)."""
    X = np.random.default_rng(6).normal(size=(3000, 4)).astype(np.float32)
    array = da.from_array(X, chunks=1000)
    first, second = X[:3].copy(), X[3:6].copy() + 5
    a, b = lazy_labels(array, first), lazy_labels(array, second)
    assert a.name != b.name
    labels_a, labels_b, dist_a = da.compute(a, b, lazy_min_dist2(array, first), scheduler="threads")
    np.testing.assert_array_equal(labels_a, nearest_centers(X, first)[0])
    np.testing.assert_array_equal(labels_b, nearest_centers(X, second)[0])
    np.testing.assert_array_equal(dist_a, nearest_centers(X, first)[1])


def test_map_rows_walks_stored_blocks_and_reports_global_rows(tmp_path):
    path = str(tmp_path / "u8.zarr")
    X = _uint8_block(rows=3 * slab_rows(D, 4), seed=7)
    zarr.create_array(store=path, data=X, chunks=(len(X), D))
    data = open_input(path)
    offsets = map_rows(
        data.array, lambda rows, offset: offset + np.arange(len(rows)), dtype=np.int64, name="row-index"
    ).compute(scheduler="threads")
    np.testing.assert_array_equal(offsets, np.arange(len(X)))
    sums = map_rows(
        data.array,
        lambda rows, offset: rows.sum(1, dtype=np.float64)[:, None],
        dtype=np.float64,
        name="row-sums",
        trailing=1,
    ).compute(scheduler="threads")
    np.testing.assert_array_equal(sums[:, 0], X.sum(1, dtype=np.float64))
