"""daskmeans: out-of-core k-means and friends for chunked Zarr arrays on Dask clusters."""

from .estimators import KMeans, MiniBatchKMeans, NestedMiniBatchKMeans, VRKMeans
from .exceptions import (
    DaskmeansError,
    InputDataError,
    InvalidParameterError,
    ModelFileError,
    NotFittedError,
    OutputExistsError,
    SchedulerConnectionError,
)
from .io import open_input, write_labels
from .kernel_estimators import KernelKMeans, MiniBatchKernelKMeans
from .persistence import load

__version__ = "0.1.0"

__all__ = [
    "KMeans",
    "VRKMeans",
    "NestedMiniBatchKMeans",
    "MiniBatchKMeans",
    "MiniBatchKernelKMeans",
    "KernelKMeans",
    "open_input",
    "write_labels",
    "load",
    "DaskmeansError",
    "InputDataError",
    "InvalidParameterError",
    "ModelFileError",
    "NotFittedError",
    "OutputExistsError",
    "SchedulerConnectionError",
]
