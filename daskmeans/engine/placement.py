"""Where an array's blocks are: held in the workers' memory or read by each pass, and by which worker."""

from __future__ import annotations

from dask.core import flatten
from distributed import futures_of, wait

from .slabs import stored_form


def held_by_workers(array, client) -> bool:
    """Whether ``array`` (as stored) is held in the memory of ``client``'s workers, every block a future: its passes
    are then short, and iterations run one ahead of the driver (:func:`daskmeans.algorithms.lloyd._iterate_ahead`)."""
    if client is None or not hasattr(client, "submit"):
        return False
    stored = stored_form(array)
    return len(futures_of(stored)) == stored.numblocks[0]


def placed_groups(array, client) -> tuple[list[list[int]], list[str | None]]:
    """The row blocks of ``array`` (as stored, held by the workers: :func:`held_by_workers`) grouped by the worker
    that holds each, and a worker's blocks split into one group per thread it runs (consecutive blocks, sizes at
    most one apart), in block order within a group; a block held nowhere (being moved) is a group of its own. With
    the groups, the address of the worker holding each (None for a block held nowhere), where a pass places the
    group's task (:func:`daskmeans.engine.client.submit_now`).

    A group is one task of a pass: one per worker thread keeps every thread busy (a threaded worker of 2 threads
    given one group ran its pass on one of them). Where the blocks are does not change any result: it decides only
    which blocks a pass computes in one task (:func:`daskmeans.engine.graph.chained_group_pass`).
    """
    stored = stored_form(array)
    futures = {future.key: future for future in futures_of(stored)}
    with client.as_current():  # a block still being computed is held nowhere yet
        wait(list(futures.values()))
    keys = [key for key in flatten(stored.__dask_keys__())]
    holders = client.who_has([futures[key] for key in keys if key in futures])
    threads = client.nthreads()
    groups: dict = {}
    alone = []
    for i, key in enumerate(keys):
        where = holders.get(key) or ()
        if where:
            groups.setdefault(sorted(where)[0], []).append(i)
        else:
            alone.append([i])
    split, workers = [], []
    for worker in sorted(groups):
        blocks = groups[worker]
        parts = max(1, min(len(blocks), int(threads.get(worker, 1))))
        edges = [round(p * len(blocks) / parts) for p in range(parts + 1)]
        split.extend(blocks[a:b] for a, b in zip(edges[:-1], edges[1:]))
        workers.extend([worker] * parts)
    return split + alone, workers + [None] * len(alone)


__all__ = ["held_by_workers", "placed_groups"]
