"""Which Dask scheduler runs the passes: explicit client > active client > configured address > local."""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass

import click
import dask
from dask.utils import parse_bytes

from ..exceptions import InvalidParameterError, SchedulerConnectionError

_CONNECT_TIMEOUT = "10s"


def connect(address: str, *, timeout=_CONNECT_TIMEOUT, security=None):
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
    memory_limit : str or None
        Memory limit per embedded worker: ``auto``, a size like ``4GiB``, or a fraction of the memory.
    """

    scheduler: str | None = None
    connect_timeout: float = 10.0
    workers: int | None = None
    threads_per_worker: int | None = None
    memory_limit: str | None = None

    def validate(self):
        """Check the options before any work.

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
            self.memory_limit = _memory_limit(self.memory_limit)
        return self

    @contextlib.contextmanager
    def client(self, announce: bool = False):
        """Yield a ``distributed.Client`` for the run; an embedded cluster is closed afterwards.

        Parameters
        ----------
        announce : bool
            Print the dashboard address on stderr (when Bokeh, which serves the dashboard, is installed).
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
                _announce(client, announce)
                yield client
            return
        with LocalCluster(n_workers=self.workers, threads_per_worker=self.threads_per_worker,
                          memory_limit=self.memory_limit if self.memory_limit is not None else "auto",
                          processes=True, dashboard_address=":0") as cluster, \
                Client(cluster, set_as_default=True) as client:
            _announce(client, announce)
            yield client


def _announce(client, announce: bool):
    if announce and importlib.util.find_spec("bokeh") is not None:
        click.echo(f"Dask dashboard: {client.dashboard_link}", err=True)


def _memory_limit(text: str):
    """``auto``, a fraction of the machine's memory (``0.5``), or a size (``4GiB``, ``500MB``)."""
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
