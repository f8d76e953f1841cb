"""Names of the algorithms, as the CLI (``--algorithm``) and the benchmark harness know them.

Each entry maps a name to ``(module, class name, fixed keyword arguments)``; the class is imported only when
used, so importing daskmeans compiles nothing. Every class takes at least ``n_clusters``, ``init``,
``max_time``, ``random_state``, ``client`` and ``progress``, and has ``fit``/``predict``/``save``,
``cluster_centers_`` and ``history_`` (a class whose number of clusters has another name, e.g. ``n_components``,
says so in ``_n_clusters_parameter``; ``n_clusters`` is passed under that name).
"""

from __future__ import annotations

import importlib

from .exceptions import InvalidParameterError

ALGORITHMS: dict[str, tuple[str, str, dict]] = {
    "kmeans": ("daskmeans.estimators.kmeans", "KMeans", {}),
    # exact k-means without distance bounds: the same iterates as "kmeans", every distance every iteration
    "kmeans-lloyd": ("daskmeans.estimators.kmeans", "KMeans", {"algorithm": "lloyd"}),
    "vrkm": ("daskmeans.estimators.vrkm", "VRKMeans", {"variant": "vrkm"}),
    "vrkm++": ("daskmeans.estimators.vrkm", "VRKMeans", {"variant": "vrkm++"}),
    # VRKM++ with the reference code's update when a sample keeps its label (the paper leaves C unchanged)
    "vrkm++-reference": ("daskmeans.estimators.vrkm", "VRKMeans", {"variant": "vrkm++", "agree_rule": "reference"}),
    "nmbatch": ("daskmeans.estimators.minibatch", "NestedMiniBatchKMeans", {}),
    "minibatch": ("daskmeans.estimators.minibatch", "MiniBatchKMeans", {}),
    # rows drawn uniformly over all rows, whatever the chunking: a pool of a large store reads nearly every block
    "minibatch-rows": ("daskmeans.estimators.minibatch", "MiniBatchKMeans", {"sampling": "rows"}),
    # vc-GMM: isotropic GMM by truncated variational EM on a lightweight coreset, AFK-MC2 seeding
    "vc-gmm": ("daskmeans.estimators.mixture", "CoresetGaussianMixture", {}),
    "kernel-minibatch": ("daskmeans.estimators.kernel", "MiniBatchKernelKMeans", {}),
    "kernel-minibatch-untruncated": ("daskmeans.estimators.kernel", "MiniBatchKernelKMeans", {"truncate": False}),
    "kernel-kmeans": ("daskmeans.estimators.kernel_full", "KernelKMeans", {}),
}


#: Algorithms that minimise the kernel k-means objective in a feature space, not the input-space energy: the
#: energy benchmark leaves them out unless named (``daskmeans bench --quality`` compares them by ARI and NMI).
FEATURE_SPACE_ALGORITHMS = ("kernel-minibatch", "kernel-minibatch-untruncated", "kernel-kmeans")


def algorithm_names() -> list[str]:
    """The names accepted by ``--algorithm``."""
    return list(ALGORITHMS)


def energy_algorithm_names() -> list[str]:
    """The algorithms whose objective is the input-space k-means energy (the energy benchmark's default)."""
    return [name for name in ALGORITHMS if name not in FEATURE_SPACE_ALGORITHMS]


def estimator_class(name: str):
    """The class registered as ``name`` (its module is imported on first use).

    Raises
    ------
    InvalidParameterError
        Unknown algorithm name.
    """
    if name not in ALGORITHMS:
        raise InvalidParameterError(f"Unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}.")
    module, cls_name, _ = ALGORITHMS[name]
    return getattr(importlib.import_module(module), cls_name)


def estimator_classes() -> dict[str, type]:
    """Every registered estimator class by its class name (what a saved model records)."""
    return {cls.__name__: cls for cls in map(estimator_class, ALGORITHMS)}


def make_estimator(name: str, **params):
    """Build the estimator registered as ``name`` with ``params``.

    Raises
    ------
    InvalidParameterError
        Unknown algorithm name.
    """
    cls = estimator_class(name)
    fixed = ALGORITHMS[name][2]
    # a class that calls the number of clusters otherwise (n_components) names it in _n_clusters_parameter
    renamed = getattr(cls, "_n_clusters_parameter", None)
    if renamed is not None and "n_clusters" in params:
        params[renamed] = params.pop("n_clusters")
    return cls(**fixed, **params)
