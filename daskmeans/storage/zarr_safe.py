"""Safe Zarr groups on disk or object storage: flushed writes, reads that decode numbers only, one JSON encoder.

Models (:mod:`daskmeans.storage.model`) and checkpoints (:mod:`daskmeans.storage.checkpoint`) are Zarr groups of
numeric arrays plus JSON attributes. Reading one checks every array's codecs against :data:`SAFE_CODECS` and its
dtype before any chunk is decoded, so no file can make daskmeans unpickle or run anything. Model attributes, fit
fingerprints, ``--json`` output and bench records become JSON through :func:`to_jsonable` or :func:`json_default`
(a checkpoint's state has its own typed encoding, which gives NumPy scalars back as they were).
"""

from __future__ import annotations

import math
import numbers
import os
import stat

import numpy as np
import zarr

from ..exceptions import CheckpointError, ModelFileError
from .publish import is_local, local_path, zarr_options

# -- JSON ------------------------------------------------------------------------------------------------------------


def json_default(value):
    """The ``default=`` hook of :func:`json.dumps` for what daskmeans reports: NumPy scalars and arrays, paths.

    Parameters
    ----------
    value : object
        What :mod:`json` cannot encode by itself.

    Returns
    -------
    object
        A Python number, list or string that :mod:`json` encodes.

    Raises
    ------
    TypeError
        Anything else, as :mod:`json` expects of the hook.
    """
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_jsonable(value, convert=None):
    """``value`` as plain JSON values, for attributes written to disk (model parameters, fingerprints).

    ``None``, bools and strings stay; integers (NumPy's too) become ``int``, other reals ``float``; lists and
    tuples become lists of converted items. Anything else goes to ``convert`` when given; by default dicts
    become dicts with string keys and converted values, arrays nested lists, and any other value ``None``.

    Parameters
    ----------
    value : object
    convert : callable, optional
        ``convert(value) -> JSON value`` for what is not a scalar, list or tuple (e.g. an array as a digest).

    Returns
    -------
    None, bool, str, int, float, list or dict
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item, convert) for item in value]
    if convert is not None:
        return convert(value)
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    return None


# -- flushing to disk ------------------------------------------------------------------------------------------------


def fsync_tree(directory):
    """Flush every file under ``directory``, and ``directory`` itself, to disk."""
    for folder, _, files in os.walk(directory):
        fsync_files(folder, *files)
    fsync_dir(directory)


def fsync_dir(directory):
    """Flush the entries of ``directory`` (new, renamed, removed files) to disk, where the platform can."""
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


def fsync_files(directory, *names):
    """Flush the files ``names`` of ``directory`` to disk."""
    for name in names:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- groups of numeric arrays ----------------------------------------------------------------------------------------


def write_group(directory, arrays: dict, attrs: dict | None = None, storage_options: dict | None = None):
    """Write NumPy arrays (numeric or bool) as one Zarr group at ``directory`` and flush it to disk.

    Used by the driver for the state and by workers for their own pieces (``extra_writer``). ``directory`` may be
    a URL (``s3://bucket/run.ckpt/...``), written with ``storage_options``; each object of an object store is
    complete once its write returns, so there is nothing to flush there.
    """
    directory = os.fspath(directory)
    group = zarr.create_group(
        store=directory,
        zarr_format=3,
        overwrite=True,
        attributes=attrs or {},
        storage_options=zarr_options(directory, storage_options),
    )
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        if value.dtype.kind not in "fiub":
            raise CheckpointError(f"checkpoint array {name!r} has dtype {value.dtype}; only numbers can be saved.")
        array = group.create_array(
            name,
            shape=value.shape,
            dtype=value.dtype,
            chunks=tuple(max(1, s) for s in value.shape) or None,
            chunk_key_encoding={"name": "v2", "separator": "."},
            compressors=None,
        )
        if value.size:
            array[...] = value
    if is_local(directory):
        fsync_tree(local_path(directory))


def open_group(directory, what, error=CheckpointError, max_entries=None, storage_options=None):
    """Open the Zarr group at ``directory`` (a path, or a URL opened with ``storage_options``) for reading;
    ``error`` (naming it ``what``) when it is not one.

    A local folder is checked first with :func:`check_tree` (no symbolic link, FIFO or device anywhere in it), so
    no read of the group can leave the folder or block.
    """
    directory = os.fspath(directory)
    check_tree(directory, what, error, max_entries=max_entries)
    try:
        return zarr.open_group(store=directory, mode="r", storage_options=zarr_options(directory, storage_options))
    except Exception as exc:
        raise error(f"{what} is damaged: {directory!r} is not a readable Zarr group ({exc}).") from exc


def read_group(directory, names, what="checkpoint", storage_options=None):
    """Read the arrays ``names`` of the Zarr group at ``directory`` (a path, or a URL read with
    ``storage_options``) with the safety checks (workers use it too)."""
    group = open_group(directory, what, storage_options=storage_options)
    return {name: read_safe_array(group, name, what, error=CheckpointError) for name in names}


def check_tree(directory, what, error=CheckpointError, max_entries=None):
    """Refuse a folder that holds anything but plain files and folders, before any file in it is opened.

    Only ``lstat`` is used (no file is opened): a symbolic link anywhere below ``directory`` (which could make a
    read leave the folder: another model's chunk, ``/dev/zero``) and a FIFO, socket or device (a read that blocks
    forever) are refused. ``directory`` itself may be a link (the path the user named); URLs are not checked
    (object stores have no links).

    Parameters
    ----------
    directory : str or os.PathLike
    what : str
        How messages name the file.
    error : type
        The exception raised.
    max_entries : int, optional
        Refuse a folder with more entries than this (a model holds a few files; a tampered one could hold
        millions to make loading slow).

    Raises
    ------
    error
    """
    directory = os.fspath(directory)
    if not is_local(directory):
        return
    root = local_path(directory)
    if not os.path.isdir(root):
        return  # opening it says what is wrong
    count = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise error(f"{what} cannot be read: listing {folder!r} failed ({exc}).") from exc
        for entry in entries:
            count += 1
            if max_entries is not None and count > max_entries:
                raise error(
                    f"{what} holds more than {max_entries} files, far more than daskmeans writes; it is "
                    "foreign or was tampered with, and was not read."
                )
            mode = entry.stat(follow_symlinks=False).st_mode
            relative = os.path.relpath(entry.path, root)
            if stat.S_ISLNK(mode):
                raise error(
                    f"{what} holds a symbolic link {relative!r} (to {os.readlink(entry.path)!r}); daskmeans "
                    "never writes links and does not follow them out of the folder. It was not read: "
                    "replace the link by a copy of the file if the file is trusted."
                )
            if stat.S_ISDIR(mode):
                pending.append(entry.path)
            elif not stat.S_ISREG(mode):
                raise error(
                    f"{what} holds {relative!r}, which is not a plain file (a FIFO, socket or device); it was not read."
                )


def read_plain_file(path, max_bytes):
    """The text (UTF-8) of ``path``, refused with ``OSError`` unless it is a plain file (not a link, FIFO or device)
    of at most ``max_bytes``: opened without following links and without blocking."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if os.path.islink(path):
            raise OSError(f"{os.path.basename(path)} is a symbolic link, which daskmeans never writes") from error
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{os.path.basename(path)} is not a plain file")
        if info.st_size > max_bytes:
            raise OSError(
                f"{os.path.basename(path)} holds {info.st_size:,} bytes, more than the {max_bytes:,} daskmeans writes"
            )
        return os.read(fd, max_bytes + 1).decode("utf-8")
    finally:
        os.close(fd)


# -- safe reads ------------------------------------------------------------------------------------------------------


#: Codecs a model array may use; anything else (pickle, vlen object codecs, ...) is refused before reading.
SAFE_CODECS = {
    "bytes",
    "blosc",
    "zstd",
    "gzip",
    "zlib",
    "crc32c",
    "transpose",
    "lz4",
    "bz2",
    "lzma",
    "shuffle",
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


#: The most chunks one array of a model or checkpoint may declare (daskmeans writes one per array).
MAX_CHUNKS = 4096
#: The most bytes one array of a model or checkpoint may declare (refused before any allocation or read).
MAX_ARRAY_BYTES = 16 * 2**30


def open_safe_array(
    group,
    name,
    what,
    error=ModelFileError,
    *,
    shape=None,
    expected=None,
    max_chunks=MAX_CHUNKS,
    max_bytes=MAX_ARRAY_BYTES,
):
    """One array of a daskmeans Zarr group, its metadata checked and nothing of its chunks read.

    Checked: a numeric dtype (no object or string arrays), codecs from :data:`SAFE_CODECS` only (no pickle or
    other codec that daskmeans never writes), the declared shape (``shape``, when given), at most ``max_chunks``
    chunks and ``max_bytes`` bytes.

    Parameters
    ----------
    group : zarr.Group
    name : str
    what : str
        How messages name the file (``"'model.zarr'"``, ``"The checkpoint 'run.ckpt'"``).
    error : type
        The exception raised (:class:`ModelFileError`, or ``CheckpointError`` for checkpoints).
    shape : tuple of int, optional
        The shape the array must have.
    expected : str, optional
        Where ``shape`` comes from, for the message (``"n_clusters=3 and n_features_in_=8"``).
    max_chunks, max_bytes : int

    Returns
    -------
    zarr.Array
    """
    try:
        array = group[name]
    except KeyError:
        raise error(f"{what} is damaged: the array {name!r} is missing.") from None
    except Exception as exc:  # metadata zarr cannot even parse (e.g. an object dtype): nothing was decoded
        raise error(f"{what} is damaged or foreign: array {name!r} cannot be opened ({exc}); it was not read.") from exc
    if not isinstance(array, zarr.Array):
        raise error(f"{what} is damaged: {name!r} is not an array.")
    if array.dtype.kind not in "fiub":
        raise error(
            f"{what}: array {name!r} has dtype {array.dtype}; daskmeans writes numeric arrays only. It is "
            "foreign or was tampered with; it was not read."
        )
    unsafe = _codec_names(array) - SAFE_CODECS
    if unsafe:
        raise error(
            f"{what}: array {name!r} uses codec(s) {sorted(unsafe)}, which daskmeans never writes (they "
            "could run code when decoding); it was not read."
        )
    declared = tuple(int(s) for s in array.shape)
    if shape is not None and declared != tuple(shape):
        because = f" ({expected})" if expected else ""
        raise error(
            f"{what} is damaged: {name} has shape {declared}, expected {tuple(shape)}{because}; it was not read."
        )
    n_bytes = math.prod(declared) * array.dtype.itemsize
    if n_bytes > max_bytes:
        raise error(
            f"{what} is damaged or foreign: array {name!r} declares shape {declared} ({n_bytes:,} bytes), "
            f"over the limit of {max_bytes:,} bytes; it was not read."
        )
    n_chunks = math.prod(math.ceil(s / max(1, int(c))) for s, c in zip(declared, array.chunks))
    if n_chunks > max_chunks:
        raise error(
            f"{what} is damaged or foreign: array {name!r} declares {n_chunks:,} chunks of shape "
            f"{tuple(array.chunks)}, over the limit of {max_chunks:,} (daskmeans writes one per array); "
            "it was not read."
        )
    return array


def read_safe_array(group, name, what, error=ModelFileError, **checks):
    """One array of a daskmeans Zarr group (model or checkpoint), read only once :func:`open_safe_array` has
    checked its metadata (``checks`` are its keyword arguments: ``shape``, ``expected``, limits).

    Returns
    -------
    ndarray
    """
    array = open_safe_array(group, name, what, error, **checks)
    try:
        return np.asarray(array[...])
    except Exception as exc:  # a damaged chunk: say which file and array
        raise error(f"{what} is damaged: cannot read array {name!r}: {exc}") from exc
