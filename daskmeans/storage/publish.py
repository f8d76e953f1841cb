"""Publishing outputs whole: a directory-shaped output (a model, labels, a dataset) appears at its path only when
complete, an existing one is replaced only when asked to, and of several runs that publish the same path without
``overwrite`` only one succeeds.

Local disks
    The output is written under a temporary name beside its path (``.NAME.tmp-XXXXXXXX``) and renamed into place
    when complete. Without ``overwrite`` the rename is exclusive: ``renameat2(RENAME_NOREPLACE)`` on Linux (glibc
    2.28 and later), elsewhere (or on a file system without it) an empty folder made at the path first
    (``mkdir`` fails when the path exists) and the output renamed onto it. Whatever appeared at the path while the
    output was written is kept, and the later writer fails with :class:`~daskmeans.exceptions.OutputExistsError`.
    With ``overwrite`` the new output is exchanged with the old one in one step (``RENAME_EXCHANGE``; elsewhere two
    renames, with a moment when nothing is at the path), and the old one removed after.

Object stores (any fsspec URL: ``s3://``, ``gs://``, ...)
    There is no rename, so a reader must be able to tell a complete output from a partial one. The commit point is
    the root metadata (``zarr.json``, or ``.zgroup``/``.zarray``/``.zmetadata`` for Zarr 2): it is written last,
    and an output without it is refused by every reader of daskmeans (:func:`check_complete`: "was not completely
    written (an interrupted run?); write it again with --overwrite").

    1. Claim: the object ``PATH/.daskmeans-claim`` is created with a conditional create (S3 ``If-None-Match: *``,
       fsspec's ``pipe_file(..., mode="create")``), which fails when it exists: of two runs writing the same path
       without ``overwrite`` only one gets it, at the start, before any work. With ``overwrite`` the claim is
       written unconditionally and holds a token of this run.
    2. Stage: the output is written under ``PATH/.daskmeans-staging-XXXXXXXX/``. An existing output at ``PATH``
       stays complete and readable meanwhile.
    3. Commit: the claim must still hold this run's token (another run with ``overwrite`` may have taken it; then
       this run fails). The old output's root metadata is removed first (from then on ``PATH`` reads as
       incomplete, never as a mix of old and new), then its other metadata, then everything else under ``PATH``
       (old chunks, staging left by killed runs). The staged objects are copied server-side: chunks first, then
       the metadata of nested arrays and groups, the root metadata last.
    4. Clean up: the staging prefix and the claim are removed.

    moto's S3 server and AWS S3 honour the conditional create; on a filesystem whose ``pipe_file`` has no
    conditional create of its own, fsspec looks before it writes, which narrows the race but does not close it.

    A failure before the commit removes the staging prefix and the claim: nothing is left, and an existing output
    is untouched. A run killed at any point leaves at most a claim, staged objects and old or new objects without
    root metadata: ``PATH`` then exists (a write without ``overwrite`` is refused) but reads as incomplete, and a
    write with ``overwrite`` removes all of it. Between two runs that both pass ``overwrite``, the one that commits
    last wins; the other fails or its objects are removed before the winner's root metadata is written.

Several outputs published together (:class:`publication`; the CLI's model and labels) are moved or committed one
after the other only once all are written; when one cannot be published, those already published by it are taken
back (renamed back on a local disk, their root metadata removed on an object store), so two runs never each leave
one output of the pair.

Consolidated metadata: a Zarr group is consolidated (:func:`zarr.consolidate_metadata`) just before it is
published, so that readers (Zarr, ``xarray.open_zarr``) get every array's metadata in one read; an output written
inside a Zarr group with consolidated metadata (labels beside the data, ``data.zarr/labels``) gets the group's
consolidated metadata written again after it is published (dropped before an existing output there is replaced).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
import uuid
import warnings

from .. import config
from ..exceptions import OutputExistsError
from .locations import (
    METADATA_NAMES,
    check_complete,
    consolidate,
    consolidated_parent,
    drop_consolidated,
    exists,
    filesystem,
    has_root_metadata,
    is_local,
    local_path,
    zarr_options,
)
from .renames import exchange, remove_path, rename_exclusive

__all__ = [
    "atomic_output",
    "check_complete",
    "consolidate",
    "exists",
    "filesystem",
    "has_root_metadata",
    "is_local",
    "local_path",
    "prepare_output",
    "publication",
    "rename_exclusive",
    "settle_zarr_io",
    "zarr_options",
]

#: Name of the object that claims an object-store output while it is written.
CLAIM_NAME = ".daskmeans-claim"
#: What an object-store output without its root metadata is, in the error that refuses to write it.
UNFINISHED_OUTPUT = "another run is writing it, or an interrupted run left it"
#: Prefix (under the output's path) of the objects of an object-store output being written.
STAGING_PREFIX = ".daskmeans-staging-"

_STAGING_OPEN: set[str] = set()  # staging paths of outputs being written in this process
_STAGING_LOCK = threading.Lock()

# -- object stores ---------------------------------------------------------------------------------------------------


def _relative(key: str, root: str) -> str:
    return key[len(root) :].lstrip("/")


def _is_metadata(relative: str) -> bool:
    return relative.rsplit("/", 1)[-1] in METADATA_NAMES


def _metadata_rank(relative: str) -> tuple:
    """Sort key of the objects of an output in publishing order: chunks, nested metadata, root metadata."""
    if "/" not in relative and relative in METADATA_NAMES:
        return (2, METADATA_NAMES.index(relative), relative)
    return (1 if _is_metadata(relative) else 0, 0, relative)


def _listing(fs, key: str) -> list[str]:
    fs.invalidate_cache()
    try:
        return sorted(fs.find(key))
    except FileNotFoundError:
        return []


# -- outputs ---------------------------------------------------------------------------------------------------------


class _Output:
    """One output of a :class:`publication`: where it is written, how it is published and taken back."""

    def __init__(self, path, overwrite: bool, storage_options: dict | None):
        path = os.fspath(path)
        with _STAGING_LOCK:
            self.nested = path in _STAGING_OPEN  # written inside an output being published: written in place
        self.path = path if self.nested else prepare_output(path, overwrite, storage_options)
        self.overwrite, self.storage_options = overwrite, storage_options
        self.local = is_local(self.path)
        self.token = uuid.uuid4().hex
        self.state = "new"  # new -> claimed -> published -> finished | discarded
        self.parent = None
        if self.nested:
            self.staging = self.path
        elif self.local:
            self.target = os.path.abspath(local_path(self.path))
            folder, name = os.path.split(self.target)
            self.staging = os.path.join(folder, f".{name}.tmp-{self.token[:8]}")
            self.old = None
        else:
            self.fs, self.key = filesystem(self.path, storage_options)
            self.staging = f"{self.path.rstrip('/')}/{STAGING_PREFIX}{self.token[:8]}"
            self.staging_key = f"{self.key}/{STAGING_PREFIX}{self.token[:8]}"
            self.claim_key = f"{self.key}/{CLAIM_NAME}"

    # claim ------------------------------------------------------------------------------------------------------

    def claim(self) -> None:
        if not self.nested and not self.local:
            record = json.dumps(
                {"token": self.token, "host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}
            ).encode()
            try:
                self.fs.pipe_file(self.claim_key, record, mode="overwrite" if self.overwrite else "create")
            except FileExistsError:
                raise OutputExistsError(
                    f"{self.path!r} exists already ({UNFINISHED_OUTPUT}); "
                    "choose another path or pass overwrite=True (CLI: --overwrite).",
                    unfinished=True,
                ) from None
        if not self.nested:
            with _STAGING_LOCK:
                _STAGING_OPEN.add(self.staging)
        self.state = "claimed"

    def _claim_is_ours(self) -> bool:
        try:
            record = json.loads(self.fs.cat_file(self.claim_key))
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("token") == self.token

    # publish ----------------------------------------------------------------------------------------------------

    def seal(self) -> None:
        """Consolidate the staged output's metadata (a group) before it is published."""
        if not self.nested:
            consolidate(self.staging, self.storage_options)

    def publish(self) -> None:
        if self.nested:
            return
        self.parent = consolidated_parent(self.path, self.storage_options)
        if self.parent is not None and exists(self.path, self.storage_options):
            drop_consolidated(self.parent, self.storage_options)  # its entry for the old output goes stale
        if self.local:
            self._publish_local()
        else:
            self._publish_remote()
        self.state = "published"

    def _publish_local(self) -> None:
        if not os.path.lexists(self.staging):
            raise FileNotFoundError(f"Nothing was written for {self.path!r}.")
        if self.overwrite and os.path.lexists(self.target):
            if exchange(self.staging, self.target):
                self.old = self.staging  # the old output, now at the temporary name
                return
            self.old = f"{self.staging}.old"
            os.rename(self.target, self.old)
            os.rename(self.staging, self.target)
            return
        try:
            rename_exclusive(self.staging, self.target)
        except FileExistsError:
            raise OutputExistsError(
                f"{self.path!r} exists already (another run published it while this one was writing); "
                "choose another path or pass overwrite=True (CLI: --overwrite)."
            ) from None

    def _publish_remote(self) -> None:
        if not self._claim_is_ours():
            raise OutputExistsError(
                f"{self.path!r} is being written by another run at the same time (it took the claim "
                f"{CLAIM_NAME!r}); nothing of this run was published. Write it once, or to another path."
            )
        staged = _listing(self.fs, self.staging_key)
        if not staged:
            raise FileNotFoundError(f"Nothing was written for {self.path!r}.")
        keep = (self.staging_key + "/", self.claim_key)
        old = [key for key in _listing(self.fs, self.key) if not key.startswith(keep)]
        for rank in (2, 1, 0):  # root metadata first: the old output reads as incomplete from then on
            doomed = [key for key in old if _metadata_rank(_relative(key, self.key))[0] == rank]
            doomed.sort(key=lambda key: _metadata_rank(_relative(key, self.key)), reverse=True)
            if doomed:
                self.fs.rm(doomed)
        ordered = sorted(staged, key=lambda key: _metadata_rank(_relative(key, self.staging_key)))
        for rank in (0, 1):
            batch = [key for key in ordered if _metadata_rank(_relative(key, self.staging_key))[0] == rank]
            if batch:
                self.fs.copy(batch, [f"{self.key}/{_relative(key, self.staging_key)}" for key in batch])
        for key in ordered:  # root metadata, one at a time and in order, the commit point last
            if _metadata_rank(_relative(key, self.staging_key))[0] == 2:
                self.fs.copy(key, f"{self.key}/{_relative(key, self.staging_key)}")

    def take_back(self) -> None:
        """Undo :meth:`publish` when another output of the same publication could not be published."""
        if self.state != "published" or self.nested:
            return
        if self.local:
            if self.old == self.staging:
                exchange(self.staging, self.target)  # the old output back in place
                self.old = None
            elif self.old is not None:
                os.rename(self.target, self.staging)
                os.rename(self.old, self.target)
                self.old = None
            else:
                os.rename(self.target, self.staging)
        else:
            for name in reversed(METADATA_NAMES):
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(f"{self.key}/{name}")
        self.state = "claimed"

    def finish(self) -> None:
        """Remove what publishing left (the old output, staging, the claim); consolidate the parent group.

        The output is published by then: a failure here is a warning, not an error (what is left over is hidden
        from readers, and a later write with ``overwrite`` removes it)."""
        if self.nested:
            return
        try:
            if self.local:
                if self.old is not None:
                    remove_path(self.old)
            else:
                self.fs.rm(self.staging_key, recursive=True)
                if self._claim_is_ours():
                    self.fs.rm_file(self.claim_key)
            if self.parent is not None:
                consolidate(self.parent, self.storage_options)
        except Exception as error:  # noqa: BLE001 - published already: say what was left, do not fail the write
            warnings.warn(
                f"{self.path!r} was published, but cleaning up after it failed ({error}); the group holding it may "
                "lack consolidated metadata, or leftovers of the write may remain under it.",
                RuntimeWarning,
                stacklevel=3,
            )
        finally:
            self._release()
            self.state = "finished"

    def discard(self) -> None:
        """Remove a staged output that is not published (and the claim); an existing output is left as it was."""
        if self.state in ("finished", "discarded"):
            return
        if not self.nested:
            settle_zarr_io()
            with contextlib.suppress(Exception):  # the store may be gone: the error that led here is what matters
                if self.local:
                    remove_path(self.staging)
                else:
                    self.fs.rm(self.staging_key, recursive=True)
            with contextlib.suppress(Exception):
                if not self.local and self._claim_is_ours():
                    self.fs.rm_file(self.claim_key)
        self._release()
        self.state = "discarded"

    def _release(self) -> None:
        with _STAGING_LOCK:
            _STAGING_OPEN.discard(self.staging)


