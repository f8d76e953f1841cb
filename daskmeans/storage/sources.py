"""Where data comes from: the array a path or URL names (.npy, .npz, Zarr array or group), opened without reading
it, and the size of a local store. NumPy and Zarr only, so that describing a store (``daskmeans info``) is quick.

A URL (``s3://bucket/data.zarr``) is opened by Zarr through fsspec with ``storage_options``; the array keeps its
filesystem, so a Dask graph built from it carries the options to the workers."""

from __future__ import annotations

import os

import numpy as np
import zarr

from ..exceptions import InputDataError
from .locations import reading_options
from .publish import check_complete, is_local, local_path
from .remote import check_storage_options, missing_bucket, store_error


def open_source(source, array_name: str | None, storage_options: dict | None = None) -> tuple[object, str]:
    """The array a path names, unread: a NumPy memory map (.npy), the array of a .npz, or a Zarr array.

    Parameters
    ----------
    source : str or os.PathLike
        A .npy or .npz file, a Zarr array, or a Zarr group (then ``array_name`` picks the array, or its only one):
        a local path, or the URL of a Zarr store (``s3://bucket/data.zarr``).
    array_name : str or None
        An array's name in a .npz file, or its path in a Zarr group (``"X"``, ``"sub/X"`` in the subgroup ``sub``).
        Without it, a group's only array is taken (the only one anywhere in it when it has none at the top).
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL (``{"endpoint_url": ..., "key": ..., "secret": ...}``), as
        ``zarr.open`` takes them; ignored for a local path. Without them the filesystem reads the environment.

    Returns
    -------
    array, location
        The array and where it is (a group's array as ``group/name``).

    Raises
    ------
    FileNotFoundError, PermissionError, InputDataError
        What is wrong with the path, said so that it can be fixed.
    ConnectionError
        The object store of a URL cannot be reached (a wrong ``endpoint_url``).

    Examples
    --------
    >>> import os, tempfile
    >>> import zarr
    >>> from daskmeans.storage.sources import open_source
    >>> folder = tempfile.TemporaryDirectory()
    >>> group = zarr.open_group(os.path.join(folder.name, "data.zarr"), mode="w")
    >>> _ = group.create_array("X", shape=(10, 3), dtype="float32")
    >>> array, location = open_source(os.path.join(folder.name, "data.zarr"), None)
    >>> array.shape, location.endswith("data.zarr/X")
    ((10, 3), True)
    >>> folder.cleanup()
    """
    storage_options = check_storage_options(storage_options)
    path = os.fspath(source)
    lower = path.lower().rstrip("/")
    if "://" not in path:
        path = os.path.abspath(path)
    if lower.endswith((".npy", ".npz")) and not is_local(path):
        raise InputDataError(
            f"{path!r} is a .npy/.npz file at a URL; daskmeans reads those from a local path only. Copy it to the "
            "Zarr store (e.g. zarr.save_array(url, numpy.load(file), storage_options=...)) or to a local disk."
        )
    if lower.endswith(".npy"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"No such .npy file: {path!r}. Check the path.")
        return np.load(path, mmap_mode="r", allow_pickle=False), path
    if lower.endswith(".npz"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"No such .npz file: {path!r}. Check the path.")
        with np.load(path, allow_pickle=False) as archive:
            key = array_name or "X"
            if key not in archive.files:
                raise InputDataError(
                    f"{path!r} has no array named {key!r}; it holds {sorted(archive.files)}. Pass array=NAME."
                )
            return archive[key], path
    is_url = "://" in path
    if not is_url and not os.path.exists(path):
        raise FileNotFoundError(f"No Zarr store at {path!r}: the path does not exist. Check the path or URL.")
    if not is_url and os.path.isfile(path):
        raise InputDataError(
            f"{path!r} is a file, not a Zarr store; daskmeans reads Zarr stores (directories or URLs), .npy and "
            ".npz files. Convert the data, e.g. with numpy.save(path + '.npy', X)."
        )
    if not is_url and not os.access(path, os.R_OK | os.X_OK):
        raise PermissionError(f"Cannot read the Zarr store at {path!r}: permission denied. Fix its permissions.")
    try:
        node = zarr.open(store=path, mode="r", storage_options=reading_options(path, storage_options))
    except (zarr.errors.NodeNotFoundError, FileNotFoundError) as error:
        if is_url:
            missing = missing_bucket(path, storage_options)
            if missing is not None:
                raise missing from error
            # an output a run did not finish publishing, or nothing at all there, said as such
            check_complete(path, f"The Zarr store {path!r}", InputDataError, storage_options)
            raise InputDataError(
                f"{path!r} is not a Zarr array or group (no zarr.json / .zarray / .zgroup there): {error}. "
                "Check the URL (and the storage options that name the store, e.g. endpoint_url)."
            ) from error
        raise InputDataError(
            f"{path!r} is not a Zarr array or group (no zarr.json / .zarray / .zgroup found): {error}. "
            "Point to a Zarr store, or to a .npy file."
        ) from error
    except PermissionError as error:
        if is_url:
            raise store_error(path, error, storage_options) from error
        raise PermissionError(f"Cannot read the Zarr store at {path!r}: {error}. Fix its permissions.") from error
    except Exception as error:
        raised = store_error(path, error, storage_options) if is_url else error
        if raised is error:
            raise
        raise raised from error
    if isinstance(node, zarr.Group):
        names = array_paths(node)
        if array_name is None:
            candidates = [name for name in names if "/" not in name] or names
            if len(candidates) != 1:
                raise InputDataError(
                    f"{path!r} is a Zarr group holding arrays {names}; say which one to cluster with "
                    "array=NAME (CLI: --array NAME; a path such as sub/X for an array in a subgroup)."
                )
            array_name = candidates[0]
        array_name = _array_path(array_name, path)
        if array_name not in names:
            raise InputDataError(
                f"The Zarr group {path!r} has no array {array_name!r}; it holds {names} "
                "(arrays in subgroups by their path)."
            )
        return node[array_name], f"{path.rstrip('/')}/{array_name}"
    if array_name is not None:
        raise InputDataError(f"{path!r} is a Zarr array, not a group; drop array={array_name!r}.")
    return node, path


def array_paths(group) -> list[str]:
    """The paths of every array in a Zarr group, its subgroups' included (``["X", "sub/Y"]``), sorted."""
    return sorted(name for name, member in group.members(max_depth=None) if isinstance(member, zarr.Array))


def _array_path(array_name: str, path: str) -> str:
    """``array_name`` as a path inside the group: no leading or trailing ``/``, no empty, ``.`` or ``..`` part."""
    parts = str(array_name).strip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InputDataError(
            f"array={array_name!r} is not a path inside the Zarr group {path!r}: name the array "
            "by its path from the group, e.g. 'X' or 'sub/X', without '.' or '..'."
        )
    return "/".join(parts)


def stored_bytes(path) -> int | None:
    """Bytes the files under a local directory (a Zarr store) take on disk.

    Parameters
    ----------
    path : str or os.PathLike
        A path or ``file://`` URL.

    Returns
    -------
    int or None
        None for a remote URL (an object store's size would take a listing of every chunk) or a path that is not a
        directory.

    Examples
    --------
    >>> from daskmeans.storage.sources import stored_bytes
    >>> stored_bytes("s3://bucket/data.zarr") is None
    True
    """
    path = os.fspath(path)
    if not is_local(path) or not os.path.isdir(local_path(path)):
        return None
    total = 0
    for folder, _, files in os.walk(local_path(path)):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total
