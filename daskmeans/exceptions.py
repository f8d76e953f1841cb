"""Errors raised by daskmeans. Each message says what is wrong and how to fix it."""

import sys


class DaskmeansError(Exception):
    """Base class of every daskmeans error.

    Each subclass also derives from the built-in exception a caller would catch without daskmeans in mind
    (``ValueError``, ``FileExistsError``, ``ConnectionError``), so either kind of ``except`` works.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import DaskmeansError, KMeans
    >>> try:
    ...     KMeans(n_clusters=0).fit(np.zeros((10, 2)))
    ... except DaskmeansError as error:
    ...     print(type(error).__name__)
    InvalidParameterError
    """


class InputDataError(DaskmeansError, ValueError):
    """The data given to ``fit``/``predict`` cannot be clustered as it is (shape, dtype, values).

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import InputDataError, KMeans
    >>> X = np.zeros((10, 2))
    >>> X[3, 1] = np.nan
    >>> try:  # doctest: +ELLIPSIS
    ...     KMeans(n_clusters=2).fit(X)
    ... except InputDataError as error:
    ...     print(error)
    Input X contains 1 non-finite value(s) (NaN or infinity); the first is in row 3. ...
    """


class InputDtypeError(InputDataError, TypeError):
    """The data is not numeric (object arrays holding other things than numbers)."""


class InvalidParameterError(DaskmeansError, ValueError):
    """An estimator or function parameter is out of its valid range or of the wrong type.

    Parameters are checked when ``fit`` starts, before any data is read.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import InvalidParameterError, KMeans
    >>> try:
    ...     KMeans(n_clusters=0).fit(np.zeros((10, 2)))
    ... except InvalidParameterError as error:
    ...     print(error)
    n_clusters must be >= 1, got 0.
    """


class NotFittedError(DaskmeansError, ValueError, AttributeError):
    """The estimator is used before ``fit`` was called.

    When scikit-learn is imported, the error raised is also an instance of scikit-learn's ``NotFittedError``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import KMeans, NotFittedError
    >>> try:
    ...     KMeans(n_clusters=2).predict(np.zeros((10, 2)))
    ... except NotFittedError as error:
    ...     print(type(error).__name__)
    NotFittedError
    """


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
    """A file is not a daskmeans model, is damaged, or was written by an incompatible version.

    Examples
    --------
    >>> import tempfile
    >>> import daskmeans
    >>> from daskmeans import ModelFileError
    >>> folder = tempfile.TemporaryDirectory()  # an empty folder is no model
    >>> try:
    ...     daskmeans.load(folder.name)
    ... except ModelFileError as error:
    ...     print(type(error).__name__)
    ModelFileError
    >>> folder.cleanup()
    """


class OutputExistsError(DaskmeansError, FileExistsError):
    """An output path exists already and overwriting it was not asked for.

    Attributes
    ----------
    unfinished : bool
        What is there is an object-store output without its root metadata: another run is writing it, or an
        interrupted run left it.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from daskmeans import OutputExistsError, write_labels
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = write_labels(np.array([0, 1]), os.path.join(folder.name, "labels.zarr"))
    >>> try:
    ...     write_labels(np.array([1, 0]), path)
    ... except OutputExistsError:
    ...     print("kept")
    kept
    >>> path = write_labels(np.array([1, 0]), path, overwrite=True)  # replaced once complete
    >>> folder.cleanup()
    """

    def __init__(self, message: str, *, unfinished: bool = False):
        super().__init__(message)
        self.unfinished = unfinished


class SchedulerConnectionError(DaskmeansError, ConnectionError):
    """The Dask scheduler cannot be reached: a malformed or unusable address, or no answer in time.

    Raised where daskmeans connects to a scheduler itself: the command line's ``--scheduler``, or the address in
    Dask's ``scheduler-address`` setting (``DASK_SCHEDULER_ADDRESS``) when no client is active.

    Examples
    --------
    >>> from daskmeans import SchedulerConnectionError
    >>> from daskmeans.engine.client import connect
    >>> try:
    ...     connect("scheduler:8786")  # no tcp:// scheme
    ... except SchedulerConnectionError as error:
    ...     print(type(error).__name__)
    SchedulerConnectionError
    """


class CheckpointError(DaskmeansError, ValueError):
    """A checkpoint path cannot be used: not a daskmeans checkpoint, damaged, or unsafe to read.

    Examples
    --------
    A checkpoint needs a folder of its own: one that holds other files is refused, and left as it is.

    >>> import os, tempfile
    >>> import numpy as np
    >>> from daskmeans import CheckpointError, KMeans
    >>> folder = tempfile.TemporaryDirectory()
    >>> with open(os.path.join(folder.name, "notes.txt"), "w") as notes:
    ...     _ = notes.write("not a checkpoint")
    >>> try:
    ...     KMeans(n_clusters=2).fit(np.zeros((10, 2)), checkpoint=folder.name)
    ... except CheckpointError:
    ...     print("refused")
    refused
    >>> folder.cleanup()
    """


class CheckpointMismatchError(CheckpointError):
    """A checkpoint belongs to a fit of other data, another estimator or other parameters.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from daskmeans import CheckpointMismatchError, KMeans
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "fit.checkpoint")
    >>> model = KMeans(n_clusters=3, random_state=0).fit(X, checkpoint=path)
    >>> try:  # the same path, another number of clusters
    ...     KMeans(n_clusters=4, random_state=0).fit(X, checkpoint=path)
    ... except CheckpointMismatchError as error:
    ...     print(type(error).__name__)
    CheckpointMismatchError
    >>> folder.cleanup()
    """
