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
import ctypes
import errno
import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
import warnings

from .. import config
from ..exceptions import OutputExistsError

#: Name of the object that claims an object-store output while it is written.
CLAIM_NAME = ".daskmeans-claim"
#: Prefix (under the output's path) of the objects of an object-store output being written.
STAGING_PREFIX = ".daskmeans-staging-"
#: A Zarr node's metadata documents, in the order they are published (``zarr.json`` and ``.zmetadata`` last).
METADATA_NAMES = (".zattrs", ".zarray", ".zgroup", "zarr.json", ".zmetadata")

_STAGING_OPEN: set[str] = set()  # staging paths of outputs being written in this process
_STAGING_LOCK = threading.Lock()

# -- local renames ---------------------------------------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc before 2.28, or another C library
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _renameat2()


def _rename2(source: str, target: str, flags: int) -> bool:
    """``renameat2(source, target, flags)``; False when this system or file system does not have it."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP)):
        return False
    raise OSError(code, os.strerror(code), source, None, target)


def rename_exclusive(source: str, target: str) -> None:
    """Rename ``source`` (a file or folder) to ``target``, which must not exist; FileExistsError when it does.

    ``renameat2(RENAME_NOREPLACE)`` where the system has it; else a folder is renamed onto an empty folder made
    at ``target`` first (``mkdir`` is exclusive), and a file is hard-linked to ``target`` (``link`` is exclusive).

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> a, b = os.path.join(folder.name, "a"), os.path.join(folder.name, "b")
    >>> os.mkdir(a); os.mkdir(b); open(os.path.join(b, "f"), "w").close()
    >>> rename_exclusive(a, b)
    Traceback (most recent call last):
    FileExistsError: ...
    >>> folder.cleanup()
    """
    try:
        if _rename2(source, target, _RENAME_NOREPLACE):
            return
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(errno.EEXIST, "File exists", target) from None
        raise
    if not os.path.isdir(source):
        os.link(source, target)
        os.remove(source)
        return
    os.mkdir(target)  # FileExistsError: something is there
    try:
        os.replace(source, target)  # onto the empty folder made here (POSIX); elsewhere it must go first
    except OSError:
        os.rmdir(target)
        os.rename(source, target)


def _exchange(source: str, target: str) -> bool:
    """Swap ``source`` and ``target`` in one step; False when the system cannot (nothing was changed)."""
    try:
        return _rename2(source, target, _RENAME_EXCHANGE)
    except FileNotFoundError:
        return False


def _remove_local(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


# -- object stores ---------------------------------------------------------------------------------------------------


def filesystem(path: str, storage_options: dict | None = None):
    """``(fsspec filesystem, path without the protocol)`` of a URL, with ``storage_options``.

    Examples
    --------
    >>> fs, key = filesystem("memory://outputs/model.zarr")
    >>> type(fs).__name__, key
    ('MemoryFileSystem', '/outputs/model.zarr')
    """
    import fsspec

    fs, key = fsspec.core.url_to_fs(path, **(storage_options or {}))
    return fs, key.rstrip("/")


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


# -- readers ---------------------------------------------------------------------------------------------------------


def has_root_metadata(path, storage_options: dict | None = None) -> bool:
    """Whether a Zarr node's root metadata (``zarr.json``, ``.zgroup`` or ``.zarray``) is at ``path``.

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> folder = tempfile.TemporaryDirectory()
    >>> _ = zarr.create_array(os.path.join(folder.name, "x.zarr"), shape=(3,), dtype="i4")
    >>> has_root_metadata(os.path.join(folder.name, "x.zarr")), has_root_metadata(folder.name)
    (True, False)
    >>> folder.cleanup()
    """
    path = os.fspath(path)
    names = ("zarr.json", ".zgroup", ".zarray")
    if is_local(path):
        return any(os.path.isfile(os.path.join(local_path(path), name)) for name in names)
    fs, key = filesystem(path, storage_options)
    fs.invalidate_cache()
    return any(fs.isfile(f"{key}/{name}") for name in names)


def check_complete(path, what: str, error: type[Exception], storage_options: dict | None = None) -> None:
    """Refuse an output that exists without its root metadata: one that a run did not finish publishing.

    Raises
    ------
    error
        Something is at ``path`` but no Zarr root metadata: "was not completely written (an interrupted run?)".
    FileNotFoundError
        Nothing is at ``path``.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> os.mkdir(os.path.join(folder.name, "model.zarr"))
    >>> check_complete(os.path.join(folder.name, "model.zarr"), "'model.zarr'", ValueError)
    Traceback (most recent call last):
    ValueError: 'model.zarr' was not completely written (an interrupted run?); write it again with --overwrite ...
    >>> folder.cleanup()
    """
    path = os.fspath(path)
    if has_root_metadata(path, storage_options):
        return
    if not exists(path, storage_options):
        raise FileNotFoundError(f"Nothing at {path!r}. Check the path.")
    raise error(
        f"{what} was not completely written (an interrupted run?); write it again with --overwrite "
        "(overwrite=True in Python)."
    )


def exists(path, storage_options: dict | None = None) -> bool:
    """Whether anything is at ``path``: a file or folder, or any object under an object-store prefix.

    Examples
    --------
    >>> exists("memory://nothing/here")
    False
    """
    path = os.fspath(path)
    if is_local(path):
        return os.path.lexists(local_path(path))
    fs, key = filesystem(path, storage_options)
    fs.invalidate_cache()
    return bool(fs.exists(key))


# -- consolidated metadata -------------------------------------------------------------------------------------------


def _zarr_store(path: str, storage_options: dict | None):
    if is_local(path):
        return local_path(path)
    from zarr.storage import FsspecStore

    return FsspecStore.from_url(path, storage_options=storage_options, read_only=False)


def _read_json(path: str, storage_options: dict | None):
    try:
        if is_local(path):
            with open(local_path(path), "rb") as handle:
                return json.loads(handle.read())
        fs, key = filesystem(path, storage_options)
        return json.loads(fs.cat_file(key))
    except (OSError, ValueError):
        return None


def _group_kind(path: str, storage_options: dict | None) -> str | None:
    """``"v3"`` or ``"v2"`` for a Zarr group at ``path``, None for anything else."""
    root = _read_json(f"{path.rstrip('/')}/zarr.json", storage_options)
    if isinstance(root, dict):
        return "v3" if root.get("node_type") == "group" else None
    return "v2" if _read_json(f"{path.rstrip('/')}/.zgroup", storage_options) is not None else None


def consolidate(path, storage_options: dict | None = None) -> bool:
    """Write the consolidated metadata of the Zarr group at ``path``; False (nothing done) for anything else.

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> folder = tempfile.TemporaryDirectory()
    >>> group = zarr.open_group(os.path.join(folder.name, "g.zarr"), mode="w")
    >>> _ = group.create_array("x", shape=(3,), dtype="i4")
    >>> consolidate(os.path.join(folder.name, "g.zarr"))
    True
    >>> folder.cleanup()
    """
    import zarr

    path = os.fspath(path)
    kind = _group_kind(path, storage_options)
    if kind is None:
        return False
    with warnings.catch_warnings():  # Zarr 3 says that consolidated metadata is not in its format's specification
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(_zarr_store(path, storage_options), zarr_format=3 if kind == "v3" else 2)
    return True


def _consolidated_parent(path: str, storage_options: dict | None) -> str | None:
    """The folder holding ``path`` when it is a Zarr group with consolidated metadata, else None."""
    parent = path.rstrip("/").rsplit("/", 1)[0] if "/" in path.rstrip("/") else None
    if parent is None or parent.endswith(":/") or parent.endswith("://"):
        return None
    root = _read_json(f"{parent}/zarr.json", storage_options)
    if isinstance(root, dict):
        return parent if root.get("node_type") == "group" and root.get("consolidated_metadata") else None
    return parent if _read_json(f"{parent}/.zmetadata", storage_options) is not None else None


def _drop_consolidated(group: str, storage_options: dict | None) -> None:
    """Remove the consolidated metadata of a group (readers then list its members) before a member is replaced."""
    root = _read_json(f"{group}/zarr.json", storage_options)
    if isinstance(root, dict):
        root.pop("consolidated_metadata", None)
        data = json.dumps(root, indent=2).encode()
        if is_local(group):
            tmp = f"{local_path(group)}/.zarr.json.tmp-{uuid.uuid4().hex[:8]}"
            with open(tmp, "wb") as handle:
                handle.write(data)
            os.replace(tmp, f"{local_path(group)}/zarr.json")
        else:
            fs, key = filesystem(group, storage_options)
            fs.pipe_file(f"{key}/zarr.json", data)
    elif is_local(group):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{local_path(group)}/.zmetadata")
    else:
        fs, key = filesystem(group, storage_options)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(f"{key}/.zmetadata")


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
                    f"{self.path!r} exists already (another run is writing it, or an interrupted run left it); "
                    "choose another path or pass overwrite=True (CLI: --overwrite)."
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
        self.parent = _consolidated_parent(self.path, self.storage_options)
        if self.parent is not None and exists(self.path, self.storage_options):
            _drop_consolidated(self.parent, self.storage_options)  # its entry for the old output goes stale
        if self.local:
            self._publish_local()
        else:
            self._publish_remote()
        self.state = "published"

    def _publish_local(self) -> None:
        if not os.path.lexists(self.staging):
            raise FileNotFoundError(f"Nothing was written for {self.path!r}.")
        if self.overwrite and os.path.lexists(self.target):
            if _exchange(self.staging, self.target):
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
                _exchange(self.staging, self.target)  # the old output back in place
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
                    _remove_local(self.old)
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
                    _remove_local(self.staging)
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
            + (" (another run is writing it, or an interrupted run left it)" if unfinished else "")
            + "; choose another path or pass overwrite=True (CLI: --overwrite)."
        )
    if is_local(path):
        parent = os.path.dirname(os.path.abspath(local_path(path)))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"Cannot write {path!r}: the folder {parent!r} does not exist.")
    return path
