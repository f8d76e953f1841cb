"""vc-GMM (Hirschberger, Forster & Lücke): an isotropic Gaussian mixture fitted on a lightweight coreset by
truncated variational EM, seeded by AFK-MC2, for data of any size."""

from __future__ import annotations

import numbers
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from .. import config
from .._validation import check_int
from ..algorithms.coreset import draw_coreset, every_row
from ..algorithms.init import afkmc2_distributed, afkmc2_in_memory, check_init, initial_centers
from ..algorithms.result import RunContext
from ..algorithms.vc_gmm import PLACEMENTS, GMMPlan, gmm_plan, truncated_em
from ..engine.client import compute_now, resolve_client
from ..engine.random import stage_generator, stage_key
from ..exceptions import InputDataError, InvalidParameterError
from ..passes.gmm import lazy_dense_posterior, log_likelihood_graph, sparse_posterior_parts
from ..progress import SnapshotRecorder
from .base import ClusteringEstimator, raise_damaged
from .constraints import Boolean, Integer, Options, Real, Rule
from .resume import FitStart

if TYPE_CHECKING:  # for type checkers only
    from numpy.typing import ArrayLike

    from .base import InputData


def _check_coreset_size(value, name, estimator):
    if isinstance(value, str):
        if value != "auto":
            raise InvalidParameterError(
                f"coreset_size must be an integer >= n_components, 'auto' or None; got {value!r}."
            )
    elif value is not None:
        size = check_int(value, name)
        if size < estimator.n_components:
            raise InvalidParameterError(
                f"coreset_size={size} is smaller than n_components={estimator.n_components}: a coreset needs at "
                f"least one point per component. Use coreset_size >= {estimator.n_components} (or 'auto')."
            )


