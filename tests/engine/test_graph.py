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
