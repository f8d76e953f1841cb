"""daskmeans: out-of-core k-means and friends for chunked Zarr arrays on Dask clusters."""

from .estimators.coreset import lightweight_coreset
from .estimators.kernel import KernelKMeans, MiniBatchKernelKMeans
from .estimators.kmeans import KMeans
from .estimators.minibatch import MiniBatchKMeans, NestedMiniBatchKMeans
from .estimators.mixture import CoresetGaussianMixture
from .estimators.vrkm import VRKMeans
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
from .storage.io import open_input, write_labels
from .storage.model import load

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
