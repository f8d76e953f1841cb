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
import signal
import sys
import threading
from dataclasses import dataclass

import dask
from dask._task_spec import convert_legacy_graph, cull, fuse_linear_task_spec
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.utils import parse_bytes

from ..config import CONNECT_HANDSHAKE_GRACE_SECONDS, CONNECT_TIMEOUT_SECONDS, LOCAL_THREADS_MAX_BYTES
from ..exceptions import InvalidParameterError, SchedulerConnectionError
from .blas import one_blas_thread_for
from .graph import DriverCombine, unfold_driver_combines
from .pass_progress import active_watch
from .worker_memory import worker_malloc_settings


def connect(address: str, *, timeout=f"{CONNECT_TIMEOUT_SECONDS:g}s", security=None):
    """Connect to a scheduler, failing with a clear message instead of hanging.

    Before the client is made, the address is checked (scheme, port, a transport this installation has, TLS
    settings for ``tls://`` and ``wss://``) and the scheduler's handshake is awaited within ``timeout``: a port that
    accepts the connection but never answers would otherwise hang ``distributed.Client`` for good.

    Parameters
    ----------
    address : str
        ``tcp://host:port`` or ``tls://host:port``.
    timeout : str or float
        How long to wait for the scheduler.
    security : distributed.Security, optional
        TLS certificates for ``tls://`` addresses (default: Dask's configuration,
        ``distributed.comm.tls.*``).

    Raises
    ------
    SchedulerConnectionError
        The address is malformed or cannot be used here, or the scheduler did not answer within ``timeout``.
    """
    from dask.utils import parse_timedelta
    from distributed import Client, Security

    seconds = parse_timedelta(timeout, default="seconds")
    if security is None:
        security = Security()
    connection_args = usable_address(address, security)
    await_handshake(address, seconds, connection_args)
    try:
        return Client(address, timeout=timeout, security=security, set_as_default=True)
    except (OSError, TimeoutError) as error:
        raise SchedulerConnectionError(
            f"Could not connect to the Dask scheduler at {address!r} within {timeout}: {error}. "
            "Check that the scheduler is running and the address (and TLS settings) are right."
        ) from error


#: Schemes whose connections are encrypted, and so need TLS certificates.
TLS_SCHEMES = ("tls", "wss")


def usable_address(address: str, security) -> dict:
    """Check that ``address`` names a transport this installation can use, with what it needs; return the
    connection arguments of a client.

    Raises
    ------
    SchedulerConnectionError
        Malformed address, unknown or unavailable transport (``ucx://`` without ``distributed-ucxx``), or an
        encrypted one without TLS settings.
    """
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme = parse_address(address, strict=True)[0]
        backend = get_backend(scheme)
    except ValueError as error:
        raise SchedulerConnectionError(
            f"Bad scheduler address {address!r}: {one_line(error)}. Use tcp://HOST:PORT (or tls://HOST:PORT), the "
            "address the scheduler prints when it starts."
        ) from error
    try:
        backend.get_connector()
    except Exception as error:  # noqa: BLE001 - a transport that cannot start fails in ways of its own
        raise SchedulerConnectionError(
            f"Scheduler address {address!r}: this installation cannot use the {scheme}:// transport "
            f"({type(error).__name__}: {one_line(error)}). Install its package (for ucx://: distributed-ucxx, "
            "or distributed-ucxx-cu12/-cu13 from PyPI), or use the scheduler's tcp:// address."
        ) from error
    connection_args = security.get_connection_args("client")
    if scheme in TLS_SCHEMES and connection_args.get("ssl_context") is None:
        raise SchedulerConnectionError(
            f"Scheduler address {address!r} is encrypted ({scheme}://) but no TLS settings were given: set the "
            "CA file, client certificate and key in Dask's configuration (DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY, or "
            "distributed.comm.tls in a Dask config file), pass security= to connect(), or use a tcp:// address."
        )
    return connection_args


def await_handshake(address: str, seconds: float, connection_args: dict):
    """Open a connection to ``address`` and wait for the scheduler's handshake, at most ``seconds`` (plus
    :data:`~daskmeans.config.CONNECT_HANDSHAKE_GRACE_SECONDS`).

    Runs on an event loop of its own, in a thread, so it works whether or not the caller runs one.

    Raises
    ------
    SchedulerConnectionError
        No connection, or no answer, within ``seconds``; or an answer that is not a Dask handshake.
    """
    import asyncio
    import concurrent.futures

    from distributed.comm import connect as open_comm

    async def handshake():
        comm = await open_comm(address, timeout=seconds, **connection_args)
        await comm.close()

    async def within_time():
        await asyncio.wait_for(handshake(), seconds + CONNECT_HANDSHAKE_GRACE_SECONDS)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="daskmeans-handshake") as pool:
        try:
            pool.submit(asyncio.run, within_time()).result()
        except (TimeoutError, asyncio.TimeoutError) as error:
            raise SchedulerConnectionError(
                f"The Dask scheduler at {address!r} did not answer within {seconds:g} s: something accepts "
                "connections there but does not speak Dask's protocol (or is stuck). Check the address and port "
                "(the scheduler prints its address when it starts), or raise --connect-timeout."
            ) from error
        except OSError as error:
            raise SchedulerConnectionError(
                f"Could not connect to the Dask scheduler at {address!r} within {seconds:g} s: {one_line(error)}. "
                "Check that the scheduler is running and the address (and TLS settings) are right."
            ) from error
        except Exception as error:  # noqa: BLE001 - whatever answered, it was not a Dask scheduler
            raise SchedulerConnectionError(
                f"What answers at {address!r} is not a Dask scheduler ({type(error).__name__}: "
                f"{one_line(error)}). Check the address and port."
            ) from error


