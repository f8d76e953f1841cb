"""Checkpoints of a running fit, so that a driver that dies loses at most one iteration.

``fit(X, checkpoint=PATH)`` writes the algorithm's complete state after every iteration (epoch, pool of steps)
and resumes from it when the same fit is run again with the same ``PATH``: the result is the same as that of an
uninterrupted run (identical centers, labels and history, but for the measured times).

On disk or object storage
-------------------------
``PATH`` is a directory on a local or shared filesystem, or a URL of an object store
(``s3://bucket/run.ckpt``, opened with the fit's ``storage_options``)::

    PATH/daskmeans-checkpoint.json   marker: this directory is a daskmeans checkpoint
    PATH/CURRENT                     pointer: {"format", "format_version", "version": N, "directory": ...}
    PATH/v0000000N-TOKEN/            Zarr group (format 3) of version N: arrays + JSON attributes
    PATH/v0000000N-TOKEN/arrays/aI   the state's arrays
    PATH/v0000000N-TOKEN/extra/...   what an algorithm's workers wrote themselves (nmbatch state blocks)
    PATH/shared-NAME/                files that stay the same over several versions (nmbatch rows), written once

A save writes version ``N + 1`` completely (files flushed with fsync), then replaces ``CURRENT`` atomically
(``os.replace`` of a flushed temporary file), then deletes the older versions. On an object store, which has no
rename, the version is written completely under its fresh ``vN-TOKEN/`` prefix and ``CURRENT`` is then overwritten
by one PUT of a small object, which the store applies atomically
(:mod:`daskmeans.storage.checkpoint_store`). A crash at any moment leaves ``CURRENT`` naming a complete version; a
half-written newer version is ignored and removed by the next save. Each version directory has a random ``TOKEN``,
so that a task of a dead driver still writing on a worker can never write into the version of the run that
resumed.

Nothing is pickled: the state is arrays (numeric or bool dtypes, codecs from
:data:`daskmeans.storage.zarr_safe.SAFE_CODECS`, checked before any chunk is decoded) and one JSON document. The
version group also records a fingerprint of the fit (:mod:`daskmeans.storage.fingerprint`: estimator class, its
parameters, the data's shape, dtype, chunking, a digest of the summary pass's statistics and its hash of every
row, which changes when rows are permuted or values move within a column); resuming with anything else is
refused with
:class:`~daskmeans.exceptions.CheckpointMismatchError`, a damaged checkpoint with
:class:`~daskmeans.exceptions.CheckpointError`.

Interface for algorithms
------------------------
An algorithm function takes ``checkpoint=None`` (a :class:`CheckpointHook`) and uses:

``checkpoint.resume``
    The state dict it saved last (or None: start afresh). Restore every variable of the loop from it.
``checkpoint.save(state, extra_writer=None)``
    Call once after seeding and at the end of every iteration with a dict whose values are NumPy arrays, NumPy
    scalars, ``None``, bools, ints, floats, strings, and lists / dicts (string keys) of these, at any depth.
    Values come back exactly, with their types (NumPy scalars as NumPy scalars of the same dtype); tuples come
    back as lists. ``extra_writer(directory)``, when given, is called first and may write anything (Zarr groups
    made by :func:`write_group`, typically by the workers, where the data lives) into ``directory``, inside the
    new version; what it returns (JSON-able) comes back as ``checkpoint.extra``.
``checkpoint.extra_directory``, ``checkpoint.extra``, ``checkpoint.storage_options``
    Where the resumed version's extra files are (read them with :func:`read_group`, which applies the same
    checks), what its ``extra_writer`` returned, and the options that :func:`write_group` and :func:`read_group`
    take for a checkpoint on object storage (None on a filesystem): pass them with the paths to the workers.
``checkpoint.shared_path(name)``, ``save(..., keep_shared=[name])``
    A folder for large pieces that do not change every iteration: written once (completely, before the save
    that first lists it), then only listed by the saves that still use it; deleted once a save no longer does.

Save the state *after* deciding whether the run stops (include the stop reason), so that a resumed run makes
no decision twice. Randomness must come from keys (``daskmeans.engine.random.stage_key``) of the seed and the
iteration, so that the iteration index is the position of the random stream. For example (Lloyd)::

    n_iter = 0
    if checkpoint is not None and checkpoint.resume is not None:
        centers, history, n_iter = (checkpoint.resume[key] for key in ("centers", "history", "iteration"))
        if checkpoint.resume["stop_reason"] is not None:
            return ...  # the run had ended: rebuild its result from the state
    elif checkpoint is not None:
        checkpoint.save({"iteration": 0, "centers": centers, "history": [], "stop_reason": None})
    for iteration in range(n_iter + 1, max_iter + 1):
        ...
        checkpoint.save({"iteration": iteration, "centers": centers, "history": history, "stop_reason": stop})

An estimator opts in with ``_supports_checkpoint = True`` and ``_fit(data, weights, summary, client,
checkpoint=None)``, which receives an open :class:`Checkpoint` (``fit`` has checked the fingerprint, so
``checkpoint.state`` belongs to this fit). :mod:`daskmeans.estimators.resume` gives the root seed (the saved one
when resuming) and the hook, keeps the seed and the elapsed time in the state, and restores the clock; skip the
seeding when ``hook.resume`` is not None. ``KMeans`` nests the hook in its own
state (best of ``n_init`` runs) with :meth:`Checkpoint.hook`. Without ``checkpoint=`` nothing of this module
runs, and results are bitwise those of a fit without checkpoint.

Nested mini-batch k-means keeps per-sample state blocks on the workers. They are saved, not recomputed: each
worker writes its blocks into the new version (``extra_writer``) and, on resume, reads them back; recomputed
labels and distances could differ in the last bits, and recomputed bounds would be tighter than the decayed
ones, which changes the distance counters of the history. The cost: an nmbatch checkpoint is about as large as
the active batch (rows plus bounds), on a filesystem the workers share or on an object store they reach with the
checkpoint's storage options; labels, distances and bounds are rewritten every iteration, the rows and indices only
when the batch grows or splits (``shared_path``).
"""

