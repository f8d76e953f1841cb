"""Errors raised by daskmeans. Each message says what is wrong and how to fix it."""

import sys


class DaskmeansError(Exception):
    """Base class of every daskmeans error."""


class InputDataError(DaskmeansError, ValueError):
    """The data given to ``fit``/``predict`` cannot be clustered as it is (shape, dtype, values)."""


class InputDtypeError(InputDataError, TypeError):
    """The data is not numeric (object arrays holding other things than numbers)."""


class InvalidParameterError(DaskmeansError, ValueError):
    """An estimator or function parameter is out of its valid range or of the wrong type."""


class NotFittedError(DaskmeansError, ValueError, AttributeError):
    """The estimator is used before ``fit`` was called."""


def not_fitted_error(message: str) -> NotFittedError:
    """A :class:`NotFittedError`; also an instance of scikit-learn's when the caller has scikit-learn loaded.

    scikit-learn tooling (pipelines, ``check_is_fitted``, estimator checks) catches its own class; daskmeans
    does not import scikit-learn itself, so the combined class is made only when it is already imported.
    """
    sklearn_exceptions = sys.modules.get("sklearn.exceptions")
    if sklearn_exceptions is None:
        return NotFittedError(message)
    combined = _COMBINED.get(sklearn_exceptions.NotFittedError)
    if combined is None:
        combined = type("NotFittedError", (NotFittedError, sklearn_exceptions.NotFittedError), {})
        _COMBINED[sklearn_exceptions.NotFittedError] = combined
    return combined(message)


_COMBINED: dict = {}


class ModelFileError(DaskmeansError, ValueError):
    """A file is not a daskmeans model, is damaged, or was written by an incompatible version."""


class OutputExistsError(DaskmeansError, FileExistsError):
    """An output path exists already and overwriting it was not asked for."""


class SchedulerConnectionError(DaskmeansError, ConnectionError):
    """The Dask scheduler did not answer in time."""


class CheckpointError(DaskmeansError, ValueError):
    """A checkpoint path cannot be used: not a daskmeans checkpoint, damaged, or unsafe to read."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint belongs to a fit of other data, another estimator or other parameters."""
