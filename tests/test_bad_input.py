"""The "Bad input" list of the reliability issue, for every estimator of the registry, and the CLI's outputs when
a fit or predict fails.

Items already tested for one estimator elsewhere (test_io, test_kmeans, test_cli, test_persistence, ...) are
tested here for all of them; each error is a daskmeans error whose message says what is wrong and how to fix it.
Parameter errors are raised before any work: the data given with them is a 10**10-row dask array that is never
computed.
"""

from __future__ import annotations

import inspect
import os
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr
from test_cli import assert_user_error, invoke

import daskmeans
from daskmeans.exceptions import DaskmeansError, InputDataError, InvalidParameterError
from daskmeans.registry import ALGORITHMS, FEATURE_SPACE_ALGORITHMS, algorithm_names, make_estimator

NAMES = algorithm_names()
#: Short runs: enough iterations to touch every code path.
FAST = {
    "kmeans": {"max_iter": 5},
    "kmeans-lloyd": {"max_iter": 5},
    "vrkm": {"max_epochs": 3},
    "vrkm++": {"max_epochs": 3},
    "vrkm++-reference": {"max_epochs": 3},
    "nmbatch": {"max_iter": 10},
    "minibatch": {"max_iter": 2},
    "minibatch-rows": {"max_iter": 2},
    "vc-gmm": {"max_iter": 5},
    "kernel-minibatch": {"max_iter": 3, "batch_size": 64},
    "kernel-minibatch-untruncated": {"max_iter": 3, "batch_size": 64},
    "kernel-kmeans": {"max_iter": 5},
}


def estimator_class(name):
    module, cls_name, _ = ALGORITHMS[name]
    return getattr(__import__(module, fromlist=[cls_name]), cls_name)


def own_name(name, parameter):
    """The estimator's name for a registry parameter (vc-GMM's number of clusters is ``n_components``)."""
    if parameter == "n_clusters":
        return getattr(estimator_class(name), "_n_clusters_parameter", None) or "n_clusters"
    return parameter


def never_computed():
    return da.random.random((10**10, 4), chunks=(10**8, 4))


def model(name, k=3, **params):
    return make_estimator(name, n_clusters=k, random_state=0, **{**FAST[name], **params})


@pytest.fixture(scope="module")
def fitted_models():
    """One fitted model per estimator (on ``blobs()``), shared by the predict tests."""
    return {name: model(name).fit(blobs()) for name in NAMES}


def blobs(n=400, d=3, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) + 8 * rng.integers(0, 3, size=(n, 1))).astype(dtype)


# -- parameters ------------------------------------------------------------------------------------------------
COMMON_BAD = [
    ({"n_clusters": 0}, "n_clusters must be >= 1"),
    ({"n_clusters": -2}, "n_clusters must be >= 1"),
    ({"n_clusters": 2.5}, "n_clusters must be an integer"),
    ({"max_time": 0}, "max_time must be > 0"),
    ({"max_time": -1.0}, "max_time must be > 0"),
    ({"init": "kmeans"}, "init must be one of"),
    ({"init_rounds": 0}, "init_rounds must be >= 1"),
    ({"oversampling_factor": 0.0}, "oversampling_factor must be > 0"),
    ({"oversampling_factor": -1.0}, "oversampling_factor must be > 0"),
    ({"init_sample_size": 0}, "init_sample_size must be >= 1"),
    ({"chunk_rows": 0}, "chunk_rows must be >= 1"),
    ({"chunk_rows": -100}, "chunk_rows must be >= 1"),
    ({"snapshot_centers": "yes"}, "snapshot_centers must be True or False"),
]

