"""The public estimators: thin sklearn-style classes that validate, call an algorithm and keep its results."""

from __future__ import annotations

import inspect

import dask.array as da
import numpy as np

from ._client import compute_now, persist_now, resolve_client
from ._random import seed_from_random_state, stage_key
from ._validation import check_float, check_int, check_max_time
from .algorithms.init import check_init, initial_centers
from .algorithms.lloyd import final_inertia, lloyd
from .algorithms.result import Clock
from .exceptions import InputDataError, InvalidParameterError, NotFittedError, not_fitted_error
from .io import Dataset, open_input
from .passes.assign import assign_stats_graph, finish_stats, lazy_labels, lazy_transform
from .passes.summary import check_summary, finish_summary, summary_graph


class ClusteringEstimator:
    """Shared plumbing: parameters, input handling, prediction, persistence.

    Subclasses define ``__init__`` (parameters only, scikit-learn style) and ``_fit(data, weights, client)``
    that sets the fitted attributes.
    """

    _model_arrays: tuple[str, ...] = ("cluster_centers_",)
    _model_scalars: tuple[str, ...] = ("inertia_", "n_iter_", "n_features_in_", "stop_reason_")

    # -- parameters ---------------------------------------------------------------------------------------
    @classmethod
    def _get_param_names(cls):
        signature = inspect.signature(cls.__init__)
        return sorted(p.name for p in signature.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep=True):
        """Parameters of this estimator, as given to ``__init__``."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params):
        """Set parameters; unknown names raise ``InvalidParameterError``."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(
                    f"Invalid parameter {name!r} for {type(self).__name__}; valid parameters are {valid}."
                )
            setattr(self, name, value)
        return self

    def __repr__(self):
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"
        }
        changed = []
        for name in self._get_param_names():
            value = getattr(self, name)
            default = defaults.get(name)
            same = value is default or (
                not isinstance(value, np.ndarray) and not isinstance(default, np.ndarray) and value == default
            )
            if not same:
                changed.append(f"{name}={'array' if isinstance(value, np.ndarray) else repr(value)}")
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self):
        from sklearn.utils import Tags, TargetTags, TransformerTags

        return Tags(
            estimator_type="clusterer",
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(),
            non_deterministic=False,
        )

    def __sklearn_is_fitted__(self):
        return hasattr(self, "cluster_centers_")

    def _validate_common_params(self):
        """Checks every estimator shares: seeding, chunking, snapshots, random_state."""
        check_int(self.n_clusters, "n_clusters", minimum=1)
        check_max_time(self.max_time)
        check_int(self.init_rounds, "init_rounds", minimum=1)
        check_float(self.oversampling_factor, "oversampling_factor", minimum=0.0, strict_minimum=True)
        check_int(self.init_sample_size, "init_sample_size", minimum=1, allow_none=True)
        check_int(self.chunk_rows, "chunk_rows", minimum=1, allow_none=True)
        if not isinstance(self.snapshot_centers, (bool, np.bool_)):
            raise InvalidParameterError(f"snapshot_centers must be True or False, got {self.snapshot_centers!r}.")
        if isinstance(self.init, str):
            check_init(self.init, self.n_clusters, 0)
        seed_from_random_state(0 if self.random_state is None else self.random_state)

    # -- data ---------------------------------------------------------------------------------------------
    def _open(self, X, name="X") -> Dataset:
        return open_input(X, chunk_rows=getattr(self, "chunk_rows", None), name=name)

    def _weights(self, sample_weight, data: Dataset):
        if sample_weight is None:
            return None
        if isinstance(sample_weight, da.Array):
            weights = sample_weight
        else:
            weights = np.asarray(sample_weight)
            if weights.ndim == 0:
                weights = np.full(data.n_samples, float(weights))
        if weights.ndim != 1 or weights.shape[0] != data.n_samples:
            raise InputDataError(
                f"sample_weight must have shape ({data.n_samples},), one weight per sample; got {weights.shape}."
            )
        if weights.dtype.kind not in "fiu":
            raise InputDataError(f"sample_weight must be numeric, got dtype {weights.dtype}.")
        if isinstance(weights, da.Array):
            return weights.astype(np.float64).rechunk((data.array.chunks[0],))
        return da.from_array(weights.astype(np.float64), chunks=(data.array.chunks[0],))

    def _prepare(self, X, sample_weight, client, on_opened=None):
        """Open the input, run the summary pass (which validates the values) and check ``n_clusters``.

        ``on_opened(data, weights)``, when given, runs before the summary pass (checks that need no values).
        """
        data = self._open(X)
        weights = self._weights(sample_weight, data)
        if on_opened is not None:
            on_opened(data, weights)
        if data.in_memory and client is not None:
            (array,) = persist_now(data.array, client=client)
            data.array = array
        (raw,) = compute_now(summary_graph(data.array, weights), client=client)
        summary = finish_summary(raw, data.n_samples)
        check_summary(summary, data.dtype)
        return data, weights, summary

    def _check_fitted(self):
        if not hasattr(self, "cluster_centers_"):
            raise not_fitted_error(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with appropriate arguments "
                "before using this estimator."
            )

    def _check_predict_input(self, X) -> Dataset:
        self._check_fitted()
        data = self._open(X)
        if data.n_features != self.n_features_in_:
            raise InputDataError(
                f"X has {data.n_features} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return data

    def _centers_for(self, data: Dataset):
        return np.ascontiguousarray(self.cluster_centers_, dtype=data.dtype)

    @staticmethod
    def _like_input(data: Dataset, lazy, name="labels"):
        """NumPy in, NumPy out; xarray in, xarray out; otherwise a lazy dask array."""
        if data.in_memory:
            return compute_now(lazy)[0]
        if data.is_xarray:
            import xarray as xr

            dims = (data.sample_dim,) if lazy.ndim == 1 else (data.sample_dim, "cluster")
            return xr.DataArray(lazy, dims=dims, coords=data.sample_coords, name=name)
        return lazy

    # -- public methods -------------------------------------------------------------------------------------
    #: Whether ``fit(..., checkpoint=PATH)`` is supported (``_fit`` then takes ``checkpoint=``).
    _supports_checkpoint = False

    def fit(self, X, y=None, sample_weight=None, checkpoint=None):
        """Fit the model to ``X``.

        Parameters
        ----------
        X : array-like, dask array, xarray.DataArray or path to a Zarr store / .npy file, shape (n, d)
        y : ignored
        sample_weight : array-like of shape (n,), optional
            Non-negative weight of each sample (e.g. coreset weights).
        checkpoint : str or os.PathLike, optional
            A directory where the fit's state is saved after every iteration; running the same fit again with
            the same directory resumes from it, with the same result as an uninterrupted run. A checkpoint of
            other data or other parameters is refused (:mod:`daskmeans.checkpoint`).

        Returns
        -------
        self
        """
        self._validate_params()
        opened = []
        if checkpoint is not None:
            from .checkpoint import check_supported, open_checkpoint

            check_supported(self)
        client = resolve_client(getattr(self, "client", None))

        def open_checkpoint_for(data, weights):  # before the summary pass: all but the values are checked
            if checkpoint is not None:
                opened.append(open_checkpoint(checkpoint, self, data, weights))

        data, weights, summary = self._prepare(X, sample_weight, client, on_opened=open_checkpoint_for)
        if self.n_clusters > data.n_samples:
            raise InputDataError(
                f"n_samples={data.n_samples} should be >= n_clusters={self.n_clusters}; lower n_clusters or "
                "pass more data."
            )
        if opened:
            try:
                opened[0].check_content(summary)
                self._fit(data, weights, summary, client, checkpoint=opened[0])
            finally:
                opened[0].close()
        else:
            self._fit(data, weights, summary, client)
        self.n_features_in_ = data.n_features
        self._fitted_data = data
        self._fitted_weights = weights
        return self

    def predict(self, X):
        """Index of the nearest center for each sample of ``X`` (lazy for dask and Zarr input)."""
        data = self._check_predict_input(X)
        return self._like_input(data, lazy_labels(data.array, self._centers_for(data)))

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit, then return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X):
        """Euclidean distance of each sample to every center, shape (n, k) (lazy for dask and Zarr input)."""
        data = self._check_predict_input(X)
        return self._like_input(data, lazy_transform(data.array, self._centers_for(data)), name="distance")

    def fit_transform(self, X, y=None, sample_weight=None):
        """Fit, then ``transform(X)``."""
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the (weighted) sum of squared distances of ``X`` to the nearest centers."""
        data = self._check_predict_input(X)
        weights = self._weights(sample_weight, data)
        client = resolve_client(getattr(self, "client", None))
        graph = assign_stats_graph(data.array, self._centers_for(data), weights, check_finite=True)
        (raw,) = compute_now(graph, client=client)
        return -finish_stats(raw).inertia

    @property
    def labels_(self):
        """Label of each training sample: NumPy for NumPy input, else lazy and chunk-aligned with the input."""
        self._check_fitted()
        if getattr(self, "_labels", None) is None:
            data = getattr(self, "_fitted_data", None)
            if data is None:
                raise NotFittedError(
                    "labels_ belong to the data the model was fitted on, which a loaded model does not have; "
                    "call predict(X) instead."
                )
            self._labels = self._like_input(data, lazy_labels(data.array, self._centers_for(data)))
        return self._labels

    @property
    def inertia_(self):
        """Weighted sum of squared distances of the training samples to their nearest center.

        A fit that stops while the centers still move leaves this to one more pass, made on first access.
        """
        self._check_fitted()
        if getattr(self, "_inertia", None) is None:
            data = getattr(self, "_fitted_data", None)
            if data is None:
                raise NotFittedError("inertia_ is unknown for this model; compute it with -model.score(X).")
            client = resolve_client(getattr(self, "client", None))
            self._inertia = final_inertia(data.array, self._centers_for(data), self._fitted_weights, client)
        return self._inertia

    @inertia_.setter
    def inertia_(self, value):
        self._inertia = value

    def __getstate__(self):
        if getattr(self, "_fitted_data", None) is not None:
            self.inertia_  # noqa: B018  (the data does not travel with a pickled model: settle it now)
            if self._fitted_data.in_memory:
                self.labels_  # noqa: B018
        state = self.__dict__.copy()
        state.pop("_fitted_data", None)
        state.pop("_fitted_weights", None)
        return state

    def save(self, path, *, overwrite=False):
        """Write the fitted model to a Zarr group (arrays and JSON attributes; no pickle)."""
        from .persistence import save_model

        return save_model(self, path, overwrite=overwrite)


class KMeans(ClusteringEstimator):
    """Exact k-means (Lloyd's algorithm) on data of any size, one distributed pass per iteration.

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "afk-mc2", "random"} or ndarray (n_clusters, n_features), default "k-means||"
        Seeding: k-means|| (Bahmani et al.) over all rows, greedy k-means++ on a sample, AFK-MC2 (Bachem et al.)
        Markov chains, random distinct rows, or given centers.
    n_init : int, default 1
        Runs from different seeds; the one with the lowest inertia is kept.
    max_iter : int, default 300
    tol : float, default 1e-4
        Relative tolerance: stop when the sum of squared center shifts is below ``tol`` times the mean
        per-feature variance of the data (as scikit-learn).
    max_time : float, optional
        Wall-clock budget in seconds; the run stops after the iteration that exceeds it.
    random_state : int, numpy Generator or None
        Same value, same result on any scheduler and any number of workers.
    init_rounds : int, default 5
        Rounds of k-means||.
    oversampling_factor : float, default 2.0
        k-means|| draws about ``oversampling_factor * n_clusters`` candidates per round.
    init_sample_size : int, optional
        Sample size for ``init="k-means++"`` (default ``max(20 k, 10000)``).
    chunk_rows : int, optional
        Rows per block when daskmeans chunks the input (NumPy, .npy) or to rechunk a store.
    client : distributed.Client, optional
        Cluster to run on; default the active client, else ``DASK_SCHEDULER_ADDRESS``, else local threads.
    progress : bool or callable, default False
        Show a progress bar over iterations with the current energy; a callable is called with each history
        record instead.
    snapshot_centers : bool, default False
        Keep a copy of the centers after every iteration in ``center_snapshots_`` (for energy-over-time
        benchmarks; costs one ``(n_clusters, n_features)`` copy per iteration; not saved with the model).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features), dtype of the (float) input
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
    n_iter_ : int
    history_ : list of dict
        Per iteration: ``energy`` (mean squared distance), ``inertia``, ``center_shift``, ``wall_time``, ``passes``.
    stop_reason_ : str
    center_snapshots_ : list of dict
        Only with ``snapshot_centers=True``: the initial centers and the centers after each iteration, as
        ``{"iteration", "wall_time", "perf_counter", "centers"}`` (``wall_time`` on the clock of ``history_``).
    """

    def __init__(self, n_clusters=8, *, init="k-means||", n_init=1, max_iter=300, tol=1e-4, max_time=None,
                 random_state=None, init_rounds=5, oversampling_factor=2.0, init_sample_size=None, chunk_rows=None,
                 client=None, progress=False, snapshot_centers=False):
        self.n_clusters = n_clusters
        self.init = init
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

    def _validate_params(self):
        check_int(self.n_clusters, "n_clusters", minimum=1)
        check_int(self.n_init, "n_init", minimum=1)
        check_int(self.max_iter, "max_iter", minimum=1)
        check_float(self.tol, "tol", minimum=0.0)
        self._validate_common_params()

    _supports_checkpoint = True

    def _fit(self, data, weights, summary, client, checkpoint=None):
        from .checkpoint import restore_clock, result_from_state, result_to_state

        check_init(self.init, self.n_clusters, data.n_features)
        saved = checkpoint.state if checkpoint is not None else None
        seed = saved["seed"] if saved is not None else seed_from_random_state(self.random_state)
        tol = self.tol * summary.mean_variance
        clock = Clock(self.max_time)
        if saved is not None:
            restore_clock(clock, saved["elapsed"])
        from .progress import ProgressReporter

        best = result_from_state(saved["best"]) if saved is not None and saved["best"] is not None else None
        first_run = saved["run"] if saved is not None else 0

        def state(run, run_state):
            return {"seed": seed, "elapsed": clock.elapsed(), "run": run,
                    "best": None if best is None else result_to_state(best), "run_state": run_state}

        snapshots = [] if self.snapshot_centers else None
        with ProgressReporter(self.progress, desc="k-means") as reporter:
            for run in range(first_run, self.n_init):
                hook = None
                run_state = saved["run_state"] if saved is not None and run == first_run else None
                if checkpoint is not None:
                    hook = checkpoint.hook(run_state, wrap=lambda lloyd_state, run=run: state(run, lloyd_state))
                centers, passes = None, 0
                if run_state is None:
                    centers, passes = initial_centers(
                        data.array, self.n_clusters, self.init, stage_key(seed, "init", run), weights=weights,
                        client=client, rounds=self.init_rounds, oversampling_factor=self.oversampling_factor,
                        sample_size=self.init_sample_size,
                    )
                result = lloyd(data.array, centers, weights=weights, total_weight=summary.total_weight,
                               max_iter=self.max_iter, tol=tol, clock=clock, client=client,
                               callback=reporter.update, passes=passes + 1, snapshots=snapshots, checkpoint=hook)
                if self.n_init > 1 and result.inertia is None:
                    result.inertia = final_inertia(data.array, result.centers, weights, client)
                if best is None or result.inertia < best.inertia:
                    best = result
                out_of_time = clock.out_of_time()
                if checkpoint is not None:
                    checkpoint.save(state(self.n_init if out_of_time else run + 1, None))
                if out_of_time:
                    break
        self.cluster_centers_ = best.centers
        self.inertia_ = best.inertia
        self.n_iter_ = best.n_iter
        self.history_ = best.history
        self.stop_reason_ = best.stop_reason
        if snapshots is not None:
            self.center_snapshots_ = snapshots
        self._labels = None


def _seed_or_resume(estimator, data, weights, client, checkpoint, clock):
    """Root seed, checkpoint hook and initial centers of a fit with the shared seeding parameters.

    A fit that resumes from a checkpoint takes its centers from the algorithm's saved state: ``centers`` is then
    None and ``passes`` 0.
    """
    seed, hook = _resume_point(checkpoint, estimator.random_state, clock)
    centers, passes = None, 0
    if hook is None or hook.resume is None:
        centers, passes = initial_centers(
            data.array, estimator.n_clusters, estimator.init, stage_key(seed, "init", 0), weights=weights,
            client=client, rounds=estimator.init_rounds, oversampling_factor=estimator.oversampling_factor,
            sample_size=estimator.init_sample_size,
        )
    return seed, hook, centers, passes


def _resume_point(checkpoint, random_state, clock):
    """The root seed and the algorithm's checkpoint hook (None without a checkpoint).

    A resumed fit takes the seed and the elapsed time from the checkpoint; the algorithm's own state is under
    ``"algorithm"``.
    """
    if checkpoint is None:
        return seed_from_random_state(random_state), None
    from .checkpoint import restore_clock

    saved = checkpoint.state
    if saved is None:
        seed = seed_from_random_state(random_state)
    else:
        seed = saved["seed"]
        restore_clock(clock, saved["elapsed"])
    hook = checkpoint.hook(None if saved is None else saved["algorithm"],
                           wrap=lambda state: {"seed": seed, "elapsed": clock.elapsed(), "algorithm": state})
    return seed, hook


def _check_loaded_centers(estimator, path):
    centers = estimator.cluster_centers_
    n_features = getattr(estimator, "n_features_in_", None)
    if centers.ndim != 2 or centers.shape[0] != estimator.n_clusters or centers.shape[1] != n_features:
        raise_damaged(path, f"cluster_centers has shape {centers.shape}, expected ({estimator.n_clusters}, "
                            f"{n_features})")
    if centers.dtype.kind != "f" or not np.isfinite(centers).all():
        raise_damaged(path, "cluster_centers is not a finite float array")


def raise_damaged(path, what):
    from .exceptions import ModelFileError

    raise ModelFileError(f"{path!r} is damaged: {what}.")


ClusteringEstimator._check_loaded = _check_loaded_centers


#: The multiplier of ``n_clusters / n_samples`` that ``VRKMeans(learning_rate="auto")`` uses.
AUTO_LEARNING_RATE = 4.0


class VRKMeans(ClusteringEstimator):
    """Variance-reduced k-means: VRKM and VRKM++ (Zhao et al.), one distributed pass per epoch.

    Each epoch assigns every sample to the current centers in one pass (which also draws the epoch's samples),
    corrects the centers' positions (VRKM++: the cluster means), then runs ``epoch_size`` sequential SVRG-style
    steps with a constant learning rate on the drawn samples. See :mod:`daskmeans.algorithms.vrkm`.

    Parameters
    ----------
    n_clusters : int, default 8
    variant : {"vrkm++", "vrkm"}, default "vrkm++"
        VRKM++ (Algorithm 4) corrects the positions to the cluster means and needs no batch gradient; VRKM
        (Algorithms 2-3) corrects them by a gradient step and adds the batch gradient to every update.
    learning_rate : float or "auto", default "auto"
        Multiplier of the paper's constant learning rate ``eta = n_clusters / n_samples``; ``eta`` must stay
        below 1. The paper finds values larger than 1 help on large data; 4 did best of 1, 2, 4, 8 and 16 on
        960,000 SIFT descriptors with k = 1000 and ``epoch_size=0.5`` (8 and more stall at a higher energy, as
        does 4 with ``epoch_size=1.0``). ``"auto"`` is 4, lowered where needed so that ``eta <= 0.5`` (small
        data with many clusters).
    epoch_size : float, int or "doubling", default 0.5
        Inner steps per epoch: a float is a fraction of ``n_samples``, an int a number of steps, ``"doubling"``
        the paper's ``2**s`` in epoch ``s``.
    max_epochs : int, default 100
    tol : float, default 1e-4
        Stop when the energy changes by at most ``tol`` (relative) between two epochs' passes.
    init : {"k-means||", "k-means++", "afk-mc2", "random"} or ndarray (n_clusters, n_features), default "k-means||"
    max_time : float, optional
        Wall-clock budget in seconds; the run stops after the pass or inner loop that exceeds it.
    random_state : int, numpy Generator or None
        Same value, same result on any scheduler and any number of workers.
    agree_rule : {"paper", "reference"}, default "paper"
        When a sample's nearest center is its snapshot label: leave the centers (the paper) or move that center
        towards its corrected position, ``c -= eta (c - c~new)`` (the authors' code).
    n_candidates : int, default 16
        Nearest centers remembered per sampled row to speed up the inner loop; the result does not depend on it.
    driver_sample_bytes : int, optional
        Largest epoch sample (bytes of its rows) the driver holds for the inner loop; with a distributed client a
        larger one stays on the cluster and the inner loop runs on one worker, streaming it segment by segment
        (same result). Default: a quarter of the driver's available memory.
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
        were remade), ``pass_time``, ``inner_time``, ``inner_on`` (driver or worker address), ``relocated``,
        ``wall_time`` (at the end of the pass), ``passes``; the last record also has ``stop_reason``. The epoch
        that stops the run (tolerance or time reached at its pass) has no inner-loop fields.
    center_snapshots_ : list of dict
        Only with ``snapshot_centers=True``: the initial centers and the centers after each epoch's inner loop,
        as ``{"iteration", "wall_time", "perf_counter", "centers"}`` (``iteration`` is the epoch).
    stop_reason_ : str
        ``"converged"``, ``"max_epochs"`` or ``"max_time"``.
    """

    _model_scalars = ClusteringEstimator._model_scalars + ("eta_",)

    def __init__(self, n_clusters=8, *, variant="vrkm++", learning_rate="auto", epoch_size=0.5, max_epochs=100,
                 tol=1e-4, init="k-means||", max_time=None, random_state=None, agree_rule="paper", n_candidates=16,
                 driver_sample_bytes=None, init_rounds=5, oversampling_factor=2.0, init_sample_size=None,
                 chunk_rows=None, client=None, progress=False, snapshot_centers=False):
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
        self.driver_sample_bytes = driver_sample_bytes
        self.init_rounds = init_rounds
        self.oversampling_factor = oversampling_factor
        self.init_sample_size = init_sample_size
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress
        self.snapshot_centers = snapshot_centers

    def _validate_params(self):
        from ._validation import check_choice
        from .algorithms.vrkm import VARIANTS
        from .kernels.vrkm import AGREE_RULES

        check_int(self.n_clusters, "n_clusters", minimum=1)
        check_choice(self.variant, "variant", VARIANTS)
        if not (isinstance(self.learning_rate, str) and self.learning_rate == "auto"):
            if isinstance(self.learning_rate, str):
                raise InvalidParameterError(
                    f"learning_rate must be a number > 0 or 'auto'; got {self.learning_rate!r}."
                )
            check_float(self.learning_rate, "learning_rate", minimum=0.0, strict_minimum=True)
        if isinstance(self.epoch_size, str):
            check_choice(self.epoch_size, "epoch_size", ("doubling",))
        elif isinstance(self.epoch_size, (int, np.integer)) and not isinstance(self.epoch_size, (bool, np.bool_)):
            check_int(self.epoch_size, "epoch_size (a number of steps)", minimum=1)
        elif isinstance(self.epoch_size, (float, np.floating)):
            check_float(self.epoch_size, "epoch_size (a fraction of n_samples)", minimum=0.0, strict_minimum=True)
        else:
            raise InvalidParameterError(
                f"epoch_size must be a fraction of n_samples (float > 0), a number of steps (int >= 1) or "
                f"'doubling'; got {self.epoch_size!r}."
            )
        check_int(self.max_epochs, "max_epochs", minimum=1)
        check_float(self.tol, "tol", minimum=0.0)
        check_max_time(self.max_time)
        check_choice(self.agree_rule, "agree_rule", AGREE_RULES)
        check_int(self.n_candidates, "n_candidates", minimum=1)
        check_int(self.driver_sample_bytes, "driver_sample_bytes", minimum=0, allow_none=True)
        self._validate_common_params()

    _supports_checkpoint = True

    def _fit(self, data, weights, summary, client, checkpoint=None):
        from .algorithms.vrkm import vrkm
        from .progress import ProgressReporter

        check_init(self.init, self.n_clusters, data.n_features)
        if self.learning_rate == "auto":
            eta = min(AUTO_LEARNING_RATE * self.n_clusters / data.n_samples, 0.5)
        else:
            eta = float(self.learning_rate) * self.n_clusters / data.n_samples
        if eta > 1.0:
            raise InvalidParameterError(
                f"The learning rate eta = learning_rate * n_clusters / n_samples = {self.learning_rate} * "
                f"{self.n_clusters} / {data.n_samples} = {eta:.3g} exceeds 1, so each step would overshoot the "
                f"sample; use learning_rate <= {data.n_samples / self.n_clusters:.3g}."
            )
        clock = Clock(self.max_time)
        seed, hook, centers, passes = _seed_or_resume(self, data, weights, client, checkpoint, clock)
        snapshots = [] if self.snapshot_centers else None
        with ProgressReporter(self.progress, total=self.max_epochs, desc=self.variant) as reporter:
            result = vrkm(
                data.array, centers, variant=self.variant, eta=eta, epoch_size=self.epoch_size,
                max_epochs=self.max_epochs, tol=self.tol, seed=seed, weights=weights,
                total_weight=summary.total_weight, agree_rule=self.agree_rule, n_candidates=self.n_candidates,
                driver_sample_bytes=self.driver_sample_bytes, clock=clock, client=client,
                callback=reporter.update, passes=passes + 1, snapshots=snapshots, checkpoint=hook,
            )
        self.cluster_centers_ = result.centers
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.eta_ = eta
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        if snapshots is not None:
            self.center_snapshots_ = snapshots
        self._labels = None


# -- nested mini-batch k-means and mini-batch k-means -------------------------------------------------------
class SnapshotRecorder:
    """Copies of the centers with their wall times (``snapshot_centers=True``), fed by an algorithm's callback.

    Parameters
    ----------
    enabled : bool
    clock : Clock
    reporter : ProgressReporter
        Still updated with every record.
    """

    def __init__(self, enabled, clock, reporter):
        self.snapshots = [] if enabled else None
        self.clock = clock
        self.reporter = reporter

    def start(self, centers):
        self._add(0, self.clock.elapsed(), centers)

    def _add(self, iteration, wall_time, centers):
        if self.snapshots is not None:
            import time

            self.snapshots.append({"iteration": iteration, "wall_time": wall_time,
                                   "perf_counter": time.perf_counter(), "centers": np.array(centers, copy=True)})

    def __call__(self, record):
        self.reporter.update(record)
        if "_centers" in record:
            self._add(record["iteration"], record["wall_time"], record["_centers"])


class NestedMiniBatchKMeans(ClusteringEstimator):
    """Nested mini-batch k-means, nmbatch (Newling & Fleuret, NIPS 2016), on data of any size.

    The data is shuffled once (chunks in a random order, rows in a random order inside each chunk, nothing
    moved); the batch is the first ``b`` rows of that order and lives on the workers with its labels,
    distances and distance bounds. Every iteration revisits the whole batch (bounds skip most distance
    computations), each sample counting exactly once in the per-cluster sums, and the batch doubles when
    the median over clusters of ``sigma_C(j) / p(j)`` exceeds ``rho`` (``doubling_quantile=0`` takes the
    minimum, the paper's rule). The bounds never change a label: results are those of exact assignments.

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "afk-mc2", "random"} or ndarray (n_clusters, n_features), default "k-means||"
    initial_batch_size : int, optional
        First batch size; default ``max(5000, 10 * n_clusters)`` (capped at the number of samples).
    rho : float, default 1.0
        Doubling threshold: the batch doubles when the clusters' standard errors ``sigma_C(j)`` exceed ``rho``
        times the distance ``p(j)`` their centers just moved, for the share of clusters ``doubling_quantile``
        says (a cluster that did not move never holds it back).
    doubling_quantile : float in [0, 1], default 0.5
        Which ratio ``sigma_C(j) / p(j)`` over clusters decides: 0 is the minimum (the paper: every cluster
        must have settled, there with ``rho = 100``), 0.5 the median (the authors' reference code), 1 the
        maximum. With the minimum, one sample changing cluster moves a center by about
        ``sigma_C(j) / sqrt(v(j))``, so at large k the batch doubles only after an iteration that changes
        almost nothing (README, "Measured results", compares the two rules).
    bounds : {"auto", "elkan", "yinyang", "hamerly", "none"}, default "auto"
        Distance bounds kept per sample. ``"elkan"``: one per center (k floats per sample); ``"yinyang"``:
        one per group of about 10 nearby centers; ``"hamerly"``: one; ``"none"``: every distance is computed.
        ``"auto"`` takes Elkan when its bounds are no larger than a row of data (``4 k <= d * itemsize``),
        else yinyang with at most that many groups, else Hamerly: memory stays O(batch x d).
    max_iter : int, default 1000
        Iterations (each revisits the whole batch).
    max_time : float, optional
        Wall-clock budget in seconds; the run stops after the iteration that exceeds it.
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

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    labels_ : ndarray or dask array (n_samples,)
    inertia_ : float
        Sum of squared distances of all samples to the final centers.
    n_iter_ : int
    bounds_ : str
        The bound scheme used.
    history_ : list of dict
        Per iteration: ``batch_size``, ``new_samples``, ``changed`` (reused samples that changed cluster),
        ``distances_computed`` and ``distances_skipped`` (against ``k`` per sample visited), ``energy`` and
        ``inertia`` on the active batch (for the centers it was assigned to), ``center_shift``,
        ``doubling_ratio``, ``bounds``, ``wall_time`` and ``passes`` (reads of the data, in full passes).
    stop_reason_ : str
        ``"converged"`` (an iteration over all samples changed no assignment), ``"tol"``, ``"max_iter"`` or
        ``"max_time"``.
    """

    _model_scalars = ClusteringEstimator._model_scalars + ("bounds_",)

    def __init__(self, n_clusters=8, *, init="k-means||", initial_batch_size=None, rho=1.0, doubling_quantile=0.5,
                 bounds="auto", max_iter=1000, max_time=None, tol=1e-4, random_state=None, init_rounds=5, oversampling_factor=2.0,
                 init_sample_size=None, chunk_rows=None, client=None, progress=False, snapshot_centers=False):
        self.snapshot_centers = snapshot_centers
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

    def _validate_params(self):
        from ._validation import check_choice
        from .kernels.nested import BOUND_SCHEMES

        check_int(self.n_clusters, "n_clusters", minimum=1)
        check_int(self.initial_batch_size, "initial_batch_size", minimum=1, allow_none=True)
        check_float(self.rho, "rho", minimum=0.0, strict_minimum=True)
        check_float(self.doubling_quantile, "doubling_quantile", minimum=0.0, maximum=1.0)
        check_choice(self.bounds, "bounds", BOUND_SCHEMES)
        check_int(self.max_iter, "max_iter", minimum=1)
        check_float(self.tol, "tol", minimum=0.0)
        self._validate_common_params()

    def fit(self, X, y=None, sample_weight=None, checkpoint=None):
        """Fit the model to ``X``.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or path (n, d)
        y : ignored
        sample_weight : array-like (n,), optional
            Non-negative weight of each sample (e.g. coreset weights): each sample still has one vote, counted
            with its weight in S, v and the SSE; the workers read the weights with the rows.
        checkpoint : path, optional
            The workers write the batch's state blocks into the checkpoint themselves: ``PATH`` must be on a
            filesystem they share with the driver (see :mod:`daskmeans.checkpoint`).
        """
        return super().fit(X, y, sample_weight, checkpoint=checkpoint)

    _supports_checkpoint = True

    def _fit(self, data, weights, summary, client, checkpoint=None):
        from .algorithms.nested import nested_minibatch
        from .progress import ProgressReporter

        check_init(self.init, self.n_clusters, data.n_features)
        clock = Clock(self.max_time)
        seed, hook, centers, passes = _seed_or_resume(self, data, weights, client, checkpoint, clock)
        with ProgressReporter(self.progress, total=self.max_iter, desc="nmbatch") as reporter:
            recorder = SnapshotRecorder(self.snapshot_centers, clock, reporter)
            if centers is not None:
                recorder.start(centers)
            result = nested_minibatch(
                data.array, centers, seed=stage_key(seed, "nmbatch"), initial_batch_size=self.initial_batch_size,
                rho=self.rho, doubling_quantile=self.doubling_quantile, bounds=self.bounds, max_iter=self.max_iter,
                tol=self.tol * summary.mean_variance, clock=clock, client=client, callback=recorder,
                passes=passes + 1, checkpoint=hook, weights=weights,
            )
        if recorder.snapshots is not None:
            self.center_snapshots_ = recorder.snapshots
        self.cluster_centers_ = result.centers
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self.bounds_ = result.history[-1]["bounds"] if result.history else self.bounds
        self._labels = None


class MiniBatchKMeans(ClusteringEstimator):
    """Mini-batch k-means (Sculley 2010) on data of any size; ``partial_fit`` for streams.

    Each step assigns ``batch_size`` rows drawn uniformly (with replacement, by the workers) and moves every
    center towards the mean of its batch rows by a per-center learning rate.

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "afk-mc2", "random"} or ndarray (n_clusters, n_features), default "k-means||"
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
    max_time : float, optional
        Wall-clock budget in seconds.
    random_state : int, numpy Generator or None
        Fixes the seeding, every batch and every reassignment: same value, same result on any scheduler, worker
        count or chunking.
    init_rounds, oversampling_factor, init_sample_size :
        Seeding options, as for :class:`KMeans`.
    chunk_rows : int, optional
    client : distributed.Client, optional
    progress : bool or callable, default False

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
        ``batch_inertia``, ``center_shift``, ``wall_time``, ``passes``.
    stop_reason_ : str
    """

    _model_arrays = ("cluster_centers_", "counts_")
    _model_scalars = ClusteringEstimator._model_scalars + ("n_steps_",)

    def __init__(self, n_clusters=8, *, init="k-means||", batch_size=1024, learning_rate="sklearn", max_iter=100,
                 max_no_improvement=10, tol=0.0, reassignment_ratio=0.01, max_time=None, random_state=None,
                 init_rounds=5, oversampling_factor=2.0, init_sample_size=None, chunk_rows=None, client=None,
                 progress=False, snapshot_centers=False):
        self.snapshot_centers = snapshot_centers
        self.n_clusters = n_clusters
        self.init = init
        self.batch_size = batch_size
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

    def _validate_params(self):
        from ._validation import check_choice
        from .kernels.minibatch import LEARNING_RATES

        check_int(self.n_clusters, "n_clusters", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_choice(self.learning_rate, "learning_rate", LEARNING_RATES)
        check_int(self.max_iter, "max_iter", minimum=1)
        check_int(self.max_no_improvement, "max_no_improvement", minimum=1, allow_none=True)
        check_float(self.tol, "tol", minimum=0.0)
        check_float(self.reassignment_ratio, "reassignment_ratio", minimum=0.0, maximum=1.0)
        self._validate_common_params()

    _supports_checkpoint = True

    def _fit(self, data, weights, summary, client, checkpoint=None):
        from .algorithms.minibatch import minibatch_kmeans
        from .progress import ProgressReporter

        check_init(self.init, self.n_clusters, data.n_features)
        clock = Clock(self.max_time)
        seed, hook, centers, passes = _seed_or_resume(self, data, weights, client, checkpoint, clock)
        total = max(1, self.max_iter * data.n_samples // self.batch_size)
        with ProgressReporter(self.progress, total=total, desc="mini-batch k-means") as reporter:
            recorder = SnapshotRecorder(self.snapshot_centers, clock, reporter)
            if centers is not None:
                recorder.start(centers)
            result = minibatch_kmeans(
                data.array, centers, seed=stage_key(seed, "minibatch"), weights=weights,
                batch_size=self.batch_size, learning_rate=self.learning_rate, max_iter=self.max_iter,
                tol=self.tol * summary.mean_variance, max_no_improvement=self.max_no_improvement,
                reassignment_ratio=self.reassignment_ratio, clock=clock, client=client, callback=recorder,
                passes=passes + 1, checkpoint=hook,
            )
        if recorder.snapshots is not None:
            self.center_snapshots_ = recorder.snapshots
        self.cluster_centers_ = result.centers
        self.counts_ = result.seen_counts
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.n_steps_ = result.n_steps
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self._labels = None

    def partial_fit(self, X, y=None, sample_weight=None):
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
        from .algorithms.minibatch import minibatch_partial_step

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
            centers, _ = initial_centers(
                data.array, self.n_clusters, self.init, stage_key(seed, "init", 0), weights=weights, client=client,
                rounds=self.init_rounds, oversampling_factor=self.oversampling_factor,
                sample_size=self.init_sample_size,
            )
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
        self.history_.append({"iteration": self.n_steps_, "steps": self.n_steps_, "batch_size": data.n_samples,
                              "energy": batch_inertia / max(summary.total_weight, 1e-300), "passes": 1})
        self._fitted_data = data
        self._labels = None
        return self
