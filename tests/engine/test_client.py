"""Where commands run: the cluster options checked before any work, the dashboard line, the connect timeout."""

import pytest

from daskmeans.config import CONNECT_TIMEOUT_SECONDS
from daskmeans.engine.cluster import ClusterSpec, announce_dashboard, parse_memory_limit
from daskmeans.exceptions import InvalidParameterError


@pytest.mark.parametrize(
    "text, limit",
    [
        ("auto", "auto"),
        (" AUTO ", "auto"),
        ("0.5", 0.5),
        ("1", 1.0),
        ("4GiB", 4 * 2**30),
        ("500MB", 500 * 10**6),
        ("2000", 2000),
    ],
)
def test_memory_limits(text, limit):
    assert parse_memory_limit(text) == limit


@pytest.mark.parametrize("text", ["lots", "0", "-1GiB"])
def test_bad_memory_limits(text):
    with pytest.raises(InvalidParameterError, match="is not a memory size"):
        parse_memory_limit(text)


def test_cluster_spec_validates_before_any_work():
    spec = ClusterSpec(workers=2, memory_limit="1GiB").validate()
    assert spec.memory_limit == 2**30 and spec.connect_timeout == CONNECT_TIMEOUT_SECONDS
    with pytest.raises(InvalidParameterError, match="--workers, --memory-limit size the embedded cluster"):
        ClusterSpec(scheduler="tcp://127.0.0.1:1", workers=2, memory_limit="1GiB").validate()
    assert ClusterSpec(scheduler="tcp://127.0.0.1:1").validate().scheduler == "tcp://127.0.0.1:1"


def test_the_dashboard_is_announced_on_stderr(capsys):
    class FakeClient:
        dashboard_link = "http://127.0.0.1:8787/status"

    pytest.importorskip("bokeh")
    announce_dashboard(FakeClient())
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "Dask dashboard: http://127.0.0.1:8787/status\n"


def _malloc_environ():
    import os

    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("MALLOC_MMAP_THRESHOLD_")


