"""Writes of files by Dask tasks that end, all of them, before an error is raised: see :func:`compute_writes`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import dask
from dask.system import CPU_COUNT


def compute_writes(writes, client=None):
    """Run delayed tasks that write files, one future each; on a failure, return only after every write has ended.

    Dask raises the first task's error while the others still run: an output folder removed at that moment would
    be written into again (a chunk, a folder) by a write still under way. Here, with ``client`` None, the writes run
    on local threads of a pool of their own that is drained before the error is raised; on a cluster every write's
    future has finished (done or failed) before it is. The caller can then remove what was written and find
    nothing added after.

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
        client.gather(futures, errors="skip")  # waits for the writes that did not fail
        raise
