"""How much memory the cluster that runs a fit has (to decide whether per-row state fits on the workers)."""

from __future__ import annotations

import psutil


def cluster_memory_bytes(client=None) -> int:
    """Total memory limit of the workers, or the memory available to this process on the threaded scheduler.

    A worker without a memory limit counts as the machine's total memory divided among the workers reporting none.
    """
    if client is None:
        return int(psutil.virtual_memory().available)
    limits = [int(w.get("memory_limit") or 0) for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    unlimited = sum(1 for limit in limits if limit <= 0)
    share = psutil.virtual_memory().total // max(1, unlimited) if unlimited else 0
    return int(sum(limit if limit > 0 else share for limit in limits))