from __future__ import annotations

import json
import numbers
import os
import re
import threading
import time
import uuid

import numpy as np
import zarr

from ..engine.deadline import budget_until
from ..exceptions import CheckpointError, CheckpointMismatchError, InvalidParameterError
from .checkpoint_store import checkpoint_store
from .fingerprint import content_differences, content_digest, differences, fit_fingerprint
from .publish import zarr_options
from .remote import check_storage_options
from .zarr_safe import open_group, read_safe_array, write_group

FORMAT = "daskmeans-checkpoint"
#: 2: the data fingerprint holds a hash of every row (version 1 held only statistics of the values).
FORMAT_VERSION = 2
MARKER = "daskmeans-checkpoint.json"
POINTER = "CURRENT"
_VERSION_NAME = re.compile(r"^v\d{8}-[0-9a-f]{8}$")
_SHARED_NAME = re.compile(r"^[0-9a-f]{1,32}$")


# -- state <-> arrays + JSON ---------------------------------------------------------------------------------------


def _encode(value, arrays, where):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "fiub":
        return {"__scalar__": value.dtype.str, "value": value.item()}
    if isinstance(value, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {"__array__": name}
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or key in ("__array__", "__scalar__"):
                raise CheckpointError(
                    f"checkpoint state key {key!r} at {where} must be a string (not '__array__' or '__scalar__')."
                )
            out[key] = _encode(item, arrays, f"{where}.{key}")
        return out
    raise CheckpointError(
        f"checkpoint state {where} holds a {type(value).__name__}, which a checkpoint cannot "
        "store without pickle; save arrays, numbers, strings, lists and dicts."
    )


class SavedState(dict):
    """A dict of a loaded state; a key it lacks means a damaged checkpoint, said as such."""

    what = "The checkpoint"

    def __missing__(self, key):
        raise CheckpointError(
            f"{self.what} is damaged: its state has no {key!r}. Delete the checkpoint to start the fit afresh."
        )


def _decode(value, arrays, what):
    if isinstance(value, list):
        return [_decode(v, arrays, what) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            name = value["__array__"]
            if name not in arrays:
                raise CheckpointError(f"{what} is damaged: its state names an array {name!r} that is not listed.")
            return arrays[name]
        if "__scalar__" in value:
            try:
                dtype = np.dtype(value["__scalar__"])
            except TypeError as error:
                raise CheckpointError(f"{what} is damaged: unknown scalar type {value['__scalar__']!r}.") from error
            if dtype.kind not in "fiub":
                raise CheckpointError(f"{what} is damaged: scalar type {dtype} is not numeric.")
            return dtype.type(value["value"])
        state = SavedState((key, _decode(item, arrays, what)) for key, item in value.items())
        state.what = what
        return state
    return value


# -- the checkpoint ----------------------------------------------------------------------------------------------------


class CheckpointHook:
    """What an algorithm sees of a checkpoint (see the module docstring).

    Attributes
    ----------
    resume : dict or None
        The algorithm's state to resume from.
    extra_directory : str or None
        Folder of the resumed version's extra files.
    extra : JSON-able or None
        What the ``extra_writer`` of the resumed version returned.
    storage_options : dict or None
        The options of a checkpoint on object storage, for :func:`write_group` and :func:`read_group` (None on a
        filesystem).
    """

    def __init__(self, checkpoint, resume, wrap):
        self.checkpoint = checkpoint
        self.resume = resume
        self.storage_options = checkpoint.storage_options
        self.extra_directory = checkpoint.extra_directory if resume is not None else None
        self.extra = (checkpoint.state or {}).get("_extra") if resume is not None else None
        self._wrap = wrap

    def save(self, state: dict, extra_writer=None, keep_shared=()):
        """Save the algorithm's ``state`` as the new checkpoint version (atomically), whole even when the fit's
        ``max_time`` budget ends while it is written (:mod:`daskmeans.engine.deadline`)."""
        with budget_until(None):
            self.checkpoint.save(self._wrap(state), extra_writer=extra_writer, keep_shared=keep_shared)

    def shared_path(self, name):
        """See :meth:`Checkpoint.shared_path`."""
        return self.checkpoint.shared_path(name)


class Checkpoint:
    """A checkpoint directory bound to one fit.

    Parameters
    ----------
    path : str or os.PathLike
        A directory on a filesystem the driver (and, for nmbatch, the workers) can write, made when missing; or
        the URL of a prefix on an object store (``s3://bucket/run.ckpt``).
    fingerprint : dict
        :func:`fit_fingerprint` of the fit.
    storage_options : dict, optional
        Options of the object store's fsspec filesystem (ignored for a path).

    Raises
    ------
    CheckpointError
        ``path`` is a file, or a non-empty directory that is not a checkpoint; or the checkpoint is damaged.
    CheckpointMismatchError
        The checkpoint belongs to another fit.
    """

    def __init__(self, path, fingerprint: dict, storage_options=None):
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidParameterError(
                f"checkpoint must be a path or URL (str or os.PathLike), got {type(path).__name__}."
            )
        self.store = checkpoint_store(os.fspath(path), check_storage_options(storage_options))
        self.path = self.store.root
        self.storage_options = zarr_options(self.path, self.store.storage_options)
        self.fingerprint = fingerprint
        self.version = 0
        self.directory = None
        self.state = None
        self._cleanup = None
        self._attrs = None
        self._marked = False  # the marker file is known to exist
        self._check_directory()
        self._load()

    # -- opening ---------------------------------------------------------------------------------------------------
    def _describe(self):
        return f"The checkpoint {self.path!r}"

    def _check_directory(self):
        kind = self.store.kind()
        if kind == "file":
            raise CheckpointError(
                f"checkpoint path {self.path!r} is a file; give a directory path (it is made "
                "when missing), or delete the file."
            )
        if kind == "missing":
            return
        if self.store.exists(MARKER):
            return
        if self.store.listdir():
            raise CheckpointError(
                f"{self.path!r} exists and is not a daskmeans checkpoint (no {MARKER}); checkpoints need a directory "
                "of their own: give another path, or an empty or missing one."
            )

    def _read_pointer(self):
        if not self.store.exists(POINTER):
            return None
        try:
            content = json.loads(self.store.read_text(POINTER, max_bytes=1 << 16))
        except (OSError, ValueError) as error:
            raise CheckpointError(
                f"{self._describe()} is damaged: {POINTER} is not readable JSON ({error}). "
                f"Delete {self.path!r} to start the fit afresh."
            ) from error
        if not isinstance(content, dict) or content.get("format") != FORMAT:
            raise CheckpointError(
                f"{self._describe()} is damaged: {POINTER} is not a daskmeans checkpoint pointer. "
                f"Delete {self.path!r} to start the fit afresh."
            )
        version = content.get("version")
        directory = content.get("directory")
        written = content.get("format_version")
        if isinstance(written, int) and 1 <= written < FORMAT_VERSION:
            raise CheckpointError(
                f"{self._describe()} was written by an older format (version {written}; this daskmeans writes "
                f"version {FORMAT_VERSION}, whose data fingerprint also tells permuted rows apart) and cannot be "
                f"resumed; delete {self.path!r} to start afresh."
            )
        if (
            written != FORMAT_VERSION
            or not isinstance(version, int)
            or version < 1
            or not isinstance(directory, str)
            or not _VERSION_NAME.match(directory)
        ):
            raise CheckpointError(
                f"{self._describe()} has format version {content.get('format_version')!r} (pointer {content!r}); "
                f"this daskmeans reads version {FORMAT_VERSION}. Delete {self.path!r} or use the daskmeans that "
                "wrote it."
            )
        return version, directory

    def _load(self):
        pointer = self._read_pointer()
        if pointer is None:
            return
        version, name = pointer
        what = f"{self._describe()} (version {version})"
        directory = self.store.join(name)
        problem = self.store.version_problem(name)
        if problem == "missing":
            raise CheckpointError(
                f"{what} is damaged: {POINTER} names {name}, which is "
                f"missing. Delete {self.path!r} to start the fit afresh."
            )
        if problem is not None:
            raise CheckpointError(
                f"{what} is damaged or tampered with: {name} is {problem}. Delete {self.path!r} to start afresh."
            )
        group = open_group(directory, what, storage_options=self.storage_options)
        attrs = dict(group.attrs)
        if attrs.get("format") != FORMAT or attrs.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(
                f"{what} is damaged or foreign: its group has format {attrs.get('format')!r} "
                f"version {attrs.get('format_version')!r}. Delete {self.path!r} to start afresh."
            )
        saved = attrs.get("fingerprint")
        if (
            not isinstance(saved, dict)
            or not isinstance(attrs.get("state"), str)
            or not isinstance(attrs.get("arrays"), list)
        ):
            raise CheckpointError(
                f"{what} is damaged: its fingerprint, state or array list is missing. "
                f"Delete {self.path!r} to start the fit afresh."
            )
        static = {key: value for key, value in saved.items() if key != "content"}
        found = differences(static, self.fingerprint)
        if found:
            raise CheckpointMismatchError(
                f"{self._describe()} was written by another fit ({'; '.join(found)}). Resuming it would mix "
                f"two runs: use another checkpoint path for this fit, or delete {self.path!r} to start afresh."
            )
        try:
            tree = json.loads(attrs["state"])
        except ValueError as error:
            raise CheckpointError(f"{what} is damaged: its state is not JSON ({error}).") from error
        arrays_group = (
            open_group(self.store.join(name, "arrays"), what, storage_options=self.storage_options)
            if attrs["arrays"]
            else None
        )
        arrays = {name: read_safe_array(arrays_group, name, what, error=CheckpointError) for name in attrs["arrays"]}
        self.state = _decode(tree, arrays, what)
        if not isinstance(self.state, dict):
            raise CheckpointError(f"{what} is damaged: its state is not a dict.")
        self.version = version
        self.directory = directory
        self._attrs = attrs

    def check_content(self, summary):
        """Refuse a checkpoint of other values or rows in another order (same shape and chunking): call after the
        summary pass, whose statistics and row hash (:func:`content_digest`) are compared.

        Raises
        ------
        CheckpointMismatchError
        """
        digest = content_digest(summary)
        self.fingerprint = dict(self.fingerprint, content=digest)
        if self._attrs is not None and self._attrs["fingerprint"].get("content") != digest:
            raise CheckpointMismatchError(
                f"{self._describe()} was written by a fit of other data (same shape, dtype and chunking, but "
                f"{content_differences(self._attrs['fingerprint'].get('content'), digest)}). Resuming it would mix "
                f"two runs: use another checkpoint path for this fit, or delete {self.path!r} to start afresh."
            )

    @property
    def extra_directory(self):
        """Folder of the current version's extra files (written by an ``extra_writer``)."""
        return f"{self.directory}/extra" if self.directory else None

    def hook(self, resume=None, wrap=None):
        """A :class:`CheckpointHook` for an algorithm.

        Parameters
        ----------
        resume : dict, optional
            The algorithm's part of :attr:`state` (default: all of it).
        wrap : callable, optional
            ``wrap(algorithm_state) -> full state`` (default: the algorithm's state is the full state).
        """
        if resume is None and wrap is None:
            resume = self.state
        return CheckpointHook(self, resume, wrap or (lambda state: state))

    # -- saving ----------------------------------------------------------------------------------------------------
    def shared_path(self, name: str) -> str:
        """A folder for files that stay the same over several versions (written once, then only referenced).

        Write it completely before the first save that lists ``name`` in ``keep_shared``, and never change it
        afterwards; it is deleted after the first save that no longer lists it.
        """
        if not isinstance(name, str) or not _SHARED_NAME.match(name):
            raise CheckpointError(f"internal: shared checkpoint folder name {name!r} must be 1-32 hex digits.")
        return self.store.join(f"shared-{name}")

    def save(self, state: dict, extra_writer=None, keep_shared=()):
        """Write ``state`` as a new version, switch ``CURRENT`` to it, delete the older versions (and the shared
        folders not in ``keep_shared``)."""
        store = self.store
        store.makedirs(self.path)
        if not self._marked and not store.exists(MARKER):
            store.write_text(MARKER, json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION}))
        self._marked = True
        version = self.version + 1
        name = f"v{version:08d}-{uuid.uuid4().hex[:8]}"
        directory = store.join(name)
        if "content" not in self.fingerprint:
            raise CheckpointError("internal: Checkpoint.check_content must run before the first save.")
        self.close()  # the previous save's cleanup
        store.makedirs(directory)
        state = dict(state)
        if extra_writer is not None:  # the writers flush their own files
            store.makedirs(store.join(name, "extra"))
            state["_extra"] = extra_writer(store.join(name, "extra"))
        arrays = {}
        tree = _encode(state, arrays, "state")
        if arrays:
            write_group(store.join(name, "arrays"), arrays, storage_options=self.storage_options)
        zarr.create_group(  # the version's group file, written last: its version is complete once it exists
            store=directory,
            zarr_format=3,
            storage_options=self.storage_options,
            attributes={
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "fingerprint": self.fingerprint,
                "saved_at": time.time(),
                "state": json.dumps(tree, allow_nan=True),
                "arrays": sorted(arrays),
                "shared": sorted(keep_shared),
            },
        )
        store.flush_version(directory)
        self._switch(version, name)
        self.version = version
        self.directory = directory
        self._remove_other_versions(name, {f"shared-{shared}" for shared in keep_shared})

    def _switch(self, version, name):
        pointer = {"format": FORMAT, "format_version": FORMAT_VERSION, "version": version, "directory": name}
        self.store.publish(POINTER, json.dumps(pointer))

    def _remove_other_versions(self, keep, keep_shared):
        """Delete every version but ``keep``, the shared folders it does not use and stray pointer files, in a
        thread, while the fit goes on."""
        stale = [
            name
            for name in self.store.listdir()
            if (_VERSION_NAME.match(name) and name != keep)
            or name.startswith(f"{POINTER}.tmp-")
            or (name.startswith("shared-") and name not in keep_shared)
        ]
        if stale:
            self._cleanup = threading.Thread(
                target=self.store.remove, args=(stale,), name="daskmeans-checkpoint-cleanup", daemon=True
            )
            self._cleanup.start()

    def close(self):
        """Wait until the older versions are deleted (``fit`` calls this when it ends)."""
        if self._cleanup is not None:
            self._cleanup.join()
            self._cleanup = None


def check_supported(estimator):
    """Raise ``InvalidParameterError`` when ``estimator`` cannot checkpoint its fits."""
    if not getattr(type(estimator), "_supports_checkpoint", False):
        raise InvalidParameterError(f"{type(estimator).__name__} does not support checkpoint= yet; fit without it.")


def open_checkpoint(path, estimator, data, weights, storage_options=None) -> Checkpoint:
    """Open (or prepare) the checkpoint of a fit of ``estimator`` on ``data``; checks all but the values.

    ``path`` is a directory or the URL of an object store's prefix (opened with ``storage_options``).

    Raises
    ------
    InvalidParameterError
        The estimator cannot checkpoint, or ``path`` is neither a path nor a URL.
    CheckpointError, CheckpointMismatchError
    """
    check_supported(estimator)
    return Checkpoint(path, fit_fingerprint(estimator, data, weights), storage_options)
