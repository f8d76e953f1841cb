"""The scikit-learn-style estimators: validate parameters once (``base``), open and check the input, start or
resume a fit (``resume``), call one algorithm and keep its result. One module per family: ``kmeans``, ``vrkm``,
``minibatch`` (nmbatch and mini-batch k-means), ``kernel`` (mini-batch kernel k-means) and ``kernel_full`` (the
full batch), ``mixture`` (vc-GMM), ``coreset``."""

from .base import ClusteringEstimator
from .coreset import lightweight_coreset
from .kernel import MiniBatchKernelKMeans
from .kernel_full import KernelKMeans
from .kmeans import KMeans
from .minibatch import MiniBatchKMeans, NestedMiniBatchKMeans
from .mixture import CoresetGaussianMixture
from .vrkm import VRKMeans

__all__ = [
    "ClusteringEstimator",
    "CoresetGaussianMixture",
    "KMeans",
    "KernelKMeans",
    "MiniBatchKMeans",
    "MiniBatchKernelKMeans",
    "NestedMiniBatchKMeans",
    "VRKMeans",
    "lightweight_coreset",
]
