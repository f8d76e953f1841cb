"""How the worker processes of the embedded cluster keep freed memory for the next iteration.

Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so glibc hands every freed array over
128 KiB back to the kernel at once, and an iterative pass that allocates the same arrays every iteration touches
fresh pages every time, each a page fault, which costs most on a virtual machine whose host reclaims idle guest
memory. :func:`worker_malloc_settings` gives the workers :data:`~daskmeans.config.WORKER_MALLOC_ENVIRON`
instead. Memory a heap keeps freed counts against a worker's limit all the same: :func:`release_freed_memory` trims
the fuller workers after a fit, and :class:`TrimWhenPaused` trims a worker that Dask has paused.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import weakref

import dask
from distributed.diagnostics.plugin import WorkerPlugin

from .. import config
from .client import scheduler_workers

#: The ``MALLOC_TRIM_THRESHOLD_`` Dask's nanny gives its worker processes by default.
_DASK_DEFAULT_TRIM_THRESHOLD = "65536"


@contextlib.contextmanager
def worker_malloc_settings():
    """Worker processes started in the block get :data:`~daskmeans.config.WORKER_MALLOC_ENVIRON`, unless the user
    set a trim threshold of their own (in the environment or in Dask's ``distributed.nanny.pre-spawn-environ``).

    Dask's nanny takes these variables from this process's environment before its configuration, and leaves its
    own in this process's environment once it has started a worker: both are set for the block and the
    environment is put back afterwards.
    """
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", environ.get("MALLOC_TRIM_THRESHOLD_"))
    if trim is not None and str(trim) != _DASK_DEFAULT_TRIM_THRESHOLD:
        yield
        return
    ours = {name: str(value) for name, value in config.WORKER_MALLOC_ENVIRON.items()}
    saved = {name: os.environ.get(name) for name in ours}
    os.environ.update(ours)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": {**environ, **ours}}):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def release_freed_memory(client) -> list[str]:
    """Hand the memory that the heaps of ``client``'s fuller workers keep freed back to the operating system.

    A worker process keeps memory its arrays freed for reuse (glibc keeps what lies below the heap's top chunk, and
    :func:`worker_malloc_settings` raises the trim threshold), so its process memory only grows from fit to fit.
    Dask counts that memory against the worker's limit: a worker whose limit is small next to its own footprint (a
    few hundred MiB) reaches the pause threshold with nothing in it and stops running tasks, and the next pass waits
    for it forever. Workers whose process memory (at their last heartbeat) exceeds
    :data:`~daskmeans.config.WORKER_TRIM_FRACTION` of their limit run ``malloc_trim(0)``; the others are left alone,
    so a fit on roomy workers pays no round trip. ``client`` None (the threaded scheduler): nothing to do.

    Returns
    -------
    list of str
        The addresses of the workers asked to trim.
    """
    if client is None or not hasattr(client, "run"):
        return []
    fuller = [
        address
        for address, worker in scheduler_workers(client).items()
        if worker.get("memory_limit")
        and worker.get("metrics", {}).get("memory", 0) > config.WORKER_TRIM_FRACTION * worker["memory_limit"]
    ]
    if fuller:
        client.run(_trim_heap, workers=fuller)
    return fuller


class TrimWhenPaused(WorkerPlugin):
    """A worker plugin that hands the heap's freed memory back to the operating system while Dask has paused the
    worker.

    Dask pauses a worker whose process memory passes ``distributed.worker.memory.pause`` of its limit and unpauses
    it when spilling its data brings the memory back down. Memory the heap keeps freed is no data: spilling cannot
    lower it, and a small worker that reached the threshold that way would stay paused, its pass waiting forever.
    Every ``interval`` seconds a paused worker runs ``malloc_trim(0)``; Dask's memory monitor unpauses it at its
    next check when that was enough.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False) as cluster, Client(cluster) as client:
    ...     install_trim_when_paused(client)
    ...     list(client.run(lambda dask_worker: TrimWhenPaused.name in dask_worker.plugins).values())
    [True]
    """

    name = "daskmeans-trim-when-paused"
    idempotent = True

    def __init__(self, interval: float = 1.0):
        self.interval = interval

    def setup(self, worker):
        from tornado.ioloop import PeriodicCallback

        callback = PeriodicCallback(lambda: trim_if_paused(worker), self.interval * 1000)
        worker.periodic_callbacks[self.name] = callback
        callback.start()

    def teardown(self, worker):
        callback = worker.periodic_callbacks.pop(self.name, None)
        if callback is not None:
            callback.stop()


def trim_if_paused(worker) -> bool:
    """``malloc_trim(0)`` in ``worker``'s process when Dask has paused it; whether it ran."""
    from distributed.core import Status

    return worker.status == Status.paused and _trim_heap()


_CLIENTS_WITH_TRIM: weakref.WeakSet = weakref.WeakSet()


def install_trim_when_paused(client) -> None:
    """Install :class:`TrimWhenPaused` on ``client``'s workers, once per client (the scheduler gives it to workers
    that join later); ``client`` None (the threaded scheduler): nothing to do."""
    if client is None or not hasattr(client, "register_plugin") or client in _CLIENTS_WITH_TRIM:
        return
    client.register_plugin(TrimWhenPaused(), name=TrimWhenPaused.name)
    _CLIENTS_WITH_TRIM.add(client)


def _trim_heap() -> bool:
    """``malloc_trim(0)`` where the C library has it (glibc); whether it ran."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl, macOS: no malloc_trim; their allocators return memory themselves
        return False
    trim(0)
    return True
