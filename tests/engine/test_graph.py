"""The passes' task graphs (daskmeans.engine.graph) compute the same on every scheduler, futures included."""

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskmeans.engine.client import compute_now, submit_now
from daskmeans.engine.graph import map_blocks_delayed, shared, task, tree_reduce


def add_pair(pair, offset):
    first, (second,) = pair
    return first + second + offset


def scaled(value, factor, extra):
    return value * factor + sum(extra["more"])


def graph_of(futures):
    parts = map_blocks_delayed(
        scaled, "scaled", [[v] for v in futures], shared(np.float64(2.0), "factor"), {"more": [1, 2]}
    )
    nested = task("daskmeans-nested-test", add_pair, (parts[0], [parts[1]]), 0)  # delayed inside a tuple and a list
    return tree_reduce(parts + [nested], lambda values: sum(values), "sum")


def test_task_graphs_with_futures_nested_containers_and_shared_data():
    expected = sum(2 * v + 3 for v in (1, 2, 3)) + (2 * 1 + 3) + (2 * 2 + 3)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        futures = client.scatter([1, 2, 3])
        (total,) = compute_now(graph_of(futures), client=client)
        assert total == expected
        direct = map_blocks_delayed(scaled, "scaled", [[1], [2], [3]], 2.0, {"more": [1, 2]})
        assert compute_now(*direct, client=client) == (5.0, 7.0, 9.0)
        assert compute_now(*direct, client=None) == (5.0, 7.0, 9.0), "the local scheduler too"


@pytest.mark.slow
def test_passes_give_every_key_one_task_so_dask_never_warns_of_a_different_run_spec(cluster_client, tmp_path, caplog):
    """A block key that one pass submits fused one way and the next pass another way (the data read through a
    slice of a Zarr array, k-means|| persisting its rounds) made the scheduler warn "Detected different
    `run_spec`" and keep the old task; every submission now builds its graph the same way."""
    import logging

    import dask.array as da
    import zarr

    from daskmeans import KMeans, NestedMiniBatchKMeans
    from daskmeans.storage.io import open_input

    rng = np.random.default_rng(0)
    X = (rng.normal(size=(20, 6))[rng.integers(0, 20, 40_000)] + rng.normal(size=(40_000, 6))).astype(np.float32)
    zarr.create_array(str(tmp_path / "X.zarr"), shape=X.shape, chunks=(10_000, 6), dtype=X.dtype)[:] = X
    stored = open_input(str(tmp_path / "X.zarr")).array
    scattered = da.concatenate(
        [
            da.from_delayed(f, shape=(10_000, 6), dtype=X.dtype)
            for f in cluster_client.scatter([X[s : s + 10_000] for s in range(0, 40_000, 10_000)])
        ]
    )
    with caplog.at_level(logging.WARNING, logger="distributed.scheduler"):
        for data in (stored[:30_000], scattered):
            model = KMeans(20, random_state=0, max_iter=5, client=cluster_client).fit(data)
            np.bincount(cluster_client.compute(model.predict(data)).result())
            NestedMiniBatchKMeans(20, random_state=0, max_iter=5, client=cluster_client).fit(data)
    # the scheduler of the shared cluster runs in this process: its log reaches caplog
    assert not [r for r in caplog.records if "different `run_spec`" in r.getMessage()], caplog.text


def partial_sums(values):
    """A block's partial: a float64 sum whose last bits depend on the order it is combined in."""
    return np.asarray(values, dtype=np.float64) * np.float64(1.0 / 3.0)


def combine_sums(parts):
    total = parts[0].copy()
    for other in parts[1:]:
        total += other
    return total


