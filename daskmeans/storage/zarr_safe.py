"""Safe Zarr groups on disk: atomic output folders, flushed writes, and reads that decode numbers only.

Models (:mod:`daskmeans.storage.model`) and checkpoints (:mod:`daskmeans.storage.checkpoint`) are Zarr groups of
numeric arrays plus JSON attributes. Reading one checks every array's codecs against :data:`SAFE_CODECS` and its
dtype before any chunk is decoded, so no file can make daskmeans unpickle or run anything.
"""

from __future__ import annotations

import os
import shutil
import uuid

import numpy as np
import zarr

from ..exceptions import CheckpointError, ModelFileError, OutputExistsError


def _fsync_tree(directory):
    """Flush every file under ``directory``, and ``directory`` itself, to disk."""
    for folder, _, files in os.walk(directory):
        _fsync_files(folder, *files)
    _fsync_dir(directory)


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_files(directory, *names):
    for name in names:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_group(directory, arrays: dict, attrs: dict | None = None):
    """Write NumPy arrays (numeric or bool) as one Zarr group at ``directory`` and flush it to disk.

    Used by the driver for the state and by workers for their own pieces (``extra_writer``).
    """
    group = zarr.create_group(store=os.fspath(directory), zarr_format=3, overwrite=True, attributes=attrs or {})
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        if value.dtype.kind not in "fiub":
            raise CheckpointError(f"checkpoint array {name!r} has dtype {value.dtype}; only numbers can be saved.")
        array = group.create_array(name, shape=value.shape, dtype=value.dtype,
                                   chunks=tuple(max(1, s) for s in value.shape) or None,
                                   chunk_key_encoding={"name": "v2", "separator": "."}, compressors=None)
        if value.size:
            array[...] = value
    _fsync_tree(directory)


def _open_group(directory, what):
    try:
        return zarr.open_group(store=os.fspath(directory), mode="r")
    except Exception as error:
        raise CheckpointError(f"{what} is damaged: {os.fspath(directory)!r} is not a readable Zarr group ({error}).") \
            from error


def _read_array(group, name, what):
    """One array, after checking that reading it decodes numbers only (no pickle, no object dtype)."""
    return read_safe_array(group, name, what, error=CheckpointError)


def read_group(directory, names, what="checkpoint"):
    """Read the arrays ``names`` of the Zarr group at ``directory`` with the safety checks (workers use it too)."""
    group = _open_group(directory, what)
    return {name: _read_array(group, name, what) for name in names}


#: Codecs a model array may use; anything else (pickle, vlen object codecs, ...) is refused before reading.
SAFE_CODECS = {
    "bytes", "blosc", "zstd", "gzip", "zlib", "crc32c", "transpose", "lz4", "bz2", "lzma", "shuffle",
}


def _codec_names(array) -> set[str]:
    metadata = array.metadata.to_dict()
    names = set()

    def visit(node):
        if isinstance(node, dict):
            for key in ("name", "id"):
                if isinstance(node.get(key), str):
                    names.add(node[key])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    for key in ("codecs", "filters", "compressor", "compressors"):
        visit(metadata.get(key))
    return names


def read_safe_array(group, name, what, error=ModelFileError):
    """One array of a daskmeans Zarr group (model or checkpoint), read only if decoding it can run no code.

    The metadata is checked before any chunk is decoded: a numeric dtype (no object or string arrays) and
    codecs from :data:`SAFE_CODECS` only (no pickle or other codec that daskmeans never writes).

    Parameters
    ----------
    group : zarr.Group
    name : str
    what : str
        How messages name the file (``"'model.zarr'"``, ``"The checkpoint 'run.ckpt'"``).
    error : type
        The exception raised (:class:`ModelFileError`, or ``CheckpointError`` for checkpoints).

    Returns
    -------
    ndarray
    """
    try:
        array = group[name]
    except KeyError:
        raise error(f"{what} is damaged: the array {name!r} is missing.") from None
    except Exception as exc:  # metadata zarr cannot even parse (e.g. an object dtype): nothing was decoded
        raise error(f"{what} is damaged or foreign: array {name!r} cannot be opened ({exc}); it was not read.") \
            from exc
    if not isinstance(array, zarr.Array):
        raise error(f"{what} is damaged: {name!r} is not an array.")
    if array.dtype.kind not in "fiub":
        raise error(f"{what}: array {name!r} has dtype {array.dtype}; daskmeans writes numeric arrays only. It is "
                    "foreign or was tampered with; it was not read.")
    unsafe = _codec_names(array) - SAFE_CODECS
    if unsafe:
        raise error(f"{what}: array {name!r} uses codec(s) {sorted(unsafe)}, which daskmeans never writes (they "
                    "could run code when decoding); it was not read.")
    try:
        return np.asarray(array[...])
    except Exception as exc:  # a damaged chunk: say which file and array
        raise error(f"{what} is damaged: cannot read array {name!r}: {exc}") from exc


class atomic_output:
    """Write a directory-shaped output under a temporary name and move it into place only when complete.

    Use as ``with atomic_output(path, overwrite) as tmp: write to tmp``. On an exception the temporary
    output is removed and an existing output at ``path`` is left untouched. Remote (fsspec) URLs are written
    in place, as object stores have no rename.
    """

    def __init__(self, path, overwrite: bool = False):
        self.path = prepare_output(path, overwrite)
        self.local = _is_local(self.path)
        if self.local:
            target = os.path.abspath(_local(self.path))
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


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def prepare_output(path, overwrite: bool) -> str:
    """Check that an output path may be written; return it as a string.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``overwrite`` is False.
    """
    path = os.fspath(path)
    if _is_local(path) and os.path.exists(_local(path)) and not overwrite:
        raise OutputExistsError(
            f"{path!r} exists already; choose another path or pass overwrite=True (CLI: --overwrite)."
        )
    if _is_local(path):
        parent = os.path.dirname(os.path.abspath(_local(path)))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"Cannot write {path!r}: the folder {parent!r} does not exist.")
    return path
