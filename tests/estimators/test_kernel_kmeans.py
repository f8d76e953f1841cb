"""Kernel k-means estimators: what linear k-means cannot separate, reproducibility on any scheduler, the
distributed predict pass, save/load, the CLI, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from daskmeans import (
    InputDataError,
    InvalidParameterError,
    KernelKMeans,
    KMeans,
    MiniBatchKernelKMeans,
    ModelFileError,
    NotFittedError,
    load,
)
from daskmeans.kernels.kernel_functions import Kernel
from daskmeans.registry import make_estimator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RBF = {"kappa": 0.3}


def circles(n=1000, seed=0):
    """Two concentric noisy circles (radius 1 and 0.3): no line separates them."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    angle = rng.uniform(0, 2 * np.pi, n)
    radius = np.where(y == 0, 1.0, 0.3)
    X = np.c_[radius * np.cos(angle), radius * np.sin(angle)] + 0.05 * rng.standard_normal((n, 2))
    return X, y


def ari(labels_true, labels_pred):
    from sklearn.metrics import adjusted_rand_score

    return adjusted_rand_score(labels_true, np.asarray(labels_pred))


def small_params(**extra):
    return {**dict(n_clusters=2, kernel_params=RBF, batch_size=128, tau=60, max_iter=25, random_state=0), **extra}


@pytest.fixture(scope="module")
def circle_data():
    return circles()


# -- quality -----------------------------------------------------------------------------------------------------
def test_rbf_kernel_separates_concentric_circles_where_linear_kmeans_cannot(circle_data):
    pytest.importorskip("sklearn")
    X, y = circle_data
    linear = KMeans(2, random_state=0).fit(X)
    assert abs(ari(y, linear.labels_)) < 0.1
    scores = {"truncated": [], "untruncated": [], "full": []}
    for seed in range(4):
        truncated = MiniBatchKernelKMeans(**small_params(random_state=seed)).fit(X)
        untruncated = MiniBatchKernelKMeans(**small_params(random_state=seed, truncate=False)).fit(X)
        full = KernelKMeans(2, kernel_params=RBF, random_state=seed).fit(X)
        for name, model in (("truncated", truncated), ("untruncated", untruncated), ("full", full)):
            scores[name].append(ari(y, model.labels_))
    # kernel k-means has local minima (a seed may split both circles); most seeds separate them exactly
    for name, values in scores.items():
        assert sorted(values)[1] > 0.95, (name, values)
    # truncation bounds the support: about tau rows per center plus one batch's share
    assert truncated.support_rows_.shape[0] <= 2 * (60 + 128)
    assert all(r["support"] <= 2 * (60 + 128) for r in truncated.history_)
    assert untruncated.support_rows_.shape[0] > truncated.support_rows_.shape[0]


def test_fitted_attributes(circle_data):
    X, _ = circle_data
    model = MiniBatchKernelKMeans(**small_params(kernel_params=None)).fit(X)
    assert model.n_iter_ == 25 and model.stop_reason_ == "max_iter" and len(model.history_) == 25
    assert model.gamma_ == 1.0
    # kappa="auto": the mean squared distance between random rows, about 2 * total variance
    assert model.kernel_params_["kappa"] == pytest.approx(2 * X.var(axis=0).sum(), rel=0.1)
    support = model.support_
    assert len(support) == 2 and all(set(s) == {"rows", "coef", "index"} for s in support)
    for s in support:
        np.testing.assert_array_equal(s["rows"], X[s["index"]])
        assert np.all(s["coef"] > 0)
    assert model.cluster_centers_.shape == (2, 2)
    distances = model.transform(X)
    np.testing.assert_array_equal(distances.argmin(axis=1), model.labels_)
    assert model.inertia_ == pytest.approx((distances.min(axis=1) ** 2).sum(), rel=1e-9)
    assert model.score(X) == pytest.approx(-model.inertia_, rel=1e-9)
    for record in model.history_:
        assert {"energy", "improvement", "support", "dropped", "wall_time", "passes"} <= set(record)
    poly = MiniBatchKernelKMeans(**small_params(kernel="polynomial", kernel_params={"degree": 2})).fit(X)
    assert poly.gamma_ == pytest.approx(np.sqrt(((0.5 * (X**2).sum(1) + 1) ** 2).max()), rel=0.05)