@pytest.mark.slow
def test_the_embedded_worker_processes_keep_freed_memory_for_the_next_iteration(monkeypatch):
    import os

    from daskmeans.config import WORKER_MALLOC_ENVIRON

    expected = tuple(str(WORKER_MALLOC_ENVIRON[name]) for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"))
    # as Dask's nanny leaves it in the driver's environment once it has started a worker with its defaults
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    with ClusterSpec(workers=2, threads_per_worker=1).validate().client() as client:
        assert set(client.run(_malloc_environ).values()) == {expected}
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536" and "MALLOC_MMAP_THRESHOLD_" not in os.environ
    # a user's own setting wins
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    with ClusterSpec(workers=1, threads_per_worker=1).validate().client() as client:
        assert set(client.run(_malloc_environ).values()) == {("0", None)}


def test_a_client_closed_after_losing_its_scheduler_counts_as_a_lost_scheduler():
    """Once the client has given up on its scheduler it closes, and the next graph sent raises ClosedClientError:
    the CLI must report that as a lost scheduler (a race seen in a fresh-clone CI run of the scheduler-kill test),
    not as an unknown error. Errors of the run itself are not."""
    import dask
    from distributed import Client, LocalCluster
    from distributed.client import ClosedClientError

    from daskmeans.engine.client import scheduler_lost

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        client = Client(cluster)
        assert not scheduler_lost(client, ClosedClientError("not yet"))  # a running client has not lost it
        client.close()
        with pytest.raises(ClosedClientError) as raised:
            client.compute(dask.delayed(sum)([1, 2])).result()
        assert scheduler_lost(client, raised.value)
        assert not scheduler_lost(client, ValueError("a bug of the run"))


def _doubled(pieces, compute, value):
    """A function for :func:`run_pinned`: ``value`` doubled, with the pieces it was given."""
    return value * 2, len(pieces)


@pytest.mark.slow
def test_a_pinned_loop_on_a_cluster_without_workers_runs_on_the_first_worker_to_join():
    # a cluster scaled to zero (or restarting) has nothing to pin to: the task waits for a worker, it does not fail
    from concurrent.futures import ThreadPoolExecutor

    from distributed import Client, LocalCluster

    from daskmeans.engine.client import run_pinned

    with (
        LocalCluster(n_workers=0, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        running = pool.submit(run_pinned, client, _doubled, [], 21, key="daskmeans-test-pinned-empty")
        assert not running.done()
        cluster.scale(1)
        (result, n_pieces), address = running.result(timeout=60)
        assert (result, n_pieces) == (42, 0)
        assert address in client.nthreads()


class _NotTokenizable:
    """An argument that refuses to be tokenized: a graph holding it is submitted without hashing its tasks."""

    def __init__(self, value):
        self.value = value

    def __dask_tokenize__(self):
        raise AssertionError("the submitted graph was tokenized task by task")


def _plus(block, argument):
    return block + argument.value


def test_own_graphs_are_submitted_without_tokenizing_every_task(cluster_client):
    from dask import delayed

    from daskmeans.engine.client import compute_now

    parts = [delayed(_plus, pure=False)(i, _NotTokenizable(10)) for i in range(64)]
    total = delayed(sum, pure=False)(parts)
    assert compute_now(total, client=cluster_client) == (sum(range(64)) + 64 * 10,)


def test_a_passes_graph_is_flattened_layer_by_layer_into_the_same_tasks():
    from dask import delayed

    from daskmeans.engine.client import _flat_graph
    from daskmeans.engine.graph import task, tree_reduce

    parts = [task(("daskmeans-part", i), _plus, i, _NotTokenizable(1)) for i in range(40)]
    total = tree_reduce(parts, sum, "sum")
    other = delayed(sum, pure=False)([1, 2])
    flat = _flat_graph((total, other))
    graph = dict(total.__dask_graph__())
    graph.update(other.__dask_graph__())
    assert flat.keys() == graph.keys()
    assert all(flat[key] is graph[key] for key in graph)


def test_every_read_is_fused_with_the_block_task_even_when_its_result_goes_to_several_tasks(tmp_path):
    """A VRKM pool's block task is read by one segment task per segment: the read of its block still runs inside
    it (no block is held in a worker's memory as a result of its own), whatever order the keys come in."""
    import dask.array as da
    import numpy as np
    import zarr

    from daskmeans.engine.client import _own_graph
    from daskmeans.passes.epoch import epoch_pass_graph, pool_pass_graph

    path = str(tmp_path / "x.zarr")
    zarr.create_array(path, shape=(4000, 8), chunks=(1000, 8), dtype="f4")[:] = np.ones((4000, 8), "f4")
    data = da.from_zarr(path)
    centers, draws = np.zeros((3, 8), "f4"), np.array([5, 1500, 2500, 3999, 7])
    stats, epoch_segments = epoch_pass_graph(data, centers, draws, segment_rows=2)
    pool_segments = pool_pass_graph(data, centers, draws, segment_rows=2)
    for objects in ([stats, *sum(epoch_segments, [])], sum(pool_segments, [])):
        for order in (objects, objects[::-1]):
            expression, _ = _own_graph(order)
            keys = [str(key) for key in dict(expression.__dask_graph__())]
            assert not [key for key in keys if "from-zarr" in key and not key.startswith("original-")], keys
            block_tasks = [key for key in keys if "daskmeans-vrkm-epoch-" in key or "daskmeans-vrkm-pool-" in key]
            assert sum("segment" not in key and "stats" not in key for key in block_tasks) == 4, keys


def test_a_connection_error_before_the_client_notices_counts_as_a_lost_scheduler_only_when_it_is():
    """The scheduler killed while the client gathers results raises a connection error while the client's status is
    still "running": the scheduler is asked for a handshake to tell a lost one from a passing error."""
    from distributed import Client, LocalCluster
    from distributed.comm.core import CommClosedError

    from daskmeans.engine.client import scheduler_answers, scheduler_lost

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        assert scheduler_answers(client)
        assert not scheduler_lost(client, CommClosedError("a passing error"))
        cluster.close()
        assert not scheduler_answers(client, seconds=1.0)
        assert scheduler_lost(client, CommClosedError("the scheduler is gone"))
    finally:
        client.close()


def test_the_workers_of_a_client_that_lost_its_scheduler_are_a_lost_scheduler_not_a_missing_key():
    """A client whose scheduler is gone describes no workers: the memory planning that asks for them raises the
    lost connection, which the command line reports as a lost scheduler."""
    from distributed import Client, LocalCluster

    from daskmeans.engine.capacity import cluster_free_memory_bytes, cluster_memory_bytes
    from daskmeans.engine.client import scheduler_lost, scheduler_workers
    from daskmeans.engine.worker_memory import release_freed_memory
    from daskmeans.exceptions import SchedulerConnectionError

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        assert list(scheduler_workers(client)) == list(client.nthreads())
        cluster.close()
        for ask in (scheduler_workers, cluster_memory_bytes, cluster_free_memory_bytes, release_freed_memory):
            with pytest.raises(SchedulerConnectionError, match="lost its Dask scheduler") as raised:
                ask(client)
            assert scheduler_lost(client, raised.value)
    finally:
        client.close()
