"""Mini-batch estimators: nested mini-batch k-means (nmbatch) and mini-batch k-means (Sculley)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import numpy as np

from .._validation import check_driver_rows
from ..algorithms.init import check_init
from ..algorithms.minibatch import (
    SAMPLING_METHODS,
    MiniBatchPlan,
    minibatch_kmeans,
    minibatch_partial_step,
    minibatch_plan,
)
from ..algorithms.nested import BATCH_ROWS, NestedPlan, nested_minibatch, nested_plan, resumed_plan
from ..algorithms.result import RunContext
from ..engine.client import resolve_client
from ..engine.random import seed_from_random_state, stage_key
from ..exceptions import InputDataError
from ..kernels.minibatch import LEARNING_RATES
from ..kernels.nested_groups import BOUND_SCHEMES
from ..progress import SnapshotRecorder
from .base import ClusteringEstimator, tol_reason
from .constraints import SEEDING_CONSTRAINTS, Integer, Options, Real, Rule
from .resume import FitStart, plan_seeding, seed_centers

if TYPE_CHECKING:  # for type checkers only
    import os

    import dask.array as da
    from numpy.typing import ArrayLike

    from .base import InputData


class NestedMiniBatchKMeans(ClusteringEstimator):
    """Nested mini-batch k-means, nmbatch (Newling & Fleuret, NIPS 2016), on data of any size.

    The data is shuffled once (chunks in a random order, rows in a random order inside each chunk, nothing
    moved); the batch is the first ``b`` rows of that order and lives on the workers with its labels,
    distances and distance bounds (while it is small, on the driver: ``driver_rows``). Every iteration revisits
    the whole batch (bounds skip most distance computations), each sample counting exactly once in the
    per-cluster sums, and the batch doubles when the median over clusters of ``sigma_C(j) / p(j)`` exceeds
    ``rho`` (``doubling_quantile=0`` takes the minimum, the paper's rule). The bounds never change a label:
    results are those of exact assignments.

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "afk-mc2", "two-level", "random"} or ndarray of shape (k, d), default "k-means||"
    initial_batch_size : int, optional
        First batch size; default ``max(5000, 80 * n_clusters)`` (capped at the number of samples;
        :func:`~daskmeans.algorithms.nested.default_initial_batch_size` says why).
    rho : float, default 2.0
        Doubling threshold: the batch doubles when the clusters' standard errors ``sigma_C(j)`` exceed ``rho``
        times the distance ``p(j)`` their centers just moved, for the share of clusters ``doubling_quantile``
        says (a cluster that did not move never holds it back). A larger ``rho`` spends more iterations on each
        batch size before it doubles; 2 spends a few more than 1, and reached energies within 1% and 2% of the
        lowest sooner than 1 at k = 1000.
    doubling_quantile : float in [0, 1], default 0.5
        Which ratio ``sigma_C(j) / p(j)`` over clusters decides: 0 is the minimum (the paper: every cluster
        must have settled, there with ``rho = 100``), 0.5 the median (the authors' reference code), 1 the
        maximum. With the minimum, one sample changing cluster moves a center by about
        ``sigma_C(j) / sqrt(v(j))``, so at large k the batch doubles only after an iteration that changes
        almost nothing.
    bounds : {"auto", "elkan", "yinyang", "hamerly", "none"}, default "auto"
        Distance bounds kept per sample. ``"elkan"``: one per center (k floats per sample); ``"yinyang"``:
        one per group of about 10 nearby centers; ``"hamerly"``: one; ``"none"``: every distance is computed.
        ``"auto"`` takes yinyang groups of at least 8 centers (``config.YINYANG_MIN_GROUP_SIZE``), at most as many
        as fit a row of data at 2 bytes a bound, else Hamerly: memory stays O(batch x d). With
        ``batch_rows="reread"``, ``"auto"`` falls back to Hamerly when the groups' state would not fit.
    batch_rows : {"auto", "cached", "reread"}, default "auto"
        Where the active batch's rows live. ``"cached"``: on the workers, as floats, beside their labels,
        distances and bounds (fastest; ``2 (d itemsize + 28 + 2 groups)`` bytes per active row). ``"reread"``:
        only labels, distances and bounds stay (``2 (12 + 2 groups)`` bytes a row); every iteration re-reads
        the chunks the batch touches from the store, a slab at a time, so memory is bounded at any n. The
        iterates are the same. ``"auto"``: cached when all n rows' cached state fits in half the cluster's
        memory (the batch may grow to n); else cached while the batch is small (stepped on the driver, or its cached
        state within half the workers' free memory) and re-read once it grows past that
        (``fit_plan_.reread_above``).
    driver_rows : "auto" or int, default "auto"
        On a cluster, a cached batch of at most this many rows is stepped on the driver: its new rows come from the
        workers once, and an iteration costs no round trip to the workers (more than the work of a small batch). The
        batch moves to the workers when it grows past this size and stays there. ``"auto"``: the largest batch whose
        full assignment takes at most ``config.DRIVER_WORK`` multiply-adds (rows x k x d;
        ``config.DRIVER_WORK_FEW_THREADS`` when the workers run no more threads than the driver has cores, as on a local
        cluster) and whose state takes at most ``config.DRIVER_BYTES``; 0: every iteration on the workers. The iterates
        are the same either way.
    max_iter : int, default 1000
        Iterations (each revisits the whole batch).
    max_time : float, optional
        Seconds from the call to ``fit``; an iteration starts only if expected to end within them (a doubling that
        would not is cut to the rows that fit, or left out), and one still under way when they end is cut short (the
        fit returns its last complete iteration). A fit returns past them by no more than the opening of the data
        and the seeding when they take them all, plus one block's work
        (:class:`~daskmeans.algorithms.result.Clock`).
    tol : float, default 1e-4
        Once the batch holds every sample, stop when the sum of squared center moves is below ``tol`` times
        the mean per-feature variance (0 disables).
    random_state : int, numpy Generator or None
        Fixes the seeding, the shuffle and the center groups: same value, same result on any scheduler and
        any number of workers (for a given chunking of the data).
    init_rounds, oversampling_factor, init_sample_size :
        Seeding options, as for :class:`KMeans`.
    chunk_rows : int, optional
        Rows per block when daskmeans chunks the input (NumPy, .npy) or to rechunk a store.
    client : distributed.Client, optional
    progress : bool or callable, default False
    snapshot_centers : bool, default False
        Keep a copy of the centers at the start and after every iteration in ``center_snapshots_``
        (``{"iteration", "wall_time", "perf_counter", "centers"}``; not saved with the model).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
        Sum of squared distances of all samples to the final centers.
    n_iter_ : int
    bounds_ : str
        The bound scheme used.
    batch_rows_ : str
        ``"cached"`` or ``"reread"``: where the batch's rows were at the end of the fit.
    history_ : list of dict
        Per iteration: ``batch_size``, ``new_samples``, ``changed`` (reused samples that changed cluster),
        ``distances_computed`` and ``distances_skipped`` (against ``k`` per sample visited), ``energy`` and
        ``inertia`` on the active batch (for the centers it was assigned to), ``center_shift``,
        ``doubling_ratio``, ``bounds``, ``wall_time`` and ``passes`` (reads of the data, in full passes).
    stop_reason_ : str
        ``"converged"`` (an iteration over all samples changed no assignment), ``"tol"``, ``"max_iter"`` or
        ``"max_time"``.
    fit_plan_ : NestedPlan
        The choices made from the data before the iterations, with their reasons (bounds, ``batch_rows``,
        ``driver_rows``, first batch size, absolute ``tol``, ``seeding``); shown above the progress bars.

    See Also
    --------
    KMeans : Exact k-means, one pass over all the data per iteration.
    MiniBatchKMeans : Mini-batch k-means (Sculley) on uniform batches, a quick approximate fit.
    VRKMeans : Variance-reduced stochastic k-means.

    References
    ----------
    - J. Newling, F. Fleuret, "Nested Mini-Batch K-Means", Advances in Neural Information Processing
      Systems 29 (NIPS 2016). arXiv:1602.02934.
    - C. Elkan, "Using the Triangle Inequality to Accelerate k-Means", Proceedings of the 20th International
      Conference on Machine Learning (ICML 2003), 147-153.
    - Y. Ding, Y. Zhao, X. Shen, M. Musuvathi, T. Mytkowicz, "Yinyang K-Means: A Drop-In Replacement of the
      Classic K-Means with Consistent Speedup", Proceedings of the 32nd International Conference on Machine
      Learning (ICML 2015), PMLR 37, 579-587.
    - G. Hamerly, "Making k-means Even Faster", Proceedings of the 2010 SIAM International Conference on
      Data Mining (SDM 2010). doi:10.1137/1.9781611972801.12.
    - D. Sculley, "Web-scale k-means clustering", Proceedings of the 19th International Conference on World
      Wide Web (WWW 2010). doi:10.1145/1772690.1772862.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import NestedMiniBatchKMeans
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> model = NestedMiniBatchKMeans(n_clusters=3, random_state=0).fit(X)
    >>> model.cluster_centers_.shape
    (3, 2)
    >>> sorted(np.bincount(model.labels_).tolist())
    [100, 100, 100]
    >>> model.history_[-1]["batch_size"]  # the batch holds every sample by the end
    300
    >>> len(set(model.predict(blobs).tolist()))
    3
    """

    _model_scalars = ClusteringEstimator._model_scalars + ("bounds_", "batch_rows_")

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means||",
        initial_batch_size=None,
        rho=2.0,
        doubling_quantile=0.5,
        bounds="auto",
        batch_rows="auto",
        driver_rows="auto",
        max_iter=1000,
        max_time=None,
        tol=1e-4,
        random_state=None,
        init_rounds=5,
        oversampling_factor=2.0,
        init_sample_size=None,
        chunk_rows=None,
        client=None,
        progress=False,
        snapshot_centers=False,
    ):
        self.snapshot_centers = snapshot_centers
        self.batch_rows = batch_rows
        self.driver_rows = driver_rows
        self.n_clusters = n_clusters
        self.init = init
        self.initial_batch_size = initial_batch_size
        self.rho = rho
        self.doubling_quantile = doubling_quantile
        self.bounds = bounds
        self.max_iter = max_iter
        self.max_time = max_time
        self.tol = tol
        self.random_state = random_state
        self.init_rounds = init_rounds
        self.oversampling_factor = oversampling_factor
        self.init_sample_size = init_sample_size
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress

    _parameter_constraints = {
        **ClusteringEstimator._parameter_constraints,
        "initial_batch_size": Integer(1, none=True),
        "rho": Real(0.0, strict=True),
        "doubling_quantile": Real(0.0, 1.0),
        "bounds": Options(BOUND_SCHEMES),
        "batch_rows": Options(BATCH_ROWS),
        "driver_rows": Rule(check_driver_rows),
        "max_iter": Integer(1),
        "tol": Real(0.0),
        **SEEDING_CONSTRAINTS,
    }

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
            Non-negative weight of each sample (e.g. coreset weights): each sample still has one vote, counted
            with its weight in S, v and the SSE; the workers read the weights with the rows.
        checkpoint : path or URL, optional
            The workers write the batch's state blocks into the checkpoint themselves: ``PATH`` must be on a
            filesystem they share with the driver, or on an object store they reach with ``storage_options`` (see
            :mod:`daskmeans.storage.checkpoint`).
        storage_options : dict, optional
            Options of the fsspec filesystem of ``X`` given as a URL and of a checkpoint URL
            (:meth:`ClusteringEstimator.fit`).
        """
        return super().fit(X, y, sample_weight, checkpoint=checkpoint, storage_options=storage_options)

    _supports_checkpoint = True

    def _plan(self, data, summary, client, start) -> NestedPlan:
        """Every data-dependent choice of the fit, made once (:func:`~daskmeans.algorithms.nested.nested_plan`):
        the bounds and where the batch's rows live (by the cluster's memory), the batch size stepped on the
        driver, the first batch's size, the absolute ``tol``, and the seeding's sample."""
        return nested_plan(
            data.array,
            self.n_clusters,
            client,
            bounds=self.bounds,
            batch_rows=self.batch_rows,
            driver_rows=self.driver_rows,
            seed=stage_key(start.seed, "nmbatch"),
            initial_batch_size=self.initial_batch_size,
            rho=self.rho,
            doubling_quantile=self.doubling_quantile,
            max_iter=self.max_iter,
            tol=self.tol * summary.mean_variance,
            seeding=plan_seeding(self, data, client),
            reasons=tol_reason(self.tol, summary),
        )

    def _fit(self, data, weights, summary, client, checkpoint=None):
        check_init(self.init, self.n_clusters, data.n_features)
        clock = self._clock()
        start = FitStart(checkpoint, self.random_state, clock)
        hook = start.hook()
        plan = self._plan(data, summary, client, start)
        if hook is not None and hook.resume is not None:
            plan = resumed_plan(plan, hook.resume)
        with SnapshotRecorder(self, clock, total=self.max_iter, desc="nmbatch") as recorder:
            self._keep_plan(plan, recorder)
            centers, passes = None, 0
            if hook is None or hook.resume is None:
                centers, passes = seed_centers(
                    self, data, weights, client, start.seed, plan=plan.seeding, recorder=recorder
                )
            recorder.iterations()
            context = RunContext(
                clock=clock,
                client=client,
                callback=recorder,
                passes=passes + 1,
                checkpoint=hook,
                weights=weights,
                total_weight=summary.total_weight,
            )
            result = nested_minibatch(data.array, centers, plan, context)
        recorder.keep(self)
        self.cluster_centers_ = result.centers
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self.bounds_ = result.history[-1]["bounds"] if result.history else self.bounds
        self.batch_rows_ = result.batch_rows
        self._labels = None


class MiniBatchKMeans(ClusteringEstimator):
    """Mini-batch k-means (Sculley 2010) on data of any size; ``partial_fit`` for streams.

    Each step assigns ``batch_size`` rows drawn uniformly (with replacement, by the workers) and moves every
    center towards the mean of its batch rows by a per-center learning rate.

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "afk-mc2", "two-level", "random"} or ndarray of shape (k, d), default "k-means||"
    batch_size : int, default 1024
    learning_rate : {"sklearn", "beta"}, default "sklearn"
        ``"sklearn"``: ``1 / v(j)`` per sample, so each center is the mean of every sample ever assigned to
        it (Sculley; scikit-learn). ``"beta"``: ``sqrt(b_j / b)`` per batch, constant in time (Schwartzman
        2023).
    max_iter : int, default 100
        Epochs: at most ``max_iter * n_samples // batch_size`` steps.
    max_no_improvement : int or None, default 10
        Stop when the smoothed batch inertia has not improved for this many steps (scikit-learn's rule).
    tol : float, default 0.0
        Stop when a step moves the centers by less than ``tol`` times the mean per-feature variance (squared;
        0 disables).
    reassignment_ratio : float, default 0.01
        Now and then (every ``10 * n_clusters`` samples), centers that received less than this fraction of
        the largest center's weight are moved onto random rows of the batch, as scikit-learn does (0 disables).
    sampling : {"auto", "rows", "chunks"}, default "auto"
        How the rows of the steps are drawn. ``"rows"``: uniformly over all rows (a pool of 131,072 rows then
        reads nearly every block of a large store). ``"chunks"``: each pool of steps reads a few whole blocks
        (at least 8, enough for twice its rows), taken from a random permutation of the blocks, and draws its
        rows uniformly from them: each block is read once per sweep over the data, and reads are whole chunks.
        Rows of one pool then come from those few blocks, which matters only if the data is ordered (e.g. sorted
        by class). ``"auto"``: ``"chunks"`` when uniform draws would read at least 4 times more blocks per pool
        (``daskmeans.config.CHUNK_SAMPLING_MIN_SAVING``), i.e. for data in many more blocks than a pool needs.
    max_time : float, optional
        Wall-clock budget in seconds, counted from the call to ``fit``; the steps stop when it is spent (past it:
        the step under way; the seeding and the first step when they take it all).
    random_state : int, numpy Generator or None
        Fixes the seeding, the batches and the reassignments: same value, same result on any scheduler or worker
        count, and (``sampling="rows"``) any chunking; with ``"chunks"`` the block sizes are part of the draw.
    init_rounds, oversampling_factor, init_sample_size :
        Seeding options, as for :class:`KMeans`.
    chunk_rows : int, optional
    client : distributed.Client, optional
    progress : bool or callable, default False
    snapshot_centers : bool, default False
        Keep a copy of the centers at the start and after every pool of steps in ``center_snapshots_``
        (``{"iteration", "wall_time", "perf_counter", "centers"}``; not saved with the model).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    counts_ : ndarray (n_clusters,)
        Weight each center has received over all steps (what ``partial_fit`` continues from).
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
        ``fit``: sum of squared distances of all samples to the final centers. ``partial_fit``: that of the
        last batch, for the centers before its update.
    n_iter_ : int
        Epochs started.
    n_steps_ : int
        Mini-batch steps (one per ``partial_fit`` call).
    history_ : list of dict
        One record per pool of steps: ``steps``, ``energy`` (smoothed batch inertia per sample),
        ``batch_inertia``, ``center_shift``, ``wall_time``, ``passes`` (rows drawn / n), ``blocks_read`` and
        ``bytes_read`` (the whole blocks the pool's rows were read from, and their bytes as stored before
        compression; ``partial_fit`` records have neither).
    stop_reason_ : str
    sampling_ : str
        ``"rows"`` or ``"chunks"``: how the fit drew its rows (what ``"auto"`` chose).
    fit_plan_ : MiniBatchPlan
        The choices ``fit`` made from the data before its steps, with their reasons (``sampling``, steps at most,
        steps and blocks per pool, absolute ``tol``, ``seeding``); shown above the progress bars.

    See Also
    --------
    NestedMiniBatchKMeans : Nested mini-batches with distance bounds: exact assignments on a growing batch.
    KMeans : Exact k-means, one pass over all the data per iteration.
    VRKMeans : Variance-reduced stochastic k-means.

    References
    ----------
    - D. Sculley, "Web-scale k-means clustering", Proceedings of the 19th International Conference on World
      Wide Web (WWW 2010). doi:10.1145/1772690.1772862.
    - G. Schwartzman, "Mini-batch k-means terminates within O(d/epsilon) iterations", International
      Conference on Learning Representations (ICLR 2023). arXiv:2304.00419.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import MiniBatchKMeans
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> model = MiniBatchKMeans(n_clusters=3, batch_size=100, random_state=0).fit(X)
    >>> model.cluster_centers_.shape
    (3, 2)
    >>> sorted(np.bincount(model.labels_).tolist())
    [100, 100, 100]

    ``partial_fit`` takes the data one batch at a time, e.g. from a stream; the first call seeds the centers:

    >>> stream = MiniBatchKMeans(n_clusters=3, random_state=0)
    >>> for batch in np.array_split(rng.permutation(X), 3):
    ...     stream = stream.partial_fit(batch)
    >>> stream.n_steps_
    3
    >>> sorted(np.bincount(stream.predict(X)).tolist())
    [100, 100, 100]
    """

    _model_arrays = ("cluster_centers_", "counts_")
    _model_scalars = ClusteringEstimator._model_scalars + ("n_steps_", "sampling_")

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means||",
        batch_size=1024,
        learning_rate="sklearn",
        max_iter=100,
        max_no_improvement=10,
        tol=0.0,
        reassignment_ratio=0.01,
        sampling="auto",
        max_time=None,
        random_state=None,
        init_rounds=5,
        oversampling_factor=2.0,
        init_sample_size=None,
        chunk_rows=None,
        client=None,
        progress=False,
        snapshot_centers=False,
    ):
        self.snapshot_centers = snapshot_centers
        self.n_clusters = n_clusters
        self.init = init
        self.batch_size = batch_size
        self.sampling = sampling
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.max_no_improvement = max_no_improvement
        self.tol = tol
        self.reassignment_ratio = reassignment_ratio
        self.max_time = max_time
        self.random_state = random_state
        self.init_rounds = init_rounds
        self.oversampling_factor = oversampling_factor
        self.init_sample_size = init_sample_size
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress

    _parameter_constraints = {
        **ClusteringEstimator._parameter_constraints,
        "batch_size": Integer(1),
        "learning_rate": Options(LEARNING_RATES),
        "max_iter": Integer(1),
        "max_no_improvement": Integer(1, none=True),
        "tol": Real(0.0),
        "reassignment_ratio": Real(0.0, 1.0),
        "sampling": Options(SAMPLING_METHODS),
        **SEEDING_CONSTRAINTS,
    }
    _supports_checkpoint = True

    def _plan(self, data, summary, client, start) -> MiniBatchPlan:
        """Every data-dependent choice of the fit, made once (:func:`~daskmeans.algorithms.minibatch.minibatch_plan`):
        how the rows are drawn (``sampling``), the steps and pools, the absolute ``tol`` and the seeding's sample."""
        return minibatch_plan(
            data.array,
            self.batch_size,
            self.sampling,
            max_iter=self.max_iter,
            seed=stage_key(start.seed, "minibatch"),
            learning_rate=self.learning_rate,
            tol=self.tol * summary.mean_variance,
            max_no_improvement=self.max_no_improvement,
            reassignment_ratio=self.reassignment_ratio,
            seeding=plan_seeding(self, data, client),
            reasons=tol_reason(self.tol, summary),
        )

    def _fit(self, data, weights, summary, client, checkpoint=None):
        check_init(self.init, self.n_clusters, data.n_features)
        clock = self._clock()
        start = FitStart(checkpoint, self.random_state, clock)
        hook = start.hook()
        plan = self._plan(data, summary, client, start)
        self.sampling_ = plan.sampling
        with SnapshotRecorder(
            self, clock, total=plan.total_steps, desc="mini-batch k-means", unit="steps", count_key="steps"
        ) as recorder:
            self._keep_plan(plan, recorder)
            centers, passes = None, 0
            if hook is None or hook.resume is None:
                centers, passes = seed_centers(
                    self, data, weights, client, start.seed, plan=plan.seeding, recorder=recorder
                )
            recorder.iterations()
            context = RunContext(
                clock=clock,
                client=client,
                callback=recorder,
                passes=passes + 1,
                checkpoint=hook,
                weights=weights,
                total_weight=summary.total_weight,
            )
            result = minibatch_kmeans(data.array, centers, plan, context)
        recorder.keep(self)
        self.cluster_centers_ = result.centers
        self.counts_ = result.seen_counts
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.n_steps_ = result.n_steps
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self._labels = None

    def partial_fit(self, X: InputData, y: Any = None, sample_weight: ArrayLike | da.Array | None = None) -> Self:
        """One mini-batch step with all of ``X`` as the batch (the first call also seeds the centers on ``X``).

        Starved centers are not reassigned here (``fit`` does that); each call reads ``X`` twice: once to check
        its values, once for the step.

        Parameters
        ----------
        X : array-like, dask array, xarray.DataArray or path, shape (n, d)
        y : ignored
        sample_weight : array-like of shape (n,), optional

        Returns
        -------
        self
        """
        self._validate_params()
        client = resolve_client(getattr(self, "client", None))
        first = not hasattr(self, "cluster_centers_")
        if not first:
            self._check_predict_input(X)
        data, weights, summary = self._prepare(X, sample_weight, client)
        if first:
            if self.n_clusters > data.n_samples:
                raise InputDataError(
                    f"The first partial_fit batch has {data.n_samples} samples but n_clusters={self.n_clusters}; "
                    "the first batch must hold at least n_clusters samples to seed the centers."
                )
            check_init(self.init, self.n_clusters, data.n_features)
            seed = seed_from_random_state(self.random_state)
            centers, _ = seed_centers(self, data, weights, client, seed, plan=plan_seeding(self, data, client))
            self.counts_ = np.zeros(self.n_clusters)
            self.n_steps_ = 0
            self.history_ = []
            self.n_features_in_ = data.n_features
        else:
            centers = self._centers_for(data)
        centers, self.counts_, batch_inertia = minibatch_partial_step(
            data.array, centers, self.counts_, self.learning_rate, weights, client
        )
        self.cluster_centers_ = centers
        self.inertia_ = batch_inertia
        self.n_steps_ += 1
        self.n_iter_ = self.n_steps_
        self.stop_reason_ = "partial_fit"
        self.history_.append(
            {
                "iteration": self.n_steps_,
                "steps": self.n_steps_,
                "batch_size": data.n_samples,
                "energy": batch_inertia / max(summary.total_weight, 1e-300),
                "passes": 1,
            }
        )
        self._fitted_data = data
        self._labels = None
        return self
