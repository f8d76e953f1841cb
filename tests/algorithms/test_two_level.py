"""Two-level k-means seeding (``init="two-level"``, :mod:`daskmeans.algorithms.two_level`): the split of k among
the coarse clusters, blobs with known centers recovered on a real cluster of worker processes, the same centers
whatever the workers and the chunking, fits of every linear estimator, the driver's memory at k = 4096, bad input.
"""

from __future__ import annotations

import math
import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import make_blobs

from daskmeans import InputDataError, InvalidParameterError, KMeans, config
from daskmeans.algorithms.init import INIT_METHODS, initial_centers
from daskmeans.algorithms.result import RunContext
from daskmeans.algorithms.sample_kmeans import lloyd
from daskmeans.algorithms.two_level import (
    TWO_LEVEL_PASSES,
    default_coarse_clusters,
    fine_batches,
    split_centers,
    two_level_centers,
)
from daskmeans.passes.two_level import bottom_per_cluster, cluster_samples_graphs, sample_thresholds
from daskmeans.registry import make_estimator

MiB = 2**20


def equal_blobs(k=64, d=16, per_blob=300, spread=0.3, seed=3, dtype=np.float64):
    """``k`` well-separated blobs of exactly ``per_blob`` rows each, shuffled: data and true centers."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(k, d))
    labels = rng.permutation(np.arange(k * per_blob) % k)
    X = centers[labels] + spread * rng.standard_normal((k * per_blob, d))
    return X.astype(dtype), centers


def farthest_true_center(found, truth):
    """Largest distance from a true center to its nearest found center."""
    d2 = ((truth[:, None, :] - found[None, :, :]) ** 2).sum(-1)
    return float(np.sqrt(d2.min(axis=1)).max())


# -- the split of k -------------------------------------------------------------------------------------------
def hamilton(k, mass):
    """Largest remainder (Hamilton) in pure Python: floors of ``k * mass / total``, then one more to the
    largest remainders, lowest index first among equal remainders."""
    share = k / sum(mass)
    quotas = [m * share for m in mass]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(mass)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: k - sum(counts)]:
        counts[i] += 1
    return counts


@pytest.mark.parametrize("seed", range(20))
def test_split_is_largest_remainder_when_no_bound_binds(seed):
    rng = np.random.default_rng(seed)
    n_coarse = int(rng.integers(1, 60))
    rows = rng.integers(50, 5000, size=n_coarse)
    k = int(rng.integers(n_coarse, 20 * n_coarse))
    if (rows * k / rows.sum()).min() < 1:  # the minimum of one center would bind
        k = int(math.ceil(rows.sum() / rows.min()))
    counts = split_centers(k, rows.astype(float), rows)
    assert counts.sum() == k and counts.dtype == np.int64
    assert counts.tolist() == hamilton(k, rows.tolist())


def test_split_small_examples():
    assert split_centers(7, [50.0, 30.0, 20.0], [50, 30, 20]).tolist() == [4, 2, 1]
    assert split_centers(1, [5.0], [5]).tolist() == [1]
    # an empty coarse cluster gets nothing; a tiny one still gets one center
    assert split_centers(10, [0.0, 990.0, 10.0], [0, 990, 10]).tolist() == [0, 9, 1]
    # never more centers than rows: a heavy cluster of 2 rows (weights) gets 2, the rest goes elsewhere
    assert split_centers(10, [1000.0, 1.0], [2, 100]).tolist() == [2, 8]
    # fewer centers than clusters: no minimum of one
    assert split_centers(2, [10.0, 50.0, 40.0], [10, 50, 40]).tolist() == [0, 1, 1]


@pytest.mark.parametrize("seed", range(30))
def test_split_respects_its_bounds_and_follows_the_mass(seed):
    rng = np.random.default_rng(100 + seed)
    n_coarse = int(rng.integers(1, 40))
    rows = rng.integers(0, 30, size=n_coarse)
    rows[0] = max(rows[0], 1)
    mass = rows * rng.uniform(0.1, 10.0, size=n_coarse)  # weighted: mass and rows disagree
    k = int(rng.integers(1, rows.sum() + 1))
    counts = split_centers(k, mass, rows)
    assert counts.sum() == k
    assert np.all(counts <= rows) and np.all(counts[rows == 0] == 0)
    if k >= (rows > 0).sum():
        assert np.all(counts[rows > 0] >= 1)
    # where no bound binds, a cluster with more mass never gets fewer centers
    free = (counts > 1) & (counts < rows)
    heavier = mass[:, None] > mass[None, :]
    assert not np.any(heavier[np.ix_(free, free)] & (counts[free][:, None] < counts[free][None, :]))


def test_split_refuses_fewer_rows_than_centers():
    with pytest.raises(InputDataError, match=r"only 5 row\(s\) \(with positive weight\) but n_clusters=6"):
        split_centers(6, [3.0, 2.0], [3, 2])


def test_bottom_per_cluster_keeps_each_clusters_smallest_keys():
    labels = np.array([1, 0, 1, 1, 0, 2, 1])
    keys = np.array([0.5, 0.2, 0.1, 0.9, np.inf, 0.3, 0.1])
    index = np.arange(7) + 100
    kept = bottom_per_cluster(labels, keys, index, np.array([5, 2, 0]))
    # cluster 0: row 1 (row 4 has weight 0); cluster 1: the two smallest keys, tie by index; cluster 2: none
    assert kept.tolist() == [1, 2, 6]


def test_sample_thresholds():
    caps, rows = np.array([0, 100, 50, 400]), np.array([10, 100, 10_000, 40_000])
    thresholds = sample_thresholds(caps, rows, rows.astype(float), weighted=False)
    assert thresholds[0] == -np.inf and thresholds[1] == np.inf, "none of cluster 0, all of cluster 1"
    np.testing.assert_allclose(thresholds[2:], [(50 + 4 * 50**0.5 + 16) / 10_000, (400 + 80 + 16) / 40_000])
    weighted = sample_thresholds(caps, rows, np.array([1.0, 1.0, 20_000.0, 10.0]), weighted=True)
    np.testing.assert_allclose(weighted[2:], [(50 + 4 * 50**0.5 + 16) / 20_000, (400 + 80 + 16) / 10])


def test_fine_samples_hold_caps_rows_of_their_cluster_and_few_candidates(tmp_path):
    X, _, _ = make_blobs(n=20_000, d=3, k=4, seed=6)
    coarse = X[:4]
    labels = np.argmin(((X[:, None, :] - coarse[None]) ** 2).sum(-1), axis=1)
    rows = np.bincount(labels, minlength=4)
    caps = np.minimum(rows, [300, 0, 5000, 40])
    thresholds = sample_thresholds(caps, rows, rows.astype(float), weighted=False)
    labelled = [(labels[start : start + 3000],) for start in range(0, len(X), 3000)]
    graphs = cluster_samples_graphs(
        da.from_array(X, chunks=3000), labelled, caps, thresholds, np.array([0, -1, 1, 1]), 77
    )
    with dask.config.set(scheduler="threads"):
        (first, second) = dask.compute(*graphs)
    for sample, clusters in ((first, [0]), (second, [2, 3])):
        got, _, index, sample_rows, _ = sample
        np.testing.assert_array_equal(sample_rows, X[index])
        np.testing.assert_array_equal(labels[index], got)
        for c in clusters:
            assert (got == c).sum() == caps[c]


def test_fine_batches_bound_the_merge_tasks():
    caps = np.array([3, 0, 5, 7, 1])
    assert fine_batches(caps, 10).tolist() == [0, -1, 1, 2, 3]
    batch_of = fine_batches(np.ones(5000, dtype=np.int64), 10**5)  # 12,500 groups of blocks: one batch
    assert set(batch_of.tolist()) == {0}


def test_lloyd_by_the_pass_kernels_matches_numpy():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(3000, 5))
    start = points[rng.choice(3000, 40, replace=False)]
    reference = start.copy()
    for _ in range(3):
        labels = np.argmin(((points[:, None, :] - reference[None]) ** 2).sum(-1), axis=1)
        counts = np.bincount(labels, minlength=40)
        sums = np.zeros_like(reference)
        np.add.at(sums, labels, points)
        reference[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    np.testing.assert_allclose(lloyd(points, start, max_iter=3), reference, rtol=1e-12, atol=1e-12)
    assert lloyd(points.astype(np.float32), start, max_iter=0).dtype == np.float64


def test_two_level_is_one_of_the_init_methods():
    assert "two-level" in INIT_METHODS
    assert default_coarse_clusters(1) == 1 and default_coarse_clusters(4096) == 64
    assert default_coarse_clusters(65536) == 256 and default_coarse_clusters(2) == 1


# -- on a cluster ---------------------------------------------------------------------------------------------
def test_recovers_64_blobs_in_16_dimensions(cluster_client):
    X, truth = equal_blobs()
    calls = []
    centers, passes = two_level_centers(
        da.from_array(X, chunks=(2500, 16)),
        64,
        7,
        context=RunContext(client=cluster_client),
        on_progress=lambda done, total, note=None: calls.append((done, total)),
    )
    assert centers.shape == (64, 16) and centers.dtype == X.dtype
    # a blob's rows lie about 0.3 * sqrt(16) = 1.2 from its center, the blobs tens apart; a sample mean of a few
    # hundred rows is within about 0.1
    assert farthest_true_center(centers, truth) < 0.25, "every blob has a center near its true center"
    assert passes == TWO_LEVEL_PASSES == 3
    assert calls[0] == (0, 3) and calls[-1] == (3, 3)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_every_blob_gets_one_center_whatever_the_seed():
    """A coarse boundary may cut a blob: the fine k-means on each side then sees a fragment of it, and the blob's
    center may be pulled off (by up to about 1.5 in 40 tries, within the blob, which is 14 from the next one); the
    iterations of the fit that follows move it back. Every blob still gets exactly one center."""
    X, truth = equal_blobs(seed=4)
    with dask.config.set(scheduler="threads"):
        for seed in range(10):
            centers, _ = two_level_centers(da.from_array(X, chunks=(2500, 16)), 64, seed)
            distances = np.sqrt(((truth[:, None, :] - centers[None, :, :]) ** 2).sum(-1))
            assert len(np.unique(distances.argmin(axis=0))) == 64, "one center per blob"
            assert distances.min(axis=1).max() < 2.0


@pytest.mark.slow
def test_same_centers_on_one_or_two_workers_and_any_chunking(cluster_client, tmp_path):
    X, _, _ = make_blobs(n=12000, d=6, k=40, spread=2.0, seed=9, dtype=np.float32)
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=X.shape, chunks=(1000, 6), dtype=X.dtype)[:] = X
    on_cluster = RunContext(client=cluster_client)
    reference, _ = two_level_centers(da.from_array(X, chunks=(5000, 6)), 40, 11, context=on_cluster)
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as single,
        Client(single, set_as_default=False) as one_worker,
    ):
        single_worker, _ = two_level_centers(
            da.from_array(X, chunks=(777, 6)), 40, 11, context=RunContext(client=one_worker)
        )
    from_store, _ = two_level_centers(da.from_zarr(store), 40, 11, context=on_cluster)
    with dask.config.set(scheduler="threads"):
        threads, _ = two_level_centers(da.from_array(X, chunks=(12000, 6)), 40, 11)
    for other in (single_worker, from_store, threads):
        np.testing.assert_array_equal(other, reference)
    another_seed, _ = two_level_centers(da.from_array(X, chunks=(5000, 6)), 40, 12, context=on_cluster)
    assert not np.array_equal(another_seed, reference)


def test_kmeans_fit_from_two_level_is_as_good_as_from_kmeans_parallel(cluster_client):
    X, truth = equal_blobs(k=64, d=16, per_blob=150, spread=1.0, seed=5, dtype=np.float32)
    params = dict(n_clusters=64, random_state=2, max_iter=30, chunk_rows=3000, client=cluster_client)
    two_level = KMeans(init="two-level", **params).fit(X)
    parallel = KMeans(init="k-means||", **params).fit(X)
    assert two_level.inertia_ <= 1.03 * parallel.inertia_
    assert farthest_true_center(two_level.cluster_centers_, truth) < 0.5
    assert two_level.history_[0]["passes"] >= TWO_LEVEL_PASSES


@pytest.mark.parametrize("name", ["minibatch", "nmbatch", "vrkm", "vc-gmm"])
def test_every_linear_estimator_seeds_with_two_level(name):
    X, truth = equal_blobs(k=9, d=3, per_blob=400, spread=0.2, seed=1)
    length = {"max_epochs": 3} if name == "vrkm" else {"max_iter": 5}
    with dask.config.set(scheduler="threads"):
        model = make_estimator(name, n_clusters=9, init="two-level", random_state=0, **length).fit(X)
    found = getattr(model, "cluster_centers_", None)
    found = model.means_ if found is None else found
    assert farthest_true_center(found, truth) < 0.3


def test_weights_are_respected():
    """Rows of weight 0 are never sampled: a blob of weight 0 gets no center."""
    X, truth = equal_blobs(k=5, d=2, per_blob=500, spread=0.1, seed=4)
    in_last_blob = np.argmin(((X[:, None, :] - truth[None]) ** 2).sum(-1), axis=1) == 4
    weights = np.where(in_last_blob, 0.0, 1.0)
    with dask.config.set(scheduler="threads"):
        weighted = RunContext(weights=da.from_array(weights, chunks=700))
        centers, _ = two_level_centers(da.from_array(X, chunks=700), 4, 3, context=weighted)
        assert farthest_true_center(centers, truth[:4]) < 0.1
        assert np.sqrt(((centers - truth[4]) ** 2).sum(-1)).min() > 1.0
        fitted = KMeans(4, init="two-level", random_state=0).fit(X, sample_weight=weights)
    assert farthest_true_center(fitted.cluster_centers_, truth[:4]) < 0.1


# -- memory on the driver -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_driver_memory_at_k_4096_is_far_below_k_squared(cluster_client, tmp_path):
    """k = 4096 in 4 dimensions: the driver holds the centers, the coarse sample (256 x 64 rows) and the graphs.

    Stated bound (the docstring of ``two_level_centers``): 16 MiB (the coarse sample and its k-means, the graphs;
    the scheduler of the LocalCluster runs in this process and is traced too) plus 64 bytes per center value (a
    few copies of the k x d centers, the fine results as they arrive): 17 MiB, where one k x k float64 matrix
    alone would be 128 MiB. Measured: about 6 MiB.
    """
    k, d, n = 4096, 4, 4096 * 24
    rng = np.random.default_rng(0)
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=(n, d), chunks=(8192, d), dtype=np.float32)[:] = rng.standard_normal((n, d)).astype(
        np.float32
    )
    array = da.from_zarr(store)
    two_level_centers(
        da.from_array(np.ones((100, d)) * np.arange(100)[:, None], chunks=50),
        10,
        0,
        context=RunContext(client=cluster_client),
    )  # warm: the first pass imports and connects
    tracemalloc.start()
    try:
        centers, _ = two_level_centers(array, k, 1, context=RunContext(client=cluster_client))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert centers.shape == (k, d) and len(np.unique(centers, axis=0)) == k
    bound = 16 * MiB + 64 * k * d
    assert peak <= bound, f"peak {peak / MiB:.1f} MiB > bound {bound / MiB:.1f} MiB"
    assert bound < k * k * 8 / 7, "an O(k^2) driver would fail the bound"


# -- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options, match",
    [
        (dict(n_coarse=0), "n_coarse must be None"),
        (dict(n_coarse=11), "n_coarse must be None"),
        (dict(n_coarse=2.0), "n_coarse must be None"),
        (dict(points_per_center=0), "points_per_center must be"),
        (dict(points_per_center=True), "points_per_center must be"),
        (dict(n_iter=-1), "n_iter must be"),
    ],
)
def test_options_are_validated(options, match):
    with pytest.raises(InvalidParameterError, match=match):
        two_level_centers(da.from_array(np.zeros((20, 2))), 10, 0, **options)


@pytest.mark.parametrize(
    "setting, message",
    [
        (dict(TWO_LEVEL_FINE_LLOYD_ITER=-1), r"TWO_LEVEL_FINE_LLOYD_ITER must be an integer >= 0"),
        (dict(TWO_LEVEL_FINE_TRIALS=0), r"TWO_LEVEL_FINE_TRIALS must be an integer >= 1"),
    ],
)
def test_a_fine_setting_out_of_range_is_a_clear_error(setting, message):
    with config.set(**setting):
        with pytest.raises(InvalidParameterError, match=message):
            two_level_centers(da.from_array(np.zeros((20, 2))), 10, 0)


def test_fewer_distinct_rows_than_clusters_is_a_clear_error():
    X = np.repeat(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]), 40, axis=0)
    with dask.config.set(scheduler="threads"):
        with pytest.raises(InputDataError, match=r"The data has only 3 distinct row\(s\).*n_clusters=4"):
            KMeans(4, init="two-level", random_state=0).fit(X)
        # more rows than the coarse sample holds: the fine level finds too few, and k-means|| names the number
        many = np.repeat(np.random.default_rng(0).normal(size=(30, 3)), 200, axis=0)
        with pytest.raises(InputDataError, match=r"The data has only 30 distinct row\(s\).*n_clusters=31"):
            initial_centers(da.from_array(many, chunks=1000), 31, "two-level", 0)
        # exactly k distinct rows: every one is a center
        centers, _ = initial_centers(da.from_array(many, chunks=1000), 30, "two-level", 0)
    assert len(np.unique(centers, axis=0)) == 30


def test_one_cluster():
    X, _, _ = make_blobs(n=500, d=3, k=1, seed=2)
    with dask.config.set(scheduler="threads"):
        centers, _ = two_level_centers(da.from_array(X, chunks=100), 1, 0, points_per_center=1000, n_iter=5)
    np.testing.assert_allclose(centers[0], X.mean(axis=0), rtol=1e-9, atol=1e-9)
