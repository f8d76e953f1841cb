"""Publishing outputs: a directory-shaped output (a model, labels, a dataset) is written under a temporary name and
appears at its path only when complete, and an output that exists already is replaced only when asked to."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid

from .. import config
from ..exceptions import OutputExistsError

# -- atomic outputs --------------------------------------------------------------------------------------------------


class atomic_output:
    """Write a directory-shaped output under a temporary name and move it into place only when complete.

    Use as ``with atomic_output(path, overwrite) as tmp: write to tmp``. On an exception the temporary
    output is removed and an existing output at ``path`` is left untouched. Remote (fsspec) URLs are written
    in place, as object stores have no rename.
    """

    def __init__(self, path, overwrite: bool = False, *, storage_options=None):
        self.storage_options = storage_options
        self.path = prepare_output(path, overwrite, storage_options)
        self.local = is_local(self.path)
        if self.local:
            target = os.path.abspath(local_path(self.path))
            self.target = target
            self.tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.tmp-{uuid.uuid4().hex[:8]}")
        else:
            self.target = self.tmp = self.path

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if not self.local:
            return False
        if exc_type is not None:
            settle_zarr_io()
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        if os.path.exists(self.target):
            old = f"{self.tmp}.old"
            os.rename(self.target, old)
            os.rename(self.tmp, self.target)
            shutil.rmtree(old, ignore_errors=True) if os.path.isdir(old) else os.remove(old)
        else:
            os.rename(self.tmp, self.target)
        return False


def settle_zarr_io(timeout: float | None = None) -> bool:
    """Wait until Zarr's own I/O under way in this process has ended (at most ``timeout`` seconds; None:
    :data:`~daskmeans.config.ZARR_SETTLE_SECONDS`, read at call time); returns whether it has.

    Zarr runs its stores' reads and writes as tasks of one event loop in a thread of its own. When one of the writes
    of an operation fails (a full disk), the operation raises at once while its other writes still run, and a local
    store's write creates its file's folders: a temporary output removed at that moment could be made again, with
    the file, by a write that had not yet ended. This waits for every task of that loop but the waiting one.
    """
    timeout = config.ZARR_SETTLE_SECONDS if timeout is None else timeout
    try:
        from zarr.core.sync import loop as zarr_loops  # Zarr 3's I/O loop (a private name: absent, nothing to wait)
    except ImportError:
        return True
    loop = zarr_loops[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return True

    async def others_ended():
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        return all(task.done() for task in pending)

    try:
        return asyncio.run_coroutine_threadsafe(others_ended(), loop).result(timeout + 1.0)
    except Exception:  # noqa: BLE001 - the loop stopped or the wait ran out: nothing more to wait for
        return False


def is_local(path: str) -> bool:
    """Whether ``path`` is on a filesystem of this machine (a plain path or a ``file://`` URL)."""
    return "://" not in path or path.startswith("file://")


def zarr_options(path, storage_options):
    """The ``storage_options`` to give Zarr for ``path``: None for a local path (Zarr refuses options for a store
    that is not an fsspec URL, and a command's options for its object store may reach a local output too)."""
    return None if is_local(os.fspath(path)) else storage_options


def local_path(path: str) -> str:
    """``path`` without its ``file://`` scheme."""
    return path[len("file://") :] if path.startswith("file://") else path


def prepare_output(path, overwrite: bool, storage_options=None) -> str:
    """Check that an output path may be written; return it as a string.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``overwrite`` is False.
    """
    path = os.fspath(path)
    if is_local(path) and os.path.exists(local_path(path)) and not overwrite:
        raise OutputExistsError(
            f"{path!r} exists already; choose another path or pass overwrite=True (CLI: --overwrite)."
        )
    if is_local(path):
        parent = os.path.dirname(os.path.abspath(local_path(path)))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"Cannot write {path!r}: the folder {parent!r} does not exist.")
    return path
