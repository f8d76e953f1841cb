"""Renames on a local disk that never replace what they should not: an exclusive rename (``renameat2`` with
``RENAME_NOREPLACE`` where the system has it, else an exclusive ``mkdir`` or ``link`` first) and an exchange of two
paths in one step (``RENAME_EXCHANGE``), for publishing outputs (:mod:`daskmeans.storage.publish`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys

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


def exchange(source: str, target: str) -> bool:
    """Swap ``source`` and ``target`` in one step; False when the system cannot (nothing was changed).

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> a, b = os.path.join(folder.name, "a"), os.path.join(folder.name, "b")
    >>> os.mkdir(a); open(b, "w").close()
    >>> exchange(a, b) in (True, False)
    True
    >>> folder.cleanup()
    """
    try:
        return _rename2(source, target, _RENAME_EXCHANGE)
    except FileNotFoundError:
        return False


def remove_path(path: str) -> None:
    """Remove a file or a folder with all it holds; nothing there is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
