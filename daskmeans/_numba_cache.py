"""Where Numba caches the compiled kernels, chosen so that daskmeans works from a read-only install.

The kernels are compiled with ``numba.njit(cache=True)``; Numba refuses to even define such a function ("no
locator available") when it can write neither next to the sources nor in its per-user cache folder, as in a
read-only container image with a read-only home. :func:`choose_cache_dir` runs when ``daskmeans`` is imported,
before any kernel is defined (dask workers import daskmeans too, so they choose the same way):

1. ``NUMBA_CACHE_DIR`` set: left as it is.
2. ``daskmeans/kernels/__pycache__`` writable: nothing set, Numba caches next to the sources.
3. Numba's per-user cache (``$XDG_CACHE_HOME/numba``, else ``~/.cache/numba``) writable: nothing set, Numba uses it.
4. Otherwise ``NUMBA_CACHE_DIR`` is set to ``<temporary folder>/daskmeans-numba-<uid>``, created private (0700)
   and used only when it is a folder of this user that no one else can write (cache files are loaded as code);
   failing that, a new private temporary folder.

NUMBA_CACHE_DIR is set only where Numba could cache nowhere, so other Numba users of the process are not moved.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile

_KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")


def _writable(folder: str) -> bool:
    """Whether a file can be created in ``folder`` (made if missing), tried as Numba tries it: permission bits
    do not tell for root, read-only mounts or ACLs."""
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


def _private(folder: str) -> bool:
    """Whether ``folder`` is a real folder (not a link) of this user that no one else can write."""
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    owner = os.geteuid() if hasattr(os, "geteuid") else info.st_uid
    return stat.S_ISDIR(info.st_mode) and info.st_uid == owner and not info.st_mode & 0o022


def _numba_user_cache() -> str:
    """The per-user folder Numba falls back to on Linux and macOS-like systems (its ``appdirs`` rule)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "numba")


def _temporary_cache() -> str | None:
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    shared = os.path.join(tempfile.gettempdir(), f"daskmeans-numba-{user}")
    try:
        os.makedirs(shared, mode=0o700, exist_ok=True)
    except OSError:
        pass
    if _private(shared) and _writable(shared):
        return shared
    try:
        return tempfile.mkdtemp(prefix="daskmeans-numba-")
    except OSError:
        return None


def choose_cache_dir() -> str | None:
    """Set ``NUMBA_CACHE_DIR`` where Numba could otherwise cache nowhere (the rule is in the module's docstring).

    Returns
    -------
    str or None
        The folder set, or None when nothing was set.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    if _writable(os.path.join(_KERNELS, "__pycache__")) or _writable(_numba_user_cache()):
        return None
    folder = _temporary_cache()
    if folder is None:
        return None  # no writable folder at all: Numba's own message says so
    os.environ["NUMBA_CACHE_DIR"] = folder
    config = sys.modules.get("numba.core.config")
    if config is not None:  # Numba read its settings when it was imported
        config.CACHE_DIR = folder
    return folder
