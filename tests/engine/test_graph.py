"""The passes' task graphs (daskmeans.engine.graph) compute the same on every scheduler, futures included."""

import numpy as np
from distributed import Client, LocalCluster

from daskmeans.engine.client import compute_now
from daskmeans.engine.graph import map_blocks_delayed, shared, task, tree_reduce


def add_pair(pair, offset):
    first, (second,) = pair
    return first + second + offset


def scaled(value, factor, extra):
    return value * factor + sum(extra["more"])


def graph_of(futures):
    parts = map_blocks_delayed(scaled, "scaled", [[v] for v in futures], shared(np.float64(2.0), "factor"),
                               {"more": [1, 2]})
    nested = task("daskmeans-nested-test", add_pair, (parts[0], [parts[1]]), 0)  # delayed inside a tuple and a list
    return tree_reduce(parts + [nested], lambda values: sum(values), "sum")


def test_task_graphs_with_futures_nested_containers_and_shared_data():
    expected = sum(2 * v + 3 for v in (1, 2, 3)) + (2 * 1 + 3) + (2 * 2 + 3)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        futures = client.scatter([1, 2, 3])
        (total,) = compute_now(graph_of(futures), client=client)
        assert total == expected
        direct = map_blocks_delayed(scaled, "scaled", [[1], [2], [3]], 2.0, {"more": [1, 2]})
        assert compute_now(*direct, client=client) == (5.0, 7.0, 9.0)
        assert compute_now(*direct, client=None) == (5.0, 7.0, 9.0), "the local scheduler too"


def test_passes_give_every_key_one_task_so_dask_never_warns_of_a_different_run_spec(cluster_client, tmp_path,
                                                                                   caplog):
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
    scattered = da.concatenate([da.from_delayed(f, shape=(10_000, 6), dtype=X.dtype)
                                for f in cluster_client.scatter([X[s:s + 10_000] for s in range(0, 40_000, 10_000)])])
    with caplog.at_level(logging.WARNING, logger="distributed.scheduler"):
        for data in (stored[:30_000], scattered):
            model = KMeans(20, random_state=0, max_iter=5, client=cluster_client).fit(data)
            np.bincount(cluster_client.compute(model.predict(data)).result())
            NestedMiniBatchKMeans(20, random_state=0, max_iter=5, client=cluster_client).fit(data)
    # the scheduler of the shared cluster runs in this process: its log reaches caplog
    assert not [r for r in caplog.records if "different `run_spec`" in r.getMessage()], caplog.text
