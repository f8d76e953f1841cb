"""A delay on every Dask message and S3 request of a process, for kernels without ``netem``.

:func:`set_one_way_delay` makes the process hold each message it receives on a Dask TCP connection for the given
seconds after it arrived (messages keep their order and overlap in flight, as on a link with that one-way
delay), and wait twice that before each HTTP request of ``aiohttp`` (the S3 client's), one round trip. Run it in
the client process, on the scheduler (``client.run_on_scheduler``) and on every worker (``client.run``): then a
request and its answer between any two of them take one RTT of ``2 * seconds`` more. The function is
self-contained (its state lives on the classes it patches), so it travels to the other processes by value.

It is an emulation: TCP itself (slow start, acknowledgements, a connection's set-up) is not delayed.
"""

from __future__ import annotations


def set_one_way_delay(seconds: float, dask_scheduler=None, dask_worker=None) -> float:
    """Delay each Dask message this process receives by ``seconds``, and each of its HTTP requests by twice that
    (0 removes the delay); returns ``seconds``.

    Examples
    --------
    >>> set_one_way_delay(0.0)
    0.0
    """
    import asyncio
    import time

    from distributed.comm.tcp import TCP

    if not hasattr(TCP, "_multihost_read"):
        original_read = TCP.read

        async def pump(comm, queue, deserializers):
            while True:
                try:
                    message = await original_read(comm, deserializers)
                except BaseException as error:  # the comm closed or failed: its reader gets the error, in order
                    await queue.put((time.monotonic() + TCP._multihost_delay, None, error))
                    return
                await queue.put((time.monotonic() + TCP._multihost_delay, message, None))

        async def delayed_read(self, deserializers=None):
            queue = self.__dict__.get("_multihost_queue")
            if queue is None:
                if TCP._multihost_delay <= 0:
                    return await original_read(self, deserializers)
                queue = self._multihost_queue = asyncio.Queue()
                self._multihost_pump = asyncio.ensure_future(pump(self, queue, deserializers))
            due, message, error = await queue.get()
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            if error is not None:
                raise error
            return message

        TCP._multihost_read = original_read
        TCP.read = delayed_read
    TCP._multihost_delay = float(seconds)
    try:
        import aiohttp
    except ImportError:
        return float(seconds)
    session = aiohttp.ClientSession
    if not hasattr(session, "_multihost_request"):
        original_request = session._request

        async def delayed_request(self, *args, **kwargs):
            if session._multihost_delay > 0:
                await asyncio.sleep(2 * session._multihost_delay)
            return await original_request(self, *args, **kwargs)

        session._multihost_request = original_request
        session._request = delayed_request
    session._multihost_delay = float(seconds)
    return float(seconds)
