"""Passes over data read by each pass, as one task per group of blocks: the same tree as one task per block (to the
last bit), fewer tasks, one block in memory at a time, every block reported to the watch."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from daskmeans import KMeans, config
from daskmeans.engine.client import compute_now, persist_now
from daskmeans.engine.graph import reduce_in_tree
from daskmeans.engine.grouped import TreeAccumulator, block_reads, group_levels, map_reduce_blocks
from daskmeans.engine.pass_progress import PassWatch
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.passes.assign import assign_stats_graph
from daskmeans.passes.bounded_assign import BoundedAssignment
from daskmeans.storage.io import open_input

N_ROWS, D, K = 24_000, 8, 5


def nested(parts):
    """A combine that keeps the tree's shape: two trees are the same exactly when their results are equal."""
    return tuple(parts)


@pytest.mark.parametrize("n_blocks", [1, 2, 7, 8, 9, 63, 64, 65, 100, 513])
@pytest.mark.parametrize("split_every", [2, 3, 8])
def test_groups_at_every_level_build_the_tree_of_one_task_per_block(n_blocks, split_every):
    blocks = list(range(n_blocks))
    with config.set(SPLIT_EVERY=split_every):
        whole = reduce_in_tree(blocks, nested)
        levels = 0
        while split_every ** (levels + 1) < n_blocks:
            roots = []
            size = split_every**levels
            for start in range(0, n_blocks, size):
                accumulator = TreeAccumulator(nested, split_every)
                for block in blocks[start : start + size]:
                    accumulator.add(block)
                roots.append(accumulator.finish(levels))
            assert reduce_in_tree(roots, nested) == whole, f"groups of {size} blocks"
            levels += 1


