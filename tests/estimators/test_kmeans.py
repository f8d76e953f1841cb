"""Exact k-means: known answers, scikit-learn parity, reproducibility, weights, empty clusters, bad input."""

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import make_blobs, shared_dataset

from daskmeans import InputDataError, InvalidParameterError, KMeans, NotFittedError, SchedulerConnectionError
from daskmeans.engine.client import connect, resolve_client


def _match_centers(found, truth):
    """Max distance from each true center to the nearest found center."""
    d2 = ((truth[:, None] - found[None]) ** 2).sum(-1)
    return np.sqrt(d2.min(1)).max()


@pytest.mark.parametrize("init", ["k-means||", "k-means++", "two-level", "random"])
def test_finds_the_true_centers_of_separated_blobs(init):
    X, labels, centers = make_blobs(n=3000, d=4, k=5, seed=1)
    model = KMeans(5, init=init, n_init=3 if init == "random" else 1, random_state=0).fit(X)
    assert _match_centers(model.cluster_centers_, centers) < 0.1
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(labels, model.labels_) == 1.0
    assert model.stop_reason_ == "converged"
    np.testing.assert_array_equal(model.predict(X), model.labels_)
    assert model.score(X) == pytest.approx(-model.inertia_)


def test_kmeans_parallel_alone_covers_every_blob():
    X, _, centers = make_blobs(n=4000, d=3, k=20, spread=0.05, seed=2)
    model = KMeans(20, random_state=3, max_iter=1).fit(X)
    # the seeding found one candidate in each blob: one Lloyd step is then at the optimum
    assert _match_centers(model.cluster_centers_, centers) < 0.05


def test_energy_matches_scikit_learn_on_real_data():
    data = shared_dataset("pendigits")
    X = data["X"].astype(np.float32)
    from sklearn.cluster import KMeans as SKKMeans

    init = X[np.random.default_rng(0).choice(len(X), 30, replace=False)]
    ours = KMeans(30, init=init, max_iter=300, tol=1e-4).fit(X)
    theirs = SKKMeans(30, init=init, n_init=1, max_iter=300, tol=1e-4, algorithm="lloyd").fit(X)
    assert ours.inertia_ == pytest.approx(theirs.inertia_, rel=1e-3)
    assert ours.cluster_centers_.dtype == np.float32


def test_same_seed_same_centers_on_every_scheduler_and_worker_count(cluster_client):
    X, _, _ = make_blobs(n=6000, d=6, k=8, spread=1.5, seed=4, dtype=np.float32)
    array = da.from_array(X, chunks=(900, 6))
    params = dict(n_clusters=8, random_state=123, max_iter=50)
    with dask.config.set(scheduler="sync"):
        sync = KMeans(**params).fit(array)
    with dask.config.set(scheduler="threads"):
        threads = KMeans(**params).fit(array)
    distributed = KMeans(**params, client=cluster_client).fit(array)
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as single,
        Client(single, set_as_default=False) as one_worker,
    ):
        single_worker = KMeans(**params, client=one_worker).fit(array)
    for other in (threads, distributed, single_worker):
        np.testing.assert_array_equal(sync.cluster_centers_, other.cluster_centers_)
        assert sync.n_iter_ == other.n_iter_
    # the history is the same run, seen by every scheduler
    assert [r["energy"] for r in sync.history_] == [r["energy"] for r in distributed.history_]


def test_chunking_changes_only_the_float_rounding():
    X, _, _ = make_blobs(n=5000, d=5, k=6, spread=1.0, seed=5)
    a = KMeans(6, random_state=9).fit(da.from_array(X, chunks=(5000, 5)))
    b = KMeans(6, random_state=9).fit(da.from_array(X, chunks=(333, 5)))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-9, atol=1e-9)


def test_integer_weights_equal_repeated_rows():
    X, _, _ = make_blobs(n=500, d=3, k=4, spread=2.0, seed=6)
    w = np.random.default_rng(0).integers(0, 4, size=500)
    init = X[:4] + 0.1
    weighted = KMeans(4, init=init, tol=0).fit(X, sample_weight=w)
    repeated = KMeans(4, init=init, tol=0).fit(np.repeat(X, w, axis=0))
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_, rtol=1e-10)
    assert weighted.inertia_ == pytest.approx(repeated.inertia_, rel=1e-10)


def test_empty_cluster_is_moved_to_a_far_point_not_the_origin():
    X, _, _ = make_blobs(n=1000, d=2, k=3, seed=7)
    X = X + 100.0  # far from the origin
    init = np.array([X[0], X[1], [1e4, 1e4]])
    model = KMeans(3, init=init, max_iter=20).fit(X)
    assert model.history_[0]["relocated"] == 1
    assert np.linalg.norm(model.cluster_centers_, axis=1).min() > 50
    assert np.bincount(model.labels_, minlength=3).min() > 0


