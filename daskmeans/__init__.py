"""daskmeans: out-of-core k-means and friends for chunked Zarr arrays on Dask clusters.

The public API is below. Its names are loaded on first use (PEP 562), so that ``import daskmeans`` and the
command line's ``--help`` start at once, without importing Dask arrays or compiling anything.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import _numba_cache
from ._version import __version__
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

_numba_cache.choose_cache_dir()  # before any kernel is defined: a read-only install needs a cache folder elsewhere

#: public name -> module that defines it
_LAZY = {
    "KMeans": "daskmeans.estimators.kmeans",
    "VRKMeans": "daskmeans.estimators.vrkm",
    "NestedMiniBatchKMeans": "daskmeans.estimators.minibatch",
    "MiniBatchKMeans": "daskmeans.estimators.minibatch",
    "CoresetGaussianMixture": "daskmeans.estimators.mixture",
    "MiniBatchKernelKMeans": "daskmeans.estimators.kernel",
    "KernelKMeans": "daskmeans.estimators.kernel_full",
    "lightweight_coreset": "daskmeans.estimators.coreset",
    "open_input": "daskmeans.storage.io",
    "Dataset": "daskmeans.storage.io",
    "write_labels": "daskmeans.storage.io",
    "load": "daskmeans.storage.model",
    "warm_up": "daskmeans.warm",
    "WarmReport": "daskmeans.warm",
}

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names come from __getattr__
    from .estimators.coreset import lightweight_coreset
    from .estimators.kernel import MiniBatchKernelKMeans
    from .estimators.kernel_full import KernelKMeans
    from .estimators.kmeans import KMeans
    from .estimators.minibatch import MiniBatchKMeans, NestedMiniBatchKMeans
    from .estimators.mixture import CoresetGaussianMixture
    from .estimators.vrkm import VRKMeans
    from .storage.io import Dataset, open_input, write_labels
    from .storage.model import load
    from .warm import WarmReport, warm_up


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'daskmeans' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    *_LAZY,
    "CheckpointError",
    "CheckpointMismatchError",
    "DaskmeansError",
    "InputDataError",
    "InvalidParameterError",
    "ModelFileError",
    "NotFittedError",
    "OutputExistsError",
    "SchedulerConnectionError",
    "__version__",
]
