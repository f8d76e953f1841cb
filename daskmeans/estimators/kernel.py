"""Kernel k-means estimators: truncated mini-batch kernel k-means for any n (here), and what it shares with exact
kernel k-means for small n (:mod:`daskmeans.estimators.kernel_full`).

Centers live in the kernel's feature space; each is kept as a weighted sum of data rows (its *support*).
``predict``, ``labels_``, ``transform`` and ``score`` use feature-space distances, one distributed pass in
which every block meets the support rows (broadcast once). Models save the support rows, their coefficients
and the kernel's name and parameters (arrays and JSON; no pickle), so a callable kernel cannot be saved.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from .. import config
from .._validation import check_driver_rows
from ..algorithms.init import check_init
from ..algorithms.kernel_kmeans import (
    KernelPlan,
    KernelSpec,
    kernel_seeding,
    minibatch_kernel_kmeans,
    seeding_sample_rows,
)
from ..algorithms.result import RunContext
from ..engine.blas import one_blas_thread
from ..engine.client import compute_now, resolve_client
from ..engine.driver import DriverCopy
from ..engine.random import stage_key
from ..engine.slabs import stored_form
from ..exceptions import InvalidParameterError, ModelFileError
from ..kernels.kernel_centers import SparseCenters
from ..kernels.kernel_functions import Kernel, check_kernel
from ..kernels.kernel_minibatch import auto_tol
from ..kernels.minibatch import LEARNING_RATES
from ..passes.kernel_assign import kernel_energy_graph, lazy_kernel_labels, lazy_kernel_transform
from ..passes.kernel_pools import StepPools
from ..progress import SnapshotRecorder
from .base import ClusteringEstimator, raise_damaged
from .constraints import UNCHECKED, Boolean, Init, Integer, Options, Real, Rule
from .resume import FitStart

if TYPE_CHECKING:  # for type checkers only
    import os

    import dask.array as da
    from numpy.typing import ArrayLike

    from .base import InputData, PerSample

#: Seeding methods of the kernel estimators (k-means++ runs in feature space).
KERNEL_INIT_METHODS = ("k-means++", "random")


class _KernelClustering(ClusteringEstimator):
    """Shared plumbing of the kernel estimators: sparse centers, feature-space predictions, persistence."""

    _model_arrays = (
        "cluster_centers_",
        "support_rows_",
        "support_coef_",
        "support_owner_",
        "support_index_",
        "center_norms_",
    )
    _model_scalars = ClusteringEstimator._model_scalars + ("kernel_name_", "kernel_params_", "gamma_")

    _parameter_constraints = {
        **ClusteringEstimator._parameter_constraints,
        "init": Init(KERNEL_INIT_METHODS),
        "kernel": Rule(lambda kernel, name, estimator: check_kernel(kernel, estimator.kernel_params)),
        "kernel_params": UNCHECKED,  # with the kernel
        "init_sample_size": Integer(1, none=True),
        "max_iter": Integer(1),
    }

    # -- fitted state --------------------------------------------------------------------------------------------
    def _store(self, centers: SparseCenters, kernel: Kernel, n_features, dtype):
        self.support_rows_ = centers.rows
        self.support_coef_ = centers.coef
        self.support_owner_ = centers.owner
        self.support_index_ = centers.row_index
        self.center_norms_ = centers.norms
        self.cluster_centers_ = centers.input_space_means(n_features, dtype)
        self.kernel_name_ = kernel.name
        self.kernel_params_ = dict(kernel.params)
        self._kernel = kernel
        self._labels = None

    @property
    def sparse_centers_(self) -> SparseCenters:
        """The centers as :class:`~daskmeans.kernels.kernel_centers.SparseCenters`."""
        self._check_fitted()
        return SparseCenters(
            self.support_rows_,
            self.support_coef_,
            self.support_owner_,
            np.zeros(len(self.support_owner_), dtype=np.int64),
            self.support_index_,
            self.center_norms_,
        )

    @property
    def support_(self) -> list:
        """Per center: ``{"rows", "coef", "index"}``, its support rows, their coefficients and row indices.

        ``C_j = sum_s coef[s] phi(rows[s])``; ``index`` is the row's position in the training data (-1 for a
        given initial center).
        """
        self._check_fitted()
        out = []
        for j in range(self.n_clusters):
            mine = self.support_owner_ == j
            out.append(
                {"rows": self.support_rows_[mine], "coef": self.support_coef_[mine], "index": self.support_index_[mine]}
            )
        return out

    @property
    def kernel_(self) -> Kernel:
        """The kernel used, with its parameters resolved (e.g. ``kappa`` measured on the data)."""
        self._check_fitted()
        kernel = getattr(self, "_kernel", None)
        if kernel is None:
            name = self.kernel_name_
            kernel = Kernel(name, dict(self.kernel_params_), self.kernel if name == "callable" else None)
            self._kernel = kernel
        return kernel

    # -- predictions ---------------------------------------------------------------------------------------------
    def _support_for(self, data):
        centers = self.sparse_centers_
        centers.rows = np.ascontiguousarray(centers.rows, dtype=data.dtype)
        return centers

    def predict(self, X: InputData) -> PerSample:
        """Index of the nearest center in feature space for each sample (lazy for dask and Zarr input)."""
        data = self._check_predict_input(X)
        return self._like_input(data, lazy_kernel_labels(data.array, self._support_for(data), self.kernel_))

    def transform(self, X: InputData) -> PerSample:
        """Feature-space distance ``||phi(x) - C_j||`` of each sample to every center, shape (n, k)."""
        data = self._check_predict_input(X)
        return self._like_input(
            data, lazy_kernel_transform(data.array, self._support_for(data), self.kernel_), name="distance"
        )

    def score(self, X: InputData, y: Any = None, sample_weight: ArrayLike | da.Array | None = None) -> float:
        """Opposite of the (weighted) sum of squared feature-space distances of ``X`` to the nearest centers."""
        data = self._check_predict_input(X)
        weights = self._weights(sample_weight, data)
        client = resolve_client(getattr(self, "client", None))
        (raw,) = compute_now(
            kernel_energy_graph(data.array, self._support_for(data), self.kernel_, check_finite=True, weights=weights),
            client=client,
        )
        return -float(raw[1].sum())

    def _lazy_labels(self, data):
        """Nearest center in feature space of each row of ``data``, as a lazy dask array."""
        return lazy_kernel_labels(data.array, self._support_for(data), self.kernel_)

    def _final_inertia(self, data, client):
        """Sum of squared feature-space distances of ``data``'s rows to their nearest center: one pass."""
        (raw,) = compute_now(
            kernel_energy_graph(
                data.array, self._support_for(data), self.kernel_, weights=getattr(self, "_fitted_weights", None)
            ),
            client=client,
        )
        return float(raw[1].sum())

    def fit(
        self,
        X: InputData,
        y: Any = None,
        sample_weight: ArrayLike | da.Array | None = None,
        checkpoint: str | os.PathLike[str] | None = None,
        *,
        storage_options: dict | None = None,
    ) -> Self:
        """Fit the model to ``X``.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or path (n, d)
        y : ignored
        sample_weight : array-like (n,), optional
            Non-negative weight of each sample (e.g. coreset weights): a sample of weight ``w`` counts as ``w``
            copies in the cluster means, and the seeding sample is drawn with probability proportional to it.
        checkpoint : path or URL, optional
            See :mod:`daskmeans.storage.checkpoint`.
        storage_options : dict, optional
            Options of the fsspec filesystem of ``X`` given as a URL and of a checkpoint URL
            (:meth:`ClusteringEstimator.fit`).
        """
        return super().fit(X, y, sample_weight, checkpoint=checkpoint, storage_options=storage_options)

    # -- persistence ---------------------------------------------------------------------------------------------
    def save(
        self, path: str | os.PathLike[str], *, overwrite: bool = False, storage_options: dict | None = None
    ) -> str:
        """Write the model (support rows, coefficients, kernel name and parameters) to a Zarr group (a local folder,
        or a URL written with ``storage_options``).

        Raises
        ------
        ModelFileError
            The kernel is a Python callable: a model file holds arrays and JSON only, never code.
        """
        if callable(self.kernel):
            raise ModelFileError(
                f"This model uses a Python callable as its kernel ({getattr(self.kernel, '__name__', self.kernel)!r}), "
                "which a model file cannot store: daskmeans writes arrays and JSON only, never pickled code. "
                "Fit with a named kernel ('rbf', 'laplacian', 'polynomial') to save the model."
            )
        return super().save(path, overwrite=overwrite, storage_options=storage_options)

    def _model_array_shapes(self):
        """See :meth:`ClusteringEstimator._model_array_shapes`; ``m`` is the number of support rows."""
        k, d = self.n_clusters, self.n_features_in_
        support = "m = the number of rows of support_rows"
        return {
            **super()._model_array_shapes(),
            "support_rows_": (("m", d), f"n_features_in_={d}"),
            "support_coef_": (("m",), support),
            "support_owner_": (("m",), support),
            "support_index_": (("m",), support),
            "center_norms_": ((k,), f"n_clusters={k} in the stored parameters"),
        }

    def _check_loaded(self, path):
        super()._check_loaded(path)
        m = self.support_rows_.shape[0]
        for name in ("support_owner_", "support_index_"):
            if getattr(self, name).dtype.kind not in "iu":
                raise_damaged(path, f"{name.rstrip('_')} has dtype {getattr(self, name).dtype}, expected integers")
        if m and (self.support_owner_.min() < 0 or self.support_owner_.max() >= self.n_clusters):
            raise_damaged(path, f"support_owner names a center that does not exist (n_clusters={self.n_clusters})")
        if not (
            np.isfinite(self.support_rows_).all()
            and np.isfinite(self.support_coef_).all()
            and np.isfinite(self.center_norms_).all()
        ):
            raise_damaged(path, "the support holds NaN or infinity")
        if self.kernel_name_ not in ("rbf", "laplacian", "polynomial"):
            raise_damaged(path, f"unknown kernel {self.kernel_name_!r}")
        self.support_owner_ = self.support_owner_.astype(np.int64)
        self.support_index_ = self.support_index_.astype(np.int64)


