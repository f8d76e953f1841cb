"""Exact (full-batch) kernel k-means, for small n: the whole kernel matrix in the driver.

It shares the seeding, model format and prediction pass of the mini-batch version
(:mod:`daskmeans.estimators.kernel`).
"""

from __future__ import annotations

import numpy as np

from .. import config
from ..algorithms.init import check_init
from ..algorithms.kernel_kmeans import (
    FullKernelPlan,
    KernelSpec,
    full_kernel_kmeans,
    kernel_seeding,
    seeding_sample_rows,
)
from ..algorithms.result import RunContext
from ..engine.client import compute_now
from ..engine.random import stage_key
from ..exceptions import InputDataError
from ..kernels.kernel_centers import SparseCenters
from ..progress import SnapshotRecorder
from .constraints import Integer
from .kernel import KERNEL_INIT_METHODS, _KernelClustering
from .resume import FitStart


def _label_means(X, weights, n_clusters, dtype):
    """``centers_of`` for the snapshots of the full batch: the input-space means of the clusters a record's labels
    define, as ``cluster_centers_`` shows the centers those labels make (:meth:`SparseCenters.input_space_means`)."""

    def centers_of(record):
        labels = record.get("_labels")
        if labels is None:
            return None
        mass = np.bincount(labels, weights=weights, minlength=n_clusters)
        coef = weights / np.where(mass > 0, mass, 1.0)[labels]
        support = SparseCenters(
            rows=X, coef=coef, owner=labels, segment=labels, row_index=labels, norms=np.zeros(n_clusters)
        )
        return support.input_space_means(X.shape[1], dtype)

    return centers_of