def test_early_stopping_on_batch_improvement(circle_data):
    X, _ = circle_data
    model = MiniBatchKernelKMeans(**small_params(max_iter=200, tol=0.02)).fit(X)
    assert model.stop_reason_ == "converged" and model.n_iter_ < 200
    assert model.history_[-1]["improvement"] < 0.02
    assert model.history_[-1]["stop_reason"] == "converged" and model.tol_ == 0.02
    assert all("stop_reason" not in entry for entry in model.history_[:-1])
    auto = MiniBatchKernelKMeans(**small_params(max_iter=200, tol="auto")).fit(X)
    assert auto.tol_ == pytest.approx(np.sqrt(auto.n_clusters / auto.batch_size))  # RBF: gamma = 1
    assert auto.stop_reason_ == "converged" and auto.history_[-1]["improvement"] < auto.tol_


def test_laplacian_and_callable_kernels(circle_data, cluster_client):
    X, y = circle_data

    def rbf(A, B, kappa):
        d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
        return np.exp(-d2 / kappa)

    named = MiniBatchKernelKMeans(**small_params()).fit(X)
    own = MiniBatchKernelKMeans(**small_params(kernel=rbf, kernel_params=RBF, client=cluster_client))
    own.fit(da.from_array(X, chunks=250))
    np.testing.assert_allclose(own.center_norms_, named.center_norms_, rtol=1e-9)
    np.testing.assert_array_equal(own.labels_.compute(), named.labels_)
    laplacian = MiniBatchKernelKMeans(**small_params(kernel="laplacian", kernel_params={"kappa": 0.4})).fit(X)
    assert laplacian.kernel_.name == "laplacian" and laplacian.gamma_ == 1.0
    assert ari(y, laplacian.labels_) > 0.9


# -- reproducibility and the distributed pass --------------------------------------------------------------------
def test_same_seed_same_result_on_any_scheduler_and_chunking(cluster_client, circle_data):
    X, _ = circle_data
    X = X.astype(np.float32)
    results = []
    for chunks in (170, 400):
        array = da.from_array(X, chunks=(chunks, 2))
        with dask.config.set(scheduler="sync"):
            results.append(MiniBatchKernelKMeans(**small_params()).fit(array))
        results.append(MiniBatchKernelKMeans(**small_params(), client=cluster_client).fit(array))
    results.append(MiniBatchKernelKMeans(**small_params()).fit(X))
    first = results[0]
    assert first.support_rows_.dtype == np.float32
    for other in results[1:]:
        for name in ("support_rows_", "support_coef_", "support_owner_", "support_index_", "center_norms_"):
            np.testing.assert_array_equal(getattr(other, name), getattr(first, name))
    labels = [np.asarray(r.labels_) if isinstance(r.labels_, np.ndarray) else r.labels_.compute() for r in results]
    for other in labels[1:]:
        np.testing.assert_array_equal(other, labels[0])
    full_sync = KernelKMeans(2, kernel_params=RBF, random_state=3).fit(da.from_array(X, chunks=(170, 2)))
    full_cluster = KernelKMeans(2, kernel_params=RBF, random_state=3, client=cluster_client).fit(
        da.from_array(X, chunks=(400, 2))
    )
    np.testing.assert_array_equal(full_sync.support_index_, full_cluster.support_index_)