class publication:
    """Several outputs written apart and published together, when the block ends without an error.

    ``with publication(overwrite) as outputs: write to outputs.output(path) ...``. Each :meth:`output` checks its
    path (:func:`prepare_output`; an object store's output is claimed then) and gives where to write it. On leaving
    the block the outputs are published in the order they were added; when one cannot be (it appeared meanwhile
    and ``overwrite`` is False, a write fails), the ones already published by this block are taken back and the
    error raised. An error inside the block removes every staged output. See the module's description for how a
    local disk and an object store publish.

    Parameters
    ----------
    overwrite : bool
        Replace existing outputs.
    storage_options : dict, optional
        Options of the fsspec filesystem of URL paths.

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> folder = tempfile.TemporaryDirectory()
    >>> with publication() as outputs:
    ...     a = zarr.create_array(outputs.output(os.path.join(folder.name, "a.zarr")), shape=(2,), dtype="i4")
    ...     b = zarr.create_array(outputs.output(os.path.join(folder.name, "b.zarr")), shape=(2,), dtype="i4")
    >>> sorted(os.listdir(folder.name))
    ['a.zarr', 'b.zarr']
    >>> folder.cleanup()
    """

    def __init__(self, overwrite: bool = False, *, storage_options: dict | None = None):
        self.overwrite, self.storage_options = overwrite, storage_options
        self.outputs: list[_Output] = []

    def output(self, path) -> str:
        """Check and (object store) claim ``path``; return where to write its output."""
        output = _Output(path, self.overwrite, self.storage_options)
        output.claim()
        self.outputs.append(output)
        return output.staging

    def __enter__(self) -> publication:
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self._discard()
            return False
        published = []
        try:
            for output in self.outputs:
                output.seal()
            if config.PUBLISH_PAUSE_SECONDS > 0:
                time.sleep(config.PUBLISH_PAUSE_SECONDS)
            for output in self.outputs:
                output.publish()
                published.append(output)
        except BaseException:
            for output in reversed(published):
                with contextlib.suppress(Exception):
                    output.take_back()
            self._discard()
            raise
        for output in self.outputs:
            output.finish()
        return False

    def _discard(self) -> None:
        for output in reversed(self.outputs):
            output.discard()


