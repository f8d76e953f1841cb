"""One BLAS thread per task when the tasks run in this process.

Dask's worker processes start with ``OPENBLAS_NUM_THREADS=1`` (and the OpenMP/MKL equivalents): each worker
thread runs one task, and the worker's threads already use the cores. Threaded workers (``processes=False``, the
local cluster the CLI starts for small inputs) and Dask's threaded scheduler run their tasks in the driver's
process, where BLAS uses every core by default: each task thread then runs its GEMMs on all cores at once, and the
threads oversubscribe the cores several times over. A fit whose tasks run in this process therefore limits BLAS to
one thread for its duration (:func:`one_blas_thread_for`).

The limit is set from the driver's thread: OpenBLAS (0.3.31) ignores a worker thread's change of its thread count
once the main thread has set one, so a limit taken inside each task would not hold everywhere.
"""

from __future__ import annotations

import contextlib
import sys

import dask

#: Dask schedulers that run tasks outside this process, or one at a time.
_SCHEDULERS_WITHOUT_THREADS = ("sync", "synchronous", "single-threaded", "processes", "multiprocessing")


def tasks_run_in_this_process(client) -> bool:
    """Whether the tasks of a computation on ``client`` (None: Dask's default scheduler) run in this process.

    True for the threaded scheduler and for a client whose workers live in this process (a
    ``LocalCluster(processes=False)``, or workers reached over ``inproc://``).
    """
    if client is None:
        return dask.config.get("scheduler", None) not in _SCHEDULERS_WITHOUT_THREADS
    from distributed import Worker

    cluster = getattr(client, "cluster", None)
    if cluster is not None and any(isinstance(worker, Worker) for worker in getattr(cluster, "workers", {}).values()):
        return True
    try:
        addresses = client.scheduler_info().get("workers", {})
    except Exception:  # a client that cannot answer now: nothing to limit
        return False
    return any(str(address).startswith("inproc://") for address in addresses)


@contextlib.contextmanager
def one_blas_thread_for(client):
    """BLAS limited to one thread while the block runs, when ``client``'s tasks run in this process."""
    if not tasks_run_in_this_process(client):
        yield
        return
    with one_blas_thread():
        yield


#: The thread pools of this process as last looked up, and how many modules were imported then.
_controller = (None, -1)


def one_blas_thread():
    """BLAS limited to one thread while the block runs, whoever runs the tasks: for work this process spreads over
    threads of its own (nmbatch's small batches on the driver: each thread's GEMM on one core). Cheap enough to
    take for every step: the libraries (slow to look up) are looked up again only when modules were imported
    since, which is how a second BLAS arrives (SciPy's, with scikit-learn), and it must be limited too."""
    global _controller
    controller, n_modules = _controller
    if controller is None or n_modules != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        controller = ThreadpoolController()
        _controller = (controller, len(sys.modules))
    return controller.limit(limits=1, user_api="blas")


def one_blas_thread_in_this_thread() -> None:
    """One BLAS thread for the calling thread, left in place: for the threads of a pool that runs nothing else (its
    initializer, or each step of the driver's pool). An OpenBLAS built on OpenMP (faiss's wheels) keeps its thread
    count per thread, so a limit taken by the thread that starts a pool does not reach the pool's own threads."""
    one_blas_thread()


def machine_threads():
    """Every thread pool of the process (BLAS, OpenMP) at one thread per core while the block runs: what code
    that is not daskmeans' (the bench's peers) would have in a process of its own, also inside a fit's limit.

    Limiting BLAS can limit OpenMP too: an OpenBLAS built on OpenMP (faiss's wheels) sets its thread count through
    the OpenMP runtime it shares with scikit-learn, so under :func:`one_blas_thread` scikit-learn's Lloyd would run
    on one thread. The libraries are looked up anew, so those loaded since the last call count too."""
    from dask.system import CPU_COUNT
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().limit(limits=CPU_COUNT)
