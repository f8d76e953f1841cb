"""The base of every estimator: parameters (a constraints table validated once per fit), input handling,
prediction, persistence, and the progress and center snapshots of a fit."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import time
from typing import TYPE_CHECKING, Any, Self

import dask.array as da
import numpy as np
from dask.base import tokenize

from .._validation import check_int
from ..algorithms.coarse_index import build_coarse_index
from ..algorithms.lloyd import final_inertia
from ..algorithms.result import Clock
from ..engine.blas import one_blas_thread_for
from ..engine.client import compute_now, resolve_client
from ..engine.placement import held_by_workers
from ..engine.worker_memory import install_trim_when_paused, release_freed_memory
from ..exceptions import InputDataError, InvalidParameterError, ModelFileError, NotFittedError, not_fitted_error
from ..passes.assign import assign_stats_graph, finish_stats, lazy_labels, lazy_probe_labels, lazy_transform
from ..passes.summary import check_summary, finish_summary, summary_graph, summary_on_driver
from ..progress import LazyFinalPass
from ..storage.checkpoint import check_supported, open_checkpoint
from ..storage.io import Dataset, _is_path, open_input, spread_on_workers
from ..storage.model import save_model
from ..storage.remote import check_storage_options
from .constraints import UNCHECKED, Boolean, Init, Integer, MaxTime, RandomState

if TYPE_CHECKING:  # for type checkers only
    import os

    import xarray
    from numpy.typing import ArrayLike

    #: What an estimator fits or predicts on: NumPy-like values, a dask array, an ``xarray.DataArray``, or the path
    #: of a Zarr store or .npy file (:func:`daskmeans.open_input`).
    InputData = ArrayLike | da.Array | xarray.DataArray | str | os.PathLike[str]
    #: What an estimator returns per sample: NumPy for NumPy input, xarray for xarray input, else a lazy dask array.
    PerSample = np.ndarray | da.Array | xarray.DataArray


# -- input --------------------------------------------------------------------------------------------------------
def sample_weights(sample_weight, data: Dataset):
    """``sample_weight`` checked against ``data`` and chunked like its rows (float64 dask array), or None.

    Raises
    ------
    InputDataError
        Wrong shape or a non-numeric dtype (values are checked by the summary pass).
    """
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


def prepare_input(
    X, sample_weight, client, *, chunk_rows=None, on_opened=None, with_row_hash=False, storage_options=None
):
    """Open the input, run the summary pass (which validates the values): ``(data, weights, summary)``.

    ``on_opened(data, weights)``, when given, runs before the summary pass (checks that need no values).
    ``with_row_hash``: compute the data's row hash too (only a checkpoint's fingerprint needs it).
    ``storage_options``: for ``X`` given as a URL (ignored for any other input).
    """
    data, weights = open_for_fit(
        X, sample_weight, client, chunk_rows=chunk_rows, on_opened=on_opened, storage_options=storage_options
    )
    return data, weights, summarize(data, weights, client, with_row_hash)


def open_for_fit(X, sample_weight, client, *, chunk_rows=None, on_opened=None, storage_options=None):
    """:func:`prepare_input`'s first half: the input opened, its weights, ``on_opened`` run, an in-memory input
    spread on the workers: ``(data, weights)``."""
    data = open_input(X, chunk_rows=chunk_rows, name="X", storage_options=storage_options if _is_path(X) else None)
    weights = sample_weights(sample_weight, data)
    if on_opened is not None:
        on_opened(data, weights)
    if data.in_memory and client is not None:
        # a new Dataset: the caller's (an ``open_input`` result fitted again, or predicted on) keeps its array
        data = dataclasses.replace(data, array=spread_on_workers(data.array, client))
    return data, weights


def summarize(data, weights, client, with_row_hash=False, driver=None):
    """:func:`prepare_input`'s second half: the summary pass, checked. ``driver``: the data's
    :class:`~daskmeans.engine.driver.DriverCopy`, when the fit made one; the pass then runs on it, the same values
    without a round trip to the workers."""
    if driver is None:
        (raw,) = compute_now(summary_graph(data.array, weights, with_row_hash), client=client)
    else:
        raw = summary_on_driver(driver, with_row_hash)
    summary = finish_summary(raw, data.n_samples)
    check_summary(summary, data.dtype)
    return summary


def tol_reason(tol, summary) -> dict:
    """The plan's reason for an absolute ``tol`` made from a relative one: ``{"tol": why}``."""
    return {"tol": f"tol={tol!r} times the mean per-feature variance {summary.mean_variance:.6g}"}


