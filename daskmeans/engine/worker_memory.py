"""How the worker processes of the embedded cluster keep freed memory for the next iteration.

Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so glibc hands every freed array over
128 KiB back to the kernel at once, and an iterative pass that allocates the same arrays every iteration touches
fresh pages every time, each a page fault, which costs most on a virtual machine whose host reclaims idle guest
memory. :func:`worker_malloc_settings` gives the workers
:data:`~daskmeans.config.WORKER_MALLOC_ENVIRON` instead.
"""

from __future__ import annotations

import contextlib
import os

import dask

from .. import config

#: The ``MALLOC_TRIM_THRESHOLD_`` Dask's nanny gives its worker processes by default.
_DASK_DEFAULT_TRIM_THRESHOLD = "65536"


@contextlib.contextmanager
def worker_malloc_settings():
    """Worker processes started in the block get :data:`~daskmeans.config.WORKER_MALLOC_ENVIRON`, unless the user
    set a trim threshold of their own (in the environment or in Dask's ``distributed.nanny.pre-spawn-environ``).

    Dask's nanny takes these variables from this process's environment before its configuration, and leaves its
    own in this process's environment once it has started a worker: both are set for the block and the
    environment is put back afterwards.
    """
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", environ.get("MALLOC_TRIM_THRESHOLD_"))
    if trim is not None and str(trim) != _DASK_DEFAULT_TRIM_THRESHOLD:
        yield
        return
    ours = {name: str(value) for name, value in config.WORKER_MALLOC_ENVIRON.items()}
    saved = {name: os.environ.get(name) for name in ours}
    os.environ.update(ours)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": {**environ, **ours}}):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
