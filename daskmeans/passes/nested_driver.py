"""Small nested batches stepped on the driver, without a Dask round trip per iteration.

While nmbatch's batch is small, an iteration's work (a few thousand rows against the centers) costs less than
the round trip that sends it to the workers and collects its statistics (see
:func:`~daskmeans.engine.driver.driver_rows`). Such a batch is kept in the driver's memory: the
workers read its new rows at each growth and send them once, and the driver steps its state blocks itself, with the
same block function, the same blocks and the same reduction tree as the workers would, so the iterates are the same
to the last bit.
When the batch grows past the threshold, its blocks go to the workers and stay there: their rows ahead of the move
(:func:`to_workers`), their labels, distances and bounds at it (:func:`joined_on_workers`).
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import dask
from dask._task_spec import DataNode
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.system import CPU_COUNT

from .. import config
from ..engine.blas import one_blas_thread, one_blas_thread_in_this_thread
from ..engine.client import persist_now
from ..engine.deadline import map_within_budget
from ..engine.graph import reduce_in_tree, task


def step_on_driver(step_block, block_args, common_args, combine):
    """``step_block(*block_args[i], *common_args)`` for every state block on the driver's threads (as many as the
    threaded scheduler would use, each with one BLAS thread, as on the workers, since BLAS on every core in each
    thread oversubscribes the cores), and the blocks' reports reduced in the tree of
    :func:`~daskmeans.engine.graph.tree_reduce`.

    Returns
    -------
    outputs : list
        The blocks' outputs (``.report`` holds each report), in block order.
    report :
        The reduced report.
    """
    with one_blas_thread():
        outputs = map_within_budget(
            driver_threads(), lambda args: on_one_blas_thread(step_block, *args, *common_args), block_args
        )
    return outputs, reduce_in_tree([output.report for output in outputs], combine)


class _DriverThreads:
    """The process's pool of step threads, one per core, made at first use and kept: a pool made per step would
    start and join its threads at every step. A process forked from this one makes its own (the threads do not
    follow a fork)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pool, self.pid = None, None

    def get(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.pool is None or self.pid != os.getpid():
                self.pool = ThreadPoolExecutor(CPU_COUNT, thread_name_prefix="daskmeans-driver-step")
                self.pid = os.getpid()
            return self.pool


_DRIVER_THREADS = _DriverThreads()
_LIMITED = threading.local()


def driver_threads() -> ThreadPoolExecutor:
    """The pool of one thread per core on which :func:`step_on_driver` steps the blocks (the same one for every
    step of the process)."""
    return _DRIVER_THREADS.get()


def on_one_blas_thread(function, *args):
    """``function(*args)`` with BLAS on one thread in this thread: an OpenBLAS built on OpenMP (faiss's wheels)
    keeps its thread count per thread, so the limit taken by the thread that waits for the step does not reach the
    pool's threads. Each pool thread takes it once, and again when modules were imported since (a BLAS loaded
    later), and keeps it: the pool's threads run nothing but steps."""
    modules = len(sys.modules)
    if getattr(_LIMITED, "modules", None) != modules:
        one_blas_thread_in_this_thread()
        _LIMITED.modules = modules
    return function(*args)


def to_workers(values, client, name: str = "from-driver") -> list[Delayed]:
    """Send driver-side values to the workers, each inside a task of its own, as the persisted results that
    :func:`~daskmeans.engine.client.persist_now` returns.

    Data in the graph, not scattered: the scheduler keeps each task, so a value lost with a worker, and every later
    state block derived from it, is recomputed from its lineage as the blocks stepped on the workers are. The
    scheduler holds that copy for the rest of the fit: at most :data:`~daskmeans.config.DRIVER_BYTES` by the
    ``"auto"`` rule. Distributed's warning about a large graph is not shown for it: the size is meant.
    """
    key = f"daskmeans-nmbatch-{name}-{uuid.uuid4().hex}"
    sent = [
        Delayed(
            (key, i),
            HighLevelGraph.from_collections(f"{key}-{i}", {(key, i): DataNode((key, i), value)}),
            layer=f"{key}-{i}",
        )
        for i, value in enumerate(values)
    ]
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": f"{2 * config.DRIVER_BYTES}B"}):
        return list(persist_now(*sent, client=client))


def joined_on_workers(function, sent, values, client) -> list[Delayed]:
    """``function(sent[i], *values[i])`` for each ``i`` on the workers (``sent``: results already there, e.g. from
    :func:`to_workers`; ``values``: driver-side arguments, which travel inside the tasks), persisted."""
    key = f"daskmeans-nmbatch-joined-{uuid.uuid4().hex}"
    tasks = [task((key, i), function, part, *more) for i, (part, more) in enumerate(zip(sent, values))]
    return list(persist_now(*tasks, client=client))