SPECIFIC_BAD = [
    ("kmeans", {"n_init": 0}, "n_init must be >= 1"),
    ("kmeans", {"max_iter": -1}, "max_iter must be >= 1"),
    ("kmeans", {"tol": -1e-3}, "tol must be >= 0"),
    ("minibatch", {"batch_size": 0}, "batch_size must be >= 1"),
    ("minibatch", {"batch_size": -64}, "batch_size must be >= 1"),
    ("minibatch", {"learning_rate": "constant"}, "learning_rate must be one of"),
    ("nmbatch", {"initial_batch_size": 0}, "initial_batch_size must be >= 1"),
    ("nmbatch", {"initial_batch_size": -10}, "initial_batch_size must be >= 1"),
    ("nmbatch", {"rho": 0.0}, "rho must be > 0"),
    ("nmbatch", {"rho": -3.0}, "rho must be > 0"),
    ("nmbatch", {"rho": float("nan")}, "rho must be finite"),
    ("nmbatch", {"doubling_quantile": 2.0}, "doubling_quantile must be <= 1"),
    ("nmbatch", {"bounds": "kd-tree"}, "bounds must be one of"),
    ("vrkm", {"learning_rate": 0.0}, "learning_rate must be > 0"),
    ("vrkm", {"learning_rate": -0.5}, "learning_rate must be > 0"),
    ("vrkm++", {"learning_rate": float("inf")}, "learning_rate must be finite"),
    ("vrkm++", {"epoch_size": 0}, "must be >= 1"),
    ("vrkm++", {"epoch_size": -0.1}, "must be > 0"),
    ("vrkm++", {"driver_sample_bytes": -1}, "driver_sample_bytes must be >= 0"),
    ("vrkm++", {"n_candidates": 0}, "n_candidates must be >= 1"),
    # the new estimators' own checks (more in test_vc_gmm / test_kernel_kmeans): here, raised before any work
    ("vc-gmm", {"coreset_size": 2}, "coreset_size=2 is smaller than n_components=3.*coreset_size >= 3"),
    ("vc-gmm", {"coreset_size": 0}, "smaller than n_components"),
    ("vc-gmm", {"n_truncated": -1}, r"n_truncated \(C'\) must be >= 1"),
    ("vc-gmm", {"n_truncated": 1.5}, r"n_truncated \(C'\) must be an integer"),
    ("vc-gmm", {"search_size": -4}, r"search_size \(G\) must be >= 1"),
    ("vc-gmm", {"chain_length": -1}, "chain_length must be >= 1"),
    ("vc-gmm", {"chain_length": 2.5}, "chain_length must be an integer"),
    ("vc-gmm", {"oversampling": 0.5}, "oversampling must be >= 1"),
    ("vc-gmm", {"oversampling": float("nan")}, "oversampling"),
    ("vc-gmm", {"max_iter": 0}, "max_iter must be >= 1"),
    ("kernel-minibatch", {"tau": 0}, "tau must be >= 1"),
    ("kernel-minibatch", {"tau": -7}, "tau must be >= 1"),
    ("kernel-minibatch", {"tau": 0.5}, "tau must be an integer"),
    ("kernel-minibatch", {"batch_size": 0}, "batch_size must be >= 1"),
    ("kernel-minibatch-untruncated", {"batch_size": -32}, "batch_size must be >= 1"),
    ("kernel-minibatch", {"kernel": "sigmoid"}, "kernel must be one of"),
    ("kernel-kmeans", {"kernel": "linear"}, "kernel must be one of"),
    ("kernel-kmeans", {"kernel_params": {"kappa": 0.0}}, "kappa"),
    ("kernel-kmeans", {"max_samples": 0}, "max_samples must be >= 1"),
    ("kernel-minibatch", {"learning_rate": 0.1}, "learning_rate must be one of"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("params, message", COMMON_BAD)
def test_bad_common_parameters_fail_before_any_work(name, params, message):
    (parameter,) = params
    accepted = inspect.signature(estimator_class(name)).parameters
    if own_name(name, parameter) not in accepted:
        pytest.skip(
            f"{estimator_class(name).__name__} has no parameter {parameter!r} (it does not use the "
            "k-means|| seeding or center snapshots); an unknown keyword is Python's TypeError"
        )
    message = message.replace("n_clusters", own_name(name, "n_clusters"))
    params = {"n_clusters": 3, **params}
    with pytest.raises(InvalidParameterError, match=message):
        make_estimator(name, **params).fit(never_computed())


@pytest.mark.parametrize("name, params, message", SPECIFIC_BAD)
def test_bad_algorithm_parameters_fail_before_any_work(name, params, message):
    with pytest.raises(InvalidParameterError, match=message):
        make_estimator(name, n_clusters=3, **params).fit(never_computed())


def test_unknown_algorithm_name():
    with pytest.raises(InvalidParameterError, match="Unknown algorithm 'kmedoids'; choose one of kmeans, "):
        make_estimator("kmedoids", n_clusters=3)
    result = invoke("fit", "anything.zarr", "-k", 3, "--algorithm", "kmedoids")
    assert result.exit_code == 1 and "Invalid value for '--algorithm'" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", NAMES)
def test_more_clusters_than_samples(name):
    with pytest.raises(InputDataError, match="n_samples=5 should be >= n_clusters=6"):
        model(name, k=6).fit(blobs(n=5))


# -- values ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_counted_and_located(name, bad):
    X = blobs()
    X[[37, 200, 201], 1] = bad
    with pytest.raises(InputDataError, match=r"3 non-finite value\(s\).*first is in row 37.*Remove or impute"):
        model(name).fit(X)


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_values_at_predict(name, fitted_models):
    fitted = fitted_models[name]
    Y = blobs(n=50)
    Y[12, 0] = np.nan
    with pytest.raises(InputDataError, match="non-finite.*row 12"):
        np.asarray(fitted.predict(Y))


@pytest.mark.parametrize("name", NAMES)
def test_constant_data_and_fewer_distinct_rows_than_clusters(name):
    # in the words of each seeding: "only 1 distinct row(s)", vc-GMM's AFK-MC2 "found only 1 distinct center(s)",
    # the kernel k-means++ "only 1 row(s) distinct in the kernel's feature space"
    with pytest.raises(InputDataError, match="only 1 (distinct row|distinct center|row.*distinct)"):
        model(name, k=2).fit(np.full((30, 3), 7.0))
    two_points = np.repeat(np.array([[1.0, 2.0], [3.0, 4.0]]), 20, axis=0)
    with pytest.raises(InputDataError, match="only 2 (distinct row|distinct center|row.*distinct)"):
        model(name, k=3).fit(two_points)
    if name == "vc-gmm":  # one Gaussian on constant data has variance 0: no density, refused
        with pytest.raises(InputDataError, match="zero spread.*variance is zero.*Lower n_components"):
            model(name, k=1).fit(np.full((30, 3), 7.0))
        return
    one = model(name, k=1).fit(np.full((30, 3), 7.0))
    if name in FEATURE_SPACE_ALGORITHMS:  # the input-space position is a weighted mean of the support rows
        np.testing.assert_allclose(one.cluster_centers_, [[7.0, 7.0, 7.0]], rtol=1e-14)
    else:
        np.testing.assert_array_equal(one.cluster_centers_, [[7.0, 7.0, 7.0]])


@pytest.mark.parametrize("name", NAMES)
def test_squares_that_overflow_float32_are_refused_and_float64_computes_them(name):
    X = blobs(dtype=np.float64) * 1e19  # squared distances near 1e40: beyond float32 (3.4e38)
    with pytest.raises(InputDataError, match="overflow float32.*Rescale.*float64"):
        model(name).fit(X.astype(np.float32))
    fitted = model(name).fit(X)
    assert np.isfinite(fitted.cluster_centers_).all()
    assert set(np.unique(fitted.labels_)) == {0, 1, 2}


# -- shapes, dtypes, chunkings ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((0, 3)), "0 samples"),
        (np.zeros((10, 0)), "0 feature"),
        (np.ones(10), "2-D array.*1-D.*reshape"),
        (np.ones((10, 3, 2)), "2-D array.*3-D.*Flatten"),
        (np.ones((10, 3), dtype=bool), "dtype bool.*Convert"),
        (np.ones((10, 3), dtype=np.complex64), "Complex data not supported.*real and imaginary"),
        (np.full((10, 3), "a"), "string.*Convert"),
        (np.full((10, 3), "x", dtype=object), "dtype object and holds values that are not numbers"),
    ],
)
def test_bad_shapes_and_dtypes_at_fit_and_predict(name, bad, message, fitted_models):
    with pytest.raises(InputDataError, match=message):
        model(name).fit(bad)
    fitted = fitted_models[name]
    with pytest.raises(InputDataError, match=message):
        fitted.predict(bad)


