"""Where a checkpoint's files live: a folder of a local or shared filesystem, or a prefix of an object store.

:class:`~daskmeans.storage.checkpoint.Checkpoint` asks the same few things of both (list the entries, read and
write the small marker and pointer files, publish the pointer, delete old versions); the two differ in how a version
becomes the current one:

- on a filesystem, the files are flushed (fsync) and ``CURRENT`` is replaced atomically by renaming a flushed
  temporary file over it;
- on an object store, which has no rename, the version is written completely under its fresh ``vN-TOKEN/`` prefix
  and then ``CURRENT`` is overwritten by one PUT of a small object, which is atomic: a reader sees the old pointer
  or the new one, never a part. Each object is durable once its write has returned.
"""

from __future__ import annotations

import os
import shutil
import uuid

from .publish import local_path
from .remote import filesystem, store_error
from .zarr_safe import fsync_dir, fsync_files, read_plain_file


def checkpoint_store(path: str, storage_options=None):
    """The store of a checkpoint at ``path``: a :class:`LocalStore` for a path or ``file://`` URL, else an
    :class:`ObjectStore` opened with ``storage_options``."""
    if "://" in path and not path.startswith("file://"):
        return ObjectStore(path, storage_options)
    return LocalStore(os.path.abspath(local_path(path)))


class LocalStore:
    """A checkpoint folder on a filesystem of this machine (or one shared by the workers)."""

    storage_options = None

    def __init__(self, root: str):
        self.root = root

    def join(self, *names) -> str:
        return os.path.join(self.root, *names)

    def kind(self) -> str:
        """``"missing"``, ``"file"`` or ``"directory"``: what ``root`` is."""
        if os.path.isfile(self.root):
            return "file"
        return "directory" if os.path.isdir(self.root) else "missing"

    def listdir(self) -> list[str]:
        return os.listdir(self.root)

    def exists(self, name: str) -> bool:
        return os.path.lexists(self.join(name))

    def read_text(self, name: str, max_bytes: int) -> str:
        """The text of a small file; ``OSError`` unless it is a plain file of at most ``max_bytes``."""
        return read_plain_file(self.join(name), max_bytes)

    def write_text(self, name: str, text: str) -> None:
        with open(self.join(name), "w", encoding="utf-8") as handle:
            handle.write(text)

    def publish(self, name: str, text: str) -> None:
        """Replace the file ``name`` by ``text`` atomically: a flushed temporary file renamed over it."""
        target = self.join(name)
        temporary = f"{target}.tmp-{uuid.uuid4().hex}"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
        fsync_dir(self.root)

    def version_problem(self, name: str) -> str | None:
        """What is wrong with the version folder ``name`` (missing, a link), or None."""
        directory = self.join(name)
        if not os.path.isdir(directory):
            return "missing"
        if os.path.islink(directory):
            return "a symbolic link, which daskmeans never writes nor follows"
        return None

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def flush_version(self, directory: str) -> None:
        """Flush a version's group file and the folders that list it."""
        fsync_files(directory, "zarr.json")
        fsync_dir(directory)
        fsync_dir(self.root)

    def remove(self, names) -> None:
        for name in names:
            path = self.join(name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except OSError:
                    pass


class ObjectStore:
    """A checkpoint under a prefix of an object store (``s3://bucket/run.ckpt``), through fsspec.

    Parameters
    ----------
    url : str
    storage_options : dict, optional
        Options of the store's fsspec filesystem; they go with the version paths to the workers that write
        pieces of a version (``extra_writer``).
    """

    def __init__(self, url: str, storage_options=None):
        self.root = url.rstrip("/")
        self.storage_options = storage_options
        self.fs, self.path = filesystem(self.root, storage_options)

    def join(self, *names) -> str:
        return "/".join((self.root, *names))

    def _key(self, name: str) -> str:
        return f"{self.path}/{name}"

    def _call(self, operation, *args, **kwargs):
        """``operation(*args)`` of the filesystem, with a store that cannot be reached said as such."""
        try:
            return operation(*args, **kwargs)
        except FileNotFoundError:
            raise
        except Exception as error:
            raised = store_error(self.root, error, self.storage_options, "the checkpoint")
            if raised is error:
                raise
            raise raised from error

    def kind(self) -> str:
        """What ``root`` is, from one listing (which also says at once when the store cannot be reached)."""
        self.fs.invalidate_cache()  # another process (a killed driver) may have written since this one looked
        try:
            entries = self._call(self.fs.ls, self.path, detail=True, refresh=True)
        except FileNotFoundError:
            return "missing"
        if len(entries) == 1 and entries[0]["name"].rstrip("/") == self.path and entries[0]["type"] == "file":
            return "file"
        return "directory" if entries else "missing"

    def listdir(self) -> list[str]:
        try:
            entries = self._call(self.fs.ls, self.path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries if entry.rstrip("/") != self.path]

    def exists(self, name: str) -> bool:
        return name in self.listdir()

    def read_text(self, name: str, max_bytes: int) -> str:
        key = self._key(name)
        size = self._call(self.fs.size, key)
        if size is not None and size > max_bytes:
            raise OSError(f"{name} holds {size:,} bytes, more than the {max_bytes:,} daskmeans writes")
        return self._call(self.fs.cat_file, key).decode("utf-8")

    def write_text(self, name: str, text: str) -> None:
        self._call(self.fs.pipe_file, self._key(name), text.encode("utf-8"))

    def publish(self, name: str, text: str) -> None:
        """Overwrite the object ``name`` with ``text``: one PUT, which an object store applies atomically."""
        self.write_text(name, text)

    def version_problem(self, name: str) -> str | None:
        try:
            found = self._call(self.fs.exists, self._key(f"{name}/zarr.json"))
        except FileNotFoundError:
            found = False
        return None if found else "missing"

    def makedirs(self, path: str) -> None:
        """Nothing: an object store has no folders."""

    def flush_version(self, directory: str) -> None:
        """Nothing: every object is durable once its write has returned."""

    def remove(self, names) -> None:
        for name in names:
            try:
                self.fs.rm(self._key(name), recursive=True)
            except Exception:  # noqa: BLE001 - what is left is removed by a later save
                pass
