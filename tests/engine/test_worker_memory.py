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
