"""Writes of files by Dask tasks that end, all of them, before an error is raised: see :func:`compute_writes`."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import dask
from dask.system import CPU_COUNT

from .. import config


def compute_writes(writes, client=None):
    """Run delayed tasks that write files, one future each; on a failure, return only once no write is running.

    Dask raises the first task's error while the others still run: an output folder removed at that moment would
    be written into again (a chunk, a folder) by a write still under way. Here, with ``client`` None, the writes run
    on local threads of a pool of their own that is drained before the error is raised (Dask's local scheduler
    hands the pool no more than one task per thread at a time); on a cluster the writes not yet started are
    cancelled and the error is raised once none of them is executing on any worker (at most
    :data:`~daskmeans.config.WRITES_SETTLE_SECONDS`). The caller can then remove what was written and find
    nothing added after, and an error does not wait for the writes that had not started.

    Parameters
    ----------
    writes : list of Delayed
        Independent write tasks.
    client : distributed.Client or None
        Where the writes run; None: threads of this process.

    Returns
    -------
    list
        The writes' values, in order.
    """
    if client is None:
        with ThreadPoolExecutor(max_workers=CPU_COUNT) as pool:
            return list(dask.compute(*writes, scheduler="threads", pool=pool))
    futures = client.compute(list(writes))
    try:
        return client.gather(futures)
    except BaseException:
        client.cancel(futures)
        _wait_until_none_executes(client, {future.key for future in futures})
        raise


def _executing_keys(keys, dask_worker=None):
    """The keys of ``keys`` that this worker is executing now (run on every worker by ``Client.run``)."""
    state = dask_worker.state
    return [ts.key for ts in (*state.executing, *state.long_running) if ts.key in keys]


def _wait_until_none_executes(client, keys, timeout=None):
    """Return once no worker executes a task of ``keys`` (polled), or after ``timeout`` seconds."""
    deadline = time.monotonic() + (config.WRITES_SETTLE_SECONDS if timeout is None else timeout)
    while time.monotonic() < deadline:
        try:
            running = client.run(_executing_keys, keys, on_error="ignore")
        except Exception:  # the cluster is going away: nothing left to wait for
            return
        if not any(running.values()):
            return
        time.sleep(config.WRITES_POLL_SECONDS)