def auto_coreset_size(n_samples, n_components, row_bytes) -> int:
    """Rows of ``CoresetGaussianMixture(coreset_size="auto")``.

    :data:`~daskmeans.config.AUTO_CORESET_PER_COMPONENT` rows per component, at least
    :data:`~daskmeans.config.AUTO_CORESET_MIN`; fewer where the rows would take more than
    :data:`~daskmeans.config.AUTO_CORESET_MAX_BYTES` on the driver (but never fewer than one per component); never
    more than the data has. The error of a coreset fit falls with its rows per component, its time grows with them.

    Parameters
    ----------
    n_samples, n_components : int
    row_bytes : int
        Bytes of one coreset row (``n_features`` times the itemsize of the dtype the data is computed in).

    Returns
    -------
    int

    Examples
    --------
    >>> auto_coreset_size(960_000, 1000, 128), auto_coreset_size(70_000, 50, 784)
    (100000, 10000)
    """
    rows = max(config.AUTO_CORESET_MIN, config.AUTO_CORESET_PER_COMPONENT * n_components)
    rows = min(rows, max(n_components, config.AUTO_CORESET_MAX_BYTES // max(1, row_bytes)))
    return int(min(n_samples, rows))


class CoresetGaussianMixture(ClusteringEstimator):
    """vc-GMM: an isotropic Gaussian mixture fitted by truncated variational EM on a lightweight coreset.

    The fit makes three passes over the data for the coreset (summary, block spreads, draws; see
    :func:`daskmeans.lightweight_coreset`), seeds the means on the coreset by AFK-MC2, runs truncated variational
    EM (var-GMM-S, Forster & Lücke 2018) on the coreset, and makes one last pass over all the data for the labels'
    quantization error. The model has equal mixing proportions and one shared variance ``sigma^2``; each coreset
    point keeps its ``n_truncated`` best clusters and each cluster its ``search_size`` nearest clusters, so an
    EM iteration costs ``O(coreset_size * n_truncated * search_size * d)`` whatever ``n_components``.

    Parameters
    ----------
    n_components : int, default 8
        Number of Gaussians (clusters).
    coreset_size : int, "auto" or None, default "auto"
        Rows drawn (with replacement) for the lightweight coreset; ``"auto"``: ``max(10000, 100 n_components)``,
        fewer where they would pass 1 GiB, at most the number of samples (:func:`auto_coreset_size`); None: no
        coreset, EM runs on all the data with the sample weights (or 1).
        Must be at least ``n_components``. A size of at least the number of samples takes every row once, with its
        weight, into memory instead of drawing that many rows.
    n_truncated : int, default 5
        ``C'``: clusters in each point's truncated posterior (>= 1). A value above ``n_components`` means all of
        them (the exact posterior); ``n_truncated_`` is the value used.
    search_size : int, default 10
        ``G``: nearest clusters each cluster keeps as the search neighbourhood (>= 1; capped at ``n_components``
        likewise, see ``search_size_``). With 5, the points of a cluster that the first E-steps leave with a
        neighbour's mean find their own only by random exploration (6 of 100 blob centers lost at d = 64); 10
        finds them in a few iterations, so the EM usually needs fewer iterations for its larger search.
    random_exploration : bool, default True
        Search one random cluster more per point and iteration (the paper's ``+1``).
    chain_length : int, default 20
        Length of AFK-MC2's Markov chains (>= 1).
    oversampling : float, default 2.0
        AFK-MC2's chains draw ``ceil(oversampling * n_components)`` candidates, of which weighted greedy k-means++
        keeps ``n_components`` (see :func:`daskmeans.algorithms.init.afkmc2_in_memory`); 1 is plain AFK-MC2, which
        leaves about 10 of 100 well-separated clusters without a mean.
    tol : float, default 1e-4
        Stop when the free energy changes by less than ``tol`` times its absolute value.
    max_iter : int, default 100
        EM iterations at most.
    init : {"afk-mc2", "k-means||", "k-means++", "two-level", "random"} or ndarray of shape (k, d), default "afk-mc2"
        Seeding of the means, made on the coreset (AFK-MC2 runs its chains on the driver), or given means.
    max_time : float, optional
        Wall-clock budget in seconds, counted from the call to ``fit`` (the coreset and the seeding always run):
        an EM iteration starts only if one as long as the last still ends within it.
    random_state : int, numpy Generator or None
        Fixes the coreset, the seeding and the EM's random choices: same value, same result on any scheduler and
        any number of workers (for a given chunking of the data).
    estep_on : {"auto", "driver", "workers"}, default "auto"
        Where the E-step blocks run: coresets of up to :data:`~daskmeans.config.GMM_DRIVER_MAX_ROWS` rows on the
        driver, larger ones on the Dask workers (``"workers"`` forces them there when a distributed client is in
        use; without one there are no workers and the driver runs them). Same result either way.
    chunk_rows : int, optional
        Rows per block when daskmeans chunks the input.
    client : distributed.Client, optional
    progress : bool or callable, default False
        Progress bar over EM iterations.
    snapshot_centers : bool, default False
        Keep a copy of the means at the start and after every EM iteration in ``center_snapshots_`` (for
        energy-over-time benchmarks; not saved with the model).

    Attributes
    ----------
    means_ : ndarray (n_components, n_features)
        The Gaussians' means (also ``cluster_centers_``).
    covariance_ : float
        The shared variance ``sigma^2`` (per feature).
    weights_ : ndarray (n_components,)
        Mixing proportions (equal: ``1 / n_components``).
    lower_bound_ : float
        Free energy of the last iteration, per unit of coreset weight (a lower bound of the coreset
        log-likelihood per sample).
    inertia_ : float
        Quantization error: (weighted) sum of squared distances of every training sample to its nearest mean
        (its MAP cluster). It takes one pass over all the data, made on first access, so that ``fit`` returns
        with the means.
    labels_ : ndarray or dask array (n_samples,)
    n_iter_ : int
    converged_ : bool
    coreset_size_ : int
    n_truncated_, search_size_ : int
        ``C'`` and ``G`` as used: the parameters, at most ``n_components``.
    seeding_distances_ : int
        Distance evaluations of the seeding.
    history_ : list of dict
        Per EM iteration: ``free_energy``, ``energy`` (weighted mean squared distance of the coreset to its
        nearest mean found), ``sigma2``, ``distances`` (E-step distance evaluations), ``distances_per_point``,
        ``full_search_distances`` (what a full E-step would need), ``wall_time``, ``passes``.
    stop_reason_ : str
    center_snapshots_ : list of dict
        Only with ``snapshot_centers=True``: ``{"iteration", "wall_time", "perf_counter", "centers"}``.
    fit_plan_ : GMMPlan
        What the fit decided from the data before the EM, with the reason for each choice
        (:class:`daskmeans.algorithms.vc_gmm.GMMPlan`): the coreset's rows, ``C'`` and ``G`` as used, where the
        E-step blocks run (``where``), their rows and the initial E-steps. Shown above the progress bars.

    See Also
    --------
    lightweight_coreset : The coreset this estimator fits on, for use with any estimator.
    KMeans : Exact k-means on all the data.

    References
    ----------
    - F. Hirschberger, D. Forster, J. Lücke, "Large Scale Clustering with Variational EM for Gaussian Mixture
      Models", 2018. arXiv:1810.00803. Published as "A Variational EM Acceleration for Efficient Clustering at
      Very Large Scales", IEEE Transactions on Pattern Analysis and Machine Intelligence 44(12), 2022.
      doi:10.1109/TPAMI.2021.3133763.
    - D. Forster, J. Lücke, "Can clustering scale sublinearly with its clusters? A variational EM
      acceleration of GMMs and k-means", Proceedings of the 21st International Conference on Artificial
      Intelligence and Statistics (AISTATS 2018), PMLR 84. arXiv:1711.03431.
    - O. Bachem, M. Lucic, A. Krause, "Scalable k-Means Clustering via Lightweight Coresets", Proceedings of
      the 24th ACM SIGKDD International Conference on Knowledge Discovery & Data Mining (KDD 2018).
      doi:10.1145/3219819.3219973, arXiv:1702.08248.
    - O. Bachem, M. Lucic, S. H. Hassani, A. Krause, "Fast and Provably Good Seedings for k-Means", Advances
      in Neural Information Processing Systems 29 (NIPS 2016), 55-63.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import CoresetGaussianMixture
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> model = CoresetGaussianMixture(n_components=3, random_state=0).fit(X)
    >>> model.means_.shape
    (3, 2)
    >>> model.weights_.round(2).tolist()  # equal mixing proportions
    [0.33, 0.33, 0.33]
    >>> sorted(np.bincount(model.predict(X)).tolist())
    [100, 100, 100]
    >>> model.predict_proba(X).shape
    (300, 3)
    """

    _model_arrays = ("means_", "weights_")
    _model_scalars = (
        "covariance_",
        "lower_bound_",
        "inertia_",
        "n_iter_",
        "n_features_in_",
        "stop_reason_",
        "converged_",
        "coreset_size_",
        "seeding_distances_",
        "n_truncated_",
        "search_size_",
    )
    #: The registry's ``n_clusters`` is this estimator's ``n_components``.
    _n_clusters_parameter = "n_components"

    def __init__(
        self,
        n_components=8,
        *,
        coreset_size="auto",
        n_truncated=5,
        search_size=10,
        random_exploration=True,
        chain_length=20,
        oversampling=2.0,
        tol=1e-4,
        max_iter=100,
        init="afk-mc2",
        max_time=None,
        random_state=None,
        estep_on="auto",
        chunk_rows=None,
        client=None,
        progress=False,
        snapshot_centers=False,
    ):
        self.snapshot_centers = snapshot_centers
        self.n_components = n_components
        self.coreset_size = coreset_size
        self.n_truncated = n_truncated
        self.search_size = search_size
        self.random_exploration = random_exploration
        self.chain_length = chain_length
        self.oversampling = oversampling
        self.tol = tol
        self.max_iter = max_iter
        self.init = init
        self.max_time = max_time
        self.random_state = random_state
        self.estep_on = estep_on
        self.chunk_rows = chunk_rows
        self.client = client
        self.progress = progress

    # -- names the shared plumbing uses ------------------------------------------------------------------------
    @property
    def n_clusters(self):
        """Same as ``n_components``; setting it sets ``n_components``."""
        return self.n_components

    @n_clusters.setter
    def n_clusters(self, value):
        self.n_components = value

    def set_params(self, **params):
        """Set parameters; ``n_clusters`` is accepted as another name of ``n_components`` (not in ``get_params``)."""
        if "n_clusters" in params:
            if "n_components" in params and params["n_components"] != params["n_clusters"]:
                raise InvalidParameterError("n_clusters and n_components name the same parameter: give one of them.")
            params["n_components"] = params.pop("n_clusters")
        return super().set_params(**params)

    @property
    def cluster_centers_(self):
        """Same as ``means_``."""
        return self.means_

    @cluster_centers_.setter
    def cluster_centers_(self, value):
        self.means_ = value

    _parameter_constraints = {
        "n_components": Integer(1),
        **{
            name: constraint
            for name, constraint in ClusteringEstimator._parameter_constraints.items()
            if name != "n_clusters"
        },
        "coreset_size": Rule(_check_coreset_size),
        "n_truncated": Integer(1, label="n_truncated (C')"),
        "search_size": Integer(1, label="search_size (G)"),
        "random_exploration": Boolean(),
        "chain_length": Integer(1),
        "oversampling": Real(1.0),
        "tol": Real(0.0),
        "max_iter": Integer(1),
        "estep_on": Options(PLACEMENTS),
    }

    # -- fitting ---------------------------------------------------------------------------------------------------
    def _check_data(self, data):
        """One sample is refused before the data is read: the shared variance needs a spread around the means."""
        if data.n_samples < 2:
            raise InputDataError(
                f"n_samples={data.n_samples}: a Gaussian mixture needs at least 2 samples to estimate its variance."
            )

    def _coreset_rows(self, data):
        if self.coreset_size == "auto":
            return auto_coreset_size(data.n_samples, self.n_components, data.n_features * data.dtype.itemsize)
        return self.coreset_size

    def _plan(self, data, client, start) -> GMMPlan:
        """Every data-dependent choice of the fit, made once: the coreset's rows (``coreset_size``; a resumed fit
        keeps its coreset's), ``n_truncated`` and ``search_size`` capped at ``n_components``, where the E-step
        blocks run (``estep_on``) and the initial E-steps (:func:`~daskmeans.algorithms.vc_gmm.gmm_plan`)."""
        k = self.n_components
        if start.resuming:
            rows, why = start.saved["setup"]["coreset_size"], "the checkpoint's coreset"
        elif self.coreset_size is None:
            rows, why = data.n_samples, "coreset_size=None: every row, with its weight"
        else:
            rows = int(self._coreset_rows(data))
            why = f"coreset_size={self.coreset_size!r}" + (
                f": max(AUTO_CORESET_MIN={config.AUTO_CORESET_MIN}, AUTO_CORESET_PER_COMPONENT="
                f"{config.AUTO_CORESET_PER_COMPONENT} k), at most AUTO_CORESET_MAX_BYTES="
                f"{config.AUTO_CORESET_MAX_BYTES} of rows (never under k) and at most n"
                if self.coreset_size == "auto"
                else ""
            )
            if rows >= data.n_samples:
                rows, why = data.n_samples, why + ": at least n, so every row once, with its weight"
        plan = gmm_plan(
            rows,
            k,
            client,
            where=self.estep_on,
            n_truncated=min(int(self.n_truncated), k),
            search_size=min(int(self.search_size), k),
            random_exploration=bool(self.random_exploration),
            tol=self.tol,
            max_iter=self.max_iter,
            seed=stage_key(start.seed, "em"),
        )
        return replace(plan, reasons={**plan.reasons, "coreset_rows": why})

    #: ``fit(X, checkpoint=PATH)``: the coreset and the seeds are saved once, then the EM state every iteration.
    _supports_checkpoint = True

    def _fit(self, data, weights, summary, client, checkpoint=None):
        k = self.n_components
        check_init(self.init, k, data.n_features)
        clock = self._clock()
        start = FitStart(checkpoint, self.random_state, clock)

        def in_data_dtype(record):  # the means as means_ will hold them
            return None if "_centers" not in record else np.asarray(record["_centers"], dtype=data.dtype)

        recorder = SnapshotRecorder(self, clock, total=self.max_iter, desc="vc-GMM", centers_of=in_data_dtype)
        plan = self._plan(data, client, start)
        self._keep_plan(plan, recorder)
        if start.resuming:
            setup = start.saved["setup"]
            means, seeding_distances, passes = setup["means"], setup["seeding_distances"], setup["passes"]
            self.coreset_size_ = setup["coreset_size"]
            if self.coreset_size is None:  # all the data, with its weights, is the "coreset"
                points, point_weights = data.array, weights
            else:
                points, point_weights = setup["points"], setup["point_weights"]
        else:
            passes = 1  # the summary pass of fit
            recorder.seeding(self.init, counted=False)
            if self.coreset_size is None:
                points, point_weights = data.array, weights
                self.coreset_size_ = data.n_samples
            elif plan.coreset_rows >= data.n_samples:  # every row once, in memory, rather than n draws of them
                points, point_weights, spent = every_row(data.array, weights, client)
                passes += spent
                self.coreset_size_ = data.n_samples
            else:
                m = plan.coreset_rows
                _, points, point_weights, spent = draw_coreset(
                    data.array, m, stage_key(start.seed, "lwcs"), mean=summary.mean, weights=weights, client=client
                )
                passes += spent
                self.coreset_size_ = int(m)
            means, seeding_distances, spent = self._seed(points, point_weights, start.seed, client)
            passes += spent
        # the coreset and the seeds are saved once, with every state of the EM
        in_memory = self.coreset_size is not None
        hook = start.hook(
            setup={
                "means": means,
                "seeding_distances": seeding_distances,
                "passes": passes,
                "coreset_size": self.coreset_size_,
                "points": points if in_memory else None,
                "point_weights": point_weights if in_memory else None,
            }
        )
        self.n_truncated_ = plan.n_truncated
        self.search_size_ = plan.search_size
        with recorder:
            if not start.resuming:
                recorder.start(np.asarray(means, dtype=data.dtype))
            recorder.iterations()
            context = RunContext(
                clock=clock, client=client, callback=recorder, passes=passes, checkpoint=hook, weights=point_weights
            )
            result = truncated_em(points, means, plan, context)
        means = np.ascontiguousarray(result.centers, dtype=data.dtype)
        recorder.keep(self)
        self.means_ = means
        self.covariance_ = result.sigma2
        self.weights_ = np.full(k, 1.0 / k)
        self.lower_bound_ = result.lower_bound
        self.inertia_ = None  # the quantization error is one more pass over all the data, made on first access
        self.n_iter_ = result.n_iter
        self.history_ = result.history
        self.stop_reason_ = result.stop_reason
        self.converged_ = result.stop_reason == "converged"
        self.seeding_distances_ = int(seeding_distances)
        self.estep_on_ = result.where
        self._labels = None

    def _seed(self, points, point_weights, seed, client):
        """Initial means on the (coreset) points: ``(means, distance evaluations, passes over the data)``."""
        k = self.n_components
        if not isinstance(self.init, str):
            return np.array(self.init, dtype=np.float64), 0, 0
        in_memory = isinstance(points, np.ndarray)
        if self.init == "afk-mc2" and in_memory:
            rng = stage_generator(seed, "afk-mc2")
            what = f"The coreset of {points.shape[0]} rows"
            return (
                *afkmc2_in_memory(
                    points,
                    point_weights,
                    k,
                    rng,
                    chain_length=self.chain_length,
                    oversampling=self.oversampling,
                    what=what,
                ),
                0,
            )
        if in_memory:
            array = da.from_array(points, chunks=(max(1, points.shape[0]),) + points.shape[1:])
            weights = da.from_array(np.asarray(point_weights, dtype=np.float64), chunks=array.chunks[0])
            where = RunContext(weights=weights)
            means, _ = initial_centers(array, k, self.init, stage_key(seed, "init"), context=where)
            return means.astype(np.float64), 0, 0
        if self.init == "afk-mc2":
            means, spent = afkmc2_distributed(
                points,
                k,
                stage_key(seed, "init"),
                weights=point_weights,
                chain_length=self.chain_length,
                oversampling=self.oversampling,
                client=client,
            )
            return means.astype(np.float64), 0, spent
        where = RunContext(client=client, weights=point_weights)
        means, spent = initial_centers(points, k, self.init, stage_key(seed, "init"), context=where)
        return means.astype(np.float64), 0, spent

    # -- the model on new data -------------------------------------------------------------------------------------
    def _means64(self):
        return np.ascontiguousarray(self.means_, dtype=np.float64)

    def predict_proba(self, X: InputData, sparse: bool = False) -> Any:
        """The truncated posterior of each sample: its ``n_truncated`` nearest components, softmax-weighted.

        Parameters
        ----------
        X : array-like, dask array, xarray.DataArray or path, shape (n, d)
        sparse : bool, default False
            False: a dense ``(n, n_components)`` array with zeros outside each sample's ``n_truncated`` components
            (NumPy for NumPy input, else lazy). True: a ``scipy.sparse.csr_matrix`` holding only the
            ``n_truncated`` non-zeros per row (computed now, whatever the input).

        Returns
        -------
        ndarray, dask array, xarray.DataArray or scipy.sparse.csr_matrix
        """
        data = self._check_predict_input(X)
        means, sigma2 = self._means64(), float(self.covariance_)
        if not sparse:
            lazy = lazy_dense_posterior(data.array, means, sigma2, self.n_truncated_)
            return self._like_input(data, lazy, name="posterior")
        from scipy import sparse as scipy_sparse  # an optional peer, only for sparse=True

        parts = sparse_posterior_parts(data.array, means, sigma2, self.n_truncated_)
        blocks = compute_now(*parts, client=resolve_client(getattr(self, "client", None)))
        indices = np.concatenate([b[0] for b in blocks]).astype(np.int64)
        probabilities = np.concatenate([b[1] for b in blocks])
        n, c = indices.shape
        indptr = np.arange(0, n * c + 1, c)
        matrix = scipy_sparse.csr_matrix((probabilities.ravel(), indices.ravel(), indptr), shape=(n, means.shape[0]))
        matrix.sort_indices()
        return matrix

    def score(self, X: InputData, y: Any = None, sample_weight: ArrayLike | da.Array | None = None) -> float:
        """Mean truncated log-likelihood per sample, ``log sum_{c in K(x)} N(x; mu_c, sigma^2 I) / k``.

        ``K(x)``: the ``n_truncated`` nearest components of ``x`` (the model's own approximation; with
        ``n_truncated = n_components`` it is the exact log-likelihood). One pass over ``X``.
        """
        data = self._check_predict_input(X)
        weights = self._weights(sample_weight, data)
        graph = log_likelihood_graph(data.array, weights, self._means64(), float(self.covariance_), self.n_truncated_)
        (total,) = compute_now(graph, client=resolve_client(getattr(self, "client", None)))
        return float(total[0] / total[1])

    def _model_array_shapes(self):
        """See :meth:`ClusteringEstimator._model_array_shapes`."""
        k, d = self.n_components, self.n_features_in_
        why = f"n_components={k} in the stored parameters"
        return {
            **super()._model_array_shapes(),
            "means_": ((k, d), f"{why} and n_features_in_={d}"),
            "weights_": ((k,), why),
        }

    def _check_loaded(self, path):
        super()._check_loaded(path)
        if not isinstance(self.covariance_, numbers.Real) or not self.covariance_ > 0:
            raise_damaged(path, f"covariance is {self.covariance_!r}, expected a positive number")
        if not np.isfinite(self.weights_).all():
            raise_damaged(path, "weights holds NaN or infinity")
