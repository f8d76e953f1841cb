"""Small data iterated on the driver: gathered from the workers once, then every pass on the driver's threads.

An iteration on worker processes costs a round trip on top of its work: the pass's tasks, their statistics
gathered, the next centers sent (:mod:`daskmeans.algorithms.lloyd`). When one pass's work is of that order (tens of
thousands of rows against a few hundred centers), the round trip is most of an iteration, and building a Dask
graph for it costs more again. Such data is copied into the driver's memory once (:class:`DriverCopy`), with the
same row blocks, and its passes run in this process without a graph (:meth:`DriverCopy.map`: one thread per core,
one BLAS thread each, as on the workers): the same block functions over the same blocks, reduced in the same tree
(:func:`~daskmeans.engine.graph.reduce_in_tree`), so the iterates are those of the workers to the last bit.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import dask
import dask.array as da
from dask.system import CPU_COUNT

from .. import config
from .blas import one_blas_thread
from .client import compute_now
from .deadline import map_within_budget
from .graph import block_offsets, blocks_of, stored_blocks
from .slabs import stored_form, with_stored_form


def driver_rows(setting, n_clusters: int, n_features: int, row_bytes: int, max_work: int | None = None) -> int:
    """Largest number of rows stepped on the driver.

    Parameters
    ----------
    setting : "auto" or int
        An int is used as it is (0: every step on the workers). ``"auto"``: the most rows whose full
        assignment takes at most ``max_work`` multiply-adds (``rows k d``) and whose state takes at most
        :data:`~daskmeans.config.DRIVER_BYTES` of the driver's memory.
    n_clusters, n_features : int
    row_bytes : int
        Driver memory one row takes (its row, label, distance, weight and bounds).
    max_work : int, optional
        :func:`driver_work` for a cluster of few threads; None: :data:`~daskmeans.config.DRIVER_WORK`, read at
        call time.
    """
    if setting != "auto":
        return int(setting)
    max_work = config.DRIVER_WORK if max_work is None else max_work
    by_work = int(max_work) // max(1, n_clusters * n_features)
    by_memory = config.DRIVER_BYTES // max(1, row_bytes)
    return int(min(by_work, by_memory))


def driver_work(client) -> int:
    """The most multiply-adds of one step the driver takes on (:func:`driver_rows`' ``max_work``) for a cluster:
    :data:`~daskmeans.config.DRIVER_WORK_FEW_THREADS` when its workers run no more threads than the driver has
    cores (its threads then do the same work at least as fast as the workers, without their round trip), else
    :data:`~daskmeans.config.DRIVER_WORK`. ``client`` None (no cluster): ``DRIVER_WORK``."""
    if client is None:
        return config.DRIVER_WORK
    try:
        worker_threads = sum(int(n) for n in client.nthreads().values())
    except Exception:  # noqa: BLE001 - a client that cannot answer now: the rule for a large cluster
        return config.DRIVER_WORK
    return config.DRIVER_WORK_FEW_THREADS if 0 < worker_threads <= CPU_COUNT else config.DRIVER_WORK


class DriverCopy:
    """The data (and its weights) gathered into the driver's memory, in the row blocks it had on the cluster.

    Attributes
    ----------
    array : dask.array.Array
        The same values, dtype, chunks and stored form (:mod:`daskmeans.engine.slabs`) as the cluster's array,
        every block a NumPy array of this process.
    weights : dask.array.Array or None
    block_args : list of lists
        Per block, as :func:`~daskmeans.engine.graph.block_args` gives them but computed: the block as stored (a
        NumPy array), the global index of its first row, its weights (or None).
    """

    def __init__(self, array, weights, block_args):
        self.array = array
        self.weights = weights
        self.block_args = block_args
        self._pool = None

    @classmethod
    def gather(cls, array, weights, client):
        """Copy ``array`` as stored (and ``weights``) from ``client``'s workers into this process, block by block
        (submitted as every pass submits its blocks, :func:`~daskmeans.engine.client.compute_now`)."""
        stored = stored_form(array)
        data_blocks = stored_blocks(array)
        weight_blocks = [] if weights is None else blocks_of(weights)  # chunked like the data, as every pass takes them
        gathered = compute_now(*data_blocks, *weight_blocks, client=client)
        blocks, weight_values = list(gathered[: len(data_blocks)]), list(gathered[len(data_blocks) :])
        local_stored = _from_blocks(blocks, stored.dtype)
        local = local_stored if stored is array else with_stored_form(local_stored.astype(array.dtype), local_stored)
        local_weights = _from_blocks(weight_values, weights.dtype) if weight_blocks else None
        args = [
            [block, int(start), weight_values[i] if weight_blocks else None]
            for i, (block, start) in enumerate(zip(blocks, block_offsets(array)))
        ]
        return cls(local, local_weights, args)

    @contextmanager
    def threads(self):
        """The driver's threads for the passes in the block: :meth:`map`'s pool of one thread per core, one BLAS
        thread each, and Dask's threaded scheduler with as many for a pass still made as a graph of ``array`` (the
        rare refill of more empty clusters than a pass reports far rows): there
        :func:`~daskmeans.engine.client.resolve_client` finds no client."""
        with ExitStack() as stack:
            stack.enter_context(dask.config.set(scheduler="threads", num_workers=CPU_COUNT))
            stack.enter_context(one_blas_thread())
            self._pool = stack.enter_context(ThreadPoolExecutor(max(1, min(CPU_COUNT, len(self.block_args)))))
            try:
                yield self
            finally:
                self._pool = None

    def map(self, function, per_block, *common):
        """``function(*per_block[i], *common)`` for every block, on the threads of :meth:`threads`, in block order:
        a pass over the blocks without a Dask graph (reduce the results with
        :func:`~daskmeans.engine.graph.reduce_in_tree`, the tree of the passes on the workers)."""
        return map_within_budget(self._pool, lambda args: function(*args, *common), per_block)


def _from_blocks(blocks, dtype):
    """One dask array of NumPy ``blocks`` stacked by rows, a chunk each (named without hashing their bytes)."""
    name = f"daskmeans-driver-copy-{uuid.uuid4().hex}"
    parts = [da.from_array(block, chunks=block.shape, name=f"{name}-{i}") for i, block in enumerate(blocks)]
    return (parts[0] if len(parts) == 1 else da.concatenate(parts, axis=0)).astype(dtype, copy=False)


__all__ = ["DriverCopy", "driver_rows"]
