"""Models on disk: a Zarr group with arrays and JSON attributes. No pickle anywhere, in writing or reading."""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import TYPE_CHECKING

import numpy as np
import zarr

from .._version import __version__
from ..exceptions import InvalidParameterError, ModelFileError
from ..registry import estimator_classes
from .publish import atomic_output, check_complete, is_local, zarr_options
from .zarr_safe import check_tree, open_safe_array, to_jsonable

if TYPE_CHECKING:  # for type checkers only: storage/ never imports estimators/ when it runs
    from ..estimators.base import ClusteringEstimator

FORMAT = "daskmeans-model"
FORMAT_VERSION = 1


def save_model(estimator, path, *, overwrite=False, storage_options=None) -> str:
    """Write a fitted estimator to a Zarr group at ``path``.

    Arrays (centers, ...) are Zarr arrays; parameters, scalars, version and history are JSON attributes, and the
    group carries consolidated metadata (one read gives every array's metadata to xarray and Zarr). The group is
    published whole (:mod:`daskmeans.storage.publish`): on a local disk it is written under a temporary name and
    moved into place when complete; on an object store it is staged and committed by its root metadata, written
    last. A save that fails or is killed leaves no model that looks complete.

    Parameters
    ----------
    estimator : ClusteringEstimator
        A fitted estimator.
    path : str or os.PathLike
        A local folder or an fsspec URL (``s3://bucket/model.zarr``).
    overwrite : bool
        Replace an existing model at ``path``.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``path`` (``{"endpoint_url": ..., "key": ..., "secret": ...}``
        for an S3-compatible store), passed to Zarr.

    Raises
    ------
    NotFittedError
        The estimator is not fitted.
    OutputExistsError
        ``path`` exists and ``overwrite`` is False.
    ModelFileError
        A parameter cannot be stored (e.g. a callable kernel).
    """
    estimator._check_fitted()
    params = {}
    for name, value in estimator.get_params().items():
        if name in ("client", "progress"):
            continue
        if callable(value):
            raise ModelFileError(
                f"Parameter {name}={value!r} is a Python callable, which a model file cannot hold without pickle; "
                "use a named option instead to save this model."
            )
        if isinstance(value, np.ndarray):
            params[name] = {"array": f"param_{name}"}
        else:
            stored = to_jsonable(value)
            if stored is None and value is not None:
                stored = {"unstored": type(value).__name__}
            params[name] = stored
    scalars = {
        name: to_jsonable(getattr(estimator, name)) for name in estimator._model_scalars if hasattr(estimator, name)
    }
    history = to_jsonable(getattr(estimator, "history_", []))
    n_features = getattr(estimator, "n_features_in_", None)
    with atomic_output(path, overwrite, storage_options=storage_options) as tmp:
        group = zarr.open_group(store=tmp, mode="w", zarr_format=3, storage_options=zarr_options(tmp, storage_options))
        arrays = {name: np.asarray(getattr(estimator, name)) for name in estimator._model_arrays}
        arrays.update(
            {f"param_{k}": np.asarray(v) for k, v in estimator.get_params().items() if isinstance(v, np.ndarray)}
        )
        for name, value in arrays.items():
            array = group.create_array(
                name.rstrip("_"),
                shape=value.shape,
                dtype=value.dtype,
                chunks=value.shape or None,
                dimension_names=_dimension_names(name.rstrip("_"), value.shape, n_features),
            )
            array[...] = value
        group.attrs.update(
            {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "daskmeans_version": __version__,
                "estimator": type(estimator).__name__,
                "params": params,
                "scalars": scalars,
                "arrays": sorted(arrays),
                "history": json.loads(json.dumps(history, allow_nan=True)),
            }
        )
    return os.fspath(path)


def _dimension_names(name, shape, n_features):
    """Names of an array's dimensions, so that ``xarray.open_zarr`` opens a model: a last axis of ``n_features``
    is ``"feature"`` (shared by the arrays that have one), any other axis is the array's own."""
    return tuple(
        "feature" if axis == len(shape) - 1 and size == n_features and axis > 0 else f"{name}_dim_{axis}"
        for axis, size in enumerate(shape)
    )


#: Parameters that say where and how a fit runs, never read from a model file (save never writes them).
RUNTIME_PARAMS = ("client", "progress")
#: The most files a model folder may hold (daskmeans writes two or three per array).
MAX_MODEL_ENTRIES = 1000