def test_distributed_predict_matches_the_sparse_centers_in_memory(cluster_client, circle_data, tmp_path):
    X, _ = circle_data
    model = KernelKMeans(2, kernel_params=RBF, random_state=0).fit(X)
    path = str(tmp_path / "X.zarr")
    zarr.open_array(store=path, mode="w", shape=X.shape, chunks=(300, 2), dtype=X.dtype)[...] = X
    model.set_params(client=cluster_client)
    lazy = model.predict(path)
    assert isinstance(lazy, da.Array) and lazy.shape == (1000,)
    assert any(
        str(key[0] if isinstance(key, tuple) else key).startswith("daskmeans-kernel-labels")
        for key in lazy.__dask_graph__()
    )
    expected = model.sparse_centers_.nearest(X, model.kernel_)[0]
    np.testing.assert_array_equal(cluster_client.compute(lazy).result(), expected)
    np.testing.assert_array_equal(model.labels_, expected)
    bad = X.copy()
    bad[5, 1] = np.nan
    with pytest.raises(InputDataError, match="non-finite"):
        model.predict(da.from_array(bad, chunks=300)).compute()


# -- persistence -------------------------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path, circle_data):
    X, _ = circle_data
    for estimator in (
        MiniBatchKernelKMeans(**small_params(kernel_params=None)),
        KernelKMeans(2, kernel="polynomial", kernel_params={"degree": 2, "coef0": 0.5}, random_state=0),
    ):
        model = estimator.fit(X)
        path = tmp_path / f"{type(model).__name__}.zarr"
        model.save(path)
        loaded = load(path)
        assert type(loaded) is type(model)
        assert loaded.kernel_params_ == model.kernel_params_ and loaded.kernel_name_ == model.kernel_name_
        assert loaded.get_params() == {**model.get_params(), "client": None}
        np.testing.assert_array_equal(loaded.predict(X), model.labels_)
        np.testing.assert_allclose(loaded.transform(X), model.transform(X), rtol=1e-12)
        assert loaded.gamma_ == model.gamma_ and loaded.n_iter_ == model.n_iter_
        assert loaded.history_ == json.loads(json.dumps(model.history_))
        with pytest.raises(NotFittedError, match="predict"):
            loaded.labels_  # noqa: B018 - the attribute access is what raises
        group = zarr.open_group(store=str(path), mode="r")
        assert {"support_rows", "support_coef", "support_owner", "center_norms"} <= set(group.array_keys())
        assert group.attrs["scalars"]["kernel_name_"] == model.kernel_name_


def test_damaged_support_is_refused_at_load(tmp_path, circle_data):
    X, _ = circle_data
    path = tmp_path / "model.zarr"
    MiniBatchKernelKMeans(**small_params()).fit(X).save(path)
    group = zarr.open_group(store=str(path), mode="r+")
    owner = group["support_owner"]
    values = owner[...]
    values[0] = 7
    owner[...] = values
    with pytest.raises(ModelFileError, match="support_owner"):
        load(path)


def test_callable_kernel_is_refused_at_save(tmp_path, circle_data):
    X, _ = circle_data

    def linear(A, B):
        return A @ B.T

    model = MiniBatchKernelKMeans(**small_params(kernel=linear, kernel_params=None)).fit(X)
    with pytest.raises(ModelFileError, match="callable as its kernel.*'linear'.*named kernel"):
        model.save(tmp_path / "model.zarr")
    assert not (tmp_path / "model.zarr").exists()


# -- the registry and the CLI ------------------------------------------------------------------------------------
def test_registry_names():
    assert make_estimator("kernel-minibatch", n_clusters=3).truncate is True
    assert make_estimator("kernel-minibatch-untruncated", n_clusters=3).truncate is False
    assert isinstance(make_estimator("kernel-kmeans", n_clusters=3), KernelKMeans)


