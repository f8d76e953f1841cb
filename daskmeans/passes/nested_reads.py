"""The new rows of a nested batch's growth, read by the workers from the store: one task per chunk touched.

Each chunk has a random order of its own (:func:`chunk_order`); a growth takes the next range of that order from
each chunk its lanes reach. While the batch is stepped on the driver (:mod:`~daskmeans.passes.nested_driver`), the
rows of the next doubling are read ahead, while the driver steps, and come to the driver when the batch grows.
"""

from __future__ import annotations

import numpy as np
from dask.delayed import Delayed

from ..engine.client import submit_now
from ..engine.deadline import wait_for_futures
from ..engine.graph import map_blocks_delayed
from .bounded_assign import kept_rows


def chunk_order(key: int, offset: int, size: int) -> np.ndarray:
    """The random order of the rows of the chunk that starts at global row ``offset`` (local indices)."""
    return np.random.default_rng([key, offset, size]).permutation(size)


def _read_new_rows(block, offset, weights, key, start, stop):
    """Rows ``start:stop`` of a chunk's own random order, with their global indices and weights; the rows as the
    state keeps them (:func:`~daskmeans.passes.bounded_assign.kept_rows`: uint8 descriptors stay uint8)."""
    block = np.asarray(block)
    order = chunk_order(key, offset, block.shape[0])[start:stop]
    taken = np.ones(order.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)[order]
    return offset + order.astype(np.int64), kept_rows(block[order]), taken


class GrowthReads:
    """The reads of a nested batch's growths.

    Parameters
    ----------
    data_blocks, weight_blocks : list of Delayed
        The stored chunks (and their weights, or None).
    offsets : int64 array
        Each chunk's first global row.
    row_key : int
        The seed of the chunks' own orders.
    pieces : callable
        ``pieces(lo, hi) -> [(chunk, start, stop)]``: the order's rows ``lo .. hi - 1`` as ranges of the chunks'
        own orders.
    client : distributed.Client or None
    """

    def __init__(self, data_blocks, weight_blocks, offsets, row_key, pieces, client):
        self.data_blocks, self.weight_blocks, self.offsets = data_blocks, weight_blocks, offsets
        self.row_key, self.pieces, self.client = row_key, pieces, client
        #: Reads submitted ahead: ``{(lo, hi): (extent, {chunk: future})}``.
        self.pending = {}

    def tasks(self, lo, hi):
        """``(extent, {chunk: delayed read})``, ``extent`` giving each chunk's range of its own order."""
        extent = {chunk: (a, b) for chunk, a, b in self.pieces(lo, hi)}
        chunks = sorted(extent)
        read_args = [
            [
                self.data_blocks[c],
                int(self.offsets[c]),
                None if self.weight_blocks is None else self.weight_blocks[c],
                self.row_key,
                *extent[c],
            ]
            for c in chunks
        ]
        return extent, dict(zip(chunks, map_blocks_delayed(_read_new_rows, "nmbatch-read", read_args)))

    def read_ahead(self, lo, hi):
        """Submit the reads of rows ``lo .. hi - 1`` now (unless they are), for a later :meth:`take`."""
        if hi > lo and (lo, hi) not in self.pending:
            extent, tasks = self.tasks(lo, hi)
            self.pending = {(lo, hi): (extent, dict(zip(tasks, submit_now(*tasks.values(), client=self.client))))}

    def take(self, lo, hi, here):
        """The rows ``lo .. hi - 1``: ``(extent, {chunk: read})``, each read a value on the driver when the step runs
        ``here``, else a reference for the workers' step tasks (the reads read ahead when they are these rows)."""
        if hi <= lo:
            return {}, {}
        if not here and (lo, hi) not in self.pending:
            self.pending = {}
            return self.tasks(lo, hi)
        self.read_ahead(lo, hi)
        extent, futures = self.pending.pop((lo, hi))
        self.pending = {}
        if here:
            wait_for_futures(futures.values())
            return extent, dict(zip(futures, self.client.gather(list(futures.values()))))
        return extent, {c: Delayed(f.key, {f.key: f}) for c, f in futures.items()}
