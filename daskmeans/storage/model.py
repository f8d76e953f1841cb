"""Models on disk: a Zarr group with arrays and JSON attributes. No pickle anywhere, in writing or reading."""

from __future__ import annotations

import json
import os

import numpy as np
import zarr

from .._version import __version__
from ..exceptions import ModelFileError
from ..registry import estimator_classes
from .zarr_safe import atomic_output, read_safe_array, to_jsonable

FORMAT = "daskmeans-model"
FORMAT_VERSION = 1


def save_model(estimator, path, *, overwrite=False) -> str:
    """Write a fitted estimator to a Zarr group at ``path``.

    Arrays (centers, ...) are Zarr arrays; parameters, scalars, version and history are JSON attributes.
    The group is written under a temporary name and moved into place when complete.

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
    scalars = {name: to_jsonable(getattr(estimator, name)) for name in estimator._model_scalars
               if hasattr(estimator, name)}
    history = to_jsonable(getattr(estimator, "history_", []))
    with atomic_output(path, overwrite) as tmp:
        group = zarr.open_group(store=tmp, mode="w", zarr_format=3)
        arrays = {name: np.asarray(getattr(estimator, name)) for name in estimator._model_arrays}
        arrays.update({f"param_{k}": np.asarray(v) for k, v in estimator.get_params().items()
                       if isinstance(v, np.ndarray)})
        for name, value in arrays.items():
            array = group.create_array(name.rstrip("_"), shape=value.shape, dtype=value.dtype,
                                       chunks=value.shape or None)
            array[...] = value
        group.attrs.update({
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "daskmeans_version": __version__,
            "estimator": type(estimator).__name__,
            "params": params,
            "scalars": scalars,
            "arrays": sorted(arrays),
            "history": json.loads(json.dumps(history, allow_nan=True)),
        })
    return os.fspath(path)


def load(path):
    """Load a model written by ``save``.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    estimator
        A fitted estimator of the saved class (``labels_`` of the training data are not stored: use
        ``predict``).

    Raises
    ------
    ModelFileError
        Not a daskmeans model, a newer format, or damaged (missing or inconsistent arrays).
    FileNotFoundError
        Nothing at ``path``.
    """
    path = os.fspath(path)
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"No model at {path!r}. Check the path.")
    try:
        group = zarr.open_group(store=path, mode="r")
    except Exception as error:
        raise ModelFileError(f"{path!r} is not a daskmeans model (not a Zarr group): {error}") from error
    attrs = dict(group.attrs)
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
    registry = estimator_classes()
    cls = registry.get(attrs.get("estimator"))
    if cls is None:
        raise ModelFileError(f"{path!r} holds an unknown estimator {attrs.get('estimator')!r}.")
    params = attrs.get("params")
    scalars = attrs.get("scalars")
    if not isinstance(params, dict) or not isinstance(scalars, dict):
        raise ModelFileError(f"{path!r} is damaged: its 'params' or 'scalars' attribute is missing.")
    valid = set(cls._get_param_names())
    kwargs = {}
    for name, value in params.items():
        if name not in valid:
            raise ModelFileError(f"{path!r} is damaged: unknown parameter {name!r} for {cls.__name__}.")
        if isinstance(value, dict) and "array" in value:
            value = read_safe_array(group, value["array"], repr(path))
        elif isinstance(value, dict) and "unstored" in value:
            value = None
        kwargs[name] = value
    try:
        estimator = cls(**kwargs)
    except Exception as error:
        raise ModelFileError(f"{path!r} is damaged: its parameters are invalid: {error}") from error
    for name in cls._model_arrays:
        setattr(estimator, name, read_safe_array(group, name.rstrip("_"), repr(path)))
    for name, value in scalars.items():
        setattr(estimator, name, value)
    estimator.history_ = attrs.get("history", [])
    estimator._labels = None
    estimator._check_loaded(path)
    return estimator