@pytest.mark.parametrize("name", NAMES)
def test_predict_with_another_feature_count(name, fitted_models):
    fitted = fitted_models[name]
    with pytest.raises(InputDataError, match=f"X has 4 features, but {type(fitted).__name__} is expecting 3"):
        fitted.predict(blobs(d=4))


@pytest.mark.parametrize("name", NAMES)
def test_zero_length_and_feature_chunks_give_the_result_of_plain_row_chunks(name):
    X = blobs(n=300)
    plain = model(name, chunk_rows=None).fit(da.from_array(X, chunks=(100, 3)))
    zero_length = da.from_array(X, chunks=((0, 100, 0, 100, 100, 0), (3,)))
    np.testing.assert_array_equal(model(name).fit(zero_length).cluster_centers_, plain.cluster_centers_)
    with pytest.warns(UserWarning, match="chunked along features"):
        by_feature = model(name).fit(da.from_array(X, chunks=(100, 1)))
    np.testing.assert_array_equal(by_feature.cluster_centers_, plain.cluster_centers_)
    np.testing.assert_array_equal(np.asarray(plain.predict(zero_length)), np.asarray(plain.labels_))


# -- the CLI's outputs when a fit or predict fails -------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


def write_store(path, X, chunk_rows):
    zarr.create_array(str(path), shape=X.shape, chunks=(chunk_rows, X.shape[1]), dtype=X.dtype)[:] = X
    return str(path)