def test_many_empty_clusters_are_all_refilled():
    X = np.random.default_rng(8).normal(size=(400, 2))
    init = np.vstack([X[:2], np.full((60, 2), 1e3)])
    model = KMeans(62, init=init, max_iter=5).fit(da.from_array(X, chunks=50))
    assert model.history_[0]["relocated"] == 60


@pytest.mark.parametrize("n_empty, passes", [(40, 1), (70, 2)])
def test_empty_clusters_are_refilled_in_their_own_pass_while_the_far_rows_suffice(
    cluster_client, monkeypatch, n_empty, passes
):
    """k = 400 reports far_rows(400) = 50 far rows: 40 empty clusters are refilled from the iteration's own pass,
    70 need the pass again (with 70 far rows); the centers are the same as when every pass reports enough."""
    from daskmeans.passes.assign import far_rows

    assert far_rows(400) == 50 and far_rows(8) == 32 and far_rows(10**6) == 1024
    X = np.random.default_rng(9).normal(size=(4000, 3)).astype(np.float32)
    init = np.vstack([X[: 400 - n_empty], np.full((n_empty, 3), 1e3, dtype=np.float32)])
    array = da.from_array(X, chunks=500)
    model = KMeans(400, init=init, max_iter=1, tol=0, algorithm="lloyd", client=cluster_client).fit(array)
    record = model.history_[0]
    assert record["relocated"] == n_empty
    assert record["passes"] == 1 + passes  # the summary pass, then the iteration's
    assert np.linalg.norm(model.cluster_centers_, axis=1).max() < 100  # none left far away
    from daskmeans import config

    monkeypatch.setattr(config, "N_FAR", 400)  # every pass reports enough far rows
    plenty = KMeans(400, init=init, max_iter=1, tol=0, algorithm="lloyd", client=cluster_client).fit(array)
    assert plenty.history_[0]["passes"] == 2
    np.testing.assert_array_equal(plenty.cluster_centers_, model.cluster_centers_)


def test_max_time_and_history():
    X, _, _ = make_blobs(n=2000, d=4, k=10, spread=3.0, seed=9)
    model = KMeans(10, max_time=1e-9, random_state=0).fit(X)
    # the budget ended during the seeding: the first iteration is cut, and the fit keeps the seeds
    assert model.stop_reason_ == "max_time" and model.n_iter_ == 0 and model.history_ == []
    full = KMeans(10, random_state=0, tol=0).fit(X)
    record = full.history_[-1]
    assert {"iteration", "energy", "inertia", "center_shift", "wall_time", "passes"} <= set(record)
    energies = [r["energy"] for r in full.history_]
    assert all(b <= a + 1e-9 for a, b in zip(energies, energies[1:]))  # Lloyd never increases the energy
    assert full.history_[-1]["passes"] > full.history_[0]["passes"]


def test_n_init_keeps_the_best_run():
    X, _, _ = make_blobs(n=1500, d=2, k=12, spread=2.0, seed=10)
    single = [KMeans(12, init="random", random_state=s).fit(X).inertia_ for s in range(1)]
    best = KMeans(12, init="random", n_init=4, random_state=0).fit(X)
    assert best.inertia_ <= single[0] + 1e-9


def test_zarr_input_gives_lazy_chunk_aligned_labels(tmp_path):
    X, _, _ = make_blobs(n=3000, d=4, k=3, seed=11, dtype=np.float32)
    store = zarr.open_array(store=str(tmp_path / "x.zarr"), mode="w", shape=X.shape, chunks=(500, 4), dtype="f4")
    store[...] = X
    model = KMeans(3, random_state=0, chunk_rows=500).fit(str(tmp_path / "x.zarr"))
    assert isinstance(model.labels_, da.Array) and model.labels_.chunks[0] == (500,) * 6
    np.testing.assert_array_equal(model.labels_.compute(), KMeans(3, random_state=0).fit(X).labels_)
    assert isinstance(model.predict(str(tmp_path / "x.zarr")), da.Array)


def test_xarray_labels_keep_the_sample_coordinate():
    X, _, _ = make_blobs(n=300, d=2, k=2, seed=12)
    data = xr.DataArray(
        da.from_array(X, chunks=100), dims=("sample", "feature"), coords={"sample": np.arange(1000, 1300)}
    )
    labels = KMeans(2, random_state=0).fit(data).labels_
    assert isinstance(labels, xr.DataArray) and labels.dims == ("sample",)
    assert int(labels.sample[0]) == 1000