class KernelKMeans(_KernelClustering):
    """Exact (full-batch) kernel k-means: Lloyd's algorithm in feature space, for n up to about 50,000.

    The whole kernel matrix is computed once and held in the driver in float32 (``4 n^2`` bytes: 400 MB at
    n = 10,000, 10 GB at 50,000); each iteration is one ``(n x n) @ (n x k)`` product. This is the baseline the
    mini-batch paper compares against; for larger data use :class:`MiniBatchKernelKMeans`. Shares the kernels,
    seeding, model format and prediction pass of :class:`MiniBatchKernelKMeans`.

    Parameters
    ----------
    n_clusters : int, default 8
    kernel, kernel_params :
        As :class:`MiniBatchKernelKMeans`.
    max_iter : int, default 100
        Iterations; the run stops earlier when no sample changes cluster.
    init : {"k-means++", "random"} or ndarray (n_clusters, n_features), default "k-means++"
    init_sample_size : int, optional
    max_samples : int, optional
        Larger inputs are refused before any work (the kernel matrix would need ``4 n^2`` bytes). Default (None):
        :data:`~daskmeans.config.MAX_FULL_BATCH_SAMPLES` (50,000) when the fit starts.
    max_time : float, optional
        Wall-clock budget in seconds, counted from the call to ``fit``: an iteration starts only if one as long
        as the last still ends within it.
    random_state : int, numpy Generator or None
    chunk_rows : int, optional
    client : distributed.Client, optional
    progress : bool or callable, default False
    snapshot_centers : bool, default False
        Keep ``cluster_centers_`` (input-space means) at the start and after every iteration in
        ``center_snapshots_``.

    Attributes
    ----------
    support_, cluster_centers_, labels_, inertia_, kernel_, gamma_ :
        As :class:`MiniBatchKernelKMeans`; each center's support is its cluster, coefficient ``1 / size``.
    n_iter_ : int
    history_ : list of dict
        Per iteration: ``energy`` (mean squared feature-space distance), ``changed``, ``wall_time``.
    stop_reason_ : str
        ``"converged"``, ``"max_iter"`` or ``"max_time"``.
    fit_plan_ : FullKernelPlan
        What the fit decided from the data, with the reason for each choice
        (:class:`daskmeans.algorithms.kernel_kmeans.FullKernelPlan`): the largest input accepted and the seeding
        sample's rows. Shown above the progress bars.

    See Also
    --------
    MiniBatchKernelKMeans : Mini-batch kernel k-means, for data of any size.
    KMeans : Exact k-means in input space.

    References
    ----------
    - I. S. Dhillon, Y. Guan, B. Kulis, "Kernel k-means, Spectral Clustering and Normalized Cuts", Proceedings
      of the 10th ACM SIGKDD International Conference on Knowledge Discovery and Data Mining (KDD 2004),
      551-556. doi:10.1145/1014052.1014118.
    - B. Jourdan, G. Schwartzman, "Mini-batch kernel k-means", 2024. arXiv:2410.05902.

    Examples
    --------
    Two rings around the same center, which no k-means in input space separates; an RBF kernel whose width
    ``kappa`` is small against the squared gap between the rings (9) does:

    >>> import numpy as np
    >>> from daskmeans import KernelKMeans
    >>> rng = np.random.default_rng(0)
    >>> angles = rng.uniform(0, 2 * np.pi, 300)
    >>> radius = np.repeat([1.0, 4.0], 150)
    >>> X = np.column_stack([radius * np.cos(angles), radius * np.sin(angles)])
    >>> X += rng.normal(scale=0.1, size=X.shape)
    >>> model = KernelKMeans(n_clusters=2, kernel_params={"kappa": 1.0}, random_state=3).fit(X)
    >>> sorted(np.bincount(model.labels_).tolist())
    [150, 150]
    >>> [len(set(model.labels_[:150].tolist())), len(set(model.labels_[150:].tolist()))]  # one label per ring
    [1, 1]
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        kernel="rbf",
        kernel_params=None,
        max_iter=100,
        init="k-means++",
        init_sample_size=None,
        max_samples=None,
        max_time=None,
        random_state=None,
        chunk_rows=None,
        client=None,
        progress=False,
        snapshot_centers=False,
    ):
        self.snapshot_centers = snapshot_centers
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.kernel_params = kernel_params
        self.max_iter = max_iter
        self.init = init
        self.init_sample_size = init_sample_size
        self.max_samples = max_samples
        self.max_time = max_time
        self.random_state = random_state
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress

    _parameter_constraints = {**_KernelClustering._parameter_constraints, "max_samples": Integer(1, none=True)}

    def _max_samples(self) -> int:
        return config.MAX_FULL_BATCH_SAMPLES if self.max_samples is None else self.max_samples

    def _check_size(self, n_samples):
        max_samples = self._max_samples()
        if n_samples > max_samples:
            raise InputDataError(
                f"KernelKMeans holds the full n x n kernel matrix in the driver and each iteration costs O(n^2): "
                f"n_samples={n_samples:,} exceeds max_samples={max_samples:,} (it would need "
                f"{4 * n_samples**2 / 2**30:.1f} GiB). Use MiniBatchKernelKMeans, whose cost does not grow with n, "
                "or subsample the data (or raise max_samples if the driver has the memory)."
            )

    def _check_data(self, data):
        """Inputs larger than ``max_samples`` are refused before the data is read. ``fit(checkpoint=)`` is refused:
        the fit holds the whole kernel matrix in the driver, where a restart would have to rebuild it anyway (use
        :class:`MiniBatchKernelKMeans` for long runs)."""
        self._check_size(data.n_samples)

    def _fit(self, data, weights, summary, client):
        check_init(self.init, self.n_clusters, data.n_features, methods=KERNEL_INIT_METHODS)
        start = FitStart(None, self.random_state, self._clock())
        recorder = SnapshotRecorder(self, start.clock, total=self.max_iter, desc="kernel k-means")
        plan = FullKernelPlan(
            max_iter=self.max_iter,
            max_samples=self._max_samples(),
            sample_rows=seeding_sample_rows(data.n_samples, self.n_clusters, self.init_sample_size),
            reasons={
                "max_samples": f"max_samples={self.max_samples}"
                if self.max_samples is not None
                else "MAX_FULL_BATCH_SAMPLES",
                "sample_rows": f"init_sample_size={self.init_sample_size}"
                if self.init_sample_size
                else f"max(20 k, INIT_SAMPLE_ROWS={config.INIT_SAMPLE_ROWS:,}), at most n",
            },
        )
        self._keep_plan(plan, recorder)
        recorder.seeding(self.init, counted=False)
        kernel, centers, _ = kernel_seeding(
            data.array,
            self.n_clusters,
            KernelSpec(self.kernel, self.kernel_params),
            self.init,
            stage_key(start.seed, "init", 0),
            sample_size=plan.sample_rows,
            context=RunContext(client=client, weights=weights),
        )
        recorder.begin("loading", label="loading the data into the driver")
        (X,) = compute_now(data.array, client=client)
        w = None if weights is None else compute_now(weights, client=client)[0]
        X = np.ascontiguousarray(X)
        centers_of = _label_means(
            X, np.ones(X.shape[0]) if w is None else np.asarray(w, dtype=np.float64), self.n_clusters, data.dtype
        )
        recorder.centers_of = centers_of
        with recorder:
            recorder.start(centers.input_space_means(data.n_features, data.dtype))
            recorder.iterations(label="iterations (the kernel matrix first)")
            result = full_kernel_kmeans(
                X, centers, kernel, RunContext(clock=start.clock, callback=recorder, weights=w), max_iter=plan.max_iter
            )
        recorder.keep(self)
        self._store(result.centers, kernel, data.n_features, data.dtype)
        self.gamma_ = float(np.sqrt(max(0.0, float(kernel.diag(X).max()))))
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        if result.stop_reason == "converged":  # the last labels are those of the final centers: no second pass
            self._labels = self._like_input(data, result.labels.astype(np.int32))
