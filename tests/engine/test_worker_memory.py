"""Workers hand the memory their heaps keep freed back to the system when they hold much of their limit."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from daskmeans import config
from daskmeans.engine.worker_memory import _trim_heap, release_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_the_fuller_workers_trim_their_heaps(cluster_client):
    workers = sorted(cluster_client.scheduler_info()["workers"])
    assert release_freed_memory(cluster_client) == [], "no worker holds half of its 2 GiB: no round trip"
    with config.set(WORKER_TRIM_FRACTION=0.0):
        assert sorted(release_freed_memory(cluster_client)) == workers
    assert set(cluster_client.run(_trim_heap).values()) == {True}


def test_nothing_to_trim_without_a_cluster():
    assert release_freed_memory(None) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_a_trim_returns_freed_heap_memory_in_this_process():
    psutil = pytest.importorskip("psutil")
    process = psutil.Process()
    arrays = [np.ones(8_000) for _ in range(1_000)]  # 64 KB each, below glibc's least mmap threshold: from the heap
    del arrays[:-1]  # all but the last, so the heap's top stays in use and the freed memory below it stays mapped
    held = process.memory_info().rss
    assert _trim_heap()
    assert process.memory_info().rss < held


_KEPT = []


def _keep_freed_heap(megabytes: int) -> int:
    """Leave ``megabytes`` of freed memory in this process's heap below one live array (as a pass's temporaries
    do), and return the process memory."""
    import psutil

    arrays = [np.ones(8_000) for _ in range(megabytes * 16)]  # 64 KB each: from the heap, not mmap
    _KEPT.append(arrays[-1])  # the heap's top stays in use: the freed memory below it stays mapped
    del arrays
    return psutil.Process().memory_info().rss


def _status(client) -> str:
    (worker,) = client.scheduler_info(n_workers=-1)["workers"].values()
    return worker["status"]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_a_worker_paused_by_memory_its_heap_keeps_trims_it_and_runs_again():
    import time

    import dask
    from distributed import Client, LocalCluster

    from daskmeans.engine.worker_memory import install_trim_when_paused, worker_malloc_settings

    with (
        dask.config.set({"distributed.worker.memory.terminate": False}),  # the nanny must not restart it
        worker_malloc_settings(),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, memory_limit="512MiB", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        held = max(client.run(_keep_freed_heap, 360).values())
        assert held > 0.8 * 512 * 2**20, "the freed memory puts the worker over Dask's pause threshold"
        deadline = time.monotonic() + 30
        while _status(client) != "paused":
            assert time.monotonic() < deadline, "Dask did not pause the worker"
            time.sleep(0.1)
        task = client.submit(sum, [1, 2], pure=False)
        time.sleep(2.0)
        assert not task.done(), "a paused worker runs no task: without the trim the fit would wait forever"
        install_trim_when_paused(client)
        assert task.result(timeout=30) == 3
        assert _status(client) == "running"
        assert max(client.run(lambda: __import__("psutil").Process().memory_info().rss).values()) < held


def test_a_fit_on_a_cluster_installs_the_trim_on_its_workers(cluster_client):
    from daskmeans import KMeans
    from daskmeans.engine.worker_memory import TrimWhenPaused

    X = np.random.default_rng(0).normal(size=(2_000, 4)).astype(np.float32)
    KMeans(n_clusters=3, max_iter=2, random_state=0, client=cluster_client).fit(X)
    installed = cluster_client.run(lambda dask_worker: TrimWhenPaused.name in dask_worker.periodic_callbacks)
    assert set(installed.values()) == {True}
