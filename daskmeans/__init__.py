"""daskmeans: out-of-core k-means and friends for chunked Zarr arrays on Dask clusters."""

from .coreset import lightweight_coreset
from .estimators import KMeans, MiniBatchKMeans, NestedMiniBatchKMeans, VRKMeans
from .exceptions import (
    CheckpointError,
    CheckpointMismatchError,
    DaskmeansError,
    InputDataError,
    InvalidParameterError,
    ModelFileError,
    NotFittedError,
    OutputExistsError,
    SchedulerConnectionError,
)
from .io import open_input, write_labels
from .mixture import CoresetGaussianMixture
from .kernel_estimators import KernelKMeans, MiniBatchKernelKMeans
from .persistence import load

__version__ = "0.1.0"

__all__ = [
    "KMeans",
    "VRKMeans",
    "NestedMiniBatchKMeans",
    "MiniBatchKMeans",
    "CoresetGaussianMixture",
    "lightweight_coreset",
    "MiniBatchKernelKMeans",
    "KernelKMeans",
    "open_input",
    "write_labels",
    "load",
    "CheckpointError",
    "CheckpointMismatchError",
    "DaskmeansError",
    "InputDataError",
    "InvalidParameterError",
    "ModelFileError",
    "NotFittedError",
    "OutputExistsError",
    "SchedulerConnectionError",
]
