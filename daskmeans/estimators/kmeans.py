"""Exact k-means (Lloyd) as an estimator: seeding, ``n_init`` restarts, checkpoints, distance bounds."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import config
from .._validation import check_driver_rows
from ..algorithms.init import check_init
from ..algorithms.lloyd import LloydPlan, lloyd, run_inertia
from ..algorithms.result import RunContext, result_from_state, result_to_state
from ..engine.capacity import cluster_memory_bytes
from ..engine.driver import DriverCopy, driver_rows, driver_work
from ..engine.placement import held_by_workers
from ..engine.slabs import compute_dtype, stored_form
from ..kernels.nested_groups import choose_bounds
from ..passes.bounded_assign import kept_dtype, state_bytes_per_row
from ..progress import SnapshotRecorder
from .base import ClusteringEstimator, open_for_fit, summarize
from .constraints import SEEDING_CONSTRAINTS, Integer, Options, Real, Rule
from .resume import FitStart, plan_seeding, seed_centers

#: ``algorithm=`` values: Lloyd without bounds, Lloyd with bounds of a given scheme, or the choice by size.
ALGORITHMS = ("auto", "lloyd", "elkan", "yinyang", "hamerly")


def resolve_bounds(algorithm, n_samples, n_features, n_clusters, itemsize, memory_bytes):
    """The bounds exact k-means keeps: ``(choice, scheme, n_groups, reason)``.

    ``choice`` is :func:`choose_algorithm`'s answer, ``scheme`` and ``n_groups`` what
    :func:`daskmeans.kernels.nested_groups.choose_bounds` makes of it (``("none", 0)`` without bounds), and
    ``reason`` says why, in words.
    """
    k, d = n_clusters, n_features
    if algorithm == "lloyd":
        return "none", "none", 0, "algorithm='lloyd'"
    if algorithm != "auto":
        scheme, n_groups = choose_bounds(algorithm, k, d * itemsize)
        return (
            algorithm,
            scheme,
            n_groups,
            f"algorithm={algorithm!r}" + ("" if scheme == algorithm else f", which is {scheme!r} for k={k}"),
        )
    if k < config.BOUNDS_MIN_CLUSTERS:
        return "none", "none", 0, f"k={k} < BOUNDS_MIN_CLUSTERS={config.BOUNDS_MIN_CLUSTERS}: bounds would not pay"
    if k * d <= config.ASSIGN_DIRECT_LIMIT:
        return (
            "none",
            "none",
            0,
            f"k*d={k * d} <= ASSIGN_DIRECT_LIMIT={config.ASSIGN_DIRECT_LIMIT}: the direct loop, bounds would not pay",
        )
    scheme, n_groups = choose_bounds("auto", k, d * itemsize)
    needed = n_samples * state_bytes_per_row(d, n_groups, itemsize)
    share = f"{config.BOUNDS_MEMORY_FRACTION:g} of the cluster's {memory_bytes:,} bytes"
    if needed <= config.BOUNDS_MEMORY_FRACTION * memory_bytes:
        return (
            "auto",
            scheme,
            n_groups,
            f"{n_groups} bound(s) per row of {d * itemsize} bytes; their state ({needed:,} bytes) within {share}",
        )
    return "none", "none", 0, f"the bounds' state ({needed:,} bytes) would exceed {share}"


def choose_algorithm(algorithm, n_samples, n_features, n_clusters, itemsize, memory_bytes):
    """The bound scheme exact k-means runs with (``"none"``: plain Lloyd).

    ``"auto"`` keeps bounds (:func:`daskmeans.kernels.nested_groups.choose_bounds`) unless the problem is too
    small for them to pay (``k < BOUNDS_MIN_CLUSTERS`` or ``k * d <= ASSIGN_DIRECT_LIMIT``) or their state
    (:func:`daskmeans.passes.bounded_assign.state_bytes_per_row` for every row) would take more than
    ``BOUNDS_MEMORY_FRACTION`` of ``memory_bytes`` (the cluster's memory).
    """
    return resolve_bounds(algorithm, n_samples, n_features, n_clusters, itemsize, memory_bytes)[0]


def driver_rows_for(setting, scheme, n_groups, n_clusters, n_features, stored_dtype, max_work=None) -> int:
    """Most rows whose iterations run on the driver (:func:`daskmeans.engine.driver.driver_rows`, whose
    ``max_work`` this passes on): a row takes its stored bytes and, with bounds (``scheme`` not ``"none"``), the
    state of its ``n_groups`` bounds (:func:`~daskmeans.passes.bounded_assign.state_bytes_per_row`)."""
    row_bytes = n_features * np.dtype(stored_dtype).itemsize
    if scheme != "none":
        row_bytes += state_bytes_per_row(n_features, n_groups, kept_dtype(stored_dtype).itemsize)
    return driver_rows(setting, n_clusters, n_features, row_bytes, max_work)


def lloyd_driver_rows(setting, bounds, n_clusters, n_features, stored_dtype) -> int:
    """:func:`driver_rows_for` with the bounds ``bounds`` (a scheme, ``"auto"`` or ``"none"``) resolved for rows
    computed in ``stored_dtype``'s compute dtype."""
    scheme, n_groups = (
        ("none", 0)
        if bounds == "none"
        else choose_bounds(bounds, n_clusters, n_features * compute_dtype(stored_dtype).itemsize)
    )
    return driver_rows_for(setting, scheme, n_groups, n_clusters, n_features, stored_dtype)


def plan_kmeans(estimator, data, summary, client) -> LloydPlan:
    """Every data-dependent choice of a :class:`KMeans` fit, made once: the bounds (``algorithm``), the iterations
    without bounds at the start, the absolute tolerance, whether the iterations run on the driver
    (``driver_rows``), whether they run ahead of the driver on the workers, and the seeding's sample."""
    return with_tolerance(plan_iterations(estimator, data, client), estimator.tol, summary)


def with_tolerance(plan: LloydPlan, tol, summary) -> LloydPlan:
    """``plan`` with its absolute tolerance: the relative ``tol`` times the data's mean per-feature variance."""
    reasons = {**plan.reasons, "tol": f"tol={tol!r} times the mean per-feature variance {summary.mean_variance:.6g}"}
    return dataclasses.replace(plan, tol=tol * summary.mean_variance, reasons=reasons)


def plan_iterations(estimator, data, client) -> LloydPlan:
    """:func:`plan_kmeans` but the tolerance (left at 0: :func:`with_tolerance` sets it): every choice that needs
    no summary of the values, so that the fit knows before the summary pass whether its rows go to the driver."""
    k, d, n = estimator.n_clusters, data.n_features, data.n_samples
    choice, scheme, n_groups, why = resolve_bounds(
        estimator.algorithm, n, d, k, data.array.dtype.itemsize, cluster_memory_bytes(client)
    )
    reasons = {"scheme": why, "n_groups": why}
    plain = 0
    if choice == "auto":
        plain = min(estimator.max_iter, config.AUTO_PLAIN_ITERATIONS)
        reasons["plain_iterations"] = (
            f"algorithm='auto': AUTO_PLAIN_ITERATIONS={config.AUTO_PLAIN_ITERATIONS} "
            "plain iterations first, while the centers move most"
        )
    max_work = driver_work(client)
    limit = driver_rows_for(estimator.driver_rows, scheme, n_groups, k, d, stored_form(data.array).dtype, max_work)
    on_driver = n <= limit
    reasons["driver_rows"] = f"driver_rows={estimator.driver_rows!r}"
    if estimator.driver_rows == "auto":
        work_setting = "DRIVER_WORK" if max_work == config.DRIVER_WORK else "DRIVER_WORK_FEW_THREADS"
        reasons["driver_rows"] += (
            f": at most {work_setting}={max_work:,} multiply-adds per pass and "
            f"DRIVER_BYTES={config.DRIVER_BYTES:,} bytes of rows and bounds"
        )
    reasons["on_driver"] = f"{n:,} rows {'<=' if on_driver else '>'} {limit:,}"
    ahead = not on_driver and held_by_workers(data.array, client)
    reasons["ahead"] = (
        "on the driver"
        if on_driver
        else "the rows are held by the workers"
        if ahead
        else "the rows are not held by the workers"
    )
    return LloydPlan(
        scheme=scheme,
        n_groups=n_groups,
        plain_iterations=plain,
        max_iter=estimator.max_iter,
        driver_rows=limit,
        on_driver=on_driver,
        ahead=ahead,
        seeding=plan_seeding(estimator, data, client),
        reasons=reasons,
    )


class KMeans(ClusteringEstimator):
    """Exact k-means (Lloyd's algorithm) on data of any size, one distributed pass per iteration.

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "afk-mc2", "two-level", "random"} or ndarray of shape (k, d), default "k-means||"
        Seeding: k-means|| (Bahmani et al.) over all rows, greedy k-means++ on a sample, AFK-MC2 (Bachem et al.)
        Markov chains, two-level k-means (about sqrt(k) coarse clusters, each split into fine centers by a
        k-means on the workers; for large k, where k-means|| and k-means++ take O(k^2) time on the driver), random
        distinct rows, or given centers.
    algorithm : {"auto", "lloyd", "elkan", "yinyang", "hamerly"}, default "auto"
        The same iterates either way (exact labels every iteration, the same centers to the last bit); only the
        time differs. ``"lloyd"`` computes every distance every iteration and keeps nothing between iterations.
        The others keep each row, its label and lower bounds on its distances to groups of centers on the workers
        and compute only the distances the bounds cannot rule out: one bound per center (Elkan), per group of
        about ten nearby centers (yinyang, Ding et al. 2015) or one per row (Hamerly). ``"auto"`` takes bounds
        (yinyang, as many groups as fit a row at 2 bytes a bound) when they fit in half the cluster's memory,
        ``k >= 8`` and ``k * d > 256``, else Lloyd; with bounds, its first ``config.AUTO_PLAIN_ITERATIONS``
        iterations are Lloyd's (bounds made while the centers move most rule out next to nothing) and the bounds
        start at the next.
    driver_rows : "auto" or int, default "auto"
        Data of at most this many rows is copied into the driver's memory first (from the workers on a cluster;
        the summary pass then runs on the copy), and its iterations run on the driver's threads, block by block,
        without a Dask graph: an iteration then costs no round trip to the workers and no graph, which take longer
        than the work of a pass over small data. ``"auto"``: the most rows whose full assignment takes at most
        ``config.DRIVER_WORK`` multiply-adds (rows x k x d; ``config.DRIVER_WORK_FEW_THREADS`` on a cluster whose
        workers run no more threads than the driver has cores, such as a local cluster, whose workers compute no
        faster than the driver's threads) and whose rows and bounds take at most ``config.DRIVER_BYTES``; 0: every
        iteration on the workers. The iterates are the same either way.
    n_init : int, default 1
        Runs from different seeds; the one with the lowest inertia is kept.
    max_iter : int, default 300
    tol : float, default 1e-4
        Relative tolerance: stop when the sum of squared center shifts is below ``tol`` times the mean
        per-feature variance of the data (as scikit-learn).
    max_time : float, optional
        Wall-clock budget in seconds, counted from the call to ``fit``: an iteration starts only if one as long as the
        shorter of the last two still ends within it (with ``n_init > 1``, together with the pass that gives the run's
        inertia, and a run starts only if one as long as the last does); so does a round of k-means|| seeding. A pass
        under way when the budget ends is cut short and the fit returns its last complete iteration. A fit returns past
        the budget by no more than the opening of the data and the seeding when they take it all, plus one block's
        work (:class:`~daskmeans.algorithms.result.Clock`).
    random_state : int, numpy Generator or None
        Same value, same result on any scheduler and any number of workers.
    init_rounds : int, default 5
        Rounds of k-means||.
    oversampling_factor : float, default 2.0
        k-means|| draws about ``oversampling_factor * n_clusters`` candidates per round.
    init_sample_size : int, optional
        Rows the seeding looks at. ``init="k-means++"``: a uniform sample of this many (default
        ``max(20 k, 10000)``). ``init="k-means||"``: every row of data of at most this many rows (default
        ``max(2**20, 256 k)``), else a uniform sample of about this many (by default no more than an eighth of the
        workers' memory holds), drawn in one pass and held by the workers
        (:func:`daskmeans.algorithms.init.kmeans_parallel_bounded`): at 100 million rows and k = 1000 each
        k-means|| round over every row would cost about two assign passes.
    chunk_rows : int, optional
        Rows per block when daskmeans chunks the input (NumPy, .npy) or to rechunk a store.
    client : distributed.Client, optional
        Cluster to run on; default the active client, else ``DASK_SCHEDULER_ADDRESS``, else local threads.
    progress : bool or callable, default False
        Show one bar per phase (seeding passes, iterations of at most ``max_iter``, a final pass when one is
        made) with the current energy (:mod:`daskmeans.progress`); a callable is called with each history record
        instead.
    snapshot_centers : bool, default False
        Keep a copy of the centers after every iteration in ``center_snapshots_`` (for energy-over-time
        benchmarks; costs one ``(n_clusters, n_features)`` copy per iteration; not saved with the model).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features), dtype of the (float) input
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
    algorithm_ : str
        What ran: ``"lloyd"`` or the bound scheme (``"elkan"``, ``"yinyang"``, ``"hamerly"``).
    n_iter_ : int
    history_ : list of dict
        Per iteration: ``energy`` (mean squared distance), ``inertia``, ``center_shift``, ``wall_time``, ``passes``,
        ``distances_computed`` and ``distances_skipped`` (by the bounds), ``bounds`` (the scheme) and
        ``bound_groups`` (lower bounds kept per row: 1 for Hamerly, k for Elkan, the groups of yinyang, 0 for Lloyd).
    stop_reason_ : str
    fit_phases_ : list of dict
        The phases of the fit (``seeding``, ``iterations``, ``final pass``): ``{"phase", "start", "end", "unit",
        "count", "total", ...}``, times on the clock of ``history_``.
    center_snapshots_ : list of dict
        Only with ``snapshot_centers=True``: the initial centers and the centers after each iteration, as
        ``{"iteration", "wall_time", "perf_counter", "centers"}`` (``wall_time`` on the clock of ``history_``).
    fit_plan_ : LloydPlan
        What the fit decided from the data before its iterations, with the reason for each choice
        (:class:`daskmeans.algorithms.lloyd.LloydPlan`): the bounds (``scheme``, ``n_groups``), the plain
        iterations first, the absolute ``tol``, the rows run on the driver (``driver_rows``, ``on_driver``) and
        whether iterations run ahead on the workers (``ahead``) and the seeding's rows (``seeding``). Shown above
        the progress bars.

    See Also
    --------
    MiniBatchKMeans : Mini-batch k-means (Sculley), a quick approximate fit from samples.
    NestedMiniBatchKMeans : Nested mini-batches with distance bounds, exact assignments on a growing batch.
    VRKMeans : Variance-reduced stochastic k-means (VRKM, VRKM++).
    MiniBatchKernelKMeans : k-means in a kernel's feature space, for clusters that are not convex.
    CoresetGaussianMixture : An isotropic Gaussian mixture fitted on a lightweight coreset.

    Notes
    -----
    Each iteration is one pass over the data: the workers assign their blocks to the nearest centers and reduce
    per-cluster sums in a tree, and the driver computes the new centers. With bounds, rows whose bounds rule out
    every other center are not measured again, so late iterations compute few distances.

    References
    ----------
    - C. Elkan, "Using the Triangle Inequality to Accelerate k-Means", Proceedings of the 20th International
      Conference on Machine Learning (ICML 2003), 147-153.
    - G. Hamerly, "Making k-means Even Faster", Proceedings of the 2010 SIAM International Conference on
      Data Mining (SDM 2010). doi:10.1137/1.9781611972801.12.
    - Y. Ding, Y. Zhao, X. Shen, M. Musuvathi, T. Mytkowicz, "Yinyang K-Means: A Drop-In Replacement of the
      Classic K-Means with Consistent Speedup", Proceedings of the 32nd International Conference on Machine
      Learning (ICML 2015), PMLR 37, 579-587.
    - B. Bahmani, B. Moseley, A. Vattani, R. Kumar, S. Vassilvitskii, "Scalable K-Means++", Proceedings of
      the VLDB Endowment 5(7), 622-633, 2012. doi:10.14778/2180912.2180915, arXiv:1203.6402.
    - O. Bachem, M. Lucic, S. H. Hassani, A. Krause, "Fast and Provably Good Seedings for k-Means", Advances
      in Neural Information Processing Systems 29 (NIPS 2016), 55-63.

    Examples
    --------
    Three well-separated blobs of 100 points each, clustered on the local threaded scheduler:

    >>> import numpy as np
    >>> from daskmeans import KMeans
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> model = KMeans(n_clusters=3, random_state=0).fit(X)
    >>> model.cluster_centers_.shape
    (3, 2)
    >>> sorted(np.bincount(model.labels_).tolist())
    [100, 100, 100]
    >>> model.algorithm_  # k < 8: plain Lloyd iterations
    'lloyd'
    >>> len(set(model.predict(blobs).tolist()))  # each blob's center gets its own label
    3

    The same estimator takes a path to a Zarr array, a dask array or an ``xarray.DataArray``, and runs on the
    active ``distributed.Client`` when there is one.
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means||",
        algorithm="auto",
        driver_rows="auto",
        n_init=1,
        max_iter=300,
        tol=1e-4,
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
        self.n_clusters = n_clusters
        self.init = init
        self.algorithm = algorithm
        self.driver_rows = driver_rows
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.max_time = max_time
        self.random_state = random_state
        self.init_rounds = init_rounds
        self.oversampling_factor = oversampling_factor
        self.init_sample_size = init_sample_size
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress
        self.snapshot_centers = snapshot_centers

    _parameter_constraints = {
        **ClusteringEstimator._parameter_constraints,
        "algorithm": Options(ALGORITHMS),
        "driver_rows": Rule(check_driver_rows),
        "n_init": Integer(1),
        "max_iter": Integer(1),
        "tol": Real(0.0),
        **SEEDING_CONSTRAINTS,
    }
    _model_scalars = ClusteringEstimator._model_scalars + ("algorithm_",)
    _supports_checkpoint = True
    #: A record's energy is that of the centers its iteration started from (:func:`daskmeans.plots.energy_timeline`).
    _energy_before_update = True

    def _prepare(self, X, sample_weight, client, on_opened=None, with_row_hash=False, storage_options=None):
        """Open and summarize the input (:func:`~daskmeans.estimators.base.prepare_input`). Where the iterations
        will run on the driver, the rows are copied there first and the summary pass runs on the copy: the copy's
        round trip stands for the pass's. The plan and the copy are handed to :meth:`_fit`."""
        chunk_rows = getattr(self, "chunk_rows", None)
        data, weights = open_for_fit(
            X, sample_weight, client, chunk_rows=chunk_rows, on_opened=on_opened, storage_options=storage_options
        )
        plan = plan_iterations(self, data, client)
        driver = DriverCopy.gather(data.array, weights, client) if plan.on_driver else None
        summary = summarize(data, weights, client, with_row_hash, driver)
        self._prepared = (with_tolerance(plan, self.tol, summary), driver)
        return data, weights, summary

    def _fit(self, data, weights, summary, client, checkpoint=None):
        check_init(self.init, self.n_clusters, data.n_features)
        plan, driver = self.__dict__.pop("_prepared", None) or (plan_kmeans(self, data, summary, client), None)
        clock = self._clock()
        start = FitStart(checkpoint, self.random_state, clock)
        saved = start.saved
        best = result_from_state(saved["best"]) if saved is not None and saved["best"] is not None else None
        first_run = saved["run"] if saved is not None else 0
        with SnapshotRecorder(self, clock, total=self.max_iter, desc="k-means") as recorder:
            self._keep_plan(plan, recorder)
            for run in range(first_run, self.n_init):
                # the state of the run under way is saved under "run_state", next to the best of the runs before
                hook = start.hook(
                    "run_state", fresh=run != first_run, run=run, best=None if best is None else result_to_state(best)
                )
                centers, passes, run_start = None, 0, clock.elapsed()
                if hook is None or hook.resume is None:
                    centers, passes = seed_centers(
                        self, data, weights, client, start.seed, plan=plan.seeding, run=run, recorder=recorder
                    )
                recorder.iterations(label="iterations" if self.n_init == 1 else f"run {run + 1}/{self.n_init}")
                context = RunContext(
                    clock=clock,
                    client=client,
                    callback=recorder,
                    passes=passes + 1,
                    checkpoint=hook,
                    weights=weights,
                    total_weight=summary.total_weight,
                    final_pass=self.n_init > 1,
                )
                if plan.on_driver and driver is None:
                    driver = DriverCopy.gather(data.array, weights, client)
                result = lloyd(data.array, centers, plan, context, driver)
                if self.n_init > 1 and result.inertia is None:
                    with recorder.final_pass(f"inertia of run {run + 1}/{self.n_init}"):
                        result.inertia = run_inertia(data.array, result.centers, weights, clock, client)
                if best is None or (result.inertia is not None and result.inertia < best.inertia):
                    best = result
                # the next run starts only if one as long as this one still ends within max_time
                out_of_time = result.inertia is None or clock.out_of_time(clock.elapsed() - run_start)
                if checkpoint is not None:
                    start.save(run=self.n_init if out_of_time else run + 1, best=result_to_state(best), run_state=None)
                if out_of_time:
                    break
        recorder.keep(self)
        self.cluster_centers_ = best.centers
        self.inertia_ = best.inertia
        self.n_iter_ = best.n_iter
        self.history_ = best.history
        self.algorithm_ = (
            best.history[-1]["bounds"].replace("none", "lloyd")
            if best.history
            else ("lloyd" if plan.scheme == "none" else plan.scheme)
        )
        self.stop_reason_ = best.stop_reason
        self._labels = None
