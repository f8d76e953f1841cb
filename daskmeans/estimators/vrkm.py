"""VRKM and VRKM++ (variance-reduced k-means) as an estimator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import config
from .._validation import check_choice, check_driver_rows, check_float, check_int
from ..algorithms.init import check_init
from ..algorithms.result import RunContext
from ..algorithms.vrkm import VARIANTS, VRKMPlan, vrkm, vrkm_plan
from ..engine.driver import DriverCopy, driver_rows
from ..engine.slabs import stored_form
from ..exceptions import InvalidParameterError
from ..kernels.vrkm_steps import AGREE_RULES
from ..progress import SnapshotRecorder
from .base import ClusteringEstimator
from .constraints import SEEDING_CONSTRAINTS, Integer, Options, Real, Rule
from .resume import FitStart, plan_seeding, seed_centers


def _check_learning_rate(value, name, estimator):
    if isinstance(value, str):
        if value != "auto":
            raise InvalidParameterError(f"learning_rate must be a number > 0 or 'auto'; got {value!r}.")
        return
    check_float(value, name, minimum=0.0, strict_minimum=True)


def _check_epoch_size(value, name, estimator):
    if isinstance(value, str):
        check_choice(value, name, ("doubling",))
    elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        check_int(value, "epoch_size (a number of steps)", minimum=1)
    elif isinstance(value, (float, np.floating)):
        check_float(value, "epoch_size (a fraction of n_samples)", minimum=0.0, strict_minimum=True)
    else:
        raise InvalidParameterError(
            f"epoch_size must be a fraction of n_samples (float > 0), a number of steps (int >= 1) or "
            f"'doubling'; got {value!r}."
        )


def vrkm_driver_rows(setting, n_clusters, n_features, stored_dtype) -> int:
    """Most rows whose epoch passes run on the driver (:func:`daskmeans.engine.driver.driver_rows`): a row takes its
    stored bytes twice (the data, and as much again for an epoch's sample and its copy in draw order) and its label
    and distance in the pass."""
    row_bytes = 2 * n_features * np.dtype(stored_dtype).itemsize + 12
    return driver_rows(setting, n_clusters, n_features, row_bytes)


class VRKMeans(ClusteringEstimator):
    """Variance-reduced k-means: VRKM and VRKM++ (Zhao et al.), one distributed pass per epoch.

    Each epoch assigns every sample to the current centers in one pass (which also draws the epoch's samples),
    corrects the centers' positions (VRKM++: the cluster means), then runs ``epoch_size`` sequential SVRG-style
    steps with a constant learning rate on the drawn samples, their nearest centers found ``inner_batch_size`` at a
    time by one GEMM. See :mod:`daskmeans.algorithms.vrkm`.

    Against :class:`KMeans` (whose distance bounds make its late iterations a fraction of a pass), VRKM++ is
    usually not the faster way to a tight energy, though it can be ahead early. At its constant learning rate it
    keeps changing labels from epoch to epoch, so its energy levels off slightly above the lowest that exact
    k-means reaches. The documentation's benchmarks page compares them.

    Parameters
    ----------
    n_clusters : int, default 8
    variant : {"vrkm++", "vrkm"}, default "vrkm++"
        VRKM++ (Algorithm 4) corrects the positions to the cluster means and needs no batch gradient; VRKM
        (Algorithms 2-3) corrects them by a gradient step and adds the batch gradient to every update.
    learning_rate : float or "auto", default "auto"
        Multiplier of the paper's constant learning rate ``eta = n_clusters / n_samples``; ``eta`` must stay
        below 1. The paper finds values larger than 1 help on large data; too large a multiplier stalls at a
        higher energy, the more so the longer the epochs. ``"auto"`` is
        :data:`~daskmeans.config.AUTO_LEARNING_RATE`, lowered where needed so that ``eta <= 0.5`` (small data with
        many clusters).
    epoch_size : float, int or "doubling", default 0.5
        Inner steps per epoch: a float is a fraction of ``n_samples``, an int a number of steps, ``"doubling"``
        the paper's ``2**s`` in epoch ``s``. A sample larger than :data:`~daskmeans.config.VRKM_POOL_BYTES` streams
        through the inner loop a pool at a time, each pool after the first read by a pass of its own, so memory stays
        bounded (the steps are the same).
    max_epochs : int, default 100
    tol : float, default 1e-5
        Stop when the energy changes by at most ``tol`` (relative) between two epochs' passes. The energy of a
        constant-rate stochastic loop moves by 1e-4 to 1e-3 per epoch long before it stops improving, hence a
        smaller default.
    init : {"k-means||", "k-means++", "afk-mc2", "two-level", "random"} or ndarray of shape (k, d), default "k-means||"
    max_time : float, optional
        Wall-clock budget in seconds, counted from the call to ``fit``: an epoch's inner loop starts only if,
        as long per step as the last one, it still ends within it, and an epoch's pass only if one as long as the
        last does; a pass under way when the budget ends is cut short (the fit returns the centers of the last
        epoch completed), and an inner loop reads no pool after it.
    random_state : int, numpy Generator or None
        Same value, same result on any scheduler and any number of workers.
    agree_rule : {"paper", "reference"}, default "paper"
        When a sample's nearest center is its snapshot label: leave the centers (the paper) or move that center
        towards its corrected position, ``c -= eta (c - c~new)`` (the authors' code).
    n_candidates : int, default 16
        Nearest centers remembered per sampled row to speed up the per-sample inner loop (``inner_batch_size=1``);
        the result does not depend on it.
    inner_batch_size : int, optional
        Draws of the inner loop whose nearest centers are found together, by one GEMM against the centers at the
        start of their batch (:mod:`daskmeans.kernels.vrkm_batched`); the steps themselves are the paper's, taken
        one draw at a time. 1 is the paper's per-sample loop (Algorithms 3 and 4 exactly), several times slower.
        Default (None): :data:`~daskmeans.config.VRKM_INNER_BATCH_SIZE` when the fit starts.
    driver_sample_bytes : int, optional
        The largest epoch sample (bytes of its rows) the driver holds for the inner loop; with a distributed client a
        larger one stays on the cluster and the inner loop runs on one worker, streaming it segment by segment
        (same result), and the data is not copied to the driver (``driver_rows``). Default: a quarter of the
        driver's available memory.
    driver_rows : "auto" or int, default "auto"
        Data of at most this many rows is copied into the driver's memory after the seeding (from the workers on a
        cluster), and the epoch passes run on the driver's threads, block by block, without a Dask graph or a round
        trip to the workers (:class:`~daskmeans.engine.driver.DriverCopy`); the result is the same to the last
        bit. ``"auto"``: the rule of :class:`KMeans` (:func:`vrkm_driver_rows`); 0 keeps every pass on the
        workers. Either way only when the largest epoch sample fits ``driver_sample_bytes`` (so not with
        ``epoch_size="doubling"`` over many epochs), since every sample then comes to the driver.
    init_rounds, oversampling_factor, init_sample_size : seeding options, as in :class:`KMeans`.
    chunk_rows : int, optional
        Rows per block when daskmeans chunks the input (NumPy, .npy) or to rechunk a store.
    client : distributed.Client, optional
        Cluster to run on; default the active client, else ``DASK_SCHEDULER_ADDRESS``, else local threads.
    progress : bool or callable, default False
        Show a progress bar over epochs with the current energy.
    snapshot_centers : bool, default False
        Keep a copy of the centers after every epoch in ``center_snapshots_`` (for energy-over-time benchmarks;
        not saved with the model).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
        Sum of squared distances to the final centers (a final pass, or the pass that stopped the run).
    n_iter_ : int
        Epochs run.
    eta_ : float
        The learning rate used.
    history_ : list of dict
        Per epoch: ``energy`` after the pass (mean squared distance to the centers the epoch started from),
        ``epoch_size``, ``inner_steps``, ``changed`` (steps that moved centers), ``agree_updates``,
        ``distances_per_step`` (of k a full search would need), ``lists_remade`` (segments whose candidate lists
        were remade), ``pools`` (pools of the sample the inner loop took, each after the first read by a pass of its
        own: see :data:`~daskmeans.config.VRKM_POOL_BYTES`), ``pass_time``, ``inner_time``, ``inner_on`` (driver or
        worker address), ``relocated``,
        ``wall_time`` (at the end of the pass), ``passes``; the last record also has ``stop_reason``. The epoch
        that stops the run (tolerance or time reached at its pass) has no inner-loop fields.
    center_snapshots_ : list of dict
        Only with ``snapshot_centers=True``: the initial centers and the centers after each epoch's inner loop,
        as ``{"iteration", "wall_time", "perf_counter", "centers"}`` (``iteration`` is the epoch).
    stop_reason_ : str
        ``"converged"``, ``"max_epochs"`` or ``"max_time"``.
    fit_plan_ : VRKMPlan
        What the fit decided from the data before its epochs, with the reason for each choice
        (:class:`daskmeans.algorithms.vrkm.VRKMPlan`): the learning rate (``eta``), the inner loop's batch, the
        driver's sample budget (``sample_bytes``; a larger epoch sample stays on the workers), whether the epoch
        passes run on the driver (``driver_rows``, ``on_driver``) and the seeding's rows (``seeding``). Shown
        above the progress bars.

    See Also
    --------
    KMeans : Exact k-means, one pass over all the data per iteration.
    MiniBatchKMeans : Mini-batch k-means (Sculley), a quick approximate fit.
    NestedMiniBatchKMeans : Nested mini-batches with distance bounds.

    References
    ----------
    - Y. Zhao, Y. Ming, X. Liu, E. Zhu, K. Zhao, J. Yin, "Large-scale k-means clustering via variance
      reduction", Neurocomputing 307, 184-194, 2018. doi:10.1016/j.neucom.2018.03.059.
    - D. Sculley, "Web-scale k-means clustering", Proceedings of the 19th International Conference on World
      Wide Web (WWW 2010). doi:10.1145/1772690.1772862.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import VRKMeans
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> model = VRKMeans(n_clusters=3, random_state=0).fit(X)
    >>> model.cluster_centers_.shape
    (3, 2)
    >>> sorted(np.bincount(model.labels_).tolist())
    [100, 100, 100]
    >>> model.variant
    'vrkm++'
    >>> len(set(model.predict(blobs).tolist()))
    3
    """

    _model_scalars = ClusteringEstimator._model_scalars + ("eta_",)

    def __init__(
        self,
        n_clusters=8,
        *,
        variant="vrkm++",
        learning_rate="auto",
        epoch_size=0.5,
        max_epochs=100,
        tol=1e-5,
        init="k-means||",
        max_time=None,
        random_state=None,
        agree_rule="paper",
        n_candidates=16,
        inner_batch_size=None,
        driver_sample_bytes=None,
        driver_rows="auto",
        init_rounds=5,
        oversampling_factor=2.0,
        init_sample_size=None,
        chunk_rows=None,
        client=None,
        progress=False,
        snapshot_centers=False,
    ):
        self.n_clusters = n_clusters
        self.variant = variant
        self.learning_rate = learning_rate
        self.epoch_size = epoch_size
        self.max_epochs = max_epochs
        self.tol = tol
        self.init = init
        self.max_time = max_time
        self.random_state = random_state
        self.agree_rule = agree_rule
        self.n_candidates = n_candidates
        self.inner_batch_size = inner_batch_size
        self.driver_sample_bytes = driver_sample_bytes
        self.driver_rows = driver_rows
        self.init_rounds = init_rounds
        self.oversampling_factor = oversampling_factor
        self.init_sample_size = init_sample_size
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress
        self.snapshot_centers = snapshot_centers

    _parameter_constraints = {
        **ClusteringEstimator._parameter_constraints,
        "variant": Options(VARIANTS),
        "learning_rate": Rule(_check_learning_rate),
        "epoch_size": Rule(_check_epoch_size),
        "max_epochs": Integer(1),
        "tol": Real(0.0),
        "agree_rule": Options(AGREE_RULES),
        "n_candidates": Integer(1),
        "inner_batch_size": Integer(1, none=True),
        "driver_sample_bytes": Integer(0, none=True),
        "driver_rows": Rule(check_driver_rows),
        **SEEDING_CONSTRAINTS,
    }
    _supports_checkpoint = True
    #: A record's energy is that of the centers its epoch started from (:func:`daskmeans.plots.energy_timeline`).
    _energy_before_update = True

    def _eta(self, n_samples) -> tuple[float, str]:
        """The constant learning rate for ``n_samples`` rows, and why.

        Raises
        ------
        InvalidParameterError
            ``eta`` above 1 (every step would overshoot its sample).
        """
        if self.learning_rate == "auto":
            eta = min(config.AUTO_LEARNING_RATE * self.n_clusters / n_samples, 0.5)
            why = f"AUTO_LEARNING_RATE={config.AUTO_LEARNING_RATE} times k / n, at most 0.5"
        else:
            eta = float(self.learning_rate) * self.n_clusters / n_samples
            why = f"learning_rate={self.learning_rate} times k / n"
        if eta > 1.0:
            raise InvalidParameterError(
                f"The learning rate eta = learning_rate * n_clusters / n_samples = {self.learning_rate} * "
                f"{self.n_clusters} / {n_samples} = {eta:.3g} exceeds 1, so each step would overshoot the "
                f"sample; use learning_rate <= {n_samples / self.n_clusters:.3g}."
            )
        return eta, why

    def _plan(self, data, client, seed) -> VRKMPlan:
        """Every data-dependent choice of the fit, made once (:func:`~daskmeans.algorithms.vrkm.vrkm_plan`): the
        learning rate, the inner loop's batch, the driver's sample budget, whether the epoch passes run on the
        driver (``driver_rows``, :func:`vrkm_driver_rows`, and the largest epoch sample within that budget) and
        the seeding's sample."""
        eta, why = self._eta(data.n_samples)
        rows = vrkm_driver_rows(self.driver_rows, self.n_clusters, data.n_features, stored_form(data.array).dtype)
        plan = vrkm_plan(
            data.array,
            driver_sample_bytes=self.driver_sample_bytes,
            inner_batch_size=self.inner_batch_size,
            driver_rows=rows,
            variant=self.variant,
            eta=eta,
            epoch_size=self.epoch_size,
            max_epochs=self.max_epochs,
            tol=self.tol,
            seed=seed,
            agree_rule=self.agree_rule,
            n_candidates=self.n_candidates,
            seeding=plan_seeding(self, data, client),
        )
        return replace(plan, reasons={**plan.reasons, "eta": why, "driver_rows": f"driver_rows={self.driver_rows!r}"})

    def _fit(self, data, weights, summary, client, checkpoint=None):
        check_init(self.init, self.n_clusters, data.n_features)
        clock = self._clock()
        start = FitStart(checkpoint, self.random_state, clock)
        hook = start.hook()
        plan = self._plan(data, client, start.seed)
        with SnapshotRecorder(self, clock, total=self.max_epochs, desc=self.variant, unit="epochs") as recorder:
            self._keep_plan(plan, recorder)
            centers, passes = None, 0
            if hook is None or hook.resume is None:
                centers, passes = seed_centers(
                    self, data, weights, client, start.seed, plan=plan.seeding, recorder=recorder
                )
            driver = DriverCopy.gather(data.array, weights, client) if plan.on_driver else None
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
            result = vrkm(data.array, centers, plan, context, driver)
        recorder.keep(self)
        self.cluster_centers_ = result.centers
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.eta_ = plan.eta
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self._labels = None
