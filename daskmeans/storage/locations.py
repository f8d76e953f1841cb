"""Where outputs are and whether they are complete: local paths and fsspec URLs, the root metadata that says a
Zarr output was completely written, and consolidated metadata (:mod:`daskmeans.storage.publish` uses them)."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
import warnings

from ..exceptions import InvalidParameterError

#: A Zarr node's metadata documents, in the order they are published (``zarr.json`` and ``.zmetadata`` last).
METADATA_NAMES = (".zattrs", ".zarray", ".zgroup", "zarr.json", ".zmetadata")

# -- paths -----------------------------------------------------------------------------------------------------------


def is_local(path: str) -> bool:
    """Whether ``path`` is on a filesystem of this machine (a plain path or a ``file://`` URL)."""
    return "://" not in path or path.startswith("file://")


def zarr_options(path, storage_options):
    """The ``storage_options`` to give Zarr for ``path``: None for a local path (Zarr refuses options for a store
    that is not an fsspec URL, and a command's options for its object store may reach a local output too)."""
    return None if is_local(os.fspath(path)) else storage_options


#: Protocols of s3fs, which sizes an object (a HEAD request) before reading it whole, to split large objects into
#: concurrent range requests, unless its ``max_concurrency`` is 1.
S3_PROTOCOLS = ("s3", "s3a")


def reading_options(path, storage_options):
    """:func:`zarr_options` for reading an input's chunks: on S3, ``max_concurrency=1`` unless given, so that a
    chunk is read by one GET request, without the HEAD request that s3fs would send first to size it (a round trip
    per block read, for chunks that the workers read in parallel anyway).

    Examples
    --------
    >>> reading_options("s3://bucket/data.zarr", {"anon": True})
    {'anon': True, 'max_concurrency': 1}
    >>> reading_options("s3://bucket/data.zarr", {"max_concurrency": 8})
    {'max_concurrency': 8}
    >>> reading_options("data.zarr", {"anon": True}) is None
    True
    """
    options = zarr_options(path, storage_options)
    if is_local(os.fspath(path)) or os.fspath(path).split("://", 1)[0] not in S3_PROTOCOLS:
        return options
    return {**(options or {}), "max_concurrency": 1} if "max_concurrency" not in (options or {}) else options


def local_path(path: str) -> str:
    """``path`` without its ``file://`` scheme."""
    return path[len("file://") :] if path.startswith("file://") else path


def filesystem(path: str, storage_options: dict | None = None):
    """``(fsspec filesystem, path without the protocol)`` of a URL, with ``storage_options``.

    Raises
    ------
    InvalidParameterError
        An unknown protocol (or one whose package is not installed), or an option its filesystem does not take.

    Examples
    --------
    >>> fs, key = filesystem("memory://outputs/model.zarr")
    >>> type(fs).__name__, key
    ('MemoryFileSystem', '/outputs/model.zarr')
    """
    import fsspec

    try:
        fs, key = fsspec.core.url_to_fs(path, **(storage_options or {}))
    except (ImportError, ValueError) as error:  # an unknown protocol, or one whose package is not installed
        raise InvalidParameterError(
            f"Cannot open {path!r}: {error}. Install the fsspec package of its protocol (s3fs for s3://, gcsfs for "
            "gs://, ...)."
        ) from error
    except TypeError as error:  # an option the filesystem does not take
        raise InvalidParameterError(
            f"Cannot open {path!r} with storage options {sorted(storage_options or {})}: {error}. Pass only options "
            "its fsspec filesystem takes."
        ) from error
    return fs, key.rstrip("/")


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


def consolidated_parent(path: str, storage_options: dict | None) -> str | None:
    """The folder holding ``path`` when it is a Zarr group with consolidated metadata, else None."""
    parent = path.rstrip("/").rsplit("/", 1)[0] if "/" in path.rstrip("/") else None
    if parent is None or parent.endswith(":/") or parent.endswith("://"):
        return None
    root = _read_json(f"{parent}/zarr.json", storage_options)
    if isinstance(root, dict):
        return parent if root.get("node_type") == "group" and root.get("consolidated_metadata") else None
    return parent if _read_json(f"{parent}/.zmetadata", storage_options) is not None else None


def drop_consolidated(group: str, storage_options: dict | None) -> None:
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