class MiniBatchKernelKMeans(_KernelClustering):
    """Truncated mini-batch kernel k-means (Jourdan & Schwartzman, arXiv 2410.05902) on data of any size.

    Each step draws ``batch_size`` rows uniformly with replacement (the workers read only the blocks holding
    them), assigns them to the nearest centers in feature space and moves center ``j`` by
    ``C_j <- (1 - a_j) C_j + a_j cm(B_j)``. Centers are sparse weighted sums of batch rows, and the inner products
    that distances need are updated by the recursive expansion of that update (``<C_j, C_j>`` included). With
    truncation, each center keeps only its most recent batches' rows, about ``tau``: a step costs
    ``O(k b (b + tau))`` kernel values, whatever ``n_samples``. The steps run on the driver.

    Parameters
    ----------
    n_clusters : int, default 8
    kernel : {"rbf", "laplacian", "polynomial"} or callable, default "rbf"
        See :mod:`daskmeans.kernels.kernel_functions`: ``exp(-||x-y||^2 / kappa)``, ``exp(-||x-y||_1 / kappa)``,
        ``(gamma <x,y> + coef0) ** degree``, or ``f(X, Y, **kernel_params) -> (len(X), len(Y))`` (a callable
        cannot be saved).
    kernel_params : dict, optional
        ``{"kappa": float or "auto"}`` (RBF, Laplacian; ``"auto"``: the mean pairwise distance of the seeding
        sample), ``{"degree", "gamma", "coef0"}`` (polynomial) or keyword arguments of the callable.
    batch_size : int, default 128
        Rows per step. A step costs ``O(k b (b + tau))`` kernel values: 128 (with ``tau = 25``) costs about a
        third of 256 (with 50) per step, for a slightly lower clustering quality. The paper's experiments use 1024
        (``kernel-minibatch-paper`` in ``daskmeans bench --quality``). Theorem 1 of the paper asks a
        batch that grows with ``n_clusters``: the default gives about 13 rows per center and step at k = 10; keep
        about as many at larger k (e.g. ``batch_size=1280`` at k = 100, with ``tau=256``).
    tau : int, default 25
        Rows each truncated center keeps (the most recent batches holding at least ``tau`` of its rows); 25 keeps
        the paper's ratio ``tau / b`` (200 / 1024), which matters more for the clustering than either value
        alone. Lemma 3 of the paper:
        ``tau = b ln^2(28 gamma / eps)`` keeps each center within ``eps / 28`` of the untruncated one.
    learning_rate : {"beta", "sklearn"}, default "beta"
        ``sqrt(b_j / b)`` (Schwartzman 2023; the paper's) or ``b_j / (v_j + b_j)`` (scikit-learn's).
    max_iter : int, default 150
        Mini-batch steps (the paper runs 200 of 1024 rows). The batch energy stops falling after a few tens of
        steps, but the clustering keeps improving for longer.
    tol : float or "auto", default 0.0
        Early stopping (Algorithm 1 of the paper): stop after the first step that improves its batch's mean
        squared feature-space distance by less than ``tol`` (the paper's epsilon). ``"auto"``:
        ``max(gamma^2, gamma) sqrt(n_clusters / batch_size)``, the smallest epsilon that Theorem 1's batch-size
        condition supports (constants and logarithms dropped; see
        :func:`~daskmeans.kernels.kernel_minibatch.auto_tol`); ``tol_`` holds the value used. To choose it by
        hand: once the centers hover around a solution, a step still improves its own batch by about
        ``2 sum_j a_j s_j^2 / b`` from sampling noise alone (``a_j`` the rate, ``s_j^2`` the feature-space variance
        of the batch's cluster ``j``; about 0.013 on PenDigits at b = 256, twice that at 128), so a ``tol`` above
        that level stops when the batch energy levels off, and ``tol=0`` (the default) disables the rule: every run
        takes ``max_iter`` steps. No stopping rule is the default because the batch energy levels off before the
        clustering does: ``"auto"`` stops at the first plateau, a few steps in, with a clearly worse clustering
        than ``max_iter`` steps give.
    truncate : bool, default True
        False: the untruncated version (every contribution kept; the same data row in a center is merged).
    init : {"k-means++", "random"} or ndarray (n_clusters, n_features), default "k-means++"
        k-means++ with kernel distances on a uniform sample, distinct random rows of it, or given points.
    init_sample_size : int, optional
        Rows of the seeding sample (default ``max(20 k, 5000)``); ``kappa="auto"`` is measured on it. Without
        sample weights it is the first distinct rows the steps draw, when their first pool (up to 64 MB of batch
        rows) holds enough: a uniform sample that travels with the batches instead of in a pass of its own.
    driver_rows : "auto" or int, default "auto"
        On a cluster, data of at most this many rows is copied into the driver's memory once, before the seeding:
        the batches are then drawn there, and the labels of the training rows (``labels_``) are found at the end
        of the fit on the driver's threads, block by block as the workers would. ``"auto"``: the most rows whose
        stored bytes fit in ``config.KERNEL_DRIVER_BYTES`` (64 MB, one pool of batch rows); 0: never. The
        clustering is the same either way.
    max_time : float, optional
        Wall-clock budget in seconds, counted from the call to ``fit``; the steps stop when it is spent.
    random_state : int, numpy Generator or None
        Fixes the sample, the seeding and every batch: same value, same result on any scheduler or worker count.
    chunk_rows : int, optional
    client : distributed.Client, optional
    progress : bool or callable, default False
    snapshot_centers : bool, default False
        Keep ``cluster_centers_`` (input-space means) at the start and after every round of steps in
        ``center_snapshots_`` (one round per ``fit`` without checkpoint when the batches fit in one pool).

    Attributes
    ----------
    support_ : list of dict
        Per center: support ``rows``, their ``coef`` (``C_j = sum coef phi(row)``) and ``index`` in the data.
    cluster_centers_ : ndarray (n_clusters, n_features)
        The coefficient-weighted mean of each center's support rows in input space: a readable position, not
        the feature-space center (``predict`` never uses it).
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
        Sum of squared feature-space distances of all samples (one pass, on first access).
    kernel_ : Kernel
        The kernel with its parameters resolved (``kernel_params_`` as a dict).
    gamma_ : float
        ``max ||phi(x)||`` over the rows the fit saw (1 for RBF and Laplacian); the paper's gamma.
    n_iter_ : int
        Steps taken.
    history_ : list of dict
        Per step: ``energy`` (the batch's mean squared distance before the step), ``batch_energy_after``,
        ``improvement``, ``support`` (rows of all centers), ``dropped`` (rows forgotten), ``wall_time``, ``passes``.
    stop_reason_ : str
        ``"converged"`` (tol; that step's ``history_`` entry says so too), ``"max_iter"`` or ``"max_time"``.
    tol_ : float
        The early-stopping threshold used (``tol``, resolved when ``"auto"``).
    fit_plan_ : KernelPlan
        What the fit decided from the data, with the reason for each choice
        (:class:`daskmeans.algorithms.kernel_kmeans.KernelPlan`): whether the rows are copied into the driver
        (``driver_rows``, ``on_driver``), the seeding sample's rows and the ``tol`` used. Shown above the
        progress bars.

    See Also
    --------
    KernelKMeans : Exact (full-batch) kernel k-means, for up to about 50,000 samples.
    MiniBatchKMeans : Mini-batch k-means in input space.

    References
    ----------
    - B. Jourdan, G. Schwartzman, "Mini-batch kernel k-means", 2024. arXiv:2410.05902.
    - G. Schwartzman, "Mini-batch k-means terminates within O(d/epsilon) iterations", International
      Conference on Learning Representations (ICLR 2023). arXiv:2304.00419.
    - I. S. Dhillon, Y. Guan, B. Kulis, "Kernel k-means, Spectral Clustering and Normalized Cuts", Proceedings
      of the 10th ACM SIGKDD International Conference on Knowledge Discovery and Data Mining (KDD 2004),
      551-556. doi:10.1145/1014052.1014118.

    Examples
    --------
    Two rings around the same center, which no k-means in input space separates; an RBF kernel whose width
    ``kappa`` is small against the squared gap between the rings (9) does:

    >>> import numpy as np
    >>> from daskmeans import MiniBatchKernelKMeans
    >>> rng = np.random.default_rng(0)
    >>> angles = rng.uniform(0, 2 * np.pi, 300)
    >>> radius = np.repeat([1.0, 4.0], 150)
    >>> X = np.column_stack([radius * np.cos(angles), radius * np.sin(angles)])
    >>> X += rng.normal(scale=0.1, size=X.shape)
    >>> model = MiniBatchKernelKMeans(n_clusters=2, kernel_params={"kappa": 1.0}, random_state=3).fit(X)
    >>> sorted(np.bincount(model.labels_).tolist())
    [150, 150]
    >>> [len(set(model.labels_[:150].tolist())), len(set(model.labels_[150:].tolist()))]  # one label per ring
    [1, 1]

    ``predict`` measures new points against the centers in feature space:

    >>> model.predict(np.array([[1.0, 0.0], [4.0, 0.0]])).tolist() == [model.labels_[0], model.labels_[150]]
    True
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        kernel="rbf",
        kernel_params=None,
        batch_size=128,
        tau=25,
        learning_rate="beta",
        max_iter=150,
        tol=0.0,
        truncate=True,
        init="k-means++",
        init_sample_size=None,
        driver_rows="auto",
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
        self.batch_size = batch_size
        self.tau = tau
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.tol = tol
        self.truncate = truncate
        self.init = init
        self.init_sample_size = init_sample_size
        self.driver_rows = driver_rows
        self.max_time = max_time
        self.random_state = random_state
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress

    _parameter_constraints = {
        **_KernelClustering._parameter_constraints,
        "batch_size": Integer(1),
        "tau": Integer(1),
        "learning_rate": Options(LEARNING_RATES),
        "tol": Rule(lambda value, name, estimator: _check_tol(value)),
        "truncate": Boolean(),
        "driver_rows": Rule(check_driver_rows),
    }
    #: ``fit(X, checkpoint=PATH)``: the resolved kernel once, the sparse centers and counts after every step.
    _supports_checkpoint = True

    def _plan(self, data, client) -> KernelPlan:
        """The data-dependent choices of the fit, made once: whether the rows are copied into the driver
        (``driver_rows``, :func:`kernel_driver_rows`; only with a distributed client) and the seeding sample's rows.
        ``tol="auto"`` is resolved once the seeding has measured ``gamma`` (:meth:`_fit_on`)."""
        rows = kernel_driver_rows(self.driver_rows, data.n_features, stored_form(data.array).dtype.itemsize)
        on_driver = client is not None and data.n_samples <= rows
        reasons = {
            "driver_rows": f"driver_rows={self.driver_rows!r}"
            + (
                f": the rows within KERNEL_DRIVER_BYTES={config.KERNEL_DRIVER_BYTES:,}"
                if self.driver_rows == "auto"
                else ""
            ),
            "on_driver": "no distributed client"
            if client is None
            else f"{data.n_samples:,} rows {'<=' if on_driver else '>'} {rows:,}",
            "sample_rows": f"init_sample_size={self.init_sample_size}"
            if self.init_sample_size
            else f"max(20 k, INIT_SAMPLE_ROWS={config.INIT_SAMPLE_ROWS:,}), at most n",
        }
        return KernelPlan(
            batch_size=self.batch_size,
            tau=self.tau,
            truncate=bool(self.truncate),
            learning_rate=self.learning_rate,
            max_iter=self.max_iter,
            tol=self.tol,
            sample_rows=seeding_sample_rows(data.n_samples, self.n_clusters, self.init_sample_size),
            driver_rows=rows,
            on_driver=on_driver,
            reasons=reasons,
        )

    def _fit(self, data, weights, summary, client, checkpoint=None):
        check_init(self.init, self.n_clusters, data.n_features, methods=KERNEL_INIT_METHODS)
        plan = self._plan(data, client)
        driver = DriverCopy.gather(data.array, weights, client) if plan.on_driver else None
        with driver.threads() if driver is not None else nullcontext():
            if driver is None:
                self._fit_on(data, plan, RunContext(client=client, weights=weights), checkpoint)
            else:
                self._fit_on(data, plan, RunContext(weights=driver.weights), checkpoint, driver.array)
                # the labels of the training rows, on the driver's threads as the workers' pass would find them
                (labels,) = compute_now(lazy_kernel_labels(driver.array, self._support_for(data), self.kernel_))
        if driver is not None:
            self._labels = self._like_input(data, labels)

    def _fit_on(self, data, plan, where, checkpoint, array=None):
        """The fit on ``array`` (the data's array, or its copy in the driver), with ``where``'s client and weights
        (the driver's copy of them, and no client, for the copy)."""
        array = data.array if array is None else array
        client, weights = where.client, where.weights
        clock = self._clock()
        start = FitStart(checkpoint, self.random_state, clock)
        recorder = SnapshotRecorder(
            self,
            clock,
            total=self.max_iter,
            desc="mini-batch kernel k-means",
            unit="steps",
            centers_of=lambda record: _input_space(record, data),
        )
        plan = replace(plan, seed=stage_key(start.seed, "kernel-minibatch"))
        pools = StepPools(array, weights, client, batch_size=plan.batch_size, max_iter=plan.max_iter, seed=plan.seed)
        if start.resuming:  # the centers come from the algorithm's state
            saved = start.saved
            centers, gamma = None, saved["gamma"]
            kernel = Kernel(
                saved["kernel_name"], dict(saved["kernel_params"]), self.kernel if callable(self.kernel) else None
            )
        else:
            # the first steps' rows travel while the seeding runs
            pools.request(0)
            recorder.seeding(self.init, counted=False)
            with one_blas_thread():
                kernel, centers, gamma = kernel_seeding(
                    array,
                    self.n_clusters,
                    KernelSpec(self.kernel, self.kernel_params),
                    self.init,
                    stage_key(start.seed, "init", 0),
                    sample_size=plan.sample_rows,
                    context=where,
                    pools=pools,
                )
        hook = start.hook(kernel_name=kernel.name, kernel_params=dict(kernel.params), gamma=gamma)
        if isinstance(self.tol, str):
            plan = replace(
                plan,
                tol=auto_tol(gamma, self.n_clusters, self.batch_size),
                reasons={**plan.reasons, "tol": f"tol='auto': from gamma={gamma:.6g}, k and the batch size"},
            )
        else:
            plan = replace(plan, tol=float(self.tol))
        self._keep_plan(plan, recorder)
        with recorder:
            if centers is not None:
                recorder.start(centers.input_space_means(data.n_features, data.dtype))
            recorder.iterations()
            context = RunContext(
                clock=clock, client=client, callback=recorder, passes=2, checkpoint=hook, weights=weights
            )
            result = minibatch_kernel_kmeans(array, centers, kernel, plan, context, pools)
        recorder.keep(self)
        self._store(result.centers, kernel, data.n_features, data.dtype)
        self.gamma_ = max(gamma, result.gamma)
        self.inertia_ = None
        self.n_iter_ = result.n_steps
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self.tol_ = plan.tol


def kernel_driver_rows(setting, n_features: int, stored_itemsize: int) -> int:
    """Most rows :class:`MiniBatchKernelKMeans` copies into the driver (``driver_rows``): as given, or for
    ``"auto"`` those whose stored bytes fit in :data:`~daskmeans.config.KERNEL_DRIVER_BYTES`."""
    if setting != "auto":
        return int(setting)
    return config.KERNEL_DRIVER_BYTES // max(1, n_features * stored_itemsize)


def _check_tol(value):
    if isinstance(value, str):
        if value != "auto":
            raise InvalidParameterError(f"tol must be a number >= 0 or 'auto', got {value!r}.")
        return
    Real(0.0).check(value, "tol", None)


def _input_space(record, data):
    centers = record.get("_centers")
    return None if centers is None else centers.input_space_means(data.n_features, data.dtype)