def snapshot(folder):
    """Every file under ``folder`` with its bytes: a failed command must leave them all as they were."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, folder)] = handle.read()
    return files


@pytest.mark.slow
def test_failed_fit_and_predict_leave_outputs_untouched_even_with_overwrite(tmp_path, cluster):
    good = write_store(tmp_path / "good.zarr", blobs(n=2000, dtype=np.float32), 500)
    late_nan = blobs(n=2000, dtype=np.float32)
    late_nan[1990, 2] = np.nan  # in the last block: the labels of the first blocks are written before it is seen
    bad = write_store(tmp_path / "bad.zarr", late_nan, 500)
    out = tmp_path / "out"
    out.mkdir()
    address = cluster.scheduler_address
    fitted = invoke(
        "fit",
        good,
        "-k",
        3,
        "--seed",
        1,
        "-q",
        "--scheduler",
        address,
        "--out",
        out / "model.zarr",
        "--labels",
        out / "labels.zarr",
    )
    assert fitted.exit_code == 0, fitted.output
    before = snapshot(out)

    failed_fit = invoke(
        "fit",
        bad,
        "-k",
        4,
        "--seed",
        2,
        "-q",
        "--scheduler",
        address,
        "--overwrite",
        "--out",
        out / "model.zarr",
        "--labels",
        out / "labels.zarr",
    )
    assert_user_error(failed_fit, "non-finite", "row 1990")
    failed_predict = invoke(
        "predict", out / "model.zarr", bad, "--labels", out / "labels.zarr", "--overwrite", "--scheduler", address
    )
    assert_user_error(failed_predict, "non-finite", "row 1990")
    failed_new = invoke("predict", out / "model.zarr", bad, "--labels", out / "new-labels.zarr", "--scheduler", address)
    assert_user_error(failed_new, "non-finite")
    assert snapshot(out) == before, "a failed command changed or added files"
    assert sorted(os.listdir(out)) == ["labels.zarr", "model.zarr"], "no temporary or partial output is left"
    assert daskmeans.load(out / "model.zarr").n_clusters == 3


def test_every_error_is_a_daskmeans_error_with_a_fix():
    """The classes the messages above come from: one base class, so callers can catch them all."""
    for error in (InputDataError, InvalidParameterError):
        assert issubclass(error, DaskmeansError) and issubclass(error, ValueError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidParameterError, match="Invalid parameter 'rhoo'.*valid parameters are"):
            model("nmbatch").set_params(rhoo=1.0)


# -- sample weights (every estimator takes them) -----------------------------------------------------------------
BAD_WEIGHTS = [
    (np.ones(7), r"sample_weight must have shape \(400,\)"),
    (np.ones((400, 2)), r"sample_weight must have shape \(400,\)"),
    (np.array(["a"] * 400), "sample_weight must be numeric"),
    (np.r_[np.ones(399), -1.0], "sample_weight has 1 negative or non-finite value"),
    (np.r_[np.ones(10), np.nan, np.ones(389)], "the first is at row 10"),
    (np.zeros(400), "sample_weight sums to zero"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("weights, message", BAD_WEIGHTS)
def test_bad_sample_weight_is_refused_before_the_fit(name, weights, message):
    estimator = model(name)
    with pytest.raises(InputDataError, match=message):
        estimator.fit(blobs(), sample_weight=weights)
    assert not hasattr(estimator, "cluster_centers_")
