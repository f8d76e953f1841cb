"""Errors raised by daskmeans. Each message says what is wrong and how to fix it."""


class DaskmeansError(Exception):
    """Base class of every daskmeans error."""


class InputDataError(DaskmeansError, ValueError):
    """The data given to ``fit``/``predict`` cannot be clustered as it is (shape, dtype, values)."""


class InvalidParameterError(DaskmeansError, ValueError):
    """An estimator or function parameter is out of its valid range or of the wrong type."""


class NotFittedError(DaskmeansError, ValueError, AttributeError):
    """The estimator is used before ``fit`` was called."""


class ModelFileError(DaskmeansError, ValueError):
    """A file is not a daskmeans model, is damaged, or was written by an incompatible version."""


class OutputExistsError(DaskmeansError, FileExistsError):
    """An output path exists already and overwriting it was not asked for."""


class SchedulerConnectionError(DaskmeansError, ConnectionError):
    """The Dask scheduler did not answer in time."""