def test_small_shared_arrays_travel_inside_the_tasks_and_large_ones_as_one_task():
    from daskmeans.config import SHARED_INLINE_BYTES

    small = np.arange(SHARED_INLINE_BYTES // 8, dtype=np.float64)
    large = np.arange(SHARED_INLINE_BYTES // 8 + 1, dtype=np.float64)
    assert shared(small, "small") is small
    shared_large = shared(large, "large")
    assert not isinstance(shared_large, np.ndarray) and shared_large.key.startswith("daskmeans-large-")
    for centers in (small, large):
        parts = map_blocks_delayed(lambda block, c: block * c[-1], "scale", [[1.0], [2.0]], shared(centers, "c"))
        assert compute_now(*parts) == (centers[-1], 2 * centers[-1])


def test_the_last_combine_on_the_driver_gives_the_tree_s_value_bitwise(cluster_client):
    """A reduction whose partials are small combines its last level on the driver; the tree (and so every bit of
    the result) is the one the combine tasks would have made, on a cluster and on the local scheduler alike."""
    from daskmeans.engine.graph import DriverCombine

    rng = np.random.default_rng(3)
    for n_parts in (2, 8, 19):  # one level, a full level, and levels below a driver-side last combine
        values = [rng.normal(size=5) * 10.0 ** rng.integers(-8, 8, size=5) for _ in range(n_parts)]
        parts = map_blocks_delayed(partial_sums, f"sums-{n_parts}", [[v] for v in values])
        on_workers = tree_reduce(parts, combine_sums, f"total-{n_parts}")
        here = tree_reduce(parts, combine_sums, f"total-{n_parts}", part_bytes=40)
        # the driver gets the blocks' partials, or (19 parts) the 3 combines of the level below
        assert isinstance(here, DriverCombine) and len(here.inputs) == (n_parts if n_parts <= 8 else 3)
        (expected,) = compute_now(on_workers, client=cluster_client)
        for client in (cluster_client, None):
            # with another object in the same submission, which comes back in its place
            got, first = compute_now(here, parts[0], client=client)
            np.testing.assert_array_equal(got, expected)
            np.testing.assert_array_equal(first, partial_sums(values[0]))
        # partials too large for the driver: the last combine stays a task
        assert not isinstance(tree_reduce(parts, combine_sums, "total", part_bytes=2**40), DriverCombine)


def scaled_sums(value, carried, bias):
    return partial_sums(value * carried[0] + bias)


def next_factor(total, carried, damping):
    """The next pass's factor, and the reduced total itself (whose last bits show the reduction order)."""
    return (carried[0] * (1.0 + damping), total)


@pytest.mark.slow
def test_chained_group_passes_reduce_in_the_same_tree_whatever_the_grouping(cluster_client):
    """Passes of one task per group of blocks, each reducing the previous pass's block results itself: the values
    are those of per-block tasks and tree_reduce (the same tree, bit for bit) for any partition of the blocks,
    with the blocks held by the workers; a grouping that is not a partition is refused."""
    from daskmeans.engine.graph import chained_group_pass, reduce_in_tree
    from daskmeans.engine.placement import placed_groups

    rng = np.random.default_rng(5)
    for n_blocks in (1, 8, 19):
        values = [rng.normal(size=5) * 10.0 ** rng.integers(-8, 8, size=5) for _ in range(n_blocks)]
        np.testing.assert_array_equal(
            reduce_in_tree([partial_sums(v) for v in values], combine_sums),
            compute_now(
                tree_reduce(
                    [task(("daskmeans-leaf", i), partial_sums, v) for i, v in enumerate(values)],
                    combine_sums,
                    f"ref-{n_blocks}",
                )
            )[0],
        )
        held = cluster_client.scatter(values)
        expected, carried = [], (1.0, None)
        for _ in range(3):  # the per-block graph, one pass at a time through the driver
            parts = map_blocks_delayed(scaled_sums, f"ref-{n_blocks}", [[v] for v in values], carried, 0.5)
            (total,) = compute_now(tree_reduce(parts, combine_sums, f"ref-{n_blocks}"), client=cluster_client)
            carried = next_factor(total, carried, 1e-7)
            expected.append(carried)
        placed = da.concatenate([da.from_delayed(f, shape=(5,), dtype=float) for f in held])
        by_worker, _ = placed_groups(placed, cluster_client)
        assert sorted(i for g in by_worker for i in g) == list(range(n_blocks))
        shuffled = list(rng.permutation(n_blocks))
        for groups in (
            by_worker,
            [list(range(n_blocks))],
            [[int(i)] for i in shuffled],
            [sorted(int(i) for i in shuffled[::2]), sorted(int(i) for i in shuffled[1::2])],
        ):
            previous, got = None, []
            for _ in range(3):
                chained = chained_group_pass(
                    scaled_sums,
                    f"chain-{n_blocks}",
                    [[v] for v in held],
                    0.5,
                    groups=[g for g in groups if g],
                    combine=combine_sums,
                    finish=next_factor,
                    finish_args=(1e-7,),
                    previous=previous,
                    start=(1.0, None) if previous is None else None,
                )
                previous = chained.submitted(submit_now(*chained.objects(), client=cluster_client))
                got.append(previous.result())
            for g, e in zip(got, expected):
                assert g[0] == e[0]
                np.testing.assert_array_equal(g[1], e[1])
    with pytest.raises(ValueError, match="partition"):
        chained_group_pass(
            scaled_sums,
            "bad",
            [[1.0], [2.0]],
            0.5,
            groups=[[0], [0]],
            combine=combine_sums,
            finish=next_factor,
            start=(1.0, None),
        )
    with pytest.raises(ValueError, match="needs start"):
        chained_group_pass(
            scaled_sums, "bad", [[1.0], [2.0]], 0.5, groups=[[0], [1]], combine=combine_sums, finish=next_factor
        )


def max_parts(parts):
    return np.maximum.reduce(parts)


def halved(total, carried):
    return (carried[0] / 2.0, total)


def test_a_chain_goes_on_with_a_pass_of_another_kind(cluster_client):
    """A pass chained to one of another kind (another block function, combine and finish, as the pass that sets
    bounds up after plain passes) takes the value the previous pass's own combine and finish give, on the
    cluster, without a round trip to the driver."""
    from daskmeans.engine.graph import chained_group_pass, reduce_in_tree
    from daskmeans.engine.placement import placed_groups

    values = [np.arange(3.0) + i for i in range(6)]
    held = da.concatenate([da.from_delayed(f, shape=(3,), dtype=float) for f in cluster_client.scatter(values)])
    groups, workers = placed_groups(held, cluster_client)
    blocks = [[v] for v in cluster_client.scatter(values)]
    first = chained_group_pass(
        scaled_sums,
        "sums",
        blocks,
        0.5,
        groups=groups,
        combine=combine_sums,
        finish=next_factor,
        finish_args=(1e-7,),
        start=(2.0, None),
        workers=workers,
    )
    first = first.submitted(submit_now(*first.objects(), client=cluster_client, placement=first.placement))
    second = chained_group_pass(
        scaled_sums, "max", blocks, 0.0, groups=groups, combine=max_parts, finish=halved, previous=first
    )
    second = second.submitted(submit_now(*second.objects(), client=cluster_client))
    factor, total = first.result()
    expected_total = reduce_in_tree([partial_sums(v * 2.0 + 0.5) for v in values], combine_sums)
    np.testing.assert_array_equal(total, expected_total)
    assert factor == 2.0 * (1.0 + 1e-7)
    halved_factor, maximum = second.result()
    assert halved_factor == factor / 2.0, "the second pass's blocks took the first pass's finish"
    np.testing.assert_array_equal(maximum, partial_sums(values[-1] * factor))


def test_a_pass_runs_each_group_where_its_placement_says():
    """A pass's group tasks run on the workers its placement names (:func:`placed_groups` names the worker holding
    each group's blocks; a worker busy when the pass becomes ready may otherwise lose its group to an idle one,
    and with it the blocks and states of every later pass). Named the other way round here, so that the
    scheduler's own choice, by where the blocks are, would differ; work stealing, which may still move a task
    whose worker is busy, is off."""
    import dask
    from distributed import Client, LocalCluster, get_task_stream

    from daskmeans.engine.graph import chained_group_pass, reduce_in_tree, stored_blocks
    from daskmeans.engine.placement import placed_groups
    from daskmeans.storage.io import open_input, spread_on_workers

    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        X = np.arange(800_000.0).reshape(-1, 1)
        array = spread_on_workers(open_input(X, chunk_rows=200_000).array, client)
        groups, holders = placed_groups(array, client)
        assert groups == [[0, 1], [2, 3]] and sorted(holders) == sorted(client.nthreads())
        gone = ["tcp://127.0.0.1:9", "tcp://127.0.0.1:9"]  # a worker that has left: its tasks run elsewhere
        for workers in (holders, holders[::-1], gone):
            chained = chained_group_pass(
                scaled_sums,
                "placed",
                [[b] for b in stored_blocks(array)],
                0.0,
                groups=groups,
                combine=combine_sums,
                finish=next_factor,
                finish_args=(0.0,),
                start=(1.0, None),
                workers=workers,
            )
            with get_task_stream(client) as stream:
                futures = submit_now(*chained.objects(), client=client, placement=chained.placement)
                _, total = chained.submitted(futures).result()
            ran = {entry["key"]: entry["worker"] for entry in stream.data}
            ran = [ran[group.key] for group in chained.groups]
            assert ran == workers if workers is not gone else set(ran) <= set(holders)
            expected = reduce_in_tree(
                [partial_sums(X[i : i + 200_000]) for i in range(0, 800_000, 200_000)], combine_sums
            )
            np.testing.assert_array_equal(total, expected)


def test_a_worker_of_several_threads_gets_one_group_of_blocks_per_thread():
    """A pass is one task per group: a threaded worker of 3 threads holding 8 blocks gets 3 groups of consecutive
    blocks (sizes at most one apart), so that every thread has a task; 2 blocks make 2 groups."""
    from distributed import Client, LocalCluster, futures_of, wait

    from daskmeans.engine.placement import placed_groups

    with (
        LocalCluster(n_workers=1, threads_per_worker=3, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for n_blocks, expected in ((8, [[0, 1, 2], [3, 4], [5, 6, 7]]), (2, [[0], [1]])):
            placed = client.persist(da.from_array(np.arange(n_blocks * 8.0).reshape(-1, 2), chunks=(4, 2)))
            wait(futures_of(placed))
            assert placed_groups(placed, client)[0] == expected
