"""Where an array's blocks are: held in the workers' memory or read by each pass, and by which worker."""

from __future__ import annotations

from dask.core import flatten
from distributed import futures_of

from .slabs import stored_form


def held_by_workers(array, client) -> bool:
    """Whether ``array`` (as stored) is held in the memory of ``client``'s workers, every block a future: its passes
    are then short, and iterations run one ahead of the driver (:func:`daskmeans.algorithms.lloyd._iterate_ahead`)."""
    if client is None or not hasattr(client, "submit"):
        return False
    stored = stored_form(array)
    return len(futures_of(stored)) == stored.numblocks[0]


def blocks_by_worker(array, client) -> list[list[int]]:
    """The row blocks of ``array`` (as stored, held by the workers: :func:`held_by_workers`) grouped by the worker
    that holds each, in block order within a group; a block held nowhere (being moved) is a group of its own.

    Where the blocks are does not change any result: it decides only which blocks a pass computes in one task
    (:func:`daskmeans.engine.graph.chained_group_pass`).
    """
    stored = stored_form(array)
    futures = {future.key: future for future in futures_of(stored)}
    keys = [key for key in flatten(stored.__dask_keys__())]
    holders = client.who_has([futures[key] for key in keys if key in futures])
    groups: dict = {}
    alone = []
    for i, key in enumerate(keys):
        where = holders.get(key) or ()
        if where:
            groups.setdefault(sorted(where)[0], []).append(i)
        else:
            alone.append([i])
    return [groups[worker] for worker in sorted(groups)] + alone


__all__ = ["held_by_workers", "blocks_by_worker"]
