"""Property-based tests: random shapes, dtypes, chunkings and special values fed to ``fit`` and ``predict`` of every
estimator in :mod:`daskmeans.registry`.

Whatever the input, the outcome is one of two: a daskmeans error (a subclass of
:class:`daskmeans.exceptions.DaskmeansError`) with a message, or a valid result (finite centers of shape
``(n_clusters, n_features)``, labels in ``[0, n_clusters)``, one per row). Any other exception is a bug.

Everything runs on Dask's synchronous scheduler in this process (the data is tiny; distribution is tested
elsewhere), with few examples per estimator and no deadline.
"""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmeans.exceptions import DaskmeansError
from daskmeans.registry import algorithm_names, make_estimator

#: Small runs: a few iterations are enough to exercise every code path.
FAST_PARAMS = {
    "kmeans": {"max_iter": 5},
    "kmeans-lloyd": {"max_iter": 5},
    "vrkm": {"max_epochs": 3},
    "vrkm++": {"max_epochs": 3},
    "vrkm++-reference": {"max_epochs": 3},
    "nmbatch": {"max_iter": 8},
    "minibatch": {"max_iter": 2, "batch_size": 7},
    "minibatch-rows": {"max_iter": 2, "batch_size": 7},
    "vc-gmm": {"max_iter": 3},
    "kernel-minibatch": {"max_iter": 2, "batch_size": 7},
    "kernel-minibatch-untruncated": {"max_iter": 2, "batch_size": 7},
    "kernel-kmeans": {"max_iter": 3},
}

NUMERIC_DTYPES = ["uint8", "int16", "int64", "float16", "float32", "float64"]
OTHER_DTYPES = ["bool", "complex64", "object", "U3"]

#: Values whose squares overflow float32 (and, for the largest, float64).
SPECIAL_VALUES = [np.nan, np.inf, -np.inf, 1e20, -3e25, 1.5e38, 1e200, 0.0]


@st.composite
def inputs(draw):
    """``(X, description)``: an array (NumPy or dask) of a random shape, dtype, chunking and content."""
    ndim = draw(st.sampled_from([2, 2, 2, 2, 1, 3]))
    n = draw(st.integers(0, 40))
    d = draw(st.integers(0, 4))
    shape = {1: (n,), 2: (n, d), 3: (n, max(d, 1), 2)}[ndim]
    dtype = draw(st.sampled_from(NUMERIC_DTYPES * 3 + OTHER_DTYPES))
    content = draw(st.sampled_from(["random", "random", "constant", "few-distinct", "special"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    size = int(np.prod(shape))
    if content == "constant":
        values = np.full(size, 3.0)
    elif content == "few-distinct":
        values = rng.choice(np.array([-1.0, 2.0]), size=size)
    else:
        values = rng.normal(scale=draw(st.sampled_from([1.0, 100.0])), size=size)
        if content == "special" and size:
            spots = rng.integers(0, size, size=draw(st.integers(1, 3)))
            values[spots] = draw(st.sampled_from(SPECIAL_VALUES))
    values = values.reshape(shape)
    if dtype == "object":
        X = values.astype(object)
        if draw(st.booleans()) and size:
            X.flat[0] = "not a number"
    elif dtype == "U3":
        X = values.astype("U3")
    elif dtype == "bool":
        X = values > 0
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            if np.dtype(dtype).kind in "iu":
                info = np.iinfo(dtype)
                X = np.nan_to_num(values, nan=0, posinf=info.max, neginf=info.min)
                X = np.clip(X, info.min, info.max).astype(dtype)
            else:
                X = values.astype(dtype)
    layout = draw(st.sampled_from(["numpy", "dask", "dask-zero-chunks", "dask-feature-chunks"]))
    if layout == "numpy" or X.dtype.kind in "OU" or ndim != 2:
        return X, f"{layout if layout == 'numpy' else 'numpy'} {X.dtype} {shape} {content}"
    rows = draw(st.integers(1, max(1, n)))
    if layout == "dask-zero-chunks":
        cuts = sorted(draw(st.lists(st.integers(0, n), min_size=1, max_size=4)))
        edges = [0, *cuts, n]
        chunks = (tuple(b - a for a, b in zip(edges[:-1], edges[1:])), (d,))
        return da.from_array(X, chunks=chunks), f"dask chunks {chunks} {X.dtype} {content}"
    if layout == "dask-feature-chunks" and d > 1:
        return da.from_array(X, chunks=(rows, 1)), f"dask feature-chunked {X.dtype} {shape} {content}"
    return da.from_array(X, chunks=(rows, max(d, 1))), f"dask rows {rows} {X.dtype} {shape} {content}"


def check_outcome(action, check_result):
    """Run ``action``: a daskmeans error with a message, or a result that passes ``check_result``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. feature-chunked input is rechunked with a warning
            result = action()
    except DaskmeansError as error:
        assert str(error).strip(), f"{type(error).__name__} without a message"
        return None
    check_result(result)
    return result


def assert_valid_labels(labels, n, k):
    labels = np.asarray(labels.compute() if hasattr(labels, "compute") else labels)
    assert labels.shape == (n,)
    assert labels.dtype.kind in "iu"
    assert ((labels >= 0) & (labels < k)).all()


@pytest.fixture(autouse=True, scope="module")
def synchronous_scheduler():
    with dask.config.set({"scheduler": "sync", "scheduler-address": None}):
        yield


@pytest.mark.slow
@pytest.mark.parametrize("name", algorithm_names())
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=inputs(), predict_data=inputs(), n_clusters=st.integers(1, 5), seed=st.integers(0, 1000))
def test_fit_and_predict_give_a_documented_error_or_a_valid_result(name, data, predict_data, n_clusters, seed):
    X, description = data
    model = make_estimator(name, n_clusters=n_clusters, random_state=seed, **FAST_PARAMS[name])

    def check_fit(fitted):
        centers = fitted.cluster_centers_
        assert centers.shape == (n_clusters, X.shape[1]), description
        assert np.isfinite(centers).all(), description
        assert_valid_labels(fitted.labels_, X.shape[0], n_clusters)

    if check_outcome(lambda: model.fit(X), check_fit) is None:
        return
    for Y, _ in (data, predict_data):
        check_outcome(
            lambda Y=Y: np.asarray(model.predict(Y)),
            lambda labels, Y=Y: assert_valid_labels(labels, Y.shape[0], n_clusters),
        )