def _real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _count(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def _kernel_params(value):
    return isinstance(value, dict) and all(
        isinstance(key, str) and (item is None or _real(item)) for key, item in value.items()
    )


#: Every fitted scalar a model may hold: ``(check, what it must be, needed to predict)``. A name an estimator lists
#: in ``_model_scalars`` but not here cannot be loaded (tests/storage/test_untrusted_model.py checks the registry).
SCALAR_KINDS = {
    "inertia_": (_real, "a number", False),
    "n_iter_": (_count, "an integer >= 0", False),
    "n_features_in_": (lambda v: _count(v) and v >= 1, "an integer >= 1", True),
    "stop_reason_": (lambda v: isinstance(v, str), "a string", False),
    "bounds_": (lambda v: isinstance(v, str), "a string", False),
    "batch_rows_": (lambda v: v in ("cached", "reread"), "'cached' or 'reread'", False),
    "algorithm_": (lambda v: isinstance(v, str), "a string", False),
    "n_steps_": (_count, "an integer >= 0", False),
    "sampling_": (lambda v: v in ("rows", "chunks"), "'rows' or 'chunks'", False),
    "eta_": (_real, "a number", False),
    "kernel_name_": (lambda v: isinstance(v, str), "a string", True),
    "kernel_params_": (_kernel_params, "a dict of numbers", True),
    "gamma_": (lambda v: _real(v) and math.isfinite(v), "a finite number", True),
    "covariance_": (lambda v: _real(v) and math.isfinite(v) and v > 0, "a positive number", True),
    "lower_bound_": (_real, "a number", False),
    "converged_": (lambda v: isinstance(v, bool), "true or false", False),
    "coreset_size_": (_count, "an integer >= 0", False),
    "seeding_distances_": (_count, "an integer >= 0", False),
    "n_truncated_": (lambda v: _count(v) and v >= 1, "an integer >= 1", True),
    "search_size_": (_count, "an integer >= 0", False),
}


def load(path: str | os.PathLike[str], *, storage_options: dict | None = None) -> ClusteringEstimator:
    """Load a model written by ``save``, trusting nothing in the file.

    Before any array chunk is read: no symbolic link, FIFO or device anywhere in the folder; the format, the
    estimator class, every parameter (known names only, checked by the estimator's constraints; ``client`` and
    ``progress`` are never read from a file), every fitted scalar (the estimator's ``_model_scalars`` only, each
    of its type), and every array's dtype, codecs, chunk grid and shape (from the stored parameters and
    ``n_features_in_``, :meth:`~daskmeans.estimators.base.ClusteringEstimator._model_array_shapes`). Each array's
    metadata is read from its own document, not from the group's consolidated copy, so that what is checked is
    what is stored. On an object store, a model without its root metadata (a save that did not finish) is refused.

    Parameters
    ----------
    path : str or os.PathLike
        A local folder or an fsspec URL (``s3://bucket/model.zarr``).
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``path``, passed to Zarr.

    Returns
    -------
    estimator
        A fitted estimator of the saved class (``labels_`` of the training data are not stored: use
        ``predict``).

    Raises
    ------
    ModelFileError
        Not a daskmeans model, a newer format, damaged or tampered with (the message names the field and what it
        should be), or not completely written (an interrupted save on an object store).
    FileNotFoundError
        Nothing at ``path``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import KMeans
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> import os, tempfile
    >>> import daskmeans
    >>> model = KMeans(n_clusters=3, random_state=0).fit(X)
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = model.save(os.path.join(folder.name, "model.zarr"))
    >>> loaded = daskmeans.load(path)
    >>> type(loaded).__name__, loaded.n_clusters
    ('KMeans', 3)
    >>> bool((loaded.predict(X) == model.labels_).all())
    True
    >>> folder.cleanup()
    """
    path = os.fspath(path)
    what = repr(path)
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"No model at {path!r}. Check the path.")
    check_tree(path, what, ModelFileError, max_entries=MAX_MODEL_ENTRIES)
    if not is_local(path):  # objects without the root metadata, written last: a save that did not finish
        check_complete(path, f"The model {path!r}", ModelFileError, storage_options)
    try:
        # each array's own metadata, not the group's consolidated copy of it: what is checked is what is stored
        group = zarr.open_group(
            store=path, mode="r", use_consolidated=False, storage_options=zarr_options(path, storage_options)
        )
    except Exception as error:
        raise ModelFileError(f"{path!r} is not a daskmeans model (not a Zarr group): {error}") from error
    attrs = dict(group.attrs)
    cls = _model_class(attrs, path)
    params, scalars = attrs.get("params"), attrs.get("scalars")
    if not isinstance(params, dict) or not isinstance(scalars, dict):
        raise ModelFileError(f"{path!r} is damaged: its 'params' or 'scalars' attribute is missing.")
    history = attrs.get("history", [])
    if not isinstance(history, list):
        raise ModelFileError(
            f"{path!r} is damaged: its 'history' attribute is {type(history).__name__}, expected a list."
        )
    estimator, array_params = _estimator_from_params(cls, params, path)
    for name, value in _checked_scalars(cls, scalars, path).items():
        setattr(estimator, name, value)
    shapes = estimator._model_array_shapes()
    bound = {}
    for name in array_params:
        if f"param_{name}" not in shapes:
            raise ModelFileError(
                f"{path!r} is damaged: parameter {name!r} is stored as an array, which "
                f"{cls.__name__} never takes for it."
            )
        value = _read_shaped(group, f"param_{name}", shapes[f"param_{name}"], bound, what)
        setattr(estimator, name, value)
    _validate_loaded_params(estimator, path)
    arrays = {name: _open_shaped(group, name.rstrip("_"), shapes[name], bound, what) for name in cls._model_arrays}
    for name, array in arrays.items():  # every shape is checked before the first chunk is read
        setattr(estimator, name, _read(array, name.rstrip("_"), what))
    estimator.history_ = history
    estimator._labels = None
    estimator._check_loaded(path)
    return estimator