@pytest.mark.slow
def test_cli_fit_predict_info_with_kernel_minibatch(tmp_path, circle_data):
    X, _ = circle_data
    data = tmp_path / "circles.npy"
    np.save(data, X)
    env = {key: value for key, value in os.environ.items() if key != "DASK_SCHEDULER_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))

    def run(*args):
        done = subprocess.run(
            [sys.executable, "-m", "daskmeans", *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    fitted = run(
        "fit",
        data,
        "-k",
        2,
        "--algorithm",
        "kernel-minibatch",
        "--max-iter",
        10,
        "--seed",
        1,
        "--out",
        tmp_path / "model.zarr",
        "--workers",
        1,
        "--threads-per-worker",
        1,
        "-q",
        "--json",
    )
    assert fitted["algorithm"] == "kernel-minibatch" and fitted["n_iter"] == 10
    info = run("info", tmp_path / "model.zarr", "--json")
    assert info["estimator"] == "MiniBatchKernelKMeans" and info["algorithm"] == "kernel-minibatch"
    assert info["params"]["kernel"] == "rbf"
    run("predict", tmp_path / "model.zarr", data, "--labels", tmp_path / "labels.zarr", "--workers", 1, "--json")
    labels = zarr.open_array(store=str(tmp_path / "labels.zarr"), mode="r")[...]
    np.testing.assert_array_equal(labels, load(tmp_path / "model.zarr").predict(X))


# -- bad input -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params,message",
    [
        ({"tau": 0}, "tau must be >= 1"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"batch_size": -5}, "batch_size must be >= 1"),
        ({"kernel": "sigmoid"}, "kernel must be one of"),
        ({"kernel_params": {"kappa": 0.0}}, "kappa"),
        ({"kernel_params": {"kappa": -2.0}}, "kappa"),
        ({"kernel_params": {"sigma": 1.0}}, "do not apply"),
        ({"learning_rate": "adam"}, "learning_rate must be one of"),
        ({"max_iter": 0}, "max_iter must be >= 1"),
        ({"tol": -1.0}, "tol must be >= 0"),
        ({"tol": "fast"}, "tol must be a number >= 0 or 'auto'"),
        ({"truncate": "yes"}, "truncate must be True or False"),
        ({"init": "k-means||"}, "init must be one of"),
        ({"init": np.zeros((3, 2))}, "init must be"),
        ({"n_clusters": 0}, "n_clusters must be >= 1"),
    ],
)
def test_bad_parameters_fail_before_any_work(params, message):
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(InvalidParameterError, match=message):
        MiniBatchKernelKMeans(**{"n_clusters": 2, **params}).fit(X)


# -- sample weights ----------------------------------------------------------------------------------------------
def test_full_batch_with_integer_weights_equals_the_repeated_rows(circle_data):
    X, _ = circle_data
    X = X[:300]
    weights = np.random.default_rng(4).integers(1, 4, size=300)
    init = X[[0, 1]]
    weighted = KernelKMeans(2, kernel_params=RBF, init=init).fit(X, sample_weight=weights)
    repeated = KernelKMeans(2, kernel_params=RBF, init=init).fit(np.repeat(X, weights, axis=0))
    np.testing.assert_array_equal(weighted.labels_, repeated.predict(X))
    assert weighted.inertia_ == pytest.approx(repeated.inertia_, rel=1e-6)
    assert weighted.score(X, sample_weight=weights) == pytest.approx(-weighted.inertia_, rel=1e-6)


def test_minibatch_separates_the_circles_from_a_weighted_coreset(circle_data):
    pytest.importorskip("sklearn")
    from daskmeans import lightweight_coreset

    X, y = circle_data
    points, weights = lightweight_coreset(X, 400, random_state=0)
    scores = []
    for seed in range(3):
        model = MiniBatchKernelKMeans(**small_params(random_state=seed)).fit(points, sample_weight=weights)
        scores.append(ari(y, model.predict(X)))
        # inertia_ is the weighted energy of the data it was fitted on
        assert model.inertia_ == pytest.approx(-model.score(points, sample_weight=weights), rel=1e-9)
    assert sorted(scores)[1] > 0.95, scores


def test_zero_weight_rows_are_ignored_by_the_full_batch(circle_data):
    X, _ = circle_data
    X = X[:200]
    weights = np.ones(200)
    weights[100:] = 0.0
    init = X[[0, 1]]
    weighted = KernelKMeans(2, kernel_params=RBF, init=init).fit(X, sample_weight=weights)
    alone = KernelKMeans(2, kernel_params=RBF, init=init).fit(X[:100])
    np.testing.assert_allclose(weighted.transform(X), alone.transform(X), rtol=1e-5, atol=1e-6)


def test_kernel_kmeans_refuses_too_many_samples_before_reading_the_data(tmp_path):
    path = str(tmp_path / "big.zarr")
    store = zarr.open_array(store=path, mode="w", shape=(60_000, 3), chunks=(10_000, 3), dtype="f4")
    store[:10] = np.nan  # would fail the summary pass if the data were read
    with pytest.raises(InputDataError, match=r"n_samples=60,000 exceeds max_samples=50,000.*MiniBatchKernelKMeans"):
        KernelKMeans(3).fit(path)
    with pytest.raises(InputDataError, match="max_samples=100"):
        KernelKMeans(3, max_samples=100).fit(np.random.default_rng(0).normal(size=(101, 2)))


def test_duplicate_rows_cannot_seed_more_centers_than_they_are():
    X = np.repeat(np.eye(2), 20, axis=0)
    with pytest.raises(InputDataError, match="distinct"):
        MiniBatchKernelKMeans(3, kernel_params={"kappa": 1.0}).fit(X)


def test_given_initial_points_and_wrong_features_at_predict(circle_data):
    X, _ = circle_data
    model = MiniBatchKernelKMeans(**small_params(init=X[:2].copy(), max_iter=1, tau=1000)).fit(X)
    np.testing.assert_array_equal(model.support_rows_[model.support_index_ < 0], X[:2])  # phi(given point), kept
    with pytest.raises(InputDataError, match="features"):
        model.predict(np.zeros((4, 3)))
    with pytest.raises(NotFittedError):
        MiniBatchKernelKMeans(2).predict(X)
    assert isinstance(model.kernel_, Kernel)


# -- the quality benchmark ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_bench_quality_scores_ari_and_nmi_against_the_labels(cluster_client, tmp_path):
    pytest.importorskip("sklearn")
    from click.testing import CliRunner
    from conftest import SHARED_DATA

    from daskmeans.bench.command import bench
    from daskmeans.bench.kernel_quality import markdown_table

    if not (SHARED_DATA / "pendigits.npz").exists():
        pytest.skip("the shared pendigits.npz is not present")
    args = [
        "pendigits",
        "--quick",
        "--quality",
        "--data-dir",
        SHARED_DATA,
        "--out",
        tmp_path,
        "--seeds",
        1,
        "--n-samples",
        600,
        "--scheduler",
        cluster_client.scheduler.address,
    ]
    result = CliRunner().invoke(bench, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with open(tmp_path / "pendigits-quick-quality.json") as f:
        record = json.load(f)
    assert record["workload"]["n_samples"] == 600 and record["workload"]["k"] == 10
    assert [r["name"] for r in record["runs"]] == [
        "kernel-minibatch",
        "kernel-minibatch-paper",
        "kernel-minibatch-untruncated",
        "kernel-kmeans",
        "kmeans",
    ]
    steps = {r["name"]: r["n_iter"] for r in record["runs"]}
    # the quick settings (30 steps) apply where the name fixes nothing; the paper's entry keeps its 200 steps
    assert steps["kernel-minibatch"] == steps["kernel-minibatch-untruncated"] == 30
    assert steps["kernel-minibatch-paper"] == 200
    # the shorter runs of each mini-batch algorithm: the start of its run, each with its own ARI and time
    from daskmeans.bench.kernel_quality import curve_steps

    assert curve_steps(30) == [5, 10, 20] and curve_steps(150) == [25, 50, 100] and curve_steps(2) == [1]
    for run in record["runs"]:
        curve = run.get("curve")
        assert (curve is not None) == run["name"].startswith("kernel-minibatch")
        if curve is not None:
            assert [point["steps"] for point in curve] == curve_steps(run["n_iter"])
            assert all(-1 <= point["ari"] <= 1 and 0 < point["nmi"] <= 1 and point["seconds"] > 0 for point in curve)
            assert record["summary"][f"{run['name']}@{curve[0]['steps']}"]["ok"] == 1
    assert all(r["status"] == "ok" and 0 < r["nmi"] <= 1 and -1 <= r["ari"] <= 1 for r in record["runs"])
    full = record["summary"]["kernel-kmeans"]
    assert full["speedup"]["values"] == [1.0]
    assert record["summary"]["kmeans"]["ari"]["min"] <= record["summary"]["kmeans"]["ari"]["median"]
    with open(tmp_path / "pendigits-quick-quality.md") as f:
        assert f.read() == markdown_table(record)
    # unlabelled workloads and --data are refused before any work, with the reason
    result = CliRunner().invoke(bench, ["synthetic", "--quality", "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "true labels" in result.output
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("pool_steps", [3, 40])
def test_pools_fetch_each_distinct_row_once_and_step_on_the_draws_in_order(cluster_client, pool_steps):
    """On 200 rows, 25 steps of 64 draws repeat most rows: a pool fetches each distinct row once from the workers,
    and the steps still see every draw in order (the centers equal those of the steps run on ``X[draws]`` here),
    whether the pools hold 3 steps or all of them."""
    from daskmeans.algorithms.kernel_kmeans import KernelPlan, minibatch_kernel_kmeans
    from daskmeans.algorithms.result import RunContext
    from daskmeans.kernels.kernel_centers import single_point_centers
    from daskmeans.kernels.kernel_minibatch import kernel_minibatch_step
    from daskmeans.passes.kernel_pools import StepPools
    from daskmeans.passes.minibatch_pool import step_indices

    X, _ = circles(200, seed=5)
    kernel = Kernel("rbf", dict(RBF))
    start = single_point_centers(X[:2], kernel, np.arange(2))
    b, n_steps, seed = 64, 25, 11
    array = da.from_array(X, chunks=70)
    pools = StepPools(
        array,
        None,
        cluster_client,
        batch_size=b,
        max_iter=n_steps,
        seed=seed,
        pool_bytes=pool_steps * b * X.shape[1] * X.itemsize,
    )
    plan = KernelPlan(seed=seed, batch_size=b, tau=30, max_iter=n_steps)
    result = minibatch_kernel_kmeans(array, start, kernel, plan, RunContext(client=cluster_client), pools)
    draws = step_indices(X.shape[0], b, seed, 0, n_steps)
    assert np.unique(draws).size < draws.size / 4  # most rows are drawn several times
    expected, seen = start, np.zeros(2)
    for step, index in enumerate(draws, start=1):
        expected, seen, _ = kernel_minibatch_step(expected, seen, X[index], index, kernel, step, tau=30)
    for field in ("rows", "coef", "owner", "row_index", "norms"):
        np.testing.assert_array_equal(getattr(result.centers, field), getattr(expected, field))
    np.testing.assert_array_equal(result.seen_counts, seen)


def test_a_run_of_fewer_steps_is_the_start_of_the_longer_run(circle_data):
    """What the quality bench's curve relies on: the same seed draws the same batches whatever ``max_iter``."""
    X, _ = circle_data
    short = MiniBatchKernelKMeans(**small_params(max_iter=7)).fit(X)
    full = MiniBatchKernelKMeans(**small_params(max_iter=25)).fit(X)
    keys = ("energy", "batch_energy_after", "support", "dropped")
    assert [[entry[key] for key in keys] for entry in short.history_] == [
        [entry[key] for key in keys] for entry in full.history_[:7]
    ]


@pytest.mark.parametrize("truncate", [True, False])
def test_as_many_clusters_as_distinct_rows_gives_one_row_each(truncate):
    """40 clusters on 40 distinct rows: one row each, as scikit-learn's KMeans gives. Every batch brings the same
    rows again; the truncation keeps a row a center keeps receiving as one support row (its copies merged), so no
    center shrinks towards the origin of the feature space and loses its row to a neighbour."""
    rows = np.random.default_rng(0).normal(size=(40, 3))
    model = MiniBatchKernelKMeans(n_clusters=40, truncate=truncate, random_state=0).fit(rows)
    labels = np.asarray(model.labels_)
    assert sorted(np.bincount(labels, minlength=40).tolist()) == [1] * 40
    assert model.support_rows_.shape[0] == 40  # each center is its row
    np.testing.assert_array_equal(model.predict(rows), labels)
    assert model.history_[-1]["energy"] < 1e-12