class atomic_output:
    """Write a directory-shaped output apart and publish it at ``path`` only when complete.

    Use as ``with atomic_output(path, overwrite) as tmp: write to tmp``. On an exception the staged output is
    removed and an existing output at ``path`` is left untouched. Without ``overwrite``, an output that appeared at
    ``path`` while this one was written is kept and :class:`~daskmeans.exceptions.OutputExistsError` raised. A
    local output is renamed into place; an object store's is claimed, staged under ``path`` and committed by its
    root metadata, written last (see the module's description). ``path`` itself being where an enclosing output
    is staged (a :class:`publication`'s), it is written in place, and published with that output.

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> folder = tempfile.TemporaryDirectory()
    >>> with atomic_output(os.path.join(folder.name, "x.zarr")) as tmp:
    ...     _ = zarr.create_array(tmp, shape=(3,), dtype="i4")
    >>> os.listdir(folder.name)
    ['x.zarr']
    >>> folder.cleanup()
    """

    def __init__(self, path, overwrite: bool = False, *, storage_options: dict | None = None):
        self.publication = publication(overwrite, storage_options=storage_options)
        self.path = os.fspath(path)
        prepare_output(self.path, overwrite, storage_options) if not _is_staging(self.path) else None

    def __enter__(self) -> str:
        return self.publication.output(self.path)

    def __exit__(self, exc_type, exc, tb):
        return self.publication.__exit__(exc_type, exc, tb)


def _is_staging(path: str) -> bool:
    with _STAGING_LOCK:
        return path in _STAGING_OPEN


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


def prepare_output(path, overwrite: bool, storage_options: dict | None = None) -> str:
    """Check that an output path may be written; return it as a string.

    Raises
    ------
    OutputExistsError
        Something is at ``path`` (on an object store: any object under it) and ``overwrite`` is False.
    FileNotFoundError
        The local folder that would hold ``path`` does not exist.
    """
    path = os.fspath(path)
    if not overwrite and exists(path, storage_options):
        unfinished = not is_local(path) and not has_root_metadata(path, storage_options)
        raise OutputExistsError(
            f"{path!r} exists already"
            + (f" ({UNFINISHED_OUTPUT})" if unfinished else "")
            + "; choose another path or pass overwrite=True (CLI: --overwrite).",
            unfinished=unfinished,
        )
    if is_local(path):
        parent = os.path.dirname(os.path.abspath(local_path(path)))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"Cannot write {path!r}: the folder {parent!r} does not exist.")
    return path