def _model_class(attrs, path):
    if attrs.get("format") != FORMAT:
        raise ModelFileError(
            f"{path!r} is not a daskmeans model (its 'format' attribute is {attrs.get('format')!r}); "
            "write models with model.save(path)."
        )
    version = attrs.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise ModelFileError(
            f"{path!r} has model format version {version!r}; this daskmeans reads version {FORMAT_VERSION}. "
            "Upgrade daskmeans to read it."
        )
    cls = estimator_classes().get(attrs.get("estimator"))
    if cls is None:
        raise ModelFileError(f"{path!r} holds an unknown estimator {attrs.get('estimator')!r}.")
    return cls


def _estimator_from_params(cls, params, path):
    """The estimator of the stored parameters (array parameters left at their default): ``(estimator, names of
    the array parameters)``; its parameters are checked by :func:`_validate_loaded_params` once arrays are read."""
    valid = set(cls._get_param_names())
    kwargs, array_params = {}, []
    for name, value in params.items():
        if name in RUNTIME_PARAMS:
            raise ModelFileError(
                f"{path!r} is damaged: it holds the parameter {name!r}, which says where a fit runs "
                "and is never stored in a model file; it was not loaded. Pass it after loading "
                f"(model.set_params({name}=...))."
            )
        if name not in valid:
            raise ModelFileError(
                f"{path!r} is damaged: unknown parameter {name!r} for {cls.__name__}; it takes "
                f"{sorted(valid - set(RUNTIME_PARAMS))}."
            )
        if isinstance(value, dict) and set(value) == {"array"}:
            if value["array"] != f"param_{name}":
                raise ModelFileError(
                    f"{path!r} is damaged: parameter {name!r} names the array {value['array']!r}, "
                    f"expected 'param_{name}'."
                )
            array_params.append(name)
            continue
        if isinstance(value, dict) and set(value) == {"unstored"}:
            value = None
        kwargs[name] = value
    try:
        estimator = cls(**kwargs)
    except Exception as error:
        raise ModelFileError(f"{path!r} is damaged: its parameters are invalid: {error}") from error
    _validate_loaded_params(estimator, path)
    return estimator, array_params


def _validate_loaded_params(estimator, path):
    try:
        estimator._validate_params()
    except InvalidParameterError as error:
        raise ModelFileError(f"{path!r} is damaged: a stored parameter is invalid: {error}") from error


def _checked_scalars(cls, scalars, path):
    """The stored fitted scalars, only the estimator's ``_model_scalars`` and each of its type."""
    known = cls._model_scalars
    unknown = sorted(set(scalars) - set(known))
    if unknown:
        raise ModelFileError(
            f"{path!r} is damaged: unknown fitted attribute(s) {unknown} for {cls.__name__}; it "
            f"stores {list(known)}. Nothing was loaded."
        )
    checked = {}
    for name in known:
        check, expected, needed = SCALAR_KINDS.get(name, (None, None, False))
        if check is None:
            raise ModelFileError(
                f"internal: {cls.__name__}._model_scalars lists {name!r}, which "
                "daskmeans.storage.model.SCALAR_KINDS does not describe."
            )
        if name not in scalars:
            if needed:
                raise ModelFileError(f"{path!r} is damaged: the fitted attribute {name!r} is missing.")
            continue
        value = scalars[name]
        if not check(value):
            raise ModelFileError(
                f"{path!r} is damaged: the fitted attribute {name!r} is {value!r}, expected {expected}."
            )
        checked[name] = value
    return checked


def _resolve_shape(name, spec, bound):
    """``spec`` (ints, and names of sizes shared by several arrays) with the names bound so far substituted."""
    shape, because = spec
    return tuple(bound.get(dim, None) if isinstance(dim, str) else dim for dim in shape), because


def _open_shaped(group, name, spec, bound, what):
    shape, because = _resolve_shape(name, spec, bound)
    if any(dim is None for dim in shape):  # a size first seen here (e.g. the kernel's support rows m)
        array = open_safe_array(group, name, what)
        declared = tuple(int(s) for s in array.shape)
        if len(declared) != len(shape):
            raise ModelFileError(
                f"{what} is damaged: {name} has {len(declared)} dimension(s), expected "
                f"{len(shape)} ({because}); it was not read."
            )
        for dim, size in zip(spec[0], declared):
            if isinstance(dim, str):
                bound.setdefault(dim, size)
        shape, because = _resolve_shape(name, spec, bound)
    return open_safe_array(group, name, what, shape=shape, expected=because)


def _read(array, name, what):
    try:
        return np.asarray(array[...])
    except Exception as exc:  # a damaged chunk: say which file and array
        raise ModelFileError(f"{what} is damaged: cannot read array {name!r}: {exc}") from exc


def _read_shaped(group, name, spec, bound, what):
    return _read(_open_shaped(group, name, spec, bound, what), name, what)
