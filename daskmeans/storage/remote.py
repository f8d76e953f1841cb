"""Stores named by a URL (``s3://``, ``gs://``, ``memory://``, any fsspec protocol): their filesystem, their
``storage_options`` checked once, and the errors of a store that cannot be reached said as such.

``storage_options`` is the dict fsspec and Zarr take (``zarr.open(url, storage_options=...)``): for an
S3-compatible store ``{"endpoint_url": ..., "key": ..., "secret": ...}``, ``{"anon": True}``, or ``{"profile": ...}``.
Without them, fsspec's filesystem reads the standard environment (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``,
``AWS_ENDPOINT_URL``, ...). Options travel with the work: a Zarr array opened with them, pickled into a Dask graph,
carries its filesystem and the options to every worker, so a worker needs no configuration of its own beyond what
the options leave to the environment. Local paths (and ``file://`` URLs) take no options; options given for them are
ignored, so that one set of options may apply to every path of a command.
"""

from __future__ import annotations

import os

from ..exceptions import InvalidParameterError
from .locations import filesystem, is_local


def is_url(path) -> bool:
    """Whether ``path`` names a store by a URL of a protocol other than ``file://`` (an object store)."""
    return isinstance(path, (str, os.PathLike)) and not is_local(os.fspath(path))


def check_storage_options(storage_options, name: str = "storage_options") -> dict | None:
    """``storage_options`` checked: None or a dict with string keys (a copy); else an error that says so.

    Parameters
    ----------
    storage_options : dict or None
    name : str
        How messages name the argument.

    Returns
    -------
    dict or None

    Raises
    ------
    InvalidParameterError
        Not a dict, or a key that is not a string.

    Examples
    --------
    >>> from daskmeans.storage.remote import check_storage_options
    >>> check_storage_options({"anon": True})
    {'anon': True}
    >>> check_storage_options("anon=True")
    Traceback (most recent call last):
    ...
    daskmeans.exceptions.InvalidParameterError: storage_options must be a dict of fsspec options ...
    """
    if storage_options is None:
        return None
    if not isinstance(storage_options, dict) or not all(isinstance(key, str) for key in storage_options):
        raise InvalidParameterError(
            f"{name} must be a dict of fsspec options with string keys (e.g. {{'endpoint_url': "
            f"'http://minio:9000', 'key': ..., 'secret': ...}} or {{'anon': True}}), got "
            f"{type(storage_options).__name__}."
        )
    return dict(storage_options)


def _is_connection_failure(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return isinstance(error, (ConnectionError, TimeoutError)) or any(
        "Connect" in name or "Timeout" in name for name in names
    )


def store_error(url: str, error: BaseException, storage_options=None, what: str = "the store") -> BaseException:
    """An error that says what is wrong with the object store of ``url`` and how to fix it, from the ``error`` its
    filesystem raised; ``error`` itself when it says nothing of the store.

    Distinguished: a store that cannot be reached (a wrong ``endpoint_url``, a server that is down:
    ``ConnectionError``), a bucket that does not exist (``FileNotFoundError``), access refused (``PermissionError``).

    Parameters
    ----------
    url : str
    error : BaseException
    storage_options : dict, optional
        The options used (their keys are named, never their values).
    what : str
        What was being opened, for the message.

    Returns
    -------
    BaseException
        To be raised ``from error``.
    """
    endpoint = (storage_options or {}).get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
    at = f" at {endpoint}" if endpoint else ""
    if _is_connection_failure(error):
        return ConnectionError(
            f"Cannot reach the object store of {url!r}{at} to open {what} ({error}). Check its address (the storage "
            "option endpoint_url; CLI: --storage-option endpoint_url=URL) and that it is up."
        )
    if "NoCredentialsError" in {cls.__name__ for cls in type(error).__mro__}:
        return PermissionError(
            f"No credentials to open {url!r}{at} ({error}). Give them as storage options (key and secret, or "
            "profile; CLI: --storage-option key=... --storage-option secret=...), in the AWS_* environment variables, "
            "or pass anon=True for a public bucket."
        )
    if isinstance(error, PermissionError):
        return PermissionError(
            f"Access to {url!r}{at} was refused ({error}). Check the credentials (storage options key and secret, "
            "or profile; else the AWS_* environment variables) and their rights on the bucket."
        )
    return error


#: Protocols whose first path part is a bucket.
BUCKET_PROTOCOLS = {"s3", "s3a", "gs", "gcs"}


def missing_bucket(url: str, storage_options=None) -> FileNotFoundError | None:
    """A ``FileNotFoundError`` that says so when the bucket (the first part of ``url``'s path) does not exist;
    None when it does, or when the store cannot tell."""
    protocol = url.split("://", 1)[0]
    if protocol not in BUCKET_PROTOCOLS:
        return None
    fs, path = filesystem(url, storage_options)
    bucket = path.strip("/").split("/")[0]
    try:
        if not bucket or fs.exists(bucket):
            return None
    except Exception:  # noqa: BLE001 - a store that cannot be asked: the caller's own error stands
        return None
    return FileNotFoundError(
        f"The bucket {bucket!r} of {url!r} does not exist on that store. Check the URL (or the store's address, "
        f"the storage option endpoint_url), or create the bucket ({protocol}://{bucket})."
    )
