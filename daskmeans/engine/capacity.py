"""How much memory the cluster that runs a fit has (to decide whether per-row state fits on the workers)."""

from __future__ import annotations

import dask
import psutil

from .client import scheduler_workers


def cluster_memory_bytes(client=None) -> int:
    """Total memory limit of the workers, or the memory available to this process on the threaded scheduler.

    A worker without a memory limit counts as the machine's total memory divided among the workers reporting none.
    """
    if client is None:
        return int(psutil.virtual_memory().available)
    return int(sum(_worker_limits(client).values()))


def cluster_free_memory_bytes(client=None) -> int:
    """Memory the workers can still take before Dask pauses them, or the memory available to this process on the
    threaded scheduler.

    Per worker: its limit (as :func:`cluster_memory_bytes` counts it) times ``distributed.worker.memory.pause`` (as
    configured here; the whole limit where pausing is off), less the memory its process held at its last
    heartbeat. A worker process holds its libraries and the memory it kept from earlier work, which on small
    workers is a large part of the limit.
    """
    if client is None:
        return int(psutil.virtual_memory().available)
    pause = dask.config.get("distributed.worker.memory.pause", default=0.8)
    fraction = float(pause) if pause else 1.0
    workers = scheduler_workers(client)
    limits = _worker_limits(client, workers)
    held = {address: int(w.get("metrics", {}).get("memory") or 0) for address, w in workers.items()}
    return int(sum(max(0, int(fraction * limit) - held[address]) for address, limit in limits.items()))


def _worker_limits(client, workers=None) -> dict:
    """``{address: memory limit}`` of the workers, a worker without a limit taking an equal share of the machine's
    total memory with the others that have none."""
    workers = scheduler_workers(client) if workers is None else workers
    limits = {address: int(w.get("memory_limit") or 0) for address, w in workers.items()}
    unlimited = sum(1 for limit in limits.values() if limit <= 0)
    share = psutil.virtual_memory().total // max(1, unlimited) if unlimited else 0
    return {address: limit if limit > 0 else share for address, limit in limits.items()}