class ClusteringEstimator:
    """Shared plumbing: parameters, input handling, prediction, persistence.

    Subclasses define ``__init__`` (parameters only, scikit-learn style), ``_parameter_constraints`` (this class's
    table extended with their own parameters: ``{name: constraint or None}``, checked in that order once per fit)
    and ``_fit(data, weights, summary, client)`` that sets the fitted attributes.
    """

    _model_arrays: tuple[str, ...] = ("cluster_centers_",)
    _model_scalars: tuple[str, ...] = ("inertia_", "n_iter_", "n_features_in_", "stop_reason_")
    #: Every parameter's constraint; None: not checked.
    _parameter_constraints: dict = {
        "n_clusters": Integer(1),
        "init": Init(),
        "max_time": MaxTime(),
        "random_state": RandomState(),
        "chunk_rows": Integer(1, none=True),
        "snapshot_centers": Boolean(),
        "client": UNCHECKED,
        "progress": UNCHECKED,
    }

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

    def _validate_params(self):
        """Check every parameter against ``_parameter_constraints`` (before any work).

        Raises
        ------
        InvalidParameterError
        """
        names = set(self._get_param_names())
        constraints = type(self)._parameter_constraints
        missing = names - set(constraints)
        if missing:
            raise TypeError(f"internal: {type(self).__name__} has no constraint for {sorted(missing)}.")
        for name, constraint in constraints.items():
            if name in names and constraint is not None:
                constraint.check(getattr(self, name), name, self)

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

    # -- data ---------------------------------------------------------------------------------------------
    def _open(self, X, name="X") -> Dataset:
        return open_input(X, chunk_rows=getattr(self, "chunk_rows", None), name=name)

    def _weights(self, sample_weight, data: Dataset):
        return sample_weights(sample_weight, data)

    def _check_data(self, data: Dataset):
        """Checks of the opened input that need no values (before the summary pass); none by default."""

    def _prepare(self, X, sample_weight, client, on_opened=None, with_row_hash=False, storage_options=None):
        return prepare_input(
            X,
            sample_weight,
            client,
            chunk_rows=getattr(self, "chunk_rows", None),
            on_opened=on_opened,
            with_row_hash=with_row_hash,
            storage_options=storage_options,
        )

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

    def _like_input(self, data: Dataset, lazy, name="labels"):
        """NumPy in, NumPy out (computed on the estimator's client); xarray in, xarray out (along the sample
        dimension, with its coordinates); otherwise a lazy dask array.

        ``lazy`` may also be values already in the driver (a NumPy array, one row per sample): they are then taken
        as they are for in-memory input, without a round trip to the cluster, and chunked like the input
        otherwise."""
        if isinstance(lazy, np.ndarray):
            values = lazy if data.in_memory else da.from_array(lazy, chunks=(data.array.chunks[0],) + lazy.shape[1:])
        else:
            values = (
                compute_now(lazy, client=resolve_client(getattr(self, "client", None)))[0] if data.in_memory else lazy
            )
        if data.is_xarray:
            import xarray as xr

            dims = (data.sample_dim,) if lazy.ndim == 1 else (data.sample_dim, "cluster")
            return xr.DataArray(values, dims=dims, coords=data.sample_coords, name=name)
        return values

    def _keep_plan(self, plan, recorder=None):
        """Keep the fit's plan (:class:`~daskmeans.algorithms.plan.FitPlan`) as ``fit_plan_`` and, where the fit
        shows progress bars, show it on one line above them (the reasons stay in ``fit_plan_.reasons``)."""
        self.fit_plan_ = plan
        if recorder is not None and recorder.show:
            from tqdm.auto import tqdm

            tqdm.write(f"{recorder.desc} plan: {plan.summary()}", file=sys.stderr)

    # -- public methods -------------------------------------------------------------------------------------
    #: Whether ``fit(..., checkpoint=PATH)`` is supported (``_fit`` then takes ``checkpoint=``).
    _supports_checkpoint = False

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
        X : array-like, dask array, xarray.DataArray, Dataset, or path or URL of a Zarr store / .npy file, shape (n, d)
            Data on object storage: ``open_input("s3://...", storage_options=...)`` (a :class:`~daskmeans.Dataset`),
            or the URL itself with ``storage_options``.
        y : ignored
        sample_weight : array-like of shape (n,), optional
            Non-negative weight of each sample (e.g. coreset weights).
        checkpoint : str or os.PathLike, optional
            A directory, or the URL of a prefix on an object store (``s3://bucket/run1.ckpt``), where the fit's
            state is saved after every iteration; running the same fit again with the same checkpoint resumes
            from it, with the same result as an uninterrupted run. A checkpoint of other data or other parameters
            is refused (:mod:`daskmeans.storage.checkpoint`).
        storage_options : dict, optional
            Options of the fsspec filesystem of every store this fit opens by URL: ``X`` given as a URL, and the
            checkpoint (``{"endpoint_url": ..., "key": ..., "secret": ...}`` for an S3-compatible store). A
            :class:`~daskmeans.Dataset` keeps the options it was opened with; local paths ignore them. Without
            them the filesystem reads the standard environment (``AWS_ACCESS_KEY_ID``, ...).

        Returns
        -------
        self
        """
        self._fit_called_at = time.perf_counter()  # max_time counts from here: opening the data is part of the fit
        self._validate_params()
        storage_options = check_storage_options(storage_options)
        if checkpoint is not None:
            check_supported(self)
        client = resolve_client(getattr(self, "client", None))
        install_trim_when_paused(client)  # a worker paused by memory its heap merely keeps would stall the fit
        try:
            with one_blas_thread_for(client):
                data, weights = self._fit_in(X, sample_weight, client, checkpoint, storage_options)
        finally:
            self._fit_called_at = None
            self.__dict__.pop("_prepared", None)  # what a subclass's _prepare handed to its _fit (rows copied, say)
        if not data.in_memory and not held_by_workers(data.array, client):
            # the workers read the data: small ones would otherwise carry the memory this fit freed into the next
            release_freed_memory(client)
        self.n_features_in_ = data.n_features
        self._fitted_data = data
        self._fitted_weights = weights
        return self

    def _clock(self) -> Clock:
        """The ``max_time`` clock of the fit under way, started when :meth:`fit` was called."""
        return Clock(getattr(self, "max_time", None), start=getattr(self, "_fit_called_at", None))

    def _fit_in(self, X, sample_weight, client, checkpoint, storage_options=None):
        """:meth:`fit`'s work: open and check the data, then fit (with the checkpoint, when one is given)."""
        opened = []

        def on_opened(data, weights):  # before the summary pass: all but the values are checked
            self._check_data(data)
            if checkpoint is not None:
                opened.append(open_checkpoint(checkpoint, self, data, weights, storage_options))

        data, weights, summary = self._prepare(
            X,
            sample_weight,
            client,
            on_opened=on_opened,
            with_row_hash=checkpoint is not None,
            storage_options=storage_options,
        )
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
        return data, weights

    def predict(self, X: InputData, n_probe: int | None = None) -> PerSample:
        """Index of the nearest center for each sample of ``X`` (lazy for dask and Zarr input).

        Parameters
        ----------
        X : array-like, dask array, xarray or Zarr store (n, d)
        n_probe : int, optional
            Approximate assignment through a coarse level, for large k: the centers are grouped into about
            ``sqrt(k)`` lists by a k-means of the centers (built once per model on the driver, seeded by
            ``config.COARSE_INDEX_SEED``: it depends on the centers only), each sample is scored against the lists'
            coarse centers and then against the centers of its ``n_probe`` nearest lists only, about
            ``(1 + n_probe) * sqrt(k)`` distances instead of ``k``. A sample whose nearest center is in a probed
            list gets the exact label; the others get the nearest probed center. Probing every list is the exact
            assignment. None (the default): the exact nearest center.

        Returns
        -------
        labels : int32, NumPy for NumPy input, xarray for xarray input, else a lazy dask array
        """
        if n_probe is not None:
            check_int(n_probe, "n_probe", minimum=1)
        data = self._check_predict_input(X)
        centers = self._centers_for(data)
        if n_probe is None:
            return self._like_input(data, lazy_labels(data.array, centers))
        return self._like_input(data, lazy_probe_labels(data.array, centers, self.coarse_index(), n_probe))

    def coarse_index(self):
        """The lists of centers ``predict(X, n_probe=...)`` probes (:class:`daskmeans.kernels.probe.CoarseIndex`),
        built on first use and kept while the centers stay the same."""
        self._check_fitted()
        key = tokenize(self.cluster_centers_)
        cached = getattr(self, "_coarse_index", None)
        if cached is None or cached[0] != key:
            self._coarse_index = (key, build_coarse_index(self.cluster_centers_))
        return self._coarse_index[1]

    def fit_predict(self, X: InputData, y: Any = None, sample_weight: ArrayLike | da.Array | None = None) -> PerSample:
        """Fit, then return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X: InputData) -> PerSample:
        """Euclidean distance of each sample to every center, shape (n, k) (lazy for dask and Zarr input)."""
        data = self._check_predict_input(X)
        return self._like_input(data, lazy_transform(data.array, self._centers_for(data)), name="distance")

    def fit_transform(
        self, X: InputData, y: Any = None, sample_weight: ArrayLike | da.Array | None = None
    ) -> PerSample:
        """Fit, then ``transform(X)``."""
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X: InputData, y: Any = None, sample_weight: ArrayLike | da.Array | None = None) -> float:
        """Opposite of the (weighted) sum of squared distances of ``X`` to the nearest centers."""
        data = self._check_predict_input(X)
        weights = self._weights(sample_weight, data)
        client = resolve_client(getattr(self, "client", None))
        graph = assign_stats_graph(data.array, self._centers_for(data), weights, check_finite=True, client=client)
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
            self._labels = self._like_input(data, self._lazy_labels(data))
        return self._labels

    def _lazy_labels(self, data):
        """Nearest center of each row of ``data``, as a lazy dask array."""
        return lazy_labels(data.array, self._centers_for(data))

    @property
    def inertia_(self):
        """Weighted sum of squared distances of the training samples to their nearest center (in feature space
        for kernel k-means).

        A fit that stops while the centers still move leaves this to one more pass, made on first access.
        """
        self._check_fitted()
        if getattr(self, "_inertia", None) is None:
            data = getattr(self, "_fitted_data", None)
            if data is None:
                raise NotFittedError("inertia_ is unknown for this model; compute it with -model.score(X).")
            with LazyFinalPass(self):
                self._inertia = self._final_inertia(data, resolve_client(getattr(self, "client", None)))
        return self._inertia

    def _final_inertia(self, data, client):
        """Weighted sum of squared distances of ``data``'s rows to their nearest center: one pass."""
        return final_inertia(data.array, self._centers_for(data), self._fitted_weights, client)

    @inertia_.setter
    def inertia_(self, value):
        self._inertia = value

    def __getstate__(self):
        if getattr(self, "_fitted_data", None) is not None:
            self.inertia_  # noqa: B018  (the data does not travel with a pickled model: settle it now)
            if self._fitted_data.in_memory:
                self.labels_  # noqa: B018 - labels held in memory are settled for the same reason
        state = self.__dict__.copy()
        state.pop("_fitted_data", None)
        state.pop("_fitted_weights", None)
        return state

    def save(
        self, path: str | os.PathLike[str], *, overwrite: bool = False, storage_options: dict | None = None
    ) -> str:
        """Write the fitted model to a Zarr group (arrays and JSON attributes; no pickle).

        Parameters
        ----------
        path : str or os.PathLike
            A local folder, or a URL (``s3://bucket/model.zarr``).
        overwrite : bool
            Replace an existing model at ``path``.
        storage_options : dict, optional
            Options of the fsspec filesystem of a URL ``path`` (ignored for a local path); read it back with
            ``daskmeans.load(path, storage_options=...)``.

        Returns
        -------
        str
            The path written.
        """
        return save_model(self, path, overwrite=overwrite, storage_options=check_storage_options(storage_options))

    def _model_array_shapes(self):
        """The shape of every array a model file of this estimator holds, from the stored parameters and
        ``n_features_in_`` (:func:`daskmeans.load` checks each before reading any): ``{attribute: (shape, why)}``;
        a string in a shape is a size shared by several arrays (bound by the first)."""
        k, d = self.n_clusters, self.n_features_in_
        k_name = getattr(type(self), "_n_clusters_parameter", "n_clusters")
        why = f"{k_name}={k} in the stored parameters and n_features_in_={d}"
        return {
            "cluster_centers_": ((k, d), why),
            "counts_": ((k,), f"{k_name}={k} in the stored parameters"),
            "param_init": ((k, d), why),
        }

    def _check_loaded(self, path):
        """Refuse a loaded model whose values cannot be used (:func:`daskmeans.load` calls this once the arrays,
        their shapes checked before reading, are read)."""
        centers = self.cluster_centers_
        if centers.dtype.kind != "f" or not np.isfinite(centers).all():
            raise_damaged(path, f"cluster_centers is not a finite float array (dtype {centers.dtype})")


def raise_damaged(path, what):
    """Raise :class:`ModelFileError` for the model file at ``path``, damaged as ``what`` says."""
    raise ModelFileError(f"{path!r} is damaged: {what}.")