def test_the_group_level_leaves_tasks_for_every_thread_and_bounds_the_partials_held():
    with config.set(SPLIT_EVERY=8, GROUP_TASKS_PER_THREAD=2):
        assert group_levels(16_384, 4, 6_000) == 3  # 32 groups of 512 blocks: at least 8
        assert group_levels(16_384, 256, 6_000) == 1  # 2,048 groups of 8 blocks: at least 512
        assert group_levels(64, 1, 6_000) == 2 - 1  # below the root: 8 groups of 8 blocks
        assert group_levels(15, 4, 6_000) == 0  # too few blocks to share among 8 tasks
        with config.set(GROUP_PARTIALS_BYTES=7 * 6_000):
            assert group_levels(16_384, 4, 6_000) == 1  # 7 partials a level, one level's worth of bytes
        assert group_levels(16_384, 4, 64 * 2**20) == 0  # large k: one task per block


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Data in a Zarr store of 96 chunks: its path, rows and initial centers."""
    X = np.random.default_rng(5).normal(size=(N_ROWS, D)).astype(np.float32)
    path = str(tmp_path_factory.mktemp("grouped") / "x.zarr")
    zarr.open_array(path, mode="w", shape=X.shape, chunks=(N_ROWS // 96, D), dtype="f4")[:] = X
    return path, X, X[:K].copy()


def test_an_assign_pass_in_groups_gives_the_statistics_of_one_task_per_block_bitwise(stored, cluster_client):
    path, X, centers = stored
    array = open_input(path, chunk_rows=N_ROWS // 96).array
    assert array.numblocks[0] == 96
    (by_groups,) = compute_now(assign_stats_graph(array, centers, client=cluster_client), client=cluster_client)
    with config.set(GROUP_TASKS_PER_THREAD=10**6):  # no level leaves that many tasks: one per block
        (by_blocks,) = compute_now(assign_stats_graph(array, centers, client=cluster_client), client=cluster_client)
    (local,) = compute_now(assign_stats_graph(array, centers, client=None), client=None)
    for result in (by_blocks, local):
        for mine, theirs in zip(by_groups[:3], result[:3]):
            np.testing.assert_array_equal(mine, theirs)
        for mine, theirs in zip(by_groups[3], result[3]):
            np.testing.assert_array_equal(mine, theirs)
    assert by_groups[1].sum() == N_ROWS


def test_a_pass_in_groups_runs_a_few_tasks_per_thread_not_one_per_block(stored, cluster_client):
    path, _, centers = stored
    array = open_input(path, chunk_rows=N_ROWS // 96).array
    graph = assign_stats_graph(array, centers, client=cluster_client)
    inputs = graph.inputs if hasattr(graph, "inputs") else [graph]
    groups = {
        key
        for part in inputs
        for key in part.__dask_graph__()
        if isinstance(key, tuple) and key[0].startswith("daskmeans-assign-") and "combine" not in key[0]
    }
    # 2 threads, 2 tasks each at least: groups of 8 blocks (12 tasks), not 96
    assert len(groups) == 12


def test_the_watch_counts_every_block_of_a_pass_in_groups(stored, cluster_client):
    path, _, centers = stored
    array = open_input(path, chunk_rows=N_ROWS // 96).array
    with PassWatch("test", show=False) as watch:
        (stats,) = compute_now(assign_stats_graph(array, centers, client=cluster_client), client=cluster_client)
    (record,) = watch.passes
    assert record["names"] == ["assign"] and record["chunks"] == 96 and record["rows"] == N_ROWS
    assert record["energy"] == pytest.approx(stats[2].sum() / N_ROWS)


def test_blocks_that_share_a_computation_or_are_held_by_the_cluster_run_one_task_per_block(stored, cluster_client):
    path, X, centers = stored
    array = open_input(path, chunk_rows=N_ROWS // 96).array
    centered = array - array.mean(axis=0)  # every block needs the mean of all blocks: reading one alone cannot
    assert block_reads([[block] for block in centered.to_delayed().ravel()]) is None
    (held,) = persist_now(array, client=cluster_client)
    assert block_reads([[block] for block in held.to_delayed().ravel()]) is None
    numpy_backed = da.from_array(X, chunks=(N_ROWS // 96, D))  # the whole array would travel with every group
    assert block_reads([[block] for block in numpy_backed.to_delayed().ravel()]) is None
    (stats,) = compute_now(assign_stats_graph(centered, centers, client=cluster_client), client=cluster_client)
    rows = X - X.mean(axis=0, dtype=np.float64).astype(np.float32)
    nearest = ((rows[:, None, :].astype(np.float64) - centers) ** 2).sum(axis=2).min(axis=1)
    assert stats[2].sum() == pytest.approx(nearest.sum(), rel=1e-5)


@pytest.mark.parametrize("bounds", ["lloyd", "elkan", "yinyang"])
def test_a_kmeans_fit_from_zarr_in_groups_equals_the_fits_of_one_task_per_block_bitwise(stored, cluster_client, bounds):
    path, _, centers = stored
    common = {"n_clusters": K, "init": centers, "max_iter": 6, "tol": 0.0, "algorithm": bounds, "driver_rows": 0}
    in_groups = KMeans(**common, client=cluster_client, chunk_rows=N_ROWS // 96).fit(path)
    with config.set(GROUP_TASKS_PER_THREAD=10**6):
        by_blocks = KMeans(**common, client=cluster_client, chunk_rows=N_ROWS // 96).fit(path)
    with dask.config.set(scheduler="threads"):
        threaded = KMeans(**common, chunk_rows=N_ROWS // 96).fit(path)
    for other in (by_blocks, threaded):
        np.testing.assert_array_equal(in_groups.cluster_centers_, other.cluster_centers_)
        assert in_groups.inertia_ == other.inertia_


def test_map_reduce_blocks_without_a_cluster_is_one_task_per_block():
    array = da.ones((64, 2), chunks=(1, 2))
    parts = [[block] for block in array.to_delayed().ravel()]
    result = map_reduce_blocks(np.sum, "ones", parts, combine=sum, client=None)
    assert compute_now(result, client=None) == (128.0,)


def test_bounded_passes_in_groups_keep_their_states_in_the_groups_and_match_one_task_per_block(stored, cluster_client):
    path, X, centers = stored
    array = open_input(path, chunk_rows=N_ROWS // 96).array
    groups = make_groups(centers, "elkan", K)
    moved = centers + np.float32(0.05)
    shift = np.sqrt(((moved - centers).astype(np.float64) ** 2).sum(axis=1)) * 1.001
    results = []
    for tasks_per_thread in (config.GROUP_TASKS_PER_THREAD, 10**6):
        with config.set(GROUP_TASKS_PER_THREAD=tasks_per_thread):
            state = BoundedAssignment(array, groups, client=cluster_client)
            first = state.step(centers)
            second = state.step(moved, shift)
            results.append((first, second, state.layout, len(state.outputs)))
            state.release()
    (in_groups_first, in_groups_second, layout, held), (by_blocks_first, by_blocks_second, no_layout, per_block) = (
        results
    )
    assert layout is not None and held == 12, "12 groups of 8 blocks hold the states"
    assert no_layout is None and per_block == 96
    for mine, theirs in ((in_groups_first, by_blocks_first), (in_groups_second, by_blocks_second)):
        np.testing.assert_array_equal(mine[0].sums, theirs[0].sums)
        np.testing.assert_array_equal(mine[0].sse, theirs[0].sse)
        assert mine[1] == theirs[1], "the same distances computed"
    assert in_groups_second[1] < N_ROWS * K, "the revisit used the bounds kept in the groups"


class GraphCounter:
    """A scheduler plugin that counts the graphs submitted to it."""

    name = "test-graph-counter"

    def __init__(self):
        self.graphs = 0

    def update_graph(self, scheduler, **kwargs):
        self.graphs += 1


def _add_counter(dask_scheduler=None):
    dask_scheduler.add_plugin(GraphCounter(), name=GraphCounter.name)


def _graphs_counted(dask_scheduler=None):
    return dask_scheduler.plugins[GraphCounter.name].graphs


@pytest.mark.parametrize("tasks_per_thread", [2, 10**6], ids=["in groups", "one task per block"])
def test_a_bounded_pass_is_one_graph_keeping_the_states_and_reducing_the_statistics(
    stored, cluster_client, tasks_per_thread
):
    path, _, centers = stored
    array = open_input(path, chunk_rows=N_ROWS // 96).array
    cluster_client.run_on_scheduler(_add_counter)
    try:
        with config.set(GROUP_TASKS_PER_THREAD=tasks_per_thread):
            state = BoundedAssignment(array, make_groups(centers, "elkan", K), client=cluster_client)
            counts = [cluster_client.run_on_scheduler(_graphs_counted)]
            for _ in range(3):
                state.step(centers, np.zeros(K))
                counts.append(cluster_client.run_on_scheduler(_graphs_counted))
            state.release()
    finally:
        cluster_client.run_on_scheduler(lambda dask_scheduler=None: dask_scheduler.remove_plugin(GraphCounter.name))
    assert np.diff(counts).tolist() == [1, 1, 1]