@pytest.mark.parametrize("init", ["k-means||", "k-means++", "two-level", "random"])
def test_fewer_distinct_rows_than_clusters(init):
    X = np.repeat(np.array([[1.0, 2.0], [3.0, 4.0]]), 50, axis=0)
    with pytest.raises(InputDataError, match="only 2 distinct row"):
        KMeans(3, init=init, random_state=0).fit(X)
    with pytest.raises(InputDataError, match="only 1 distinct row"):
        KMeans(2, init=init, random_state=0).fit(np.ones((20, 3)))
    assert KMeans(1, init=init, random_state=0).fit(np.ones((20, 3))).inertia_ == 0


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(n_clusters=0), "n_clusters must be >= 1"),
        (dict(n_clusters=2.5), "n_clusters must be an integer"),
        (dict(tol=-1.0), "tol must be >= 0"),
        (dict(max_iter=0), "max_iter must be >= 1"),
        (dict(max_time=0), "max_time must be > 0"),
        (dict(init="kmeans"), "init must be one of"),
        (dict(init=np.ones((3, 2))), r"init array has shape \(3, 2\)"),
        (dict(oversampling_factor=0), "oversampling_factor must be > 0"),
        (dict(random_state="x"), "random_state must be"),
    ],
)
def test_invalid_parameters(params, match):
    params = {"n_clusters": 2, **params}
    with pytest.raises((InvalidParameterError, TypeError), match=match):
        KMeans(**params).fit(np.random.default_rng(0).normal(size=(20, 4)))


def test_more_clusters_than_samples_and_bad_weights():
    with pytest.raises(InputDataError, match="n_samples=5 should be >= n_clusters=6"):
        KMeans(6).fit(np.random.default_rng(0).normal(size=(5, 2)))
    with pytest.raises(InputDataError, match=r"sample_weight must have shape \(20,\)"):
        KMeans(2).fit(np.ones((20, 2)), sample_weight=np.ones(3))


def test_nan_is_reported_before_any_clustering_work():
    X = np.random.default_rng(0).normal(size=(100, 3))
    X[42, 1] = np.nan
    with pytest.raises(InputDataError, match=r"1 non-finite value.*row 42"):
        KMeans(2).fit(X)


def test_predict_checks_features_and_fit_state():
    X, _, _ = make_blobs(n=200, d=3, k=2, seed=13)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        KMeans(2).predict(X)
    model = KMeans(2, random_state=0).fit(X)
    with pytest.raises(InputDataError, match="X has 2 features, but KMeans is expecting 3 features"):
        model.predict(X[:, :2])
    assert model.transform(X).shape == (200, 2)


def test_scheduler_address_from_dask_config(cluster_client):
    with dask.config.set({"scheduler-address": cluster_client.scheduler.address}):
        client = resolve_client(None)
        try:
            assert client.scheduler.address == cluster_client.scheduler.address
        finally:
            client.close()


def test_scheduler_that_does_not_answer_fails_fast():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SchedulerConnectionError, match="Could not connect"):
        connect(f"tcp://127.0.0.1:{port}", timeout="2s")


def test_weighted_lloyd_on_candidates_matches_numpy():
    from daskmeans.algorithms.init import weighted_lloyd

    rng = np.random.default_rng(14)
    points = rng.normal(size=(200, 3))
    weights = rng.random(200)
    start = points[:4].copy()
    centers = weighted_lloyd(points, weights, start, max_iter=1)
    labels = ((points[:, None] - start[None]) ** 2).sum(-1).argmin(1)
    for j in range(4):
        m = labels == j
        np.testing.assert_allclose(centers[j], (weights[m, None] * points[m]).sum(0) / weights[m].sum())


@pytest.mark.parametrize("address", ["notanaddress", "foo://host:1"])
def test_malformed_scheduler_address_is_refused_before_connecting(address):
    with pytest.raises(SchedulerConnectionError, match="Bad scheduler address"):
        connect(address)


def test_numpy_results_are_computed_on_the_estimators_own_client(cluster_client):
    """With a client that is not the default one, a fit on NumPy input keeps its blocks on that client's workers:
    ``labels_`` and ``predict`` compute there too (not on a default client or the local scheduler)."""
    from distributed import get_task_stream

    X, _, _ = make_blobs(n=3000, d=4, k=5, seed=11)
    model = KMeans(5, random_state=0, client=cluster_client, progress=False).fit(X)
    with get_task_stream(cluster_client) as stream:
        labels = model.labels_
        predicted = model.predict(X)
    assert isinstance(labels, np.ndarray) and isinstance(predicted, np.ndarray)
    np.testing.assert_array_equal(labels, predicted)
    np.testing.assert_array_equal(labels, KMeans(5, random_state=0).fit(X).labels_)
    assert len(stream.data) > 0, "the labels were computed on the estimator's cluster"
