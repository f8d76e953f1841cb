"""Which Dask scheduler runs the passes: explicit client > active client > configured address > local.

:class:`ClusterSpec` is where a command of the CLI runs: a scheduler it connects to, or a ``LocalCluster`` it
starts and closes. :func:`run_pinned` runs one task on one worker, for sequential loops near their data.
``distributed`` is imported only where a cluster is used, so that ``import daskmeans`` and a fit on the threaded
scheduler do without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from dataclasses import dataclass

import dask
from dask.utils import parse_bytes

from ..config import CONNECT_TIMEOUT_SECONDS, LOCAL_THREADS_MAX_BYTES
from ..exceptions import InvalidParameterError, SchedulerConnectionError


def connect(address: str, *, timeout=f"{CONNECT_TIMEOUT_SECONDS:g}s", security=None):
    """Connect to a scheduler, failing with a clear message instead of hanging.

    Parameters
    ----------
    address : str
        ``tcp://host:port`` or ``tls://host:port``.
    timeout : str or float
        How long to wait for the scheduler.
    security : distributed.Security, optional
        TLS certificates for ``tls://`` addresses.
    """
    from distributed import Client
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        get_backend(parse_address(address, strict=True)[0])
    except ValueError as error:
        raise SchedulerConnectionError(
            f"Bad scheduler address {address!r}: {error}. Use tcp://HOST:PORT (or tls://HOST:PORT), the address "
            "the scheduler prints when it starts."
        ) from error
    try:
        return Client(address, timeout=timeout, security=security, set_as_default=True)
    except (OSError, TimeoutError) as error:
        raise SchedulerConnectionError(
            f"Could not connect to the Dask scheduler at {address!r} within {timeout}: {error}. "
            "Check that the scheduler is running and the address (and TLS settings) are right."
        ) from error


def resolve_client(client=None):
    """Return the distributed client to use, or None to run on the local threaded scheduler.

    Parameters
    ----------
    client : distributed.Client, optional
        Used as is when given.
    """
    if client is not None:
        return client
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        pass
    address = dask.config.get("scheduler-address", None)
    if address:
        return connect(address)
    return None


def compute_now(*objects, client=None):
    """Compute dask collections on ``client`` (or the local scheduler) and return their values."""
    if client is None:
        client = resolve_client(None)
    if client is None:
        return dask.compute(*objects)
    futures = client.compute(list(objects))
    return tuple(client.gather(futures))


def persist_now(*objects, client=None):
    """Persist dask collections on the cluster (or compute them into local memory)."""
    if client is None:
        client = resolve_client(None)
    if client is None:
        return dask.persist(*objects)
    return tuple(client.persist(list(objects)))


# -- the cluster a command runs on -----------------------------------------------------------------------------------


@dataclass
class ClusterSpec:
    """Where a command runs: a running scheduler, or an embedded ``LocalCluster`` of worker processes.

    Attributes
    ----------
    scheduler : str or None
        Address of a running scheduler; None starts a ``LocalCluster`` sized to the machine.
    connect_timeout : float
        Seconds to wait for ``scheduler``.
    workers, threads_per_worker : int or None
        Size of the embedded cluster (default: chosen by Dask from the number of cores).
    memory_limit : str, float, int or None
        Memory limit per embedded worker: ``auto``, a size like ``4GiB``, or a fraction of the memory;
        :meth:`validate` turns it into what ``LocalCluster`` takes (:func:`parse_memory_limit`).
    """

    scheduler: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS
    workers: int | None = None
    threads_per_worker: int | None = None
    memory_limit: str | float | int | None = None
    #: Level of the embedded workers' own log messages (``logging.CRITICAL`` keeps a failed task's traceback out of
    #: the output of a command that reports the failure itself).
    worker_log_level: int = logging.WARNING

    def validate(self):
        """Check the options before any work; return the spec itself.

        Raises
        ------
        InvalidParameterError
            Embedded-cluster options given with ``--scheduler``, or a memory limit that is not a size.
        """
        local_options = {"--workers": self.workers, "--threads-per-worker": self.threads_per_worker,
                         "--memory-limit": self.memory_limit}
        given = [name for name, value in local_options.items() if value is not None]
        if self.scheduler and given:
            raise InvalidParameterError(
                f"{', '.join(given)} size the embedded cluster and cannot be used with --scheduler; "
                "drop them, or drop --scheduler to start a local cluster."
            )
        if self.memory_limit is not None:
            self.memory_limit = parse_memory_limit(self.memory_limit)
        return self

    def local_processes(self, input_bytes: int | None) -> bool:
        """Whether the embedded cluster is made of worker processes (else threads in this process).

        Threads when the input is known and small (:data:`~daskmeans.config.LOCAL_THREADS_MAX_BYTES`) and the
        cluster's size was not asked for; results are the same either way.
        """
        sized = any(value is not None for value in (self.workers, self.threads_per_worker, self.memory_limit))
        return sized or input_bytes is None or input_bytes > LOCAL_THREADS_MAX_BYTES

    @contextlib.contextmanager
    def client(self, announce: bool = False, input_bytes: int | None = None):
        """Yield a ``distributed.Client`` for the run; an embedded cluster is closed afterwards.

        Parameters
        ----------
        announce : bool
            Print the dashboard address on stderr (when Bokeh, which serves the dashboard, is installed).
        input_bytes : int, optional
            Size of the input as computed; a small one runs on threads (:meth:`local_processes`).
        """
        from distributed import Client, LocalCluster

        if self.scheduler:
            try:
                client = connect(self.scheduler, timeout=f"{self.connect_timeout:g}s")
            except ValueError as error:  # malformed address: no scheme, no port, unknown protocol
                raise SchedulerConnectionError(
                    f"Bad scheduler address {self.scheduler!r}: {error}. Use tcp://HOST:PORT "
                    "(the address the scheduler prints when it starts)."
                ) from error
            with client:
                if announce:
                    announce_dashboard(client)
                yield client
            return
        processes = self.local_processes(input_bytes)
        with LocalCluster(n_workers=self.workers if processes else 1, threads_per_worker=self.threads_per_worker,
                          memory_limit=self.memory_limit if self.memory_limit is not None else "auto",
                          processes=processes, dashboard_address=":0",
                          silence_logs=self.worker_log_level) as cluster, \
                Client(cluster, set_as_default=True) as client:
            if announce:
                announce_dashboard(client)
            yield client


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


def run_pinned(client, function, keys, *args, key):
    """Run ``function(pieces, compute, *args)`` on one worker of ``client``; on another if that worker dies.

    The task is pinned to the first worker (by address), loosely: when it leaves the cluster (before or while it
    runs), the scheduler runs the task again on a worker that is left, from the same inputs, and the data it
    read is recomputed from its lineage, so the result is the same.

    Parameters
    ----------
    client : distributed.Client
    function : callable
        Module-level (it travels to the worker). ``pieces`` are ``keys`` as futures of that worker's client and
        ``compute(graph)`` computes a graph from the worker and returns its value.
    keys : list of list of str
        Keys of collections persisted on the cluster (e.g. the blocks of a sample), as nested lists.
    *args
        Further arguments of ``function``.
    key : str
        The task's key (unique; its prefix names it on the dashboard).

    Returns
    -------
    result
        What ``function`` returned.
    address : str
        The worker that ran it.
    """
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise RuntimeError(f"the Dask cluster has no workers to run {key} on")
    future = client.submit(_run_with_worker_client, function, keys, *args, workers=[workers[0]],
                           allow_other_workers=True, pure=False, key=key)
    return future.result()


def _run_with_worker_client(function, keys, *args):
    from distributed import Future, get_worker, worker_client

    with worker_client() as client:
        pieces = [[Future(name, client=client) for name in group] for group in keys]
        result = function(pieces, lambda graph: client.compute(graph).result(), *args)
    return result, get_worker().address
