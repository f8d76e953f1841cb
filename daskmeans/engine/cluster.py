"""Where a command of the CLI runs: a scheduler it connects to, a ``LocalCluster`` it starts and closes, or Dask's
threaded scheduler in this process.

``distributed`` is imported only where a cluster is used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import signal
import sys
import threading
from dataclasses import dataclass

import dask
from dask.utils import parse_bytes

from .. import config
from ..exceptions import InvalidParameterError, SchedulerConnectionError
from .blas import one_blas_thread_for
from .client import connect, scheduler_lost
from .worker_memory import worker_malloc_settings


@dataclass
class ClusterSpec:
    """Where a command runs: a running scheduler, an embedded ``LocalCluster``, or Dask's threaded scheduler.

    Attributes
    ----------
    scheduler : str or None
        Address of a running scheduler; None starts a ``LocalCluster`` sized to the machine.
    connect_timeout : float or None
        Seconds to wait for ``scheduler``; None: :data:`~daskmeans.config.CONNECT_TIMEOUT_SECONDS`, read by
        :meth:`validate`.
    workers, threads_per_worker : int or None
        Size of the embedded cluster (default: chosen by Dask from the number of cores).
    memory_limit : str, float, int or None
        Memory limit per embedded worker: ``auto``, a size like ``4GiB``, or a fraction of the memory;
        :meth:`validate` turns it into what ``LocalCluster`` takes (:func:`parse_memory_limit`).
    local_workers : {"auto", "processes", "threads", "scheduler"}
        What the embedded cluster's workers are; ``"scheduler"``: no cluster, Dask's threaded scheduler in this
        process (``workers x threads_per_worker`` threads, default one per core), as a fit from Python without a
        client runs. It has the least overhead per pass (less than a threaded ``LocalCluster``, which has less
        than worker processes), without a dashboard or worker memory limits.
    """

    scheduler: str | None = None
    connect_timeout: float | None = None
    workers: int | None = None
    threads_per_worker: int | None = None
    memory_limit: str | float | int | None = None
    #: ``"auto"``: threads for small inputs (:meth:`local_processes`), else processes; ``"processes"``,
    #: ``"threads"`` (one worker holding ``workers x threads_per_worker`` threads in this process) or
    #: ``"scheduler"`` (no cluster) to choose.
    local_workers: str = "auto"
    #: Level of Dask's own log messages in the workers and this process (``logging.CRITICAL`` keeps a failed task's
    #: traceback, and the client's attempts to reach a lost scheduler, out of the output of a command that reports
    #: the failure itself).
    worker_log_level: int = logging.WARNING

    def validate(self):
        """Check the options before any work; return the spec itself.

        Raises
        ------
        InvalidParameterError
            Embedded-cluster options given with ``--scheduler``, or a memory limit that is not a size.
        """
        local_options = {
            "--workers": self.workers,
            "--threads-per-worker": self.threads_per_worker,
            "--memory-limit": self.memory_limit,
            "--local-workers": None if self.local_workers == "auto" else self.local_workers,
        }
        given = [name for name, value in local_options.items() if value is not None]
        if self.scheduler and given:
            raise InvalidParameterError(
                f"{', '.join(given)} size the embedded cluster and cannot be used with --scheduler; "
                "drop them, or drop --scheduler to start a local cluster."
            )
        if self.local_workers not in config.LOCAL_WORKERS:
            raise InvalidParameterError(
                f"--local-workers {self.local_workers!r} is not one of {', '.join(config.LOCAL_WORKERS)}."
            )
        if self.connect_timeout is None:
            self.connect_timeout = config.CONNECT_TIMEOUT_SECONDS
        if self.local_workers == "scheduler" and self.memory_limit is not None:
            raise InvalidParameterError(
                "--memory-limit limits the memory of a local cluster's workers, and --local-workers scheduler "
                "starts none (tasks run on Dask's threaded scheduler in this process); drop one of them."
            )
        if self.memory_limit is not None:
            self.memory_limit = parse_memory_limit(self.memory_limit)
        return self

    def local_processes(self, input_bytes: int | None) -> bool:
        """Whether the embedded cluster is made of worker processes (else threads in this process).

        Threads when the input is known and small (:data:`~daskmeans.config.LOCAL_THREADS_MAX_BYTES`) and the
        cluster's size was not asked for; results are the same either way.
        """
        if self.local_workers != "auto":
            return self.local_workers == "processes"
        sized = any(value is not None for value in (self.workers, self.threads_per_worker, self.memory_limit))
        return sized or input_bytes is None or input_bytes > config.LOCAL_THREADS_MAX_BYTES

    def local_threads(self) -> int | None:
        """Threads of the one worker of a threaded embedded cluster: ``--workers x --threads-per-worker`` when
        either is given (the same cores as the processes would have), else one per core (Dask's choice)."""
        if self.workers is None and self.threads_per_worker is None:
            return None
        return (self.workers or 1) * (self.threads_per_worker or 1)

    @contextlib.contextmanager
    def client(self, announce: bool = False, input_bytes: int | None = None):
        """Yield a ``distributed.Client`` for the run (None with ``local_workers="scheduler"``: the computations
        then run on Dask's threaded scheduler); an embedded cluster is closed afterwards.

        Parameters
        ----------
        announce : bool
            Print the dashboard address on stderr (when Bokeh, which serves the dashboard, is installed).
        input_bytes : int, optional
            Size of the input as computed; a small one runs on threads (:meth:`local_processes`).
        """
        if self.local_workers == "scheduler":
            with dask.config.set(scheduler="threads", num_workers=self.local_threads()), one_blas_thread_for(None):
                yield None
            return
        from distributed import Client, LocalCluster

        if self.worker_log_level > logging.WARNING:  # after distributed's import, which sets its loggers' levels
            # distributed.batched logs a lost connection with its traceback, which a one-line error replaces
            for name in ("distributed.client", "distributed.worker", "distributed.batched"):
                logging.getLogger(name).setLevel(self.worker_log_level)
        if self.scheduler:
            timeout = None if self.connect_timeout is None else f"{self.connect_timeout:g}s"
            client = connect(self.scheduler, timeout=timeout)
            with client:
                if announce:
                    announce_dashboard(client)
                try:
                    yield client
                except Exception as error:
                    if scheduler_lost(client, error):
                        raise SchedulerConnectionError(
                            f"Lost the Dask scheduler at {self.scheduler!r} during the run ({type(error).__name__}); "
                            "nothing was written. Restart the scheduler (and its workers) and run the command "
                            "again; with --checkpoint a fit resumes from its last saved iteration."
                        ) from error
                    raise
            return
        processes = self.local_processes(input_bytes)
        with interrupts_held(), worker_malloc_settings():  # a Ctrl-C reaches this process, not the cluster's
            cluster = LocalCluster(
                n_workers=self.workers if processes else 1,
                threads_per_worker=self.threads_per_worker if processes else self.local_threads(),
                memory_limit=self.memory_limit if self.memory_limit is not None else "auto",
                processes=processes,
                dashboard_address=":0",
                silence_logs=self.worker_log_level,
            )
        with cluster, Client(cluster, set_as_default=True) as client, one_blas_thread_for(client):
            if announce:
                announce_dashboard(client)
            yield client


@contextlib.contextmanager
def interrupts_held():
    """Block SIGINT in this thread while the block runs; a Ctrl-C that comes meanwhile is raised after it.

    Threads and processes started meanwhile inherit the blocked signal for good (a signal mask survives ``fork``
    and ``exec``): a Ctrl-C to the process group then reaches only this process, which stops the run and closes
    the cluster, instead of every worker dying with a traceback of its own. Does nothing outside the main thread
    or where signal masks do not exist (Windows).
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing unblocks SIGINT in the thread that first starts its resource tracker: start it now
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def announce_dashboard(client):
    """Print the address of ``client``'s dashboard on stderr, when Bokeh, which serves it, is installed."""
    if importlib.util.find_spec("bokeh") is not None:
        print(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr, flush=True)


def parse_memory_limit(text: str):
    """A worker memory limit as ``LocalCluster`` takes it.

    Parameters
    ----------
    text : str
        ``auto``, a fraction of the machine's memory (``0.5``), or a size (``4GiB``, ``500MB``).

    Returns
    -------
    str, float or int
        ``"auto"``, the fraction, or the size in bytes.

    Raises
    ------
    InvalidParameterError
        ``text`` is none of these.
    """
    if text.strip().lower() == "auto":
        return "auto"
    with contextlib.suppress(ValueError):
        fraction = float(text)
        if 0 < fraction <= 1:
            return fraction
    try:
        size = parse_bytes(text)
    except (ValueError, TypeError):
        size = None
    if not size or size <= 0:
        raise InvalidParameterError(
            f"--memory-limit {text!r} is not a memory size; use e.g. 4GiB, 500MB, a fraction like 0.5, or auto."
        )
    return size