def scheduler_lost(client, error: BaseException) -> bool:
    """Whether ``error``, raised while ``client`` was in use, comes from losing its scheduler."""
    from distributed.client import FutureCancelledError

    if isinstance(error, FutureCancelledError) and error.reason == "scheduler-connection-lost":
        return True
    return isinstance(error, (OSError, TimeoutError, FutureCancelledError)) and client.status != "running"


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


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
    """Compute dask collections on ``client`` (or the local scheduler) and return their values.

    While a :class:`~daskmeans.engine.pass_progress.PassWatch` is active, the block tasks computed (and those
    persisted since the last computation) are one pass to it, which ends when the values are here.
    """
    if client is None:
        client = resolve_client(None)
    watch = active_watch()
    if watch is None:
        return _compute(objects, client)
    try:
        return _compute(objects, client, watch)
    finally:
        watch.finished()


def _compute(objects, client, watch=None):
    if any(isinstance(o, DriverCombine) for o in objects):
        return _compute_with_driver_combines(objects, client, watch)
    if client is None:
        if watch is not None:
            watch.submitted(_graph_of(objects))
        return dask.compute(*objects)
    if objects and all(isinstance(o, Delayed) for o in objects):
        return tuple(client.get(*_own_graph(objects, watch, client), sync=True))
    if watch is not None:
        watch.submitted(_graph_of(objects), client)
    futures = client.compute(list(objects))
    return tuple(client.gather(futures))


def _compute_with_driver_combines(objects, client, watch):
    """Compute the inputs of every :class:`DriverCombine` with the other objects in one submission; combine here."""
    flat, finish = unfold_driver_combines(objects)
    return finish(_compute(tuple(flat), client, watch))


def _own_graph(objects, watch=None, client=None):
    """The graph and keys of daskmeans' own task graphs (:mod:`daskmeans.engine.graph`), ready to submit.

    They are submitted as they are, without the collection optimizations of ``Client.compute`` (whose cost
    exceeds the scheduler's round trip on small passes), culled, and fused along linear chains: reading a block
    and working on it stay one task, so the block is never a result held (and counted, and spilled) in worker
    memory. Every submission of daskmeans goes this one way, so a block's key gets the same task in each: a key
    the scheduler still remembers from the last pass, given another task by the next one, is what Dask warns
    about as "different `run_spec`" (and may then run the old one).
    """
    keys = [o.key for o in objects]
    graph = cull(convert_legacy_graph(dict(HighLevelGraph.merge(*(o.__dask_graph__() for o in objects)))), keys)
    if watch is not None:
        watch.submitted(graph, client)
    return fuse_linear_task_spec(graph, keys), keys


def _graph_of(objects):
    """The merged graph of ``objects`` (a mapping of keys to tasks)."""
    return HighLevelGraph.merge(*(o.__dask_graph__() for o in objects))


def submit_now(*objects, client):
    """Submit daskmeans' own delayed graphs to ``client`` in one message; their futures, in order."""
    return client.get(*_own_graph(objects, active_watch(), client), sync=False)


def persist_now(*objects, client=None):
    """Persist dask collections on the cluster (or compute them into local memory)."""
    if client is None:
        client = resolve_client(None)
    if client is None:
        watch = active_watch()
        if watch is not None:
            watch.submitted(_graph_of(objects))
        return dask.persist(*objects)
    if objects and all(isinstance(o, Delayed) for o in objects):
        return tuple(Delayed(future.key, {future.key: future}) for future in submit_now(*objects, client=client))
    watch = active_watch()
    if watch is not None:
        watch.submitted(_graph_of(objects), client)
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
    local_workers : {"auto", "processes", "threads"}
        What the embedded cluster's workers are.
    """

    scheduler: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS
    workers: int | None = None
    threads_per_worker: int | None = None
    memory_limit: str | float | int | None = None
    #: ``"auto"``: threads for small inputs (:meth:`local_processes`), else processes; ``"processes"`` or
    #: ``"threads"`` (one worker holding ``workers x threads_per_worker`` threads in this process) to choose.
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
        local_options = {"--workers": self.workers, "--threads-per-worker": self.threads_per_worker,
                         "--memory-limit": self.memory_limit,
                         "--local-workers": None if self.local_workers == "auto" else self.local_workers}
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
        if self.local_workers != "auto":
            return self.local_workers == "processes"
        sized = any(value is not None for value in (self.workers, self.threads_per_worker, self.memory_limit))
        return sized or input_bytes is None or input_bytes > LOCAL_THREADS_MAX_BYTES

    def local_threads(self) -> int | None:
        """Threads of the one worker of a threaded embedded cluster: ``--workers x --threads-per-worker`` when
        either is given (the same cores as the processes would have), else one per core (Dask's choice)."""
        if self.workers is None and self.threads_per_worker is None:
            return None
        return (self.workers or 1) * (self.threads_per_worker or 1)

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

        if self.worker_log_level > logging.WARNING:  # after distributed's import, which sets its loggers' levels
            for name in ("distributed.client", "distributed.worker"):
                logging.getLogger(name).setLevel(self.worker_log_level)
        if self.scheduler:
            client = connect(self.scheduler, timeout=f"{self.connect_timeout:g}s")
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
            cluster = LocalCluster(n_workers=self.workers if processes else 1,
                                   threads_per_worker=self.threads_per_worker if processes else self.local_threads(),
                                   memory_limit=self.memory_limit if self.memory_limit is not None else "auto",
                                   processes=processes, dashboard_address=":0", silence_logs=self.worker_log_level)
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
