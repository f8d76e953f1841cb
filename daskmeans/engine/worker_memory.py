"""How the worker processes of the embedded cluster keep freed memory for the next iteration.

Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so glibc hands every freed array over
128 KiB back to the kernel at once, and an iterative pass that allocates the same arrays every iteration touches
fresh pages every time, each a page fault, which costs most on a virtual machine whose host reclaims idle guest
memory. :func:`worker_malloc_settings` gives the workers
:data:`~daskmeans.config.WORKER_MALLOC_ENVIRON` instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

import dask

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


def _trim_heap() -> bool:
    """``malloc_trim(0)`` where the C library has it (glibc); whether it ran."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl, macOS: no malloc_trim; their allocators return memory themselves
        return False
    trim(0)
    return True
