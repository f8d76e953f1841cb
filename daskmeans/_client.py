"""Which Dask scheduler runs the passes: explicit client > active client > configured address > local."""

from __future__ import annotations

import dask

from .exceptions import SchedulerConnectionError

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
